"""Matrix expansion: a loaded recipe becomes one :class:`Variant` per matrix cell.

The cells are gpu x kubernetes x arch in matrix order (README, "Recipes": the three axes), minus
``exclude``, optionally narrowed by ``--variant`` selections. Each cell gets its own copy of the
merged raw document with the matching criteria overlays merged on, its templates rendered, and
is validated again and reference-checked, so everything downstream (lock, plan, build) sees a
plain, fully concrete :class:`~nvkr.recipe.models.Recipe` per variant.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from nvkr.errors import UsageError
from nvkr.recipe.loader import LoadedRecipe, declaring_dirs
from nvkr.recipe.merge import merge
from nvkr.recipe.models import Recipe
from nvkr.recipe.overlays import AXES, axis_values, matches
from nvkr.recipe.references import (
    check_artifact_fields,
    check_references,
    check_release_set_name,
)
from nvkr.recipe.templates import render_document
from nvkr.recipe.validation import validate
from nvkr.recipe.yamlsource import Document, LocationMap


@dataclass(frozen=True)
class Variant:
    """One matrix cell and its fully merged recipe.

    Attributes:
        gpu: GPU generation, e.g. ``hopper``.
        kubernetes: Kubernetes release line, e.g. ``1.36``.
        arch: ``amd64`` or ``arm64``.
        recipe: the recipe for this cell: bases and matching overlays merged, vars and
            sources/artifacts/releaseSet templates rendered, validated, references checked.
            Its ``overlays`` list is empty (they are applied).
        source_dirs: per source name, the directory ``path`` sources are relative to (an
            overlay file may declare a source, so this can differ from the recipe's).
        locations: where each value of this variant's document was written.
    """

    gpu: str
    kubernetes: str
    arch: str
    recipe: Recipe
    source_dirs: dict[str, Path] = field(default_factory=dict, compare=False, repr=False)
    locations: LocationMap = field(default_factory=dict, compare=False, repr=False)

    def __hash__(self) -> int:
        # The generated hash would hash the recipe's dicts and fail; equal variants share axes.
        return hash((self.gpu, self.kubernetes, self.arch))

    @property
    def axes(self) -> dict[str, str]:
        """``{"gpu": ..., "kubernetes": ..., "arch": ...}``."""
        return {"gpu": self.gpu, "kubernetes": self.kubernetes, "arch": self.arch}

    @property
    def id(self) -> str:
        """``gpu=hopper,kubernetes=1.36,arch=amd64`` (the ``--variant`` syntax)."""
        return ",".join(f"{axis}={value}" for axis, value in self.axes.items())


def parse_variant_option(text: str) -> dict[str, str]:
    """Parse ``--variant gpu=hopper,kubernetes=1.36,arch=amd64`` (any subset of the axes).

    Returns:
        ``{axis: value}`` for the axes given.
    Raises:
        UsageError: empty text, a part without ``=``, an empty value, an unknown or repeated axis.
    """
    selection: dict[str, str] = {}
    hint = "use --variant gpu=hopper,kubernetes=1.36,arch=amd64 (any of the three axes)"
    if not text.strip():
        raise UsageError("--variant: empty selection", hint=hint)
    for part in text.split(","):
        axis, sep, value = (s.strip() for s in part.partition("="))
        if not sep or not axis or not value:
            raise UsageError(f"--variant {text!r}: {part.strip()!r} is not AXIS=VALUE", hint=hint)
        if axis not in AXES:
            raise UsageError(
                f"--variant {text!r}: unknown axis '{axis}' (axes: {', '.join(AXES)})", hint=hint
            )
        if axis in selection:
            raise UsageError(f"--variant {text!r}: axis '{axis}' given twice", hint=hint)
        selection[axis] = value
    return selection


def cells(recipe: Recipe) -> list[dict[str, str]]:
    """The matrix cells, gpu x kubernetes x arch in matrix order, minus ``exclude`` matches."""
    axes = axis_values(recipe)
    product = (
        {"gpu": gpu, "kubernetes": kubernetes, "arch": arch}
        for gpu, kubernetes, arch in itertools.product(
            axes["gpu"], axes["kubernetes"], axes["arch"]
        )
    )
    return [
        cell for cell in product if not any(matches(entry, cell) for entry in recipe.matrix.exclude)
    ]


def expand(loaded: LoadedRecipe, selections: list[dict[str, str]] | None = None) -> list[Variant]:
    """The variants of ``loaded``, in matrix order.

    Args:
        loaded: from :func:`nvkr.recipe.loader.load_recipe`.
        selections: parsed ``--variant`` options; a cell is kept when it matches any of them.
            None or an empty list keeps every cell.
    Returns:
        One :class:`Variant` per kept cell.
    Raises:
        UsageError: a selection names a value not in the matrix (naming the axis, the value and
            the allowed values), or matches only excluded cells.
        RecipeError: a variant's merged document is invalid after overlays and templates
            (``FILE:LINE: field.path: ...``), a template error, an invalid release set name.
        RecipeReferenceError: a variant names a source or artifact it does not have.
        UnknownBuilderError: an overlay sets an unknown builder.
    """
    recipe = loaded.recipe
    kept = cells(recipe)
    if selections:
        _check_selections(recipe, selections, kept)
        kept = [cell for cell in kept if any(matches(selection, cell) for selection in selections)]
    return [_variant(loaded, cell) for cell in kept]


def _check_selections(
    recipe: Recipe, selections: list[dict[str, str]], kept: list[dict[str, str]]
) -> None:
    axes = axis_values(recipe)
    for selection in selections:
        for axis, value in selection.items():
            if axis not in axes:
                raise UsageError(
                    f"--variant: unknown axis '{axis}' (axes: {', '.join(AXES)})",
                    hint="e.g. --variant gpu=hopper,kubernetes=1.36,arch=amd64",
                )
            if value not in axes[axis]:
                raise UsageError(
                    f"--variant: {axis} '{value}' is not in the matrix of {recipe.metadata.name} "
                    f"(allowed: {', '.join(axes[axis])})",
                    hint=f"pick one of those, or add {value!r} to matrix.{axis} in the recipe",
                )
        if not any(matches(selection, cell) for cell in kept):
            shown = ",".join(f"{axis}={value}" for axis, value in selection.items())
            raise UsageError(
                f"--variant {shown}: every matching cell is excluded by matrix.exclude",
                hint=f"variants of {recipe.metadata.name}: {', '.join(_cell_id(c) for c in kept) or '(none)'}",
            )


def _cell_id(cell: Mapping[str, str]) -> str:
    return ",".join(f"{axis}={cell[axis]}" for axis in AXES)


def _variant(loaded: LoadedRecipe, cell: dict[str, str]) -> Variant:
    document = loaded.document
    for layer in loaded.overlays:
        if matches(layer.when, cell):
            for part in layer.documents:
                document = merge(document, part)
    # Applied overlays are dropped: a variant is concrete and must not be overlaid twice.
    document = Document(
        {k: v for k, v in document.data.items() if k != "overlays"},
        {p: loc for p, loc in document.locations.items() if p[:1] != ("overlays",)},
    )
    document = render_document(document, cell)
    recipe = validate(Recipe, document.data, document.locations)
    check_references(recipe, document.locations)
    check_artifact_fields(recipe, document.locations)
    check_release_set_name(recipe, document.locations)
    return Variant(
        gpu=cell["gpu"],
        kubernetes=cell["kubernetes"],
        arch=cell["arch"],
        recipe=recipe,
        source_dirs=declaring_dirs(recipe.sources, document.locations),
        locations=document.locations,
    )
