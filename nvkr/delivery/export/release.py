"""``nvkr release-set export`` end to end: read a release set (a ``dist/<name>`` directory or a
registry reference, its metadata only), check the options against each other and write
:func:`~nvkr.delivery.export.document.export_json` or
:func:`~nvkr.delivery.export.capi.export_capi` as text.

``capi`` also reads the SBOM of each node-pool machine image and warns when it shows no kubeadm
or kubelet, or no cloud-init (through which CABPK's bootstrap data reaches a node): the Kubeadm*
resources could not bootstrap such nodes. It renders the cluster release's charts with Helm
(:mod:`nvkr.delivery.export.addons`) for the add-ons. With ``--image-url-from-registry`` it asks
each blob URL the Metal3 templates name whether it can be read anonymously, as Ironic will
(:func:`~nvkr.delivery.export.images.check_anonymous_reads`). ``--images-dir`` writes the machine
images beside the text (:func:`~nvkr.delivery.export.images.write_images_dir`). The warnings and
the images dir's summary go to ``warn`` as they arise, before the text is returned.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from nvkr.delivery.export.addons import rendered_addons
from nvkr.delivery.export.capi import (
    ANN_MACHINE_IMAGE,
    DEFAULT_INFRASTRUCTURE_API_VERSION,
    DEFAULT_INFRASTRUCTURE_KIND,
    dump_yaml,
    export_capi,
)
from nvkr.delivery.export.capi.names import (
    DEFAULT_CAPI_API_VERSION,
    DEFAULT_METAL3_API_VERSION,
    ApiVersions,
    parse_endpoint,
)
from nvkr.delivery.export.document import (
    BOOTSTRAP_NEEDS,
    CLOUD_KERNEL_LACKS,
    KUBEADM_NEEDS,
    cloud_kernels,
    export_json,
    machine_image_sboms,
    missing_for_kubeadm,
)
from nvkr.delivery.export.images import ImagesReport
from nvkr.delivery.export.metal3 import METAL3_MACHINE_TEMPLATE, ImageUrls
from nvkr.delivery.show import RegistryClients, load_release_set
from nvkr.errors import UsageError


@dataclass(frozen=True)
class ExportOptions:
    """What ``nvkr release-set export`` was asked for (its options, same names)."""

    fmt: str  # "json" or "capi"
    cluster_name: str = "nvkr"
    namespace: str = "default"
    infrastructure_kind: str = DEFAULT_INFRASTRUCTURE_KIND
    infrastructure_api_version: str | None = DEFAULT_INFRASTRUCTURE_API_VERSION
    repository: str | None = None
    infrastructure: str | None = None
    image_base_url: str | None = None
    image_url_from_registry: bool = False
    image_url_oci: bool = False
    control_plane_pool: str | None = None
    host_arch_label: str | None = None
    api_version: str = DEFAULT_CAPI_API_VERSION
    metal3_api_version: str = DEFAULT_METAL3_API_VERSION
    control_plane_endpoint: str | None = None
    images_dir: Path | None = None
    bootstrap_data: str | None = None  # the POOL of --bootstrap-data POOL OUT


def export_release_set(
    source: str,
    options: ExportOptions,
    registry: RegistryClients,
    warn: Callable[[str], None],
) -> str:
    """The export of the release set at ``source`` (a directory or a registry reference) as
    ``options`` ask: the JSON document (indented, sorted keys, a final newline) or the Cluster
    API resources as multi-document YAML; warnings about the result go to ``warn``.

    Raises:
        UsageError: contradictory options, a malformed reference or URL;
        IntegrityError: a digest does not match; RegistryError: the registry fails.
    """
    _check_options(options)
    api = ApiVersions(options.api_version, options.metal3_api_version)
    endpoint = (
        parse_endpoint(options.control_plane_endpoint)
        if options.control_plane_endpoint is not None
        else None
    )
    urls = image_urls(source, options, registry.insecure)
    meta, top = load_release_set(source, registry=registry)
    digest = str(top["digest"])
    if options.images_dir is not None:
        warn(export_images(source, meta, options.images_dir, registry).summary())
    if options.fmt == "json":
        doc = export_json(meta, digest, repository=options.repository)
        return json.dumps(doc, indent=2, sort_keys=True) + "\n"
    addons = rendered_addons(source, meta, registry)
    resources = export_capi(
        meta,
        digest,
        cluster_name=options.cluster_name,
        namespace=options.namespace,
        repository=options.repository,
        infrastructure_kind=options.infrastructure_kind,
        infrastructure_api_version=options.infrastructure_api_version,
        infrastructure=options.infrastructure,
        image_urls=urls,
        control_plane_pool=options.control_plane_pool,
        host_arch_label=options.host_arch_label,
        api=api,
        control_plane_endpoint=endpoint,
        addons=addons,
    )
    _warn_capi(source, meta, digest, options, registry, warn)
    if not cni_addons(addons):
        warn(
            "warning: no chart of the cluster release installs a CNI (none mounts the "
            f"{CNI_CONFIG_DIR} its network configuration goes to): the nodes will not become "
            "Ready until one is installed; add a CNI chart to releaseSet.clusterRelease.charts "
            "(recipes/network/ovn-kubernetes.yaml) or install one yourself"
        )
    if options.image_url_from_registry:
        from nvkr.delivery.export.images import check_anonymous_reads, template_image_urls

        check_anonymous_reads(template_image_urls(resources), warn)
    return dump_yaml(resources)


def export_images(
    source: str, meta: dict[str, Any], out: Path, registry: RegistryClients
) -> ImagesReport:
    """``--images-dir OUT``: the machine images of the set at ``source`` written to ``out`` from
    the layout's blobs (a directory) or downloaded from the registry (a reference).

    Raises:
        UsageError, IntegrityError, RegistryError: as
            :func:`~nvkr.delivery.export.images.write_images_dir` says.
    """
    from nvkr.delivery.export.images import (
        disk_images,
        layout_fetch,
        registry_fetch,
        write_images_dir,
    )

    images = disk_images(meta)
    if Path(source).is_dir():
        return write_images_dir(out, images, layout_fetch(Path(source)))
    from nvkr.oci.reference import Reference

    ref = Reference.parse(source)
    with registry.client(ref.registry) as client:
        return write_images_dir(out, images, registry_fetch(client, ref.repository))


def _check_options(options: ExportOptions) -> None:
    """Raise :class:`UsageError` for a ``--repository`` with a tag or digest, or a
    ``capi``-only option (:func:`_capi_only`) with ``--format json``."""
    if options.repository is not None:
        from nvkr.oci.reference import Reference

        repo_ref = Reference.parse(options.repository)
        if repo_ref.tag or repo_ref.digest:
            raise UsageError(
                f"--repository {options.repository!r} names a tag or digest",
                hint="give REGISTRY/REPO: the machine images in it are addressed by digest",
            )
    if options.fmt == "json":
        # Every option only the Cluster API writer reads: with json it would be ignored (or,
        # for --bootstrap-data, read a JSON document as YAML resources), so refuse it.
        given = [flag for flag, set_ in _capi_only(options).items() if set_]
        if given:
            raise UsageError(
                f"{', '.join(given)}: only a Cluster API export reads "
                + ("these options" if len(given) > 1 else "this option"),
                hint=f"use {'them' if len(given) > 1 else 'it'} with --format capi",
            )


def _capi_only(options: ExportOptions) -> dict[str, bool]:
    """Each option only ``--format capi`` reads, and whether it was given (differs from its
    default)."""
    return {
        "--cluster-name": options.cluster_name != "nvkr",
        "--namespace": options.namespace != "default",
        "--infrastructure-kind": options.infrastructure_kind != DEFAULT_INFRASTRUCTURE_KIND,
        "--infrastructure-api-version": (
            options.infrastructure_api_version != DEFAULT_INFRASTRUCTURE_API_VERSION
        ),
        "--infrastructure": options.infrastructure is not None,
        "--image-base-url": options.image_base_url is not None,
        "--image-url-from-registry": options.image_url_from_registry,
        "--image-url-oci": options.image_url_oci,
        "--control-plane-pool": options.control_plane_pool is not None,
        "--host-arch-label": options.host_arch_label is not None,
        "--api-version": options.api_version != DEFAULT_CAPI_API_VERSION,
        "--metal3-api-version": options.metal3_api_version != DEFAULT_METAL3_API_VERSION,
        "--control-plane-endpoint": options.control_plane_endpoint is not None,
        "--bootstrap-data": options.bootstrap_data is not None,
    }


def _warn_capi(
    source: str,
    meta: dict[str, Any],
    digest: str,
    options: ExportOptions,
    registry: RegistryClients,
    warn: Callable[[str], None],
) -> None:
    """What a Cluster API export cannot do by itself: templates that select any host for images
    of several arches, machine images whose SBOMs show no kubeadm or kubelet, for Metal3 images
    booting Debian's cloud kernel (no bare-metal drivers), node-pool releases without a
    machine image."""
    pools = export_json(meta, digest)["nodePoolReleases"]
    arches = {p["arch"] for p in pools} - {None}
    if options.infrastructure is not None and options.host_arch_label is None and len(arches) > 1:
        warn(
            f"warning: the machine images are for {', '.join(sorted(arches))} and the "
            f"{METAL3_MACHINE_TEMPLATE}s select any host; label the BareMetalHosts "
            "by arch and pass --host-arch-label KEY"
        )
    sboms = image_sboms(source, meta, registry)
    if options.infrastructure == "metal3":
        for label, spdx in sboms:
            kernels = cloud_kernels(spdx)
            if kernels:
                warn(
                    f"warning: machine image {label} boots Debian's cloud kernel "
                    f"({', '.join(kernels)}), built without {CLOUD_KERNEL_LACKS}: a bare-metal "
                    "host may find neither its disk nor its network; build its pool with "
                    "Debian's full kernel (recipes/kernel/full.yaml: linux-image-amd64, "
                    "linux-image-arm64)"
                )
    gaps: dict[str, list[str]] = {}
    for label, tools in kubeadm_gaps(sboms):
        if "cloud-init" in tools:
            warn(
                f"warning: the SBOM of machine image {label} shows no cloud-init: nothing on "
                "its nodes runs the bootstrap data (a cloud-config) Cluster API hands them; "
                "build from a recipe that installs cloud-init"
            )
            tools = [t for t in tools if t != "cloud-init"]
            if not tools:
                continue
        gaps.setdefault(" or ".join(tools), []).append(label)
    for lacking, labels in gaps.items():
        warn(
            f"warning: the SBOMs show no {lacking} in machine image(s) {', '.join(labels)}: "
            "the KubeadmControlPlane and KubeadmConfigTemplates cannot bootstrap nodes "
            "from them; build from a recipe that installs them (recipes/catalog/)"
        )
    without = [p["name"] for p in meta.get("nodePoolReleases") or [] if not p.get("machineImage")]
    if without:
        warn(
            f"warning: {len(without)} node-pool release(s) have no machine image "
            f"({', '.join(without)}); annotated {ANN_MACHINE_IMAGE}: none"
        )


#: Where a CNI writes its network configuration for the container runtime; every CNI's node
#: DaemonSet mounts it from the host (calico, cilium, flannel, ovn-kubernetes...).
CNI_CONFIG_DIR: Final = "/etc/cni/net.d"


def cni_addons(manifests: Mapping[str, str]) -> list[str]:
    """The charts (of ``{chart: rendered manifests}``) that install a CNI: whose manifests mount
    the host's :data:`CNI_CONFIG_DIR` (a ``hostPath`` volume), sorted."""
    import yaml

    def mounts(node: Any) -> bool:
        if isinstance(node, Mapping):
            host = node.get("hostPath")
            if isinstance(host, Mapping) and str(host.get("path", "")).rstrip("/") == (
                CNI_CONFIG_DIR
            ):
                return True
            return any(mounts(v) for v in node.values())
        if isinstance(node, list):
            return any(mounts(v) for v in node)
        return False

    found = []
    for chart in sorted(manifests):
        try:
            docs = list(yaml.safe_load_all(manifests[chart]))
        except yaml.YAMLError:
            continue
        if any(mounts(d) for d in docs):
            found.append(chart)
    return found


