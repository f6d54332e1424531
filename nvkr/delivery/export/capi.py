"""A release set as Cluster API v1beta1 resources (``nvkr release-set export --format capi``).

:func:`export_capi` gives KubeadmControlPlane, one MachineDeployment and one
KubeadmConfigTemplate per node-pool release (and, with ``infrastructure="metal3"``, the
templates of :mod:`nvkr.delivery.export.metal3`); :func:`dump_yaml` writes them as multi-document
YAML. Both are pure functions of their inputs: same release set, same bytes out.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import yaml

from nvkr.delivery.export.document import export_json
from nvkr.delivery.export.metal3 import (
    ImageUrls,
    check_infrastructure,
    check_label_key,
    metal3_image,
    metal3_template,
)
from nvkr.errors import UsageError
from nvkr.yamlemit import Dumper

CAPI_CLUSTER: Final = "cluster.x-k8s.io/v1beta1"
CAPI_CONTROL_PLANE: Final = "controlplane.cluster.x-k8s.io/v1beta1"
CAPI_BOOTSTRAP: Final = "bootstrap.cluster.x-k8s.io/v1beta1"
#: Default infrastructure machine template (Metal3: bare metal booting the QCOW2 machine image).
DEFAULT_INFRASTRUCTURE_KIND: Final = "Metal3MachineTemplate"
DEFAULT_INFRASTRUCTURE_API_VERSION: Final = "infrastructure.cluster.x-k8s.io/v1beta1"

ANN_MACHINE_IMAGE: Final = "nvkr.dev/machine-image"
ANN_MACHINE_IMAGE_REF: Final = "nvkr.dev/machine-image-ref"
ANN_RELEASE_SET: Final = "nvkr.dev/release-set"
ANN_RELEASE_SET_NAME: Final = "nvkr.dev/release-set-name"
LABEL_GPU: Final = "nvkr.dev/gpu-generation"
LABEL_ARCH: Final = "kubernetes.io/arch"
LABEL_POOL: Final = "nvkr.dev/node-pool"
LABEL_CLUSTER: Final = "cluster.x-k8s.io/cluster-name"

_DNS_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_LABEL_MAX: Final = 63


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


def export_capi(
    metadata: Mapping[str, Any],
    index_digest: str,
    *,
    cluster_name: str,
    namespace: str,
    repository: str | None = None,
    infrastructure_kind: str = DEFAULT_INFRASTRUCTURE_KIND,
    infrastructure_api_version: str = DEFAULT_INFRASTRUCTURE_API_VERSION,
    control_plane_replicas: int = 1,
    replicas: int = 1,
    infrastructure: str | None = None,
    image_urls: ImageUrls | None = None,
    control_plane_pool: str | None = None,
    host_arch_label: str | None = None,
) -> list[dict[str, Any]]:
    """Cluster API v1beta1 resources for the release set (cluster-api book, "Cluster API types").

    One KubeadmControlPlane (``spec.version`` ``v<kubernetes patch>``) and, per node-pool
    release, a KubeadmConfigTemplate (``joinConfiguration.nodeRegistration.kubeletExtraArgs``
    ``node-labels`` = ``nvkr.dev/gpu-generation``, ``kubernetes.io/arch``, ``nvkr.dev/node-pool``)
    and a MachineDeployment pointing at it and at an infrastructure machine template named
    after the node pool (``infrastructure_kind``/``infrastructure_api_version``; without
    ``infrastructure`` the templates themselves are not written). Every resource is annotated
    ``nvkr.dev/release-set: <index_digest>``; node-pool resources also ``nvkr.dev/machine-image``
    (the machine image digest, or ``none`` when the pool has none) and, with ``repository``,
    ``nvkr.dev/machine-image-ref: REPO@digest``.

    ``infrastructure="metal3"`` (needs ``image_urls``) also writes a Metal3MachineTemplate per
    node-pool release (before its MachineDeployment, same name and annotations) booting the
    pool's QCOW2 machine image, and one for the control plane (first, named like the
    KubeadmControlPlane) booting the machine image of ``control_plane_pool`` (an exported pool
    name such as ``blackwell-amd64`` or a recipe pool name; default the first amd64 pool).
    Metal3 picks a BareMetalHost by its labels only (``hostSelector``), so with
    ``host_arch_label`` each template selects hosts labelled ``<host_arch_label>: <arch>``
    (``amd64``, ``arm64``: the arch of the machine image it boots); without it any free host
    matches.

    Returns:
        the resources, keys in a fixed order (apiVersion, kind, metadata, spec), names DNS-1123.
    Raises:
        UsageError: the set has no cluster release (no Kubernetes version), or a name that cannot
            become a DNS-1123 label; with ``infrastructure``: an unknown provider, no
            ``image_urls``, another infrastructure kind/apiVersion, a pool without a machine
            image or with a non-QCOW2 one, an unknown ``control_plane_pool``; ``image_urls`` or
            ``control_plane_pool`` or ``host_arch_label`` without ``infrastructure``; a
            ``host_arch_label`` that is not a Kubernetes label key.
        IntegrityError: the metadata names an artifact it does not hold, or a malformed digest.
    """
    urls = check_infrastructure(
        infrastructure,
        image_urls,
        control_plane_pool,
        infrastructure_kind,
        infrastructure_api_version,
    )
    if host_arch_label is not None:
        check_label_key(host_arch_label, "--host-arch-label")
        if urls is None:
            raise UsageError(
                "--host-arch-label selects the hosts of Metal3 templates",
                hint="add --infrastructure metal3",
            )

    def host_labels(pool: Mapping[str, Any]) -> dict[str, str] | None:
        arch = pool.get("arch")
        return {host_arch_label: str(arch)} if host_arch_label and arch else None

    doc = export_json(metadata, index_digest, repository=repository)
    cluster = doc["clusterRelease"]
    if cluster is None:
        raise UsageError(
            f"release set {doc['name']} has no clusterRelease, so no Kubernetes version",
            hint="add releaseSet.clusterRelease to the recipe, or use --format json",
        )
    cluster_label = dns_label(cluster_name)
    ns = dns_label(namespace)
    set_annotations = {ANN_RELEASE_SET: index_digest, ANN_RELEASE_SET_NAME: doc["name"]}

    def meta(name: str, annotations: Mapping[str, str]) -> dict[str, Any]:
        return {
            "name": name,
            "namespace": ns,
            "labels": {LABEL_CLUSTER: cluster_label},
            "annotations": {**set_annotations, **annotations},
        }

    def infra(name: str) -> dict[str, str]:
        return {"apiVersion": infrastructure_api_version, "kind": infrastructure_kind, "name": name}

    cp_name = dns_label(f"{cluster_label}-control-plane")
    resources: list[dict[str, Any]] = [
        {
            "apiVersion": CAPI_CONTROL_PLANE,
            "kind": "KubeadmControlPlane",
            "metadata": meta(cp_name, {}),
            "spec": {
                "replicas": control_plane_replicas,
                "version": f"v{cluster['kubernetesVersion']}",
                "machineTemplate": {"infrastructureRef": infra(cp_name)},
                "kubeadmConfigSpec": {},
            },
        }
    ]
    pools = doc["nodePoolReleases"]
    pool_labels = pool_names(pools)
    images: list[dict[str, str]] = []
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
        images = [
            metal3_image(metadata, p, label, urls)
            for p, label in zip(metadata["nodePoolReleases"], pool_labels, strict=True)
        ]
        cp_pool = _control_plane_pool(pools, pool_labels, control_plane_pool)
        resources.insert(
            0,
            metal3_template(
                meta(cp_name, _image_annotations(pools[cp_pool]["machineImage"], repository)),
                images[cp_pool],
                host_labels(pools[cp_pool]),
            ),
        )
    for i, (pool, pool_label) in enumerate(zip(pools, pool_labels, strict=True)):
        name = dns_label(f"{cluster_label}-{pool_label}")
        annotations = _image_annotations(pool["machineImage"], repository)
        version = pool["kubernetes"] or cluster["kubernetesVersion"]
        node_labels = {
            LABEL_GPU: pool["gpuGeneration"],
            LABEL_ARCH: pool["arch"],
            LABEL_POOL: pool_label,
        }
        resources.append(
            {
                "apiVersion": CAPI_BOOTSTRAP,
                "kind": "KubeadmConfigTemplate",
                "metadata": meta(name, annotations),
                "spec": {
                    "template": {
                        "spec": {
                            "joinConfiguration": {
                                "nodeRegistration": {
                                    "kubeletExtraArgs": {
                                        "node-labels": ",".join(
                                            f"{k}={v}" for k, v in node_labels.items() if v
                                        )
                                    }
                                }
                            }
                        }
                    }
                },
            }
        )
        if urls is not None:
            resources.append(metal3_template(meta(name, annotations), images[i], host_labels(pool)))
        selector = {LABEL_CLUSTER: cluster_label, LABEL_POOL: pool_label}
        resources.append(
            {
                "apiVersion": CAPI_CLUSTER,
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
                                "configRef": {
                                    "apiVersion": CAPI_BOOTSTRAP,
                                    "kind": "KubeadmConfigTemplate",
                                    "name": name,
                                }
                            },
                            "infrastructureRef": infra(name),
                        },
                    },
                },
            }
        )
    return resources


def _image_annotations(image: str | None, repository: str | None) -> dict[str, str]:
    annotations = {ANN_MACHINE_IMAGE: image or "none"}
    if image and repository:
        annotations[ANN_MACHINE_IMAGE_REF] = f"{repository}@{image}"
    return annotations


class _NoAliasDumper(Dumper):
    # kubectl and kustomize read anchors, but people diff and patch this output: no &id001.
    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(resources: Sequence[Mapping[str, Any]]) -> str:
    """``resources`` as multi-document YAML (``---`` before each), keys in their given order."""
    return yaml.dump_all(
        [dict(r) for r in resources],
        Dumper=_NoAliasDumper,
        sort_keys=False,
        default_flow_style=False,
        explicit_start=True,
        width=1000,
    )


def dns_label(text: str) -> str:
    """``text`` as a DNS-1123 label (RFC 1123): lower-case ``[a-z0-9-]``, at most 63 characters.

    Any other character becomes ``-``; a name cut to fit ends in 8 hex digits of its sha256 so
    two long names stay distinct.

    Raises:
        UsageError: nothing of ``text`` is left.
    """
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    label = re.sub(r"-{2,}", "-", label)
    if len(label) > _DNS_LABEL_MAX:
        suffix = hashlib.sha256(text.encode()).hexdigest()[:8]
        label = label[: _DNS_LABEL_MAX - 9].rstrip("-") + "-" + suffix
    if not _DNS_LABEL.match(label):
        raise UsageError(
            f"{text!r} has no characters left for a Kubernetes name", hint="use [a-z0-9-]"
        )
    return label


def pool_names(pools: Sequence[Mapping[str, Any]]) -> list[str]:
    """A distinct DNS label per exported node-pool release (a shared name gets arch, then GPU)."""
    names = [dns_label(p["name"]) for p in pools]
    for extra in ("arch", "gpuGeneration"):
        dupes = {n for n in names if names.count(n) > 1}
        names = [
            dns_label(f"{n}-{p.get(extra) or ''}") if n in dupes else n
            for n, p in zip(names, pools, strict=True)
        ]
    if len(set(names)) != len(names):
        raise UsageError("node-pool releases do not have distinct names for Cluster API")
    return names
