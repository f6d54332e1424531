"""``nvkr mirror export|import|serve``: air-gapped builds (:mod:`nvkr.airgap.export`).

``export`` writes every locked source of the recipes into a portable directory, ``import`` adds
it to a store (every blob verified; a mismatch exits 3), ``serve`` answers the upstream URL layout
on loopback for ``--mirror``.
"""

from __future__ import annotations

from pathlib import Path

import click

from nvkr.cli import App
from nvkr.quantities import plural as n


def _bytes(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    raise AssertionError  # pragma: no cover


@click.group("mirror")
def command() -> None:
    """Carry locked sources to a machine without network: export, import, serve."""


@command.command("export")
@click.argument("recipes", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.argument("directory", type=click.Path(path_type=Path))
@click.option(
    "--variant",
    "variants",
    multiple=True,
    metavar="AXIS=VALUE,...",
    help="Only these cells, e.g. gpu=hopper,kubernetes=1.36,arch=amd64 (repeatable).",
)
@click.option(
    "--mirror",
    "mirrors",
    multiple=True,
    metavar="PREFIX=REPLACEMENT",
    help="Where to fetch sources the store lacks (repeatable; digests never change).",
)
@click.option("--offline", is_flag=True, help="Export from the store only; name what is missing.")
@click.option("--verify", is_flag=True, help="Re-hash blobs already in DIR (default: size only).")
@click.pass_obj
def export_command(
    app: App,
    recipes: tuple[Path, ...],
    directory: Path,
    variants: tuple[str, ...],
    mirrors: tuple[str, ...],
    offline: bool,
    verify: bool,
) -> None:
    """Write every source RECIPE...'s lockfiles pin (and the store blobs a build reads) to DIR.

    A source the store lacks is fetched first. Re-exporting into the same DIR adds what is
    missing; DIR/index.json is written last.
    """
    from nvkr.airgap.export import export_mirror, select_sources
    from nvkr.cli.common import open_session
    from nvkr.scratch import cleanup_line

    selections = []
    fetch = None
    for recipe in recipes:
        session = open_session(app, recipe, variants, mirrors=mirrors, offline=offline, locked=True)
        fetch = session.fetch
        selections.append(select_sources(session.loaded, session.variants, session.resolver))
    assert fetch is not None
    with fetch.store.lock() as cleaned:
        if said := cleanup_line(cleaned):
            click.echo(said, err=True)
        report = export_mirror(
            selections,
            fetch,
            directory,
            verify=verify,
            progress=lambda msg: click.echo(f"  {msg}", err=True),
        )
    click.echo(
        f"exported {n(report.sources, 'source')} of {n(len(selections), 'recipe')} into {directory}"
    )
    click.echo(
        f"  written {n(report.written, 'blob')} ({_bytes(report.written_bytes)}, "
        f"{report.linked} hard-linked), reused {n(report.reused, 'blob')} "
        f"({_bytes(report.reused_bytes)})"
    )
    if report.fetched:
        click.echo(f"  fetched first: {', '.join(sorted(set(report.fetched)))}")
    if report.skipped:
        click.echo(
            f"  skipped path sources (this repository's own directories): {', '.join(report.skipped)}"
        )


@command.command("import")
@click.argument("directory", type=click.Path(path_type=Path))
@click.pass_obj
def import_command(app: App, directory: Path) -> None:
    """Add every blob of an export DIR to the store (--store), each verified first."""
    from nvkr.airgap.importing import import_mirror
    from nvkr.store import Store

    store = Store(app.store_root)
    with store.reading():
        report = import_mirror(directory, store)
    click.echo(
        f"imported {n(report.added, 'blob')} ({_bytes(report.added_bytes)}) into {store.root}; "
        f"{report.present} already there"
    )


@command.command("serve")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="Port (0: any free one).",
)
def serve_command(directory: Path, host: str, port: int) -> None:
    """Serve an export DIR at its upstream URL layout (GET /<host>/<path>) until Ctrl-C."""
    from nvkr.airgap.serve import config_snippet, make_server, mirror_flags

    server, prefixes = make_server(directory, host, port)
    base = f"http://{host}:{server.server_address[1]}"
    click.echo(f"serving {directory} at {base}/ (Ctrl-C stops)")
    click.echo("build with:")
    click.echo("  " + " ".join(mirror_flags(prefixes, base)))
    click.echo("or in the nvkr config file:")
    click.echo("  " + config_snippet(prefixes, base).rstrip("\n").replace("\n", "\n  "))
    click.echo("pypi and git sources are not served: `nvkr mirror import` them", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        click.echo("stopped", err=True)
    finally:
        server.server_close()
