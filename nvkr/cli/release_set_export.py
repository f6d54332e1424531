"""``nvkr release-set export``: a release set as JSON for management systems, or Cluster API YAML.

Reads the release set in a ``dist/<name>`` directory through its metadata only (as ``show``
does) and writes :func:`nvkr.export.export_json` (``--format json``) or
:func:`nvkr.export.export_capi` (``--format capi``) to stdout or ``--out``. Registry references
are not read yet: ``nvkr/releaseset/remote.py`` (``read_remote_metadata``) does not exist.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from nvkr.cli import App


@click.command("export")
@click.argument("source", metavar="PATH|REF")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "capi"]),
    required=True,
    help="json: the versioned export schema (schema/release-set-export.schema.json); "
    "capi: Cluster API v1beta1 resources as multi-document YAML.",
)
@click.option("--cluster-name", default="nvkr", show_default=True, help="capi: Cluster name.")
@click.option("--namespace", default="default", show_default=True, help="capi: namespace.")
@click.option(
    "--infrastructure-kind",
    default="Metal3MachineTemplate",
    show_default=True,
    help="capi: kind of the infrastructure machine templates the resources reference.",
)
@click.option(
    "--infrastructure-api-version",
    default="infrastructure.cluster.x-k8s.io/v1beta1",
    show_default=True,
    help="capi: apiVersion of the infrastructure machine templates.",
)
@click.option(
    "--repository",
    help="REGISTRY/REPO the set is published to; machine images get REGISTRY/REPO@digest URLs.",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write here instead of stdout.",
)
@click.pass_obj
def command(
    app: App,
    source: str,
    fmt: str,
    cluster_name: str,
    namespace: str,
    infrastructure_kind: str,
    infrastructure_api_version: str,
    repository: str | None,
    out: Path | None,
) -> None:
    """Export the release set in PATH (a dist/<name> directory) or at REF (a registry reference)
    for a management system."""
    from nvkr import export
    from nvkr.cli.release_set import load_release_set

    meta, top = load_release_set(source)
    digest = str(top["digest"])
    if fmt == "json":
        doc = export.export_json(meta, digest, repository=repository)
        text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    else:
        resources = export.export_capi(
            meta,
            digest,
            cluster_name=cluster_name,
            namespace=namespace,
            repository=repository,
            infrastructure_kind=infrastructure_kind,
            infrastructure_api_version=infrastructure_api_version,
        )
        without = [
            p["name"] for p in meta.get("nodePoolReleases") or [] if not p.get("machineImage")
        ]
        if without:
            click.echo(
                f"warning: {len(without)} node-pool release(s) have no machine image "
                f"({', '.join(without)}); annotated {export.ANN_MACHINE_IMAGE}: none",
                err=True,
            )
        text = export.dump_yaml(resources)
    if out is None:
        click.echo(text, nl=False)
        return
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)
