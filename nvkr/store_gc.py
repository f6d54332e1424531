"""Keeping the store bounded: what each build used (its GC root), ``nvkr store du`` and ``gc``.

The store only grows: every changed rebuild adds outputs, and nothing said which of the old ones
anybody still wants. So every ``nvkr build`` that finishes writes a **GC root**,
``roots/<invocation id>.json``: the action keys of its whole plan (not only those it ran: a no-op
build roots what a full rebuild would reuse), the store blobs of every source those actions read
(a lock entry's digests: a url file, a wheel, every .deb of an apt closure, an OCI closure) and
the release sets it wrote. ``gc`` then marks and sweeps (Nix's gcroots in spirit):

- **mark**: the roots kept (every root newer than ``--older-than``; the roots that wrote a
  release set named by ``--keep DIR``, and every blob in that layout; with neither, the newest
  root of each recipe), then the action records they name, with the outputs and logs those
  records hold;
- **sweep**: every blob, seal, action record, unpacked tool (``tools/<hex>`` of a blob) and root
  not marked. With ``--max-size`` the oldest kept roots (never those of ``--keep``) are let go
  until what is kept fits.

Concurrency: ``gc`` holds the reader lock exclusively (:meth:`Store.reading`), then the store
lock. Every verb that reads the store takes the reader lock shared for as long as it runs
(``build``, ``plan``, ``lock`` and ``mirror`` through their session, ``pull``, ``verify``,
``mirror import``), so gc waits for them and they wait for a running gc, never for each other;
``build`` and ``mirror export`` then take the store lock, in the same order, so nothing
deadlocks. A blob already hard-linked into ``dist/`` or a pull's directory stays there whatever the
store deletes: the link is a second name of the same bytes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nvkr.canonical import canonical_json, hex_of
from nvkr.errors import UsageError
from nvkr.store import Store

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def entry_blobs(entry: Any) -> set[str]:
    """Every ``sha256:<hex>`` a lock entry names: the blobs a source stands for in the store
    (the file; the wheel and its member; the apt manifest, every .deb and fetched keyring; the
    whole OCI closure). Naming a digest the store lacks is harmless: it only keeps it."""
    found: set[str] = set()
    todo = [entry]
    while todo:
        value = todo.pop()
        if isinstance(value, str) and _DIGEST.fullmatch(value):
            found.add(value)
        elif isinstance(value, dict):
            todo.extend(value.values())
        elif isinstance(value, list):
            todo.extend(value)
    return found


def write_root(
    store: Store,
    *,
    invocation_id: str,
    recipe: str,
    plan: Any,
    release_sets: Iterable[dict[str, Any]],
    finished: float | None = None,
) -> Path:
    """Record what a finished build used, as ``roots/<invocation_id>.json`` (module doc).

    Args:
        plan: the :class:`nvkr.plan.Plan` built (every action key, and its sources' entries).
        release_sets: ``{"name", "digest", "path"}`` of each release set written.
        finished: seconds since 1970 (default: now).
    """
    doc = root_document(recipe=recipe, plan=plan, release_sets=release_sets)
    return write_root_document(store, doc, invocation_id=invocation_id, finished=finished)


def root_document(
    *, recipe: str, plan: Any, release_sets: Iterable[dict[str, Any]]
) -> dict[str, Any]:
    """What a GC root says of a build but its ``invocationId`` and ``finishedOn``
    (:func:`write_root`'s arguments); the plan memo (:mod:`nvkr.planmemo`) keeps it to root a
    no-op build it answers without a plan."""
    blobs: set[str] = set()
    for action in plan.actions.values():
        for src in action.sources.values():
            blobs |= entry_blobs(src.entry.to_json())
    return {
        "recipe": recipe,
        "actions": sorted(plan.actions),
        "blobs": sorted(blobs),
        "releaseSets": sorted(
            ({k: str(r[k]) for k in ("name", "digest", "path")} for r in release_sets),
            key=lambda r: r["name"],
        ),
    }


def write_root_document(
    store: Store, doc: dict[str, Any], *, invocation_id: str, finished: float | None = None
) -> Path:
    """Write :func:`root_document`'s ``doc`` as the root of build ``invocation_id``, finished
    at ``finished`` (seconds since 1970, default: now)."""
    root = {
        **doc,
        "invocationId": invocation_id,
        "finishedOn": int(finished if finished is not None else time.time()),
    }
    path = store.roots_dir / f"{invocation_id}.json"
    store.write_atomic(path, canonical_json(root))
    return path


@dataclass
class Root:
    path: Path
    doc: dict[str, Any]
    #: the root file's mtime in nanoseconds: orders builds that finished in the same second
    written: int = 0

    @property
    def finished(self) -> int:
        value = self.doc.get("finishedOn")
        return value if isinstance(value, int) else 0

    @property
    def order(self) -> tuple[int, int, str]:
        """Oldest first: ``finishedOn`` (whole seconds), then when the file was written, then
        the name."""
        return (self.finished, self.written, self.path.name)


def _roots(store: Store) -> list[Root]:
    roots = []
    for path in sorted(store.roots_dir.glob("*.json")):
        try:
            doc = json.loads(path.read_bytes())
            written = path.stat().st_mtime_ns
        except (OSError, ValueError):
            continue  # unreadable: not a root, swept with the rest
        if isinstance(doc, dict):
            roots.append(Root(path, doc, written))
    return sorted(roots, key=lambda r: r.order)


def _records(store: Store) -> Iterator[tuple[Path, str, dict[str, Any] | None]]:
    """``(path, action key, record or None when unreadable)`` of every file in ``actions/``
    (a name that is no key gives a key no root names)."""
    for path in sorted(store.actions_dir.iterdir()):
        try:
            doc = json.loads(path.read_bytes())
        except (OSError, ValueError):
            doc = None
        yield (
            path,
            "sha256:" + path.name.removesuffix(".json"),
            (doc if isinstance(doc, dict) else None),
        )


def _record_blobs(record: dict[str, Any]) -> set[str]:
    out = {o["digest"] for o in record.get("outputs") or [] if isinstance(o, dict)}
    if isinstance(record.get("log"), str):
        out.add(record["log"])
    return {d for d in out if isinstance(d, str) and _DIGEST.fullmatch(d)}


def _size(path: Path) -> int:
    """Bytes of the regular files at or below ``path`` (symlinks not followed)."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    if not os.path.isdir(path) or os.path.islink(path):
        return st.st_size if os.path.isfile(path) else 0
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, name))
                if not os.path.islink(os.path.join(dirpath, name)):
                    total += st.st_size
    return total


