"""A release set's source closure in its registry: what a rebuild needs, kept beside the release.

``nvkr publish --with-sources`` pushes, after the release set, one more referrer of the release
set index: exactly what ``nvkr mirror export`` of the set's recipe and variants writes (its
``index.json`` as each manifest's config, every blob a layer named by its pinned digest, so a
registry stores each .deb, wheel and tarball once across releases), plus the project files the
build read (recipe, the files it extends, the catalog's rules, the lockfile: one deterministic
tar) and each path source's tree (the very tar whose sha256 the path kind pins). The pieces::

    image index  artifactType application/vnd.nvkr.source-closure.v1
                 subject: the release set index; annotations dev.nvkr.attachment: sources
      └─ manifests[i]  image manifest, artifactType as above, annotation dev.nvkr.part "i/N"
           config  application/vnd.nvkr.mirror.index.v1+json   the export's index.json
           layers  application/vnd.nvkr.project.v1.tar (part 1 only, first), then
                   application/octet-stream                    the blobs, sorted by digest

The index (:mod:`nvkr.airgap`'s shape) gains ``project`` (``recipe``, ``lockfile``: paths
relative to the project directory; ``files``: the tar's digest, size and member names;
``trees``: each path source's ``{recipe, name, path, digest, size}``) and ``withheld`` (sources
marked ``publish: false`` in the recipe, e.g. non-free packages you may not redistribute:
``{recipe, name, kind, digest, variants, reason}``; their blobs are not pushed and a rebuild
needs them from a store), and ``buildEnvironment`` (``nvkrVersion`` of the build; ``image``:
the build environment's image by digest, when ``--build-env`` names it).

Registries cap a manifest's size (CNCF distribution: 4 MiB) and some the layers of one
manifest: a part holds at most :data:`MAX_LAYERS` layers (``--max-layers``) and
:data:`MAX_MANIFEST_BYTES` bytes. The closure is a function of the store's blobs and the project
files, so publishing it again pushes nothing new.

``nvkr pull --with-sources DIR`` (:func:`pull_sources`) writes an export directory that ``nvkr
mirror import`` takes unchanged, with the project's files under ``DIR/project/`` (the recipe at
the path the release set's metadata names); every blob is checked against its digest on the
way, and a source blob the index lists but the closure lacks exits 3 naming it and its source.
``nvkr verify --rebuild REF`` uses it to rebuild from the registry alone.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from nvkr.airgap.index import INDEX, read_index
from nvkr.atomic import write_atomic
from nvkr.canonical import canonical_json, canonical_json_file, sha256_bytes
from nvkr.delivery.puller import EventSink, Puller
from nvkr.errors import IntegrityError, NvkrError, RegistryError, UsageError
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import blob_name, image_index, index_bytes, layout_file_bytes, manifest_bytes
from nvkr.oci.layoutdir import link_or_copy
from nvkr.oci.referrers import list_referrers
from nvkr.oci.registry import RegistryClient
from nvkr.releaseset.signing import ANN_ATTACHMENT
from nvkr.repro import extract_tar, normal_mode, tar_member, tar_writer

#: ``dev.nvkr.attachment`` of a source closure's index.
SOURCES: Final = "sources"
#: Annotation of each part manifest: ``"<i>/<N>"``.
ANN_PART: Final = "dev.nvkr.part"
#: Layers per part manifest by default (some registries refuse manifests with many more).
MAX_LAYERS: Final = 500
#: Largest part manifest, in bytes (CNCF distribution refuses manifests over 4 MiB).
MAX_MANIFEST_BYTES: Final = 4 << 20
#: Where ``nvkr pull --with-sources`` puts the project's files inside its directory.
PROJECT_DIR: Final = "project"


@dataclass(frozen=True)
class ProjectTree:
    """A path source's directory: its ``path`` relative to the project, and its tar's bytes."""

    recipe: str
    name: str
    path: str
    data: bytes


@dataclass
class Closure:
    """A source closure written as an OCI image layout (``layout``) ready to push: its root
    ``descriptor``, the parts, the blobs (layers: sources, project files, trees) and their
    bytes, the sources ``withheld``."""

    layout: Path
    descriptor: dict[str, Any]
    parts: int
    blobs: int
    bytes: int
    sources: int
    withheld: list[str] = field(default_factory=list)


def project_tar(files: Sequence[tuple[str, Path]]) -> bytes:
    """The project files ``(name relative to the project, path)`` as a deterministic tar:
    sorted by name, mtime 0, owner 0, :func:`~nvkr.repro.normal_mode`."""
    buf = io.BytesIO()
    with tar_writer(buf) as tar:
        for name, path in sorted(files):
            st = path.stat()
            info = tar_member(name, mtime=0, mode=normal_mode(st.st_mode), size=st.st_size)
            with open(path, "rb") as f:
                tar.addfile(info, f)
    return buf.getvalue()


def relative_to_project(path: Path, project: Path, what: str) -> str:
    """``path`` relative to ``project`` (both resolved), POSIX style.

    Raises:
        UsageError: ``path`` is outside ``project``: a rebuild could not find it there.
    """
    try:
        return path.resolve().relative_to(project.resolve()).as_posix()
    except ValueError:
        raise UsageError(
            f"{what} {path} is outside the project directory {project}",
            hint="publish from (or give --project) the directory that holds every file the "
            "recipe reads, as the build ran",
        ) from None


def _put(blobs_dir: Path, data: bytes) -> dict[str, Any]:
    """Write ``data`` as a blob of ``blobs_dir`` (once); its descriptor's digest and size."""
    digest = sha256_bytes(data)
    path = blobs_dir / digest.split(":", 1)[1]
    if not path.is_file():
        write_atomic(path, data)
    return {"digest": digest, "size": len(data)}


