"""The ``container-image`` builder: one OCI image per variant arch, bit for bit the same anywhere.

The daemonless backend (the default) needs no daemon and no tool: the recipe's ``files`` (another
artifact's primary output, a file source, or a file or directory of a tree source) are laid out
in the work dir and written as ONE reproducible layer (:func:`nvkr.oci.image.layer_from_tree`)
on top of the base image's layers for the variant's platform (a pinned ``oci`` source, picked
from its index), or on nothing (``scratch``). Config and manifest follow with every time at the
epoch. ``backend: docker`` hands plan and run to :mod:`nvkr.builders.container_image.docker_backend`. Either way
the result has the same shape: every layer (role ``layer``), the config (``config``) and the
manifest (``manifest``), and ``platform``, ``manifestDigest`` and ``configDigest`` in the
metadata, which the planner's ``image-index`` action joins across arches.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tarfile
import zipfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Any

from nvkr.builders import (
    ActionContext,
    ActionSpec,
    Builder,
    PlanRefs,
    Problem,
    ReleaseKind,
    SbomInputs,
    a_kind,
    builder_of,
    source_kind_of,
)
from nvkr.builders.container_image.artifact import ContainerImageArtifact, ImageBase
from nvkr.errors import BuildError
from nvkr.oci import mediatypes as mt
from nvkr.oci.image import (
    Layer,
    StoredImage,
    image_config,
    image_manifest,
    layer_from_tree,
    load_image,
    normalise_layer,
    platform_label,
    platform_of,
)
from nvkr.oci.layout import rfc3339
from nvkr.recipe import Variant
from nvkr.recipe import fieldchecks as fc
from nvkr.recipe.imagefiles import ImageFile

if TYPE_CHECKING:
    from nvkr.action import Action


ANN_REVISION = "org.opencontainers.image.revision"
ANN_SOURCE = "org.opencontainers.image.source"
ANN_BASE_DIGEST = "org.opencontainers.image.base.digest"
ANN_BASE_NAME = "org.opencontainers.image.base.name"
#: Source kinds whose blob is a deterministic tar of a directory tree, and those that are one file.
TREE_KINDS = frozenset({"path", "git"})
FILE_KINDS = frozenset({"url", "pypi"})
#: Builders whose results have no single primary output to put in an image.
NOT_FILES = frozenset({"container-image", "image-index", "release-set"})
#: Source kinds whose lockfile entry names a revision (a commit) or a URL.
REVISION_KINDS = frozenset({"git", "url", "pypi"})
_SUFFIX = {
    mt.OCI_LAYER_TAR_GZIP: ".tar.gz",
    "application/vnd.oci.image.layer.v1.tar+zstd": ".tar.zst",
}


def _file_spec(
    dest: str, entry: ImageFile, refs: PlanRefs, spec: dict[str, Any], role: str
) -> dict[str, Any]:
    """One ``files`` entry as params (checked by :func:`check_files`); adds its source (as
    input ``role``) or dependency to ``spec``."""
    rel = fc.image_path(dest)
    if entry.artifact is not None:
        action = refs.artifact(entry.artifact)
        spec["deps"].append(action.key)
        return {
            "path": rel,
            "artifact": entry.artifact,
            "action": action.key,
            "mode": entry.mode or "0755",
        }
    assert entry.source is not None
    src = refs.source(entry.source)
    spec["inputs"][role] = src.digest
    spec["sources"][role] = src
    if entry.unpack:
        return {
            "path": rel,
            "source": entry.source,
            "input": role,
            "tree": False,
            "unpack": True,
            "select": "",
            "mode": entry.mode,
        }
    if src.entry.get("kind") in TREE_KINDS:
        select = fc.inner_path(entry.path) if entry.path is not None else ""
        return {
            "path": rel,
            "source": entry.source,
            "input": role,
            "tree": True,
            "select": select,
            "mode": entry.mode,
        }
    return {
        "path": rel,
        "source": entry.source,
        "input": role,
        "tree": False,
        "select": "",
        "mode": entry.mode or "0644",
    }


def _check_file(
    here: tuple[str | int, ...], dest: str, entry: ImageFile, bare: bool, variant: Variant
) -> list[Problem]:
    """The problems of one ``files`` entry (see :func:`check_files`); ``bare``: written as a
    plain artifact name."""
    if entry.artifact is not None:
        if entry.unpack or entry.path is not None:
            field = "unpack" if entry.unpack else "path"
            return [
                (
                    (*here, field),
                    f"{field} is for a source; an artifact's file is its primary output, whole",
                    None,
                )
            ]
        builder = builder_of(variant, entry.artifact)
        if builder in NOT_FILES:
            return [
                (
                    here if bare else (*here, "artifact"),
                    f"artifact {entry.artifact!r} is {a_kind(str(builder))}, not a file",
                    "files take artifacts with one primary output (a go-binary, ...)",
                )
            ]
        return [(here, "only a directory tree can go to '/'", None)] if dest == "/" else []
    assert entry.source is not None
    kind = source_kind_of(variant, entry.source)
    if kind is None:
        return []
    if entry.unpack:
        if kind in FILE_KINDS and entry.path is None:
            return []
        return [
            (
                (*here, "unpack"),
                f"unpack takes a file source (a wheel, zip or tar), whole; {entry.source!r} is "
                f"{a_kind(kind)} source" + (" and path selects in it" if entry.path else ""),
                "a path or git source is a tree already: drop unpack",
            )
        ]
    if kind in TREE_KINDS:
        return []
    if kind not in FILE_KINDS:
        return [
            (
                (*here, "source"),
                f"{entry.source!r} is {a_kind(kind)} source, which cannot be a file in an image",
                "files come from url, pypi, path or git sources and from artifacts (an oci "
                "source is a base)",
            )
        ]
    if entry.path is not None:
        return [((*here, "path"), f"{entry.source!r} is a single file; drop 'path'", None)]
    return [(here, "only a directory tree can go to '/'", None)] if dest == "/" else []


def check_files(
    artifact_name: str, artifact: ContainerImageArtifact, variant: Variant
) -> list[Problem]:
    """The kinds ``files``, ``base`` and ``revisionSource`` name: a file is another artifact's
    primary output (not an image), a file source (url, pypi; no ``path``; ``unpack``: its zip or
    tar laid out, anywhere) or a tree source (path, git; the only other kind that can go to
    ``/``); the base is an oci source or a rootfs artifact; the revision comes from a git or url
    source (its commit, its URL)."""
    problems: list[Problem] = []
    at: tuple[str | int, ...] = ("artifacts", artifact_name)
    if isinstance(artifact.base, ImageBase):
        builder = builder_of(variant, artifact.base.rootfs)
        if builder is not None and builder != "rootfs":
            problems.append(
                (
                    (*at, "base", "rootfs"),
                    f"{artifact.base.rootfs!r} is {a_kind(builder)} artifact, not a rootfs",
                    "base: {rootfs: NAME} names an artifact with builder: rootfs",
                )
            )
    elif artifact.base != "scratch":
        kind = source_kind_of(variant, artifact.base)
        if kind is not None and kind != "oci":
            problems.append(
                (
                    (*at, "base"),
                    f"{artifact.base!r} is {a_kind(kind)} source, not an oci image",
                    'base is "scratch", an oci source: {oci: REGISTRY/REPO, digest: sha256:...} '
                    "or {rootfs: ARTIFACT}",
                )
            )
    for dest, raw in sorted(artifact.files.items()):
        entries = raw if isinstance(raw, list) else [raw]
        for n, one in enumerate(entries):
            entry = ImageFile(artifact=one) if isinstance(one, str) else one
            here: tuple[str | int, ...] = (*at, "files", dest) + (
                (n,) if isinstance(raw, list) else ()
            )
            problems += _check_file(here, dest, entry, isinstance(one, str), variant)
    if artifact.revisionSource is not None:
        kind = source_kind_of(variant, artifact.revisionSource)
        if kind is not None and kind not in REVISION_KINDS:
            problems.append(
                (
                    (*at, "revisionSource"),
                    f"{artifact.revisionSource!r} is {a_kind(kind)} source, which has no commit or "
                    "URL",
                    "name a git source (its commit and URL) or a url source",
                )
            )
    return problems


def execution_params(artifact: ContainerImageArtifact) -> dict[str, Any]:
    """The params both backends share: the image config's execution fields (entrypoint, cmd,
    env, user, workdir, labels; maps sorted) and the layer compression."""
    return {
        "entrypoint": list(artifact.entrypoint),
        "cmd": list(artifact.cmd),
        "env": dict(sorted(artifact.env.items())),
        "user": artifact.user,
        "workdir": artifact.workdir,
        "labels": dict(sorted(artifact.labels.items())),
        "compression": artifact.compression,
    }


def image_annotations(
    where: str, artifact: ContainerImageArtifact, refs: PlanRefs, base: dict[str, Any] | None
) -> dict[str, str]:
    """The manifest annotations known at plan time (``created`` is added at run time)."""
    derived: dict[str, str] = {}
    if base is not None:
        derived[ANN_BASE_DIGEST] = str(base["digest"])
        if not str(base["ref"]).startswith("oci-layout:"):
            derived[ANN_BASE_NAME] = str(base["ref"])
    if artifact.version is not None:
        derived[mt.ANN_VERSION] = artifact.version
    if artifact.revisionSource is not None:
        entry = refs.source(artifact.revisionSource).entry
        if entry.get("commit"):
            derived[ANN_REVISION] = str(entry["commit"])
        if entry.get("url"):
            derived[ANN_SOURCE] = str(entry["url"])
    # the recipe's own annotations win over derived ones
    return dict(sorted({**derived, **artifact.annotations}.items()))


def plan_daemonless(
    artifact_name: str, artifact: ContainerImageArtifact, variant: Variant, refs: PlanRefs
) -> ActionSpec:
    """The action of one daemonless image for ``variant``.

    Inputs: ``base`` (the pinned digest of the base oci source, absent for scratch and a rootfs)
    and ``file:<dest>`` per source file (the source's blob; ``file:<dest>#<n>`` for the entries
    of a list). Deps: the actions of artifact files and of a rootfs base. Params (everything that
    enters the bytes): ``backend`` ``"daemonless"``, ``platform`` (``{"os": "linux",
    "architecture", ["variant": "v8"]}``), ``base`` (source name, ``"scratch"`` or ``{"rootfs":
    NAME, "action": KEY}``), ``files`` (sorted by destination, a list's entries in order:
    ``path`` relative to ``/``, ``artifact`` + ``action`` or ``source`` + ``input`` + ``tree`` +
    ``select`` [+ ``unpack``], ``mode`` ``"0755"``-style or None), the execution config
    (``entrypoint``, ``cmd``, ``env``, ``user``, ``workdir``, ``labels``), ``annotations`` and
    ``compression``.

    Raises:
        RecipeReferenceError: an unknown source or artifact (from ``refs``); the kinds named are
            checked by :func:`check_files`, the paths by the model.
    """
    where = f"artifact {artifact_name!r}"
    spec: dict[str, Any] = {"inputs": {}, "sources": {}, "deps": []}
    base_entry: dict[str, Any] | None = None
    base_param: str | dict[str, str] = (
        artifact.base if isinstance(artifact.base, str) else {"rootfs": artifact.base.rootfs}
    )
    if isinstance(artifact.base, ImageBase):
        tree = refs.artifact(artifact.base.rootfs)  # a rootfs artifact: check_files ran
        spec["deps"].append(tree.key)
        base_param = {"rootfs": artifact.base.rootfs, "action": tree.key}
    elif artifact.base != "scratch":
        base = refs.source(artifact.base)
        spec["inputs"]["base"] = base.digest
        spec["sources"]["base"] = base
        base_entry = base.entry
    files = []
    for dest, raw in sorted(artifact.files.items()):
        # a list lays several entries out at one path, in order; each is its own input
        for n, one in enumerate(raw if isinstance(raw, list) else [raw]):
            entry = ImageFile(artifact=one) if isinstance(one, str) else one
            role = f"file:{dest}#{n}" if isinstance(raw, list) else f"file:{dest}"
            files.append(_file_spec(dest, entry, refs, spec, role))
    params: dict[str, Any] = {
        "backend": "daemonless",
        "platform": platform_of(variant.arch),
        "base": base_param,
        "files": files,
        **execution_params(artifact),
        "annotations": image_annotations(where, artifact, refs, base_entry),
    }
    return ActionSpec(
        params=params,
        inputs=spec["inputs"],
        sources=spec["sources"],
        deps=tuple(sorted(set(spec["deps"]))),
    )


# -- run ---------------------------------------------------------------------------------------
def _parents(root: Path, rel: str) -> Path:
    """``root / rel`` with its parent directories made (mode 0755, whatever the umask)."""
    here = root
    for part in PurePosixPath(rel).parts[:-1]:
        here = here / part
        if here.is_symlink() or (here.exists() and not here.is_dir()):
            raise BuildError(f"/{rel}: /{here.relative_to(root)} is already a file in the image")
        if not here.exists():
            here.mkdir()
            os.chmod(here, 0o755)
    return root / rel


def _put_file(src: Path, root: Path, rel: str, mode: int) -> None:
    """Copy ``src`` (a file or symlink) to ``root/rel`` with ``mode``, replacing a file there."""
    target = _parents(root, rel)
    if target.is_dir() and not target.is_symlink():
        raise BuildError(f"/{rel}: a directory is already at that path in the image")
    if target.exists() or target.is_symlink():
        target.unlink()
    shutil.copyfile(src, target, follow_symlinks=False)
    if not target.is_symlink():
        os.chmod(target, mode)


def _primary(ctx: ActionContext, f: dict[str, Any]) -> Path:
    result = ctx.deps[f["action"]]
    found = [o for o in result["outputs"] if o.get("role") == "primary"]
    if len(found) != 1:
        raise BuildError(
            f"artifact {f['artifact']!r} has {len(found)} primary outputs, expected one file"
        )
    return ctx.store.checked_path(found[0]["digest"])


def _put_tree(
    ctx: ActionContext, i: int, f: dict[str, Any], rootfs: Path, modes: dict[str, int]
) -> None:
    staging = ctx.workdir / f"source-{i}"
    staging.mkdir()
    with tarfile.open(ctx.input_path(f["input"]), mode="r:*") as tar:
        # 'tar' and not 'data': symlinks to absolute paths are normal inside an image
        tar.extractall(staging, filter="tar")
    chosen = staging / f["select"] if f["select"] else staging
    # a symlinked directory on the way to 'path' must not lead out of the source (to the host)
    way = chosen.parent if f["select"] else staging
    if not Path(os.path.realpath(way)).is_relative_to(os.path.realpath(staging)):
        raise BuildError(f"source {f['source']!r}: {f['select']!r} leads outside the source")
    if not chosen.exists() and not chosen.is_symlink():
        raise BuildError(
            f"source {f['source']!r} has no {f['select']!r}",
            hint="files.<dest>.path is relative to the root of the source",
        )
    rel = f["path"]
    mode = int(f["mode"], 8) if f["mode"] else None
    if chosen.is_dir() and not chosen.is_symlink():
        target = _parents(rootfs, rel) if rel else rootfs
        # merging into files laid out before: a symlink there would have copytree write through
        # it, possibly outside the work dir
        if target.is_symlink():
            raise BuildError(f"source {f['source']!r} goes to /{rel}, which is already a symlink")
        for dirpath, dirnames, filenames in os.walk(target):
            for name in (*dirnames, *filenames):
                if os.path.islink(os.path.join(dirpath, name)):
                    inner = os.path.relpath(os.path.join(dirpath, name), rootfs)
                    raise BuildError(
                        f"source {f['source']!r} goes to /{rel}, where /{inner} is already a "
                        "symlink; give overlapping files separate destinations"
                    )
        shutil.copytree(chosen, target, symlinks=True, dirs_exist_ok=True)
        if not rel:
            os.chmod(rootfs, 0o755)
        if mode is not None:
            for dirpath, _, filenames in os.walk(chosen):
                for name in filenames:
                    inner = os.path.relpath(os.path.join(dirpath, name), chosen)
                    if not os.path.islink(os.path.join(dirpath, name)):
                        modes[str(PurePosixPath(rel, inner))] = mode
        return
    if not rel:
        raise BuildError(f"source {f['source']!r}: {f['select']!r} is a file; it cannot be '/'")
    if mode is None:  # the source's own mode (its tar holds 0644 or 0755)
        mode = 0o755 if os.lstat(chosen).st_mode & 0o111 else 0o644
    _put_file(chosen, rootfs, rel, mode)
    modes[rel] = mode


def _rootfs_layer(ctx: ActionContext, base: dict[str, str]) -> Layer:
    """The rootfs artifact's tar as a layer: every member kept as mmdebstrap wrote it (owners,
    modes, setuid bits, links, device nodes, file capabilities), sorted, times clamped to the
    epoch, compressed like the image's other layers (:func:`nvkr.oci.image.normalise_layer`)."""
    result = ctx.deps[base["action"]]
    found = [o for o in result["outputs"] if o.get("role") == "primary"]
    if len(found) != 1:
        raise BuildError(f"base rootfs {base['rootfs']!r} has {len(found)} primary outputs")
    with open(ctx.store.checked_path(found[0]["digest"]), "rb") as tar:
        return normalise_layer(
            tar, ctx.store, epoch=ctx.action.epoch, compression=ctx.action.params["compression"]
        )


