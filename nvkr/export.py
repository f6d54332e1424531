"""Export a release set for management systems: a versioned JSON document, or Cluster API YAML.

Consumer end of the data flow (DESIGN.md): ``nvkr release-set export`` reads a release set's
metadata JSON (:func:`nvkr.releaseset.read_metadata`) and its index digest, and turns them into
what a management plane consumes by digest. :func:`export_json` gives the documented shape in
``schema/release-set-export.schema.json`` (``apiVersion: nvkr.dev/v1alpha1``, ``kind:
ReleaseSet``, ``schemaVersion`` :data:`EXPORT_SCHEMA_VERSION`); :func:`export_capi` gives Cluster
API v1beta1 resources (KubeadmControlPlane, one MachineDeployment and one KubeadmConfigTemplate per
node-pool release) and :func:`dump_yaml` writes them as multi-document YAML. Both are pure
functions of their inputs: same release set, same bytes out.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import yaml

from nvkr.canonical import canonical_json
from nvkr.errors import IntegrityError, UsageError

#: Version of the export JSON shape; bumped on any change a reader must know about.
EXPORT_SCHEMA_VERSION: Final = 1
EXPORT_API_VERSION: Final = "nvkr.dev/v1alpha1"

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


def _descriptor(art: Mapping[str, Any]) -> dict[str, Any]:
    """The descriptor a consumer pulls an artifact by: an image's index, else its manifest."""
    for key in ("index", "manifest"):
        if isinstance(art.get(key), dict):
            return dict(art[key])
    raise IntegrityError(f"release set metadata: artifact {art.get('name')!r} has no descriptor")


def _platforms(art: Mapping[str, Any]) -> list[dict[str, Any]]:
    if art.get("platform"):
        return [dict(art["platform"])]
    return [dict(p) for p in art.get("platforms") or []]


def _variant_key(variant: Mapping[str, Any] | None) -> str:
    return canonical_json(dict(variant or {})).decode()


