"""``nvkr store``: look after the store itself (``verify [--repair]``, ``du``, ``gc``)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import click

from nvkr.cli import App


@click.group("store")
def command() -> None:
    """Check, size and clean the store (--store, env NVKR_CACHE)."""


@command.command("verify")
@click.option(
    "--repair",
    is_flag=True,
    help="Delete corrupt blobs, stray files, unreadable action records, records whose outputs "
    "are gone or corrupt and changed tools trees (under the store lock); the next build "
    "fetches, unpacks or rebuilds what it needs.",
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
    """Hash every blob and every unpacked tool of the store in full and read every action record.

    Builds check each blob and tools tree against its seal (size, mtime, ctime) where they use
    it, which catches any write after it was stored but not bit rot; this catches both. Exits 3
    when something is wrong and --repair was not given.
    """
    from nvkr.errors import IntegrityError
    from nvkr.quantities import human_size
    from nvkr.quantities import plural as _n
    from nvkr.store import Store
    from nvkr.store_verify import verify_store

    store = Store(app.store_root)
    with contextlib.nullcontext() if repair else store.reading():  # --repair takes the lock
        report = verify_store(store, repair=repair, jobs=jobs)
    if as_json:
        click.echo(json.dumps(report.as_json(), sort_keys=True))
    else:
        click.echo(
            f"store {store.root}: {_n(report.blobs, 'blob')} ({human_size(report.bytes)}) "
            f"and {_n(report.tools, 'tools tree')} hashed, {_n(report.actions, 'action record')} read"
        )
        for digest in report.corrupt:
            owners = report.owners.get(digest)
            click.echo(
                f"  corrupt   {digest}"
                + (f"  output of {', '.join(owners)}" if owners else "")
                + ("  (deleted)" if report.repaired else "")
            )
        for name in report.stray:
            click.echo(
                f"  stray     blobs/sha256/{name}" + ("  (deleted)" if report.repaired else "")
            )
        for digest, owners in sorted(report.missing_outputs.items()):
            click.echo(
                f"  missing   {digest}  output of {', '.join(owners)}"
                + ("  (records deleted)" if report.repaired else "")
            )
        for name in report.unreadable_actions:
            click.echo(f"  unreadable actions/{name}" + ("  (deleted)" if report.repaired else ""))
        for digest in report.corrupt_tools:
            click.echo(
                f"  changed   tools/{digest.split(':', 1)[1]}"
                + ("  (deleted)" if report.repaired else "")
            )
        if report.ok:
            click.echo("store: ok")
        elif report.repaired:
            click.echo("store: repaired; the next build fetches or rebuilds what it needs")
    if not report.ok and not report.repaired:
        problems = len(report.corrupt) + len(report.stray) + len(report.unreadable_actions)
        problems += len(report.corrupt_tools) + len(report.missing_outputs)
        raise IntegrityError(
            f"store {store.root}: {_n(problems, 'problem')} found"
            + (f" ({len(report.corrupt)} corrupt blobs)" if report.corrupt else "")
            + (
                f" ({_n(len(report.corrupt_tools), 'changed tools tree')})"
                if report.corrupt_tools
                else ""
            )
            + (
                f" ({_n(len(report.missing_outputs), 'missing output')} of "
                f"{_n(len(report.stale_actions), 'action record')})"
                if report.missing_outputs
                else ""
            ),
            hint="`nvkr store verify --repair` deletes them; the next build fetches or "
            "rebuilds what it needs",
        )


@command.command("du")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout (bytes).")
@click.pass_obj
def du(app: App, as_json: bool) -> None:
    """What the store holds, by kind: sources, action outputs by builder, build logs, blobs
    nothing names any more, unpacked tools, tool caches, tmp/ and metadata."""
    from nvkr.quantities import human_size
    from nvkr.store import Store
    from nvkr.store_gc import usage

    store = Store(app.store_root)
    with store.reading():
        u = usage(store)
    if as_json:
        click.echo(json.dumps({"store": str(store.root), **u.as_json()}, sort_keys=True))
        return
    click.echo(f"store {store.root}: {human_size(u.total)} ({u.blobs} blobs)")
    rows = [("sources", u.sources)]
    rows += [(f"outputs: {b}", n) for b, n in sorted(u.outputs.items(), key=lambda x: -x[1])]
    rows += [
        ("build logs", u.build_logs),
        ("unreached blobs (gc removes them)", u.unreached),
        ("tools (unpacked toolchains, tools trees)", u.tools),
        ("cache (Go's build cache)", u.cache),
        ("tmp", u.tmp),
        ("boot-test consoles", u.consoles),
        ("metadata (records, seals, roots, plan memo, durations)", u.metadata),
    ]
    for label, size in rows:
        click.echo(f"  {human_size(size):>10}  {label}")


@command.command("gc")
@click.option(
    "--keep",
    "keep",
    multiple=True,
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="Keep this release set layout's blobs and what the builds that wrote it used "
    "(repeatable).",
)
@click.option(
    "--older-than",
    metavar="DURATION",
    help="Keep every build newer than this (30d, 12h, 1w2d); default: the newest build of "
    "each recipe and selection of variants.",
)
@click.option(
    "--max-size",
    metavar="SIZE",
    help="Let the oldest kept builds go (not those of --keep) until the store fits (20GiB).",
)
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout (bytes).")
@click.pass_obj
def gc(
    app: App,
    keep: tuple[Path, ...],
    older_than: str | None,
    max_size: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Remove what no kept build uses: blobs, action records, unpacked tools and old roots.

    Every finished build roots what it used (its whole plan's action records and its sources'
    blobs). gc keeps the roots chosen by --keep and --older-than (else the newest build of each
    recipe) and deletes the rest, under the store lock: it waits for a running build and for
    the readers (pull, lock, plan, verify).
    """
    from nvkr.quantities import human_size, parse_duration, parse_size
    from nvkr.store import Store
    from nvkr.store_gc import collect

    seconds = parse_duration(older_than) if older_than is not None else None
    limit = parse_size(max_size) if max_size is not None else None
    store = Store(app.store_root)
    sweep = collect(
        store,
        keep=keep,
        older_than=seconds,
        max_size=limit,
        dry_run=dry_run,
    )
    if as_json:
        click.echo(json.dumps({"store": str(store.root), **sweep.as_json()}, sort_keys=True))
        return
    verb = "would remove" if dry_run else "removed"
    click.echo(
        f"store gc: kept {sweep.roots_kept} builds, {sweep.blobs_kept} blobs "
        f"({human_size(sweep.bytes_kept)}); {verb} {sweep.blobs_removed} blobs "
        f"({human_size(sweep.bytes_removed)}), {sweep.records_removed} action records, "
        f"{sweep.tools_removed} unpacked tools ({human_size(sweep.tool_bytes_removed)}), "
        f"{sweep.roots_removed} build roots"
    )
    if sweep.over_size:
        click.echo(
            f"warning: the kept builds alone are {human_size(sweep.bytes_kept)}, more than "
            f"--max-size {max_size}: only what --keep names was left",
            err=True,
        )
