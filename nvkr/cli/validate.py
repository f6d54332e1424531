"""``nvkr validate``: load a recipe, expand its matrix, render templates, check references,
everything the planner checks without sources (:mod:`nvkr.plancheck`), the compatibility
rules of its catalog (:mod:`nvkr.catalog.rules`) and the config file as plan and build read it
(its mirrors, snapshot archives and cache settings)."""

from __future__ import annotations

from pathlib import Path

import click

from nvkr.cli import App
from nvkr.cli.common import recipe_argument, variant_option
from nvkr.quantities import plural as _n


@click.command("validate")
@recipe_argument
@variant_option
@click.option(
    "--rules",
    "rules_path",
    type=click.Path(path_type=Path),
    help="Compatibility rules file (default: compatibility.yaml of the nearest recipes/ above RECIPE).",
)
@click.pass_obj
def command(app: App, recipe: Path, variants: tuple[str, ...], rules_path: Path | None) -> None:
    """Check RECIPE (default recipes/default.yaml) and the config file without fetching or
    building anything."""
    from nvkr.catalog.evaluation import check_variants
    from nvkr.plancheck import check_variant
    from nvkr.recipe.loader import load_recipe
    from nvkr.recipe.matrix import expand, parse_variant_option

    config = _check_config(app.config)
    loaded = load_recipe(recipe)
    cells = expand(loaded, [parse_variant_option(v) for v in variants] or None)
    for cell in cells:  # what plan checks before reading any source
        check_variant(cell)
    report = check_variants(recipe, cells, rules_path)
    sets = sorted({c.recipe.releaseSet.name for c in cells})
    click.echo(f"ok: {recipe}: {_n(len(cells), 'variant')}, release sets: {', '.join(sets)}")
    for cell in cells:
        click.echo(f"  {cell.id}")
    click.echo(config)
    if report.rules_path is None:
        click.echo(f"no compatibility rules apply (no recipes/compatibility.yaml above {recipe})")
        return
    click.echo(
        f"compatibility rules {report.rules_path}: {_n(len(report.applied), 'rule')} checked: "
        + ", ".join(report.applied)
    )
    for rule, reason in report.not_applicable.items():
        click.echo(f"  not applicable: {rule}: {reason}")


def _check_config(given: Path | None) -> str:
    """What the config file (``given``, else ``$NVKR_CONFIG`` or the user's) sets, read as plan
    and build read it: its line of validate's report.

    Raises:
        UsageError: the file is unreadable, not a YAML map, has a key no reader reads (a typo),
            or its ``mirrors``, ``snapshots`` or ``cache`` is malformed (naming the file and the
            entry).
    """
    import difflib

    from nvkr.cache.settings import config_section
    from nvkr.errors import UsageError
    from nvkr.fetch.mirrors import CONFIG_KEYS, Mirrors, default_config_path, unknown_config_keys
    from nvkr.fetch.snapshots import SnapshotArchives

    path = given if given is not None else default_config_path()
    for key in unknown_config_keys(path):  # a typo the readers would silently pass over
        near = difflib.get_close_matches(key, CONFIG_KEYS, n=1)
        raise UsageError(
            f"nvkr config {path}: {key!r} is no key of the config"
            + (f" (did you mean {near[0]!r}?)" if near else ""),
            hint="the config holds " + ", ".join(CONFIG_KEYS),
        )
    mirrors = Mirrors.from_config(path)
    snapshots = SnapshotArchives.from_config(path)
    cache, _ = config_section(path)
    if not path.exists():
        return f"config {path}: none (no such file)"
    parts = [_n(len(mirrors.entries), "mirror"), _n(len(snapshots.entries), "snapshot archive")]
    parts.append("cache settings: " + ", ".join(cache) if cache else "no cache settings")
    return f"config {path}: " + ", ".join(parts)
