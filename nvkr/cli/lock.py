"""``nvkr lock``: resolve every source of every variant into the recipe's lockfile."""

from __future__ import annotations

from pathlib import Path

import click

from nvkr.cli import App
from nvkr.cli.common import bind_sources, fetch_options, open_session, recipe_argument


@click.command("lock")
@recipe_argument
@fetch_options
@click.pass_obj
def command(
    app: App, recipe: Path, mirrors: tuple[str, ...], offline: bool, lockfile: Path | None
) -> None:
    """Resolve and verify every source of RECIPE and write lockfiles/<recipe>.lock.json."""
    from nvkr.canonical import canonical_json
    from nvkr.lock import Resolver, lock_digest, write_lock

    session = open_session(app, recipe, (), mirrors=mirrors, offline=offline, lockfile=lockfile)
    old = session.resolver.lock
    # Re-resolve everything: a lock run verifies every pin again, it never trusts the old lock.
    fresh = Resolver(
        loaded=session.loaded, lock_path=session.lock_path, lock=None, ctx=session.fetch
    )
    session.resolver = fresh
    bind_sources(session)
    doc = fresh.document()
    before = {
        canonical_json([e["name"], e["spec"], e["resolved"]])
        for e in (old or {}).get("sources", [])
    }
    changed = [
        e["name"]
        for e in doc["sources"]
        if canonical_json([e["name"], e["spec"], e["resolved"]]) not in before
    ]
    write_lock(session.lock_path, doc)
    click.echo(
        f"locked {len(doc['sources'])} sources of {len(session.variants)} variants into {session.lock_path}"
    )
    click.echo(f"  lockfile digest {lock_digest(doc)}")
    if old is not None:
        click.echo("  changed: " + (", ".join(sorted(set(changed))) if changed else "nothing"))
