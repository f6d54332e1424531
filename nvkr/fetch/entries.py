"""Lock entries, typed: the ``resolved`` member of a lockfile source, one class per source kind.

A :class:`LockEntry` is a frozen dataclass whose fields are the entry's JSON members, named as
the lockfile names them; its ``kind`` is a class attribute (the kind's line of
:mod:`nvkr.fetch.table` names the class). :meth:`LockEntry.from_json` reads one member for
member, checking each against its field's type (``str``, ``int``, ``X | None``: a member the
entry may lack, ``tuple[X, ...]``: a JSON array, ``dict[str, X]``: a JSON object, or another
:class:`Record`) and refusing a missing, mistyped or unknown member with a message naming the
lockfile, the source and the field; :meth:`Record.to_json` writes the same members back (an
optional one only when it is set), so a lockfile read and written again is the same bytes.

This module imports nothing of nvkr but its errors: the action vocabulary
(:class:`nvkr.action.ResolvedSource`) and the source table import it.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from nvkr.canonical import canonical_json
from nvkr.errors import LockError

#: how a lock entry nvkr cannot read, or one at odds with its recipe, is mended
REFRESH_HINT = "regenerate it with `nvkr lock` (without --offline: it resolves every source afresh)"

#: a field's reader: (the JSON value, the entry, the path in it) -> the field's value
_Reader = Callable[[object, str, str], object]


@dataclass(frozen=True, kw_only=True)
class Record:
    """A JSON object with a fixed set of members, each a field (see the module's docstring)."""

    @classmethod
    def from_json(cls, data: object, *, where: str, path: str = "") -> Self:
        """The record ``data`` holds; ``where`` names the entry in messages (``LOCKFILE: lock
        entry for source 'x'``), ``path`` the record in it (``packages[3]``, empty: the entry).

        Raises:
            LockError: ``data`` is no JSON object, lacks a required member, has one of another
                type or one this record does not have.
        """
        if not isinstance(data, Mapping):
            raise _mistyped(where, path, data, "an object")
        readers = _readers(cls)
        prefix = f"{path}." if path else ""
        for member in data:
            if member not in readers and not cls._skip(member):
                raise LockError(f"{where} has an unknown field {prefix}{member}", hint=REFRESH_HINT)
        values: dict[str, object] = {}
        for name, (read, required) in readers.items():
            if name in data:
                values[name] = read(data[name], where, prefix + name)
            elif required:
                raise LockError(f"{where} has no {prefix}{name}", hint=REFRESH_HINT)
        return cls(**values)  # the values are checked against the fields above

    @classmethod
    def _skip(cls, member: str) -> bool:
        """Whether ``member`` is none of the fields but read elsewhere (an entry's ``kind``)."""
        return False

    def to_json(self) -> dict[str, Any]:
        """The JSON object: every field in the order declared, an optional one (default None)
        only when set."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and f.default is None:
                continue
            out[f.name] = _to_json(value)
        return out


@dataclass(frozen=True, kw_only=True)
class LockEntry(Record):
    """A source's lock entry: its ``kind`` (the class's) and ``digest``, the ``sha256:<hex>`` of
    the blob the store holds for it; a kind's class adds its own members."""

    #: the kind's name, the table line's and the entry's ``kind`` member
    kind: ClassVar[str] = ""

    digest: str

    @classmethod
    def _skip(cls, member: str) -> bool:
        return member == "kind"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, **super().to_json()}

    def without_lock_record(self) -> Self:
        """The entry without what only a lock records of where and when it was made (an apt
        source's snapshot archives and lock time); most kinds record none: the entry itself."""
        return self


def _readers(cls: type[Record]) -> dict[str, tuple[_Reader, bool]]:
    """Each field's reader and whether the member is required (it has no default)."""
    found = _READERS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        found = _READERS[cls] = {
            f.name: (
                _reader(hints[f.name]),
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
            )
            for f in dataclasses.fields(cls)
        }
    return found


