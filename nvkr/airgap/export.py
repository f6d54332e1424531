"""``nvkr mirror export``: every source the recipes' lockfiles pin, as the blobs a build reads
from the store, into ``DIR/blobs/sha256/`` (hard links where possible; what the store lacks is
fetched first), and ``DIR/index.json`` written last (its shape in :mod:`nvkr.airgap`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from nvkr.airgap.index import INDEX, MIRROR_VERSION, READ_CHUNK
from nvkr.atomic import write_atomic
from nvkr.canonical import canonical_json, canonical_json_file, hex_of
from nvkr.errors import FetchError, IntegrityError, LockError
from nvkr.fetch.api import all_present, ensure
from nvkr.fetch.checksums import algorithm_for
from nvkr.fetch.context import FetchContext
from nvkr.fetch.http import url_filename
from nvkr.fetch.oci import LAYOUT_PREFIX
from nvkr.oci import mediatypes as mt
from nvkr.oci.session import LOOPBACK
from nvkr.recipe.sources import AptKeyring
from nvkr.store import Store


@dataclass
class ExportReport:
    """What an export did: blobs ``written`` (new in DIR), ``reused`` (already there), with their
    bytes; ``linked`` of the written ones are hard links; ``fetched`` names the sources that were
    missing from the store and fetched first; ``skipped`` the path sources left out."""

    directory: Path
    sources: int = 0
    written: int = 0
    written_bytes: int = 0
    reused: int = 0
    reused_bytes: int = 0
    linked: int = 0
    fetched: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RecipeSelection:
    """One recipe to export: its bound sources, as ``open_session`` gives them.

    ``bindings`` maps ``(name, canonical spec)`` → ``(source model, lock entry, base_dir,
    variant ids)``.
    """

    name: str
    path: str
    digest: str
    variants: list[str]
    lockfile_path: str
    lockfile_digest: str
    bindings: dict[bytes, tuple[str, Any, dict[str, Any], Path, list[str]]]
    skipped: list[str]


# -- export ------------------------------------------------------------------------------------
def select_sources(loaded: Any, variants: list[Any], resolver: Any) -> RecipeSelection:
    """Bind every source of ``variants`` to its lock entry (``resolver`` must be ``locked``).

    Args:
        loaded: the :class:`~nvkr.recipe.loader.LoadedRecipe`; variants: the selected cells;
        resolver: a :class:`~nvkr.lock.Resolver` over the recipe's lockfile.
    Raises:
        LockError: there is no lockfile, or it lacks a source of a selected variant (exit 2).
    """
    from nvkr.lock import lock_digest
    from nvkr.recipe.sources import PathSource

    if resolver.lock is None:
        raise LockError(
            f"{loaded.path}: there is no lockfile at {resolver.lock_path}",
            hint=f"run `nvkr lock {loaded.path}` first: an export holds what the lockfile pins",
        )
    bindings: dict[bytes, tuple[str, Any, dict[str, Any], Path, list[str]]] = {}
    skipped: set[str] = set()
    for variant in variants:
        for name, source in sorted(variant.recipe.sources.items()):
            if isinstance(source, PathSource):
                skipped.add(name)
                continue
            bound = resolver.source_for(variant, name)
            key = canonical_json([name, source.model_dump(exclude_none=True)])
            if key not in bindings:
                bindings[key] = (name, source, bound.entry, bound.base_dir, [])
            bindings[key][4].append(variant.id)
    return RecipeSelection(
        name=loaded.recipe.metadata.name,
        path=str(loaded.path),
        digest=loaded.digest,
        variants=[v.id for v in variants],
        lockfile_path=str(resolver.lock_path),
        lockfile_digest=lock_digest(resolver.lock),
        bindings=bindings,
        skipped=sorted(skipped),
    )


def _oci_blobs(store: Store, source: Any, entry: dict[str, Any]) -> list[dict[str, Any]]:
    """Every blob of an oci source's closure, documents with their media type, walked in the
    store from the pinned digest (as :mod:`nvkr.fetch.oci` pulled it)."""
    ref: str = source.oci
    base = None
    if not ref.startswith(LAYOUT_PREFIX):
        registry, _, repository = ref.partition("/")
        host = urlsplit("//" + registry).hostname or registry
        scheme = "http" if source.insecure or host in LOOPBACK else "https"
        base = f"{scheme}://{registry}/v2/{repository}"
    out: dict[str, dict[str, Any]] = {}
    todo: list[tuple[str, str | None]] = [(entry["digest"], entry.get("mediaType"))]
    while todo:
        digest, media_type = todo.pop()
        if digest in out:
            continue
        item: dict[str, Any] = {"digest": digest, "urls": []}
        is_doc = media_type is None or media_type in mt.MANIFEST_TYPES
        if is_doc:
            try:
                doc = json.loads(store.read_blob(digest))
            except (OSError, ValueError) as e:
                raise IntegrityError(
                    f"oci source {ref}: store blob {digest} is not a readable JSON document: {e}"
                ) from e
            media_type = media_type or (doc.get("mediaType") if isinstance(doc, dict) else None)
            item["mediaType"] = media_type or mt.OCI_MANIFEST
            children = []
            if isinstance(doc, dict):
                children = list(doc.get("manifests") or []) + list(doc.get("layers") or [])
                if isinstance(doc.get("config"), dict):
                    children.append(doc["config"])
            for child in children:
                if isinstance(child, dict) and isinstance(child.get("digest"), str):
                    # a descriptor without a media type is a leaf, as nvkr.fetch.oci walks it
                    todo.append((child["digest"], str(child.get("mediaType") or "")))
        if base is not None:
            item["urls"] = [f"{base}/{'manifests' if is_doc else 'blobs'}/{digest}"]
        out[digest] = item
    listed = set(entry.get("blobs") or [])
    if listed and listed != set(out):
        raise IntegrityError(
            f"oci source {ref}: the closure of {entry['digest']} in the store has other blobs "
            "than the lock entry lists",
            hint="run `nvkr lock` again",
        )
    return [out[d] for d in sorted(out)]


def _checksum_file(source: Any, entry: dict[str, Any]) -> dict[str, str] | None:
    """The ``checksumUrl`` of a url source rebuilt from the lock: ``HASH  NAME\\n``."""
    url = getattr(source, "checksumUrl", None)
    if not url:
        return None
    algo = algorithm_for(url, getattr(source, "checksumAlgorithm", None))
    algo = algo or ("sha512" if "sha512" in entry else "sha256")
    pinned = entry.get(algo) or (entry["digest"] if algo == "sha256" else None)
    if not pinned:
        return None
    name = getattr(source, "filename", None) or url_filename(entry["url"])
    return {"url": url, "algorithm": algo, "text": f"{hex_of(pinned)}  {name}\n"}


def source_blobs(store: Store, name: str, source: Any, entry: dict[str, Any]) -> dict[str, Any]:
    """The index entry of one resolved source (its blobs, their upstream URLs and sizes).

    Raises:
        IntegrityError: a blob is missing from the store or its size differs from the lock.
    """
    kind = entry.get("kind")
    blobs: list[dict[str, Any]] = []
    item: dict[str, Any] = {"name": name, "kind": kind, "digest": entry["digest"]}
    if kind == "url":
        item["upstream"] = entry["url"]
        blobs.append({"digest": entry["digest"], "size": entry.get("size"), "urls": [entry["url"]]})
        checksum = _checksum_file(source, entry)
        if checksum is not None:
            item["checksum"] = checksum
    elif kind == "pypi":
        item["upstream"] = f"{entry.get('name')}=={entry.get('version')} {entry.get('filename')}"
        blob: dict[str, Any] = {"digest": entry["digest"], "urls": []}
        if entry.get("member"):
            blob["role"] = "member"  # the wheel's member, not the wheel: nothing to serve
        elif entry.get("url"):
            blob["urls"] = [entry["url"]]
        blobs.append(blob)
    elif kind == "git":
        item["upstream"] = f"{entry.get('url')}@{entry.get('commit')}"
        blobs.append({"digest": entry["digest"], "urls": []})
    elif kind == "apt":
        item["upstream"] = sorted({r.url for r in source.apt.values()})
        blobs.append({"digest": entry["digest"], "urls": [], "role": "manifest"})
        for p in entry["packages"]:
            blobs.append(
                {
                    "digest": p["sha256"],
                    "size": p["size"],
                    "urls": [p["url"]],
                    "package": f"{p['name']} {p['version']} ({p['arch']})",
                }
            )
        # keys fetched by URL and pinned by fingerprint live in the store too (path keyrings
        # stay files of the repository or the host)
        keyrings = entry.get("keyrings") or {}
        for repo_name, repo in sorted(source.apt.items()):
            if isinstance(repo.keyring, AptKeyring) and repo_name in keyrings:
                blobs.append(
                    {"digest": keyrings[repo_name], "urls": [repo.keyring.url], "role": "keyring"}
                )
    elif kind == "oci":
        item["upstream"] = f"{source.oci}@{entry['digest']}"
        blobs = _oci_blobs(store, source, entry)
    else:
        raise LockError(f"lock entry for source {name!r} has an unknown kind {kind!r}")
    for b in blobs:
        path = store.blob_path(b["digest"])
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise IntegrityError(
                f"source {name!r}: blob {b['digest']} is not in the store {store.blobs_dir}"
            ) from None
        if b.get("size") is not None and b["size"] != size:
            raise IntegrityError(
                f"source {name!r}: store blob {path} has {size} bytes, the lock says {b['size']}",
                hint="delete it from the store and export again (it will be fetched)",
            )
        b["size"] = size
    item["blobs"] = blobs
    return item


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(READ_CHUNK):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def _place(src: Path, dst: Path, digest: str) -> bool:
    """Put ``src`` at ``dst`` atomically: a hard link when possible, else a copy checked against
    ``digest`` while it is written. Returns True for a link.

    Raises:
        IntegrityError: the store blob does not hash to its name (nothing is left at ``dst``).
    """
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=dst.parent)
    os.close(fd)
    try:
        os.unlink(tmp)
        try:
            os.link(src, tmp)
            linked = True
        except OSError:  # another file system, or links not allowed: copy
            linked = False
        if not linked:
            h = hashlib.sha256()
            with open(src, "rb") as fin, open(tmp, "wb") as fout:
                while chunk := fin.read(READ_CHUNK):
                    h.update(chunk)
                    fout.write(chunk)
                fout.flush()
                os.fsync(fout.fileno())
            if "sha256:" + h.hexdigest() != digest:
                raise IntegrityError(
                    f"store blob {src} is corrupt: its sha256 is sha256:{h.hexdigest()}",
                    hint="delete it (or the whole store) and export again",
                )
            os.chmod(tmp, 0o444)
        os.replace(tmp, dst)
        return linked
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def export_mirror(
    selections: list[RecipeSelection],
    ctx: FetchContext,
    directory: Path,
    *,
    verify: bool = False,
    progress: Callable[[str], None] | None = None,
) -> ExportReport:
    """Write every blob the selected sources need into ``directory``, then its ``index.json``.

    Sources missing from ``ctx.store`` are fetched first (:func:`nvkr.fetch.api.ensure`). A blob
    already in ``directory`` with the right size is reused (``verify``: re-hashed too); one of
    the wrong size or digest is replaced.

    Raises:
        FetchError, OfflineError: a source is not in the store and cannot be fetched (named).
        ChecksumError, IntegrityError: a fetched or stored blob fails its digest (exit 3).
    """
    say = progress or (lambda _msg: None)
    report = ExportReport(directory=directory)
    blobs_dir = directory / "blobs" / "sha256"
    blobs_dir.mkdir(parents=True, exist_ok=True)
    sources: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for sel in selections:
        for name in sel.skipped:
            skipped.append(
                {
                    "recipe": sel.name,
                    "name": name,
                    "kind": "path",
                    "reason": "a directory of the repository: it travels with the repository",
                }
            )
            report.skipped.append(f"{sel.name}/{name}")
        for key in sorted(sel.bindings):
            name, source, entry, base_dir, variants = sel.bindings[key]
            missing = not all_present(ctx.store, entry)
            if missing:
                say(f"fetching {name} (not in the store)")
                try:
                    ensure(name, source, entry, ctx, base_dir=base_dir)
                except FetchError as e:
                    raise type(e)(
                        f"cannot export source {name!r} of recipe {sel.path}: {e.message}",
                        hint=e.hint
                        or "fetch it into the store first (nvkr build), or give --mirror",
                    ) from e
                report.fetched.append(name)
            item = source_blobs(ctx.store, name, source, entry)
            item["recipe"] = sel.name
            item["variants"] = sorted(variants)
            sources.append(item)
    seen: dict[str, int] = {}
    for item in sources:
        for b in item["blobs"]:
            if b["digest"] in seen:
                continue
            seen[b["digest"]] = b["size"]
            src = ctx.store.checked_path(b["digest"])  # never export a corrupt blob
            dst = blobs_dir / hex_of(b["digest"])
            if (
                dst.is_file()
                and dst.stat().st_size == b["size"]
                and (not verify or _file_sha256(dst) == b["digest"])
            ):
                report.reused += 1
                report.reused_bytes += b["size"]
                continue
            with ctx.store.linking([b["digest"]]):  # a link changes its ctime: sealed
                linked = _place(src, dst, b["digest"])
            if linked:
                report.linked += 1
            report.written += 1
            report.written_bytes += b["size"]
    report.sources = len(sources)
    index = {
        "nvkrMirror": MIRROR_VERSION,
        "recipes": [
            {
                "name": s.name,
                "path": s.path,
                "digest": s.digest,
                "variants": s.variants,
                "lockfile": {"path": s.lockfile_path, "digest": s.lockfile_digest},
            }
            for s in selections
        ],
        "sources": sources,
        "skipped": skipped,
        "blobs": {"count": len(seen), "bytes": sum(seen.values())},
    }
    write_atomic(directory / INDEX, canonical_json_file(index))
    return report