def _unpack(ctx: ActionContext, f: dict[str, Any], root: Path, modes: dict[str, int]) -> None:
    """Lay the members of a zip (a wheel) or tar source out under ``root/path``: regular files
    and directories, each mode 0755 when the archive marks it executable, else 0644 (a wheel's
    installer would do the same). A file already in the image is an error, not overwritten.

    Raises:
        BuildError: a member leading outside the destination, a wheel's ``.data`` directory
            (scripts, headers: they need an installer), a member that is neither file nor
            directory, or one already in the image.
    """
    where = f"source {f['source']!r} (unpacked to /{f['path']})"
    path = ctx.input_path(f["input"])
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                kind = (info.external_attr >> 16) & 0o170000
                if kind not in (0, 0o100000, 0o040000):
                    raise BuildError(
                        f"{where}: member {info.filename!r} is not a file or directory"
                    )
                with archive.open(info) as data:
                    mode = (info.external_attr >> 16) & 0o777
                    _unpack_member(where, f, root, modes, info.filename, info.is_dir(), mode, data)
        return
    if not tarfile.is_tarfile(path):
        raise BuildError(f"{where}: neither a zip nor a tar archive")
    with tarfile.open(path, mode="r:*") as tar:
        for m in tar.getmembers():
            if not (m.isfile() or m.isdir()):
                raise BuildError(f"{where}: member {m.name!r} is not a file or directory")
            member = tar.extractfile(m) if m.isfile() else None
            _unpack_member(where, f, root, modes, m.name, m.isdir(), m.mode, member)


