"""The ``uki`` builder: a Unified Kernel Image from a rootfs's kernel, made by the tree's ukify.

A UKI is one PE binary that UEFI (or shim) starts: systemd-stub with the kernel (``.linux``), its
initrd (``.initrd``), the command line (``.cmdline``), os-release (``.osrel``) and the kernel
release (``.uname``) as sections. Signed as a whole (the ``signed-uki`` builder), it lets Secure
Boot cover the initrd and the command line, which GRUB leaves unchecked.

Everything comes from the rootfs tar, so every version is a locked package's and in the rootfs
key: the kernel (``/boot/vmlinuz-V``) and initrd (``/boot/initrd.img-V``), ``/usr/lib/os-release``
(ukify would otherwise read the build host's), the stub (``/usr/lib/systemd/boot/efi/
linux{x64,aa64}.efi.stub``, package systemd-boot-efi) and ukify itself (``/usr/bin/ukify``,
systemd-ukify, with python3-pefile), run by the tree's own Python through its dynamic loader
(:mod:`nvkr.builders.treetools`). Two runs give the same bytes: ukify stamps no time (the PE
header's TimeDateStamp is the stub's).

The command line names the root file system by UUID. A node image that boots the UKI derives
every disk identifier from this action's key (``NodeImageParams.diskSeed``), so the UUID here is
the one its file system gets: :func:`nvkr.disk.layout.disk_layout` of the key, as GRUB's
configuration of the same image uses.
"""

from __future__ import annotations

import re
import tarfile
from pathlib import Path, PurePosixPath

from nvkr.builders import treetools
from nvkr.builders.api import (
    ActionContext,
    ActionSpec,
    Builder,
    PlanRefs,
    Problem,
    ReleaseKind,
    a_kind,
    builder_of,
)
from nvkr.builders.node_image.staging import primary_output
from nvkr.builders.uki.artifact import UkiArtifact
from nvkr.disk.bootfiles import grub_arg, kernel_cmdline
from nvkr.disk.layout import disk_layout
from nvkr.errors import BuildError, DiskError
from nvkr.jsondoc import JsonObject, JsonValue
from nvkr.recipe.matrix import Variant
from nvkr.recipe.sources import AptSource
from nvkr.run import pinned_env, run
from nvkr.secureboot.anchors import DEBIAN, MICROSOFT_UEFI, anchors
from nvkr.secureboot.authenticode import authenticode_digest, verify_pe

MEDIA_TYPE = "application/vnd.nvkr.uki.v1+efi"
#: ukify's name for the target's EFI architecture, and the stub's suffix, by Debian arch
EFI_ARCH = {"amd64": "x64", "arm64": "aa64"}
_KERNEL = re.compile(r"^boot/vmlinuz-(.+)$")
_PACKAGES_HINT = (
    "the UKI is made from the rootfs's own files: add systemd-ukify (with python3-pefile) and "
    "systemd-boot-efi to its packages"
)


def uki_seed(action_key: str) -> str:
    """The hex the disk identifiers of an image booting this UKI derive from (its key's)."""
    return action_key.split(":", 1)[1]


