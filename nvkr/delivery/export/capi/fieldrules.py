"""Field rules of the Cluster API and Metal3 kinds nvkr exports, read from the published Go
API types, and :func:`check_documents`, which checks an export against them.

Each rule names the file and commit it was read from (the search index stores commits, not
tags: the kubernetes-sigs/cluster-api v1beta2 files were read at main-branch commits after the
v1.11 release, which first served v1beta2, and checked against fields v1.11 already has; the
v1beta1 files at the commits named; where a file names no release, the rule says what dates it).
CAPM3's rules, v1beta1 and v1beta2, are :mod:`.metal3rules`'. A rule holds:

- ``required``: dotted paths (``[]`` for every list item) that are ``+required`` (or
  non-omitempty without ``+optional``) in the types, for the fields nvkr writes and their parents;
- ``spec``: every json field of the kind's Spec struct (a field outside it is unknown, which the
  API server prunes or, with strict field validation, rejects);
- ``enums``: ``+kubebuilder:validation:Enum`` values; ``lengths``: ``(MinLength, MaxLength)``;
  ``patterns``: ``+kubebuilder:validation:Pattern``;
- ``nested``: the json fields of a struct below spec (same unknown-field check);
- ``types``: paths whose JSON type changed between versions (``list`` or ``map``);
- ``refs``: paths holding a reference to another object of the export (``kind`` fixed when the
  type says so), resolved by :func:`check_documents`;
- ``checks``: functions of the document giving problems no marker says (a webhook's rule).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from nvkr.delivery.export.capi.metal3rules import metal3_rules
from nvkr.delivery.export.capi.names import ANN_PLACEHOLDER

CAPI: Final = "kubernetes-sigs/cluster-api"

_V1B2_CLUSTER = (
    f"{CAPI} api/core/v1beta2/cluster_types.go @0295be4bac56e3c9fb767aa257bd89706cef848c"
)
_V1B2_MD = (
    f"{CAPI} api/core/v1beta2/machinedeployment_types.go @0288f904465e2cb639a9a03cac1514c2de6e1486, "
    "machine_types.go @1da285b34c5cf0c8a9e5a25a34a432361fc1b5f0 (MachineSpec, Bootstrap)"
)
#: common_types.go ContractVersionedObjectReference (kind MaxLength 63, name MaxLength 253,
#: apiGroup), read as index file 338119958 (a main-branch version after v1.11).
_V1B2_REF = f"{CAPI} api/core/v1beta2/common_types.go @index-338119958"
_V1B2_KCP = (
    f"{CAPI} api/controlplane/kubeadm/v1beta2/kubeadm_control_plane_types.go "
    "@be6043dc9b023c8ec942c9619bb8e1b9dd4a702f (the index's stored commit; field list from the "
    "previous reading, not re-read)"
)
_V1B2_KCS = (
    f"{CAPI} api/bootstrap/kubeadm/v1beta2/kubeadmconfig_types.go "
    "@0a938afc87a3f26adddf48763bc9b2b93c719424 (KubeadmConfigSpec), kubeadm_types.go "
    "@0046d1c9f49868c89a121793d47140723aaf5211 (ClusterConfiguration, NodeRegistrationOptions)"
)
_V1B2_MHC = (
    f"{CAPI} api/core/v1beta2/machinehealthcheck_types.go @1a8011f6c5d18c6eb288189a1ddb1d83d755d652"
)
_V1B2_CRS = f"{CAPI} api/addons/v1beta2/clusterresourceset_types.go @0a938afc87a3f26adddf48763bc9b2b93c719424"
# v1beta1: files at api/v1beta1 etc. (the pre-1.11 layout; v1.11 moved them under api/). The
# ones with a ``v1beta2`` status group are the v1.9/v1.10 line.
_V1B1_CLUSTER = f"{CAPI} api/v1beta1/cluster_types.go @029b8c9561155c10795259c086c05d64fc25415d (v1.9/1.10: v1beta2 status group)"
_V1B1_MD = (
    f"{CAPI} api/v1beta1/machinedeployment_types.go @08fcee6ade701463e26b7e8e72babff60ab2e01c "
    "(v1.9/1.10: v1beta2 status group, machineNamingStrategy), machine_types.go "
    "@e18dabd0478293b1353e6f79f31f4639a3702f1f (MachineSpec, Bootstrap)"
)
_V1B1_MHC = f"{CAPI} api/v1beta1/machinehealthcheck_types.go @937302dc0709f4477a60f9a13e220890bad6f0e2 (unhealthyConditions +optional, maxUnhealthy deprecated)"
_V1B1_KCP = (
    f"{CAPI} controlplane/kubeadm/api/v1beta1/kubeadm_control_plane_types.go @9e02b83080286bd20b881a6aa382803b945e339d "
    "and its later v1beta1 version (index file 1513527732: +required version/machineTemplate/"
    "kubeadmConfigSpec/infrastructureRef, version MaxLength 256, machineNamingStrategy)"
)
_V1B1_KCS = (
    f"{CAPI} bootstrap/kubeadm/api/v1beta1/kubeadmconfig_types.go @8dfdece84f1deb6aae6204d74ba740ddebd6ceee "
    "(KubeadmConfigSpec), kubeadm_types.go @146988ad0ff9e2b42db2f3f630487afe53728076 "
    "(ClusterConfiguration), kubeadmconfigtemplate_types.go @a093b060856f09f70cd28d84294ce5b3b1bd8491"
)
_V1B1_CRS = f"{CAPI} exp/addons/api/v1beta1/clusterresourceset_types.go @0267234e59d1616c4110d2548af34c93858cb4ec (resources +optional)"
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
#: v1beta1 (kubeadmconfig_types.go @8dfdece) has useExperimentalRetryJoin and no bootCommands.
_KCS_V1B1: Final = (_KCS_V1B2 - {"bootCommands"}) | {"useExperimentalRetryJoin"}
#: ClusterConfiguration's json fields (v1beta1: kubeadm_types.go @146988a, TypeMeta inline
#: gives apiVersion and kind); v1beta2 dropped networking, kubernetesVersion,
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
    ]
)


#: Patches' json fields (both versions).
_PATCHES: Final = frozenset(["directory"])


def _kcs(
    prefix: str, v1beta2: bool, control_plane: bool, lengths: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The rules of a kubeadmConfigSpec at ``prefix`` (a KCP's or a KubeadmConfigTemplate's),
    with the kind's own ``lengths``."""
    kind = "list" if v1beta2 else "map"
    configs = ["joinConfiguration", "initConfiguration"] if control_plane else ["joinConfiguration"]
    types = {f"{prefix}.{c}.nodeRegistration.kubeletExtraArgs": kind for c in configs}
    nested = {prefix: _KCS_V1B2 if v1beta2 else _KCS_V1B1}
    # InitConfiguration and JoinConfiguration ``patches`` (Patches{directory}; v1beta2
    # kubeadm_types.go @0046d1c: directory MinLength=1 MaxLength=512, v1beta1 kubeadm_types.go
    # @146988a: no length markers)
    nested |= {f"{prefix}.{c}.patches": _PATCHES for c in configs}
    lengths = dict(lengths or {})
    if v1beta2:
        lengths |= {f"{prefix}.{c}.patches.directory": (1, 512) for c in configs}
    if control_plane:
        nested[f"{prefix}.clusterConfiguration"] = _CC_V1B2 if v1beta2 else _CC_V1B1
    return {"types": types, "nested": nested, "lengths": lengths}


