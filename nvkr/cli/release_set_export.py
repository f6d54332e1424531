"""``nvkr release-set export``: a release set as JSON for management systems, or Cluster API YAML.

Parses the options, calls :func:`nvkr.delivery.export.release.export_release_set` and writes its
text to stdout or ``--out``; its warnings go to stderr.
"""

from __future__ import annotations

from pathlib import Path

import click

from nvkr.cli import App
from nvkr.cli.common import RegistryAccess, registry_options
from nvkr.errors import UsageError


@click.command("export")
@click.argument("source", metavar="PATH|REF")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "capi"]),
    required=True,
    help="json: the versioned export schema (schema/release-set-export.schema.json); "
    "capi: Cluster API resources (see --api-version) as multi-document YAML.",
)
@click.option(
    "--cluster-name",
    default="nvkr",
    show_default=True,
    help="capi: Cluster name, a DNS-1123 label (a-z, 0-9, '-'; at most 63).",
)
@click.option(
    "--namespace",
    default="default",
    show_default=True,
    help="capi: namespace, a DNS-1123 label (a-z, 0-9, '-'; at most 63).",
)
@click.option(
    "--infrastructure-kind",
    default="Metal3MachineTemplate",
    show_default=True,
    help="capi: kind of the infrastructure machine templates the resources reference.",
)
@click.option(
    "--infrastructure-api-version",
    help="capi: apiVersion of the infrastructure machine templates (default: "
    "infrastructure.cluster.x-k8s.io/<--metal3-api-version>).",
)
@click.option(
    "--repository",
    help="REGISTRY/REPO the set is published to; machine images get REGISTRY/REPO@digest URLs.",
)
@click.option(
    "--infrastructure",
    type=click.Choice(["metal3"]),
    help="capi: also write the infrastructure machine templates: metal3 writes a "
    "Metal3MachineTemplate per node-pool release and one for the control plane, each booting "
    "the pool's QCOW2 machine image (checksum: its sha256). Every pool needs a machine image.",
)
@click.option(
    "--image-base-url",
    metavar="URL",
    help="metal3: Ironic downloads each disk from URL/<sha256 hex>.qcow2 (copy the QCOW2 "
    "blobs there under those names).",
)
@click.option(
    "--image-url-from-registry",
    is_flag=True,
    help="metal3: Ironic downloads each disk straight from the registry the set is read from "
    "(REF, else --repository): https://REGISTRY/v2/REPO/blobs/sha256:<hex>. Ironic sends no "
    "credentials: only for registries that serve blobs anonymously, without a token "
    "handshake (not ghcr.io or Docker Hub).",
)
@click.option(
    "--image-url-oci",
    is_flag=True,
    help="metal3: Ironic pulls each machine image from the registry the set is read from (REF, "
    "else --repository) as oci://REGISTRY/REPO@sha256:<its per-arch manifest>, no checksum "
    "fields. Needs Ironic 29.0+ (experimental), baremetal-operator 0.12+ and CAPM3 1.14+ "
    "(anonymous pulls: CAPM3 has no pull secret).",
)
@click.option(
    "--images-dir",
    type=click.Path(path_type=Path, file_okay=False),
    metavar="DIR",
    help="Also write each machine image as DIR/<sha256 hex>.qcow2 (a hard link to the "
    "layout's blob where possible, else a copy; from REF, downloaded and verified) with "
    "<hex>.qcow2.sha256sum and SHA256SUMS for Ironic: serve DIR at --image-base-url. DIR must "
    "be new, empty or an earlier export (which keeps its images).",
)
@click.option(
    "--control-plane-pool",
    metavar="NAME",
    help="metal3: the node-pool release whose machine image the control plane boots "
    "(default: the first amd64 one).",
)
@click.option(
    "--host-arch-label",
    metavar="KEY",
    help="metal3: each template selects BareMetalHosts labelled KEY=<arch of its machine image> "
    "(amd64, arm64), e.g. kubernetes.io/arch; without it Metal3 may put any image on any host.",
)
@click.option(
    "--api-version",
    type=click.Choice(["v1beta1", "v1beta2"]),
    default="v1beta2",
    show_default=True,
    help="capi: Cluster API version of the resources (v1beta2: Cluster API 1.11 and later; "
    "v1beta1 is deprecated and no longer served from Cluster API 1.16).",
)
@click.option(
    "--metal3-api-version",
    type=click.Choice(["v1beta1", "v1beta2"]),
    default="v1beta2",
    show_default=True,
    help="metal3: CAPM3 version of the Metal3 resources (v1beta2: CAPM3 1.13 and later; "
    "v1beta1 for CAPM3 1.12, which serves only v1beta1).",
)
@click.option(
    "--control-plane-endpoint",
    metavar="HOST:PORT",
    help="capi: the API server's stable address (Cluster and infrastructure cluster; bare "
    "metal: a VIP such as kube-vip's). Required with --infrastructure metal3.",
)
@click.option(
    "--bootstrap-data",
    nargs=2,
    metavar="POOL OUT",
    help="capi: also write to OUT the cloud-init user-data Cluster API's kubeadm bootstrap "
    "provider would give a node of POOL (an exported pool such as hopper-amd64, or "
    "control-plane: a control-plane JOIN, JoinConfiguration with controlPlane, not the first "
    "node's kubeadm init) joining with the exported configuration (placeholder token and CA "
    "hash; the endpoint is --control-plane-endpoint's, else a placeholder).",
)
@registry_options("REF", insecure_note="registry image URLs are then http:// too")
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
    infrastructure_api_version: str | None,
    repository: str | None,
    infrastructure: str | None,
    image_base_url: str | None,
    image_url_from_registry: bool,
    image_url_oci: bool,
    images_dir: Path | None,
    control_plane_pool: str | None,
    host_arch_label: str | None,
    api_version: str,
    metal3_api_version: str,
    control_plane_endpoint: str | None,
    bootstrap_data: tuple[str, str] | None,
    registry: RegistryAccess,
    out: Path | None,
) -> None:
    """Export the release set in PATH (a dist/<name> directory) or at REF (a registry reference)
    for a management system."""
    from nvkr.delivery.export.release import ExportOptions, export_release_set

    options = ExportOptions(
        fmt=fmt,
        cluster_name=cluster_name,
        namespace=namespace,
        infrastructure_kind=infrastructure_kind,
        infrastructure_api_version=infrastructure_api_version,
        repository=repository,
        infrastructure=infrastructure,
        image_base_url=image_base_url,
        image_url_from_registry=image_url_from_registry,
        image_url_oci=image_url_oci,
        control_plane_pool=control_plane_pool,
        host_arch_label=host_arch_label,
        images_dir=images_dir,
        api_version=api_version,
        metal3_api_version=metal3_api_version,
        control_plane_endpoint=control_plane_endpoint,
        bootstrap_data=bootstrap_data[0] if bootstrap_data else None,
    )

    def warn(line: str) -> None:
        click.echo(line, err=True)

    # where the outputs go is checked before the export reads anything
    outputs = [("--out", out)] if out is not None else []
    outputs += [("--bootstrap-data", Path(bootstrap_data[1]))] if bootstrap_data else []
    for flag, path in outputs:
        _check_output(flag, path)
    text = export_release_set(source, options, registry, warn)
    if bootstrap_data:
        from nvkr.delivery.export.release import bootstrap_user_data

        pool, target = bootstrap_data
        data = bootstrap_user_data(text, pool, control_plane_endpoint, warn)
        _write("--bootstrap-data", Path(target), data)
    if out is None:
        click.echo(text, nl=False)
        return
    _write("--out", out, text)


def _check_output(flag: str, path: Path) -> None:
    """``path``'s directory must exist: the error names the flag and the path given."""
    if not path.parent.is_dir():
        raise UsageError(
            f"{flag} {path}: its directory {path.parent} does not exist",
            hint="create the directory first, or name a file in an existing one",
        )


def _write(flag: str, out: Path, text: str) -> None:
    """``text`` to ``out`` whole (a temporary file beside it, then a rename); an error names
    ``flag`` and ``out``, never the temporary file."""
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"{flag} {out}: cannot write: {e.strerror or e}") from None
