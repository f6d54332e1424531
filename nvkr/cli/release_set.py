"""``nvkr release-set show``: what a release set holds, read from its index and metadata
(:mod:`nvkr.delivery.show`) and, for each machine image's size, its manifest and QCOW2 header
(:mod:`nvkr.delivery.imagesizes`); ``nvkr release-set export`` hangs off this group.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from nvkr.cli import App
from nvkr.cli.common import RegistryAccess, registry_options

if TYPE_CHECKING:
    from rich.table import Table

    from nvkr.verify.attestations import AttestationRow


@click.group("release-set")
def command() -> None:
    """Inspect release sets."""


@command.command("show")
@click.argument("source", metavar="PATH|REF")
@click.option("--json", "as_json", is_flag=True, help="Print the release set metadata as JSON.")
@registry_options("REF")
@click.pass_obj
def show(app: App, source: str, as_json: bool, registry: RegistryAccess) -> None:
    """Show the release set in PATH (a dist/<name> directory) or at REF
    (REGISTRY/REPOSITORY:TAG or @sha256:<hex>; only its index and metadata are fetched):
    artifacts, each machine image's size (QCOW2 bytes, virtual disk, compression), cluster
    release, node-pool releases, the build warnings the build record beside PATH keeps, the
    rebuild attestations (verifier, result, levels, time, key id) beside PATH or attached to REF,
    and whether REF has its source closure."""
    from rich.markup import escape
    from rich.table import Table

    from nvkr.cli.common import make_console
    from nvkr.delivery.imagesizes import machine_image_sizes
    from nvkr.delivery.show import (
        artifact_rows,
        attestations,
        build_warnings,
        load_release_set,
        source_closure,
    )

    meta, top = load_release_set(source, registry=registry)
    sizes = machine_image_sizes(meta, source, registry=registry)
    warnings = build_warnings(source)
    attested = attestations(source, top, registry=registry)
    closure = source_closure(source, top, registry=registry)
    if as_json:
        doc = {"digest": top["digest"], "metadata": meta}
        doc["machineImages"] = [s.to_json() for s in sizes]
        doc["buildWarnings"] = warnings
        doc["attestations"] = [a.to_json() for a in attested]
        doc["sources"] = closure
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
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
    for row in artifact_rows(meta):
        table.add_row(row.name, row.kind, row.arch, row.digest, ", ".join(row.variants))
    console.print(table)
    if sizes:
        images = Table("machine image", "variants", "QCOW2", "virtual disk", "compression")
        for size in sizes:
            virtual = "?" if size.virtual_size is None else _bytes(size.virtual_size)
            images.add_row(
                size.name, ", ".join(size.variants), _bytes(size.size), virtual, size.compression
            )
        console.print(images)
        for size in sizes:
            sb = size.secure_boot
            if sb is None:
                continue
            pcrs = " ".join(
                f"{k}={str(v)[:12]}" for k, v in sorted(sb["pcrs"].items(), key=lambda i: int(i[0]))
            )
            console.print(
                f"secure boot {escape(size.name)} {escape('[' + ', '.join(size.variants) + ']')}: signed for "
                f"{escape(str(sb['owner']))}; predicted PCRs ({escape(sb['firmware'])}, "
                f"phase {sb['phase']}): {pcrs}"
            )
    cluster = meta.get("clusterRelease")
    if cluster:
        console.print(f"cluster release: Kubernetes {cluster['kubernetes']}")
        for chart in cluster.get("charts", []):
            console.print(f"  chart {chart['chart']} {chart['version']} {chart['digest']}")
        for image in {i["digest"]: i for i in cluster.get("images", [])}.values():
            console.print(f"  image {image['name']} {image['digest']}")
    for pool in meta.get("nodePoolReleases", []):
        console.print(f"node-pool release {escape(pool['name'])}: {', '.join(pool['artifacts'])}")
    _print_attached(console, warnings, closure, attested)


def _print_attached(
    console: Any,
    warnings: list[dict[str, str]] | None,
    closure: dict[str, Any] | None,
    attested: list[AttestationRow],
) -> None:
    """What is kept beside the set: the build record's warnings, the source closure, the
    rebuild attestations."""
    from rich.markup import escape

    if warnings is None:
        console.print(
            "build warnings: not read from a registry (they are in the build record: "
            "`nvkr pull REF DIR`, then `nvkr release-set show DIR`, or `nvkr verify REF`)"
        )
    elif warnings:
        console.print(f"{len(warnings)} build warning{'s' if len(warnings) != 1 else ''}:")
        for w in warnings:
            console.print(f"  [yellow]warning[/]: {escape(w['action'])}: {escape(w['message'])}")
            if w.get("hint"):
                console.print(f"    hint: {escape(w['hint'])}")
    if closure:
        console.print(
            f"sources: the source closure {closure['digest']} ({closure['manifests']} "
            f"manifest{'s' if closure['manifests'] != 1 else ''}): `nvkr verify REF --rebuild` "
            "rebuilds from the registry alone, `nvkr pull REF DIR --with-sources SRCDIR` "
            "fetches them"
        )
    elif closure is not None:
        console.print("sources: none in the registry (`nvkr publish --with-sources` keeps them)")
    if attested:
        console.print(_attestation_table(attested))


def _attestation_table(attested: list[AttestationRow]) -> Table:
    """The rebuild attestations, one row each, under a title saying their signatures are not
    checked here."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(
        "verifier", "result", "levels", "time verified", "key id", "where",
        title=f"{len(attested)} rebuild attestation{'s' if len(attested) != 1 else ''} "
        "(signatures not checked here: `nvkr verify --policy` counts the trusted ones)",
        title_justify="left",
    )  # fmt: skip
    for a in attested:
        if a.problem is not None:
            table.add_row("?", "unreadable", escape(a.problem), "", a.keyid or "?", a.where)
            continue
        result = a.result if a.this_set else f"{a.result} (of another release set)"
        table.add_row(
            a.verifier, result, ", ".join(a.levels), a.time, (a.keyid or "?")[:16], a.where
        )
    return table


def _bytes(n: int) -> str:
    """``681705472 bytes (650.1 MiB)``: exact, then readable."""
    return f"{n} bytes ({n / (1 << 20):.1f} MiB)"


def _register_export() -> None:
    from nvkr.cli import release_set_export

    command.add_command(release_set_export.command)


_register_export()