def _parts(layers: list[dict[str, Any]], max_layers: int) -> list[list[dict[str, Any]]]:
    """``layers`` in chunks of at most ``max_layers`` whose manifests stay under
    :data:`MAX_MANIFEST_BYTES` (the chunk halves until they do)."""
    size = max(1, max_layers)
    while True:
        chunks = [layers[i : i + size] for i in range(0, len(layers), size)] or [[]]
        if size == 1 or all(len(canonical_json(c)) + 1024 < MAX_MANIFEST_BYTES for c in chunks):
            return chunks
        size //= 2


def write_closure(
    export_dir: Path,
    subject: dict[str, Any],
    project: dict[str, Any],
    files_tar: bytes,
    trees: Sequence[ProjectTree],
    withheld: Sequence[dict[str, Any]],
    build_environment: dict[str, Any],
    layout: Path,
    *,
    max_layers: int = MAX_LAYERS,
) -> Closure:
    """Turn ``export_dir`` (what :func:`nvkr.airgap.export.export_mirror` wrote) into the source
    closure of the release set ``subject`` (its index's descriptor) as an OCI image layout at
    ``layout`` (module docstring); the export's ``index.json`` gains ``project``, ``withheld``
    and ``buildEnvironment`` and is rewritten.

    Args:
        project: ``{"recipe", "lockfile"}``, paths relative to the project directory.
        files_tar: :func:`project_tar` of the project's files; ``trees`` the path sources'.
    """
    blobs_dir = export_dir / "blobs" / "sha256"
    index = read_index(export_dir)
    files = {**_put(blobs_dir, files_tar), "names": _tar_names(files_tar)}
    tree_items = [
        {"recipe": t.recipe, "name": t.name, "path": t.path, **_put(blobs_dir, t.data)}
        for t in sorted(trees, key=lambda t: (t.path, t.name))
    ]
    index["project"] = {**project, "files": files, "trees": tree_items}
    index["withheld"] = list(withheld)
    index["buildEnvironment"] = build_environment
    config = canonical_json_file(index)
    (export_dir / INDEX).write_bytes(config)
    config_desc = {"mediaType": mt.NVKR_MIRROR_INDEX, **_put(blobs_dir, config)}

    sizes: dict[str, int] = {}
    for source in index["sources"]:
        for b in source["blobs"]:
            sizes[b["digest"]] = b["size"]
    for t in tree_items:
        sizes[t["digest"]] = t["size"]
    layers = [{"mediaType": mt.NVKR_PROJECT_TAR, "digest": files["digest"], "size": files["size"]}]
    layers += [
        {"mediaType": mt.OCTET_STREAM, "digest": d, "size": s}
        for d, s in sorted(sizes.items())
        if d != files["digest"]
    ]
    out = layout / "blobs" / "sha256"
    out.mkdir(parents=True, exist_ok=True)
    for desc in [config_desc, *layers]:
        hexpart = desc["digest"].split(":", 1)[1]
        if not (out / hexpart).exists():
            link_or_copy(blobs_dir / hexpart, out / hexpart, desc["digest"], desc["size"])
    chunks = _parts(layers, max_layers)
    parts = []
    for i, chunk in enumerate(chunks, 1):
        data = manifest_bytes(
            {
                "schemaVersion": 2,
                "mediaType": mt.OCI_MANIFEST,
                "artifactType": mt.NVKR_SOURCE_CLOSURE,
                "config": config_desc,
                "layers": chunk,
                "annotations": {ANN_PART: f"{i}/{len(chunks)}"},
            }
        )
        desc = {"mediaType": mt.OCI_MANIFEST, **_put(out, data)}
        parts.append({**desc, "artifactType": mt.NVKR_SOURCE_CLOSURE})
    root = image_index(parts, {ANN_ATTACHMENT: SOURCES}, mt.NVKR_SOURCE_CLOSURE)
    root["subject"] = {k: subject[k] for k in ("mediaType", "digest", "size")}
    root_desc = {"mediaType": mt.OCI_INDEX, **_put(out, index_bytes(root))}
    (layout / "oci-layout").write_bytes(layout_file_bytes())
    (layout / "index.json").write_bytes(index_bytes(image_index([root_desc])))
    return Closure(
        layout=layout,
        descriptor=root_desc,
        parts=len(parts),
        blobs=len(layers),
        bytes=sum(d["size"] for d in layers),
        sources=len(index["sources"]),
        withheld=[f"{w['recipe']}/{w['name']}" for w in withheld],
    )


