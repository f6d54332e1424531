"""The ``node-image`` builder: a bootable QCOW2 from a rootfs, the node agent and the Kubernetes
node binaries, bit for bit the same on every machine.

Phases (each timed into the action's log and its record's ``run.timings``, in milliseconds: the
times describe the run, not the image, so they stay out of the metadata a cache entry shares):

1. **rootfs**: the ``rootfs`` action's tar is unpacked into the work dir (GNU tar, numeric owners,
   xattrs kept; the builder runs as root so owners and device nodes survive).
2. **staging**: the agent binary (``/usr/bin/node-agent``) with its systemd unit, the
   ``kube-packages`` tar, extra ``files``, and the configuration rendered from the Jinja2
   templates in ``builders/node-image/`` (containerd with the systemd cgroup driver and, with
   ``nvidiaRuntime``, the NVIDIA runtime handler; kubelet's KubeletConfiguration, unit and
   drop-in passing ``--node-labels`` from the agent's label file; kernel modules and sysctls),
   then ``/etc/nvkr/manifest.json`` with the sha256 of every staged binary, which the agent
   checks at boot. Every mtime in the tree is clamped to the epoch.
3. **filesystem / times / bootloader / disk / convert**: :mod:`nvkr.disk` (``mkfs.ext4 -d``,
   the debugfs time pass, GPT, GRUB, ``qemu-img convert``).

With ``bootTest: true`` the image is booted in QEMU (:func:`boot_check`, through
:func:`nvkr.boot.boot_test` as ``nvkr boot-test`` does) before it is stored: a failed boot fails
the action and nothing is cached; the console is kept under the store's ``logs/boot-test``. ``backend: diskimage-builder``
hands the tree to diskimage-builder instead (:mod:`nvkr.builders.dib`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
import jinja2.sandbox

import nvkr
from nvkr.builders import ActionContext, ActionSpec, PlanRefs, Problem, a_kind, builder_of
from nvkr.canonical import canonical_json, sha256_bytes
from nvkr.errors import BuildError, RecipeError, ToolError
from nvkr.hosttools import package_version
from nvkr.oci import mediatypes as mt
from nvkr.recipe import Variant
from nvkr.recipe import fieldchecks as fc
from nvkr.recipe.models import (
    AptSource,
    ImageFile,
    KubeletSettings,
    KubePackagesArtifact,
    NodeImageArtifact,
    RootfsArtifact,
)
from nvkr.repro import tar_bytes
from nvkr.run import run
from nvkr.sbom.debian import tree_licenses

if TYPE_CHECKING:
    from nvkr.boot import BootResult

#: Builder assets: the Jinja2 templates and diskimage-builder elements.
ASSETS = Path(nvkr.__file__).resolve().parent.parent / "builders" / "node-image"
SANDBOX_IMAGE = "registry.k8s.io/pause:3.10"
#: The templates in ASSETS the builder renders (all of them on every build).
TEMPLATES = (
    "nvkr-node-agent.service.j2",
    "containerd-config.toml.j2",
    "kubelet.service.j2",
    "20-nvkr-kubelet.conf.j2",
    "kubelet-config.yaml.j2",
    "kubernetes-modules.conf.j2",
    "kubernetes-sysctl.conf.j2",
)
_UNITS = "etc/systemd/system"
_WANTS = f"{_UNITS}/multi-user.target.wants"


@functools.cache
def assets_digest() -> str:
    """``sha256:<hex>`` of the builder's asset directory (templates enter every action key);
    hashed once per process, planning asks for it per variant."""
    return sha256_bytes(tar_bytes(ASSETS, epoch=0))


def _host_tools() -> dict[str, str]:
    purpose = "the node-image builder"
    tools = {
        pkg: package_version(pkg, purpose=purpose)
        for pkg in ("e2fsprogs", "fdisk", "qemu-utils", "grub-common", "mtools", "dosfstools")
    }
    tools["tar"] = package_version("tar", purpose=purpose)
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


class NodeImageBuilder:
    name = "node-image"
    version = "1"
    per_arch = True
    per_gpu = True  # labels name the GPU generation: each variant has its own image
    release_kind = "machine-image"
    run_metadata = ("timings",)  # phase times: the executor files them under the record's run

    def check(self, artifact_name: str, artifact: Any, variant: Variant) -> list[Problem]:
        """``rootfs``, ``agent`` and ``kubePackages`` name artifacts of those builders, and
        kubelet settings come with a kubelet to apply them to (staged by ``kubePackages`` or
        installed from the rootfs's packages)."""
        assert isinstance(artifact, NodeImageArtifact)
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
        self, artifact_name: str, artifact: Any, variant: Variant, refs: PlanRefs
    ) -> ActionSpec:
        assert isinstance(artifact, NodeImageArtifact)
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
        files: list[dict[str, Any]] = []
        inputs: dict[str, str] = {"assets": assets_digest()}
        sources = {}
        for dest, entry in sorted(artifact.files.items()):
            e = ImageFile(artifact=entry) if isinstance(entry, str) else entry
            item: dict[str, Any] = {"path": dest, "mode": e.mode}
            if e.artifact is not None:
                item["action"] = refs.artifact(e.artifact).key
            else:
                assert e.source is not None
                src = refs.source(e.source)
                role = f"file:{dest}"
                inputs[role] = src.digest
                sources[role] = src
                item.update({"input": role, "member": e.path})
            files.append(item)
        params = {
            "arch": variant.arch,
            "gpu": variant.gpu,
            "kubernetes": variant.kubernetes,
            "kubernetesVersion": artifact.kubernetesVersion,
            "nvidiaRuntime": artifact.nvidiaRuntime,
            "kubelet": artifact.kubelet.model_dump(),
            "sizeBytes": fc.size_bytes(artifact.size),
            "kernelArgs": list(artifact.kernelArgs),
            "format": artifact.format,
            "backend": artifact.backend,
            "bootTest": artifact.bootTest,
            "deps": deps,
            "files": files,
            "sandboxImage": SANDBOX_IMAGE,
        }
        action_deps = {*deps.values(), *(f["action"] for f in files if "action" in f)}
        return ActionSpec(
            params=params,
            inputs=inputs,
            tools=_host_tools(),
            sources=sources,
            deps=tuple(sorted(action_deps)),
            # diskimage-builder stamps times and random ids and its version is in no key
            hermetic=artifact.backend != "diskimage-builder",
        )

    def run(self, ctx: ActionContext) -> None:
        p = ctx.action.params
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
            rootfs = ctx.deps[p["deps"]["rootfs"]]
            tar = _primary(ctx, rootfs, "rootfs")
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
        with _phase(ctx, timings, "staging"):
            staged = self._stage(ctx, tree, rootfs)
            packages = [dict(pkg) for pkg in (rootfs.get("metadata") or {}).get("packages", [])]
            licenses = tree_licenses(tree, [pkg["name"] for pkg in packages])
            for pkg in packages:
                if pkg["name"] in licenses:
                    pkg["licenses"] = licenses[pkg["name"]]
            clamp_mtimes(tree, ctx.action.epoch)
        out = ctx.workdir / "disk.qcow2"
        seed = ctx.action.key.split(":", 1)[1]
        if p["backend"] == "diskimage-builder":
            from nvkr.builders import dib

            with _phase(ctx, timings, "diskimage-builder"):
                dib.build(ctx, tree, out, arch=p["arch"], size_bytes=p["sizeBytes"])
            disk_meta: dict[str, Any] = {}
        else:
            from nvkr.disk import assemble_disk, prepare_boot_files

            layout = prepare_boot_files(
                tree,
                arch=p["arch"],
                seed=seed,
                kernel_args=p["kernelArgs"],
                epoch=ctx.action.epoch,
            )
            clamp_mtimes(tree, ctx.action.epoch)
            result = assemble_disk(
                tree,
                out,
                layout=layout,
                size_bytes=p["sizeBytes"],
                epoch=ctx.action.epoch,
                workdir=ctx.workdir,
                log_file=ctx.log_file,
                progress=ctx.progress,
            )
            timings.update({k: int(v * 1000) for k, v in result.phases.items()})
            disk_meta = {
                "fsUuid": result.fs_uuid,
                "rootPartuuid": result.root_partuuid,
                "rootPartition": result.root_partition,
                "virtualSize": p["sizeBytes"],
            }
        if p["bootTest"]:
            agent = any(s["path"] == "/usr/bin/node-agent" for s in staged)
            with _phase(ctx, timings, "boot-test"):
                booted = boot_check(
                    out, arch=p["arch"], agent=agent, build_log=ctx.log_file,
                    store_root=ctx.store.root, name=f"{ctx.action.name}-{ctx.action.key[7:19]}",
                )  # fmt: skip
            _log(ctx, f"boot test: {booted.matched} ({booted.seconds:.1f} s, {booted.accel})")
        name = f"node-image-{p['gpu']}-k8s{p['kubernetes']}-{p['arch']}.qcow2"
        ctx.add_output(out, name=name, media_type=mt.NVKR_QCOW2)
        ctx.metadata.update(
            {
                "annotations": {
                    mt.ANN_NVKR_GPU: p["gpu"],
                    mt.ANN_NVKR_KUBERNETES: p["kubernetesVersion"],
                    mt.ANN_NVKR_DISK_FORMAT: p["format"],
                },
                "arch": p["arch"],
                "disk": disk_meta,
                "packages": packages,
                "staged": staged,
                "timings": timings,
            }
        )
        _log(ctx, "timings: " + json.dumps(timings, sort_keys=True))

    # -- staging ---------------------------------------------------------------------------
    def _stage(
        self, ctx: ActionContext, tree: Path, rootfs: dict[str, Any]
    ) -> list[dict[str, Any]]:
        p = ctx.action.params
        staged: list[dict[str, Any]] = []

        def put(rel: str, data: bytes, mode: int, *, binary: bool) -> None:
            path = _inside(tree, rel)
            _mkdirs(path.parent)
            if path.is_symlink() or path.exists():
                path.unlink()
            path.write_bytes(data)
            os.chmod(path, mode)
            if binary:
                staged.append(
                    {
                        "path": "/" + rel.lstrip("/"),
                        "sha1": hashlib.sha1(data, usedforsecurity=False).hexdigest(),
                        "sha256": hashlib.sha256(data).hexdigest(),
                        "size": len(data),
                        "elf": data[:4] == b"\x7fELF",
                    }
                )

        packages = {pkg["name"] for pkg in (rootfs.get("metadata") or {}).get("packages", [])}
        toolkit = "nvidia-container-toolkit" in packages
        nvidia = p["nvidiaRuntime"] if p["nvidiaRuntime"] is not None else toolkit
        if nvidia and not toolkit:
            raise BuildError(
                "nvidiaRuntime: true, but the rootfs holds no nvidia-container-toolkit package "
                "(containerd's nvidia handler runs its nvidia-container-runtime)",
                hint="add nvidia-container-toolkit from NVIDIA's apt repository to the apt "
                "source, or leave nvidiaRuntime unset",
            )
        deps = p["deps"]
        if "agent" in deps:
            agent = _primary(ctx, ctx.deps[deps["agent"]], "agent")
            put("usr/bin/node-agent", agent.read_bytes(), 0o755, binary=True)
        if "kubePackages" in deps:
            kube_tar = _primary(ctx, ctx.deps[deps["kubePackages"]], "kube-packages")
            with tarfile.open(kube_tar) as tf:
                for member in tf.getmembers():
                    if member.isfile():
                        f = tf.extractfile(member)
                        assert f is not None
                        put(member.name, f.read(), 0o755, binary=True)
        for item in p["files"]:
            data = self._file_bytes(ctx, item)
            mode = (
                int(item["mode"], 8) if item.get("mode") else 0o755 if "action" in item else 0o644
            )
            put(item["path"].lstrip("/"), data, mode, binary=bool(mode & 0o111))
        present = {
            "agent": (tree / "usr/bin/node-agent").is_file(),
            "kubelet": (tree / "usr/bin/kubelet").is_file(),
            # Debian's containerd, or Docker's containerd.io (containerd 2.x reads config v2)
            "containerd": "containerd" in packages or "containerd.io" in packages,
        }
        env = _template_env()
        values = {
            "arch": p["arch"],
            "gpu": p["gpu"],
            "kubernetes": p["kubernetes"],
            "kubernetesVersion": p["kubernetesVersion"],
            "nvidiaRuntime": nvidia,
            "kubelet": p["kubelet"],
            "sandboxImage": p["sandboxImage"],
            "present": present,
        }
        rendered: list[tuple[str, str, bool]] = []  # (template, path in tree, enable unit)
        if present["agent"]:
            rendered.append(
                ("nvkr-node-agent.service.j2", f"{_UNITS}/nvkr-node-agent.service", True)
            )
        if present["containerd"]:
            rendered.append(("containerd-config.toml.j2", "etc/containerd/config.toml", False))
        if present["kubelet"]:
            rendered += [
                ("kubelet.service.j2", f"{_UNITS}/kubelet.service", True),
                ("20-nvkr-kubelet.conf.j2", f"{_UNITS}/kubelet.service.d/20-nvkr.conf", False),
                ("kubelet-config.yaml.j2", "etc/kubernetes/kubelet-config.yaml", False),
                ("kubernetes-modules.conf.j2", "etc/modules-load.d/kubernetes.conf", False),
                ("kubernetes-sysctl.conf.j2", "etc/sysctl.d/90-kubernetes.conf", False),
            ]
        # every template is rendered, used or not: a broken one fails every build, not only
        # the builds of recipes that happen to stage a kubelet
        texts = {t: render_template(env, t, values) for t in TEMPLATES}
        for template, dest, enable in rendered:
            text = texts[template]
            put(dest, text.encode(), 0o644, binary=False)
            if enable:
                link = _inside(tree, f"{_WANTS}/{Path(dest).name}")
                _mkdirs(link.parent)
                if link.is_symlink() or link.exists():
                    link.unlink()
                link.symlink_to(f"/{dest}")
        staged.sort(key=lambda s: s["path"])
        if staged:
            manifest = {"files": [{"path": s["path"], "sha256": s["sha256"]} for s in staged]}
            put("etc/nvkr/manifest.json", canonical_json(manifest) + b"\n", 0o644, binary=False)
        return staged

    def _file_bytes(self, ctx: ActionContext, item: dict[str, Any]) -> bytes:
        if "action" in item:
            return _primary(ctx, ctx.deps[item["action"]], item["path"]).read_bytes()
        blob = ctx.input_path(item["input"])
        member = item.get("member")
        if not member:
            return blob.read_bytes()
        try:
            with tarfile.open(blob) as tf:
                f = tf.extractfile(member.strip("/"))
                if f is None:
                    raise KeyError(member)
                return f.read()
        except (KeyError, tarfile.ReadError) as e:
            raise BuildError(
                f"files: {item['path']}: no file {member!r} in its source ({e})"
            ) from e