def _unpack_member(
    where: str,
    f: dict[str, Any],
    root: Path,
    modes: dict[str, int],
    name: str,
    is_dir: bool,
    mode: int,
    data: IO[bytes] | None,
) -> None:
    inner = PurePosixPath(name)
    if inner.is_absolute() or ".." in inner.parts:
        raise BuildError(f"{where}: member {name!r} leads outside its destination")
    if inner.parts and inner.parts[0].endswith(".data"):
        raise BuildError(
            f"{where}: member {name!r}: a wheel's {inner.parts[0]}/ directory "
            "(scripts, headers, data) needs an installer",
            hint="unpack takes wheels whose files all go to site-packages",
        )
    rel = str(PurePosixPath(f["path"], inner)) if f["path"] else str(inner)
    if is_dir or data is None:
        _mkdirs(root, rel)
        return
    target = _parents(root, rel)
    if target.exists() or target.is_symlink():
        raise BuildError(f"{where}: /{rel} is already in the image")
    with open(target, "wb") as dst:
        shutil.copyfileobj(data, dst)
    modes[rel] = 0o755 if mode & 0o111 else 0o644
    os.chmod(target, modes[rel])


def _mkdirs(root: Path, rel: str) -> None:
    """``root/rel`` and its parents as directories (mode 0755, whatever the umask)."""
    target = _parents(root, rel)
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise BuildError(f"/{rel}: a file is already at that path in the image")
    if not target.exists():
        target.mkdir()
        os.chmod(target, 0o755)


