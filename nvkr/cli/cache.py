"""``nvkr cache``: look after a remote action cache (``prune``).

``nvkr cache prune REGISTRY/REPO --older-than DURATION [--dry-run] [--json]`` deletes the
entries whose run record says they were pushed longer ago than DURATION
(:mod:`nvkr.cache.prune`); humans get one line per entry deleted (or, with ``--dry-run``, that
would be) and a summary, ``--json`` one report object.
"""

from __future__ import annotations

import json
from typing import Any

import click

from nvkr.cli.common import RegistryAccess, registry_options


@click.group("cache")
def command() -> None:
    """Look after a remote action cache (nvkr build --cache-from/--cache-to)."""


@command.command("prune")
@click.argument("repository", metavar="REGISTRY/REPO")
@click.option(
    "--older-than",
    required=True,
    metavar="DURATION",
    help="Delete entries pushed longer ago than this: 30d, 12h, 90m, 2w.",
)
@click.option("--dry-run", is_flag=True, help="List what would be deleted; delete nothing.")
@click.option("--json", "as_json", is_flag=True, help="One JSON report on stdout.")
@registry_options()
def prune(
    repository: str, older_than: str, dry_run: bool, as_json: bool, registry: RegistryAccess
) -> None:
    """Delete the cache entries of REGISTRY/REPO older than --older-than (their tag, manifest
    and referrers; the registry's garbage collection frees the blobs). The registry must allow
    deletes."""
    from nvkr.cache.prune import prune as prune_cache
    from nvkr.cache.settings import repository_reference
    from nvkr.quantities import parse_duration

    seconds = parse_duration(older_than)
    ref = repository_reference(repository, "nvkr cache prune")
    verb = "would delete" if dry_run else "deleted"

    def say(state: str, entry: dict[str, Any]) -> None:
        if as_json:
            return
        if state == "deleted":
            click.echo(
                f"  {verb} {entry['tag'][:19]}… {entry.get('name', '')} ({entry['pushedOn']})"
            )
        elif state == "unknown":
            click.echo(f"  kept    {entry['tag'][:19]}…: no readable run record")

    with registry.client(ref.registry) as client:
        report = prune_cache(client, ref.repository, seconds, dry_run=dry_run, on_entry=say)
    if as_json:
        click.echo(json.dumps(report.to_json(), sort_keys=True))
        return
    count = len(report.deleted)
    click.echo(
        f"{ref.registry}/{ref.repository}: {verb} {count} entr{'y' if count == 1 else 'ies'}"
        f" older than {older_than}; kept {len(report.kept) + len(report.unknown)}"
    )
