"""``nvkr validate``: load a recipe, expand its matrix, render templates, check references."""

from __future__ import annotations

from pathlib import Path

import click

from nvkr.cli import App
from nvkr.cli.common import n as _n
from nvkr.cli.common import recipe_argument, variant_option


@click.command("validate")
@recipe_argument
@variant_option
@click.pass_obj
def command(app: App, recipe: Path, variants: tuple[str, ...]) -> None:
    """Check RECIPE (default recipes/default.yaml) without fetching or building anything."""
    from nvkr.recipe import expand, load_recipe, parse_variant_option

    loaded = load_recipe(recipe)
    cells = expand(loaded, [parse_variant_option(v) for v in variants] or None)
    sets = sorted({c.recipe.releaseSet.name for c in cells})
    click.echo(f"ok: {recipe}: {_n(len(cells), 'variant')}, release sets: {', '.join(sets)}")
    for cell in cells:
        click.echo(f"  {cell.id}")