class UkiBuilder(Builder[UkiArtifact]):
    name = "uki"
    version = "1"
    per_arch = True
    artifact_model = UkiArtifact
    release_kind = ReleaseKind.INTERNAL

    def check(self, artifact_name: str, artifact: UkiArtifact, variant: Variant) -> list[Problem]:
        problems: list[Problem] = []
        builder = builder_of(variant, artifact.rootfs)
        if builder is not None and builder != "rootfs":
            problems.append(
                (
                    ("artifacts", artifact_name, "rootfs"),
                    f"{artifact.rootfs!r} is {a_kind(builder)} artifact, not a rootfs",
                    None,
                )
            )
        missing = _missing_packages(artifact, variant)
        if missing:
            problems.append(
                (
                    ("artifacts", artifact_name, "rootfs"),
                    f"rootfs {artifact.rootfs!r} is made without {', '.join(missing)}: the UKI "
                    "and the Secure Boot chain are made from its own files",
                    "add them to its apt source's packages (recipes/secureboot/debian-13.yaml "
                    "pins the versions)",
                )
            )
        for n, arg in enumerate(artifact.kernelArgs):
            try:
                grub_arg(arg)  # the image's grub.cfg (BIOS) carries the same line
            except DiskError as e:
                problems.append((("artifacts", artifact_name, "kernelArgs", n), e.message, None))
        return problems

    def plan(
        self, artifact_name: str, artifact: UkiArtifact, variant: Variant, refs: PlanRefs
    ) -> ActionSpec:
        rootfs = refs.artifact(artifact.rootfs)
        return ActionSpec(
            params={
                "arch": rootfs.params.get("arch"),
                "rootfs": rootfs.key,
                "kernelArgs": list(artifact.kernelArgs),
            },
            deps=(rootfs.key,),
        )

    def run(self, ctx: ActionContext) -> None:
        params = ctx.action.params
        arch = str(params["arch"])
        if arch not in EFI_ARCH:
            raise BuildError(f"no UKI for a {arch} tree (amd64 and arm64 only)")
        kernel_args = [str(a) for a in params["kernelArgs"]]  # type: ignore[union-attr]
        layout = disk_layout(arch, uki_seed(ctx.action.key))  # type: ignore[arg-type]
        cmdline = kernel_cmdline(layout, kernel_args)
        rootfs_tar = primary_output(ctx, ctx.deps[str(params["rootfs"])], "rootfs")
        tools = ctx.workdir / "tree"
        with tarfile.open(rootfs_tar) as tf:
            files = _find(tf, arch)
            python_lib = PurePosixPath(files["python"]).name  # python3.13 -> usr/lib/python3.13
            wanted = {files[k] for k in ("kernel", "initrd", "stub", "ukify", "python", "osrel")}

            def want(name: str) -> bool:
                return (
                    name in wanted
                    or name.startswith((f"usr/lib/{python_lib}/", "usr/lib/python3/dist-packages/"))
                    or treetools.is_library(name, arch)
                )

            treetools.extract(tf, tools, want)
            chain = check_chain(tf, arch, tools / files["kernel"])
        argv = treetools.loader_argv(tools, arch, files["python"], "the uki builder")
        out = ctx.workdir / "uki.efi"
        env = pinned_env(
            {
                "PYTHONHOME": str(tools / "usr"),
                "PYTHONPATH": str(tools / "usr/lib/python3/dist-packages"),
                "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONHASHSEED": "0",
                "SOURCE_DATE_EPOCH": str(ctx.action.epoch),
            }
        )
        run(
            [*argv, tools / files["ukify"], "build",
             "--linux", tools / files["kernel"], "--initrd", tools / files["initrd"],
             "--cmdline", cmdline, "--os-release", f"@{tools / files['osrel']}",
             "--uname", files["version"], "--stub", tools / files["stub"],
             "--efi-arch", EFI_ARCH[arch], "--output", out],
            env=env, log_file=ctx.log_file,
        )  # fmt: skip
        if not out.is_file():
            raise BuildError("ukify wrote no UKI", hint=f"see the action's log {ctx.log_file}")
        authenticode = "sha256:" + authenticode_digest(out.read_bytes()).hex()
        ctx.add_output(out, name=f"uki-{arch}.efi", media_type=MEDIA_TYPE)
        ctx.metadata.update(
            {
                "kernel": files["version"],
                "cmdline": cmdline,
                "fsUuid": layout.fs_uuid,
                "authenticode": authenticode,
                "chain": chain,
            }
        )


#: Per arch: the tree paths of shim and MokManager (packages shim-signed, shim-helpers-ARCH-signed)
SHIM = {
    "amd64": ("usr/lib/shim/shimx64.efi.signed", "usr/lib/shim/mmx64.efi.signed"),
    "arm64": ("usr/lib/shim/shimaa64.efi.signed", "usr/lib/shim/mmaa64.efi.signed"),
}


