"""``nvkr copy``: a release set from one registry to another, whole, digests unchanged
(:mod:`nvkr.delivery.copy`).

Humans get one line per upload, mount, manifest push, referrers tag and the tag on stderr (a live
display with a byte bar on a terminal, :mod:`nvkr.monitor`), and a summary that says how many
bytes went up (``0 bytes uploaded`` on a re-copy) and how many referrers came along; ``--json``
prints one JSON object per event on stdout and a final ``result`` (the report) or ``error``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from nvkr.cli import App
from nvkr.cli.common import RegistryAccess, registry_options

if TYPE_CHECKING:
    from nvkr.monitor import Monitor


@click.command("copy")
@click.argument("reference")
@click.argument("destination")
@registry_options(
    insecure_note="to both registries",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Manifests fetched and blobs copied at once.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable events on stdout.")
@click.pass_obj
def command(
    app: App,
    reference: str,
    destination: str,
    registry: RegistryAccess,
    jobs: int,
    as_json: bool,
) -> None:
    """Copy the release set REFERENCE (REGISTRY/REPOSITORY:TAG or @sha256:<hex>) to DESTINATION
    (REGISTRY/REPOSITORY[:TAG]), with every referrer, digests unchanged.

    Blobs the destination holds are skipped (mounted within one registry), everything is pushed
    before the release set index, and the tag (default: REFERENCE's, else the set's name) is
    written last. --username and --password-stdin go to both registries; without them each
    registry gets its own entry of the Docker config.
    """
    from nvkr.monitor import monitoring, open_monitor

    with monitoring(open_monitor("copy", as_json=as_json)) as monitor:
        _copy(monitor, reference, destination, registry, jobs)


def _copy(
    monitor: Monitor, reference: str, destination: str, registry: RegistryAccess, jobs: int
) -> None:
    """Check the arguments, copy, and report to ``monitor`` (:func:`command`)."""
    import contextlib

    from nvkr.delivery.copy import check_references, copy_release_set
    from nvkr.monitor.events import Result, Step, Transfer
    from nvkr.oci.registry import Reference

    # before anything else: a bad name never reaches a registry
    ref, dest = Reference.parse(reference), Reference.parse(destination)
    check_references(ref, dest)

    def event(kind: str, fields: dict[str, Any]) -> None:
        if kind == "blob-progress":  # a byte bar, not a step
            done, size = fields["done"], fields["size"]
            what = str(fields["digest"])[:19]
            direction = "pulled" if fields.get("phase") == "download" else "pushed"
            monitor.emit(Transfer(direction, what, done, size, finished=done >= size))
            return
        if kind == "tagged":  # the human line names the whole reference
            fields = {**fields, "target": f"{dest.registry}/{dest.repository}"}
        monitor.emit(Step("copy", kind, fields))

    pool = max(10, jobs)
    with contextlib.ExitStack() as stack:
        client = stack.enter_context(registry.client(dest.registry, pool_size=pool))
        source = client
        if ref.registry != dest.registry:
            source = stack.enter_context(registry.client(ref.registry, pool_size=pool))
        report = copy_release_set(ref, dest, source, client, jobs=jobs, on_event=event)
    monitor.emit(Result("copy", report.to_json()))
