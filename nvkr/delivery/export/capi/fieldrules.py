"""Field rules of the Cluster API and Metal3 kinds nvkr exports, read from the published Go
API types, and :func:`check_documents`, which checks an export against them.

Each rule names the file and commit it was read from (the search index stores commits, not
tags: the kubernetes-sigs/cluster-api v1beta2 files were read at main-branch commits after the
v1.11 release, which first served v1beta2, and checked against fields v1.11 already has; the
v1beta1 files at the commits named). A rule holds:

- ``required``: dotted paths (``[]`` for every list item) that are ``+required`` (or
  non-omitempty without ``+optional``) in the types, for the fields nvkr writes and their parents;
- ``spec``: every json field of the kind's Spec struct (a field outside it is unknown, which the
  API server prunes or, with strict field validation, rejects);
- ``enums``: ``+kubebuilder:validation:Enum`` values;
- ``types``: paths whose JSON type changed between versions (``list`` or ``map``);
- ``refs``: paths holding a reference to another object of the export (``kind`` fixed when the
  type says so), resolved by :func:`check_documents`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

CAPI: Final = "kubernetes-sigs/cluster-api"
CAPM3: Final = "metal3-io/cluster-api-provider-metal3"

_V1B2_CLUSTER = (
    f"{CAPI} api/core/v1beta2/cluster_types.go @0295be4bac56e3c9fb767aa257bd89706cef848c"
)
_V1B2_MD = (
    f"{CAPI} api/core/v1beta2/machinedeployment_types.go @0288f904465e2cb639a9a03cac1514c2de6e1486, "
    "machine_types.go @1da285b34c5cf0c8a9e5a25a34a432361fc1b5f0 (MachineSpec, Bootstrap)"
)
_V1B2_REF = f"{CAPI} api/core/v1beta2/common_types.go (ContractVersionedObjectReference)"
_V1B2_KCP = (
    f"{CAPI} api/controlplane/kubeadm/v1beta2/kubeadm_control_plane_types.go "
    "(KubeadmControlPlaneMachineTemplate{metadata, spec{infrastructureRef}})"
)
_V1B2_KCS = (
    f"{CAPI} api/bootstrap/kubeadm/v1beta2/kubeadmconfig_types.go "
    "@0a938afc87a3f26adddf48763bc9b2b93c719424 (KubeadmConfigSpec), kubeadm_types.go "
    "@0046d1c9f49868c89a121793d47140723aaf5211 (ClusterConfiguration, NodeRegistrationOptions)"
)
_V1B1 = f"{CAPI} api/*/v1beta1 (same field names as v1beta2 where not listed otherwise)"
_CAPM3_V1B1 = (
    f"{CAPM3} api/v1beta1/{{metal3cluster,metal3datatemplate,metal3machinetemplate}}_types.go"
)

#: KubeadmConfigSpec's json fields (v1beta2 kubeadmconfig_types.go; v1beta1 adds
#: useExperimentalRetryJoin).
_KCS_V1B2: Final = frozenset(
    [
        "clusterConfiguration",
        "initConfiguration",
        "joinConfiguration",
        "files",
        "diskSetup",
        "mounts",
        "bootCommands",
        "preKubeadmCommands",
        "postKubeadmCommands",
        "users",
        "ntp",
        "format",
        "verbosity",
        "ignition",
    ]
)
_KCS_V1B1: Final = _KCS_V1B2 | {"useExperimentalRetryJoin"}
#: ClusterConfiguration's json fields: v1beta2 dropped networking, kubernetesVersion,
#: clusterName (kubeadm_types.go @0046d1c).
_CC_V1B2: Final = frozenset(
    [
        "etcd",
        "controlPlaneEndpoint",
        "apiServer",
        "controllerManager",
        "scheduler",
        "dns",
        "certificatesDir",
        "imageRepository",
        "featureGates",
        "certificateValidityPeriodDays",
        "caCertificateValidityPeriodDays",
        "encryptionAlgorithm",
    ]
)
_CC_V1B1: Final = frozenset(
    [
        "etcd",
        "networking",
        "kubernetesVersion",
        "controlPlaneEndpoint",
        "apiServer",
        "controllerManager",
        "scheduler",
        "dns",
        "certificatesDir",
        "imageRepository",
        "featureGates",
        "clusterName",
        "apiVersion",
        "kind",
        "encryptionAlgorithm",
    ]
)


def _kcs(prefix: str, v1beta2: bool, control_plane: bool) -> dict[str, Any]:
    """The rules of a kubeadmConfigSpec at ``prefix`` (a KCP's or a KubeadmConfigTemplate's)."""
    kind = "list" if v1beta2 else "map"
    types = {f"{prefix}.joinConfiguration.nodeRegistration.kubeletExtraArgs": kind}
    nested = {prefix: _KCS_V1B2 if v1beta2 else _KCS_V1B1}
    if control_plane:
        types[f"{prefix}.initConfiguration.nodeRegistration.kubeletExtraArgs"] = kind
        nested[f"{prefix}.clusterConfiguration"] = _CC_V1B2 if v1beta2 else _CC_V1B1
    return {"types": types, "nested": nested}


def _rules() -> dict[tuple[str, str], dict[str, Any]]:
    rules: dict[tuple[str, str], dict[str, Any]] = {}
    for version in ("v1beta1", "v1beta2"):
        b2 = version == "v1beta2"
        src = {
            "Cluster": _V1B2_CLUSTER if b2 else _V1B1,
            "MachineDeployment": _V1B2_MD if b2 else _V1B1,
        }
        rules[(f"cluster.x-k8s.io/{version}", "Cluster")] = {
            "source": src["Cluster"] + "; " + _V1B2_REF,
            "required": [],
            "spec": {
                "paused",
                "clusterNetwork",
                "controlPlaneEndpoint",
                "controlPlaneRef",
                "infrastructureRef",
                "topology",
                "availabilityGates",
            },
            # NetworkRanges.cidrBlocks +required; APIEndpoint host and port +required
            "required_if": [
                "spec.clusterNetwork.pods.cidrBlocks",
                "spec.clusterNetwork.services.cidrBlocks",
                "spec.controlPlaneEndpoint.host",
                "spec.controlPlaneEndpoint.port",
            ],
            "refs": {"spec.controlPlaneRef": None, "spec.infrastructureRef": None},
        }
        rules[(f"cluster.x-k8s.io/{version}", "MachineDeployment")] = {
            "source": src["MachineDeployment"],
            "required": [
                "spec.clusterName",
                "spec.selector",
                "spec.template",
                "spec.template.spec.clusterName",
                "spec.template.spec.bootstrap",
                "spec.template.spec.infrastructureRef",
            ],
            "spec": (
                {
                    "clusterName",
                    "replicas",
                    "rollout",
                    "selector",
                    "template",
                    "machineNaming",
                    "remediation",
                    "deletion",
                    "paused",
                }
                if b2
                else {
                    "clusterName",
                    "replicas",
                    "rolloutAfter",
                    "selector",
                    "template",
                    "strategy",
                    "machineNamingStrategy",
                    "minReadySeconds",
                    "revisionHistoryLimit",
                    "paused",
                    "progressDeadlineSeconds",
                }
            ),
            "refs": {
                "spec.template.spec.bootstrap.configRef": "KubeadmConfigTemplate",
                "spec.template.spec.infrastructureRef": None,
            },
        }
        rules[(f"cluster.x-k8s.io/{version}", "MachineHealthCheck")] = {
            "source": f"{CAPI} api/core/{version}/machinehealthcheck_types.go",
            "required": ["spec.clusterName", "spec.selector"],
            "spec": (
                {"clusterName", "selector", "checks", "remediation"}
                if b2
                else {
                    "clusterName",
                    "selector",
                    "unhealthyConditions",
                    "unhealthyRange",
                    "maxUnhealthy",
                    "nodeStartupTimeout",
                    "remediationTemplate",
                }
            ),
            "required_if": (
                [
                    "spec.checks.unhealthyNodeConditions[].type",
                    "spec.checks.unhealthyNodeConditions[].status",
                    "spec.checks.unhealthyNodeConditions[].timeoutSeconds",
                ]
                if b2
                else [
                    "spec.unhealthyConditions[].type",
                    "spec.unhealthyConditions[].status",
                    "spec.unhealthyConditions[].timeout",
                ]
            ),
            "refs": {},
        }
        kcp_ref = (
            "spec.machineTemplate.spec.infrastructureRef"
            if b2
            else "spec.machineTemplate.infrastructureRef"
        )
        rules[(f"controlplane.cluster.x-k8s.io/{version}", "KubeadmControlPlane")] = {
            "source": _V1B2_KCP if b2 else _V1B1,
            "required": ["spec.version", "spec.machineTemplate", kcp_ref, "spec.kubeadmConfigSpec"],
            "spec": (
                {
                    "replicas",
                    "version",
                    "machineTemplate",
                    "kubeadmConfigSpec",
                    "rollout",
                    "remediation",
                    "machineNaming",
                }
                if b2
                else {
                    "replicas",
                    "version",
                    "machineTemplate",
                    "kubeadmConfigSpec",
                    "rolloutBefore",
                    "rolloutAfter",
                    "rolloutStrategy",
                    "remediationStrategy",
                    "machineNamingStrategy",
                }
            ),
            "refs": {kcp_ref: None},
            **_kcs("spec.kubeadmConfigSpec", b2, control_plane=True),
        }
        rules[(f"bootstrap.cluster.x-k8s.io/{version}", "KubeadmConfigTemplate")] = {
            "source": _V1B2_KCS if b2 else _V1B1,
            "required": ["spec.template"],
            "spec": {"template"},
            "refs": {},
            **_kcs("spec.template.spec", b2, control_plane=False),
        }
        rules[(f"addons.cluster.x-k8s.io/{version}", "ClusterResourceSet")] = {
            "source": f"{CAPI} api/addons/{version}/clusterresourceset_types.go",
            "required": ["spec.clusterSelector", "spec.resources"],
            "required_if": ["spec.resources[].name", "spec.resources[].kind"],
            "spec": {"clusterSelector", "resources", "strategy"},
            "enums": {
                "spec.resources[].kind": {"Secret", "ConfigMap"},
                "spec.strategy": {"ApplyOnce", "Reconcile"},
            },
            "refs": {"spec.resources[]": None},
        }
    m3 = "infrastructure.cluster.x-k8s.io/v1beta1"
    rules[(m3, "Metal3Cluster")] = {
        "source": _CAPM3_V1B1 + " (Metal3ClusterSpec; webhook IsValid: host and port)",
        "required": ["spec.controlPlaneEndpoint.host", "spec.controlPlaneEndpoint.port"],
        "spec": {"controlPlaneEndpoint", "noCloudProvider", "cloudProviderEnabled"},
        "refs": {},
    }
    rules[(m3, "Metal3DataTemplate")] = {
        "source": _CAPM3_V1B1 + " (Metal3DataTemplateSpec: clusterName required)",
        "required": ["spec.clusterName"],
        "spec": {"clusterName", "templateReference", "metaData", "networkData"},
        "enums": {
            "spec.metaData.objectNames[].object": {"machine", "metal3machine", "baremetalhost"}
        },
        "refs": {},
    }
    rules[(m3, "Metal3MachineTemplate")] = {
        "source": _CAPM3_V1B1 + " (Metal3MachineTemplateSpec{template{spec: Metal3MachineSpec}}, "
        "common_types.go Image)",
        "required": ["spec.template.spec.image.url", "spec.template.spec.image.checksum"],
        "spec": {"template", "nodeReuse"},
        "enums": {
            "spec.template.spec.image.checksumType": {"md5", "sha256", "sha512"},
            "spec.template.spec.image.format": {"raw", "qcow2", "vdi", "vmdk", "live-iso"},
        },
        "refs": {"spec.template.spec.dataTemplate": "Metal3DataTemplate"},
    }
    rules[("v1", "ConfigMap")] = {
        "source": "k8s.io/api core/v1 ConfigMap (data: map[string]string)",
        "required": ["data"],
        "spec": None,
        "refs": {},
    }
    return rules


RULES: Final = _rules()
#: Groups whose every kind nvkr writes has a rule: a document of them without one is a gap.
RULED_GROUPS: Final = (
    "cluster.x-k8s.io",
    "controlplane.cluster.x-k8s.io",
    "bootstrap.cluster.x-k8s.io",
    "addons.cluster.x-k8s.io",
)
_DNS_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_MISSING: Final = object()


def _walk(node: Any, parts: Sequence[str]) -> Iterator[Any]:
    """Every value at ``parts`` under ``node`` (``x[]`` fans out over list ``x``)."""
    if not parts:
        yield node
        return
    head, rest = parts[0], parts[1:]
    many = head.endswith("[]")
    key = head.removesuffix("[]")
    value = node.get(key, _MISSING) if isinstance(node, Mapping) else _MISSING
    if value is _MISSING:
        yield _MISSING
        return
    if many:
        for item in value if isinstance(value, list) else [_MISSING]:
            yield from _walk(item, rest)
    else:
        yield from _walk(value, rest)


def _values(doc: Mapping[str, Any], path: str) -> list[Any]:
    return list(_walk(doc, path.split(".")))


def _empty(value: Any) -> bool:
    return value is _MISSING or value is None or value == "" or value == {} or value == []


def check_documents(
    docs: Sequence[Mapping[str, Any]], external: frozenset[str] = frozenset()
) -> list[str]:
    """Problems of an export against :data:`RULES`, one line each (``Kind/name: ...``); empty
    when every document passes: DNS-1123 names, required fields, no unknown spec fields, enum
    values, v1beta1/v1beta2 shapes, and references that resolve to a document of the export
    (except references to a kind in ``external``, which the user supplies: the machine
    templates of an export without ``--infrastructure``)."""
    problems: list[str] = []
    index: dict[tuple[Any, Any], Mapping[str, Any] | None] = {
        (d.get("kind"), (d.get("metadata") or {}).get("name")): d for d in docs
    }
    for doc in docs:
        kind, api_version = doc.get("kind"), doc.get("apiVersion")
        meta = doc.get("metadata") or {}
        where = f"{kind}/{meta.get('name')}"
        for key in ("name", "namespace"):
            value = meta.get(key)
            if not isinstance(value, str) or len(value) > 63 or not _DNS_LABEL.match(value):
                problems.append(f"{where}: metadata.{key} {value!r} is not a DNS-1123 label")
        rule = RULES.get((str(api_version), str(kind)))
        if rule is None:
            if str(api_version).split("/")[0] in RULED_GROUPS:
                problems.append(f"{where}: no field rule for {api_version} {kind}")
            continue
        problems += _check_rule(where, doc, rule, str(api_version), index, external)
    return problems


def _check_rule(
    where: str,
    doc: Mapping[str, Any],
    rule: Mapping[str, Any],
    api_version: str,
    index: Mapping[tuple[Any, Any], Mapping[str, Any] | None],
    external: frozenset[str],
) -> list[str]:
    kind = doc.get("kind")
    problems = _missing(where, doc, rule)
    if rule["spec"] is not None:
        unknown = sorted(set(doc.get("spec") or {}) - set(rule["spec"]))
        problems += [f"{where}: spec.{f} is no field of {api_version} {kind}" for f in unknown]
    for path, allowed in rule.get("nested", {}).items():
        for value in _values(doc, path):
            if isinstance(value, Mapping):
                problems += [
                    f"{where}: {path}.{f} is no field of {api_version} {kind}"
                    for f in sorted(set(value) - set(allowed))
                ]
    for path, allowed in rule.get("enums", {}).items():
        for value in _values(doc, path):
            if value is not _MISSING and value not in allowed:
                problems.append(f"{where}: {path} {value!r} is not one of {sorted(allowed)}")
    for path, shape in rule.get("types", {}).items():
        want = list if shape == "list" else dict
        for value in _values(doc, path):
            if value is not _MISSING and not isinstance(value, want):
                problems.append(f"{where}: {path} must be a {shape} in {api_version}")
    for path, want_kind in rule["refs"].items():
        for ref in _values(doc, path):
            if ref is _MISSING:
                continue
            if isinstance(ref, Mapping) and ref.get("kind") in external:
                continue
            problems += _check_ref(where, path, ref, want_kind, api_version, index)
    return problems


def _missing(where: str, doc: Mapping[str, Any], rule: Mapping[str, Any]) -> list[str]:
    """``required`` paths that are absent or empty; ``required_if`` ones under a parent that is
    there (a field required inside an optional struct)."""
    problems = []
    for path in rule["required"]:
        if any(_empty(v) for v in _values(doc, path)):
            problems.append(f"{where}: required field {path} is missing")
    for path in rule.get("required_if", []):
        parent = path.rsplit(".", 1)[0]
        for holder, value in zip(_values(doc, parent), _values(doc, path), strict=False):
            if holder is not _MISSING and _empty(value):
                problems.append(f"{where}: required field {path} is missing")
    return problems


def _check_ref(
    where: str,
    path: str,
    ref: Any,
    want_kind: str | None,
    api_version: str,
    index: Mapping[tuple[Any, Any], Mapping[str, Any] | None],
) -> list[str]:
    if not isinstance(ref, Mapping) or not ref.get("name"):
        return [f"{where}: {path} is no reference (name missing)"]
    kind = ref.get("kind", want_kind)
    if want_kind is not None and kind != want_kind:
        return [f"{where}: {path} names kind {kind!r}, not {want_kind}"]
    target = index.get((kind, ref["name"]))
    if target is None:
        return [f"{where}: {path} names {kind}/{ref['name']}, which the export does not hold"]
    v1beta2 = api_version.endswith("/v1beta2")
    target_api = str(target.get("apiVersion"))
    if "apiVersion" in ref and ref["apiVersion"] != target_api:
        return [f"{where}: {path} wants {ref['apiVersion']}, the export holds {target_api}"]
    if "apiGroup" in ref and ref["apiGroup"] != target_api.split("/")[0]:
        return [f"{where}: {path} wants group {ref['apiGroup']}, the export holds {target_api}"]
    if path.endswith("Ref") and v1beta2 and "apiVersion" in ref:
        return [f"{where}: {path} is a v1beta2 reference: apiGroup, kind, name (no apiVersion)"]
    if path.endswith("Ref") and not v1beta2 and "apiGroup" in ref:
        return [f"{where}: {path} is a v1beta1 reference: apiVersion, kind, name"]
    return []
