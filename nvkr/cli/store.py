"""``nvkr store``: look after the store itself (``verify [--repair]``)."""

from __future__ import annotations

import json
import os

import click

from nvkr.cli import App


@click.group("store")
def command() -> None:
    """Check the store (--store, env NVKR_CACHE)."""


@command.command("verify")
@click.option(
    "--repair",
    is_flag=True,
    help="Delete corrupt blobs, stray files and unreadable action records (under the store "
    "lock); the next build fetches or rebuilds what it needs.",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=lambda: os.cpu_count() or 2,
    help="Blobs hashed in parallel (default: CPUs).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON report on stdout.")
@click.pass_obj
def verify(app: App, repair: bool, jobs: int, as_json: bool) -> None:
    """Hash every blob of the store in full and read every action record.

    Builds check each blob against its seal (size, mtime, ctime) where they use it, which
    catches any write after a blob was stored but not bit rot; this catches both. Exits 3 when
    something is wrong and --repair was not given.
    """
    from nvkr.cli.common import human_size
    from nvkr.cli.common import n as _n
    from nvkr.errors import IntegrityError
    from nvkr.store import Store
    from nvkr.store_verify import verify_store

    store = Store(app.store_root)
    report = verify_store(store, repair=repair, jobs=jobs)
    if as_json:
        click.echo(json.dumps(report.as_json(), sort_keys=True))
    else:
        click.echo(
            f"store {store.root}: {_n(report.blobs, 'blob')} ({human_size(report.bytes)}) "
            f"hashed, {_n(report.actions, 'action record')} read"
        )
        for digest in report.corrupt:
            click.echo(f"  corrupt   {digest}" + ("  (deleted)" if report.repaired else ""))
        for name in report.stray:
            click.echo(
                f"  stray     blobs/sha256/{name}" + ("  (deleted)" if report.repaired else "")
            )
        for name in report.unreadable_actions:
            click.echo(f"  unreadable actions/{name}" + ("  (deleted)" if report.repaired else ""))
        if report.ok:
            click.echo("store: ok")
        elif report.repaired:
            click.echo("store: repaired; the next build fetches or rebuilds what it needs")
    if not report.ok and not report.repaired:
        problems = len(report.corrupt) + len(report.stray) + len(report.unreadable_actions)
        raise IntegrityError(
            f"store {store.root}: {_n(problems, 'problem')} found"
            + (f" ({len(report.corrupt)} corrupt blobs)" if report.corrupt else ""),
            hint="`nvkr store verify --repair` deletes them; the next build fetches or "
            "rebuilds what it needs",
        )
