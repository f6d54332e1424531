"""The ``node-image`` builder: a bootable QCOW2 from a rootfs, the node agent and the Kubernetes
node binaries, bit for bit the same on every machine.

Phases (each timed into the action's log and its record's ``run.timings``, in milliseconds: the
times describe the run, not the image, so they stay out of the metadata a cache entry shares):

1. **rootfs**: the ``rootfs`` action's tar is unpacked into the work dir (GNU tar, numeric owners,
   xattrs kept; the builder runs as root so owners and device nodes survive).
2. **staging**: the agent binary (``/usr/bin/node-agent``) with its systemd unit, the
   ``kube-packages`` tar, extra ``files``, and the configuration rendered from the Jinja2
   templates in ``builders/node-image/`` (containerd with the systemd cgroup driver and, with
   ``nvidiaRuntime``, the NVIDIA runtime handler; kubelet's unit, kubeadm's drop-in contract
   and the default /var/lib/kubelet/config.yaml; kernel modules and sysctls),
   then ``/etc/nvkr/manifest.json`` with the sha256 of every staged binary, which the agent
   checks at boot. Every staged file (path, mode, digests) goes into the metadata's ``staged``,
   which the machine image's SBOM lists. Every mtime in the tree is clamped to the epoch.
3. **filesystem / times / bootloader / disk / convert**: :mod:`nvkr.disk` (``mkfs.ext4 -d``,
   the debugfs time pass, GPT, GRUB, ``qemu-img convert``).

With ``bootTest: true`` the image is booted in QEMU (:func:`boot_check`, through
:func:`nvkr.machine.boot.boot_test` as ``nvkr boot-test`` does) before it is stored: a failed boot fails
the action and nothing is cached; the console is kept under the store's ``logs/boot-test``. ``backend: diskimage-builder``
hands the tree to diskimage-builder instead (:mod:`nvkr.builders.node_image.dib`).
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from nvkr.builders.api import (
    ActionContext,
    ActionSpec,
    Builder,
    PlanRefs,
    Problem,
    ReleaseKind,
    SbomInputs,
    a_kind,
    builder_of,
)
from nvkr.builders.kube_packages.artifact import KubePackagesArtifact
from nvkr.builders.node_image import secureboot
from nvkr.builders.node_image.artifact import KubeletSettings, NodeImageArtifact
from nvkr.builders.node_image.params import (
    ArtifactFile,
    DiskArch,
    NodeImageParams,
    SourceFile,
    SpireAgentParams,
)
from nvkr.builders.node_image.spire import (
    SPIRE_AGENT_BINARY,
    SPIRE_AGENT_CONF,
    spire_assets_digest,
)
from nvkr.builders.node_image.staging import ASSETS, primary_output, stage
from nvkr.builders.rootfs.artifact import RootfsArtifact
from nvkr.canonical import sha256_bytes
from nvkr.errors import RecipeError, ToolError
from nvkr.hosttools import package_version
from nvkr.jsondoc import JsonObject, json_objects
from nvkr.oci import mediatypes as mt
from nvkr.recipe import fieldchecks as fc
from nvkr.recipe.imagefiles import ImageFile
from nvkr.recipe.matrix import Variant
from nvkr.recipe.sources import AptSource
from nvkr.repro import clamp_tree_mtimes, tar_bytes
from nvkr.run import run
from nvkr.sbom.debian import tree_licenses

if TYPE_CHECKING:
    from nvkr.action import Action
    from nvkr.disk import DiskResult
    from nvkr.machine.boot import BootResult
    from nvkr.monitor.tools import Report

SANDBOX_IMAGE = "registry.k8s.io/pause:3.10"


@functools.cache
def assets_digest() -> str:
    """``sha256:<hex>`` of the builder's asset directory (templates enter every action key);
    hashed once per process, planning asks for it per variant."""
    return sha256_bytes(tar_bytes(ASSETS, epoch=0))


def _host_tools(compression: str = "none") -> dict[str, str]:
    """Debian package versions for the action key; a compressed image adds the library qemu-img
    compresses with (the compressed clusters are that library's output)."""
    purpose = "the node-image builder"
    tools = {
        pkg: package_version(pkg, purpose=purpose)
        for pkg in ("e2fsprogs", "fdisk", "qemu-utils", "grub-common", "mtools", "dosfstools")
    }
    tools["tar"] = package_version("tar", purpose=purpose)
    if compression != "none":
        from nvkr.disk.qcow2 import COMPRESSION_LIBRARY

        library = COMPRESSION_LIBRARY[compression]
        tools[library] = package_version(
            library, purpose=f"a {compression}-compressed QCOW2 (the node-image builder)"
        )
    return tools


def _rootfs_arch(artifact: NodeImageArtifact, variant: Variant) -> str | None:
    """The arch of the apt source the image's rootfs is made from, when the recipe says."""
    rootfs = variant.recipe.artifacts.get(artifact.rootfs)
    if not isinstance(rootfs, RootfsArtifact):
        return None
    spec = variant.recipe.sources.get(rootfs.packages)
    return spec.arch if isinstance(spec, AptSource) else None


def _arch_mismatch(rootfs: str, rootfs_arch: str, variant_arch: str) -> str:
    return (
        f"rootfs {rootfs!r} is built from an apt source for {rootfs_arch}, the variant is "
        f"{variant_arch}"
    )


class NodeImageBuilder(Builder[NodeImageArtifact]):
    name = "node-image"
    # 2: metadata ``staged`` lists every staged file with its mode, not the binaries alone (a
    # record of version 1 would give the SBOM a partial file list)
    # 3: kubeadm's kubelet contract (the drop-in reads /var/lib/kubelet/config.yaml and
    # kubeadm-flags.env; the image's KubeletConfiguration moved there, with a staticPodPath)
    version = "3"
    per_arch = True
    per_gpu = True  # labels name the GPU generation: each variant has its own image
    artifact_model = NodeImageArtifact
    release_kind = ReleaseKind.MACHINE_IMAGE
    run_metadata = ("timings",)  # phase times: the executor files them under the record's run

    def check(
        self, artifact_name: str, artifact: NodeImageArtifact, variant: Variant
    ) -> list[Problem]:
        """``rootfs``, ``agent`` and ``kubePackages`` name artifacts of those builders, and
        kubelet settings come with a kubelet to apply them to (staged by ``kubePackages`` or
        installed from the rootfs's packages)."""
        problems: list[Problem] = []
        for field, wanted in (
            ("rootfs", "rootfs"),
            ("agent", "go-binary"),
            ("kubePackages", "kube-packages"),
        ):
            name = getattr(artifact, field)
            builder = builder_of(variant, name) if name is not None else None
            if builder is not None and builder != wanted:
                problems.append(
                    (
                        ("artifacts", artifact_name, field),
                        f"{name!r} is {a_kind(builder)} artifact, not {a_kind(wanted)}",
                        None,
                    )
                )
        rootfs_arch = _rootfs_arch(artifact, variant)
        if rootfs_arch is not None and rootfs_arch != variant.arch:
            problems.append(
                (
                    ("artifacts", artifact_name, "rootfs"),
                    _arch_mismatch(artifact.rootfs, rootfs_arch, variant.arch),
                    'write arch: "{{ arch }}" in the apt source',
                )
            )
        if artifact.compression != "none" and artifact.backend == "diskimage-builder":
            problems.append(
                (
                    ("artifacts", artifact_name, "compression"),
                    f"compression {artifact.compression!r} needs the native backend: "
                    "diskimage-builder writes the QCOW2 itself",
                    'remove compression, or write backend: "native"',
                )
            )
        problems += secureboot.problems(artifact_name, artifact, variant)
        if artifact.kubelet != KubeletSettings() and not _stages_kubelet(artifact, variant):
            problems.append(
                (
                    ("artifacts", artifact_name, "kubelet"),
                    "kubelet settings are given but the image stages no kubelet (neither "
                    "kubePackages nor the rootfs's packages hold one), so they would be dropped",
                    "add kubelet to a kube-packages artifact (or the apt source), or remove the "
                    "kubelet settings",
                )
            )
        return problems

    def plan(
        self, artifact_name: str, artifact: NodeImageArtifact, variant: Variant, refs: PlanRefs
    ) -> ActionSpec:
        rootfs = refs.artifact(artifact.rootfs)  # a rootfs artifact: check() ran
        if rootfs.params.get("arch") != variant.arch:  # check() saw the spec; this, its render
            raise RecipeError(
                f"artifact {artifact_name!r}: "
                + _arch_mismatch(artifact.rootfs, str(rootfs.params.get("arch")), variant.arch),
                hint='write arch: "{{ arch }}" in the apt source',
            )
        deps: dict[str, str] = {"rootfs": rootfs.key}
        if artifact.agent is not None:
            deps["agent"] = refs.artifact(artifact.agent).key
        if artifact.kubePackages is not None:
            deps["kubePackages"] = refs.artifact(artifact.kubePackages).key
        chain = secureboot.plan(artifact, variant, refs, deps)
        inputs: dict[str, str] = {"assets": assets_digest()}
        sources: dict[str, Any] = {}

        def image_file(dest: str, entry: str | ImageFile, role: str) -> ArtifactFile | SourceFile:
            e = ImageFile(artifact=entry) if isinstance(entry, str) else entry
            if e.artifact is not None:
                return ArtifactFile(path=dest, mode=e.mode, action=refs.artifact(e.artifact).key)
            assert e.source is not None
            src = refs.source(e.source)
            inputs[role] = src.digest
            sources[role] = src
            return SourceFile(path=dest, mode=e.mode, input=role, member=e.path)

        files = [
            image_file(dest, entry, f"file:{dest}")
            for dest, entry in sorted(artifact.files.items())
        ]
        spire = None
        if artifact.spireAgent is not None:
            s = artifact.spireAgent
            inputs["spire-assets"] = spire_assets_digest()
            binary = image_file(SPIRE_AGENT_BINARY, s.binary, "spire:binary")
            config = image_file(SPIRE_AGENT_CONF, s.config, "spire:config") if s.config else None
            assert not isinstance(config, ArtifactFile)  # the model allows a source only
            spire = SpireAgentParams(
                binary=binary, trustDomain=s.trustDomain, nodeAttestor=s.nodeAttestor, config=config
            )
        params = NodeImageParams(
            arch=cast(DiskArch, variant.arch),  # the matrix allows these only; checked again
            gpu=variant.gpu,
            kubernetes=variant.kubernetes,
            kubernetesVersion=artifact.kubernetesVersion,
            nvidiaRuntime=artifact.nvidiaRuntime,
            kubelet=artifact.kubelet.model_dump(),
            sizeBytes=fc.size_bytes(artifact.size),
            kernelArgs=list(
                chain.kernel_args if chain.kernel_args is not None else artifact.kernelArgs
            ),
            diskSeed=chain.disk_seed,
            format=artifact.format,
            compression=artifact.compression,
            backend=artifact.backend,
            bootTest=artifact.bootTest,
            deps=deps,
            files=files,
            sandboxImage=SANDBOX_IMAGE,
            spireAgent=spire,
        )
        staged = [*files, *([spire.binary] if spire else [])]
        action_deps = {*deps.values(), *(f.action for f in staged if isinstance(f, ArtifactFile))}
        tools = _host_tools(artifact.compression)
        if "signedUki" in deps:  # the firmware the PCR predictions are for
            tools.update(secureboot.firmware_tools(variant.arch))
        return ActionSpec(
            params=params.to_json(),
            inputs=inputs,
            tools=tools,
            sources=sources,
            deps=tuple(sorted(action_deps)),
            # diskimage-builder stamps times and random ids and its version is in no key
            hermetic=artifact.backend != "diskimage-builder",
        )

    def sbom_inputs(self, action: Action, actions: Mapping[str, Action]) -> SbomInputs:
        """The Go binaries it stages (the agent), for their build info."""
        return SbomInputs(
            binaries=tuple(
                d for d in action.deps if d in actions and actions[d].builder == "go-binary"
            )
        )

    def release_fields(self, action: Action) -> JsonObject:
        """``{"attestations": [{"role": "pcr-predictions", "predicateType": ...}]}`` for a
        Secure Boot image: the release set attaches its PCR predictions to it as an in-toto
        attestation of their own (a referrer), not as a layer. Else nothing: a release set
        without one keeps the spec it always had."""
        deps = action.params.get("deps")
        if not isinstance(deps, Mapping) or "signedUki" not in deps:
            return {}
        return {
            "attestations": [
                {"role": secureboot.PREDICTIONS_ROLE, "predicateType": secureboot.PREDICTION_TYPE}
            ]
        }

    def run(self, ctx: ActionContext) -> None:
        p = NodeImageParams.model_validate(ctx.action.params)
        timings: dict[str, int] = {}  # milliseconds (canonical JSON has no floats)
        if os.geteuid() != 0:
            raise ToolError(
                "the node-image builder runs as root: the tree keeps root-owned files, device "
                "nodes and capabilities",
                hint="run nvkr build as root (CI runners and this project's install.sh do)",
            )
        tree = ctx.workdir / "tree"
        tree.mkdir(mode=0o755)
        os.chmod(tree, 0o755)  # whatever the umask
        with _phase(ctx, timings, "rootfs"):
            rootfs = ctx.deps[p.deps["rootfs"]]
            tar = primary_output(ctx, rootfs, "rootfs")
            run(
                [
                    "tar",
                    "--xattrs",
                    "--xattrs-include=*",
                    "--numeric-owner",
                    "-xpf",
                    tar,
                    "-C",
                    tree,
                ],
                log_file=ctx.log_file,
            )
            secureboot.overlay_modules(ctx, p.deps, tree)
        with _phase(ctx, timings, "staging"):
            staged = stage(ctx, tree, rootfs)
            packages = [dict(pkg) for pkg in json_objects(rootfs.metadata.get("packages"))]
            licenses = tree_licenses(tree, [str(pkg["name"]) for pkg in packages])
            for pkg in packages:
                if str(pkg["name"]) in licenses:
                    pkg["licenses"] = licenses[str(pkg["name"])]
            clamp_tree_mtimes(tree, ctx.action.epoch)
        out = ctx.workdir / "disk.qcow2"
        seed = disk_seed(ctx.action)
        if p.backend == "diskimage-builder":
            from nvkr.builders.node_image import dib

            with _phase(ctx, timings, "diskimage-builder"):
                dib.build(ctx, tree, out, arch=p.arch, size_bytes=p.sizeBytes)
            disk_meta: dict[str, Any] = {}
        else:
            from nvkr.disk import assemble_disk, prepare_boot_files

            layout = prepare_boot_files(
                tree,
                arch=p.arch,
                seed=seed,
                kernel_args=p.kernelArgs,
                epoch=ctx.action.epoch,
            )
            clamp_tree_mtimes(tree, ctx.action.epoch)
            result = assemble_disk(
                tree,
                out,
                layout=layout,
                size_bytes=p.sizeBytes,
                epoch=ctx.action.epoch,
                workdir=ctx.workdir,
                log_file=ctx.log_file,
                progress=ctx.progress,
                compression=p.compression,
                raw_digest=True,
                efi_files=secureboot.esp_files(ctx, p.deps, tree, p.arch) or None,
            )
            timings.update({k: int(v * 1000) for k, v in result.phases.items()})
            disk_meta = {
                "fsUuid": result.fs_uuid,
                "rootPartuuid": result.root_partuuid,
                "rootPartition": result.root_partition,
                "virtualSize": p.sizeBytes,
            }
            disk_meta["qcow2"] = _compression_record(ctx.action.tools, result)
        if p.bootTest:
            agent = any(s["path"] == "/usr/bin/node-agent" for s in staged)
            with _phase(ctx, timings, "boot-test"):
                booted = boot_check(
                    out, arch=p.arch, agent=agent, build_log=ctx.log_file,
                    store_root=ctx.store.root, name=f"{ctx.action.name}-{ctx.action.key[7:19]}",
                    progress=ctx.progress,
                )  # fmt: skip
            _log(ctx, f"boot test: {booted.matched} ({booted.seconds:.1f} s, {booted.accel})")
        name = f"node-image-{p.gpu}-k8s{p.kubernetes}-{p.arch}.qcow2"
        disk = ctx.add_output(out, name=name, media_type=mt.NVKR_QCOW2)
        secureboot.certificate_outputs(ctx, p.deps)
        secureboot.predictions(ctx, p.deps, tree, p.arch, disk)
        annotations = {
            mt.ANN_NVKR_GPU: p.gpu,
            mt.ANN_NVKR_KUBERNETES: p.kubernetesVersion,
            mt.ANN_NVKR_DISK_FORMAT: p.format,
        }
        if p.compression != "none":
            annotations[mt.ANN_NVKR_DISK_COMPRESSION] = p.compression
        ctx.metadata.update(
            {
                "annotations": annotations,
                "arch": p.arch,
                "disk": disk_meta,
                "packages": packages,
                "staged": staged,
                "timings": timings,
            }
        )
        _log(ctx, "timings: " + json.dumps(timings, sort_keys=True))

    # -- helpers ------------------------------------------------------------------------------------


def disk_seed(action: Action) -> str:
    """The hex the disk's identifiers (file system UUID, GPT GUIDs) derive from: the action key
    of the image without compression. So a compressed image holds the very raw disk the
    uncompressed one does (the same ``rawDigest``), and only the container differs."""
    if action.params.get("diskSeed"):  # the UKI's command line names these identifiers
        return str(action.params["diskSeed"])
    compression = str(action.params.get("compression", "none"))
    if compression == "none":
        return action.key.split(":", 1)[1]
    from nvkr.action import action_key
    from nvkr.disk.qcow2 import COMPRESSION_LIBRARY

    library = COMPRESSION_LIBRARY[compression]
    plain = action_key(
        action.builder,
        action.builder_version,
        {k: v for k, v in action.params.items() if k != "compression"},
        action.inputs,
        {k: v for k, v in action.tools.items() if k != library},
        action.epoch,
        action.deps,
    )
    return plain.split(":", 1)[1]


def _compression_record(tools: Mapping[str, str], result: DiskResult) -> dict[str, Any]:
    """What made a QCOW2's bytes, for its record and provenance (``diskImage``), compressed or
    not: ``{"compression": "none"|"zlib"|"zstd", "qemuImg" (qemu-utils' version), "options"
    (qemu-img convert's ``-o``), "rawDigest": "sha256:<hex>" of the raw disk the container
    holds, "rawSize" (bytes)}``, and when compressed also "level" (the library's default:
    qemu-img sets none), "coroutines", "library": {package: version}, "compressedClusters"."""
    from nvkr.disk.qcow2 import (
        COMPRESSION_LEVEL,
        COMPRESSION_LIBRARY,
        COROUTINES,
        convert_options,
    )

    if result.compression == "none":
        return {
            "compression": "none",
            "qemuImg": tools["qemu-utils"],
            "options": convert_options("none"),
            "rawDigest": result.raw_digest,
            "rawSize": result.raw_size,
        }
    library = COMPRESSION_LIBRARY[result.compression]
    return {
        "compression": result.compression,
        "level": COMPRESSION_LEVEL[result.compression],
        "coroutines": COROUTINES,
        "qemuImg": tools["qemu-utils"],
        "library": {library: tools[library]},
        "compressedClusters": result.compressed_clusters,
        "rawDigest": result.raw_digest,
        "rawSize": result.raw_size,
        "options": convert_options(result.compression),
    }


def _log(ctx: ActionContext, line: str) -> None:
    with open(ctx.log_file, "a") as f:
        f.write(line + "\n")


def boot_check(
    image: Path,
    *,
    arch: str,
    agent: bool,
    build_log: Path,
    store_root: Path,
    name: str,
    progress: Report | None = None,
) -> BootResult:
    """``bootTest``: boot ``image`` as ``nvkr boot-test`` does (accelerator from
    ``$NVKR_BOOT_ACCEL``, a stalled KVM guest booted again under TCG) until the agent's readiness
    line and labels (``agent``), else a login prompt. Its whole console goes to a new file in
    ``<store_root>/logs/boot-test`` (the work dir, with the build log, is gone after a failure),
    named with each attempt in ``build_log``; a stall is also a warning on the ``nvkr.boot``
    logger. ``progress`` (the action's :meth:`~nvkr.builders.api.ActionContext.progress`) hears
    ``boot test: booting under kvm`` (step 1 of 2), a stall and its retry, and ``boot test:
    ready under tcg`` (step 2).

    Raises:
        BootTestError: the boot failed (the hint names the console log).
    """
    from nvkr.agent_labels import AGENT_LABELS, check_agent_labels
    from nvkr.machine.boot import CONSOLE_LOGS, boot_test, new_console_log
    from nvkr.machine.boot import log as boot_log
    from nvkr.monitor.events import BootStall, BootStart
    from nvkr.monitor.lines import boot_line

    report = progress or (lambda done, total, unit, what: None)

    def event(e: BootStart | BootStall) -> None:
        line = boot_line(e)
        with open(build_log, "a") as f:
            f.write(f"boot test: {'warning: ' if isinstance(e, BootStall) else ''}{line}\n")
        if isinstance(e, BootStart):
            report(1, 2, "steps", f"boot test: booting under {e.accel}")
        else:
            boot_log.warning("%s", line)
            again = f"; booting again under {e.retry}" if e.retry else ""
            report(1, 2, "steps", f"boot test: KVM made no progress{again}")

    booted = boot_test(
        image,
        arch=arch,
        log_file=new_console_log(store_root / CONSOLE_LOGS, name),
        expect=r"nvkr-node-agent: ready" if agent else r"login:",
        then=AGENT_LABELS if agent else None,
        event=event,
    )
    if agent:
        check_agent_labels(booted.matched, booted.lines)
    report(2, 2, "steps", f"boot test: ready under {booted.accel}")
    return booted


@contextmanager
def _phase(ctx: ActionContext, timings: dict[str, int], name: str) -> Iterator[None]:
    start = time.monotonic()
    yield
    timings[name] = int((time.monotonic() - start) * 1000)
    _log(ctx, f"phase {name}: {timings[name] / 1000:.2f} s")


def _stages_kubelet(artifact: NodeImageArtifact, variant: Variant) -> bool:
    """The image gets a kubelet: a ``kubelet`` binary of its kube-packages artifact, or a
    package named ``kubelet`` (pkgs.k8s.io's) in its rootfs's apt source."""
    recipe = variant.recipe
    kube = recipe.artifacts.get(artifact.kubePackages or "")
    if isinstance(kube, KubePackagesArtifact) and "kubelet" in kube.binaries:
        return True
    rootfs = recipe.artifacts.get(artifact.rootfs)
    if not isinstance(rootfs, RootfsArtifact):
        return False
    packages = recipe.sources.get(rootfs.packages)
    return isinstance(packages, AptSource) and "kubelet" in packages.packages
