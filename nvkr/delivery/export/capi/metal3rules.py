"""Field rules of the CAPM3 (Metal3) kinds nvkr exports, v1beta1 and v1beta2, read from
metal3-io/cluster-api-provider-metal3's Go API types; :mod:`.fieldrules` holds the shape of a
rule and checks documents against them.

v1beta1 is what CAPM3 1.12 serves (only that); v1beta2 is served from CAPM3 1.13. The v1beta2
files were read at the commits the search index stores (2026 main-branch commits: the index
keeps commits, not tags) and hold what v1.13 changed against v1beta1: ``Image.format`` became
``diskFormat``, ``Metal3ClusterSpec.noCloudProvider`` and ``Metal3DataTemplateSpec.
templateReference`` are gone, ``Metal3MachineSpec`` gained ``customDeploy`` and
``failureDomain``, and ``dataTemplate`` is a ``Metal3ObjectRef{name, namespace}`` whose
``IsDefined`` wants both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

CAPM3: Final = "metal3-io/cluster-api-provider-metal3"

_V1B1_M3C = (
    f"{CAPM3} api/v1beta1/metal3cluster_types.go @8d8b6cab198d5afd42de4d309b9c60fa3c9b6cda and "
    "index file 687196269 (the version with cloudProviderEnabled, failureDomains); "
    "common_types.go @58845d7856bb99be04a158d94c639e013d996394 (APIEndpoint host, port)"
)
_V1B1_M3MT = (
    f"{CAPM3} api/v1beta1/metal3machinetemplate_types.go, metal3machine_types.go "
    "@78377efde2813a54260075f7643acf84e6187226, common_types.go "
    "@58845d7856bb99be04a158d94c639e013d996394 (Image)"
)
_V1B1_M3DT = (
    f"{CAPM3} api/v1beta1/metal3datatemplate_types.go @78377efde2813a54260075f7643acf84e6187226"
)
_V1B2_M3C = (
    f"{CAPM3} api/v1beta2/metal3cluster_types.go @0316c48aa8cffaac88bd80cc7ea4a3daebfcdede "
    "(controlPlaneEndpoint, cloudProviderEnabled, failureDomains; IsValid: host and port)"
)
_V1B2_M3MT = (
    f"{CAPM3} api/v1beta2/metal3machinetemplate_types.go @20e4ef1c6ead17c71ad48af724f3f065d33057d3, "
    "metal3machine_types.go @0316c48aa8cffaac88bd80cc7ea4a3daebfcdede (Metal3MachineSpec), "
    "common_types.go @1605ea4b58d9d43e18c6ab649a3772c0c0123783 (Image: url, checksum, "
    "checksumType, diskFormat; Metal3ObjectRef name MinLength=1 MaxLength=253)"
)
_V1B2_M3DT = (
    f"{CAPM3} api/v1beta2/metal3datatemplate_types.go @017d1ab129ec5c838252ff57abe9c9e80f0ea0ce "
    "(clusterName MinLength=1, no omitempty; metaData, networkData)"
)
#: Metal3MachineSpec's json fields (v1beta1 metal3machine_types.go @78377ef; v1beta2 @0316c48
#: adds customDeploy and failureDomain).
_M3M_SPEC_V1B1: Final = frozenset(
    [
        "providerID",
        "image",
        "userData",
        "hostSelector",
        "dataTemplate",
        "metaData",
        "networkData",
        "automatedCleaningMode",
    ]
)
_M3M_SPEC_V1B2: Final = _M3M_SPEC_V1B1 | {"customDeploy", "failureDomain"}
#: Image's json fields: v1beta1 ``format``, v1beta2 ``diskFormat`` (same enum).
_IMAGE_V1B1: Final = frozenset(["url", "checksum", "checksumType", "format"])
_IMAGE_V1B2: Final = frozenset(["url", "checksum", "checksumType", "diskFormat"])
_DISK_FORMATS: Final = frozenset(["raw", "qcow2", "vdi", "vmdk", "live-iso"])
_OBJECTS: Final = frozenset(["machine", "metal3machine", "baremetalhost"])


def _oci_checksum(doc: Mapping[str, Any]) -> list[str]:
    """image.checksum: required (Image.Validate: "cannot be empty"), except beside an ``oci://``
    URL, where CAPM3 1.14 (its rc: api/v1beta2 Image validation) forbids it: Ironic checks the
    disk against the manifest's layer digest."""
    spec = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
    image = spec.get("image")
    if not isinstance(image, Mapping):
        return []
    oci = str(image.get("url", "")).startswith("oci://")
    if oci and any(k in image for k in ("checksum", "checksumType")):
        return ["spec.template.spec.image: CAPM3 forbids checksum fields beside an oci:// URL"]
    if not oci and not image.get("checksum"):
        return ["required field spec.template.spec.image.checksum is missing"]
    return []