def check_chain(tf: tarfile.TarFile, arch: str, kernel: Path) -> JsonObject:
    """The signed parts of the chain the UKI joins, checked before anything is signed: the
    kernel by Debian's Secure Boot CA (the UKI's ``.linux``; shim's vendor certificate), shim by
    Microsoft's UEFI CA (2011 or 2023: the firmware's db), MokManager by Debian's CA. Each one's
    Authenticode digest and the anchors it verified against (for the image's PCR 4).

    Raises:
        BuildError: shim or MokManager is not in the tree (names the packages);
        IntegrityError: a signature does not verify against its pinned anchor.
    """
    found: dict[str, JsonValue] = {}
    parts: list[tuple[str, bytes, tuple[str, ...], str]] = [
        ("kernel", kernel.read_bytes(), DEBIAN, f"/boot/{kernel.name}")
    ]
    for name, rel in zip(("shim", "mokManager"), SHIM[arch], strict=True):
        member = next((m for m in tf.getmembers() if treetools.member_name(m) == rel), None)
        f = tf.extractfile(member) if member is not None and member.isfile() else None
        if f is None:
            raise BuildError(
                f"the rootfs has no /{rel} ({name}), which boots the UKI under Secure Boot",
                hint=f"add shim-signed (and with it shim-helpers-{arch}-signed) to its packages",
            )
        parts.append((name, f.read(), MICROSOFT_UEFI if name == "shim" else DEBIAN, f"/{rel}"))
    for name, data, trusted, path in parts:
        checked = verify_pe(data, anchors(trusted), f"{path} ({name})")
        found[name] = {
            "path": path,
            "authenticode": "sha256:" + authenticode_digest(data).hex(),
            "anchors": sorted({a.anchor_subject for a in checked.anchored}),
        }
    return found


#: the packages a tree must name for its UKI and chain (dependencies bring the rest: shim's
#: helpers with MokManager, python3-pefile)
CHAIN_PACKAGES = ("shim-signed", "systemd-boot-efi", "systemd-ukify")


def _missing_packages(artifact: UkiArtifact, variant: Variant) -> list[str]:
    """The :data:`CHAIN_PACKAGES` the rootfs's apt source does not name (none when the recipe
    does not say: its references are checked elsewhere)."""
    rootfs = variant.recipe.artifacts.get(artifact.rootfs)
    source = variant.recipe.sources.get(str(getattr(rootfs, "packages", "")))
    if not isinstance(source, AptSource):
        return []
    return [p for p in CHAIN_PACKAGES if p not in source.packages]


def _find(tf: tarfile.TarFile, arch: str) -> dict[str, str]:
    """The tree paths ukify needs: the one kernel with its initrd, the stub, ukify, the Python
    that runs it (``usr/bin/python3``'s target) and os-release; ``version`` the kernel's.

    Raises:
        BuildError: one is missing (names it and the packages that bring it), or several kernels.
    """
    names = {treetools.member_name(m): m for m in tf.getmembers()}
    kernels = sorted(n for n, m in names.items() if _KERNEL.match(n) and m.isfile())
    if len(kernels) != 1:
        raise BuildError(
            f"the rootfs holds {len(kernels)} kernels ({', '.join(kernels) or 'none'}): a UKI "
            "holds exactly one",
            hint="the rootfs must hold one kernel package (e.g. linux-image-cloud-amd64)",
        )
    m = _KERNEL.match(kernels[0])
    assert m is not None
    version = m.group(1)
    python = names.get("usr/bin/python3")
    target = (
        str(PurePosixPath("usr/bin") / python.linkname)
        if python is not None and python.issym()
        else "usr/bin/python3"
    )
    found = {
        "kernel": kernels[0],
        "initrd": f"boot/initrd.img-{version}",
        "stub": f"usr/lib/systemd/boot/efi/linux{EFI_ARCH[arch]}.efi.stub",
        "ukify": "usr/bin/ukify",
        "python": target,
        "osrel": "usr/lib/os-release",
    }
    for what, path in found.items():
        member = names.get(path)
        if member is None or not member.isfile():
            raise BuildError(f"the rootfs has no /{path} (the UKI's {what})", hint=_PACKAGES_HINT)
    return {**found, "version": version}
