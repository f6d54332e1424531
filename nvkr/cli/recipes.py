"""``nvkr recipes list``: every combination of the catalog's compatibility rules with the leaf
recipes covering it and its status (:mod:`nvkr.catalog.listing`)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from nvkr.cli import App
from nvkr.cli.common import n as _n

_STYLE = {"ok": "green", "invalid": "red", "unsupported": "yellow", "no recipe": "dim"}


@click.group("recipes")
def command() -> None:
    """The recipe catalog (recipes/): its combinations and their status."""


@command.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of objects.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path),
    default=Path("recipes"),
    show_default=True,
    help="The catalog directory, scanned recursively for *.yaml.",
)
@click.option(
    "--rules",
    "rules_path",
    type=click.Path(path_type=Path),
    help="Compatibility rules file (default: DIR/compatibility.yaml).",
)
@click.pass_obj
def list_command(app: App, as_json: bool, directory: Path, rules_path: Path | None) -> None:
    """Every GPU generation x Kubernetes line x arch of the rules, the leaf recipes covering it,
    and its status: ok, invalid (a rule fails), unsupported (the rules exclude it), no recipe.
    Files that fail to load are listed as broken."""
    from nvkr.catalog.listing import list_catalog
    from nvkr.catalog.rules import RULES_FILE, load_rules
    from nvkr.errors import UsageError

    if not directory.is_dir():
        raise UsageError(
            f"--dir {directory}: not a directory", hint="give the catalog, e.g. recipes"
        )
    path = rules_path if rules_path is not None else directory / RULES_FILE
    if not path.is_file():
        raise UsageError(
            f"{path}: no compatibility rules file",
            hint=f"a catalog holds its rules in {RULES_FILE}; or name them with --rules",
        )
    listing = list_catalog(directory, load_rules(path))
    if as_json:
        click.echo(json.dumps(listing.to_json(), indent=2, sort_keys=True))
        return

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(highlight=False, soft_wrap=False)
    table = Table("gpu", "kubernetes", "arch", "status", "recipe", "detail")
    for combo in listing.combinations:
        details = [
            f"{escape(recipe) + ': ' if recipe and len(combo.recipes) > 1 else ''}"
            f"rule {escape(v.rule)}: {escape(v.message)}"
            for recipe, v in combo.violations
        ]
        table.add_row(
            combo.gpu,
            combo.kubernetes,
            combo.arch,
            f"[{_STYLE[combo.status]}]{combo.status}[/]",
            escape("\n".join(combo.recipes)),
            "\n".join(details),
        )
    console.print(table)
    counts = {s: sum(1 for c in listing.combinations if c.status == s) for s in _STYLE}
    console.print(
        f"{_n(len(listing.combinations), 'combination')} under {escape(listing.rules)}: "
        + ", ".join(f"{count} {status}" for status, count in counts.items())
    )
    for broken in listing.broken:
        first, *rest = broken.error.splitlines() or [""]
        console.print(f"[red]broken[/] {escape(broken.recipe)}: {escape(first)}")
        for line in rest:
            console.print(f"  {escape(line)}")
