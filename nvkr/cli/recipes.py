"""``nvkr recipes list``: every combination of the catalog's compatibility rules with the leaf
recipes covering it and its status (:mod:`nvkr.catalog.listing`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from nvkr.cli import App
from nvkr.quantities import plural as _n

_STYLE = {"ok": "green", "invalid": "red", "unsupported": "yellow", "no recipe": "white"}


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
    and its status: ok (a covering leaf passes every rule read from the recipes; the rules that
    read a leaf's locked sources are named below and checked by lock, plan and build), invalid
    (every covering leaf breaks a rule), unsupported (the rules exclude it), no recipe. A leaf
    that breaks a rule is marked in every row covering it and named below the counts, even where
    another leaf keeps the combination ok. Files that fail to load are listed as broken. Exit 0 whatever the statuses
    (a listing); `nvkr validate` fails on a bad leaf."""
    from nvkr.catalog.listing import list_catalog
    from nvkr.catalog.loading import load_rules
    from nvkr.catalog.rules import CONTENT_CHECKS, RULES_FILE
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
    rules = load_rules(path)
    listing = list_catalog(directory, rules)
    if as_json:
        click.echo(json.dumps(listing.to_json(), indent=2, sort_keys=True))
        return

    # One line per combination, its violations indented below: readable at any width and
    # when piped (a table would crop recipe paths and rule messages).
    color = sys.stdout.isatty()
    widths = [
        max([len(h), *(len(getattr(c, h)) for c in listing.combinations)])
        for h in ("gpu", "kubernetes", "arch")
    ]
    status_width = max(len(s) for s in _STYLE)
    head = "  ".join(
        h.upper().ljust(w) for h, w in zip(("gpu", "kubernetes", "arch"), widths, strict=True)
    )
    click.echo(f"{head}  {'STATUS'.ljust(status_width)}  RECIPES")
    for combo in listing.combinations:
        cells = "  ".join(
            getattr(combo, h).ljust(w)
            for h, w in zip(("gpu", "kubernetes", "arch"), widths, strict=True)
        )
        status = combo.status.ljust(status_width)
        if color:
            status = click.style(status, fg=_STYLE[combo.status])
        failing = {r for r, _ in combo.violations}
        recipes = ", ".join(f"{r} (breaks a rule)" if r in failing else r for r in combo.recipes)
        click.echo(f"{cells}  {status}  {recipes}".rstrip())
        for recipe, v in combo.violations:
            where = f"{recipe}: " if recipe else ""
            click.echo(f"    {where}rule {v.rule}: {v.message}")
    counts = {s: sum(1 for c in listing.combinations if c.status == s) for s in _STYLE}
    click.echo(
        f"{_n(len(listing.combinations), 'combination')} under {listing.rules}: "
        + ", ".join(f"{count} {status}" for status, count in counts.items())
    )
    deferred = [r.id for r in rules.rules.rules if r.check in CONTENT_CHECKS]
    if deferred:
        click.echo(
            "not checked here, as they read a leaf's locked sources (`nvkr lock`, `plan` and "
            "`build` check them): " + ", ".join(deferred)
        )
    if listing.failing_leaves:
        click.echo(
            "leaves breaking a rule (nvkr validate fails them): "
            + ", ".join(
                f"{r} ({_n(count, 'variant')})"
                for r, count in sorted(listing.failing_leaves.items())
            )
        )
    for broken in listing.broken:
        first, *rest = broken.error.splitlines() or [""]
        click.echo(f"broken {broken.recipe}: {first}")
        for line in rest:
            click.echo(f"  {line}")
