"""Recipes: load YAML (with ``extends``), validate, expand the matrix into variants.

The public surface used by the CLI, the lockfile and the planner::

    loaded = load_recipe(Path("recipes/gpu-node.yaml"))
    for variant in expand(loaded, [parse_variant_option("gpu=hopper")]):
        variant.id, variant.recipe

Models live in :mod:`nvkr.recipe.models`; :func:`json_schema` exports them.
"""

from nvkr.recipe.loader import LoadedRecipe, load_recipe
from nvkr.recipe.matrix import Variant, expand, parse_variant_option
from nvkr.recipe.schema import json_schema

__all__ = [
    "LoadedRecipe",
    "Variant",
    "expand",
    "json_schema",
    "load_recipe",
    "parse_variant_option",
]
