"""The ``container-image`` builder: one OCI image per variant arch, bit for bit the same anywhere.

The daemonless backend (the default) needs no daemon and no tool: the recipe's ``files`` (another
artifact's primary output, a file source, or a file or directory of a tree source) are laid out
in the work dir and written as ONE reproducible layer (:func:`nvkr.oci.image.layer_from_tree`)
on top of the base image's layers for the variant's platform (a pinned ``oci`` source, picked
from its index), or on nothing (``scratch``). Config and manifest follow with every time at the
epoch. ``backend: docker`` hands plan and run to :mod:`nvkr.builders.docker_backend`. Either way
the result has the same shape: every layer (role ``layer``), the config (``config``) and the
manifest (``manifest``), and ``platform``, ``manifestDigest`` and ``configDigest`` in the
metadata, which the planner's ``image-index`` action joins across arches.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tarfile
from pathlib import Path, PurePosixPath
from typing import Any

from nvkr.builders import (
    ActionContext,
    ActionSpec,
    PlanRefs,
    Problem,
    a_kind,
    builder_of,
    source_kind_of,
)
from nvkr.errors import BuildError
from nvkr.oci import mediatypes as mt
from nvkr.oci.image import (
    Layer,
    StoredImage,
    image_config,
    image_manifest,
    layer_from_tree,
    load_image,
    platform_label,
    platform_of,
)
from nvkr.oci.layout import rfc3339
from nvkr.recipe import Variant
from nvkr.recipe import fieldchecks as fc
from nvkr.recipe.models import ContainerImageArtifact, ImageFile

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


def _file_spec(dest: str, entry: ImageFile, refs: PlanRefs, spec: dict[str, Any]) -> dict[str, Any]:
    """One ``files`` entry as params (checked by :func:`check_files`); adds its source or
    dependency to ``spec``."""
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
    role = f"file:{dest}"
    spec["inputs"][role] = src.digest
    spec["sources"][role] = src
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


def check_files(
    artifact_name: str, artifact: ContainerImageArtifact, variant: Variant
) -> list[Problem]:
    """The kinds ``files``, ``base`` and ``revisionSource`` name: a file is another artifact's
    primary output (not an image), a file source (url, pypi; no ``path``) or a tree source
    (path, git; the only kind that can go to ``/``); the base is an oci source; the revision
    comes from a git or url source (its commit, its URL)."""
    problems: list[Problem] = []
    at: tuple[str, ...] = ("artifacts", artifact_name)
    if artifact.base != "scratch":
        kind = source_kind_of(variant, artifact.base)
        if kind is not None and kind != "oci":
            problems.append(
                (
                    (*at, "base"),
                    f"{artifact.base!r} is {a_kind(kind)} source, not an oci image",
                    'base is "scratch" or an oci source: {oci: REGISTRY/REPO, digest: sha256:...}',
                )
            )
    for dest, raw in sorted(artifact.files.items()):
        entry = ImageFile(artifact=raw) if isinstance(raw, str) else raw
        here = (*at, "files", dest)
        if entry.artifact is not None:
            builder = builder_of(variant, entry.artifact)
            if builder in NOT_FILES:
                problems.append(
                    (
                        here if isinstance(raw, str) else (*here, "artifact"),
                        f"artifact {entry.artifact!r} is {a_kind(str(builder))}, not a file",
                        "files take artifacts with one primary output (a go-binary, ...)",
                    )
                )
            elif dest == "/":
                problems.append((here, "only a directory tree can go to '/'", None))
            continue
        assert entry.source is not None
        kind = source_kind_of(variant, entry.source)
        if kind is None or kind in TREE_KINDS:
            continue
        if kind not in FILE_KINDS:
            problems.append(
                (
                    (*here, "source"),
                    f"{entry.source!r} is {a_kind(kind)} source, which cannot be a file in an image",
                    "files come from url, pypi, path or git sources and from artifacts (an oci "
                    "source is a base)",
                )
            )
        elif entry.path is not None:
            problems.append(
                ((*here, "path"), f"{entry.source!r} is a single file; drop 'path'", None)
            )
        elif dest == "/":
            problems.append((here, "only a directory tree can go to '/'", None))
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

    Inputs: ``base`` (the pinned digest of the base oci source, absent for scratch) and
    ``file:<dest>`` per source file (the source's blob). Deps: the actions of artifact files.
    Params (everything that enters the bytes): ``backend`` ``"daemonless"``, ``platform``
    (``{"os": "linux", "architecture", ["variant": "v8"]}``), ``base`` (source name or
    ``"scratch"``), ``files`` (sorted by destination: ``path`` relative to ``/``, ``artifact`` +
    ``action`` or ``source`` + ``input`` + ``tree`` + ``select``, ``mode`` ``"0755"``-style or
    None), the execution config (``entrypoint``, ``cmd``, ``env``, ``user``, ``workdir``,
    ``labels``), ``annotations`` and ``compression``.

    Raises:
        RecipeReferenceError: an unknown source or artifact (from ``refs``); the kinds named are
            checked by :func:`check_files`, the paths by the model.
    """
    where = f"artifact {artifact_name!r}"
    spec: dict[str, Any] = {"inputs": {}, "sources": {}, "deps": []}
    base_entry: dict[str, Any] | None = None
    if artifact.base != "scratch":
        base = refs.source(artifact.base)
        spec["inputs"]["base"] = base.digest
        spec["sources"]["base"] = base
        base_entry = base.entry
    files = []
    for dest, raw in sorted(artifact.files.items()):
        entry = ImageFile(artifact=raw) if isinstance(raw, str) else raw
        files.append(_file_spec(dest, entry, refs, spec))
    params: dict[str, Any] = {
        "backend": "daemonless",
        "platform": platform_of(variant.arch),
        "base": artifact.base,
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


def _assemble(ctx: ActionContext, rootfs: Path) -> dict[str, int]:
    """Lay the files out under ``rootfs``; return the explicit modes (relative path → mode)."""
    modes: dict[str, int] = {}
    for i, f in enumerate(ctx.action.params["files"]):
        if "action" in f:
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
    dests = " ".join("/" + f["path"] for f in p["files"])
    if p["files"] or base is None:
        rootfs = ctx.workdir / "rootfs"
        rootfs.mkdir()
        os.chmod(rootfs, 0o755)
        modes = _assemble(ctx, rootfs)
        new_layers.append(
            layer_from_tree(
                rootfs, ctx.store, epoch=epoch, compression=p["compression"], modes=modes
            )
        )
        history: list[dict[str, Any]] = [
            {"created_by": f"nvkr container-image: files {dests}".rstrip()}
        ]
    else:
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


class ContainerImageBuilder:
    """Builder ``container-image``: per-arch OCI images, joined by the planner's image index."""

    name = "container-image"
    version = "1"
    per_arch = True
    release_kind = "image"

    def check(self, artifact_name: str, artifact: Any, variant: Variant) -> list[Problem]:
        """See :func:`check_files`, and for ``backend: docker`` the context's kind."""
        assert isinstance(artifact, ContainerImageArtifact)
        problems = check_files(artifact_name, artifact, variant)
        if artifact.backend == "docker":
            from nvkr.builders import docker_backend

            problems += docker_backend.check(artifact_name, artifact, variant)
        return problems

    def plan(
        self, artifact_name: str, artifact: Any, variant: Variant, refs: PlanRefs
    ) -> ActionSpec:
        """See :func:`plan_daemonless`, or :func:`nvkr.builders.docker_backend.plan` for
        ``backend: docker`` (its params always carry ``"backend": "docker"``)."""
        assert isinstance(artifact, ContainerImageArtifact)
        if artifact.backend == "docker":
            from nvkr.builders import docker_backend

            spec = docker_backend.plan(artifact_name, artifact, variant, refs)
            if spec.params.get("backend") != "docker":
                spec = dataclasses.replace(spec, params={**spec.params, "backend": "docker"})
            return spec
        return plan_daemonless(artifact_name, artifact, variant, refs)

    def run(self, ctx: ActionContext) -> None:
        """See :func:`run_daemonless`, or :func:`nvkr.builders.docker_backend.run`."""
        if ctx.action.params.get("backend") == "docker":
            from nvkr.builders import docker_backend

            docker_backend.run(ctx)
            return
        run_daemonless(ctx)