def _assemble(ctx: ActionContext, rootfs: Path) -> dict[str, int]:
    """Lay the files out under ``rootfs``; return the explicit modes (relative path → mode)."""
    modes: dict[str, int] = {}
    for i, f in enumerate(ctx.action.params["files"]):
        if f.get("unpack"):
            if f["path"]:
                _mkdirs(rootfs, f["path"])
            _unpack(ctx, f, rootfs, modes)
        elif "action" in f:
            mode = int(f["mode"], 8)
            _put_file(_primary(ctx, f), rootfs, f["path"], mode)
            modes[f["path"]] = mode
        elif f["tree"]:
            _put_tree(ctx, i, f, rootfs, modes)
        else:
            mode = int(f["mode"], 8)
            _put_file(ctx.input_path(f["input"]), rootfs, f["path"], mode)
            modes[f["path"]] = mode
    return modes


def _warn_dynamic_on_scratch(ctx: ActionContext) -> None:
    """Warn about each artifact file that needs an ELF interpreter (its go-binary result says
    ``linkage: dynamic``) on ``scratch``, where none is: such an image cannot start."""
    p = ctx.action.params
    if p["base"] != "scratch":
        return
    paths = {f["path"] for f in p["files"]}
    for f in p["files"]:
        meta = (ctx.deps[f["action"]].get("metadata") or {}) if "action" in f else {}
        interpreter = str(meta.get("interpreter") or "")
        if meta.get("linkage") != "dynamic" or interpreter.lstrip("/") in paths:
            continue
        ctx.warn(
            f"image {ctx.action.name}: /{f['path']} (artifact '{f['artifact']}') is dynamically "
            f"linked (ELF interpreter {interpreter or '?'}) and cannot start on base scratch, "
            "which has no ELF interpreter and no libc",
            hint='link it statically (go-binary ldflags: ["-extldflags=-static"]), build it '
            "with cgo: false (CGO_ENABLED=0), or put it on a base image that has libc",
        )


