"""``nvkr plan``: the action graph of a recipe, as text, JSON or a Mermaid flowchart."""

from __future__ import annotations

import json
from pathlib import Path

import click

from nvkr.cli import App
from nvkr.cli.common import (
    fetch_options,
    make_session_plan,
    open_session,
    recipe_argument,
    variant_option,
)
from nvkr.cli.common import n as _n


@click.command("plan")
@recipe_argument
@variant_option
@fetch_options
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "mermaid"]),
    default="text",
    show_default=True,
)
@click.pass_obj
def command(
    app: App,
    recipe: Path,
    variants: tuple[str, ...],
    mirrors: tuple[str, ...],
    offline: bool,
    lockfile: Path | None,
    as_json: bool,
    fmt: str,
) -> None:
    """Show the actions RECIPE builds, their keys and which are cached."""
    session = open_session(
        app, recipe, variants, mirrors=mirrors, offline=offline, lockfile=lockfile
    )
    from nvkr.catalog import check_variants  # an invalid combination never builds

    check_variants(recipe, session.variants)
    plan = make_session_plan(session)
    if as_json or fmt == "json":
        doc = plan.to_json()
        for action in doc["actions"]:
            action["cached"] = session.store.get_action(action["key"]) is not None
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
        return
    if fmt == "mermaid":
        click.echo(plan.mermaid(), nl=False)
        return
    click.echo(
        f"recipe {recipe}: {_n(len(plan.variants), 'variant')}, {_n(len(plan.actions), 'action')}"
    )
    click.echo(f"build digest {plan.build_digest}")
    for key, action in plan.actions.items():
        state = "cached" if session.store.get_action(key) is not None else "to build"
        if not action.hermetic:  # its key misses a tool that can change its bytes
            state += ", not hermetic"
        click.echo(f"  {key[7:19]}  {action.builder:<15} {action.name:<40} {state}")