def _find(
    metadata: Mapping[str, Any], name: str, variant: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The ``artifacts`` entry for (name, variant), or the only entry of that name."""
    named = [a for a in metadata["artifacts"] if a["name"] == name]
    want = _variant_key(variant)
    for art in named:
        if _variant_key(art.get("variant")) == want:
            return dict(art)
    if len({_descriptor(a)["digest"] for a in named}) == 1:
        return dict(named[0])
    raise IntegrityError(
        f"release set {metadata['name']}: no artifact {name!r} for variant {want}",
        hint="the metadata names an artifact the release set does not hold; rebuild it",
    )


def _kubernetes_patch(metadata: Mapping[str, Any], line: str | None) -> str | None:
    """The exact Kubernetes version (``1.36.3``) of a release line, from the cluster release."""
    cluster = metadata.get("clusterRelease") or {}
    version = cluster.get("kubernetes")
    if not isinstance(version, str):
        return line
    if line is None or version == line or version.startswith(f"{line}."):
        return version
    return line


def _machine_images(metadata: Mapping[str, Any], repository: str | None) -> list[dict[str, Any]]:
    names = set(metadata.get("machineImages") or [])
    names.update(
        p["machineImage"] for p in metadata.get("nodePoolReleases") or [] if p.get("machineImage")
    )
    seen: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for art in metadata["artifacts"]:
        if art["name"] not in names:
            continue
        desc = _descriptor(art)
        variant = art.get("variant") or {}
        platforms = _platforms(art)
        arch = platforms[0]["architecture"] if len(platforms) == 1 else variant.get("arch")
        gpu = variant.get("gpu")
        key = (art["name"], desc["digest"], str(arch), str(gpu))
        if key in seen:
            continue
        primary = art.get("primary") or {}
        seen[key] = {
            "name": art["name"],
            "digest": desc["digest"],
            "size": int(primary.get("size", desc["size"])),
            "arch": arch,
            "gpuGeneration": gpu,
            "mediaType": primary.get("mediaType", desc["mediaType"]),
            "diskDigest": primary.get("digest"),
            "url": f"{repository}@{desc['digest']}" if repository else None,
        }
    return [seen[k] for k in sorted(seen)]


def _artifacts(metadata: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``artifacts`` deduplicated by digest, with every variant each one serves."""
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for art in metadata["artifacts"]:
        desc = _descriptor(art)
        key = (art["name"], desc["digest"])
        item = merged.get(key)
        if item is None:
            item = {
                "name": art["name"],
                "kind": art["kind"],
                "digest": desc["digest"],
                "mediaType": desc["mediaType"],
                "size": desc["size"],
                "artifactType": art.get("artifactType"),
                "platforms": _platforms(art),
                "provenance": (art.get("provenance") or {}).get("digest"),
                "sbom": (art.get("sbom") or {}).get("digest"),
                "variants": [],
            }
            merged[key] = item
        if art.get("variant") is not None and art["variant"] not in item["variants"]:
            item["variants"].append(dict(art["variant"]))
    return [merged[k] for k in sorted(merged)]


def export_json(
    metadata: Mapping[str, Any], index_digest: str, *, repository: str | None = None
) -> dict[str, Any]:
    """The release set as the documented export shape (``schema/release-set-export.schema.json``).

    Args:
        metadata: the metadata JSON (:mod:`nvkr.releaseset.metadata`, schemaVersion 1).
        index_digest: the release set index digest, ``sha256:<hex>``.
        repository: a registry base ``REGISTRY/REPO`` the set was published to; machine image
            ``url`` becomes ``REGISTRY/REPO@sha256:<hex>``, else ``null`` (on disk).
    Returns:
        ``{"apiVersion", "kind": "ReleaseSet", "schemaVersion": 1, "name", "digest", "created",
        "recipe", "variants", "machineImages", "clusterRelease", "nodePoolReleases",
        "artifacts"}``; lists sorted, so the same set gives the same document.
    Raises:
        IntegrityError: the metadata names an artifact it does not hold.
    """
    images = _machine_images(metadata, repository)
    cluster = metadata.get("clusterRelease")
    cluster_out: dict[str, Any] | None = None
    if cluster is not None:
        cluster_out = {
            "kubernetesVersion": cluster["kubernetes"],
            "charts": [
                {k: c[k] for k in ("name", "chart", "version", "digest")}
                for c in cluster.get("charts") or []
            ],
            "images": [
                {"name": i["name"], "digest": i["digest"], "platforms": list(i["platforms"])}
                for i in cluster.get("images") or []
            ],
        }
    pools = []
    for pool in metadata.get("nodePoolReleases") or []:
        variant = pool.get("variant") or {}
        image = None
        if pool.get("machineImage"):
            image = _descriptor(_find(metadata, pool["machineImage"], variant))["digest"]
        pools.append(
            {
                "name": pool["name"],
                "gpuGeneration": variant.get("gpu"),
                "arch": variant.get("arch"),
                "kubernetes": _kubernetes_patch(metadata, variant.get("kubernetes")),
                "machineImage": image,
                "artifacts": [
                    {
                        "name": name,
                        "kind": (art := _find(metadata, name, variant))["kind"],
                        "digest": _descriptor(art)["digest"],
                    }
                    for name in pool.get("artifacts") or []
                ],
            }
        )
    return {
        "apiVersion": EXPORT_API_VERSION,
        "kind": "ReleaseSet",
        "schemaVersion": EXPORT_SCHEMA_VERSION,
        "name": metadata["name"],
        "digest": index_digest,
        "created": metadata["created"],
        "recipe": dict(metadata["recipe"]),
        "variants": [dict(v) for v in metadata.get("variants") or []],
        "machineImages": images,
        "clusterRelease": cluster_out,
        "nodePoolReleases": pools,
        "artifacts": _artifacts(metadata),
    }


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


def _pool_names(pools: Sequence[Mapping[str, Any]]) -> list[str]:
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
) -> list[dict[str, Any]]:
    """Cluster API v1beta1 resources for the release set (cluster-api book, "Cluster API types").

    One KubeadmControlPlane (``spec.version`` ``v<kubernetes patch>``) and, per node-pool
    release, a KubeadmConfigTemplate (``joinConfiguration.nodeRegistration.kubeletExtraArgs``
    ``node-labels`` = ``nvkr.dev/gpu-generation``, ``kubernetes.io/arch``, ``nvkr.dev/node-pool``)
    and a MachineDeployment pointing at it and at an infrastructure machine template named
    after the node pool (``infrastructure_kind``/``infrastructure_api_version``; the templates
    themselves are provider-specific and not written). Every resource is annotated
    ``nvkr.dev/release-set: <index_digest>``; node-pool resources also ``nvkr.dev/machine-image``
    (the machine image digest, or ``none`` when the pool has none) and, with ``repository``,
    ``nvkr.dev/machine-image-ref: REPO@digest``.

    Returns:
        the resources, keys in a fixed order (apiVersion, kind, metadata, spec), names DNS-1123.
    Raises:
        UsageError: the set has no cluster release (no Kubernetes version), or a name that cannot
            become a DNS-1123 label.
        IntegrityError: the metadata names an artifact it does not hold.
    """
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
    for pool, pool_label in zip(pools, _pool_names(pools), strict=True):
        name = dns_label(f"{cluster_label}-{pool_label}")
        image = pool["machineImage"]
        annotations = {ANN_MACHINE_IMAGE: image or "none"}
        if image and repository:
            annotations[ANN_MACHINE_IMAGE_REF] = f"{repository}@{image}"
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


class _NoAliasDumper(yaml.SafeDumper):
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
