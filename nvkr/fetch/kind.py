"""What nvkr asks of a source kind: :class:`SourceKind`, the one place a kind's behaviour lives.

Each line of the source table (:mod:`nvkr.fetch.table`) names a kind's recipe model and its
``SourceKind`` subclass (``module:Class``, imported when a source of that kind is first used:
the fetching code and what it imports stay unloaded until then). The engine asks the table
(:func:`nvkr.fetch.api.fetcher_for`) and never branches on a kind. A subclass implements
:meth:`~SourceKind.resolve` and :meth:`~SourceKind.ensure` (a :class:`ModuleKind`: by naming the
module that does both, :meth:`ModuleKind.fetcher`) and overrides the rest where its lock entry
holds more than one blob. A kind is generic in its lock entry's type (its line's ``entry``): the
engine hands each kind only entries of its own type, read through the table.
"""

from __future__ import annotations

import abc
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from nvkr.fetch.entries import LockEntry
from nvkr.fetch.table import read_entry

if TYPE_CHECKING:
    from nvkr.fetch.context import FetchContext
    from nvkr.store import Store


#: a kind's lock entry type
E = TypeVar("E", bound=LockEntry)


class SourceKind(abc.ABC, Generic[E]):
    """One source kind: its lock-time and build-time halves and what the rest of nvkr reads
    from its lock entries (the ``resolved`` member of a lockfile source, an ``E``)."""

    #: the recipe key that names a source of this kind, and its lock entry's ``kind``
    kind: str = ""
    #: the repository's own files (a path source): hashed afresh on every run, so the lockfile
    #: pins no digest for it, a build never reports fetching it and a mirror export leaves it out
    local: bool = False
    #: the members of its lock entry that identify what was fetched (``nvkr diff`` of two
    #: lockfiles names a change of these; sizes and per-blob lists follow from them)
    identity: tuple[str, ...] = ("kind", "digest")
    #: its ``nvkr lock --update`` hook, an :class:`nvkr.update.hooks.UpdateHook` as
    #: ``module:Class`` (imported only by ``lock --update``); None: the kind has no upstream
    #: listing, and ``lock --update`` leaves its sources alone with a note
    update: str | None = None

    @abc.abstractmethod
    def resolve(self, name: str, source: Any, ctx: FetchContext, *, base_dir: Path) -> E:
        """Lock time: fetch ``source`` (or use the store), verify it against its pin and return
        its lock entry (see :func:`nvkr.fetch.api.resolve`)."""

    @abc.abstractmethod
    def ensure(
        self,
        name: str,
        source: Any,
        resolved: E,
        ctx: FetchContext,
        *,
        base_dir: Path,
    ) -> str:
        """Build time: make the store hold what ``resolved`` describes and return its digest
        (see :func:`nvkr.fetch.api.ensure`)."""

    def check(self, name: str, source: Any, entry: E) -> None:
        """That ``entry``, read from a lockfile, is the entry of ``source`` as the recipe writes
        it: of this kind, and agreeing with what ``source.lock_identity()`` names (the recipe
        model's pins: a URL, a commit, a wheel's member; :func:`nvkr.fetch.context.check_entry`).
        Checked when a source is bound to its entry, so an edited entry is refused even where
        every action using it is cached; :meth:`ensure` checks the same before fetching.

        Raises:
            LockError: the entry is of another kind or disagrees with the recipe on a member.
        """
        from nvkr.fetch.context import check_entry

        check_entry(name, entry.to_json(), self.kind, needs_digest=not self.local,
                    **source.lock_identity())  # fmt: skip

    def blobs(self, entry: E) -> list[str]:
        """Every blob digest the entry's content is stored as: its own (default), and for a kind
        whose content is several blobs (an apt source's .debs, an OCI closure) each of them."""
        return [entry.digest]

    def descriptor(self, name: str, entry: E) -> dict[str, Any]:
        """The in-toto ResourceDescriptor of the source for SLSA ``resolvedDependencies`` (the
        release set's provenance, and through it the SBOMs): ``name`` and ``digest.sha256``
        (default); a kind adds its ``uri``, other digests, ``mediaType`` or ``annotations``, URLs
        without user info (:mod:`nvkr.redact`)."""
        return {"name": name, "digest": {"sha256": entry.digest.split(":", 1)[1]}}

    def descriptors(self, name: str, entry: E) -> list[dict[str, Any]]:
        """Every ResourceDescriptor the source stands for: :meth:`descriptor` (default), and
        one for each part a kind pins by its own digest (an apt source's .debs)."""
        return [self.descriptor(name, entry)]

    def debs(self, entry: E) -> list[dict[str, Any]] | None:
        """The Debian packages the entry pins (``{"name", "version", "arch", "url", "size",
        "sha256", ...}`` each: the lockfile's ``tools`` summarise a tools tree's C toolchain from
        them, ``nvkr diff`` compares them); None (default) for a kind that pins none."""
        return None

    def version(self, entry: E) -> str | None:
        """The release the entry pins by version (a wheel's), which the lockfile's ``tools``
        name a toolchain source by; None (default) for a kind pinned otherwise."""
        return None

    def commit_time(self, entry: E) -> int | None:
        """When the entry's content was made upstream, in seconds since 1970 (a git commit's
        committer time): the newest of a recipe's is ``SOURCE_DATE_EPOCH`` when the recipe sets
        no epoch; None (default) for a kind that records none."""
        return None

    def to_download(self, entry: E, store: Store) -> tuple[tuple[int, int] | None, int | None]:
        """What fetching the entry downloads, for the build's report: the parts ``store`` lacks
        and those locked (counts; None by default: one blob) and the bytes when known (by
        default the entry's ``size``, when its type has one)."""
        size = getattr(entry, "size", None)
        return None, size if isinstance(size, int) else None

    def mirror_files(self, store: Store, name: str, source: Any, entry: E) -> dict[str, Any]:
        """What ``nvkr mirror export`` writes of a source of this kind (:mod:`nvkr.airgap`):
        the members of its index entry beside ``name``, ``kind`` and ``digest``: ``upstream``
        (what it came from, for a reader), ``blobs`` (``{"digest", "urls": [upstream URLs a
        mirror answers with it], "size"?, "mediaType"?, "role"?, "package"?}`` each; the export
        checks every one is in ``store`` and records its size) and optionally ``checksum``
        (``{"url", "algorithm", "text"}``: a checksum file ``nvkr mirror serve`` answers). By
        default: the descriptor's ``uri`` (else ``name``) and the entry's one blob, served at no
        URL (an offline build takes it from the store)."""
        upstream = self.descriptor(name, entry).get("uri") or name
        return {"upstream": upstream, "blobs": [{"digest": entry.digest, "urls": []}]}

    def mirror_roots(self, url: str) -> list[str]:
        """The URLs beside a blob's upstream ``url`` that ``nvkr mirror serve`` answers with an
        empty JSON object, as the upstream does (an OCI registry's API version check,
        ``/v2/``); none by default."""
        return []

    def where(self, name: str, entry: E, debs: tuple[int, int] | None) -> str:
        """What a build's fetch line names the source by: its descriptor's ``uri`` (default),
        else ``name``; ``debs`` is :meth:`to_download`'s count, for a kind that has one."""
        return str(self.descriptor(name, entry).get("uri") or name)