def run_daemonless(ctx: ActionContext) -> None:
    """Write the image: files layer, config, manifest (see the module doc for the outputs).
    A dynamically linked binary on ``scratch`` gets a warning (it cannot start there).

    Raises:
        BuildError: the base has no image for the variant's platform (names base and platform),
            an artifact file has no primary output, a ``path`` is missing from its source, or
            two files collide.
        IntegrityError: the base's closure is not complete in the store.
    """
    p = ctx.action.params
    epoch = ctx.action.epoch
    platform = p["platform"]
    base: StoredImage | None = None
    if "base" in ctx.action.inputs:
        base = load_image(
            ctx.store,
            ctx.action.inputs["base"],
            platform,
            what=f"base {p['base']!r} ({platform_label(platform)})",
        )
    new_layers: list[Layer] = []
    history: list[dict[str, Any]] = []
    if isinstance(p["base"], dict):  # {rootfs, action}: the tree's tar, as the first layer
        new_layers.append(_rootfs_layer(ctx, p["base"]))
        history.append({"created_by": f"nvkr container-image: rootfs {p['base']['rootfs']}"})
    dests = " ".join(dict.fromkeys("/" + f["path"] for f in p["files"]))
    if p["files"] or (base is None and not new_layers):
        rootfs = ctx.workdir / "rootfs"
        rootfs.mkdir()
        os.chmod(rootfs, 0o755)
        modes = _assemble(ctx, rootfs)
        new_layers.append(
            layer_from_tree(
                rootfs, ctx.store, epoch=epoch, compression=p["compression"], modes=modes
            )
        )
        history.append({"created_by": f"nvkr container-image: files {dests}".rstrip()})
    elif not new_layers:
        history = [{"created_by": "nvkr container-image: config", "empty_layer": True}]
    config = image_config(
        arch=platform["architecture"],
        diff_ids=[layer.diff_id for layer in new_layers],
        epoch=epoch,
        entrypoint=p["entrypoint"] or None,
        cmd=p["cmd"] or None,
        env=p["env"],
        user=p["user"],
        workdir=p["workdir"],
        labels=p["labels"],
        history=history,
        base_config=base.config if base is not None else None,
    )
    config_info = ctx.store.add_bytes(config)
    config_desc = {
        "mediaType": mt.OCI_IMAGE_CONFIG,
        "digest": config_info.digest,
        "size": config_info.size,
    }
    layers = [
        *(base.layers if base is not None else []),
        *(layer.descriptor() for layer in new_layers),
    ]
    annotations = {mt.ANN_CREATED: rfc3339(epoch), **p["annotations"]}
    manifest_info = ctx.store.add_bytes(image_manifest(config_desc, layers, annotations))
    for i, layer in enumerate(layers):
        name = f"layer-{i}{_SUFFIX.get(layer['mediaType'], '')}"
        _record(ctx, name, layer, "layer")
    _record(ctx, "config.json", config_desc, "config")
    manifest_desc = {
        "mediaType": mt.OCI_MANIFEST,
        "digest": manifest_info.digest,
        "size": manifest_info.size,
    }
    _record(ctx, "manifest.json", manifest_desc, "manifest")
    ctx.metadata.update(
        {
            "platform": dict(platform),
            "manifestDigest": manifest_info.digest,
            "configDigest": config_info.digest,
        }
    )
    _warn_dynamic_on_scratch(ctx)