def _blob_sizes(store: Store) -> dict[str, int]:
    sizes = {}
    for entry in os.scandir(store.blobs_dir):
        with contextlib.suppress(OSError):
            if entry.is_file(follow_symlinks=False):
                sizes["sha256:" + entry.name] = entry.stat(follow_symlinks=False).st_size
    return sizes


# -- du ------------------------------------------------------------------------------------------
@dataclass
class Usage:
    """Bytes by kind: ``sources`` (blobs a root names as a source's), ``outputs`` by builder,
    ``logs`` (build logs), ``unreached`` (blobs no root or record names), and the directories
    ``tools``, ``cache``, ``tmp``, ``logs/boot-test/`` (boot consoles) and ``metadata`` (records,
    seals, roots, the plan memo in ``state/``, the actions' durations in ``logs/durations/``)."""

    sources: int = 0
    outputs: dict[str, int] = field(default_factory=dict)
    build_logs: int = 0
    unreached: int = 0
    tools: int = 0
    cache: int = 0
    tmp: int = 0
    consoles: int = 0
    metadata: int = 0
    blobs: int = 0

    @property
    def total(self) -> int:
        return (
            self.sources
            + sum(self.outputs.values())
            + self.build_logs
            + self.unreached
            + self.tools
            + self.cache
            + self.tmp
            + self.consoles
            + self.metadata
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "sources": self.sources,
            "outputs": dict(sorted(self.outputs.items())),
            "buildLogs": self.build_logs,
            "unreached": self.unreached,
            "tools": self.tools,
            "cache": self.cache,
            "tmp": self.tmp,
            "bootConsoles": self.consoles,
            "metadata": self.metadata,
            "blobs": self.blobs,
            "total": self.total,
        }


