"""What every recipe model shares: :class:`Strict` and the name pattern.

A light module (pydantic only), so the artifact models of the builders
(``nvkr/builders/<name>/artifact.py``) and :mod:`nvkr.recipe.models` both build on it without
importing each other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

NAME_PATTERN = r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$"
Name = Annotated[
    str, Field(pattern=NAME_PATTERN, description="lower-case name: a-z, 0-9, '.', '_', '-'")
]


class Strict(BaseModel):
    """A recipe model: strict types, frozen, unknown keys refused."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", populate_by_name=True)


#: ``(field path, "source" | "artifact", name)``: one name an artifact's fields refer to.
Reference = tuple[tuple[str, ...], str, str]
#: ``(field path, message, hint)``: one problem of an artifact's fields with the rest of the
#: recipe (:meth:`ArtifactModel.recipe_problems`).
FieldProblem = tuple[tuple[str, ...], str, str]


class ArtifactModel(Strict):
    """The base of every builder's artifact model (``nvkr/builders/<name>/artifact.py``).

    A subclass declares ``builder: Literal["<its builder name>"]`` (the recipe's discriminator)
    and the fields its builder reads; :meth:`references` names the sources and artifacts they
    refer to, which :mod:`nvkr.recipe.references` checks and the planner follows, and
    :meth:`recipe_problems` what its fields get wrong together that a validator of one field
    cannot see.
    """

    if TYPE_CHECKING:
        builder: str

    def references(self) -> list[Reference]:
        """Every name this artifact's fields refer to; none unless a subclass says so."""
        return []

    def tool_sources(self, artifacts: Mapping[str, ArtifactModel]) -> ToolSources:
        """The sources the lockfile records as this artifact's tools (``artifacts``: the
        recipe's, by name); none unless a subclass says so."""
        return ToolSources()

    def recipe_problems(self, artifacts: Mapping[str, ArtifactModel]) -> list[FieldProblem]:
        """The problems of this artifact's fields in a rendered, validated variant whose names
        all exist (``artifacts``: the recipe's, by name), reported as one recipe error
        (:func:`nvkr.recipe.references.check_artifact_fields`); none unless a subclass says so."""
        return []

    def tree_c_toolchain(self, packages: Iterable[Mapping[str, Any]], arch: str) -> dict[str, str]:
        """name → version of the packages of a tools tree's locked closure (``packages``, of
        apt source arch ``arch``) that make its C toolchain: the lockfile's summary of each
        source :meth:`tool_sources` lists in ``c_trees``; empty unless a subclass says so."""
        return {}


@dataclass(frozen=True)
class ToolSources:
    """Sources an artifact uses as tools, which the lockfile's ``tools`` lists: ``toolchains``
    (pypi sources holding a toolchain, recorded with their version) and ``c_trees`` (apt
    sources of tools trees, recorded with the C toolchain they hold per arch)."""

    toolchains: frozenset[str] = frozenset()
    c_trees: frozenset[str] = frozenset()