# -- helpers ------------------------------------------------------------------------------------
def _log(ctx: ActionContext, line: str) -> None:
    with open(ctx.log_file, "a") as f:
        f.write(line + "\n")


def boot_check(
    image: Path, *, arch: str, agent: bool, build_log: Path, store_root: Path, name: str
) -> BootResult:
    """``bootTest``: boot ``image`` as ``nvkr boot-test`` does (accelerator from
    ``$NVKR_BOOT_ACCEL``, a stalled KVM guest booted again under TCG) until the agent's readiness
    line and labels (``agent``), else a login prompt. Its whole console goes to a new file in
    ``<store_root>/logs/boot-test`` (the work dir, with the build log, is gone after a failure),
    named with each attempt in ``build_log``; a stall is also a warning on the ``nvkr.boot``
    logger.

    Raises:
        BootTestError: the boot failed (the hint names the console log).
    """
    from nvkr.agent_labels import AGENT_LABELS, check_agent_labels
    from nvkr.boot import CONSOLE_LOGS, boot_test, event_line, new_console_log
    from nvkr.boot import log as boot_log

    def event(kind: str, fields: dict[str, Any]) -> None:
        line = event_line(kind, fields)
        with open(build_log, "a") as f:
            f.write(f"boot test: {'warning: ' if kind == 'stall' else ''}{line}\n")
        if kind == "stall":
            boot_log.warning("%s", line)

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


