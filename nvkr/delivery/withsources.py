"""``--with-sources``: the source closure of a release set made from the session of its recipe
and pushed after the set (its shape: :mod:`nvkr.delivery.sources`).

The release set's metadata names the recipe and lockfile (relative to the directory the build
ran in: the *project*) and the variants (:func:`release_source`); the caller opens that
session, and :func:`publish_with_sources` narrows it to the set's variants, refuses a project
whose recipe or lockfile digest is not the set's (:func:`nvkr.builtfrom.check_built_from`: the
closure must hold what the set was built from), exports every locked source of those variants
(:func:`nvkr.airgap.export.export_mirror`: a source the store lacks is fetched first), adds the
project files and path sources' trees, and pushes the closure as a referrer of the release set
index (:func:`nvkr.delivery.publish.publish_referrer`). Sources marked ``publish: false`` are
listed as withheld, their blobs left out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nvkr import __version__
from nvkr.builtfrom import check_built_from
from nvkr.delivery.destination import EventSink
from nvkr.delivery.publish import PublishReport, publish_referrer
from nvkr.delivery.sources import (
    MAX_LAYERS,
    Closure,
    ProjectTree,
    project_tar,
    relative_to_project,
    write_closure,
)
from nvkr.errors import RegistryError, UsageError
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import LayoutReader
from nvkr.oci.registry import Reference, RegistryClient
from nvkr.releaseset.metadata import read_metadata
from nvkr.releaseset.signing import release_set_entry

if TYPE_CHECKING:
    from nvkr.session import Session

WITHHELD_REASON = "publish: false in the recipe (not to be redistributed)"


@dataclass(frozen=True)
class ReleaseSource:
    """What a release set says it was built from: ``recipe`` and ``lockfile`` (relative to the
    project), their digests, its ``variants`` as ``AXIS=VALUE,...`` selections, ``nvkr_version``."""

    name: str
    recipe: str
    recipe_digest: str
    lockfile: str
    lockfile_digest: str
    variants: tuple[str, ...]
    nvkr_version: str


def release_source(layout: Path) -> ReleaseSource:
    """The recipe, lockfile and variants the release set at ``layout`` was built from."""
    entry = release_set_entry(LayoutReader(layout))
    meta = read_metadata(layout, entry["annotations"][mt.ANN_REF_NAME])
    return ReleaseSource(
        name=str(meta["name"]),
        recipe=str(meta["recipe"]["path"]),
        recipe_digest=str(meta["recipe"]["digest"]),
        lockfile=str(meta["lockfile"]["path"]),
        lockfile_digest=str(meta["lockfile"]["digest"]),
        variants=tuple(
            ",".join(f"{k}={v}" for k, v in sorted(variant.items()))
            for variant in meta.get("variants") or []
        ),
        nvkr_version=str(meta.get("nvkrVersion") or ""),
    )


def check_project(source: ReleaseSource, session: Session, project: Path) -> None:
    """Refuse a project whose recipe or lockfile is not the one the release set was built from.

    Raises:
        UsageError: a digest differs (exit 2), naming both.
    """
    from nvkr.lock import lock_digest

    lock = session.resolver.lock
    check_built_from(source.name, project, {
        "recipe": (source.recipe, source.recipe_digest, session.loaded.digest),
        "lockfile": (source.lockfile, source.lockfile_digest,
                     lock_digest(lock) if lock is not None else "none"),
    })  # fmt: skip


def _for_set(session: Session, source: ReleaseSource) -> Session:
    """``session`` narrowed to the set's variants (a build writes a release set per Kubernetes
    line, each of some of its variants).

    Raises:
        UsageError: the session lacks a variant of the set.
    """
    wanted = set(source.variants)
    mine = [
        v for v in session.variants
        if f"arch={v.arch},gpu={v.gpu},kubernetes={v.kubernetes}" in wanted
    ]  # fmt: skip
    if len(mine) != len(wanted):
        raise UsageError(
            f"release set {source.name} holds the variants {', '.join(sorted(wanted))}; "
            f"the recipe {source.recipe} selected {len(mine)} of them",
            hint="the release set was built from another recipe or matrix",
        )
    return replace(session, variants=mine)


def _project_files(
    session: Session, project: Path, source: ReleaseSource
) -> list[tuple[str, Path]]:
    """``(name in the project, path)`` of every file the recipe's session reads: the recipe and
    the files it extends, the catalog's rules, the lockfile."""
    from nvkr.catalog.loading import find_rules

    paths = [*session.loaded.files, session.lock_path]
    rules = find_rules(Path(session.loaded.path))
    if rules is not None:
        paths.append(rules)
    out = {relative_to_project(p, project, "recipe file"): Path(p) for p in paths}
    out[source.recipe] = project / source.recipe
    out[source.lockfile] = project / source.lockfile
    return sorted(out.items())


