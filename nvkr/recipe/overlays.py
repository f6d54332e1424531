"""Criteria overlays: per-variant layers, and the fail-closed checks on their criteria.

After the recipe and its bases are merged, each entry of ``overlays`` becomes one
:class:`OverlayLayer`: the files it ``extends`` (relative to the file that declared the overlay)
merged in order, then its inline ``vars``/``sources``/``artifacts``/``releaseSet``. Matrix
expansion (:mod:`nvkr.recipe.matrix`) merges the layers whose ``when`` matches a cell onto that
cell's copy of the recipe. Layers are built at load time so every file is read (and hashed into
the recipe digest) once, and a missing file fails before any variant is expanded.

Criteria fail closed (README, "Recipes"): a ``when`` or ``exclude`` value that is not in the
matrix is a typo, and an axis that overlays distinguish must have an overlay for every value,
so adding ``ampere`` to the matrix without its GPU overlay is an error, not a silently generic
node image.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nvkr.errors import RecipeError
from nvkr.recipe.extends import FileReader, load_layers, resolve_extends, without_extends
from nvkr.recipe.merge import subtree
from nvkr.recipe.models import Recipe
from nvkr.recipe.validation import reject_floats
from nvkr.recipe.yamlsource import Document, LocationMap, locate, where

AXES = ("gpu", "kubernetes", "arch")
Axis = Literal["gpu", "kubernetes", "arch"]
# Criteria as validated (Literal keys) or as parsed from --variant (str keys).
Criteria = Mapping[Axis, str] | Mapping[str, str]
OVERLAY_KEYS = ("vars", "sources", "artifacts", "releaseSet")


@dataclass(frozen=True)
class OverlayLayer:
    """One criteria overlay, ready to merge onto a variant's recipe.

    Attributes:
        index: position in the recipe's ``overlays`` list.
        when: the criteria, e.g. ``{"gpu": "hopper"}``; an empty mapping matches every cell.
        documents: the layers to merge, in order: each file the overlay extends (with its own
            bases before it), then the inline values. Paths are rooted at the recipe
            (``("sources", "driver", "url")``); locations point into the declaring files. Nulls
            are kept, so an overlay can delete a base value.
        files: the file layers only (what the recipe digest adds for this overlay).
    """

    index: int
    when: Criteria
    documents: tuple[Document, ...]
    files: tuple[Document, ...]


def matches(criteria: Criteria, cell: Mapping[str, str]) -> bool:
    """True when every key of ``criteria`` has the cell's value (``{}`` matches every cell)."""
    return all(cell.get(axis) == value for axis, value in criteria.items())


def build_layers(
    recipe: Recipe, document: Document, reader: FileReader
) -> tuple[OverlayLayer, ...]:
    """One :class:`OverlayLayer` per entry of ``recipe.overlays``.

    Args:
        recipe: the validated merged recipe.
        document: its raw merged document (``overlays[i]`` is read from here with locations).
        reader: the load's file reader; overlay files are added to ``reader.files``.
    Raises:
        RecipeReferenceError: an overlay ``extends`` file is missing or extends form a cycle.
        RecipeError: an overlay file holds a key other than vars, sources, artifacts,
            releaseSet, extends; a float anywhere in an overlay.
    """
    layers = []
    for index, overlay in enumerate(recipe.overlays):
        declared_in = _declaring_file(document.locations, index)
        files: list[Document] = []
        for entry_index, entry in enumerate(overlay.extends):
            entry_path = ("overlays", index, "extends", entry_index)
            target = resolve_extends(declared_in, entry, document.locations, entry_path)
            files.extend(load_layers(target, reader, OVERLAY_KEYS))
        files = [without_extends(f) for f in files]
        for file in files:
            reject_floats(file.data, (), file.locations)
        inline = subtree(document, ("overlays", index), OVERLAY_KEYS)
        layers.append(OverlayLayer(index, overlay.when, (*files, inline), tuple(files)))
    return tuple(layers)


def _declaring_file(locations: LocationMap, index: int) -> Path:
    location = locate(locations, ("overlays", index))
    if location is None:  # pragma: no cover - every loaded document has a root location
        raise RecipeError(f"overlays[{index}]: cannot tell which file declared it")
    return location.file


def check_criteria(recipe: Recipe, locations: LocationMap) -> None:
    """Fail closed on the matrix, ``exclude`` and overlay criteria.

    Raises:
        RecipeError: a matrix axis lists a value twice; an ``exclude`` or overlay ``when`` value
            is not in the matrix (``FILE:LINE`` of the value); a matrix value of an axis that
            overlays distinguish has no overlay ("matrix gpu value 'ampere' is honoured by no
            overlay (overlays exist for: blackwell, hopper)").
    """
    axes = axis_values(recipe)
    for axis, values in axes.items():
        for index, value in enumerate(values):
            if value in values[:index]:
                raise RecipeError(
                    f"{where(locations, ('matrix', axis, index))}: matrix {axis} lists '{value}' twice"
                )
    for index, entry in enumerate(recipe.matrix.exclude):
        _check_values(entry, ("matrix", "exclude", index), "exclude entry", axes, locations)
    for index, overlay in enumerate(recipe.overlays):
        _check_values(
            overlay.when, ("overlays", index, "when"), "overlay criterion", axes, locations
        )
    for axis in AXES:
        honoured = {o.when[axis] for o in recipe.overlays if axis in o.when}
        if not honoured:
            continue
        for index, value in enumerate(axes[axis]):
            if value not in honoured:
                raise RecipeError(
                    f"{where(locations, ('matrix', axis, index))}: matrix {axis} value '{value}' is honoured by no overlay "
                    f"(overlays exist for: {', '.join(sorted(honoured))})",
                    hint=f"add an overlay with `when: {{{axis}: {value}}}` (it may hold nothing else) "
                    f"or remove '{value}' from matrix.{axis}",
                )


def axis_values(recipe: Recipe) -> dict[str, list[str]]:
    """``{"gpu": [...], "kubernetes": [...], "arch": [...]}`` in matrix order."""
    matrix = recipe.matrix
    return {
        "gpu": list(matrix.gpu),
        "kubernetes": list(matrix.kubernetes),
        "arch": list(matrix.arch),
    }


def _check_values(
    criteria: Criteria,
    path: tuple[str | int, ...],
    what: str,
    axes: dict[str, list[str]],
    locations: LocationMap,
) -> None:
    for axis, value in criteria.items():
        if value not in axes[axis]:
            raise RecipeError(
                f"{where(locations, (*path, axis))}: {what} {axis}: '{value}' is not a matrix {axis} value "
                f"(matrix.{axis}: {', '.join(axes[axis])})",
                hint="criteria must name values of the matrix; check the spelling",
            )
