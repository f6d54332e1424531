"""The daemonless backend of the ``container-image`` builder (the default): no daemon and no tool.

The recipe's ``files`` (another artifact's primary output, a file source, or a file or directory
of a tree source) are laid out in the work dir and written as ONE reproducible layer
(:func:`nvkr.oci.image.layer_from_tree`) on top of the base image's layers for the variant's
platform (a pinned ``oci`` source, picked from its index), or on nothing (``scratch``). Config
and manifest follow with every time at the epoch.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from nvkr.builders.api import (
    ActionContext,
    ActionSpec,
    PlanRefs,
    Problem,
    a_kind,
    builder_of,
    source_kind_of,
)
from nvkr.builders.container_image.artifact import ContainerImageArtifact, ImageBase
from nvkr.builders.container_image.common import execution_params, image_annotations, record_image
from nvkr.builders.container_image.layout import assemble, rootfs_layer
from nvkr.builders.container_image.params import (
    ArtifactFile,
    DaemonlessParams,
    FileParams,
    RootfsBase,
    SourceFile,
    TreeFile,
    UnpackedFile,
)
from nvkr.fetch.entries import OciEntry
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
from nvkr.recipe import fieldchecks as fc
from nvkr.recipe.imagefiles import ImageFile
from nvkr.recipe.matrix import Variant

if TYPE_CHECKING:
    pass


#: Source kinds whose blob is a deterministic tar of a directory tree, and those that are one file.
TREE_KINDS = frozenset({"path", "git"})
FILE_KINDS = frozenset({"url", "pypi"})
#: Builders whose results have no single primary output to put in an image.
NOT_FILES = frozenset({"container-image", "image-index", "release-set"})
#: Source kinds whose lockfile entry names a revision (a commit) or a URL.
REVISION_KINDS = frozenset({"git", "url", "pypi"})


def _file_spec(
    dest: str, entry: ImageFile, refs: PlanRefs, spec: dict[str, Any], role: str
) -> FileParams:
    """One ``files`` entry as params (checked by :func:`check_files`); adds its source (as
    input ``role``) or dependency to ``spec``."""
    rel = fc.image_path(dest)
    if entry.artifact is not None:
        action = refs.artifact(entry.artifact)
        spec["deps"].append(action.key)
        return ArtifactFile(
            path=rel, artifact=entry.artifact, action=action.key, mode=entry.mode or "0755"
        )
    assert entry.source is not None
    src = refs.source(entry.source)
    spec["inputs"][role] = src.digest
    spec["sources"][role] = src
    if entry.unpack:
        return UnpackedFile(
            path=rel,
            source=entry.source,
            input=role,
            tree=False,
            unpack=True,
            select="",
            mode=entry.mode,
        )
    if src.entry.kind in TREE_KINDS:
        select = fc.inner_path(entry.path) if entry.path is not None else ""
        return TreeFile(
            path=rel, source=entry.source, input=role, tree=True, select=select, mode=entry.mode
        )
    return SourceFile(
        path=rel,
        source=entry.source,
        input=role,
        tree=False,
        select="",
        mode=entry.mode or "0644",
    )


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
    base_entry: OciEntry | None = None
    base_param: str | RootfsBase
    if isinstance(artifact.base, ImageBase):
        tree = refs.artifact(artifact.base.rootfs)  # a rootfs artifact: check_files ran
        spec["deps"].append(tree.key)
        base_param = RootfsBase(rootfs=artifact.base.rootfs, action=tree.key)
    else:
        base_param = artifact.base
        if artifact.base != "scratch":
            base = refs.source(artifact.base)
            spec["inputs"]["base"] = base.digest
            spec["sources"]["base"] = base
            assert isinstance(base.entry, OciEntry)  # check() ran: an oci source
            base_entry = base.entry
    files: list[FileParams] = []
    for dest, raw in sorted(artifact.files.items()):
        # a list lays several entries out at one path, in order; each is its own input
        for n, one in enumerate(raw if isinstance(raw, list) else [raw]):
            entry = ImageFile(artifact=one) if isinstance(one, str) else one
            role = f"file:{dest}#{n}" if isinstance(raw, list) else f"file:{dest}"
            files.append(_file_spec(dest, entry, refs, spec, role))
    params = DaemonlessParams(
        backend="daemonless",
        platform=platform_of(variant.arch),
        base=base_param,
        files=files,
        **execution_params(artifact),
        annotations=image_annotations(where, artifact, refs, base_entry),
    )
    return ActionSpec(
        params=params.to_json(),
        inputs=spec["inputs"],
        sources=spec["sources"],
        deps=tuple(sorted(set(spec["deps"]))),
    )


# -- run ---------------------------------------------------------------------------------------
def _warn_dynamic_on_scratch(ctx: ActionContext, p: DaemonlessParams) -> None:
    """Warn about each artifact file that needs an ELF interpreter (its go-binary result says
    ``linkage: dynamic``) on ``scratch``, where none is: such an image cannot start."""
    if p.base != "scratch":
        return
    paths = {f.path for f in p.files}
    for f in p.files:
        if not isinstance(f, ArtifactFile):
            continue
        meta = ctx.deps[f.action].metadata
        interpreter = str(meta.get("interpreter") or "")
        if meta.get("linkage") != "dynamic" or interpreter.lstrip("/") in paths:
            continue
        message = (
            f"image {ctx.action.name}: /{f.path} (artifact '{f.artifact}') is dynamically "
            f"linked (ELF interpreter {interpreter or '?'}) and cannot start on base scratch, "
            "which has no ELF interpreter and no libc"
        )
        if meta.get("loadsLibraries"):
            # dlopen needs the dynamic loader: a static build would start and then fail to load
            ctx.warn(
                message + "; it loads shared libraries at run time (dlopen), which a static "
                "binary cannot",
                hint="put it on a base image that has libc and the libraries it loads",
            )
            continue
        ctx.warn(
            message,
            hint='link it statically (go-binary ldflags: ["-extldflags=-static"]), build it '
            "with cgo: false (CGO_ENABLED=0), or put it on a base image that has libc",
        )


def run_daemonless(ctx: ActionContext, p: DaemonlessParams) -> None:
    """Write the image: files layer, config, manifest (see the module doc for the outputs).
    A dynamically linked binary on ``scratch`` gets a warning (it cannot start there).

    Raises:
        BuildError: the base has no image for the variant's platform (names base and platform),
            an artifact file has no primary output, a ``path`` is missing from its source, or
            two files collide.
        IntegrityError: the base's closure is not complete in the store.
    """
    epoch = ctx.action.epoch
    platform = p.platform
    base: StoredImage | None = None
    if "base" in ctx.action.inputs:
        base = load_image(
            ctx.store,
            ctx.action.inputs["base"],
            platform,
            what=f"base {p.base!r} ({platform_label(platform)})",
        )
    new_layers: list[Layer] = []
    history: list[dict[str, Any]] = []
    if isinstance(p.base, RootfsBase):  # the tree's tar, as the first layer
        new_layers.append(rootfs_layer(ctx, p.base, p.compression))
        history.append({"created_by": f"nvkr container-image: rootfs {p.base.rootfs}"})
    dests = " ".join(dict.fromkeys("/" + f.path for f in p.files))
    if p.files or (base is None and not new_layers):
        rootfs = ctx.workdir / "rootfs"
        rootfs.mkdir()
        os.chmod(rootfs, 0o755)
        modes = assemble(ctx, rootfs, p.files)
        new_layers.append(
            layer_from_tree(rootfs, ctx.store, epoch=epoch, compression=p.compression, modes=modes)
        )
        history.append({"created_by": f"nvkr container-image: files {dests}".rstrip()})
    elif not new_layers:
        history = [{"created_by": "nvkr container-image: config", "empty_layer": True}]
    config = image_config(
        arch=platform["architecture"],
        diff_ids=[layer.diff_id for layer in new_layers],
        epoch=epoch,
        entrypoint=p.entrypoint or None,
        cmd=p.cmd or None,
        env=p.env,
        user=p.user,
        workdir=p.workdir,
        labels=p.labels,
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
    annotations = {mt.ANN_CREATED: rfc3339(epoch), **p.annotations}
    manifest_info = ctx.store.add_bytes(image_manifest(config_desc, layers, annotations))
    manifest_desc = {
        "mediaType": mt.OCI_MANIFEST,
        "digest": manifest_info.digest,
        "size": manifest_info.size,
    }
    record_image(ctx, layers, config_desc, manifest_desc, platform)
    _warn_dynamic_on_scratch(ctx, p)
