"""Staging a node image's tree: what the ``node-image`` builder puts onto the rootfs.

:func:`stage` writes the agent (``/usr/bin/node-agent``), the kube-packages binaries, the
recipe's ``files``, the SPIRE agent with its unit and agent.conf (``spireAgent``:
:mod:`nvkr.builders.node_image.spire`) and the systemd units, containerd and kubelet
configuration rendered from the Jinja2 templates in the builder's assets (:data:`TEMPLATES`,
every one rendered on every build), and ``/etc/nvkr/manifest.json`` listing the staged binaries' sha256. In a tree holding Debian's
cloud-init it writes nvkr's cloud-init configuration (:data:`CLOUD_INIT_CFG`), and in every tree
it clears what a first run leaves (:func:`clear_first_run`). The tree helpers keep every path
inside the tree and every mtime at the epoch.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
from pathlib import Path
from typing import Any

import jinja2
import jinja2.sandbox

from nvkr.action import ActionResult
from nvkr.builders.api import ActionContext
from nvkr.builders.assets import asset_dir
from nvkr.builders.node_image.params import (
    ArtifactFile,
    NodeImageParams,
    SourceFile,
    SpireAgentParams,
)
from nvkr.builders.node_image.spire import (
    CONFIG_TEMPLATE,
    SPIRE_AGENT_BINARY,
    SPIRE_AGENT_CONF,
    SPIRE_AGENT_UNIT,
    SPIRE_ASSETS,
    UNIT_TEMPLATE,
)
from nvkr.builders.node_image.spire import template_values as spire_template_values
from nvkr.canonical import canonical_json
from nvkr.errors import BuildError
from nvkr.jsondoc import json_objects

#: Builder assets: the Jinja2 templates and diskimage-builder elements.
ASSETS = asset_dir("node-image")
#: The templates in ASSETS the builder renders (all of them on every build).
TEMPLATES = (
    "nvkr-node-agent.service.j2",
    "containerd-config.toml.j2",
    "kubelet.service.j2",
    "20-nvkr-kubelet.conf.j2",
    "kubelet-extra-args.j2",
    "kubelet-config.yaml.j2",
    "kubelet-image-settings.yaml.j2",
    "kubeadm-kubelet-patch.yaml.j2",
    "kubernetes-modules.conf.j2",
    "kubernetes-sysctl.conf.j2",
)
_UNITS = "etc/systemd/system"
#: kubeadm's kubelet contract: the drop-in, the KubeletConfiguration kubeadm init and join
#: replace (the image's default), and the script the drop-in runs before each start to write
#: KUBELET_EXTRA_ARGS (the node agent's labels, the recipe's extraLabels and extraArgs).
KUBELET_DROPIN = f"{_UNITS}/kubelet.service.d/20-nvkr.conf"
KUBELET_CONFIG = "var/lib/kubelet/config.yaml"
KUBELET_EXTRA_ARGS_SCRIPT = "usr/lib/nvkr/kubelet-extra-args"
#: The image's kubeadm patches directory (nvkr's Cluster API export sets it as the init and join
#: configurations' ``patches.directory``: nvkr.delivery.export.capi.kubeadm.KUBEADM_PATCHES) and
#: its strategic-merge patch of the KubeletConfiguration kubeadm writes: the image's kubelet
#: settings (kubelet-image-settings.yaml.j2, which the default config.yaml includes too).
KUBEADM_PATCHES_DIR = "etc/nvkr/kubeadm-patches"
KUBEADM_KUBELET_PATCH = f"{KUBEADM_PATCHES_DIR}/kubeletconfiguration+strategic.yaml"
_WANTS = f"{_UNITS}/multi-user.target.wants"
#: nvkr's cloud-init configuration (the datasources), copied from ASSETS into trees that hold
#: the cloud-init package.
CLOUD_INIT_CFG = "etc/cloud/cloud.cfg.d/90-nvkr.cfg"
#: /etc/machine-id of a node image: systemd's first-boot marker (machine-id(5), "First Boot
#: Semantics": an empty file would make the node's first boot no first boot at all).
MACHINE_ID_FIRST_BOOT = b"uninitialized\n"


# -- staging -------------------------------------------------------------------------------------
def stage(ctx: ActionContext, tree: Path, rootfs: ActionResult) -> list[dict[str, Any]]:
    """Stage the agent, the kube packages, ``files`` and the rendered units into ``tree``;
    returns every file staged (``path``, ``mode`` as four octal digits, ``binary``: listed in
    the manifest, ``sha1``, ``sha256``, ``size`` in bytes, ``elf``), sorted by path. The units'
    enabling symlinks are not listed (the unit files are)."""
    p = NodeImageParams.model_validate(ctx.action.params)
    staging = _Staging(tree)
    packages = {str(pkg["name"]) for pkg in json_objects(rootfs.metadata.get("packages"))}
    nvidia = _nvidia_runtime(p.nvidiaRuntime, packages)
    _stage_deps(ctx, staging, p.deps)
    for item in p.files:
        data = _file_bytes(ctx, item)
        default = 0o755 if isinstance(item, ArtifactFile) else 0o644
        mode = int(item.mode, 8) if item.mode else default
        staging.put(item.path.lstrip("/"), data, mode, binary=bool(mode & 0o111))
    present = {
        "agent": (tree / "usr/bin/node-agent").is_file(),
        "kubelet": (tree / "usr/bin/kubelet").is_file(),
        # Debian's containerd, or Docker's containerd.io (containerd 2.x reads config v2)
        "containerd": "containerd" in packages or "containerd.io" in packages,
    }
    values = {
        "arch": p.arch,
        "gpu": p.gpu,
        "kubernetes": p.kubernetes,
        "kubernetesVersion": p.kubernetesVersion,
        "nvidiaRuntime": nvidia,
        "kubelet": p.kubelet,
        "sandboxImage": p.sandboxImage,
        "present": present,
    }
    # every template is rendered, used or not: a broken one fails every build, not only
    # the builds of recipes that happen to stage a kubelet
    env = _template_env()
    texts = {t: render_template(env, t, values) for t in TEMPLATES}
    for template, dest, enable in _units(present):
        mode = 0o755 if dest == KUBELET_EXTRA_ARGS_SCRIPT else 0o644
        staging.put(dest, texts[template].encode(), mode, binary=False)
        if enable:
            staging.enable(dest)
    if p.spireAgent is not None:
        _stage_spire(ctx, staging, p.spireAgent, values)
    if "cloud-init" in packages:
        data = (ASSETS / "cloud-init-nvkr.cfg").read_bytes()
        staging.put(CLOUD_INIT_CFG, data, 0o644, binary=False)
    clear_first_run(tree)
    return staging.finish()


def clear_first_run(tree: Path) -> None:
    """Leave nothing of a first boot in ``tree``, so every node made from the image starts its
    own: ``/etc/machine-id`` is :data:`MACHINE_ID_FIRST_BOOT` (systemd generates the node's id
    and runs its first-boot units; ``/var/lib/dbus/machine-id`` goes unless it is a link),
    cloud-init's instance state (``/var/lib/cloud/*``) and SSH host keys
    (``/etc/ssh/ssh_host_*``) go. ``systemd-firstboot.service`` is masked: on a first boot it
    would ask on the console for a locale, a time zone and a root password, and a node has no
    one to answer (cloud-init configures what its user-data asks for)."""
    machine_id = _inside(tree, "etc/machine-id")
    _mkdirs(machine_id.parent)
    if machine_id.is_symlink() or machine_id.exists():
        machine_id.unlink()
    machine_id.write_bytes(MACHINE_ID_FIRST_BOOT)
    os.chmod(machine_id, 0o644)
    dbus_id = _inside(tree, "var/lib/dbus/machine-id")
    if dbus_id.is_file() and not dbus_id.is_symlink():
        dbus_id.unlink()
    cloud = _inside(tree, "var/lib/cloud")
    if cloud.is_dir() and not cloud.is_symlink():
        for entry in cloud.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    ssh = _inside(tree, "etc/ssh")
    if ssh.is_dir() and not ssh.is_symlink():
        for key in ssh.glob("ssh_host_*"):
            key.unlink()
    if _inside(tree, "usr/lib/systemd/system/systemd-firstboot.service").exists():
        mask = _inside(tree, f"{_UNITS}/systemd-firstboot.service")
        _mkdirs(mask.parent)
        if mask.is_symlink() or mask.exists():
            mask.unlink()
        mask.symlink_to("/dev/null")


def _file_bytes(ctx: ActionContext, item: ArtifactFile | SourceFile) -> bytes:
    """The bytes of one ``files`` entry: an artifact's primary output, a source or a member
    of a source tar."""
    if isinstance(item, ArtifactFile):
        return primary_output(ctx, ctx.deps[item.action], item.path).read_bytes()
    blob = ctx.input_path(item.input)
    member = item.member
    if not member:
        return blob.read_bytes()
    try:
        with tarfile.open(blob) as tf:
            f = tf.extractfile(member.strip("/"))
            if f is None:
                raise KeyError(member)
            return f.read()
    except (KeyError, tarfile.ReadError) as e:
        raise BuildError(f"files: {item.path}: no file {member!r} in its source ({e})") from e


# -- staging ---------------------------------------------------------------------------
class _Staging:
    """Files put into the tree being staged, with their digests and modes (the machine image's
    SBOM lists them all); the binaries among them go into the manifest."""

    def __init__(self, tree: Path) -> None:
        self.tree = tree
        self.staged: dict[str, dict[str, Any]] = {}

    def put(self, rel: str, data: bytes, mode: int, *, binary: bool) -> None:
        """Write ``data`` at ``rel`` with ``mode`` (replacing what is there, and what was
        recorded for it) and record it with its digests, its mode and whether it is a binary
        (which the manifest lists)."""
        path = _inside(self.tree, rel)
        _mkdirs(path.parent)
        if path.is_symlink() or path.exists():
            path.unlink()
        path.write_bytes(data)
        os.chmod(path, mode)
        where = "/" + rel.lstrip("/")
        self.staged[where] = {
            "path": where,
            "mode": f"{mode & 0o7777:04o}",
            "binary": binary,
            "sha1": hashlib.sha1(data, usedforsecurity=False).hexdigest(),
            "sha256": hashlib.sha256(data).hexdigest(),
            "size": len(data),
            "elf": data[:4] == b"\x7fELF",
        }

    def enable(self, dest: str) -> None:
        """Enable the systemd unit at ``dest`` (a link in multi-user.target.wants)."""
        link = _inside(self.tree, f"{_WANTS}/{Path(dest).name}")
        _mkdirs(link.parent)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(f"/{dest}")

    def finish(self) -> list[dict[str, Any]]:
        """Write ``/etc/nvkr/manifest.json`` (the staged binaries' sha256) when there are any;
        return every staged file (the manifest too) sorted by path."""
        binaries = [s for _, s in sorted(self.staged.items()) if s["binary"]]
        if binaries:
            files = [{"path": s["path"], "sha256": s["sha256"]} for s in binaries]
            data = canonical_json({"files": files}) + b"\n"
            self.put("etc/nvkr/manifest.json", data, 0o644, binary=False)
        return [s for _, s in sorted(self.staged.items())]


def _nvidia_runtime(wanted: bool | None, packages: set[str]) -> bool:
    """Whether containerd's nvidia handler is the default runtime: ``nvidiaRuntime``, or by
    default when the rootfs holds nvidia-container-toolkit.

    Raises:
        BuildError: it is asked for without the toolkit.
    """
    toolkit = "nvidia-container-toolkit" in packages
    nvidia = wanted if wanted is not None else toolkit
    if nvidia and not toolkit:
        raise BuildError(
            "nvidiaRuntime: true, but the rootfs holds no nvidia-container-toolkit package "
            "(containerd's nvidia handler runs its nvidia-container-runtime)",
            hint="add nvidia-container-toolkit from NVIDIA's apt repository to the apt "
            "source, or leave nvidiaRuntime unset",
        )
    return nvidia


def _stage_spire(
    ctx: ActionContext, staging: _Staging, spire: SpireAgentParams, image: dict[str, Any]
) -> None:
    """The SPIRE agent: its binary, agent.conf (the recipe's template, or the builder's) and
    its enabled unit (:mod:`nvkr.builders.node_image.spire`). Both builder templates are
    rendered, the recipe's config or not."""
    binary = spire.binary
    data = _file_bytes(ctx, binary)
    mode = int(binary.mode, 8) if binary.mode else 0o755
    staging.put(SPIRE_AGENT_BINARY.lstrip("/"), data, mode, binary=True)
    values = spire_template_values(spire, image)
    env = _template_env(SPIRE_ASSETS)
    texts = {t: render_template(env, t, values) for t in (CONFIG_TEMPLATE, UNIT_TEMPLATE)}
    config = texts[CONFIG_TEMPLATE]
    if spire.config is not None:
        src = ctx.action.sources.get(spire.config.input)
        member = f", path {spire.config.member}" if spire.config.member else ""
        field = f"artifacts.{ctx.action.artifact}.spireAgent.config"
        where = f"{field} (source {src.name if src else spire.config.input}{member})"
        config = render_recipe_template(_file_bytes(ctx, spire.config), where, values)
    staging.put(SPIRE_AGENT_CONF.lstrip("/"), config.encode(), 0o644, binary=False)
    unit = SPIRE_AGENT_UNIT.lstrip("/")
    staging.put(unit, texts[UNIT_TEMPLATE].encode(), 0o644, binary=False)
    staging.enable(unit)


def _stage_deps(ctx: ActionContext, staging: _Staging, deps: dict[str, str]) -> None:
    """The agent binary as /usr/bin/node-agent and every file of the kube-packages tar."""
    if "agent" in deps:
        agent = primary_output(ctx, ctx.deps[deps["agent"]], "agent")
        staging.put("usr/bin/node-agent", agent.read_bytes(), 0o755, binary=True)
    if "kubePackages" in deps:
        kube_tar = primary_output(ctx, ctx.deps[deps["kubePackages"]], "kube-packages")
        with tarfile.open(kube_tar) as tf:
            for member in tf.getmembers():
                if member.isfile():
                    f = tf.extractfile(member)
                    assert f is not None
                    staging.put(member.name, f.read(), 0o755, binary=True)


def _units(present: dict[str, bool]) -> list[tuple[str, str, bool]]:
    """``(template, path in the tree, enable the unit)`` for what the tree holds."""
    rendered: list[tuple[str, str, bool]] = []
    if present["agent"]:
        rendered.append(("nvkr-node-agent.service.j2", f"{_UNITS}/nvkr-node-agent.service", True))
    if present["containerd"]:
        rendered.append(("containerd-config.toml.j2", "etc/containerd/config.toml", False))
    if present["kubelet"]:
        rendered += [
            ("kubelet.service.j2", f"{_UNITS}/kubelet.service", True),
            ("20-nvkr-kubelet.conf.j2", KUBELET_DROPIN, False),
            ("kubelet-extra-args.j2", KUBELET_EXTRA_ARGS_SCRIPT, False),
            ("kubelet-config.yaml.j2", KUBELET_CONFIG, False),
            ("kubeadm-kubelet-patch.yaml.j2", KUBEADM_KUBELET_PATCH, False),
            ("kubernetes-modules.conf.j2", "etc/modules-load.d/kubernetes.conf", False),
            ("kubernetes-sysctl.conf.j2", "etc/sysctl.d/90-kubernetes.conf", False),
        ]
    return rendered


# -- the tree and the templates ---------------------------------------------------------------
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


def primary_output(ctx: ActionContext, result: ActionResult, what: str) -> Path:
    return ctx.store.checked_path(result.output("primary", what).digest)


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


def _template_env(root: Path | None = None, *, loader: bool = True) -> jinja2.Environment:
    """The sandboxed Jinja2 environment of the templates in ``root`` (default :data:`ASSETS`);
    without a ``loader``, of a recipe's template rendered from its text
    (:func:`render_recipe_template`)."""
    return jinja2.sandbox.SandboxedEnvironment(
        loader=jinja2.FileSystemLoader(str(root or ASSETS)) if loader else None,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render_template(env: jinja2.Environment, name: str, values: dict[str, Any]) -> str:
    """Render ``<name>`` of the environment's directory (``builders/node-image``,
    ``builders/spire-agent``).

    Raises:
        BuildError: a syntax error or an undefined value, naming the template file and line.
    """
    loader = env.loader
    assert isinstance(loader, jinja2.FileSystemLoader)
    path = Path(loader.searchpath[0]) / name
    try:
        return env.get_template(name).render(**values)
    except jinja2.TemplateSyntaxError as e:
        raise BuildError(f"{path}:{e.lineno}: template syntax error: {e.message}") from e
    except jinja2.TemplateError as e:
        line = _template_line(e, str(path))
        where = f"{path}:{line}" if line else str(path)
        raise BuildError(f"{where}: template error: {e}") from e


def render_recipe_template(text: bytes, where: str, values: dict[str, Any]) -> str:
    """Render a template the recipe gives (``spireAgent.config``), ``where`` naming it (the
    field, its source and path).

    Raises:
        BuildError: the text is not UTF-8, has a syntax error or uses an undefined value,
            naming ``where``, the line and the values a template is given.
    """
    try:
        source = text.decode()
    except UnicodeDecodeError as e:
        raise BuildError(f"{where}: not UTF-8 text (byte {e.start}), not a template") from e
    from nvkr.bounds.jinja import BoundedSandbox, TemplateLimit, render
    from nvkr.errors import LimitError

    given = "the template is given " + ", ".join(sorted(values))
    try:
        env = BoundedSandbox(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
        return render(env.from_string(source), values)
    except TemplateLimit as e:
        raise LimitError(f"{where}: template: {e}", hint=given) from None
    except jinja2.TemplateSyntaxError as e:
        raise BuildError(
            f"{where}, line {e.lineno}: template syntax error: {e.message}", hint=given
        ) from e
    except jinja2.TemplateError as e:
        line = _template_line(e, "<template>")
        at = f", line {line}" if line else ""
        raise BuildError(f"{where}{at}: template error: {e}", hint=given) from e


def _template_line(exc: BaseException, filename: str) -> int | None:
    tb = exc.__traceback__
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line
