"""The user-data Cluster API's kubeadm bootstrap provider (CABPK) writes for a joining node,
made from an export's own KubeadmConfigTemplate (or KubeadmControlPlane), so the boot test of
``nvkr boot-test --user-data`` and the export cannot drift apart.

The structure follows CABPK's cloud-init templates (kubernetes-sigs/cluster-api
bootstrap/kubeadm/internal/cloudinit: ``cloudinit.go`` @01154007 for the header ``## template:
jinja`` / ``#cloud-config`` and the template order, ``node.go`` and ``node_test.go``
@0ca8d561 (write_files holds the template's files, ``/run/kubeadm/kubeadm-join-config.yaml``
and ``/run/cluster-api/placeholder``), ``files.go`` (path, encoding, owner, permissions,
content), ``utils.go`` @44e036f6 (``Indent``), ``cloudinit_test.go`` (commands written
Go-quoted, ``%q``); the runcmd is ``kubeadm join --config
/run/kubeadm/kubeadm-join-config.yaml && echo success >
/run/cluster-api/bootstrap-success.complete``, the sentinel of the bootstrap contract). Here the
document is built as data and dumped with PyYAML, so it is the same cloud-config, not the same
bytes as Go's text/template.

The JoinConfiguration is rendered the way CABPK does: apiVersion ``kubeadm.k8s.io/v1beta4`` for
Kubernetes >= 1.31, ``v1beta3`` below (bootstrap/kubeadm/types/utils.go), kubeletExtraArgs a
list of ``{name, value}`` in v1beta4 and a map in v1beta3, and a ``discovery.bootstrapToken``
CABPK fills in from the cluster: here the placeholders :data:`PLACEHOLDER_TOKEN`,
:data:`PLACEHOLDER_CA_HASH` and the control-plane endpoint (a real join needs the values of
``kubeadm token create --print-join-command`` on the control plane). A worker's join gets the
taint CABPK adds (:data:`UNINITIALIZED_TAINT`); a control-plane join the CA and
service-account key files CABPK writes from the cluster's Secrets (placeholders here, like the
token: :data:`CONTROL_PLANE_JOIN_FILES`).

The header ``## template: jinja`` makes cloud-init render the user-data with the instance's
data first: ``{{ ds.meta_data.uuid }}`` in a Metal3 export's node labels becomes the host's
uuid from the meta-data Ironic writes.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Final

import yaml

from nvkr.delivery.export.capi.kubeadm import kubelet_args_dict
from nvkr.delivery.export.capi.names import LABEL_POOL, dump_yaml
from nvkr.errors import UsageError

HEADER: Final = "## template: jinja\n#cloud-config\n"
JOIN_CONFIG_PATH: Final = "/run/kubeadm/kubeadm-join-config.yaml"
SENTINEL: Final = "/run/cluster-api/bootstrap-success.complete"
JOIN_COMMAND: Final = f"kubeadm join --config {JOIN_CONFIG_PATH} && echo success > {SENTINEL}"
#: A bootstrap token of kubeadm's shape ([a-z0-9]{6}.[a-z0-9]{16}); CABPK creates a real one.
PLACEHOLDER_TOKEN: Final = "abcdef.0123456789abcdef"
#: The discovery CA hash: sha256 of the cluster CA's public key; CABPK computes the real one.
PLACEHOLDER_CA_HASH: Final = "sha256:" + "0" * 64
PLACEHOLDER_ENDPOINT: Final = "control-plane.invalid:6443"
#: What CABPK adds to a worker's join (kubeadmconfig_controller.go, joinWorker: "Add the node
#: uninitialized taint"; Cluster API drops it once it has synced the Machine's labels to the Node,
#: so no workload lands on a node before its labels are there). Not to a control-plane join.
UNINITIALIZED_TAINT: Final = {"key": "node.cluster.x-k8s.io/uninitialized", "effect": "NoSchedule"}
#: The files a control-plane join gets before ``kubeadm join`` (util/secret/certificates.go
#: NewControlPlaneJoinCerts: the cluster CA, the service-account key pair, the front-proxy CA,
#: the etcd CA, in that order, under ``certificatesDir``; Certificate.AsFiles: the certificate
#: 0640, the key 0600, owner root:root), with the Secret of the cluster each comes from.
CONTROL_PLANE_JOIN_FILES: Final = (
    ("ca.crt", "0640", "the cluster CA's certificate (Secret <cluster>-ca, tls.crt)"),
    ("ca.key", "0600", "the cluster CA's key (Secret <cluster>-ca, tls.key)"),
    ("sa.pub", "0640", "the service-account public key (Secret <cluster>-sa, tls.crt)"),
    ("sa.key", "0600", "the service-account private key (Secret <cluster>-sa, tls.key)"),
    ("front-proxy-ca.crt", "0640", "the front-proxy CA's certificate (Secret <cluster>-proxy)"),
    ("front-proxy-ca.key", "0600", "the front-proxy CA's key (Secret <cluster>-proxy)"),
    ("etcd/ca.crt", "0640", "the etcd CA's certificate (Secret <cluster>-etcd, tls.crt)"),
    ("etcd/ca.key", "0600", "the etcd CA's key (Secret <cluster>-etcd, tls.key)"),
)
DEFAULT_CERTIFICATES_DIR: Final = "/etc/kubernetes/pki"
_PLACEHOLDER_NOTE: Final = (
    "This placeholder file is used to create the /run/cluster-api sub directory in a way that "
    "is compatible with both Linux and Windows (mkdir -p /run/cluster-api does not work with "
    "Windows)"
)


def kubeadm_api_version(kubernetes: str) -> str:
    """``kubeadm.k8s.io/v1beta4`` for Kubernetes >= 1.31 (``v1.36.3`` or ``1.36``), else v1beta3.

    Raises:
        UsageError: not a Kubernetes version, or older than 1.22 (CABPK's v1beta3 floor).
    """
    parts = kubernetes.lstrip("v").split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        raise UsageError(f"{kubernetes!r} is not a Kubernetes version") from None
    if (major, minor) < (1, 22):
        raise UsageError(f"Kubernetes {kubernetes} is older than CABPK's kubeadm v1beta3 (1.22)")
    return "kubeadm.k8s.io/v1beta4" if (major, minor) >= (1, 31) else "kubeadm.k8s.io/v1beta3"


def join_configuration(
    spec: Mapping[str, Any], kubernetes: str, endpoint: str = PLACEHOLDER_ENDPOINT
) -> dict[str, Any]:
    """The kubeadm JoinConfiguration of a KubeadmConfigSpec's ``joinConfiguration``: its
    nodeRegistration (kubeletExtraArgs in the kubeadm version's shape), patches and
    controlPlane, plus a bootstrap-token discovery with the placeholders."""
    join = copy.deepcopy(dict(spec.get("joinConfiguration") or {}))
    api_version = kubeadm_api_version(kubernetes)
    registration = dict(join.get("nodeRegistration") or {})
    if "kubeletExtraArgs" in registration:
        args = kubelet_args_dict(registration["kubeletExtraArgs"])
        registration["kubeletExtraArgs"] = (
            [{"name": k, "value": args[k]} for k in sorted(args)]
            if api_version.endswith("v1beta4")
            else args
        )
    out: dict[str, Any] = {"apiVersion": api_version, "kind": "JoinConfiguration"}
    out["discovery"] = {
        "bootstrapToken": {
            "apiServerEndpoint": endpoint,
            "token": PLACEHOLDER_TOKEN,
            "caCertHashes": [PLACEHOLDER_CA_HASH],
        }
    }
    if "patches" in join:  # kubeadm's Patches{directory}, as the spec has it
        out["patches"] = join["patches"]
    if "controlPlane" in join:
        out["nodeRegistration"] = registration
        out["controlPlane"] = join["controlPlane"]
        return out
    taints = list(registration.get("taints") or [])
    if not any(_same_taint(t, UNINITIALIZED_TAINT) for t in taints):
        taints.append(dict(UNINITIALIZED_TAINT))
    registration["taints"] = taints
    out["nodeRegistration"] = registration
    return out


def _same_taint(taint: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    # corev1.Taint.MatchTaint: same key and effect
    return bool(taint.get("key") == other["key"] and taint.get("effect") == other["effect"])


def control_plane_join_files(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The certificate and key files CABPK writes for a control-plane join
    (:data:`CONTROL_PLANE_JOIN_FILES` under the spec's ``clusterConfiguration.certificatesDir``),
    each holding a placeholder naming what CABPK puts there: the cluster's own keys."""
    pki = str(
        (spec.get("clusterConfiguration") or {}).get("certificatesDir") or DEFAULT_CERTIFICATES_DIR
    ).rstrip("/")
    return [
        {
            "path": f"{pki}/{name}",
            "owner": "root:root",
            "permissions": mode,
            "content": f"nvkr placeholder: CABPK writes {what} here\n",
        }
        for name, mode, what in CONTROL_PLANE_JOIN_FILES
    ]


def kubeadm_config_spec(document: Mapping[str, Any]) -> dict[str, Any]:
    """The KubeadmConfigSpec of an exported KubeadmConfigTemplate or KubeadmControlPlane.

    Raises:
        UsageError: the document is neither.
    """
    kind = document.get("kind")
    spec = document.get("spec") or {}
    if kind == "KubeadmConfigTemplate":
        return dict((spec.get("template") or {}).get("spec") or {})
    if kind == "KubeadmControlPlane":
        return dict(spec.get("kubeadmConfigSpec") or {})
    raise UsageError(
        f"{kind} carries no kubeadm configuration", hint="give a KubeadmConfigTemplate"
    )


def user_data(
    document: Mapping[str, Any], kubernetes: str, endpoint: str = PLACEHOLDER_ENDPOINT
) -> str:
    """CABPK's cloud-config for a node joining with ``document``'s kubeadm configuration.

    Returns:
        the header, then a cloud-config mapping: ``write_files`` (for a control-plane join the
        cluster's certificates and keys, placeholders; the spec's files, the join
        configuration, the /run/cluster-api placeholder), ``runcmd`` (preKubeadmCommands, the
        join with its sentinel, postKubeadmCommands), and ``bootcmd``, ``ntp``, ``users``,
        ``mounts`` when the spec has them.
    """
    spec = kubeadm_config_spec(document)
    join = join_configuration(spec, kubernetes, endpoint)
    files: list[dict[str, Any]] = []
    if "controlPlane" in join:  # NewJoinControlPlane: the certificates, then the spec's files
        files += control_plane_join_files(spec)
    for f in spec.get("files") or []:
        item: dict[str, Any] = {"path": f["path"]}
        for key in ("encoding", "owner", "permissions", "append"):
            if f.get(key):
                item[key] = f[key]
        item["content"] = f.get("content", "")
        files.append(item)
    files.append(
        {
            "path": JOIN_CONFIG_PATH,
            "owner": "root:root",
            "permissions": "0640",
            "content": dump_yaml([join]),
        }
    )
    files.append(
        {
            "path": "/run/cluster-api/placeholder",
            "owner": "root:root",
            "permissions": "0640",
            "content": _PLACEHOLDER_NOTE,
        }
    )
    config: dict[str, Any] = {"write_files": files}
    if spec.get("bootCommands"):
        config["bootcmd"] = list(spec["bootCommands"])
    config["runcmd"] = [
        *(spec.get("preKubeadmCommands") or []),
        JOIN_COMMAND,
        *(spec.get("postKubeadmCommands") or []),
    ]
    ntp = spec.get("ntp") or {}
    if ntp:
        config["ntp"] = {
            "enabled": bool(ntp.get("enabled", True)),
            "servers": list(ntp.get("servers") or []),
        }
    if spec.get("users"):
        config["users"] = [_user(u) for u in spec["users"]]
    if spec.get("mounts"):
        config["mounts"] = [list(m) for m in spec["mounts"]]
    body = yaml.safe_dump(config, sort_keys=False, default_flow_style=False, width=1000)
    return HEADER + body


def _user(user: Mapping[str, Any]) -> dict[str, Any]:
    # users.go: name, gecos, groups, homedir, inactive, shell, passwd, primary_group,
    # lock_passwd, sudo, ssh_authorized_keys (cloud-init's snake_case keys).
    keys = {
        "name": "name",
        "gecos": "gecos",
        "groups": "groups",
        "homeDir": "homedir",
        "inactive": "inactive",
        "shell": "shell",
        "passwd": "passwd",
        "primaryGroup": "primary_group",
        "lockPassword": "lock_passwd",
        "sudo": "sudo",
        "sshAuthorizedKeys": "ssh_authorized_keys",
    }
    return {out: user[key] for key, out in keys.items() if key in user}


def pick_template(resources: Sequence[Mapping[str, Any]], pool: str) -> Mapping[str, Any]:
    """The KubeadmConfigTemplate of node pool ``pool`` (e.g. ``hopper-amd64``: the
    ``nvkr.dev/node-pool`` label its MachineDeployment selects; or the template's name,
    ``nvkr-hopper-amd64``), or the KubeadmControlPlane for ``control-plane`` (whose
    joinConfiguration, with controlPlane, is what a further control-plane node joins with).

    Raises:
        UsageError: no such pool, naming the pools there are (by node-pool name).
    """
    templates = {
        str(r["metadata"]["name"]): r for r in resources if r.get("kind") == "KubeadmConfigTemplate"
    }
    # A MachineDeployment shares its template's name and selects its pool's label (a name cut
    # to 63 characters keeps no readable pool name of its own).
    by_pool = {
        str(labels[LABEL_POOL]): templates[name]
        for r in resources
        if r.get("kind") == "MachineDeployment"
        and (name := str(r["metadata"]["name"])) in templates
        and LABEL_POOL
        in (labels := (r.get("spec") or {}).get("selector", {}).get("matchLabels", {}))
    }
    if pool == "control-plane":
        for r in resources:
            if r.get("kind") == "KubeadmControlPlane":
                return r
    if pool in by_pool:
        return by_pool[pool]
    for name, template in templates.items():
        if name == pool or name.endswith(f"-{pool}"):
            return template
    named = {id(t): p for p, t in by_pool.items()}
    pools = [named.get(id(t), name) for name, t in templates.items()]
    raise UsageError(
        f"--bootstrap-data: no node pool {pool!r} in the export",
        hint="one of: control-plane, " + ", ".join(pools),
    )


#: Where CABPK writes the first control-plane node's kubeadm configuration
#: (controlplane_init.go: ClusterConfiguration, ``---``, InitConfiguration).
INIT_CONFIG_PATH: Final = "/run/kubeadm/kubeadm.yaml"
INIT_COMMAND: Final = f"kubeadm init --config {INIT_CONFIG_PATH} && echo success > {SENTINEL}"


def init_user_data(
    document: Mapping[str, Any], kubernetes: str, endpoint: str = PLACEHOLDER_ENDPOINT
) -> str:
    """CABPK's cloud-config for the first control-plane node of a KubeadmControlPlane
    ``document``: :func:`user_data`'s, with :data:`INIT_CONFIG_PATH` (the spec's
    clusterConfiguration with ``kubernetesVersion`` and ``controlPlaneEndpoint``, and an
    InitConfiguration: a placeholder bootstrap token, the spec's nodeRegistration in the
    kubeadm version's shape and its patches) in place of the join configuration, and
    ``kubeadm init`` in place of the join. CABPK also writes the cluster's CA certificates and keys, which it creates:
    here the placeholders of a control-plane join (:data:`CONTROL_PLANE_JOIN_FILES`), which
    ``kubeadm init`` would use as the cluster's CA.

    Raises:
        UsageError: the document is no KubeadmControlPlane.
    """
    if document.get("kind") != "KubeadmControlPlane":
        raise UsageError(
            f"{document.get('kind')} does not initialize a cluster",
            hint="give the KubeadmControlPlane",
        )
    spec = kubeadm_config_spec(document)
    api_version = kubeadm_api_version(kubernetes)
    initial = join_configuration(
        {"joinConfiguration": spec.get("initConfiguration") or {}}, kubernetes, endpoint
    )
    registration = initial["nodeRegistration"]
    cluster = {
        "apiVersion": api_version,
        "kind": "ClusterConfiguration",
        **copy.deepcopy(dict(spec.get("clusterConfiguration") or {})),
        "controlPlaneEndpoint": endpoint,
        "kubernetesVersion": "v" + kubernetes.lstrip("v"),
    }
    init = {
        "apiVersion": api_version,
        "kind": "InitConfiguration",
        "bootstrapTokens": [{"token": PLACEHOLDER_TOKEN}],
        "nodeRegistration": registration,
    }
    if "patches" in initial:
        init["patches"] = initial["patches"]
    config = yaml.safe_load(user_data(document, kubernetes, endpoint)[len(HEADER) :])
    for item in config["write_files"]:
        if item["path"] == JOIN_CONFIG_PATH:
            item["path"] = INIT_CONFIG_PATH
            item["content"] = dump_yaml([cluster, init])
    config["runcmd"] = [INIT_COMMAND if c == JOIN_COMMAND else c for c in config["runcmd"]]
    body = yaml.safe_dump(config, sort_keys=False, default_flow_style=False, width=1000)
    return HEADER + body