def image_urls(source: str, options: ExportOptions, insecure: bool) -> ImageUrls | None:
    """The image URL option given, as :class:`~nvkr.delivery.export.metal3.ImageUrls` (None
    when neither ``--image-base-url`` nor ``--image-url-from-registry`` is).

    Raises:
        UsageError: both are given, or ``--image-url-from-registry`` has no registry (SOURCE is
            a directory and there is no ``--repository``), or a malformed URL or reference.
    """
    from nvkr.oci.reference import Reference

    base_url, repository = options.image_base_url, options.repository
    given = [
        flag
        for flag, set_ in (
            ("--image-base-url", base_url is not None),
            ("--image-url-from-registry", options.image_url_from_registry),
            ("--image-url-oci", options.image_url_oci),
        )
        if set_
    ]
    if len(given) > 1:
        raise UsageError(
            f"{' and '.join(given)} {'both' if len(given) == 2 else 'all'} give the image URLs",
            hint="give one of them",
        )
    if base_url is not None:
        return ImageUrls.from_base_url(base_url)
    if not given:
        return None
    flag = given[0]
    if Path(source).is_dir():
        if repository is None:
            raise UsageError(
                f"{flag}: {source} is a directory, so no registry to point at",
                hint="export from the registry reference (REGISTRY/REPO:TAG), or name where the "
                "set is published with --repository REGISTRY/REPO",
            )
        ref = Reference.parse(repository)
    else:
        ref = Reference.parse(source)
    if options.image_url_oci:
        return ImageUrls.from_oci(ref.registry, ref.repository)
    return ImageUrls.from_registry(ref.registry, ref.repository, insecure=insecure)