def _trees(session: Session, project: Path) -> tuple[list[ProjectTree], list[dict[str, Any]]]:
    """The path sources' trees (as the path kind tars them), and those withheld."""
    from nvkr.recipe.sources import PathSource
    from nvkr.repro import tar_bytes

    trees: dict[str, ProjectTree] = {}
    withheld: dict[str, dict[str, Any]] = {}
    recipe = session.loaded.recipe.metadata.name
    for variant in session.variants:
        for name, source in sorted(variant.recipe.sources.items()):
            if not isinstance(source, PathSource):  # the one local kind
                continue
            bound = session.resolver.source_for(variant, name)
            root = Path(bound.base_dir) / source.path
            rel = relative_to_project(root, project, f"path source {name!r}:")
            if getattr(source, "publish", None) is False:
                withheld.setdefault(rel, _withheld(recipe, name, "path", None, [variant.id]))
                continue
            if rel not in trees:
                data = tar_bytes(root, epoch=0, exclude=source.exclude or ())
                trees[rel] = ProjectTree(recipe, name, rel, data)
    return list(trees.values()), list(withheld.values())


def _withheld(
    recipe: str, name: str, kind: str, digest: str | None, variants: list[str]
) -> dict[str, Any]:
    return {"recipe": recipe, "name": name, "kind": kind, "digest": digest,
            "variants": sorted(variants), "reason": WITHHELD_REASON}  # fmt: skip


def make_closure(
    layout: Path,
    session: Session,
    project: Path,
    work: Path,
    *,
    build_env: str | None = None,
    max_layers: int = MAX_LAYERS,
    progress: Callable[[str], None] | None = None,
) -> Closure:
    """The source closure of the release set at ``layout`` as a layout under ``work``.

    Raises:
        UsageError: the project is not the set's (:func:`check_project`), or holds a file the
            recipe reads outside it.
        FetchError, IntegrityError: as :func:`nvkr.airgap.export.export_mirror`.
    """
    from nvkr.airgap.export import export_mirror, select_sources

    source = release_source(layout)
    session = _for_set(session, source)
    check_project(source, session, project)
    selection = select_sources(session.loaded, session.variants, session.resolver)
    kept: dict[bytes, Any] = {}
    withheld: list[dict[str, Any]] = []
    for key, (name, spec, entry, base_dir, variants) in sorted(selection.bindings.items()):
        if getattr(spec, "publish", None) is False:
            withheld.append(_withheld(selection.name, name, entry.kind, entry.digest, variants))
        else:
            kept[key] = (name, spec, entry, base_dir, variants)
    selection = replace(
        selection, bindings=kept, skipped=[], path=source.recipe, lockfile_path=source.lockfile
    )
    export = work / "export"
    export_mirror([selection], session.fetch, export, progress=progress)
    trees, withheld_trees = _trees(session, project)
    subject = release_set_entry(LayoutReader(layout))
    environment: dict[str, Any] = {"nvkrVersion": source.nvkr_version or __version__}
    if build_env is not None:
        environment["image"] = build_env
    return write_closure(
        export,
        subject,
        {"recipe": source.recipe, "lockfile": source.lockfile},
        project_tar(_project_files(session, project, source)),
        trees,
        withheld + withheld_trees,
        environment,
        work / "layout",
        max_layers=max_layers,
    )


def publish_with_sources(
    layout: Path,
    ref: Reference,
    client: RegistryClient,
    session: Session,
    project: Path,
    *,
    name: str | None = None,
    mount_from: Sequence[str] = (),
    build_env: str | None = None,
    max_layers: int = MAX_LAYERS,
    jobs: int = 4,
    on_event: EventSink | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[PublishReport, Closure, PublishReport]:
    """Make the source closure of the release set at ``layout`` (before anything is pushed:
    a project that is not the set's, or a source that cannot be had, pushes nothing), publish
    the set (:func:`~nvkr.delivery.publish.publish_layout`), then push the closure as a
    referrer of the set's index.

    Returns:
        the set's report, the closure, the closure's push report.
    Raises:
        as :func:`make_closure` and :func:`~nvkr.delivery.publish.publish_layout`;
        RegistryError: the closure's push failed (the set is published and tagged: said).
    """
    from nvkr.delivery.publish import publish_layout

    with session.store.workdir(prefix="nvkr-sources-") as work:
        closure = make_closure(
            layout, session, project, Path(work),
            build_env=build_env, max_layers=max_layers, progress=progress,
        )  # fmt: skip
        report = publish_layout(
            layout, ref, client, name=name, mount_from=mount_from, jobs=jobs, on_event=on_event
        )
        try:
            pushed = publish_referrer(closure.layout, ref, client, jobs=jobs, on_event=on_event)
        except RegistryError as e:
            raise RegistryError(
                f"{report.reference} is published and tagged, but its source closure is not: "
                f"{e.message}",
                hint=e.hint or "publish again with --with-sources: only the sources are left",
                status=e.status,
            ) from e
    return report, closure, pushed


def closure_json(closure: Closure, report: PublishReport) -> Mapping[str, Any]:
    """The ``sources`` member of ``nvkr publish --json``'s result."""
    return {
        "digest": closure.descriptor["digest"],
        "parts": closure.parts,
        "blobs": closure.blobs,
        "bytes": closure.bytes,
        "sources": closure.sources,
        "withheld": closure.withheld,
        "bytesUploaded": report.bytes_uploaded,
        "blobsSkipped": report.blobs_skipped,
        "milliseconds": round(report.seconds * 1000),
    }
