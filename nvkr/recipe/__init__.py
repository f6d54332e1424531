"""Recipes: load YAML (with ``extends``), validate, expand the matrix into variants.

The surface used by the CLI, the lockfile and the planner, each name from the module that
defines it::

    from nvkr.recipe.loader import load_recipe  # and LoadedRecipe
    from nvkr.recipe.matrix import expand, parse_variant_option  # and Variant

    loaded = load_recipe(Path("recipes/gpu-node.yaml"))
    for variant in expand(loaded, [parse_variant_option("gpu=hopper")]):
        variant.id, variant.recipe

Models live in :mod:`nvkr.recipe.models` (artifact models in the builders' packages, joined by
:mod:`nvkr.builders.table`); :func:`nvkr.recipe.schema.json_schema` exports them. This package
imports nothing: the builders' artifact models build on :mod:`nvkr.recipe.base`, and importing
that must not load the models that import them.
"""
