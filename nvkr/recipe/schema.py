"""JSON Schema of the recipe format, generated from the models (never edited by hand).

``nvkr schema`` prints :func:`json_schema`; the committed copy ``schema/recipe.schema.json`` lets
editors validate and complete recipes, and a unit test fails when it drifts from the models.
"""

from __future__ import annotations

from typing import Any

from nvkr.canonical import canonical_json_file
from nvkr.recipe.models import Recipe

SCHEMA_ID = "https://nvkr.dev/schemas/recipe-v1alpha1.json"
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a recipe file, ``apiVersion: nvkr.dev/v1alpha1``.

    Returns:
        A JSON-shaped dict with ``$schema``, ``$id`` and ``title`` set; deterministic.
    """
    schema = Recipe.model_json_schema()
    return {
        "$schema": SCHEMA_DIALECT,
        "$id": SCHEMA_ID,
        **schema,
        "title": "nvkr recipe (nvkr.dev/v1alpha1)",
    }


def json_schema_bytes() -> bytes:
    """:func:`json_schema` as the committed file holds it (sorted keys, 2-space indent, newline)."""
    return canonical_json_file(json_schema())