def usage(store: Store) -> Usage:
    """What the store holds, by kind (each blob counted once: as an output of the first record
    naming it, release sets last, else as a build log, else as a source, else unreached)."""
    sizes = _blob_sizes(store)
    seen: set[str] = set()
    u = Usage(blobs=len(sizes))
    # a release set's record lists every blob of its layout again: the builders that made them
    # count first
    records = sorted(
        (r for _, _, r in _records(store) if r is not None),
        key=lambda r: r.get("builder") == "release-set",
    )
    for record in records:
        builder = str(record.get("builder") or "?")
        for out in record.get("outputs") or []:
            digest = out.get("digest") if isinstance(out, dict) else None
            if digest in sizes and digest not in seen:
                seen.add(digest)
                u.outputs[builder] = u.outputs.get(builder, 0) + sizes[digest]
    for record in records:
        log = record.get("log")
        if log in sizes and log not in seen:
            seen.add(log)
            u.build_logs += sizes[log]
    for root in _roots(store):
        for digest in root.doc.get("blobs") or []:
            if digest in sizes and digest not in seen:
                seen.add(digest)
                u.sources += sizes[digest]
    u.unreached = sum(size for digest, size in sizes.items() if digest not in seen)
    u.tools = _size(store.tools_dir)
    u.cache = _size(store.cache_dir)
    u.tmp = _size(store.tmp_dir)
    u.consoles = _size(store.root / "logs" / "boot-test")
    state = store.root / "state"  # the plan memo (nvkr.planmemo)
    durations = store.root / "logs" / "durations"  # actions' last run times (estimates)
    metadata = (store.actions_dir, store.seals_dir, store.roots_dir, state, durations)
    u.metadata = sum(_size(d) for d in metadata)
    return u


# -- gc ------------------------------------------------------------------------------------------
@dataclass
class Sweep:
    """What :func:`collect` removed (or would, with ``dry_run``): counts and bytes."""

    roots_kept: int = 0
    roots_removed: int = 0
    blobs_kept: int = 0
    bytes_kept: int = 0
    blobs_removed: int = 0
    bytes_removed: int = 0
    records_removed: int = 0
    tools_removed: int = 0
    tool_bytes_removed: int = 0
    dry_run: bool = False
    over_size: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "dryRun": self.dry_run,
            "rootsKept": self.roots_kept,
            "rootsRemoved": self.roots_removed,
            "blobsKept": self.blobs_kept,
            "bytesKept": self.bytes_kept,
            "blobsRemoved": self.blobs_removed,
            "bytesRemoved": self.bytes_removed,
            "recordsRemoved": self.records_removed,
            "toolsRemoved": self.tools_removed,
            "toolBytesRemoved": self.tool_bytes_removed,
            "overSize": self.over_size,
        }


