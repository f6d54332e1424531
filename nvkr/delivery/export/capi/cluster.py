"""The cluster-wide resources of a Cluster API export: the Cluster, a placeholder
infrastructure cluster, the MachineHealthCheck and the add-ons.

Add-ons: the cluster release's charts, rendered (by Helm, :mod:`nvkr.delivery.export.addons`)
into one ConfigMap per chart, applied to the workload cluster by a ClusterResourceSet
(``addons.cluster.x-k8s.io``, part of Cluster API). nvkr chose a ClusterResourceSet over the
Helm add-on provider's HelmChartProxy because a HelmChartProxy names a chart by repository URL,
name and version (no digest field): the chart, and the image references in it, would be whatever
the repository serves at install time. The rendered manifests hold the images exactly as the
release set pinned them (``repo@sha256:...``), so the cluster runs what was signed. The price:
values are fixed at export time (re-export to change them) and CRS applies once (``ApplyOnce``):
upgrades are a new export.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from nvkr.delivery.export.capi.kubeadm import POD_CIDR, SERVICE_CIDR, SERVICE_DOMAIN
from nvkr.delivery.export.capi.names import (
    ANN_PLACEHOLDER,
    LABEL_ADDONS,
    LABEL_CLUSTER,
    LABEL_POOL,
    ApiVersions,
    Endpoint,
    dns_label,
)

Meta = Callable[[str, Mapping[str, str]], dict[str, Any]]

CONTROL_PLANE_GROUP: Final = "controlplane.cluster.x-k8s.io"
CLUSTER_GROUP: Final = "cluster.x-k8s.io"
ADDONS_GROUP: Final = "addons.cluster.x-k8s.io"
#: Node conditions that make a worker unhealthy, and for how long (seconds).
UNHEALTHY_AFTER: Final = 300
#: A bare-metal machine (firmware, Ironic's deploy, first boot) may take long to become a node.
NODE_STARTUP_TIMEOUT: Final = 1200
MAX_UNHEALTHY: Final = "40%"
#: The placeholder infrastructure cluster's annotation text.
PLACEHOLDER_TEXT: Final = (
    "nvkr wrote this without --infrastructure: fill in the provider's spec (at least "
    "controlPlaneEndpoint) before applying, or export with --infrastructure metal3"
)
PLACEHOLDER_TEMPLATE_TEXT: Final = (
    "nvkr wrote this without --infrastructure: fill in the provider's machine spec "
    "(template.spec: the image to boot) before applying, or export with --infrastructure metal3"
)


def cluster(
    api: ApiVersions,
    meta: dict[str, Any],
    name: str,
    control_plane: dict[str, str],
    infrastructure: dict[str, str],
    endpoint: Endpoint | None,
) -> dict[str, Any]:
    """The Cluster: clusterNetwork, controlPlaneRef, infrastructureRef, and the endpoint."""
    meta["labels"] = {**meta["labels"], LABEL_ADDONS: name}
    spec: dict[str, Any] = {
        "clusterNetwork": {
            "pods": {"cidrBlocks": [POD_CIDR]},
            "services": {"cidrBlocks": [SERVICE_CIDR]},
            "serviceDomain": SERVICE_DOMAIN,
        },
    }
    if endpoint is not None:
        spec["controlPlaneEndpoint"] = {"host": endpoint.host, "port": endpoint.port}
    spec["controlPlaneRef"] = control_plane
    spec["infrastructureRef"] = infrastructure
    return {
        "apiVersion": api.group(CLUSTER_GROUP),
        "kind": "Cluster",
        "metadata": meta,
        "spec": spec,
    }


def placeholder_cluster(
    meta: dict[str, Any], api_version: str, kind: str, endpoint: Endpoint | None
) -> dict[str, Any]:
    """An infrastructure cluster nvkr knows only the kind of (from ``--infrastructure-kind``:
    ``AWSMachineTemplate`` → ``AWSCluster``), annotated :data:`ANN_PLACEHOLDER` with what to
    fill in; its spec holds the endpoint when one is given."""
    meta["annotations"] = {**meta["annotations"], ANN_PLACEHOLDER: PLACEHOLDER_TEXT}
    spec: dict[str, Any] = {}
    if endpoint is not None:
        spec["controlPlaneEndpoint"] = {"host": endpoint.host, "port": endpoint.port}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": spec}


def placeholder_template(meta: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    """A machine template of the provider's ``kind`` (``--infrastructure-kind``) for an export
    without ``--infrastructure``, so that no reference of the KubeadmControlPlane or a
    MachineDeployment dangles: annotated :data:`ANN_PLACEHOLDER`, its spec for the user to
    fill in (the provider's machine spec under ``template.spec``)."""
    meta["annotations"] = {**meta["annotations"], ANN_PLACEHOLDER: PLACEHOLDER_TEMPLATE_TEXT}
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": meta,
        "spec": {"template": {"spec": {}}},
    }


