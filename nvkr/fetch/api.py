"""Fetching sources: from a recipe's pins to verified blobs in the store.

Two moments use this module. ``nvkr lock`` calls :func:`resolve` for each source: it fetches the
source (or finds it in the store), verifies it against its pin and returns its *resolved
identity*, the lockfile entry. ``nvkr build`` calls :func:`ensure` with that entry: when the
store already holds the blob nothing else happens (no network, no subprocess), otherwise the
source is fetched again, through the mirrors, and verified against the entry. Each source kind
is a line of the source table (:mod:`nvkr.fetch.table`) and a
:class:`~nvkr.fetch.kind.SourceKind` (:mod:`nvkr.fetch.kinds`), which :func:`fetcher_for` finds;
the entry shapes are documented on the ``resolve`` of each fetching module:

- ``url``  (:mod:`nvkr.fetch.http`): http(s)/file downloads, pinned by sha256/sha512 or a
  checksum file (:mod:`nvkr.fetch.checksums`);
- ``git``  (:mod:`nvkr.fetch.git`): a commit's tree as a deterministic tar;
- ``pypi`` (:mod:`nvkr.fetch.pypi`): a wheel (or one file in it) fetched with pip;
- ``path`` (:mod:`nvkr.fetch.path`): a directory of this repository, hashed on every run;
- ``oci``  (:mod:`nvkr.fetch.oci`): an image or index by digest with its whole closure;
- ``apt``  (:mod:`nvkr.fetch.apt`): a closed set of Debian packages resolved from signed apt
  metadata at lock time, every .deb kept in the store.

Every entry is a :class:`~nvkr.fetch.entries.LockEntry` of its kind's type (the table line's),
with ``kind`` and ``digest`` (``sha256:<hex>`` of the blob in the store); its JSON form holds no
floats; URLs in entries are the recipe's, never a mirror's.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from nvkr.action import ResolvedSource
from nvkr.errors import LockError
from nvkr.fetch import table
from nvkr.fetch.context import FetchContext
from nvkr.fetch.entries import LockEntry
from nvkr.fetch.kind import SourceKind
from nvkr.store import Store

__all__ = [
    "SourceKind",
    "all_present",
    "descriptors",
    "ensure",
    "entry_blobs",
    "entry_kind",
    "fetcher_for",
    "fetcher_of",
    "known_kind",
    "resolve",
]

_LOADED: dict[table.SourceLine, SourceKind[LockEntry]] = {}


def _load(line: table.SourceLine) -> SourceKind[LockEntry]:
    """The :class:`SourceKind` of a table line, its module imported now (``module:Class``)."""
    fetcher = _LOADED.get(line)
    if fetcher is None:
        module, _, cls = line.fetcher.partition(":")
        fetcher = _LOADED[line] = getattr(importlib.import_module(module), cls)()
    return fetcher


def fetcher_for(kind: str) -> SourceKind[LockEntry]:
    """The :class:`SourceKind` of ``kind`` (a lock entry's ``kind``).

    Raises:
        LockError: no line of the source table has that kind.
    """
    fetcher = known_kind(kind)
    if fetcher is not None:
        return fetcher
    known = ", ".join(line.kind for line in table.SOURCE_TABLE)
    raise LockError(f"unknown source kind {kind!r}", hint=f"known kinds: {known}")


def fetcher_of(source: Any) -> SourceKind[LockEntry]:
    """The :class:`SourceKind` of a source model.

    Raises:
        TypeError: ``source`` is not the model of any line of the source table.
    """
    for line in table.SOURCE_TABLE:
        if type(source) is line.model:
            return _load(line)
    raise TypeError(f"no fetcher for source type {type(source).__name__}")


def known_kind(kind: object) -> SourceKind[LockEntry] | None:
    """The :class:`SourceKind` of ``kind``, None when no line of the source table has it (a
    document another nvkr wrote, read as far as this one can)."""
    for line in table.SOURCE_TABLE:
        if line.kind == kind:
            return _load(line)
    return None


def entry_kind(name: str, resolved: LockEntry) -> SourceKind[LockEntry]:
    """The :class:`SourceKind` of the lock entry of source ``name``.

    Raises:
        LockError: the entry's kind is none of the table's (names the source).
    """
    kind = resolved.kind
    fetcher = known_kind(kind)
    if fetcher is None:
        raise LockError(f"lock entry for source {name!r} has an unknown kind {kind!r}")
    return fetcher


def resolve(name: str, source: Any, ctx: FetchContext, *, base_dir: Path) -> LockEntry:
    """Lock time: fetch ``source`` (or use the store), verify it against its pin and return its
    resolved identity, the lockfile entry (of the kind's entry type).

    Args:
        name: the source's name in the recipe (for messages).
        base_dir: the directory of the recipe file that declares the source (path sources).
    Returns:
        the entry; ``entry.digest`` (``sha256:<hex>``) names the blob now in ``ctx.store``.
        Shapes: see the ``resolve`` of :mod:`~nvkr.fetch.http`, :mod:`~nvkr.fetch.git`,
        :mod:`~nvkr.fetch.pypi`, :mod:`~nvkr.fetch.path`, :mod:`~nvkr.fetch.oci` and
        :mod:`~nvkr.fetch.apt`.
    Raises:
        ChecksumError: the content does not match its pin (exit 3); nothing is stored.
        DowngradeError: an https URL (a file, a checksum file, a registry's blob) redirected
            to plain http (exit 3, :mod:`nvkr.origin`); nothing is fetched from the http URL.
        FetchError: the source cannot be fetched (unreachable, HTTP error, HTML page, empty body,
            unknown commit, no matching wheel, missing directory, bad checksum file).
        OfflineError: ``ctx.offline`` and the network would be needed.
        TypeError: ``source`` is no source model of the table.
    """
    return fetcher_of(source).resolve(name, source, ctx, base_dir=base_dir)


def ensure(
    name: str, source: Any, resolved: LockEntry, ctx: FetchContext, *, base_dir: Path
) -> str:
    """Build time: make ``ctx.store`` hold the content ``resolved`` describes; return its blob
    digest ``sha256:<hex>``.

    When the blob is already in the store this touches no network and runs no tool (path
    sources are re-hashed from disk, which is the point of them). Otherwise the source is
    fetched through ``ctx.mirrors`` and verified against ``resolved`` (size and digests).

    Raises:
        LockError: ``resolved`` does not describe ``source`` (another kind, URL, commit or pin).
        OfflineError: the blob is missing and ``ctx.offline``; names the source and what is missing.
        ChecksumError, DowngradeError, FetchError: as :func:`resolve`.
    """
    return fetcher_of(source).ensure(name, source, resolved, ctx, base_dir=base_dir)


def entry_blobs(resolved: LockEntry) -> list[str]:
    """Every blob digest a lock entry's content is stored as: its own, and an apt source's
    .debs or an OCI source's image blobs (a store can lose those alone: ``store gc``,
    ``store verify --repair``); :meth:`SourceKind.blobs` of its kind."""
    return fetcher_for(resolved.kind).blobs(resolved)


def descriptors(src: ResolvedSource) -> list[dict[str, Any]]:
    """Every in-toto ResourceDescriptor a bound source stands for, as SLSA
    ``resolvedDependencies`` lists them: :meth:`SourceKind.descriptors` of its entry's kind.

    Raises:
        LockError: the entry's kind is none of the table's.
    """
    return entry_kind(src.name, src.entry).descriptors(src.name, src.entry)


def all_present(store: Store, resolved: LockEntry) -> bool:
    """Whether ``store`` holds every blob of :func:`entry_blobs` (then :func:`ensure` fetches
    nothing)."""
    return all(store.has_blob(d) for d in entry_blobs(resolved))