def _rules() -> dict[tuple[str, str], dict[str, Any]]:
    rules: dict[tuple[str, str], dict[str, Any]] = {}
    for version in ("v1beta1", "v1beta2"):
        b2 = version == "v1beta2"
        src = {
            "Cluster": _V1B2_CLUSTER if b2 else _V1B1_CLUSTER,
            "MachineDeployment": _V1B2_MD if b2 else _V1B1_MD,
        }
        rules[(f"cluster.x-k8s.io/{version}", "Cluster")] = {
            "source": src["Cluster"] + ("; " + _V1B2_REF if b2 else ""),
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
            # clusterName +required MinLength=1 MaxLength=63 (both versions)
            "lengths": {"spec.clusterName": (1, 63)},
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
            "source": _V1B2_MHC if b2 else _V1B1_MHC,
            "lengths": {"spec.clusterName": (1, 63) if b2 else (1, None)},
            # v1beta1 unhealthyRange, v1beta2 remediation.triggerIf.unhealthyInRange
            "patterns": {
                (
                    "spec.remediation.triggerIf.unhealthyInRange" if b2 else "spec.unhealthyRange"
                ): r"^\[[0-9]+-[0-9]+\]$"
            },
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
            "source": _V1B2_KCP if b2 else _V1B1_KCP,
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
            **_kcs(
                "spec.kubeadmConfigSpec",
                b2,
                control_plane=True,
                lengths={} if b2 else {"spec.version": (1, 256)},
            ),
        }
        rules[(f"bootstrap.cluster.x-k8s.io/{version}", "KubeadmConfigTemplate")] = {
            "source": _V1B2_KCS if b2 else _V1B1_KCS,
            "required": ["spec.template"],
            "spec": {"template"},
            "refs": {},
            **_kcs("spec.template.spec", b2, control_plane=False),
        }
        rules[(f"addons.cluster.x-k8s.io/{version}", "ClusterResourceSet")] = {
            "source": _V1B2_CRS if b2 else _V1B1_CRS,
            # v1beta1: resources +optional (omitempty); v1beta2: +required, MinItems=1
            "required": ["spec.clusterSelector", "spec.resources"]
            if b2
            else ["spec.clusterSelector"],
            "lengths": {"spec.resources[].name": (1, 253) if b2 else (1, None)},
            "required_if": ["spec.resources[].name", "spec.resources[].kind"],
            "spec": {"clusterSelector", "resources", "strategy"},
            "enums": {
                "spec.resources[].kind": {"Secret", "ConfigMap"},
                "spec.strategy": {"ApplyOnce", "Reconcile"},
            },
            "refs": {"spec.resources[]": None},
        }
    rules.update(metal3_rules())
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
    # a placeholder (an export without --infrastructure) is the user's to fill in: its
    # required fields are theirs, everything else (names, fields, references) is checked
    placeholder = ANN_PLACEHOLDER in ((doc.get("metadata") or {}).get("annotations") or {})
    problems = [] if placeholder else _missing(where, doc, rule)
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
    problems += _check_values(where, doc, rule)
    if not placeholder:
        problems += [f"{where}: {p}" for check in rule.get("checks", []) for p in check(doc)]
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


def _check_values(where: str, doc: Mapping[str, Any], rule: Mapping[str, Any]) -> list[str]:
    """``lengths`` (MinLength/MaxLength), ``patterns`` (Pattern) and ``enums`` (Enum) markers."""
    problems: list[str] = []
    for path, (low, high) in rule.get("lengths", {}).items():
        for value in _values(doc, path):
            if isinstance(value, str) and len(value) < low:
                problems.append(f"{where}: {path} is shorter than {low}")
            if isinstance(value, str) and high is not None and len(value) > high:
                problems.append(f"{where}: {path} is longer than {high}")
    for path, pattern in rule.get("patterns", {}).items():
        for value in _values(doc, path):
            if isinstance(value, str) and not re.match(pattern, value):
                problems.append(f"{where}: {path} {value!r} does not match {pattern}")
    for path, allowed in rule.get("enums", {}).items():
        for value in _values(doc, path):
            if value is not _MISSING and value not in allowed:
                problems.append(f"{where}: {path} {value!r} is not one of {sorted(allowed)}")
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