def _layout_digests(layout: Path) -> tuple[set[str], set[str]]:
    """``(digests its index.json names, every blob digest in its blobs/)`` of a layout.

    Raises:
        UsageError: ``layout`` is no OCI image layout.
    """
    try:
        index = json.loads((layout / "index.json").read_bytes())
        named = {m["digest"] for m in index["manifests"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(
            f"--keep {layout}: not a release set layout (no readable index.json)",
            hint="give a release set's directory, e.g. dist/<name>",
        ) from e
    blobs = {
        f"{alg.name}:{p.name}"
        for alg in (layout / "blobs").iterdir()
        if alg.is_dir()
        for p in alg.iterdir()
    }
    return named, blobs


def collect(
    store: Store,
    *,
    keep: Iterable[Path] = (),
    older_than: int | None = None,
    max_size: int | None = None,
    dry_run: bool = False,
    now: float | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> Sweep:
    """Mark and sweep the store (module doc). ``older_than`` in seconds, ``max_size`` in bytes.
    ``on_wait`` is told, before gc blocks, that it waits for a running build or reader
    (:mod:`nvkr.storelock`; default: a warning line).

    Raises:
        UsageError: a ``keep`` directory is no release set layout.
    """
    now = time.time() if now is None else now
    layouts = [_layout_digests(Path(d)) for d in keep]
    with (
        store.reading(exclusive=True, on_wait=on_wait),
        store.lock(on_wait=on_wait),
    ):  # the order every verb takes them in
        roots = _roots(store)
        pinned, recent = _chosen_roots(roots, layouts, older_than, now)
        kept = {r.path: r for r in [*pinned, *recent]}
        files = list(_records(store))
        records = {key: doc for _, key, doc in files if doc is not None}
        sizes = _blob_sizes(store)
        layout_blobs: set[str] = set().union(*(b for _, b in layouts)) if layouts else set()
        actions, blobs = _marked(kept.values(), records, layout_blobs)
        sweep = Sweep(dry_run=dry_run)
        if max_size is not None:
            pinned_paths = {r.path for r in pinned}
            evictable = sorted(
                (r for r in kept.values() if r.path not in pinned_paths), key=lambda r: r.order
            )
            while sum(sizes.get(d, 0) for d in blobs) > max_size and evictable:
                del kept[evictable.pop(0).path]
                actions, blobs = _marked(kept.values(), records, layout_blobs)
            sweep.over_size = sum(sizes.get(d, 0) for d in blobs) > max_size
        sweep.roots_kept = len(kept)
        sweep.blobs_kept = sum(1 for d in sizes if d in blobs)
        sweep.bytes_kept = sum(size for d, size in sizes.items() if d in blobs)
        _sweep_roots(store, sweep, roots, kept)
        _sweep_unmarked(store, sweep, files, actions, blobs, sizes)
    return sweep


def _chosen_roots(
    roots: list[Root],
    layouts: list[tuple[set[str], set[str]]],
    older_than: int | None,
    now: float,
) -> tuple[list[Root], list[Root]]:
    """``(pinned, recent)``: the roots whose release sets a ``--keep`` layout names (never let
    go), and those kept by age (newer than ``older_than`` seconds), else none when ``--keep`` is
    given, else the newest build of each recipe."""
    pinned: list[Root] = []
    for named, _ in layouts:
        pinned += [
            r
            for r in roots
            if any(s.get("digest") in named for s in r.doc.get("releaseSets") or [])
        ]
    if older_than is not None:
        recent = [r for r in roots if r.finished >= now - older_than]
    elif layouts:
        recent = []
    else:  # the newest build of each recipe
        newest: dict[str, Root] = {}
        for r in roots:
            newest[str(r.doc.get("recipe"))] = r
        recent = list(newest.values())
    return pinned, recent


def _marked(
    chosen: Iterable[Root], records: dict[str, Any], layout_blobs: set[str]
) -> tuple[set[str], set[str]]:
    """The action keys and blob digests the ``chosen`` roots use (with the blobs of their
    actions' records), plus the ``--keep`` layouts' blobs."""
    actions: set[str] = set()
    blobs = set(layout_blobs)
    for r in chosen:
        actions |= set(r.doc.get("actions") or [])
        blobs |= set(r.doc.get("blobs") or [])
    for key in actions:
        record = records.get(key)
        if record is not None:
            blobs |= _record_blobs(record)
    return actions, blobs


def _sweep_roots(store: Store, sweep: Sweep, roots: list[Root], kept: dict[Path, Root]) -> None:
    """Delete the roots not kept, and the unreadable ones (not with ``dry_run``)."""
    for r in roots:
        if r.path not in kept:
            sweep.roots_removed += 1
            if not sweep.dry_run:
                _unlink(r.path)
    readable = {r.path for r in roots}
    for path in store.roots_dir.iterdir():  # unreadable roots
        if not sweep.dry_run and path not in readable:
            _unlink(path)


def _sweep_unmarked(
    store: Store,
    sweep: Sweep,
    files: list[tuple[Path, str, dict[str, Any] | None]],
    actions: set[str],
    blobs: set[str],
    sizes: dict[str, int],
) -> None:
    """Delete the action records, blobs (with their seals), orphan seals and unpacked tools
    nothing kept uses, counting them in ``sweep`` (only counting with ``dry_run``)."""
    dry_run = sweep.dry_run
    for path, key, _ in files:
        if key not in actions:
            sweep.records_removed += 1
            if not dry_run:
                _unlink(path)
    for digest, size in sizes.items():
        if digest not in blobs:
            sweep.blobs_removed += 1
            sweep.bytes_removed += size
            if not dry_run:
                _unlink(store.blob_path(digest))
                _unlink(store.seals_dir / hex_of(digest))
    if not dry_run:
        for seal in store.seals_dir.iterdir():
            if "sha256:" + seal.name not in sizes:
                _unlink(seal)
    for tool in store.tools_dir.iterdir():
        if "sha256:" + tool.name not in blobs:
            sweep.tools_removed += 1
            sweep.tool_bytes_removed += _size(tool)
            if not dry_run:
                shutil.rmtree(tool, ignore_errors=True)


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