def _tar_names(data: bytes) -> list[str]:
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return sorted(m.name for m in tar.getmembers() if m.isfile())


# -- pull --------------------------------------------------------------------------------------
@dataclass
class SourcesPull:
    """What :func:`pull_sources` wrote: the closure's ``digest``, the export directory
    ``target`` and its ``project`` directory, ``blobs``/``bytes`` written, of which
    ``downloaded_bytes`` came from the registry, and the sources ``withheld`` (not in it)."""

    digest: str
    target: str
    project: str
    recipe: str
    lockfile: str
    blobs: int = 0
    bytes: int = 0
    downloaded_bytes: int = 0
    sources: int = 0
    withheld: list[dict[str, Any]] = field(default_factory=list)
    #: the set's variants (``AXIS=VALUE,...``), what a build from ``project`` must select
    variants: list[str] = field(default_factory=list)


def find_closure(client: RegistryClient, repo: str, subject: str) -> dict[str, Any] | None:
    """The descriptor of a source closure among the referrers of ``subject`` (the first by
    digest when several builds published one: they hold the same sources), or None."""
    found = [
        d
        for d in list_referrers(client, repo, subject)
        if d.get("artifactType") == mt.NVKR_SOURCE_CLOSURE and d.get("mediaType") == mt.OCI_INDEX
    ]
    return min(found, key=lambda d: str(d["digest"])) if found else None