def infrastructure_cluster_kind(machine_template_kind: str) -> str:
    """The provider's cluster kind for its machine template kind (CAPI's naming convention:
    ``FooMachineTemplate`` and ``FooCluster``)."""
    return machine_template_kind.removesuffix("MachineTemplate") + "Cluster"


def machine_health_check(
    api: ApiVersions, meta: dict[str, Any], cluster_name: str
) -> dict[str, Any]:
    """One MachineHealthCheck for every worker (machines with the node-pool label): remediate a
    node NotReady or Unknown for :data:`UNHEALTHY_AFTER` seconds, or a machine that is no node
    after :data:`NODE_STARTUP_TIMEOUT`, while at most :data:`MAX_UNHEALTHY` are unhealthy.
    v1beta2 moved these under ``checks`` and ``remediation.triggerIf`` (seconds as integers)."""
    selector = {
        "matchLabels": {LABEL_CLUSTER: cluster_name},
        "matchExpressions": [{"key": LABEL_POOL, "operator": "Exists"}],
    }
    statuses = ("Unknown", "False")
    spec: dict[str, Any] = {"clusterName": cluster_name, "selector": selector}
    if api.v1beta2:
        spec["checks"] = {
            "nodeStartupTimeoutSeconds": NODE_STARTUP_TIMEOUT,
            "unhealthyNodeConditions": [
                {"type": "Ready", "status": s, "timeoutSeconds": UNHEALTHY_AFTER} for s in statuses
            ],
        }
        spec["remediation"] = {"triggerIf": {"unhealthyLessThanOrEqualTo": MAX_UNHEALTHY}}
    else:
        spec["nodeStartupTimeout"] = f"{NODE_STARTUP_TIMEOUT}s"
        spec["unhealthyConditions"] = [
            {"type": "Ready", "status": s, "timeout": f"{UNHEALTHY_AFTER}s"} for s in statuses
        ]
        spec["maxUnhealthy"] = MAX_UNHEALTHY
    return {
        "apiVersion": api.group(CLUSTER_GROUP),
        "kind": "MachineHealthCheck",
        "metadata": meta,
        "spec": spec,
    }


def addons(
    api: ApiVersions,
    meta: Meta,
    cluster_name: str,
    manifests: Mapping[str, str],
) -> list[dict[str, Any]]:
    """A ConfigMap per chart (``data: {<chart>.yaml: rendered manifests}``, named
    ``<cluster>-addon-<chart>``) and one ClusterResourceSet applying them, in chart-name order,
    to the Cluster labelled ``nvkr.dev/addons: <cluster>``. Empty ``manifests``: nothing."""
    if not manifests:
        return []
    out: list[dict[str, Any]] = []
    names = []
    for chart in sorted(manifests):
        name = dns_label(f"{cluster_name}-addon-{chart}")
        names.append(name)
        out.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": meta(name, {}),
                "data": {f"{dns_label(chart)}.yaml": manifests[chart]},
            }
        )
    out.append(
        {
            "apiVersion": api.group(ADDONS_GROUP),
            "kind": "ClusterResourceSet",
            "metadata": meta(dns_label(f"{cluster_name}-addons"), {}),
            "spec": {
                "clusterSelector": {"matchLabels": {LABEL_ADDONS: cluster_name}},
                "resources": [{"kind": "ConfigMap", "name": n} for n in names],
                "strategy": "ApplyOnce",
            },
        }
    )
    return out