_READERS: dict[type[Record], dict[str, tuple[_Reader, bool]]] = {}


def _reader(tp: Any) -> _Reader:
    """The reader of a JSON value of type ``tp`` (see the module's docstring)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is types.UnionType:
        (one,) = [a for a in args if a is not type(None)]
        return _reader(one)
    if origin is tuple:
        item = _reader(args[0])

        def read_array(value: object, where: str, path: str) -> object:
            if not isinstance(value, list):
                raise _mistyped(where, path, value, "an array")
            return tuple(item(v, where, f"{path}[{i}]") for i, v in enumerate(value))

        return read_array
    if origin is dict:
        member = _reader(args[1])

        def read_object(value: object, where: str, path: str) -> object:
            if not isinstance(value, dict):
                raise _mistyped(where, path, value, "an object")
            return {k: member(v, where, f"{path}.{k}") for k, v in value.items()}

        return read_object
    if isinstance(tp, type) and issubclass(tp, Record):
        record: type[Record] = tp
        return lambda value, where, path: record.from_json(value, where=where, path=path)
    if tp is str or tp is int:
        scalar: type = tp

        def read_scalar(value: object, where: str, path: str) -> object:
            if not isinstance(value, scalar) or isinstance(value, bool):
                raise _mistyped(where, path, value, "a string" if scalar is str else "an integer")
            return value

        return read_scalar
    raise TypeError(f"a lock entry field cannot be of type {tp!r}")


def _mistyped(where: str, path: str, value: object, want: str) -> LockError:
    what = f"{where}: {path}" if path else where
    return LockError(f"{what} is {_json_type(value)}, not {want}", hint=REFRESH_HINT)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a number"
    return "an array" if isinstance(value, list) else "an object"


def _to_json(value: object) -> object:
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, tuple):
        return [_to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_json(v) for k, v in value.items()}
    return value


# The built-in kinds' entries, each documented on the ``resolve`` of its fetching module.


@dataclass(frozen=True, kw_only=True)
class UrlEntry(LockEntry):
    """A file by URL (:mod:`nvkr.fetch.http`): its ``size`` and digests (``sha256``, the same
    as ``digest``, which an entry may leave out, and ``sha512`` when one was pinned)."""

    kind: ClassVar[str] = "url"

    url: str
    size: int
    sha256: str | None = None
    sha512: str | None = None


@dataclass(frozen=True, kw_only=True)
class GitEntry(LockEntry):
    """A commit's tree (:mod:`nvkr.fetch.git`); ``commitTime``, the committer time in seconds
    since 1970, is absent from an entry locked before nvkr recorded it."""

    kind: ClassVar[str] = "git"

    url: str
    commit: str
    commitTime: int | None = None


@dataclass(frozen=True, kw_only=True)
class PypiEntry(LockEntry):
    """A wheel, or one ``member`` of it (:mod:`nvkr.fetch.pypi`); ``url`` when pip said where
    the wheel came from."""

    kind: ClassVar[str] = "pypi"

    name: str
    version: str
    filename: str
    sha256: str
    member: str | None = None
    url: str | None = None


@dataclass(frozen=True, kw_only=True)
class PathEntry(LockEntry):
    """A directory of the repository (:mod:`nvkr.fetch.path`), hashed on every run: the
    lockfile writes it without a digest, so one read from a lockfile has ``digest`` "" (and one
    without a digest is written without one)."""

    kind: ClassVar[str] = "path"

    digest: str = ""
    path: str

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        if not self.digest:
            del out["digest"]
        return out


@dataclass(frozen=True, kw_only=True)
class OciEntry(LockEntry):
    """An image or index by digest with its closure (:mod:`nvkr.fetch.oci`): the pinned
    document's ``mediaType`` and ``size``, every blob of the closure (``blobs``, sorted)."""

    kind: ClassVar[str] = "oci"

    ref: str
    mediaType: str
    size: int
    blobs: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class DebPackage(Record):
    """One .deb of an apt source's closure; ``url`` the recipe repository's, ``sha256`` as
    ``sha256:<hex>``."""

    name: str
    version: str
    arch: str
    repository: str
    url: str
    filename: str
    size: int
    sha256: str


