"""``nvkr release-set export``: a release set as JSON for management systems, or Cluster API YAML.

Reads the release set in a ``dist/<name>`` directory through its metadata only (as ``show``
does; a registry reference: its index and metadata only) and writes
:func:`nvkr.delivery.export.export_json` (``--format json``) or :func:`nvkr.delivery.export.export_capi`
(``--format capi``; ``--infrastructure metal3`` adds Metal3MachineTemplates booting the machine
images, their URLs from :class:`nvkr.delivery.export.ImageUrls`) to stdout or ``--out``. ``capi`` also
reads the SBOM of each node-pool machine image and warns when it shows no kubeadm or kubelet:
the Kubeadm* resources could not bootstrap such nodes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from nvkr.cli import App
from nvkr.cli.common import RegistryAccess, registry_options
from nvkr.errors import UsageError

if TYPE_CHECKING:
    from nvkr.delivery.export import ImageUrls


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
    infrastructure_api_version: str,
    repository: str | None,
    infrastructure: str | None,
    image_base_url: str | None,
    image_url_from_registry: bool,
    control_plane_pool: str | None,
    host_arch_label: str | None,
    registry: RegistryAccess,
    out: Path | None,
) -> None:
    """Export the release set in PATH (a dist/<name> directory) or at REF (a registry reference)
    for a management system."""
    from nvkr.cli.release_set import load_release_set
    from nvkr.delivery import export

    if repository is not None:
        from nvkr.oci.reference import Reference

        repo_ref = Reference.parse(repository)
        if repo_ref.tag or repo_ref.digest:
            raise UsageError(
                f"--repository {repository!r} names a tag or digest",
                hint="give REGISTRY/REPO: the machine images in it are addressed by digest",
            )
    if fmt == "json" and host_arch_label is not None:
        raise UsageError(
            "--host-arch-label selects the hosts of Metal3 templates",
            hint="use it with --format capi --infrastructure metal3",
        )
    if fmt == "json" and infrastructure is not None:
        raise UsageError(
            "--infrastructure writes Cluster API templates", hint="use it with --format capi"
        )
    urls = _image_urls(
        source, repository, image_base_url, image_url_from_registry, registry.insecure
    )
    meta, top = load_release_set(source, registry=registry)
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
            infrastructure=infrastructure,
            image_urls=urls,
            control_plane_pool=control_plane_pool,
            host_arch_label=host_arch_label,
        )
        pools = export.export_json(meta, digest)["nodePoolReleases"]
        arches = {p["arch"] for p in pools} - {None}
        if infrastructure is not None and host_arch_label is None and len(arches) > 1:
            click.echo(
                f"warning: the machine images are for {', '.join(sorted(arches))} and the "
                f"{export.METAL3_MACHINE_TEMPLATE}s select any host; label the BareMetalHosts "
                "by arch and pass --host-arch-label KEY",
                err=True,
            )
        gaps: dict[str, list[str]] = {}
        for label, tools in _kubeadm_gaps(source, meta, registry):
            gaps.setdefault(" or ".join(tools), []).append(label)
        for lacking, labels in gaps.items():
            click.echo(
                f"warning: the SBOMs show no {lacking} in machine image(s) {', '.join(labels)}: "
                "the KubeadmControlPlane and KubeadmConfigTemplates cannot bootstrap nodes "
                "from them; build from a recipe that installs them (recipes/catalog/)",
                err=True,
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


def _image_urls(
    source: str,
    repository: str | None,
    base_url: str | None,
    from_registry: bool,
    insecure: bool,
) -> ImageUrls | None:
    """The image URL option given, as :class:`nvkr.delivery.export.ImageUrls` (None when neither is).

    Raises:
        UsageError: both are given, or ``--image-url-from-registry`` has no registry (SOURCE is
            a directory and there is no ``--repository``), or a malformed URL or reference.
    """
    from nvkr.delivery.export import ImageUrls
    from nvkr.oci.reference import Reference

    if base_url is not None and from_registry:
        raise UsageError(
            "--image-base-url and --image-url-from-registry both give the image URLs",
            hint="give one of them",
        )
    if base_url is not None:
        return ImageUrls.from_base_url(base_url)
    if not from_registry:
        return None
    if Path(source).is_dir():
        if repository is None:
            raise UsageError(
                f"--image-url-from-registry: {source} is a directory, so no registry to point at",
                hint="export from the registry reference (REGISTRY/REPO:TAG), or name where the "
                "set is published with --repository REGISTRY/REPO",
            )
        ref = Reference.parse(repository)
    else:
        ref = Reference.parse(source)
    return ImageUrls.from_registry(ref.registry, ref.repository, insecure=insecure)


def _kubeadm_gaps(
    source: str, meta: dict[str, Any], registry: RegistryAccess
) -> list[tuple[str, list[str]]]:
    """``(label, missing)`` for each node-pool machine image whose SBOM lacks kubeadm or
    kubelet (:func:`nvkr.delivery.export.missing_for_kubeadm`): read from the layout, or from the
    registry (one manifest and one SBOM blob each)."""
    import io

    from nvkr.delivery import export
    from nvkr.oci.layout import LayoutReader

    sboms = export.machine_image_sboms(meta)
    if not sboms:
        return []

    Read = Callable[[Mapping[str, Any]], bytes]

    def spdx_docs(read_manifest: Read, read_blob: Read) -> list[tuple[str, list[str]]]:
        gaps = []
        for label, desc in sboms.values():
            manifest = json.loads(read_manifest(desc))
            layers = [la for la in manifest.get("layers") or [] if isinstance(la, dict)]
            if layers:
                missing = export.missing_for_kubeadm(json.loads(read_blob(layers[0])))
                if missing:
                    gaps.append((label, missing))
        return gaps

    if Path(source).is_dir():
        reader = LayoutReader(Path(source))
        return spdx_docs(reader.read_blob, reader.read_blob)
    from nvkr.oci.reference import Reference
    from nvkr.releaseset.remote import fetch_manifest

    ref = Reference.parse(source)
    with registry.client(ref.registry) as client:

        def manifest(desc: Mapping[str, Any]) -> bytes:
            return fetch_manifest(client, ref.repository, desc, f"SBOM manifest {desc['digest']}")

        def blob(desc: Mapping[str, Any]) -> bytes:
            buf = io.BytesIO()
            client.get_blob(ref.repository, str(desc["digest"]), buf, size=int(desc["size"]))
            return buf.getvalue()

        return spdx_docs(manifest, blob)
