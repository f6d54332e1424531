"""``nvkr publish``: push a release set's layout to a registry, the tag last (:mod:`nvkr.delivery.publish`).

Humans get one line per upload, mount, manifest push, referrers tag and the tag on stderr (a live
display with a byte bar on a terminal, :mod:`nvkr.monitor`), and a summary that says how many
bytes went up (``0 bytes uploaded`` on a re-publish); ``--json`` prints one JSON object per event
on stdout and a final ``result`` (the report) or ``error``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from nvkr.cli import App
from nvkr.cli.common import RegistryAccess, registry_options

if TYPE_CHECKING:
    from nvkr.monitor import Monitor


@click.command("publish")
@click.argument("layout", type=click.Path(path_type=Path))
@click.argument("reference")
@registry_options()
@click.option("--name", help="Which ref.name of the layout's index.json (default: its only one).")
@click.option(
    "--mount-from",
    multiple=True,
    metavar="REPOSITORY",
    help="Mount missing blobs from this repository of the same registry (repeatable).",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Parallel uploads.",
)
@click.option(
    "--chunk-size",
    type=click.IntRange(min=1),
    default=32,
    show_default=True,
    help="MiB per upload chunk; larger blobs upload in chunks and resume after a broken one.",
)
@click.option(
    "--with-sources",
    is_flag=True,
    help="Also push the set's source closure (every locked source, the recipe files, the "
    "lockfile) as a referrer, so it can be rebuilt from the registry alone.",
)
@click.option(
    "--project",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("."),
    show_default=True,
    help="With --with-sources: the checkout the set was built from (its recipe's paths are "
    "relative to it).",
)
@click.option(
    "--build-env",
    metavar="IMAGE@sha256:HEX",
    help="With --with-sources: the build environment's image (e.g. nvkr's CI image), by digest, "
    "named in the closure.",
)
@click.option(
    "--max-layers",
    type=click.IntRange(min=1),
    default=500,
    show_default=True,
    help="With --with-sources: layers per manifest of the closure (registries cap it).",
)
@click.option("--offline", is_flag=True, help="With --with-sources: sources only from the store.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable events on stdout.")
@click.pass_obj
def command(
    app: App,
    layout: Path,
    reference: str,
    registry: RegistryAccess,
    name: str | None,
    mount_from: tuple[str, ...],
    jobs: int,
    chunk_size: int,
    with_sources: bool,
    project: Path,
    build_env: str | None,
    max_layers: int,
    offline: bool,
    as_json: bool,
) -> None:
    """Publish the release set in LAYOUT (dist/<name>) to REFERENCE (REGISTRY/REPOSITORY[:TAG]).

    Blobs the repository holds are skipped, everything is pushed before the release set index,
    and the tag (default: the release set's name) is written last. With --with-sources, the
    set's sources follow as a referrer of it (`nvkr pull --with-sources`, `nvkr verify
    --rebuild REF` read them).
    """
    from nvkr.monitor import monitoring, open_monitor

    sources = None
    if with_sources:
        sources = _Sources(app, project, build_env, max_layers, offline)
    else:
        from click.core import ParameterSource

        from nvkr.errors import UsageError

        ctx = click.get_current_context()
        for option in ("project", "build_env", "max_layers", "offline"):
            if ctx.get_parameter_source(option) not in (ParameterSource.DEFAULT, None):
                flag = "--" + option.replace("_", "-")
                raise UsageError(
                    f"{flag} is an option of --with-sources, which is not given",
                    hint=f"add --with-sources to push the set's sources, or leave {flag} out",
                )
    with monitoring(open_monitor("publish", as_json=as_json)) as monitor:
        _publish(monitor, layout, reference, registry, name, mount_from, jobs, chunk_size, sources)


class _Sources:
    """``--with-sources`` and its options."""

    def __init__(
        self, app: App, project: Path, build_env: str | None, max_layers: int, offline: bool
    ) -> None:
        from nvkr.errors import UsageError
        from nvkr.oci.registry import Reference

        if build_env is not None and Reference.parse(build_env).digest is None:
            raise UsageError(
                f"--build-env {build_env} names no digest",
                hint="name the image by digest: IMAGE@sha256:<hex>",
            )
        self.app, self.project, self.build_env = app, project, build_env
        self.max_layers, self.offline = max_layers, offline


def _publish(
    monitor: Monitor,
    layout: Path,
    reference: str,
    registry: RegistryAccess,
    name: str | None,
    mount_from: tuple[str, ...],
    jobs: int,
    chunk_size: int,
    sources: _Sources | None = None,
) -> None:
    """Check the arguments, publish, and report to ``monitor`` (:func:`command`)."""
    from nvkr.delivery.publish import publish_layout
    from nvkr.errors import UsageError
    from nvkr.monitor.events import Note, Result, Step, Transfer
    from nvkr.oci.registry import Reference

    ref = Reference.parse(reference)  # before anything else: a bad name never reaches a registry
    for repo in mount_from:
        Reference.parse(f"{ref.registry}/{repo}")
    if not (layout / "index.json").is_file():
        raise UsageError(
            f"{layout} is not an OCI image layout (no index.json)",
            hint="publish a release set directory, e.g. dist/<name>/ as nvkr build writes it",
        )

    def event(kind: str, fields: dict[str, Any]) -> None:
        if kind == "blob-progress":  # a byte bar, not a step
            done, size = fields["done"], fields["size"]
            what = str(fields["digest"])[:19]
            monitor.emit(Transfer("pushed", what, done, size, finished=done >= size))
            return
        if kind == "tagged":  # the human line names the whole reference
            fields = {**fields, "target": f"{ref.registry}/{ref.repository}"}
        monitor.emit(Step("publish", kind, fields))

    with registry.client(
        ref.registry, chunk_size=chunk_size << 20, pool_size=max(10, jobs)
    ) as client:
        if sources is None:
            report = publish_layout(
                layout, ref, client, name=name, mount_from=mount_from, jobs=jobs, on_event=event
            )
            monitor.emit(Result("publish", report.to_json()))
            return
        from nvkr.cli.common import open_session
        from nvkr.delivery.withsources import closure_json, publish_with_sources, release_source

        made = release_source(layout)
        for what, rel in (("recipe", made.recipe), ("lockfile", made.lockfile)):
            if not (sources.project / rel).is_file():
                raise UsageError(
                    f"release set {made.name} was built from {what} {rel}, which is not in "
                    f"{sources.project}",
                    hint="run from the directory the build ran in, or pass it with --project DIR",
                )
        session = open_session(
            sources.app, sources.project / made.recipe, made.variants, offline=sources.offline,
            locked=True, lockfile=sources.project / made.lockfile,
        )  # fmt: skip
        with session.store.lock():  # a source the store lacks is fetched into it
            report, closure, pushed = publish_with_sources(
                layout, ref, client, session, sources.project, name=name, mount_from=mount_from,
                build_env=sources.build_env, max_layers=sources.max_layers, jobs=jobs,
                on_event=event, progress=lambda line: monitor.emit(Note(line)),
            )  # fmt: skip
    monitor.emit(Result("publish", {**report.to_json(), "sources": closure_json(closure, pushed)}))
