"""The kubeadm configuration of a Cluster API export: KubeadmControlPlane's ``kubeadmConfigSpec``
and each KubeadmConfigTemplate's, made to fit what an nvkr node image already holds.

The node-image builder (:mod:`nvkr.builders.node_image.staging`, assets in
``builders/node-image/``) stages containerd (CRI socket ``unix:///run/containerd/containerd.sock``),
a default kubelet configuration at ``/var/lib/kubelet/config.yaml`` (client CA
``/etc/kubernetes/pki/ca.crt``, ``staticPodPath: /etc/kubernetes/manifests``) and the drop-in
``kubelet.service.d/20-nvkr.conf``, which follows kubeadm's own: kubelet runs with
``--bootstrap-kubeconfig``/``--kubeconfig``, ``--config=/var/lib/kubelet/config.yaml``,
``$KUBELET_KUBEADM_ARGS`` (``/var/lib/kubelet/kubeadm-flags.env``) and ``$KUBELET_EXTRA_ARGS``
(the node agent's labels and the image's own), and starts only once one of those kubeconfigs
exists. So nothing here fights the image:

- ``kubeadm init`` and ``join`` write config.yaml, kubeadm-flags.env, the CA and a kubeconfig,
  and restart kubelet, which then starts with them; no ``files`` or commands are needed for
  that, and none are written.
- ``patches.directory`` of every init and join configuration is the image's
  ``/etc/nvkr/kubeadm-patches`` (:data:`KUBEADM_PATCHES`), whose
  ``kubeletconfiguration+strategic.yaml`` holds the image's kubelet settings (maxPods,
  serverTLSBootstrap, the containerd socket): kubeadm (1.25 and later) applies it to the
  KubeletConfiguration it writes, so they survive the cluster's.
- ``certificatesDir`` is ``/etc/kubernetes/pki``, where the kubelet configuration names its CA.
- ``criSocket`` is the image's containerd socket (kubeadm passes it to kubelet).
- ``kubeletExtraArgs`` carries the node labels of the node-pool release (GPU generation, arch,
  pool): kubeadm writes them into kubeadm-flags.env, and kubelet merges them with the image's
  ``--node-labels`` (repeated occurrences add up).

Cluster API v1beta1 writes ``kubeletExtraArgs`` as a map and ClusterConfiguration with its own
``networking``; v1beta2 (api/bootstrap/kubeadm/v1beta2/kubeadm_types.go) as a list of
``{name, value}``, and its ClusterConfiguration has no networking, kubernetesVersion or
clusterName (they come from the Cluster). See :mod:`.fieldrules` for the sources.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from nvkr.delivery.export.capi.names import ApiVersions, Endpoint

#: The image's containerd socket (containerd's default, builders/node-image/kubelet-config.yaml.j2).
CRI_SOCKET: Final = "unix:///run/containerd/containerd.sock"
#: The image's kubeadm patches directory (builders/node-image/kubeadm-kubelet-patch.yaml.j2,
#: nvkr.builders.node_image.staging.KUBEADM_PATCHES_DIR): ``patches.directory`` of the export's
#: init and join configurations.
KUBEADM_PATCHES: Final = "/etc/nvkr/kubeadm-patches"
#: Where kubeadm keeps certificates; the image's kubelet reads its client CA from here.
CERTIFICATES_DIR: Final = "/etc/kubernetes/pki"
#: Cluster networking written into the Cluster (clusterNetwork) and, for v1beta1, into
#: ClusterConfiguration.networking (kubeadm's own defaults for services and the domain).
POD_CIDR: Final = "10.244.0.0/16"
SERVICE_CIDR: Final = "10.96.0.0/12"
SERVICE_DOMAIN: Final = "cluster.local"


def kubelet_args(
    api: ApiVersions, args: Mapping[str, str]
) -> dict[str, str] | list[dict[str, str]]:
    """kubelet flags (without ``--``) as ``kubeletExtraArgs``: v1beta1 a map, v1beta2 a list of
    ``{name, value}`` sorted by name (kubeadm_types.go, type Arg)."""
    if api.v1beta2:
        return [{"name": k, "value": args[k]} for k in sorted(args)]
    return {k: args[k] for k in sorted(args)}


def kubelet_args_dict(value: Any) -> dict[str, str]:
    """``kubeletExtraArgs`` of either shape back as a map (for CABPK's rendering)."""
    if isinstance(value, list):
        return {str(a["name"]): str(a["value"]) for a in value}
    return {str(k): str(v) for k, v in (value or {}).items()}


def node_registration(api: ApiVersions, labels: Mapping[str, str]) -> dict[str, Any]:
    """``nodeRegistration`` for init and join: the image's CRI socket and the pool's labels."""
    node_labels = ",".join(f"{k}={v}" for k, v in labels.items() if v)
    return {
        "criSocket": CRI_SOCKET,
        "kubeletExtraArgs": kubelet_args(api, {"node-labels": node_labels}),
    }


def control_plane_spec(
    api: ApiVersions, labels: Mapping[str, str], endpoint: Endpoint | None
) -> dict[str, Any]:
    """KubeadmControlPlane ``spec.kubeadmConfigSpec``: clusterConfiguration, initConfiguration
    (the first control-plane node) and joinConfiguration (the others, which join with
    ``controlPlane: {}``)."""
    cluster: dict[str, Any] = {"certificatesDir": CERTIFICATES_DIR}
    if endpoint is not None:
        cluster["apiServer"] = {"certSANs": [endpoint.host]}
    if not api.v1beta2:
        cluster["networking"] = {
            "podSubnet": POD_CIDR,
            "serviceSubnet": SERVICE_CIDR,
            "dnsDomain": SERVICE_DOMAIN,
        }
    return {
        "clusterConfiguration": cluster,
        "initConfiguration": {
            "nodeRegistration": node_registration(api, labels),
            "patches": {"directory": KUBEADM_PATCHES},
        },
        "joinConfiguration": {
            "nodeRegistration": node_registration(api, labels),
            "controlPlane": {},
            "patches": {"directory": KUBEADM_PATCHES},
        },
    }


def worker_spec(api: ApiVersions, labels: Mapping[str, str]) -> dict[str, Any]:
    """KubeadmConfigTemplate ``spec.template.spec``: the joinConfiguration of a worker."""
    return {
        "joinConfiguration": {
            "nodeRegistration": node_registration(api, labels),
            "patches": {"directory": KUBEADM_PATCHES},
        }
    }