def pull_sources(
    client: RegistryClient,
    repo: str,
    subject: str,
    target: Path,
    *,
    on_event: EventSink | None = None,
    workers: int = 4,
    reuse: Sequence[Path] = (),
) -> SourcesPull:
    """Download the source closure of the release set index ``subject`` into ``target``: an
    ``nvkr mirror export`` directory, with the project's files under ``target/project/``.

    Written in a temp directory beside ``target`` and renamed into place once every blob has
    hashed right and every listed source blob was found, so a failure leaves ``target`` as it
    was (an earlier pull there is replaced only on success).

    Raises:
        UsageError: the registry holds no source closure of ``subject``; ``target`` is a
            non-empty directory that is not an export.
        IntegrityError: a blob hashes to another digest, the closure names another subject, or
            lacks a blob its index lists (named, with its source) (exit 3).
        RegistryError: the registry refused or is unreachable.
    """
    desc = find_closure(client, repo, subject)
    if desc is None:
        raise UsageError(
            f"{client.registry}/{repo}@{subject} has no source closure among its referrers",
            hint="publish the release set with `nvkr publish --with-sources` (or build --push "
            "--with-sources) to keep its sources in the registry",
        )
    if target.exists() and any(target.iterdir()) and not (target / INDEX).is_file():
        raise UsageError(
            f"{target} is a non-empty directory that is not a source export: nvkr pull "
            "--with-sources only replaces its own",
            hint="give a new or empty directory",
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.sources-", dir=target.parent))
    try:
        what = f"source closure {desc['digest']} of {subject}"
        with Puller(client, repo, tmp, on_event, workers, (target, *reuse)) as run:
            try:
                root = run.closure(desc, what)
                run.wait()
            except RegistryError as e:
                if e.status != 404:
                    raise
                raise _missing(client, repo, tmp, desc, what, e) from e
        found = root.get("subject")
        if not isinstance(found, dict) or found.get("digest") != subject:
            raise IntegrityError(f"{what} names another subject: {found}")
        report = _unpack(tmp, root, what, desc["digest"], run.have, run.reused)
        old = None
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            os.rename(target, old / "x")
        os.rename(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    report.target = str(target)
    report.project = str(target / PROJECT_DIR)
    return report


def _missing(
    client: RegistryClient,
    repo: str,
    tmp: Path,
    desc: dict[str, Any],
    what: str,
    error: RegistryError,
) -> IntegrityError:
    """The error for a blob of the closure the registry no longer has: naming its source when
    the closure's index lists it (read from ``tmp``, else fetched), else as the registry said."""
    import re

    missing = re.findall(r"sha256:[0-9a-f]{64}", error.message)
    try:
        root = json.loads((tmp / blob_name(str(desc["digest"]))).read_bytes())
        part = json.loads(client.get_manifest(repo, str(root["manifests"][0]["digest"]))[0])
        buf = io.BytesIO()
        client.get_blob(repo, str(part["config"]["digest"]), buf)
        sources = json.loads(buf.getvalue()).get("sources") or []
    except (OSError, ValueError, KeyError, IndexError, NvkrError):
        sources = []
    for source in sources:
        for b in source.get("blobs") or []:
            if b.get("digest") in missing:
                package = f", package {b['package']}" if b.get("package") else ""
                return IntegrityError(
                    f"{what}: the registry lacks blob {b['digest']} of source "
                    f"{source.get('name')!r} (recipe {source.get('recipe')}{package})",
                    hint="publish the release set again with --with-sources from a store "
                    "that holds it: it pushes what is missing",
                )
    return IntegrityError(f"{what}: {error.message}", hint=error.hint)


def _unpack(
    tmp: Path,
    root: dict[str, Any],
    what: str,
    digest: str,
    have: dict[str, int],
    reused: dict[str, int],
) -> SourcesPull:
    """Check the pulled closure in ``tmp`` against its index and turn it into an export
    directory: ``index.json``, the source blobs, ``project/``; the manifests are removed."""
    manifests = [m for m in root.get("manifests") or [] if isinstance(m, dict)]
    layers: set[str] = set()
    config: str | None = None
    for i, part in enumerate(manifests):
        doc = json.loads((tmp / blob_name(str(part["digest"]))).read_bytes())
        found = str((doc.get("config") or {}).get("digest"))
        if config is not None and found != config:  # one index, the same in every part
            raise IntegrityError(f"{what}: manifests[{i}] names config {found}, not {config}")
        config = found
        layers |= {str(x["digest"]) for x in doc.get("layers") or [] if isinstance(x, dict)}
    if config is None:
        raise IntegrityError(f"{what} holds no manifest")
    config_path = tmp / blob_name(config)
    (tmp / INDEX).write_bytes(config_path.read_bytes())
    index = read_index(tmp)
    project = index.get("project")
    if not isinstance(project, dict):
        raise IntegrityError(f"{what}: its index has no project (not a source closure)")
    for source in index["sources"]:
        for b in source["blobs"]:
            if b["digest"] not in layers:
                raise IntegrityError(
                    f"{what} lacks blob {b['digest']} of source {source.get('name')!r} "
                    f"(recipe {source.get('recipe')})",
                    hint="publish the release set again with --with-sources: it pushes what "
                    "is missing",
                )
    for d in {digest, config, *(str(m["digest"]) for m in manifests)} - layers:
        (tmp / blob_name(d)).unlink(missing_ok=True)  # the closure's own documents
    _extract_project(tmp, project, layers, what)
    report = SourcesPull(
        digest=digest,
        target="",
        project="",
        recipe=str(project["recipe"]),
        lockfile=str(project["lockfile"]),
        sources=len(index["sources"]),
        withheld=list(index.get("withheld") or []),
        variants=[str(v) for r in index.get("recipes") or [] for v in r.get("variants") or []],
    )
    kept = {d: s for d, s in have.items() if d in layers}
    report.blobs = len(kept)
    report.bytes = sum(kept.values())
    report.downloaded_bytes = report.bytes - sum(s for d, s in reused.items() if d in layers)
    return report


def _extract_project(tmp: Path, project: dict[str, Any], layers: set[str], what: str) -> None:
    """``tmp/project/``: the project files' tar, then each path source's tree at its path."""
    dest = tmp / PROJECT_DIR
    dest.mkdir()
    items: Iterable[tuple[str, str]] = [("", str(project["files"]["digest"]))] + [
        (str(t["path"]), str(t["digest"])) for t in project.get("trees") or []
    ]
    for rel, d in items:
        if d not in layers:
            raise IntegrityError(f"{what} lacks the project's blob {d} ({rel or 'files'})")
        under = (dest / rel).resolve()
        if dest.resolve() not in (under, *under.parents):
            raise IntegrityError(f"{what}: project tree path {rel!r} leads out of the project")
        under.mkdir(parents=True, exist_ok=True)
        with open(tmp / blob_name(d), "rb") as f:
            extract_tar(f, under, what=f"{what} project {rel or 'files'}")
