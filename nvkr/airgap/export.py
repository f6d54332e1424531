"""``nvkr mirror export``: every source the recipes' lockfiles pin, as the blobs a build reads
from the store, into ``DIR/blobs/sha256/`` (hard links where possible; what the store lacks is
fetched first), and ``DIR/index.json`` written last (its shape in :mod:`nvkr.airgap`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nvkr.airgap.index import INDEX, MIRROR_VERSION, READ_CHUNK
from nvkr.atomic import write_atomic
from nvkr.canonical import canonical_json, canonical_json_file, hex_of
from nvkr.errors import FetchError, IntegrityError, LockError
from nvkr.fetch.api import all_present, ensure, entry_kind, fetcher_of
from nvkr.fetch.context import FetchContext
from nvkr.fetch.entries import LockEntry
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
    bindings: dict[bytes, tuple[str, Any, LockEntry, Path, list[str]]]
    #: ``(name, kind)`` of the sources of a local kind (path), which the export leaves out
    skipped: list[tuple[str, str]]


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

    if resolver.lock is None:
        raise LockError(
            f"{loaded.path}: there is no lockfile at {resolver.lock_path}",
            hint=f"run `nvkr lock {loaded.path}` first: an export holds what the lockfile pins",
        )
    bindings: dict[bytes, tuple[str, Any, LockEntry, Path, list[str]]] = {}
    skipped: set[tuple[str, str]] = set()
    for variant in variants:
        for name, source in sorted(variant.recipe.sources.items()):
            fetcher = fetcher_of(source)
            if fetcher.local:  # the repository's own files travel with it
                skipped.add((name, fetcher.kind))
                continue
            bound = resolver.source_for(variant, name)
            for src in (bound, _native_debs(resolver, variant, bound)):
                if src is None:
                    continue
                key = canonical_json([name, src.spec.model_dump(exclude_none=True)])
                if key not in bindings:
                    bindings[key] = (name, src.spec, src.entry, src.base_dir, [])
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


def _native_debs(resolver: Any, variant: Any, bound: Any) -> Any:
    """The amd64 .debs a foreign tree of the apt source ``bound`` runs its perl and python
    from (:mod:`nvkr.nativedebs`), as the plan takes them from the lockfile, or None: an
    offline build on an x86-64 host needs them beside the tree's own."""
    from nvkr.fetch.entries import AptEntry
    from nvkr.nativedebs import LOCK_ARCH, wanted_debs

    entry = bound.entry
    if not isinstance(entry, AptEntry) or entry.arch == LOCK_ARCH:
        return None
    wanted = wanted_debs([p.to_json() for p in entry.packages])
    return resolver.locked_debs(variant, bound.name, LOCK_ARCH, wanted) if wanted else None


def source_blobs(store: Store, name: str, source: Any, entry: LockEntry) -> dict[str, Any]:
    """The index entry of one resolved source (its blobs, their upstream URLs and sizes): what
    its kind's :meth:`~nvkr.fetch.kind.SourceKind.mirror_files` says, every blob checked.

    Raises:
        IntegrityError: a blob is missing from the store or its size differs from the lock.
        LockError: the entry is of no kind of the source table.
    """
    item: dict[str, Any] = {"name": name, "kind": entry.kind, "digest": entry.digest}
    item.update(entry_kind(name, entry).mirror_files(store, name, source, entry))
    blobs: list[dict[str, Any]] = item.pop("blobs")
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
        for name, kind in sel.skipped:
            skipped.append(
                {
                    "recipe": sel.name,
                    "name": name,
                    "kind": kind,
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