@dataclass(frozen=True, kw_only=True)
class AptSnapshot(Record):
    """Where and when an apt source was locked (:mod:`nvkr.fetch.snapshots`): ``time``, the
    lock's, ``YYYYMMDDTHHMMSSZ`` in UTC; ``archives``, the snapshot archive of each repository
    that has one (URLs without user info). Not part of the package manifest: no action key
    sees it."""

    time: str
    archives: dict[str, str]

    @classmethod
    def from_json(cls, data: object, *, where: str, path: str = "") -> Self:
        """As :meth:`Record.from_json`, and the time and the archives' URLs checked when the
        lockfile is read, not first when a mirror misses (the worst moment to find out).

        Raises:
            LockError: a time not ``YYYYMMDDTHHMMSSZ``, or an archive that is no http://,
                https:// or file:// URL with a host or path.
        """
        snap = super().from_json(data, where=where, path=path)
        at = f"{where}: {path}." if path else f"{where}: "
        if not _STAMP.match(snap.time):
            raise LockError(
                f"{at}time is {snap.time!r}, not a lock time YYYYMMDDTHHMMSSZ (UTC)",
                hint=REFRESH_HINT,
            )
        for repo, url in snap.archives.items():
            scheme, _, rest = url.partition("://")
            if scheme not in ("http", "https", "file") or not rest.strip("/"):
                raise LockError(
                    f"{at}archives.{repo} is {url!r}, not an http://, https:// or file:// URL "
                    "of a snapshot archive",
                    hint=REFRESH_HINT,
                )
        return snap


#: a lock time: ``YYYYMMDDTHHMMSSZ`` (UTC), snapshot.debian.org's timestamp form
_STAMP = re.compile(r"^[0-9]{8}T[0-9]{6}Z$")


@dataclass(frozen=True, kw_only=True)
class AptEntry(LockEntry):
    """A closed set of Debian packages (:mod:`nvkr.fetch.apt`): ``digest`` is the package
    manifest's, ``keyrings`` the digest of each repository's keyring fetched by URL (absent
    from an entry locked before nvkr recorded them), ``snapshot`` the lock's time and the
    repositories' snapshot archives (absent from an entry locked before nvkr recorded them)."""

    kind: ClassVar[str] = "apt"

    arch: str
    keyrings: dict[str, str] | None = None
    packages: tuple[DebPackage, ...]
    snapshot: AptSnapshot | None = None

    def manifest(self) -> bytes:
        """The package manifest this entry's ``digest`` names (:func:`apt_manifest_bytes` of its
        arch and packages): a .deb list edited by hand hashes to another digest."""
        return apt_manifest_bytes(self.arch, [p.to_json() for p in self.packages])

    def without_lock_record(self) -> Self:
        """The entry without the lock's where and when (``snapshot``), as a build holds a source
        it resolved itself: only ``nvkr lock`` records them (see :class:`Resolver
        <nvkr.lock.Resolver>`'s ``records_lock_time``)."""
        return dataclasses.replace(self, snapshot=None)


#: the version of an apt source's package manifest
APT_MANIFEST_VERSION = 1


def apt_manifest_bytes(arch: str, packages: list[dict[str, Any]]) -> bytes:
    """Canonical JSON ``{"aptManifest": 1, "arch": ..., "packages": [...]}``: an apt source's
    blob, whose digest is its lock entry's (and what action keys see).

    ``packages`` items: ``{"name", "version", "arch", "repository", "url", "filename", "size",
    "sha256"}`` (``sha256`` as ``sha256:<hex>``), sorted by name then arch.
    """
    return canonical_json({"aptManifest": APT_MANIFEST_VERSION, "arch": arch, "packages": packages})
