"""``nvkr pull``: a release set from a registry, by digest, into a layout dir (:mod:`nvkr.delivery.pull`).

Humans get a summary on stderr (with the bytes downloaded and reused when blobs of an earlier pull
into DIR, or of the store, were reused); ``--json`` prints one JSON object per event on stdout and
a final ``result`` or ``error`` (stream version 1: camelCase keys, ``milliseconds``;
:mod:`nvkr.monitor`). A failed digest or signature check exits 3 and leaves DIR as it was.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from nvkr.cli import App
from nvkr.cli.common import RegistryAccess, registry_options

if TYPE_CHECKING:
    from nvkr.monitor import Monitor


@click.command("pull")
@click.argument("reference")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option(
    "--key",
    "keys",
    multiple=True,
    metavar="PUB",
    help="Public key (PEM file or env://VAR), repeatable; verified before DIR is written.",
)
@registry_options()
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Blobs downloaded at once.",
)
@click.option(
    "--with-sources",
    "sources_dir",
    type=click.Path(path_type=Path, file_okay=False),
    metavar="SRCDIR",
    help="Also pull the set's source closure into SRCDIR: an export `nvkr mirror import` "
    "takes, with the recipe files under SRCDIR/project/.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable events on stdout.")
@click.pass_obj
def command(
    app: App,
    reference: str,
    directory: Path,
    keys: tuple[str, ...],
    registry: RegistryAccess,
    jobs: int,
    sources_dir: Path | None,
    as_json: bool,
) -> None:
    """Pull the release set REFERENCE (REGISTRY/REPOSITORY@sha256:<hex>) into DIRECTORY.

    Every blob is checked against its digest, and with --key every signature, before DIRECTORY
    is written (atomically; an existing one is replaced only when every check passed). With
    --with-sources the source closure is pulled and checked first: when it fails, DIRECTORY is
    not written; when the set fails, a new SRCDIR is removed.
    """
    from nvkr.monitor import monitoring, open_monitor

    with monitoring(open_monitor("pull", as_json=as_json)) as monitor:
        _pull(monitor, app, reference, directory, keys, registry, jobs, sources_dir)


def _pull(
    monitor: Monitor,
    app: App,
    reference: str,
    directory: Path,
    keys: tuple[str, ...],
    registry: RegistryAccess,
    jobs: int,
    sources_dir: Path | None = None,
) -> None:
    """Check the arguments, pull, and report to ``monitor`` (:func:`command`)."""
    from nvkr.delivery.pull import pull_release_set
    from nvkr.errors import UsageError
    from nvkr.monitor.events import Result, Step, Transfer
    from nvkr.oci.registry import Reference
    from nvkr.sign import load_public_key
    from nvkr.store import default_root
    from nvkr.storelock import reader_lock

    ref = Reference.parse(reference)
    if ref.digest is None:
        raise UsageError(
            f"reference {ref} names no digest: nvkr pull fetches by digest only",
            hint=f"pull by digest: {ref}@sha256:<hex> (`nvkr release-set show {ref}` prints it)",
        )
    public_keys = [load_public_key(k) for k in keys]

    def event(kind: str, fields: dict[str, Any]) -> None:
        if kind == "blob-progress":  # a byte bar, not a step
            done, size = fields["done"], fields["size"]
            what = str(fields["digest"])[:19]
            monitor.emit(Transfer("pulled", what, done, size, finished=done >= size))
            return
        monitor.emit(Step("pull", kind, fields))

    store = app.store_root or default_root()  # its blobs are reused, never written
    with reader_lock(store), registry.client(ref.registry) as client:
        pulled, existed = None, True
        if sources_dir is not None:  # first: a set without its sources leaves DIR untouched
            from nvkr.delivery.sources import pull_sources

            existed = sources_dir.exists()
            pulled = pull_sources(
                client, ref.repository, str(ref.digest), sources_dir, on_event=event,
                workers=jobs, reuse=[store],
            )  # fmt: skip
        try:
            report = pull_release_set(
                ref, directory, client, keys=public_keys, on_event=event, workers=jobs,
                reuse=[store],
            )  # fmt: skip
        except BaseException:
            if sources_dir is not None and not existed:  # neither is written, then
                import shutil

                shutil.rmtree(sources_dir, ignore_errors=True)
            raise
    fields = asdict(report)
    if pulled is not None:
        fields["sources"] = asdict(pulled)
    monitor.emit(Result("pull", fields, summary={**fields, "target_dir": str(directory)}))