class Fetcher(Protocol):
    """A module that fetches one kind of source (``nvkr.fetch.apt``, ``nvkr.fetch.http``, ...):
    its lock-time and build-time halves, as :class:`SourceKind` asks for them, on the entry's
    JSON form (:meth:`~nvkr.fetch.entries.Record.to_json`), which the module documents."""

    def resolve(
        self, name: str, source: Any, ctx: FetchContext, *, base_dir: Path
    ) -> dict[str, Any]: ...

    def ensure(
        self,
        name: str,
        source: Any,
        resolved: dict[str, Any],
        ctx: FetchContext,
        *,
        base_dir: Path,
    ) -> str: ...


class ModuleKind(SourceKind[E]):
    """A kind whose fetching lives in a module of its own (every built-in kind): it names the
    module (:meth:`fetcher`, imported only when a source of the kind is resolved or ensured)
    and the two halves are that module's, on the entry's JSON form (read into the entry type
    of the kind's table line)."""

    @abc.abstractmethod
    def fetcher(self) -> Fetcher:
        """The module that resolves and ensures sources of this kind."""

    def resolve(self, name: str, source: Any, ctx: FetchContext, *, base_dir: Path) -> E:
        data = self.fetcher().resolve(name, source, ctx, base_dir=base_dir)
        entry = read_entry(data, where=f"the lock entry resolved for source {name!r}")
        if entry.kind != self.kind:  # the fetching module's error: a lock entry of another kind
            raise TypeError(f"the {self.kind} fetcher resolved an entry of kind {entry.kind!r}")
        return cast(E, entry)

    def ensure(
        self,
        name: str,
        source: Any,
        resolved: E,
        ctx: FetchContext,
        *,
        base_dir: Path,
    ) -> str:
        data = resolved.to_json()
        return self.fetcher().ensure(name, source, data, ctx, base_dir=base_dir)
