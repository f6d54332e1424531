"""The recipe contract: frozen, strict pydantic models for ``apiVersion: nvkr.dev/v1alpha1``.

A recipe file is YAML; :mod:`nvkr.recipe.loader` reads it, applies ``extends`` and criteria
overlays, renders Jinja2 templates per variant and validates the result against :class:`Recipe`.
Models are strict (``1.30`` read by YAML as a float is not a string), frozen and reject unknown
keys. ``nvkr schema`` exports them as JSON Schema (``schema/recipe.schema.json``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, Union

from pydantic import BaseModel, Discriminator, Field, Tag

from nvkr.builders.table import BUILDER_TABLE
from nvkr.fetch.table import SOURCE_TABLE
from nvkr.recipe import fieldchecks as fc
from nvkr.recipe.base import ArtifactModel, Name, Strict
from nvkr.recipe.versionfields import ExactRelease

# -- sources -----------------------------------------------------------------------------------
#: The source kinds of the source table (:mod:`nvkr.fetch.table`), in its order: the key that
#: names a source of each.
SOURCE_KINDS: tuple[str, ...] = tuple(line.kind for line in SOURCE_TABLE)


def _source_kind(value: Any) -> str | None:
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if not isinstance(value, dict):
        return None
    for kind in SOURCE_KINDS:
        if kind in value:
            return kind
    return None


def source_kind(source: BaseModel) -> str:
    """The kind of a source model (``url``, ``git``, ``pypi``, ``path``, ``oci``, ``apt``: a
    line of the source table), the ``kind`` of its lockfile entry."""
    kind = _source_kind(source)
    if kind is None:
        raise TypeError(f"not a source model: {type(source).__name__}")
    return kind


def one_of_keys(kinds: tuple[str, ...] = SOURCE_KINDS) -> str:
    """``url, git, pypi, path, oci or apt``: the keys one of which makes a source."""
    return ", ".join(kinds[:-1]) + " or " + kinds[-1] if len(kinds) > 1 else "".join(kinds)


if TYPE_CHECKING:
    Source: TypeAlias = Strict
else:
    # The recipe's source: one of the table's models, told apart by the first of the table's
    # kinds that is one of its keys.
    Source = Annotated[
        Union[tuple(Annotated[line.model, Tag(line.kind)] for line in SOURCE_TABLE)],  # noqa: UP007
        Discriminator(
            _source_kind,
            custom_error_type="source_kind",
            custom_error_message=f"a source needs one of the keys {one_of_keys()}",
        ),
    ]


# -- artifacts ---------------------------------------------------------------------------------
#: The artifact models of the builder table (:mod:`nvkr.builders.table`), in its order.
ARTIFACT_MODELS: tuple[type[ArtifactModel], ...] = tuple(
    line.artifact for line in BUILDER_TABLE if line.artifact is not None
)
#: The builders a recipe may name, sorted.
BUILDERS = tuple(sorted(line.name for line in BUILDER_TABLE if line.artifact is not None))
if TYPE_CHECKING:
    Artifact: TypeAlias = ArtifactModel
else:
    # The recipe's artifact: one of the table's models, told apart by its ``builder`` field.
    Artifact = Annotated[Union[ARTIFACT_MODELS], Field(discriminator="builder")]  # noqa: UP007


# -- release set -------------------------------------------------------------------------------
class ClusterRelease(Strict):
    kubernetes: ExactRelease = Field(
        description='Required. exact Kubernetes release MAJOR.MINOR.PATCH, e.g. "1.36.3" '
        "(a leading v is dropped)"
    )
    charts: list[str] = Field(default_factory=list, description="Optional. artifact names")
    images: list[str] = Field(default_factory=list, description="Optional. artifact names")


class NodePoolRelease(Strict):
    name: str = Field(description="Required. node-pool release name; may use templates")
    machineImage: str | None = Field(default=None, description="Optional. artifact name")
    artifacts: list[str] = Field(default_factory=list, description="Optional. artifact names")


class ReleaseSet(Strict):
    """The named collection a build writes: ``dist/<name>/`` as an OCI image layout."""

    name: str = Field(
        description="Required. release set name; may use templates; variants with the same name share one set"
    )
    artifacts: list[str] | None = Field(
        default=None, description="Optional. artifacts to include; default: all"
    )
    machineImages: list[str] = Field(default_factory=list)
    clusterRelease: ClusterRelease | None = None
    nodePoolReleases: list[NodePoolRelease] = Field(default_factory=list)


# -- recipe ------------------------------------------------------------------------------------
class Metadata(Strict):
    name: Name
    description: str = ""


Criteria = dict[Literal["gpu", "kubernetes", "arch"], str]


class Matrix(Strict):
    gpu: list[str] = Field(
        min_length=1, description="Required. GPU generations, e.g. [hopper, blackwell]"
    )
    kubernetes: list[str] = Field(
        min_length=1, description='Required. Kubernetes release lines as strings, e.g. ["1.36"]'
    )
    arch: list[Literal["amd64", "arm64"]] = Field(
        min_length=1, description="Required. CPU architectures"
    )
    exclude: list[Criteria] = Field(default_factory=list, description="Optional. cells to drop")


class Overlay(Strict):
    """A criteria overlay: merged onto the recipe for variants matching ``when``."""

    when: Criteria = Field(description="Required. e.g. {gpu: hopper}")
    extends: list[str] = Field(
        default_factory=list, description="Optional. overlay files, relative to this file"
    )
    vars: dict[str, Any] | None = None
    sources: dict[str, Any] | None = None
    artifacts: dict[str, Any] | None = None
    releaseSet: dict[str, Any] | None = None


class Recipe(Strict):
    """A fully merged recipe (after ``extends``; overlays listed, not yet applied)."""

    apiVersion: Literal["nvkr.dev/v1alpha1"]
    kind: Literal["Recipe"]
    metadata: Metadata
    extends: list[str] = Field(
        default_factory=list, description="Optional. base files, applied in order"
    )
    epoch: fc.Epoch | None = Field(
        default=None,
        pattern=r"^[0-9]+$",
        description="Optional. default SOURCE_DATE_EPOCH: decimal seconds since 1970-01-01 UTC, "
        "0 .. 4294967295",
    )
    matrix: Matrix
    overlays: list[Overlay] = Field(default_factory=list)
    vars: dict[str, str] = Field(
        default_factory=dict, description="Optional. strings available to templates as vars.NAME"
    )
    sources: dict[Name, Source] = Field(default_factory=dict)
    artifacts: dict[Name, Artifact] = Field(default_factory=dict)
    releaseSet: ReleaseSet