def _record(ctx: ActionContext, name: str, desc: dict[str, Any], role: str) -> None:
    """Record a blob the store already holds as an output of this action."""
    ctx.outputs.append(
        {
            "name": name,
            "digest": desc["digest"],
            "size": desc["size"],
            "mediaType": desc["mediaType"],
            "role": role,
        }
    )


class ContainerImageBuilder(Builder[ContainerImageArtifact]):
    """Builder ``container-image``: per-arch OCI images, joined by the planner's image index."""

    name = "container-image"
    version = "1"
    per_arch = True
    artifact_model = ContainerImageArtifact
    release_kind = ReleaseKind.IMAGE

    def check(
        self, artifact_name: str, artifact: ContainerImageArtifact, variant: Variant
    ) -> list[Problem]:
        """See :func:`check_files`, and for ``backend: docker`` the context's kind."""
        problems = check_files(artifact_name, artifact, variant)
        if artifact.backend == "docker":
            from nvkr.builders.container_image import docker_backend

            problems += docker_backend.check(artifact_name, artifact, variant)
        return problems

    def plan(
        self, artifact_name: str, artifact: ContainerImageArtifact, variant: Variant, refs: PlanRefs
    ) -> ActionSpec:
        """See :func:`plan_daemonless`, or :func:`nvkr.builders.container_image.docker_backend.plan` for
        ``backend: docker`` (its params always carry ``"backend": "docker"``)."""
        if artifact.backend == "docker":
            from nvkr.builders.container_image import docker_backend

            spec = docker_backend.plan(artifact_name, artifact, variant, refs)
            if spec.params.get("backend") != "docker":
                spec = dataclasses.replace(spec, params={**spec.params, "backend": "docker"})
            return spec
        return plan_daemonless(artifact_name, artifact, variant, refs)

    def sbom_inputs(self, action: Action, actions: Mapping[str, Action]) -> SbomInputs:
        """The artifacts the image holds as files (a Go binary's build info names the modules
        linked into that file)."""
        files = action.params.get("files") or []
        return SbomInputs(
            binaries=tuple(f["action"] for f in files if isinstance(f.get("action"), str))
        )

    def run(self, ctx: ActionContext) -> None:
        """See :func:`run_daemonless`, or :func:`nvkr.builders.container_image.docker_backend.run`."""
        if ctx.action.params.get("backend") == "docker":
            from nvkr.builders.container_image import docker_backend

            docker_backend.run(ctx)
            return
        run_daemonless(ctx)
