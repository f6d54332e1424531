"""The source table: one line per source kind, the one place that lists them.

Each line names a kind (the recipe key a source of it is written with, and its lock entry's
``kind``), its recipe model and its :class:`~nvkr.fetch.kind.SourceKind` as ``module:Class``
(imported when a source of the kind is first used, so reading a recipe or planning loads no
fetching code). :mod:`nvkr.recipe.models` derives the recipe's ``Source`` union, and with it the
JSON Schema, from the lines; :func:`nvkr.fetch.api.fetcher_for` finds a kind's object here.
This module imports the source models only.

Adding a source kind is its model, its ``SourceKind`` and one line below. A source is told
apart by the first of the lines' kinds that is a key of it, so a model names its kind by a
field of that name; the order of the lines is the order of the recipe schema's ``oneOf``.
"""

from __future__ import annotations

from dataclasses import dataclass

from nvkr.recipe.base import Strict
from nvkr.recipe.sources import AptSource, GitSource, OciSource, PathSource, PypiSource, UrlSource


@dataclass(frozen=True)
class SourceLine:
    """One line of the table: ``kind``, its recipe ``model`` and ``fetcher``, its
    :class:`~nvkr.fetch.kind.SourceKind` subclass as ``module:Class``."""

    kind: str
    model: type[Strict]
    fetcher: str


# fmt: off
SOURCE_TABLE: tuple[SourceLine, ...] = (
    SourceLine("url", UrlSource, "nvkr.fetch.kinds.url:UrlKind"),
    SourceLine("git", GitSource, "nvkr.fetch.kinds.git:GitKind"),
    SourceLine("pypi", PypiSource, "nvkr.fetch.kinds.pypi:PypiKind"),
    SourceLine("path", PathSource, "nvkr.fetch.kinds.path:PathKind"),
    SourceLine("oci", OciSource, "nvkr.fetch.kinds.oci:OciKind"),
    SourceLine("apt", AptSource, "nvkr.fetch.kinds.apt:AptKind"),
)
# fmt: on
