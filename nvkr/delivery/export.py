"""Export a release set for management systems: a versioned JSON document, or Cluster API YAML.

Consumer end of the data flow (DESIGN.md): ``nvkr release-set export`` reads a release set's
metadata JSON (:func:`nvkr.releaseset.read_metadata`) and its index digest, and turns them into
what a management plane consumes by digest. :func:`export_json` gives the documented shape in
``schema/release-set-export.schema.json`` (``apiVersion: nvkr.dev/v1alpha1``, ``kind:
ReleaseSet``, ``schemaVersion`` :data:`EXPORT_SCHEMA_VERSION`); :func:`export_capi` gives Cluster
API v1beta1 resources (KubeadmControlPlane, one MachineDeployment and one KubeadmConfigTemplate per
node-pool release) and :func:`dump_yaml` writes them as multi-document YAML. Both are pure
functions of their inputs: same release set, same bytes out.

With ``infrastructure="metal3"`` :func:`export_capi` also writes the infrastructure templates
that boot the machine images on bare metal through Metal3 (CAPM3, https://book.metal3.io): one
``Metal3MachineTemplate`` (``infrastructure.cluster.x-k8s.io/v1beta1``) per node-pool release,
named like its MachineDeployment, and one for the control plane, named like the
KubeadmControlPlane; each ``spec.template.spec.image`` is ``{url, checksum: <sha256 hex of the
QCOW2 disk>, checksumType: sha256, format: qcow2}``. The URL comes from :class:`ImageUrls`: a
web server's base (``{base}/{hex}.qcow2``) or the registry's blob endpoint. Same release set and
options, same bytes: nothing is read from the clock, the environment or the network.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import yaml

from nvkr.canonical import canonical_json
from nvkr.errors import IntegrityError, UsageError
from nvkr.oci import mediatypes as mt
from nvkr.yamlemit import Dumper

#: Version of the export JSON shape; bumped on any change a reader must know about.
EXPORT_SCHEMA_VERSION: Final = 1
EXPORT_API_VERSION: Final = "nvkr.dev/v1alpha1"

CAPI_CLUSTER: Final = "cluster.x-k8s.io/v1beta1"
CAPI_CONTROL_PLANE: Final = "controlplane.cluster.x-k8s.io/v1beta1"
CAPI_BOOTSTRAP: Final = "bootstrap.cluster.x-k8s.io/v1beta1"
#: Default infrastructure machine template (Metal3: bare metal booting the QCOW2 machine image).
DEFAULT_INFRASTRUCTURE_KIND: Final = "Metal3MachineTemplate"
DEFAULT_INFRASTRUCTURE_API_VERSION: Final = "infrastructure.cluster.x-k8s.io/v1beta1"
#: Infrastructure providers whose machine templates :func:`export_capi` writes itself.
INFRASTRUCTURES: Final = ("metal3",)
METAL3_API_VERSION: Final = "infrastructure.cluster.x-k8s.io/v1beta1"
METAL3_MACHINE_TEMPLATE: Final = "Metal3MachineTemplate"
#: Machine image disk media type → Metal3 ``image.format`` (CAPM3 enum raw;qcow2;vdi;vmdk;live-iso).
_METAL3_FORMATS: Final = {mt.NVKR_QCOW2: "qcow2"}
_SHA256: Final = re.compile(r"^sha256:([0-9a-f]{64})$")

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


#: What a node needs for the Kubeadm* resources of ``--format capi`` to bootstrap it.
KUBEADM_NEEDS: Final = ("kubeadm", "kubelet")


def machine_image_sboms(metadata: Mapping[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """``{SBOM manifest digest: (label, descriptor)}`` of each machine image node pools boot
    (label ``node-image [hopper amd64]``), for :func:`missing_for_kubeadm`; images without an
    SBOM are left out."""
    used = {p["machineImage"] for p in metadata.get("nodePoolReleases") or []}
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for art in metadata.get("artifacts") or []:
        sbom = art.get("sbom")
        if art.get("name") in used and isinstance(sbom, dict) and "digest" in sbom:
            variant = art.get("variant") or {}
            axes = " ".join(str(variant[k]) for k in ("gpu", "arch") if k in variant)
            out.setdefault(str(sbom["digest"]), (f"{art['name']} [{axes}]", dict(sbom)))
    return out


def missing_for_kubeadm(spdx: Mapping[str, Any]) -> list[str]:
    """Which of :data:`KUBEADM_NEEDS` a machine image's SPDX 2.3 SBOM shows neither as a
    package (``packages[].name``, the Debian packages) nor as a staged file
    (``files[].fileName`` ending in ``/kubeadm``...). Empty: it can bootstrap."""
    names = {str(p.get("name")) for p in spdx.get("packages") or [] if isinstance(p, dict)}
    names |= {
        str(f.get("fileName", "")).rsplit("/", 1)[-1]
        for f in spdx.get("files") or []
        if isinstance(f, dict)
    }
    return [tool for tool in KUBEADM_NEEDS if tool not in names]


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


@dataclass(frozen=True)
class ImageUrls:
    """Where Ironic downloads a machine image's disk: ``prefix + <sha256 hex> + suffix``.

    Build it with :meth:`from_base_url` or :meth:`from_registry`; :meth:`url` maps a disk digest.
    """

    prefix: str
    suffix: str = ""

    @classmethod
    def from_base_url(cls, base: str) -> ImageUrls:
        """``{base}/{hex}.qcow2``: a web server holding the QCOW2 disks under their sha256.

        Raises:
            UsageError: ``base`` is not an absolute ``http://`` or ``https://`` URL, or has a
                query or fragment (the file name is appended to the path).
        """
        parts = urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise UsageError(
                f"image base URL {base!r} is not an absolute http:// or https:// URL",
                hint="e.g. --image-base-url https://images.example/nvkr (Ironic downloads "
                "{base}/<sha256 hex>.qcow2)",
            )
        if parts.query or parts.fragment:
            raise UsageError(
                f"image base URL {base!r} has a query or fragment; <hex>.qcow2 is appended to "
                "its path",
                hint="give the directory URL only",
            )
        return cls(prefix=base.rstrip("/") + "/", suffix=".qcow2")

    @classmethod
    def from_registry(cls, registry: str, repository: str, *, insecure: bool = False) -> ImageUrls:
        """The registry's blob endpoint, ``https://REGISTRY/v2/REPO/blobs/sha256:<hex>``
        (distribution-spec v1.1 "Pulling blobs": ``GET /v2/<name>/blobs/<digest>``).

        Plain ``http://`` for ``insecure`` and loopback registries, as
        :class:`nvkr.oci.registry.RegistryClient` talks to them. Ironic sends no credentials and
        does no token handshake: this only works on registries that serve blobs anonymously.
        """
        from nvkr.oci.registry import LOOPBACK

        host = urlsplit("//" + registry).hostname or registry
        scheme = "http" if insecure or host in LOOPBACK else "https"
        return cls(prefix=f"{scheme}://{registry}/v2/{repository}/blobs/sha256:")

    def url(self, disk_digest: str) -> str:
        """The URL of the disk with digest ``sha256:<hex>``.

        Raises:
            IntegrityError: ``disk_digest`` is not ``sha256:<64 hex>``.
        """
        return f"{self.prefix}{_sha256_hex(disk_digest, 'disk digest')}{self.suffix}"


def _sha256_hex(digest: Any, what: str) -> str:
    match = _SHA256.match(digest) if isinstance(digest, str) else None
    if match is None:
        raise IntegrityError(
            f"release set metadata: {what} {digest!r} is not sha256:<64 hex>",
            hint="the metadata is damaged or from another tool; rebuild the release set",
        )
    return match.group(1)


def _metal3_image(
    metadata: Mapping[str, Any], pool: Mapping[str, Any], label: str, urls: ImageUrls
) -> dict[str, str]:
    """Metal3 ``image`` of a node-pool release's machine image (CAPM3 ``Image``, see below).

    Raises:
        UsageError: the machine image's disk is not a format Metal3 boots here (QCOW2).
        IntegrityError: the metadata names an artifact it does not hold, or a bad digest.
    """
    art = _find(metadata, pool["machineImage"], pool.get("variant"))
    primary = art.get("primary") or {}
    media_type = primary.get("mediaType")
    fmt = _METAL3_FORMATS.get(str(media_type))
    if fmt is None:
        raise UsageError(
            f"node-pool release {label}: machine image {art['name']!r} has disk media type "
            f"{media_type!r}; Metal3 export expects a QCOW2 disk ({mt.NVKR_QCOW2})",
            hint="name a node-image artifact as the pool's machineImage in the recipe",
        )
    hexdigest = _sha256_hex(primary.get("digest"), f"machine image {art['name']!r} disk digest")
    # cluster-api-provider-metal3 api/v1beta1/common_types.go, type Image: url; checksum "a
    # md5sum value or a URL to retrieve one" (the value itself here: the webhook parses it as a
    # URL only when it starts with http:// or https://); checksumType enum md5;sha256;sha512
    # (baremetal-operator: "If missing, MD5 is used", so it is always set); format (json tag of
    # DiskFormat) enum raw;qcow2;vdi;vmdk;live-iso.
    return {
        "url": urls.url(primary["digest"]),
        "checksum": hexdigest,
        "checksumType": "sha256",
        "format": fmt,
    }


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
    urls = _check_infrastructure(
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
    pool_labels = _pool_names(pools)
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
            _metal3_image(metadata, p, label, urls)
            for p, label in zip(metadata["nodePoolReleases"], pool_labels, strict=True)
        ]
        cp_pool = _control_plane_pool(pools, pool_labels, control_plane_pool)
        resources.insert(
            0,
            _metal3_template(
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
            resources.append(
                _metal3_template(meta(name, annotations), images[i], host_labels(pool))
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


def _image_annotations(image: str | None, repository: str | None) -> dict[str, str]:
    annotations = {ANN_MACHINE_IMAGE: image or "none"}
    if image and repository:
        annotations[ANN_MACHINE_IMAGE_REF] = f"{repository}@{image}"
    return annotations


def _metal3_template(
    metadata: dict[str, Any], image: dict[str, str], match_labels: dict[str, str] | None
) -> dict[str, Any]:
    # cluster-api-provider-metal3 api/v1beta1: Metal3MachineTemplate spec.template.spec is a
    # Metal3MachineSpec, whose `image` is the Image type (see _metal3_image) and whose
    # `hostSelector` (HostSelector: matchLabels, matchExpressions) filters BareMetalHosts by label.
    spec: dict[str, Any] = {"image": dict(image)}
    if match_labels:
        spec["hostSelector"] = {"matchLabels": dict(match_labels)}
    return {
        "apiVersion": METAL3_API_VERSION,
        "kind": METAL3_MACHINE_TEMPLATE,
        "metadata": metadata,
        "spec": {"template": {"spec": spec}},
    }


#: Kubernetes label key: optional DNS-subdomain prefix and "/", then a name of at most 63
#: characters, alphanumeric at both ends, "-", "_", "." inside (k8s.io/apimachinery
#: validation.IsQualifiedName).
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def check_label_key(key: str, what: str) -> None:
    """Raise :class:`UsageError` unless ``key`` is a Kubernetes label key (``[prefix/]name``)."""
    prefix, slash, name = key.rpartition("/")
    if _LABEL_NAME.fullmatch(name) and (
        not slash or (len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix))
    ):
        return
    raise UsageError(
        f"{what} {key!r} is not a Kubernetes label key",
        hint="[DNS subdomain prefix/]name, the name at most 63 characters of [A-Za-z0-9-_.] "
        "starting and ending alphanumeric, e.g. kubernetes.io/arch",
    )


def _check_infrastructure(
    infrastructure: str | None,
    image_urls: ImageUrls | None,
    control_plane_pool: str | None,
    kind: str,
    api_version: str,
) -> ImageUrls | None:
    """``image_urls`` when Metal3 templates are written, else None; rejects what
    :func:`export_capi` says it rejects."""
    if infrastructure is None:
        if image_urls is not None or control_plane_pool is not None:
            raise UsageError(
                "image URLs and the control-plane pool are for the infrastructure templates, "
                "which only --infrastructure writes",
                hint="add --infrastructure metal3",
            )
        return None
    if infrastructure not in INFRASTRUCTURES:
        raise UsageError(
            f"infrastructure {infrastructure!r} is not one nvkr writes templates for",
            hint="one of: " + ", ".join(INFRASTRUCTURES),
        )
    if (kind, api_version) != (METAL3_MACHINE_TEMPLATE, METAL3_API_VERSION):
        raise UsageError(
            f"--infrastructure metal3 writes {METAL3_MACHINE_TEMPLATE} "
            f"({METAL3_API_VERSION}), not {kind} ({api_version})",
            hint="leave out --infrastructure-kind and --infrastructure-api-version",
        )
    if image_urls is None:
        raise UsageError(
            "--infrastructure metal3 needs a URL Ironic downloads each machine image from",
            hint="give --image-base-url URL (a web server with <sha256 hex>.qcow2 files) or "
            "--image-url-from-registry (the registry's blob URLs; anonymous registries only)",
        )
    return image_urls


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
