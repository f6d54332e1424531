"""``nvkr plan``: the action graph of a recipe, as text, JSON or a Mermaid flowchart; with
``--fan-out``, the units of work a CI system runs (:mod:`nvkr.fanout`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from nvkr.cli import App
from nvkr.cli.common import echo_note, fetch_options, open_session, recipe_argument, variant_option
from nvkr.quantities import plural as _n
from nvkr.session import make_session_plan, no_lock_warning, unlocked_warning


@click.command("plan")
@recipe_argument
@variant_option
@fetch_options
@click.option(
    "--locked",
    is_flag=True,
    help="Refuse, as `nvkr build --locked` does, when the recipe or any pin drifted from the "
    "lockfile (a CI step that checks the lock before any runner builds).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "mermaid"]),
    default="text",
    show_default=True,
)
@click.option(
    "--fan-out",
    "fan_out",
    is_flag=True,
    help="Print the units of work a CI system runs: each an `nvkr build` with the units it needs.",
)
@click.option(
    "--by",
    type=click.Choice(["variant", "action"]),
    default="variant",
    show_default=True,
    help="With --fan-out: a unit per variant (the matrix only), or per action (needs the lock).",
)
@click.pass_obj
def command(
    app: App,
    recipe: Path,
    variants: tuple[str, ...],
    mirrors: tuple[str, ...],
    offline: bool,
    lockfile: Path | None,
    locked: bool,
    as_json: bool,
    fmt: str,
    fan_out: bool,
    by: str,
) -> None:
    """Show the actions RECIPE builds, their keys and which are cached."""
    if fan_out and variants:
        from nvkr.errors import UsageError

        raise UsageError(
            "--fan-out cuts the whole recipe into units; --variant selects part of it",
            hint="drop --variant: the units build the variants (--by variant) or actions",
        )
    session = open_session(
        app, recipe, variants, mirrors=mirrors, offline=offline, locked=locked, lockfile=lockfile
    )
    from nvkr.catalog.evaluation import check_variants  # an invalid combination never builds

    check_variants(recipe, session.variants)
    if locked:  # before any source is resolved, as in a locked build
        session.resolver.check_locked(session.variants, all_variants=session.all_variants)
    if fan_out:
        _print_fan_out(session, recipe, by, lockfile, as_json or fmt == "json")
        return
    if (warning := no_lock_warning(session)) is not None:
        echo_note(f"warning: {warning}")
    plan = make_session_plan(session, note=echo_note)
    if (warning := unlocked_warning(session)) is not None:
        echo_note(f"warning: {warning}")
    if as_json or fmt == "json":
        actions = [
            {**a.to_json(), "cached": session.store.get_action(a.key) is not None}
            for a in plan.actions.values()
        ]
        doc = {**plan.to_json(), "actions": actions}
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


def _print_fan_out(
    session: Any, recipe: Path, by: str, lockfile: Path | None, as_json: bool
) -> None:
    import shlex

    from nvkr.cli.units import session_fan_out

    fan = session_fan_out(session, recipe, by, lockfile)
    if as_json:
        click.echo(json.dumps(fan.to_json(), indent=2, sort_keys=True))
        return
    click.echo(f"recipe {fan.recipe}: {_n(len(fan.units), 'unit')} by {fan.by}")
    for unit in fan.units:
        est = f"{unit.estimate.seconds:.0f} s" if unit.estimate is not None else "-"
        needs = ",".join(unit.needs) or "-"
        click.echo(f"  {unit.id:<32} {unit.arch or 'any':<6} {est:>7}  needs {needs}")
        click.echo(f"    {shlex.join(unit.argv)}")
