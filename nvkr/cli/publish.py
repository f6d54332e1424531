"""``nvkr publish``: push a release set's layout to a registry, the tag last (:mod:`nvkr.delivery.publish`).

Humans get one line per upload, mount, manifest push, referrers tag and the tag on stderr, and a
summary that says how many bytes went up (``0 bytes uploaded`` on a re-publish); ``--json``
prints one JSON object per event on stdout and a final ``result`` (the report).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from nvkr.cli import App
from nvkr.cli.common import RegistryAccess, n, registry_options
from nvkr.cli.common import human_size as _size


def _verb(word: str, colour: str = "cyan") -> str:
    """``word`` in colour, padded to the column the digests start at (ANSI only on a terminal:
    click.echo strips it elsewhere)."""
    return "  " + click.style(word, fg=colour) + " " * (10 - len(word))


def _dim(text: str) -> str:
    return click.style(text, dim=True)


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
    as_json: bool,
) -> None:
    """Publish the release set in LAYOUT (dist/<name>) to REFERENCE (REGISTRY/REPOSITORY[:TAG]).

    Blobs the repository holds are skipped, everything is pushed before the release set index,
    and the tag (default: the release set's name) is written last.
    """
    from nvkr.delivery.publish import publish_layout
    from nvkr.errors import UsageError
    from nvkr.oci.registry import Reference

    ref = Reference.parse(reference)  # before anything else: a bad name never reaches a registry
    for repo in mount_from:
        Reference.parse(f"{ref.registry}/{repo}")
    if not (layout / "index.json").is_file():
        raise UsageError(
            f"{layout} is not an OCI image layout (no index.json)",
            hint="publish a release set directory, e.g. dist/<name>/ as nvkr build writes it",
        )

    def say(*parts: str) -> None:
        click.echo("".join(parts), err=True)

    def event(kind: str, fields: dict[str, Any]) -> None:
        if as_json:
            click.echo(json.dumps({"event": kind, **fields}, sort_keys=True))
            return
        digest = str(fields.get("digest", ""))[:19]
        if kind == "start":
            say(f"nvkr: publishing {fields['reference']}")
        elif kind == "blob-uploaded":
            say(_verb("uploaded"), f"blob {digest} ", _dim(_size(fields["size"])))
        elif kind == "blob-mounted":
            say(_verb("mounted"), f"blob {digest} from {fields['source']}")
        elif kind == "manifest-pushed":
            what = fields.get("artifactType") or fields["mediaType"]
            say(_verb("pushed"), f"manifest {digest} ", _dim(str(what)))
        elif kind == "referrers-tag" and fields["written"]:
            say(_verb("referrers"), f"{fields['tag'][:19]} ", _dim("(fallback tag)"))
        elif kind == "tagged":  # when it happens: the build record goes up after it
            target = f"{ref.registry}/{ref.repository}:{fields['tag']}"
            if fields["previous"] != fields["digest"]:
                previous = fields["previous"]
                was = " " + _dim(f"(was {previous[:19]})") if previous else ""
                say(_verb("tagged", "green"), f"{target} → {fields['digest']}{was}")
            else:
                say(_verb("tag", "green"), f"{target} already at {fields['digest']}")
        elif kind == "build-record":
            count = _dim(f"({n(len(fields['digests']), 'manifest')})")
            if fields.get("pushed", True):
                say(_verb("attached"), "build record ", count)
            else:
                say(_verb("attached"), "build record already there ", count)

    with registry.client(
        ref.registry, chunk_size=chunk_size << 20, pool_size=max(10, jobs)
    ) as client:
        report = publish_layout(
            layout, ref, client, name=name, mount_from=mount_from, jobs=jobs, on_event=event
        )
    if as_json:
        click.echo(json.dumps({"event": "result", **report.to_json()}, sort_keys=True))
        return
    uploaded = f"{report.blobs_uploaded} blobs, {_size(report.bytes_uploaded)} uploaded"
    if report.bytes_uploaded == 0:
        uploaded = "0 bytes uploaded"
    say(
        f"nvkr: {uploaded}; {report.blobs_skipped} blobs already there "
        f"({_size(report.bytes_skipped)}), {report.blobs_mounted} mounted; "
        f"{report.manifests_pushed} manifests pushed, {report.manifests_skipped} already there ",
        _dim(f"({report.seconds:.1f} s)"),
    )
