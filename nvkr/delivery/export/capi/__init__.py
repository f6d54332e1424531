"""A release set as Cluster API resources (``nvkr release-set export --format capi``).

:func:`export_capi` gives, in apply order: the Cluster (clusterNetwork, controlPlaneEndpoint,
controlPlaneRef, infrastructureRef), the infrastructure cluster (a Metal3Cluster with
``infrastructure="metal3"``, else a placeholder of the provider's kind, see
:mod:`.cluster`), the KubeadmControlPlane (kubeadm configuration of :mod:`.kubeadm`), per
node-pool release a KubeadmConfigTemplate and a MachineDeployment, one MachineHealthCheck, the
add-ons (ConfigMaps and a ClusterResourceSet: :mod:`.cluster` says why not HelmChartProxy) and,
with Metal3, the Metal3MachineTemplates and a Metal3DataTemplate. ``--api-version`` picks
Cluster API v1beta1 or v1beta2, CAPM3's version is chosen on its own (:class:`.names.ApiVersions`).
:mod:`.fieldrules` holds the published API types' rules every document is checked against.
:func:`dump_yaml` writes multi-document YAML. Both are pure functions of their inputs: same
release set, same bytes out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from nvkr.delivery.export.capi import cluster as cl
from nvkr.delivery.export.capi import kubeadm
from nvkr.delivery.export.capi.names import (
    ANN_MACHINE_IMAGE,
    ANN_RELEASE_SET,
    ANN_RELEASE_SET_NAME,
    LABEL_ARCH,
    LABEL_CLUSTER,
    LABEL_GPU,
    LABEL_METAL3_UUID,
    LABEL_POOL,
    METAL3_UUID_VALUE,
    ApiVersions,
    Endpoint,
    check_dns_label,
    dns_label,
    dump_yaml,
    image_annotations,
    pool_names,
)
from nvkr.delivery.export.document import export_json
from nvkr.delivery.export.metal3 import (
    ImageUrls,
    check_infrastructure,
    check_label_key,
    metal3_cluster,
    metal3_data_template,
    metal3_image,
    metal3_template,
)
from nvkr.errors import UsageError

__all__ = [
    "ANN_MACHINE_IMAGE",
    "DEFAULT_INFRASTRUCTURE_API_VERSION",
    "DEFAULT_INFRASTRUCTURE_KIND",
    "ApiVersions",
    "Endpoint",
    "dns_label",
    "dump_yaml",
    "export_capi",
    "pool_names",
]

#: Default infrastructure machine template (Metal3: bare metal booting the QCOW2 machine image).
DEFAULT_INFRASTRUCTURE_KIND: Final = "Metal3MachineTemplate"
#: None: the apiVersion ``--metal3-api-version`` gives (``infrastructure.cluster.x-k8s.io/v1beta2``
#: by default).
DEFAULT_INFRASTRUCTURE_API_VERSION: Final[str | None] = None


def _control_plane_pool(
    pools: Sequence[Mapping[str, Any]], labels: Sequence[str], wanted: str | None
) -> int:
    """Index of the node-pool release whose machine image the control plane boots: ``wanted``
    (an exported pool name such as ``blackwell-amd64``, or a recipe pool name, amd64 first when
    it names several), else the first amd64 pool, else the first pool."""
    if not pools:
        raise UsageError(
            "the release set has no node-pool releases, so no machine image for the control plane"
        )
    if wanted is None:
        return next((i for i, p in enumerate(pools) if p["arch"] == "amd64"), 0)
    if wanted in labels:
        return labels.index(wanted)
    named = [i for i, p in enumerate(pools) if p["name"] == wanted]
    amd64 = [i for i in named if pools[i]["arch"] == "amd64"]
    if len(named) == 1 or len(amd64) == 1:
        return (amd64 or named)[0]
    if named:
        raise UsageError(
            f"control-plane pool {wanted!r} names {len(named)} node-pool releases",
            hint="give one of " + ", ".join(labels[i] for i in named),
        )
    raise UsageError(
        f"control-plane pool {wanted!r} is not a node-pool release of this release set",
        hint="give one of " + ", ".join(labels),
    )


def _check_host_arch_label(label: str | None, urls: ImageUrls | None) -> None:
    if label is not None:
        check_label_key(label, "--host-arch-label")
        if urls is None:
            raise UsageError(
                "--host-arch-label selects the hosts of Metal3 templates",
                hint="add --infrastructure metal3",
            )


def export_capi(
    metadata: Mapping[str, Any],
    index_digest: str,
    *,
    cluster_name: str,
    namespace: str,
    repository: str | None = None,
    infrastructure_kind: str = DEFAULT_INFRASTRUCTURE_KIND,
    infrastructure_api_version: str | None = DEFAULT_INFRASTRUCTURE_API_VERSION,
    control_plane_replicas: int = 1,
    replicas: int = 1,
    infrastructure: str | None = None,
    image_urls: ImageUrls | None = None,
    control_plane_pool: str | None = None,
    host_arch_label: str | None = None,
    api: ApiVersions | None = None,
    control_plane_endpoint: Endpoint | None = None,
    addons: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Cluster API resources for the release set (cluster-api book, "Cluster API types").

    The Cluster and its infrastructure cluster; one KubeadmControlPlane (``spec.version``
    ``v<kubernetes patch>``) and, per node-pool release, a KubeadmConfigTemplate (node labels
    ``nvkr.dev/gpu-generation``, ``kubernetes.io/arch``, ``nvkr.dev/node-pool`` in
    ``joinConfiguration.nodeRegistration.kubeletExtraArgs``) and a MachineDeployment pointing
    at it and at an infrastructure machine template named after the node pool
    (``infrastructure_kind``/``infrastructure_api_version``); a MachineHealthCheck for the
    workers; ``addons`` (``{chart name: rendered manifests}``) as ConfigMaps and a
    ClusterResourceSet. Every resource is annotated ``nvkr.dev/release-set: <index_digest>``;
    node-pool resources also ``nvkr.dev/machine-image`` (the machine image digest, or ``none``)
    and, with ``repository``, ``nvkr.dev/machine-image-ref: REPO@digest``.

    The control plane's node labels are its image's arch only (no pool or GPU label a
    workload could select it by). ``cluster_name`` and ``namespace`` must be DNS-1123 labels (they
    are not rewritten).
    ``infrastructure_api_version`` None: ``infrastructure.cluster.x-k8s.io/<api.metal3>``.

    Without ``infrastructure`` the infrastructure cluster is a placeholder of kind
    ``<infrastructure_kind minus MachineTemplate>Cluster`` and the machine templates the
    KubeadmControlPlane and MachineDeployments name are placeholders of ``infrastructure_kind``,
    all annotated ``nvkr.dev/placeholder`` (the user fills in their specs): no reference
    dangles. With Metal3 every node (control plane and pools) also gets the label
    ``metal3.io/uuid={{ ds.meta_data.uuid }}``, which cloud-init renders from Ironic's
    meta-data and by which CAPM3 sets a Machine's providerID.
    ``infrastructure="metal3"`` (needs ``image_urls`` and ``control_plane_endpoint``) writes a
    Metal3Cluster, a Metal3DataTemplate and a Metal3MachineTemplate per node-pool release
    (before its MachineDeployment, same name and annotations) booting the pool's QCOW2 machine
    image, and one for the control plane (named like the KubeadmControlPlane) booting the
    machine image of ``control_plane_pool`` (an exported pool name such as ``blackwell-amd64``
    or a recipe pool name; default the first amd64 pool). Metal3 picks a BareMetalHost by its
    labels only (``hostSelector``), so with ``host_arch_label`` each template selects hosts
    labelled ``<host_arch_label>: <arch>``; without it any free host matches.

    Returns:
        the resources, keys in a fixed order (apiVersion, kind, metadata, spec), names DNS-1123.
    Raises:
        UsageError: the set has no cluster release (no Kubernetes version), a ``cluster_name``
            or ``namespace`` that is no DNS-1123 label, or a name that cannot become one; with
            ``infrastructure``: an unknown provider, no
            ``image_urls`` or endpoint, another infrastructure kind/apiVersion, a pool without a
            machine image or with a non-QCOW2 one, an unknown ``control_plane_pool``;
            ``image_urls`` or ``control_plane_pool`` or ``host_arch_label`` without
            ``infrastructure``; a ``host_arch_label`` that is not a Kubernetes label key.
        IntegrityError: the metadata names an artifact it does not hold, or a malformed digest.
    """
    api = api or ApiVersions()
    cluster_label = check_dns_label(cluster_name, "--cluster-name")
    ns = check_dns_label(namespace, "--namespace")
    urls = check_infrastructure(
        infrastructure,
        image_urls,
        control_plane_pool,
        infrastructure_kind,
        infrastructure_api_version,
        api.infrastructure,
    )
    _check_host_arch_label(host_arch_label, urls)
    if infrastructure_api_version is None:
        infrastructure_api_version = api.infrastructure
    # CAPM3's contract: the Node carries the host's uuid (Metal3 only; another provider's
    # export gets no such label)
    extra_labels = {LABEL_METAL3_UUID: METAL3_UUID_VALUE} if urls is not None else {}

    def host_labels(pool: Mapping[str, Any]) -> dict[str, str] | None:
        arch = pool.get("arch")
        return {host_arch_label: str(arch)} if host_arch_label and arch else None

    doc = export_json(metadata, index_digest, repository=repository)
    release = doc["clusterRelease"]
    if release is None:
        raise UsageError(
            f"release set {doc['name']} has no clusterRelease, so no Kubernetes version",
            hint="add releaseSet.clusterRelease to the recipe, or use --format json",
        )
    set_annotations = {ANN_RELEASE_SET: index_digest, ANN_RELEASE_SET_NAME: doc["name"]}

    def meta(name: str, annotations: Mapping[str, str]) -> dict[str, Any]:
        return {
            "name": name,
            "namespace": ns,
            "labels": {LABEL_CLUSTER: cluster_label},
            "annotations": {**set_annotations, **annotations},
        }

    def infra(name: str) -> dict[str, str]:
        return api.ref(infrastructure_api_version, infrastructure_kind, name)

    cp_name = dns_label(f"{cluster_label}-control-plane")
    infra_cluster_kind = cl.infrastructure_cluster_kind(infrastructure_kind)
    pools = doc["nodePoolReleases"]
    pool_labels = pool_names(pools)
    resources: list[dict[str, Any]] = [
        cl.cluster(
            api,
            meta(cluster_label, {}),
            cluster_label,
            api.ref(api.group(cl.CONTROL_PLANE_GROUP), "KubeadmControlPlane", cp_name),
            api.ref(infrastructure_api_version, infra_cluster_kind, cluster_label),
            control_plane_endpoint,
        )
    ]
    if urls is not None and control_plane_endpoint is not None:
        resources.append(
            metal3_cluster(
                meta(cluster_label, {}),
                infrastructure_api_version,
                control_plane_endpoint.host,
                control_plane_endpoint.port,
            )
        )
    else:
        resources.append(
            cl.placeholder_cluster(
                meta(cluster_label, {}),
                infrastructure_api_version,
                infra_cluster_kind,
                control_plane_endpoint,
            )
        )
    images: list[dict[str, str]] = []
    data_template: str | None = None
    cp_pool = _control_plane_pool(pools, pool_labels, control_plane_pool) if pools else 0
    if urls is not None:
        missing = [
            label for p, label in zip(pools, pool_labels, strict=True) if not p["machineImage"]
        ]
        if missing:
            raise UsageError(
                f"Metal3 boots each node pool from its machine image, and node-pool release(s) "
                f"{', '.join(missing)} of {doc['name']} have none",
                hint="set machineImage on every releaseSet.nodePoolReleases entry, or export "
                "without --infrastructure",
            )
        if control_plane_endpoint is None:
            raise UsageError(
                "--infrastructure metal3 needs the control plane's address: bare metal has no "
                "load balancer to hand one out (CAPM3 refuses a Metal3Cluster without one)",
                hint="give --control-plane-endpoint HOST:PORT, a VIP in front of the control "
                "plane (kube-vip, keepalived)",
            )
        images = [
            metal3_image(metadata, p, label, urls, v1beta2=api.metal3_v1beta2)
            for p, label in zip(metadata["nodePoolReleases"], pool_labels, strict=True)
        ]
        data_template = dns_label(f"{cluster_label}-metadata")
        resources.append(
            metal3_data_template(meta(data_template, {}), infrastructure_api_version, cluster_label)
        )
        resources.append(
            metal3_template(
                meta(cp_name, image_annotations(pools[cp_pool]["machineImage"], repository)),
                images[cp_pool],
                host_labels(pools[cp_pool]),
                api_version=infrastructure_api_version,
                data_template=data_template,
            )
        )
    # the control plane is no worker pool: its nodes get the arch of the image they boot, no
    # pool or GPU label a workload's nodeSelector could match
    cp_labels = {LABEL_ARCH: pools[cp_pool]["arch"]} if pools else {}
    cp_labels.update(extra_labels)
    if urls is None:
        resources.append(
            cl.placeholder_template(
                meta(cp_name, {}), infrastructure_api_version, infrastructure_kind
            )
        )
    machine_template: dict[str, Any] = {"infrastructureRef": infra(cp_name)}
    resources.append(
        {
            "apiVersion": api.group(cl.CONTROL_PLANE_GROUP),
            "kind": "KubeadmControlPlane",
            "metadata": meta(cp_name, {}),
            "spec": {
                "replicas": control_plane_replicas,
                "version": f"v{release['kubernetesVersion']}",
                # v1beta2 moved infrastructureRef under machineTemplate.spec
                "machineTemplate": {"spec": machine_template} if api.v1beta2 else machine_template,
                "kubeadmConfigSpec": kubeadm.control_plane_spec(
                    api, cp_labels, control_plane_endpoint
                ),
            },
        }
    )
    for i, (pool, pool_label) in enumerate(zip(pools, pool_labels, strict=True)):
        name = dns_label(f"{cluster_label}-{pool_label}")
        annotations = image_annotations(pool["machineImage"], repository)
        version = pool["kubernetes"] or release["kubernetesVersion"]
        resources.append(
            {
                "apiVersion": api.group(BOOTSTRAP_GROUP),
                "kind": "KubeadmConfigTemplate",
                "metadata": meta(name, annotations),
                "spec": {
                    "template": {
                        "spec": kubeadm.worker_spec(
                            api, {**_node_labels(pool, pool_label), **extra_labels}
                        )
                    }
                },
            }
        )
        if urls is None:
            resources.append(
                cl.placeholder_template(
                    meta(name, annotations), infrastructure_api_version, infrastructure_kind
                )
            )
        else:
            resources.append(
                metal3_template(
                    meta(name, annotations),
                    images[i],
                    host_labels(pool),
                    api_version=infrastructure_api_version,
                    data_template=data_template,
                )
            )
        selector = {LABEL_CLUSTER: cluster_label, LABEL_POOL: pool_label}
        resources.append(
            {
                "apiVersion": api.group(cl.CLUSTER_GROUP),
                "kind": "MachineDeployment",
                "metadata": meta(name, annotations),
                "spec": {
                    "clusterName": cluster_label,
                    "replicas": replicas,
                    "selector": {"matchLabels": selector},
                    "template": {
                        "metadata": {"labels": selector, "annotations": dict(annotations)},
                        "spec": {
                            "clusterName": cluster_label,
                            "version": f"v{version}",
                            "bootstrap": {
                                "configRef": api.ref(
                                    api.group(BOOTSTRAP_GROUP), "KubeadmConfigTemplate", name
                                )
                            },
                            "infrastructureRef": infra(name),
                        },
                    },
                },
            }
        )
    if pools:
        resources.append(
            cl.machine_health_check(
                api, meta(dns_label(f"{cluster_label}-workers"), {}), cluster_label
            )
        )
    resources += cl.addons(api, meta, cluster_label, addons or {})
    return resources


BOOTSTRAP_GROUP: Final = "bootstrap.cluster.x-k8s.io"


def _node_labels(pool: Mapping[str, Any], pool_label: str) -> dict[str, str]:
    return {LABEL_GPU: pool["gpuGeneration"], LABEL_ARCH: pool["arch"], LABEL_POOL: pool_label}
