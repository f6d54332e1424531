"""``nvkr schema``: the recipe JSON Schema (committed as schema/recipe.schema.json)."""

from __future__ import annotations

import sys
from pathlib import Path

import click


@click.command("schema")
@click.option(
    "--out", type=click.Path(path_type=Path), help="Write to this file instead of stdout."
)
def command(out: Path | None) -> None:
    """Write the JSON Schema of recipes (apiVersion nvkr.dev/v1alpha1)."""
    from nvkr.canonical import canonical_json_file
    from nvkr.recipe.schema import json_schema

    data = canonical_json_file(json_schema())
    if out is None:
        sys.stdout.buffer.write(data)
    else:
        out.write_bytes(data)
