"""The export JSON document of a release set (``nvkr release-set export --format json``).

Consumer end of the data flow (docs/architecture.md, "The data flow", step 9):
``nvkr release-set export`` reads a release set's metadata JSON
(:func:`nvkr.releaseset.read_metadata`) and its index digest, and turns them into what a
management plane consumes by digest. :func:`export_json` gives the documented shape in
``schema/release-set-export.schema.json`` (``apiVersion: nvkr.dev/v1alpha1``, ``kind:
ReleaseSet``, ``schemaVersion`` :data:`EXPORT_SCHEMA_VERSION`), a pure function of its inputs:
same release set, same bytes out. The machine images' SBOMs tell whether a node can run kubeadm
(:func:`missing_for_kubeadm`). The Cluster API resources built from the same reading are
:mod:`nvkr.delivery.export.capi`'s.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from nvkr.canonical import canonical_json
from nvkr.errors import IntegrityError

#: Version of the export JSON shape; bumped on any change a reader must know about.
EXPORT_SCHEMA_VERSION: Final = 1
EXPORT_API_VERSION: Final = "nvkr.dev/v1alpha1"


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


def find_artifact(
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
#: What runs the bootstrap data CABPK writes (a cloud-config) on a node: the Debian package.
BOOTSTRAP_NEEDS: Final = ("cloud-init",)


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


def missing_for_kubeadm(
    spdx: Mapping[str, Any], needs: tuple[str, ...] = KUBEADM_NEEDS
) -> list[str]:
    """Which of ``needs`` (default :data:`KUBEADM_NEEDS`; :data:`BOOTSTRAP_NEEDS` for
    cloud-init) a machine image's SPDX 2.3 SBOM shows neither as a package
    (``packages[].name``, the Debian packages) nor as a staged file (``files[].fileName``
    ending in ``/kubeadm``...). Empty: it can bootstrap."""
    names = {str(p.get("name")) for p in spdx.get("packages") or [] if isinstance(p, dict)}
    names |= {
        str(f.get("fileName", "")).rsplit("/", 1)[-1]
        for f in spdx.get("files") or []
        if isinstance(f, dict)
    }
    return [tool for tool in needs if tool not in names]


#: Debian's cloud kernel packages: the metapackage (``linux-image-cloud-amd64``) and the image
#: itself (``linux-image-6.1.0-57-cloud-amd64``).
_CLOUD_KERNEL = re.compile(r"^linux-image-(?:[0-9][^ ]*-)?cloud-(?:amd64|arm64)$")
#: What Debian's cloud kernel is built without (its ``/boot/config-*``: ``# CONFIG_E1000E is not
#: set``, and so on) that a bare-metal GPU server needs.
CLOUD_KERNEL_LACKS: Final = (
    "the drivers of bare-metal NICs and disks (e1000e, igb, ixgbe, i40e, ice; AHCI), the AMD "
    "IOMMU, MCE, EDAC, IPMI and DRM"
)


def cloud_kernels(spdx: Mapping[str, Any]) -> list[str]:
    """The Debian cloud-kernel packages a machine image's SPDX 2.3 SBOM lists (sorted); empty
    when it boots another kernel (Debian's full ``linux-image-amd64``, say)."""
    names = {str(p.get("name")) for p in spdx.get("packages") or [] if isinstance(p, dict)}
    return sorted(n for n in names if _CLOUD_KERNEL.match(n))


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
            image = _descriptor(find_artifact(metadata, pool["machineImage"], variant))["digest"]
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
                        "kind": (art := find_artifact(metadata, name, variant))["kind"],
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