def _mkdirs(path: Path) -> None:
    """Create ``path`` and its missing parents with mode 0755 whatever the process umask (it is
    shared by the executor's threads, so it cannot be set here)."""
    missing: list[Path] = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for d in reversed(missing):
        d.mkdir(mode=0o755)
        os.chmod(d, 0o755)


def _primary(ctx: ActionContext, result: dict[str, Any], what: str) -> Path:
    found = [o for o in result.get("outputs") or [] if o.get("role") == "primary"]
    if len(found) != 1:
        raise BuildError(f"{what}: its action has {len(found)} primary outputs, expected one")
    return ctx.store.checked_path(str(found[0]["digest"]))


def _inside(tree: Path, rel: str) -> Path:
    """``tree/rel``, refusing paths that leave the tree (``..``) or pass through a symlink that
    points outside (absolute symlinks in the tree are resolved against the tree)."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise BuildError(f"staged path {rel!r} leaves the root filesystem")
    cur = tree
    for part in parts[:-1]:
        cur = cur / part
        if cur.is_symlink():
            target = os.readlink(cur)
            cur = (tree / target.lstrip("/")) if target.startswith("/") else cur.parent / target
            cur = Path(os.path.normpath(cur))
            if cur != tree and tree not in cur.parents:
                raise BuildError(f"staged path {rel!r} leads out of the root filesystem")
    return cur / parts[-1] if parts else tree


def clamp_mtimes(tree: Path, epoch: int) -> None:
    """Set every mtime (and atime) in ``tree`` newer than ``epoch`` to ``epoch``, symlinks
    included (SOURCE_DATE_EPOCH clamping, as mmdebstrap does for the packages' own files)."""
    for root, dirs, files in os.walk(tree):
        for name in dirs + files:
            path = os.path.join(root, name)
            st = os.lstat(path)
            if st.st_mtime > epoch:
                os.utime(path, (epoch, epoch), follow_symlinks=False)
    if os.lstat(tree).st_mtime > epoch:
        os.utime(tree, (epoch, epoch))


def _template_env() -> jinja2.Environment:
    return jinja2.sandbox.SandboxedEnvironment(
        loader=jinja2.FileSystemLoader(str(ASSETS)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render_template(env: jinja2.Environment, name: str, values: dict[str, Any]) -> str:
    """Render ``builders/node-image/<name>``.

    Raises:
        BuildError: a syntax error or an undefined value, naming the template file and line.
    """
    path = ASSETS / name
    try:
        return env.get_template(name).render(**values)
    except jinja2.TemplateSyntaxError as e:
        raise BuildError(f"{path}:{e.lineno}: template syntax error: {e.message}") from e
    except jinja2.TemplateError as e:
        line = _template_line(e, str(path))
        where = f"{path}:{line}" if line else str(path)
        raise BuildError(f"{where}: template error: {e}") from e


def _template_line(exc: BaseException, filename: str) -> int | None:
    tb = exc.__traceback__
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line