def kubeadm_gaps(sboms: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, list[str]]]:
    """``(label, missing)`` for each of the machine images' SBOMs (:func:`image_sboms`) that
    lacks kubeadm, kubelet or cloud-init
    (:func:`~nvkr.delivery.export.document.missing_for_kubeadm`)."""
    gaps = []
    for label, spdx in sboms:
        missing = missing_for_kubeadm(spdx, KUBEADM_NEEDS + BOOTSTRAP_NEEDS)
        if missing:
            gaps.append((label, missing))
    return gaps


def image_sboms(
    source: str, meta: dict[str, Any], registry: RegistryClients
) -> list[tuple[str, dict[str, Any]]]:
    """``(label, SPDX document)`` of each node-pool machine image that has an SBOM
    (:func:`~nvkr.delivery.export.document.machine_image_sboms`): read from the layout, or from
    the registry (one manifest and one SBOM blob each)."""
    from nvkr.oci.layout import LayoutReader

    sboms = machine_image_sboms(meta)
    if not sboms:
        return []

    Read = Callable[[Mapping[str, Any]], bytes]

    def spdx_docs(read_manifest: Read, read_blob: Read) -> list[tuple[str, dict[str, Any]]]:
        docs = []
        for label, desc in sboms.values():
            manifest = json.loads(read_manifest(desc))
            layers = [la for la in manifest.get("layers") or [] if isinstance(la, dict)]
            if layers:
                docs.append((label, json.loads(read_blob(layers[0]))))
        return docs

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


