"""``nvkr release-set show``: what a release set holds, read from its index and metadata only.

A release set on disk (``dist/<name>/``, an OCI image layout) or in a registry
(``REGISTRY/REPOSITORY:TAG``, :func:`nvkr.releaseset.remote.read_remote_metadata`) is read
through its metadata manifest's config (``application/vnd.nvkr.release-set.metadata.v1+json``), checked against its
digest on the way; payload blobs (binaries, layers, charts) are not read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from nvkr.cli import App
from nvkr.cli.common import RegistryAccess, registry_options


@click.group("release-set")
def command() -> None:
    """Inspect release sets."""


def _platforms(art: dict[str, Any]) -> str:
    if art.get("platform"):
        return str(art["platform"]["architecture"])
    return ",".join(p["architecture"] for p in art.get("platforms", []))


def _digest(art: dict[str, Any]) -> str:
    for key in ("index", "manifest"):
        if key in art:
            return str(art[key]["digest"])
    return ""


def load_release_set(
    source: str, *, registry: RegistryAccess | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(metadata, release set index descriptor)`` of a dist/<name> directory or a registry
    reference (only the index, the metadata manifest and its config are fetched, through
    ``registry``'s settings).

    Raises:
        UsageError: ``source`` is neither; IntegrityError: a digest does not match.
    """
    from nvkr.errors import UsageError

    layout = Path(source)
    if layout.is_dir():
        from nvkr.cli.common import require_layout
        from nvkr.oci.layout import LayoutReader

        require_layout(layout)
        from nvkr.releaseset import read_metadata
        from nvkr.releaseset.signing import release_set_entry

        return read_metadata(layout), release_set_entry(LayoutReader(layout))
    if layout.exists() or "/" not in source or source.startswith(("/", "./", "../")):
        raise UsageError(
            f"{source} is neither a release set directory nor a registry reference",
            hint="give dist/<name> or REGISTRY/REPOSITORY:TAG",
        )
    from nvkr.oci.registry import Reference
    from nvkr.releaseset.remote import read_remote_metadata

    ref = Reference.parse(source)
    with (registry or RegistryAccess()).client(ref.registry) as client:
        return read_remote_metadata(client, ref)


@command.command("show")
@click.argument("source", metavar="PATH|REF")
@click.option("--json", "as_json", is_flag=True, help="Print the release set metadata as JSON.")
@registry_options("REF")
@click.pass_obj
def show(app: App, source: str, as_json: bool, registry: RegistryAccess) -> None:
    """Show the release set in PATH (a dist/<name> directory) or at REF
    (REGISTRY/REPOSITORY:TAG or @sha256:<hex>; only its index and metadata are fetched):
    artifacts, cluster release, node-pool releases."""
    from rich.markup import escape
    from rich.table import Table

    from nvkr.cli.common import make_console

    meta, top = load_release_set(source, registry=registry)
    if as_json:
        click.echo(
            json.dumps({"digest": top["digest"], "metadata": meta}, indent=2, sort_keys=True)
        )
        return
    console = make_console()
    console.print(f"[bold]{escape(meta['name'])}[/] {top['digest']}")
    console.print(
        f"  created {meta['created']}, recipe {escape(meta['recipe']['path'])} {meta['recipe']['digest'][:19]}"
    )
    console.print(
        "  variants: "
        + "; ".join(",".join(f"{k}={v}" for k, v in sorted(x.items())) for x in meta["variants"])
    )
    table = Table("artifact", "kind", "arch", "digest", "variants")
    seen: dict[tuple[str, str], list[str]] = {}
    for art in meta["artifacts"]:
        key = (art["name"], _digest(art))
        seen.setdefault(key, []).append(f"{art['variant']['gpu']}/{art['variant']['arch']}")
    for art in meta["artifacts"]:
        key = (art["name"], _digest(art))
        if key not in seen:
            continue
        table.add_row(art["name"], art["kind"], _platforms(art), key[1], ", ".join(seen.pop(key)))
    console.print(table)
    cluster = meta.get("clusterRelease")
    if cluster:
        console.print(f"cluster release: Kubernetes {cluster['kubernetes']}")
        for chart in cluster.get("charts", []):
            console.print(f"  chart {chart['chart']} {chart['version']} {chart['digest']}")
        for image in {i["digest"]: i for i in cluster.get("images", [])}.values():
            console.print(f"  image {image['name']} {image['digest']}")
    for pool in meta.get("nodePoolReleases", []):
        console.print(f"node-pool release {escape(pool['name'])}: {', '.join(pool['artifacts'])}")


def _register_export() -> None:
    from nvkr.cli import release_set_export

    command.add_command(release_set_export.command)


_register_export()
