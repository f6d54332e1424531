"""The committed JSON Schema matches the models."""

from __future__ import annotations

import json

from nvkr.recipe.schema import SCHEMA_ID, json_schema, json_schema_bytes
from tests.helpers.recipes import FIXTURES

SCHEMA_FILE = FIXTURES.parents[2] / "schema" / "recipe.schema.json"


def test_schema_header() -> None:
    schema = json_schema()
    assert schema["$id"] == SCHEMA_ID == "https://nvkr.dev/schemas/recipe-v1alpha1.json"
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == "nvkr recipe (nvkr.dev/v1alpha1)"
    assert schema["additionalProperties"] is False
    assert {"apiVersion", "kind", "metadata", "matrix", "releaseSet"} <= set(schema["required"])


def test_committed_schema_has_not_drifted() -> None:
    committed = SCHEMA_FILE.read_bytes() if SCHEMA_FILE.exists() else b""
    assert committed == json_schema_bytes(), (
        "schema/recipe.schema.json differs from the recipe models; regenerate it with "
        "`nvkr schema > schema/recipe.schema.json` and commit the result"
    )
    assert json.loads(committed) == json_schema()
