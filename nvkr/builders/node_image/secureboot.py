"""A node image's Secure Boot chain (``secureBoot`` in the recipe): what it checks, plans and lays
out besides the plain image.

- **modules** (a ``signed-modules`` artifact of the image's rootfs): its tar is laid over the
  unpacked tree, the owner-signed modules over DKMS's unsigned ones.
- **uki** (a ``signed-uki`` artifact of a ``uki`` of the image's rootfs): the ESP holds, on the
  removable path (UEFI 2.10, 3.5.1.1), Debian's Microsoft-signed shim as ``\\EFI\\BOOT\\BOOTX64.EFI``
  (``BOOTAA64.EFI``), its MokManager beside it (shim starts it when a MOK request is pending or
  a second stage fails), and the signed UKI as ``grubx64.efi`` (``grubaa64.efi``), the name shim
  starts. No ``fbx64.efi``: with it, shim runs the fallback, which finds no boot entry to restore
  and resets the machine. shim and MokManager come from the tree (``/usr/lib/shim/*.efi.signed``:
  packages shim-signed and shim-helpers-ARCH-signed), so their versions are the locked ones. The
  UKI's command line names the root file system by the UUID derived from the UKI action's key:
  the image derives every disk identifier from that key too (``diskSeed``), and GRUB's
  configuration (BIOS boot, amd64) carries the same command line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nvkr.builders.api import ActionContext, PlanRefs, Problem, a_kind, builder_of
from nvkr.builders.node_image.artifact import NodeImageArtifact
from nvkr.builders.node_image.staging import primary_output
from nvkr.builders.uki.builder import uki_seed
from nvkr.errors import DiskError
from nvkr.recipe.matrix import Variant
from nvkr.run import run

#: Per arch: the ESP's removable-path files -> where the tree's packages put them
_SHIM = {
    "amd64": {
        "EFI/BOOT/BOOTX64.EFI": "usr/lib/shim/shimx64.efi.signed",
        "EFI/BOOT/MMX64.EFI": "usr/lib/shim/mmx64.efi.signed",
    },
    "arm64": {
        "EFI/BOOT/BOOTAA64.EFI": "usr/lib/shim/shimaa64.efi.signed",
        "EFI/BOOT/MMAA64.EFI": "usr/lib/shim/mmaa64.efi.signed",
    },
}
#: the second stage shim starts from the removable path
SECOND_STAGE = {"amd64": "EFI/BOOT/GRUBX64.EFI", "arm64": "EFI/BOOT/GRUBAA64.EFI"}


def problems(artifact_name: str, artifact: NodeImageArtifact, variant: Variant) -> list[Problem]:
    """``secureBoot.modules`` is a signed-modules artifact of the image's own rootfs,
    ``secureBoot.uki`` a signed-uki of a uki of it whose kernel arguments are the image's, and
    the image is assembled natively."""
    sb = artifact.secureBoot
    if sb is None:
        return []
    found: list[Problem] = []
    recipe = variant.recipe.artifacts
    for field, wanted in (("modules", "signed-modules"), ("uki", "signed-uki")):
        name = getattr(sb, field)
        if name is None:
            continue
        where = ("artifacts", artifact_name, "secureBoot", field)
        builder = builder_of(variant, name)
        if builder is not None and builder != wanted:
            found.append((where, f"{name!r} is {a_kind(builder)} artifact, not a {wanted}", None))
            continue
        signed = recipe.get(name)
        of = getattr(signed, "rootfs", None)  # signed-modules name it; a signed-uki its uki does
        uki = recipe.get(getattr(signed, "uki", "") or "")
        if field == "uki" and uki is not None:
            of = getattr(uki, "rootfs", None)
            args = list(getattr(uki, "kernelArgs", []))
            if artifact.kernelArgs and artifact.kernelArgs != args:
                found.append(
                    (
                        ("artifacts", artifact_name, "kernelArgs"),
                        f"the image's kernelArgs {artifact.kernelArgs} are not those of the UKI "
                        f"{getattr(signed, 'uki', '')!r} it boots ({args})",
                        "write the kernel arguments in the uki artifact only",
                    )
                )
        if of is not None and of != artifact.rootfs:
            found.append(
                (
                    where,
                    f"{name!r} is made from rootfs {of!r}, the image from {artifact.rootfs!r}",
                    f"make it from rootfs {artifact.rootfs!r}",
                )
            )
    if artifact.backend == "diskimage-builder":
        found.append(
            (
                ("artifacts", artifact_name, "secureBoot"),
                "Secure Boot needs the native backend: diskimage-builder installs its own "
                "boot loader",
                'remove backend: "diskimage-builder"',
            )
        )
    return found


@dataclass(frozen=True)
class ChainParams:
    """What the chain sets in the image's params: ``disk_seed`` (the UKI action's key hex) and
    the UKI's ``kernel_args``; both None without ``secureBoot.uki``."""

    disk_seed: str | None = None
    kernel_args: list[str] | None = None


def plan(
    artifact: NodeImageArtifact, variant: Variant, refs: PlanRefs, deps: dict[str, str]
) -> ChainParams:
    """Add the signing actions to ``deps``; what the chain sets in the params."""
    sb = artifact.secureBoot
    if sb is None:
        return ChainParams()
    if sb.modules is not None:
        deps["signedModules"] = refs.artifact(sb.modules).key
    if sb.uki is None:
        return ChainParams()
    deps["signedUki"] = refs.artifact(sb.uki).key
    signed = variant.recipe.artifacts[sb.uki]  # a signed-uki: check() ran
    uki = refs.artifact(str(getattr(signed, "uki")))  # noqa: B009
    args = uki.params.get("kernelArgs")
    return ChainParams(uki_seed(uki.key), [str(a) for a in args] if isinstance(args, list) else [])


def overlay_modules(ctx: ActionContext, deps: dict[str, str], tree: Path) -> None:
    """The owner-signed modules over the unsigned ones (``secureBoot.modules``)."""
    if "signedModules" not in deps:
        return
    signed = primary_output(ctx, ctx.deps[deps["signedModules"]], "signed modules")
    run(
        ["tar", "--numeric-owner", "--overwrite", "-xpf", signed, "-C", tree],
        log_file=ctx.log_file,
    )


def esp_files(ctx: ActionContext, deps: dict[str, str], tree: Path, arch: str) -> dict[str, Path]:
    """The ESP's Secure Boot chain (``secureBoot.uki``), or {} for GRUB's own.

    Raises:
        DiskError: the tree lacks shim or MokManager (names the packages).
    """
    if "signedUki" not in deps:
        return {}
    files: dict[str, Path] = {}
    for dest, rel in _SHIM[arch].items():
        path = tree / rel
        if not path.is_file() or path.is_symlink():
            raise DiskError(
                f"the rootfs has no /{rel} for the ESP's {dest}",
                hint=f"add shim-signed and shim-helpers-{arch}-signed to the rootfs packages",
            )
        files[dest] = path
    files[SECOND_STAGE[arch]] = primary_output(ctx, ctx.deps[deps["signedUki"]], "signed UKI")
    return files
