"""The ``rootfs`` builder: a Debian root filesystem made by mmdebstrap from exactly the locked .debs.

Inputs: an ``apt`` source (:mod:`nvkr.fetch.apt`), whose manifest lists every .deb with its
sha256; the executor has put every one of them in the store before :meth:`RootfsBuilder.run`.
The builder makes a flat apt repository in its work dir from those files (hard links to the
store; for a foreign arch, copies with the data member decompressed natively, see
:mod:`nvkr.builders.rootfs.debs`; a ``Packages`` index built from each .deb's control fields),
and runs::

    SOURCE_DATE_EPOCH=E mmdebstrap --mode=root|unshare --variant=minbase --arch=ARCH \\
        --include=<recipe packages> --essential-hook=... --customize-hook=... \\
        SUITE rootfs.tar "deb [trusted=yes] copy:REPO ./"

The repository holds nothing but the locked set, so apt has exactly one candidate per package:
no version is resolved at build time and no network is used. A customize hook writes the image's
own apt sources (the recipe's repositories, each with its keyring copied to
``/etc/apt/keyrings/``), ``/etc/hosts`` and, when the recipe names one, ``/etc/hostname`` (else
it removes the build host's copy), so nothing of the build host or work dir stays in the tree.
The hooks in ``builders/rootfs/`` defer ``update-initramfs`` to the end, so the initramfs is
built once instead of twice (minutes saved under qemu-user), and record each postinst's
``py3compile`` call to run them all in one Python process at the end (a hundred interpreter
start-ups fewer, the same ``.pyc`` files) and the standard library's byte-compilation by
python3.X-minimal's and python3.X's postinsts (run once the tree's python is back, in a foreign
tree the lockfile's native one); in a foreign tree on an x86-64 host they bind the host's
coreutils, sed, grep, findutils, tar, dash, zstd, kmod's ``modinfo`` and (when the
versions match) perl over the tree's own while it is built (:mod:`nvkr.builders.rootfs.native`:
the arm64 tree of the default recipe in about 100 s instead of 190 s). When the locked packages include
``dkms`` (NVIDIA's driver from Debian: nvidia-kernel-dkms), the package scripts build its modules
for the tree's own kernels; the hooks in ``builders/rootfs-dkms/`` keep dkms from generating a
signing key (a private key in the image, and other bytes on every build), check that each
module is installed for each kernel with a matching vermagic and symbols depmod resolves against
the kernel's exports (its headers' Module.symvers), and remove the build trees and logs. The output is mmdebstrap's tar
(uncompressed, reproducible: two runs give the same bytes).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nvkr.builders.api import (
    ActionContext,
    ActionSpec,
    Builder,
    PlanRefs,
    Problem,
    ReleaseKind,
    a_kind,
    source_kind_of,
)
from nvkr.builders.assets import asset_dir
from nvkr.builders.rootfs import native
from nvkr.builders.rootfs.artifact import RootfsArtifact
from nvkr.builders.rootfs.debs import decompress_data_member
from nvkr.builders.rootfs.params import AptRepositoryParams, RootfsParams
from nvkr.canonical import sha256_bytes
from nvkr.errors import IntegrityError, ToolError
from nvkr.fetch.entries import AptEntry
from nvkr.hosttools import package_version
from nvkr.monitor.tools import mmdebstrap_lines
from nvkr.nativedebs import LOCK_ARCH, PYTHON_MINIMAL, python_package, wanted_debs
from nvkr.recipe.matrix import Variant
from nvkr.recipe.sources import AptSource
from nvkr.repro import tar_bytes
from nvkr.run import CAN_RUN_HINT, can_run, host_arch, pinned_env, run

if TYPE_CHECKING:
    from nvkr.action import Action

ROOTFS_MEDIA_TYPE = "application/vnd.nvkr.rootfs.v1.tar"
#: mmdebstrap hooks (builders/rootfs/): the initramfs is built once, at the end.
ASSETS = asset_dir("rootfs")
#: The hooks of trees with dkms (builders/rootfs-dkms/): modules built unsigned, checked against
#: their kernels, build logs removed. A key input of those trees only.
DKMS_ASSETS = asset_dir("rootfs-dkms")
PACKAGES_MEDIA_TYPE = "application/vnd.nvkr.rootfs.packages.v1+json"


def _locked_deb(ctx: ActionContext, pkg: dict[str, Any]) -> Path:
    """The store's copy of locked .deb ``pkg`` (a manifest's item), hashed again here.

    Raises:
        IntegrityError: it is not in the store, or its bytes are not the lockfile's.
    """
    from nvkr.fetch.apt import file_sha256  # the apt fetcher: at run time

    blob = ctx.store.blob_path(pkg["sha256"])
    if not blob.is_file():
        raise IntegrityError(
            f"package {pkg['name']} {pkg['version']} ({pkg['sha256']}) is not in the store"
        )
    actual = file_sha256(blob)
    if actual != pkg["sha256"]:
        raise IntegrityError(
            f"package {pkg['name']} {pkg['version']} ({pkg['arch']}): the store's copy "
            f"{blob} hashes to {actual}, the lockfile pins {pkg['sha256']}",
            hint="delete that blob from the store; the next build fetches it again",
        )
    return blob


def check_can_run(arch: str) -> None:
    """A foreign-architecture tree runs its maintainer scripts through qemu-user (binfmt_misc).

    Raises:
        ToolError: the host cannot run ``arch`` binaries (names what to install or enable).
    """
    ok, said = can_run(arch)
    if not ok:
        raise ToolError(
            f"the rootfs builder needs to run {arch} binaries on this {platform.machine()} host "
            f"and cannot (arch-test {arch}: {said})",
            hint=CAN_RUN_HINT,
        )


#: The CPU qemu-user emulates for a foreign tree (``QEMU_CPU``), by arch. qemu's default for
#: arm64 (``max``) has pointer authentication, whose emulation costs Debian 13's binaries (built
#: with branch protection) three times the time: trixie's minbase + systemd, python3 and perl
#: took 204 s under the default CPU and 71 s as a Cortex-A72 (ARMv8.0, the Debian arm64
#: baseline), byte-identical trees; bookworm's binaries are indifferent to it.
QEMU_CPU: dict[str, str] = {"arm64": "cortex-a72"}


def _foreign(arch: str) -> bool:
    """Whether a tree of ``arch`` runs its programs under qemu-user on this host."""
    return host_arch() != arch


class RootfsBuilder(Builder[RootfsArtifact]):
    name = "rootfs"
    version = "1"
    per_arch = True
    artifact_model = RootfsArtifact
    release_kind = ReleaseKind.INTERNAL

    def check(
        self, artifact_name: str, artifact: RootfsArtifact, variant: Variant
    ) -> list[Problem]:
        """``packages`` is an apt source with a distribution suite. Its arch need not be the
        variant's (a cgo tools tree is the build host's): a node image checks its rootfs's."""
        path = ("artifacts", artifact_name, "packages")
        spec = variant.recipe.sources.get(artifact.packages)
        if spec is None:
            return []
        if not isinstance(spec, AptSource):
            kind = source_kind_of(variant, artifact.packages) or "?"
            return [
                (
                    path,
                    f"{artifact.packages!r} is {a_kind(kind)} source; the packages are an apt "
                    "source",
                    "e.g. node-packages: {apt: {debian: {url: ..., suite: bookworm}}, arch: ...}",
                )
            ]
        if all(repo.flat for repo in spec.apt.values()):
            return [
                (
                    path,
                    f"apt source {artifact.packages!r} has only flat repositories; the base "
                    "system needs a distribution suite (e.g. bookworm)",
                    None,
                )
            ]
        return []

    def plan(
        self, artifact_name: str, artifact: RootfsArtifact, variant: Variant, refs: PlanRefs
    ) -> ActionSpec:
        src = refs.source(artifact.packages)
        spec = src.spec
        assert isinstance(spec, AptSource)  # check() ran
        entry = src.entry
        assert isinstance(entry, AptEntry)  # the entry of an apt source
        # The tree is for the apt source's arch, which need not be the variant's: a cgo build's
        # tools tree is the build host's (amd64) for arm64 targets too. A node image checks
        # that its rootfs is for the variant's arch.
        keyrings = dict(entry.keyrings or {})
        repos = [
            AptRepositoryParams(
                name=name,
                # a flat repository keeps the trailing slash its publisher writes (deb URL/ /)
                url=repo.url.rstrip("/") + ("/" if repo.flat else ""),
                suite=repo.suite,
                components=list(repo.components),
                keyring=str(keyrings.get(name, "")),
            )
            for name, repo in sorted(spec.apt.items())
        ]
        # The suite mmdebstrap installs the base set from: the first non-flat repository's
        # (a flat vendor repository, such as NVIDIA's, has none).
        suites = [r.suite for r in repos if not r.suite.endswith("/")]
        # dkms comes in as a dependency (of nvidia-kernel-dkms, say): the lock lists it
        dkms = any(pkg.name == "dkms" for pkg in entry.packages)
        params = RootfsParams(
            arch=spec.arch,
            base=spec.base,
            include=sorted(spec.packages),
            repositories=repos,
            suite=suites[0],
            hostname=artifact.hostname,
            dkms=dkms,
        )
        inputs = {"packages": src.digest, "assets": sha256_bytes(tar_bytes(ASSETS, epoch=0))}
        if dkms:
            inputs["dkms-assets"] = sha256_bytes(tar_bytes(DKMS_ASSETS, epoch=0))
        tools = {"mmdebstrap": package_version("mmdebstrap", purpose="the rootfs builder")}
        sources = {"packages": src}
        if _foreign(spec.arch) and native.supported():
            # they run in the tree as it is built; its perl and python from the lockfile's
            # amd64 .debs of the tree's versions, where the lock pins them
            packages = [pkg.to_json() for pkg in entry.packages]
            wanted = wanted_debs(packages)
            debs = refs.locked_debs(artifact.packages, LOCK_ARCH, wanted) if wanted else None
            found = []
            if debs is not None:
                assert isinstance(debs.entry, AptEntry)  # locked_debs gives an apt entry
                found = [pkg.to_json() for pkg in debs.entry.packages]
                inputs["native-packages"] = debs.digest
                sources["native-packages"] = debs
            interpreters = native.interpreters(packages, found)
            tools.update(native.tool_versions(interpreters, from_debs=debs is not None))
        if _foreign(spec.arch) and spec.arch in QEMU_CPU:
            tools["qemu-cpu"] = QEMU_CPU[spec.arch]  # what the emulated programs see
        return ActionSpec(params=params.to_json(), inputs=inputs, tools=tools, sources=sources)

    def host_arch(self, action: Action) -> str | None:
        """The tree's arch: its packages' maintainer scripts run natively there (elsewhere under
        qemu-user, minutes slower: the arm64 tree of the default recipe takes ~3.5 min on amd64)."""
        return RootfsParams.model_validate(action.params).arch

    def run(self, ctx: ActionContext) -> None:
        from nvkr.fetch.apt import file_sha256, read_manifest  # the apt fetcher: at run time

        p = RootfsParams.model_validate(ctx.action.params)
        check_can_run(p.arch)
        manifest = read_manifest(ctx.input_path("packages").read_bytes())
        repo = ctx.workdir / "repo"
        repo.mkdir()
        # A foreign tree's dpkg runs under qemu-user: its repository holds the packages with
        # their data member decompressed here, natively (the same tree, minutes sooner).
        foreign = _foreign(p.arch)
        stanzas = []
        for pkg in manifest["packages"]:
            blob = _locked_deb(ctx, pkg)
            deb = repo / pkg["filename"]
            size, sha256 = pkg["size"], pkg["sha256"]
            if foreign and decompress_data_member(blob, deb):
                size, sha256 = deb.stat().st_size, file_sha256(deb)
            elif not deb.exists():
                try:
                    os.link(blob, deb)
                except OSError:
                    shutil.copyfile(blob, deb)
            control = run(["dpkg-deb", "--field", deb]).stdout.decode().rstrip("\n")
            stanzas.append(
                f"{control}\nFilename: ./{pkg['filename']}\nSize: {size}\n"
                f"SHA256: {sha256.split(':', 1)[1]}\n"
            )
        index = "\n".join(stanzas).encode()
        (repo / "Packages").write_bytes(index)
        # mmdebstrap picks the Essential and Priority: required packages of the suite by
        # ?archive/?codename patterns, so the flat repository names the suite in a Release file.
        (repo / "Release").write_text(
            f"Origin: nvkr\nLabel: nvkr locked packages\nSuite: {p.suite}\n"
            f"Codename: {p.suite}\nArchitectures: {p.arch} all\n"
            f"SHA256:\n {hashlib.sha256(index).hexdigest()} {len(index)} Packages\n"
        )
        overlay = self._overlay(ctx)
        out = ctx.workdir / "rootfs.tar"
        mode = "root" if os.geteuid() == 0 else "unshare"
        argv: list[str | Path] = [
            "mmdebstrap",
            f"--mode={mode}",
            f"--variant={ {'minbase': 'minbase', 'essential': 'essential', 'none': 'custom'}[p.base] }",
            f"--arch={p.arch}",
            "--format=tar",
            "--skip=check/signed-by",
        ]
        if p.include:
            argv.append("--include=" + ",".join(p.include))
        dkms_hooks = [
            f"--essential-hook={DKMS_ASSETS / 'no-module-signing.essential-hook'}",
            f"--customize-hook={DKMS_ASSETS / 'check-and-clean.customize-hook'}",
        ]
        # A foreign tree's maintainer scripts and mkinitramfs run host tools
        # (nvkr.builders.rootfs.native): bound in after the Essential set (and, for those
        # installed later, before the initramfs), unbound last, checked for after.
        tools = None
        if foreign and native.supported():
            debs = self._native_debs(ctx)
            interpreters = native.interpreters(manifest["packages"], [pkg for pkg, _ in debs])
            tools = native.prepare(ctx.workdir / "native", interpreters, [p for _, p in debs])
        native_on = [f'--essential-hook={ASSETS / "native-tools.essential-hook"} "$1" {tools}']
        native_late = [
            f'--customize-hook={ASSETS / "native-tools-late.customize-hook"} "$1" {tools}'
        ]
        native_off = [f'--customize-hook={ASSETS / "native-tools-off.customize-hook"} "$1" {tools}']
        # python3.X-minimal's and python3.X's postinsts byte-compile the standard library:
        # deferred, with py3compile's calls, until the tree's python is back in place (and, in
        # a foreign tree, the lockfile's native one bound over it)
        python = python_package({str(pkg["name"]): "" for pkg in manifest["packages"]})
        matched = PYTHON_MINIMAL.fullmatch(python) if python else None
        pyver = [matched[1]] if matched else []
        defer_python = [
            f'--customize-hook={ASSETS / "undefer-python.customize-hook"} "$1" {v}' for v in pyver
        ]
        argv += [
            f"--essential-hook={ASSETS / 'defer-initramfs.essential-hook'}",
            f'--essential-hook={ASSETS / "defer-py3compile.essential-hook"} "$1" {" ".join(pyver)}',
            *(native_on if tools else []),
            *(dkms_hooks if p.dkms else []),
            *defer_python,
            # python3.X from the lockfile is bound by the late hook: before py3compile runs
            *(native_late if tools else []),
            f"--customize-hook={ASSETS / 'run-py3compile.customize-hook'}",
            f"--customize-hook=sync-in {overlay} /",
            *([] if p.hostname else ['--customize-hook=rm -f "$1/etc/hostname"']),
            f"--customize-hook={ASSETS / 'build-initramfs.customize-hook'}",
            *(native_off if tools else []),
            p.suite,
            out,
            f"deb [trusted=yes] copy:{repo} ./",
        ]
        tmp = ctx.workdir / "tmp"
        tmp.mkdir()
        extra = {"SOURCE_DATE_EPOCH": str(ctx.action.epoch), "TMPDIR": str(tmp)}
        if foreign and p.arch in QEMU_CPU:
            extra["QEMU_CPU"] = QEMU_CPU[p.arch]
        env = pinned_env(extra, home=ctx.workdir)
        # In namespaces of its own: mmdebstrap mounts proc, sys and dev in its chroot, and
        # when nvkr is SIGKILLed those mounts go with the namespace instead of staying in tmp/.
        run(
            argv,
            env=env,
            log_file=ctx.log_file,
            cwd=ctx.workdir,
            isolate=True,
            on_line=mmdebstrap_lines(ctx.progress),
        )
        if tools:
            native.check_none_left(out, tools)
        ctx.add_output(out, name="rootfs.tar", media_type=ROOTFS_MEDIA_TYPE)
        ctx.metadata["packages"] = [
            {k: pkg[k] for k in ("name", "version", "arch", "sha256", "url")}
            for pkg in manifest["packages"]
        ]
        ctx.metadata["arch"] = p.arch

    def _native_debs(self, ctx: ActionContext) -> list[tuple[dict[str, Any], Path]]:
        """The lockfile's amd64 .debs whose perl and python run natively (the plan's
        ``native-packages`` source; none without it): each one's lock item and its store copy,
        checked against its pin."""
        src = ctx.action.sources.get("native-packages")
        if src is None:
            return []
        assert isinstance(src.entry, AptEntry)
        items = [pkg.to_json() for pkg in src.entry.packages]
        return [(item, _locked_deb(ctx, item)) for item in items]

    def _overlay(self, ctx: ActionContext) -> Path:
        """Files the customize hook copies over the tree: apt sources + keyrings, host names."""
        from nvkr.fetch.apt import file_sha256, keyring_path

        p = RootfsParams.model_validate(ctx.action.params)
        src = ctx.action.sources["packages"]
        spec = src.spec
        assert isinstance(spec, AptSource)
        overlay = ctx.workdir / "overlay"
        keyrings = overlay / "etc/apt/keyrings"
        keyrings.mkdir(parents=True)
        lines = []
        for repo in p.repositories:
            declared = spec.apt[repo.name]
            if isinstance(declared.keyring, str):
                path = keyring_path(declared, src.base_dir)
            else:  # fetched at lock time, kept in the store under its locked digest
                path = ctx.store.blob_path(repo.keyring)
            if not path.is_file() or file_sha256(path) != repo.keyring:
                raise IntegrityError(
                    f"apt repository {repo.name!r}: keyring {path} is missing or differs from "
                    f"the lockfile's {repo.keyring}",
                    hint="run `nvkr lock` after changing a keyring",
                )
            suffix = ".asc" if path.read_bytes()[:5] == b"-----" else ".gpg"
            dest = keyrings / f"nvkr-{repo.name}{suffix}"
            shutil.copyfile(path, dest)
            line = f"deb [signed-by=/etc/apt/keyrings/{dest.name}] {repo.url} {repo.suite}"
            lines.append(" ".join([line, *repo.components]))
        (overlay / "etc/apt/sources.list").write_text(
            "# written by nvkr from the recipe's apt repositories\n" + "\n".join(lines) + "\n"
        )
        # Without a hostname the tree has no /etc/hostname (run() removes the one mmdebstrap
        # copies from the build host): systemd names the machine from its fallback (localhost)
        # until cloud-init sets the name the metadata gives.
        named = f"127.0.1.1\t{p.hostname}\n" if p.hostname else ""
        if p.hostname:
            (overlay / "etc/hostname").write_text(p.hostname + "\n")
        (overlay / "etc/hosts").write_text(
            f"127.0.0.1\tlocalhost\n{named}::1\tlocalhost ip6-localhost ip6-loopback\n"
        )
        (overlay / "etc/resolv.conf").write_text("")
        epoch = ctx.action.epoch
        for root, dirs, files in os.walk(overlay):
            for n in dirs + files:
                path = Path(root) / n
                os.chmod(path, 0o755 if path.is_dir() else 0o644)
                os.utime(path, (epoch, epoch))
        os.chmod(overlay, 0o755)
        os.utime(overlay, (epoch, epoch))
        return overlay