def bootstrap_user_data(
    capi_yaml: str, pool: str, endpoint: str | None, warn: Callable[[str], None]
) -> str:
    """CABPK's user-data (:func:`nvkr.delivery.export.cabpk.user_data`) for a node of ``pool``
    joining with the KubeadmConfigTemplate (or, for ``control-plane``, the KubeadmControlPlane:
    a further control-plane node's join, not the first node's ``kubeadm init``) of the export
    ``capi_yaml``; the discovery endpoint is ``endpoint`` when given, else the placeholder,
    which ``warn`` is told.

    Raises:
        UsageError: no such pool in the export.
    """
    import yaml

    from nvkr.delivery.export import cabpk

    docs = [d for d in yaml.safe_load_all(capi_yaml) if d is not None]
    template = cabpk.pick_template(docs, pool)
    kcp = next(d for d in docs if d["kind"] == "KubeadmControlPlane")
    version = str(kcp["spec"]["version"])
    if template["kind"] == "KubeadmConfigTemplate":
        md = next(
            (
                d
                for d in docs
                if d["kind"] == "MachineDeployment"
                and d["metadata"]["name"] == template["metadata"]["name"]
            ),
            None,
        )
        if md is not None:
            version = str(md["spec"]["template"]["spec"].get("version") or version)
    if endpoint is not None:
        return cabpk.user_data(template, version, str(parse_endpoint(endpoint)))
    warn(
        f"warning: the bootstrap data's apiServerEndpoint is {cabpk.PLACEHOLDER_ENDPOINT}, a "
        "placeholder: no node joins with it; give --control-plane-endpoint HOST:PORT"
    )
    return cabpk.user_data(template, version)