def metal3_rules() -> dict[tuple[str, str], dict[str, Any]]:
    """The rules of Metal3Cluster, Metal3DataTemplate and Metal3MachineTemplate, both versions."""
    rules: dict[tuple[str, str], dict[str, Any]] = {}
    for version in ("v1beta1", "v1beta2"):
        b2 = version == "v1beta2"
        m3 = f"infrastructure.cluster.x-k8s.io/{version}"
        image = "spec.template.spec.image"
        rules[(m3, "Metal3Cluster")] = {
            "source": _V1B2_M3C if b2 else _V1B1_M3C + " (IsValid: host and port)",
            "required": ["spec.controlPlaneEndpoint.host", "spec.controlPlaneEndpoint.port"],
            "spec": {"controlPlaneEndpoint", "cloudProviderEnabled", "failureDomains"}
            | (set() if b2 else {"noCloudProvider"}),
            "refs": {},
        }
        rules[(m3, "Metal3DataTemplate")] = {
            "source": _V1B2_M3DT if b2 else _V1B1_M3DT + " (clusterName MinLength=1, no omitempty)",
            "required": ["spec.clusterName"],
            "lengths": {"spec.clusterName": (1, None)},
            "spec": {"clusterName", "metaData", "networkData"}
            | (set() if b2 else {"templateReference"}),
            "enums": {"spec.metaData.objectNames[].object": _OBJECTS},
            "refs": {},
        }
        rules[(m3, "Metal3MachineTemplate")] = {
            "source": _V1B2_M3MT if b2 else _V1B1_M3MT,
            # template, template.spec, spec.image, image.url and image.checksum have no omitempty
            # (v1beta2: image is omitzero, but Image.Validate wants it or customDeploy)
            # checksum: see _oci_checksum
            "required": ["spec.template", "spec.template.spec", image, f"{image}.url"],
            "checks": [_oci_checksum],
            "nested": {
                "spec.template.spec": _M3M_SPEC_V1B2 if b2 else _M3M_SPEC_V1B1,
                image: _IMAGE_V1B2 if b2 else _IMAGE_V1B1,
                "spec.template.spec.dataTemplate": {"name", "namespace"} if b2 else None,
            },
            "spec": {"template", "nodeReuse"},
            "lengths": {"spec.template.spec.dataTemplate.name": (1, 253)} if b2 else {},
            "enums": {
                f"{image}.checksumType": {"md5", "sha256", "sha512"},
                f"{image}.{'diskFormat' if b2 else 'format'}": _DISK_FORMATS,
                "spec.template.spec.automatedCleaningMode": {"metadata", "disabled"},
            },
            "refs": {"spec.template.spec.dataTemplate": "Metal3DataTemplate"},
        }
        if not b2:  # v1beta1's dataTemplate is a corev1.ObjectReference: no unknown-field rule
            del rules[(m3, "Metal3MachineTemplate")]["nested"]["spec.template.spec.dataTemplate"]
    return rules
