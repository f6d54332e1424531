"""The source table: one line per source kind, the one place that lists them.

Each line names a kind (the recipe key a source of it is written with, and its lock entry's
``kind``), its recipe model, its lock entry's type (a :class:`~nvkr.fetch.entries.LockEntry`)
and its :class:`~nvkr.fetch.kind.SourceKind` as ``module:Class``
(imported when a source of the kind is first used, so reading a recipe or planning loads no
fetching code). :mod:`nvkr.recipe.models` derives the recipe's ``Source`` union, and with it the
JSON Schema, from the lines; :func:`nvkr.fetch.api.fetcher_for` finds a kind's object here, and
:func:`read_entry` a lock entry's type. This module imports the source models and the entry
types only.

Adding a source kind is its model (with ``lock_identity()``: the members of its lock entry
the recipe fixes, checked whenever a source is bound to its entry), its entry type, its
``SourceKind`` and one line below. A source is told
apart by the first of the lines' kinds that is a key of it, so a model names its kind by a
field of that name; the order of the lines is the order of the recipe schema's ``oneOf``.
"""

from __future__ import annotations

from dataclasses import dataclass

from nvkr.errors import LockError
from nvkr.fetch.entries import (
    AptEntry,
    GitEntry,
    LockEntry,
    OciEntry,
    PathEntry,
    PypiEntry,
    UrlEntry,
)
from nvkr.recipe.base import Strict
from nvkr.recipe.sources import AptSource, GitSource, OciSource, PathSource, PypiSource, UrlSource


@dataclass(frozen=True)
class SourceLine:
    """One line of the table: ``kind``, its recipe ``model``, its lock ``entry`` type (whose
    ``kind`` is the line's) and ``fetcher``, its :class:`~nvkr.fetch.kind.SourceKind` subclass
    as ``module:Class``."""

    kind: str
    model: type[Strict]
    entry: type[LockEntry]
    fetcher: str


# fmt: off
SOURCE_TABLE: tuple[SourceLine, ...] = (
    SourceLine("url", UrlSource, UrlEntry, "nvkr.fetch.kinds.url:UrlKind"),
    SourceLine("git", GitSource, GitEntry, "nvkr.fetch.kinds.git:GitKind"),
    SourceLine("pypi", PypiSource, PypiEntry, "nvkr.fetch.kinds.pypi:PypiKind"),
    SourceLine("path", PathSource, PathEntry, "nvkr.fetch.kinds.path:PathKind"),
    SourceLine("oci", OciSource, OciEntry, "nvkr.fetch.kinds.oci:OciKind"),
    SourceLine("apt", AptSource, AptEntry, "nvkr.fetch.kinds.apt:AptKind"),
)
# fmt: on


def read_entry(data: object, *, where: str) -> LockEntry:
    """The typed lock entry ``data`` holds (the ``resolved`` member of a lockfile source), of
    the type of its kind's line; ``where`` names it in messages (``LOCKFILE: lock entry for
    source 'x'``).

    Raises:
        LockError: ``data`` is no object, its kind is none of the table's, or a member is
            missing, of another type or unknown (naming it).
    """
    kind = data.get("kind") if isinstance(data, dict) else None
    for line in SOURCE_TABLE:
        if line.kind == kind:
            return line.entry.from_json(data, where=where)
    if not isinstance(data, dict):
        raise LockError(f"{where} is not an object", hint="regenerate it with `nvkr lock`")
    known = ", ".join(line.kind for line in SOURCE_TABLE)
    raise LockError(f"{where} has an unknown kind {kind!r}", hint=f"known kinds: {known}")
