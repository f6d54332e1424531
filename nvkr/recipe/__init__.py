"""Recipes: load YAML (with ``extends``), validate, expand the matrix into variants.

The public surface used by the CLI, the lockfile and the planner::

    loaded = load_recipe(Path("recipes/gpu-node.yaml"))
    for variant in expand(loaded, [parse_variant_option("gpu=hopper")]):
        variant.id, variant.recipe

Models live in :mod:`nvkr.recipe.models` (artifact models in the builders' packages, joined by
:mod:`nvkr.builders.table`); :func:`json_schema` exports them. The names below are imported on
first use: the builders' artifact models build on :mod:`nvkr.recipe.base`, and importing that
must not load the models that import them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nvkr.recipe.loader import LoadedRecipe, load_recipe
    from nvkr.recipe.matrix import Variant, expand, parse_variant_option
    from nvkr.recipe.schema import json_schema

_HOMES = {
    "LoadedRecipe": "nvkr.recipe.loader",
    "load_recipe": "nvkr.recipe.loader",
    "Variant": "nvkr.recipe.matrix",
    "expand": "nvkr.recipe.matrix",
    "parse_variant_option": "nvkr.recipe.matrix",
    "json_schema": "nvkr.recipe.schema",
}

__all__ = [
    "LoadedRecipe",
    "Variant",
    "expand",
    "json_schema",
    "load_recipe",
    "parse_variant_option",
]


def __getattr__(name: str) -> Any:
    """``nvkr.recipe.load_recipe`` and the rest of :data:`__all__`, imported on first use."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'nvkr.recipe' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
