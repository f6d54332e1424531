"""The OVN-Kubernetes chart (charts/ovn-kubernetes), checked with real Helm: it lints clean
(strict), renders with its defaults once the image is pinned (also packaged by the helm-chart
builder, as the Cluster API export renders it), runs one OVN zone per node (NB and SB databases on
unix sockets, ovn-northd, ovnkube in interconnect mode) with Open vSwitch and ovn-controller left
to the host, points the host's ovn-controller at the zone's SB socket, runs the cluster manager on
the control plane, grants exactly the RBAC it lists, and refuses bad values naming them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

helm = pytest.importorskip("helm_python")

from tests.helpers.charts import (  # noqa: E402
    DIGEST,
    assert_lints_clean,
    helm_checks,
    merge_values,
    package_chart,
    undocumented_values,
)

CHART = Path(__file__).resolve().parents[2] / "charts" / "ovn-kubernetes"
REPOSITORY = "ghcr.io/nvkr/ovnkube"
IMAGE = f"{REPOSITORY}@{DIGEST}"
PINNED = {"image": {"digest": DIGEST}}
NS = "ovn-kubernetes"
NB = "/var/run/ovn/ovnnb_db.sock"
SB = "/var/run/ovn/ovnsb_db.sock"
DS = ("DaemonSet", "ovn-kubernetes-node")
DEPLOY = ("Deployment", "ovn-kubernetes-control-plane")
NODE_ENV = {"K8S_NODE": "spec.nodeName", "K8S_NODE_IP": "status.hostIP"}
READS = [
    {"apiGroups": [""], "resources": ["namespaces", "nodes", "pods", "services", "endpoints"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["k8s.cni.cncf.io"], "resources": ["network-attachment-definitions"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["k8s.ovn.org"],
     "resources": ["egressfirewalls", "egressips", "egressqoses", "egressservices",
                   "adminpolicybasedexternalroutes"],
     "verbs": ["get", "list", "watch"]},
]  # fmt: skip


def render_raw(values: dict[str, Any] | None) -> dict[str, str]:
    with helm.Chart.load(str(CHART)) as c:
        return dict(c.render(values, name="ovn-kubernetes", namespace=NS))


def objects(rendered: dict[str, str]) -> dict[tuple[str, str], Any]:
    docs = [
        d
        for name, text in rendered.items()
        if name.endswith(".yaml")
        for d in yaml.safe_load_all(text)
        if d
    ]
    objs = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    assert len(objs) == len(docs), "two objects share a kind and name"
    return objs


def render(values: dict[str, Any] | None = None) -> dict[tuple[str, str], Any]:
    """The rendered objects by (kind, name), with PINNED under ``values``."""
    return objects(render_raw(merge_values(PINNED, values or {})))


def pod(objs: dict[tuple[str, str], Any], key: tuple[str, str] = DS) -> dict[str, Any]:
    return dict(objs[key]["spec"]["template"]["spec"])


def containers(spec: dict[str, Any], init: bool = False) -> dict[str, dict[str, Any]]:
    listed = spec.get("initContainers" if init else "containers", [])
    by_name = {c["name"]: c for c in listed}
    assert len(by_name) == len(listed)
    return by_name


def flags(args: list[str]) -> dict[str, str | None]:
    """`--name=value` / `--name` arguments as a dict; every argument is a flag, none repeats."""
    out: dict[str, str | None] = {}
    for arg in args:
        assert arg.startswith("--"), arg
        name, eq, value = arg[2:].partition("=")
        assert name not in out, f"--{name} given twice"
        out[name] = value if eq else None
    return out


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container.get("env", [])}


def rules_of(objs: dict[tuple[str, str], Any], kind: str, name: str) -> list[dict[str, Any]]:
    return [
        {k: rule[k] for k in ("apiGroups", "resources", "verbs")}
        for rule in objs[(kind, name)]["rules"]
    ]


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """charts/ovn-kubernetes packaged by the builder with a fake image index digest and the
    recipe's check (lint and render in the chart's namespace)."""
    return package_chart(
        tmp_path_factory.mktemp("ovn-kubernetes"),
        CHART,
        version="0.1.0",
        appVersion="7e7e141d",
        images={"image": {"artifact": "ovnkube-image", "repository": REPOSITORY}},
        check={"namespace": NS},
    )


def test_chart_yaml() -> None:
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["apiVersion"] == "v2" and meta["name"] == "ovn-kubernetes"
    assert meta["version"] == "0.1.0" and isinstance(meta["appVersion"], str)
    assert meta["kubeVersion"] == ">=1.34.0-0"


def test_lints_clean_with_a_pinned_image() -> None:
    assert_lints_clean(CHART, PINNED)


def test_packaged_chart_lints_and_renders_with_its_packaged_values(packaged: Path) -> None:
    """What `release-set export --format capi` does: render with the packaged values only."""
    rendered = helm_checks(packaged)
    assert f"{IMAGE}" in rendered["ovn-kubernetes/templates/NOTES.txt"]
    objs = objects({k: v for k, v in rendered.items() if k.endswith(".yaml")})
    assert {k for k, _ in objs} >= {"DaemonSet", "Deployment", "ClusterRole", "Role"}
    for c in [*pod(objs, ("DaemonSet", "rel-ovn-kubernetes-node"))["containers"]]:
        assert c["image"] == IMAGE


def test_default_render_objects_and_pinned_image_everywhere() -> None:
    objs = render()
    assert set(objs) == {
        DS,
        DEPLOY,
        ("ServiceAccount", "ovn-kubernetes-node"),
        ("ServiceAccount", "ovn-kubernetes-cluster-manager"),
        ("ClusterRole", "ovn-kubernetes-node"),
        ("ClusterRole", "ovn-kubernetes-cluster-manager"),
        ("ClusterRoleBinding", "ovn-kubernetes-node"),
        ("ClusterRoleBinding", "ovn-kubernetes-cluster-manager"),
        ("Role", "ovn-kubernetes-configmaps"),
        ("Role", "ovn-kubernetes-leader-election"),
        ("RoleBinding", "ovn-kubernetes-node-configmaps"),
        ("RoleBinding", "ovn-kubernetes-cluster-manager-configmaps"),
        ("RoleBinding", "ovn-kubernetes-cluster-manager-leader-election"),
        ("RoleBinding", "ovn-kubernetes-node-leader-election"),
    }
    images = [
        c["image"]
        for key in (DS, DEPLOY)
        for spec in [pod(objs, key)]
        for c in [*spec.get("initContainers", []), *spec["containers"]]
    ]
    assert len(images) == 7 and set(images) == {IMAGE}
    for key in (DS, DEPLOY):
        assert objs[key]["metadata"]["namespace"] == NS


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"image": {"digest": ""}}, "image.digest is required"),
        (
            {"image": {"digest": "latest"}},
            'image.digest "latest" is not sha256:<64 lower-case hex>',
        ),
        ({"image": {"digest": "sha256:" + "AB" * 32}}, "is not sha256:<64 lower-case hex>"),
    ],
)
def test_an_unpinned_image_fails_the_render(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError, match=re.escape(message)):
        render(values)
    with pytest.raises(helm.HelmError, match=r"image\.digest is required"):
        render_raw(None)  # the source chart's own defaults


def test_a_tag_is_accepted_only_without_a_digest() -> None:
    objs = objects(render_raw({"image": {"tag": "dev"}}))
    assert {c["image"] for c in pod(objs)["containers"]} == {f"{REPOSITORY}:dev"}
    objs = render({"image": {"tag": "dev"}})
    assert {c["image"] for c in pod(objs)["containers"]} == {IMAGE}


def test_the_node_pod_runs_the_zone_and_no_ovs_or_ovn_controller() -> None:
    spec = pod(render())
    assert list(containers(spec)) == ["nb-ovsdb", "sb-ovsdb", "ovn-northd", "ovnkube-controller"]
    assert list(containers(spec, init=True)) == ["install-cni", "ovn-controller-config"]
    assert spec["hostNetwork"] is True and spec["hostPID"] is True
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["serviceAccountName"] == "ovn-kubernetes-node"
    # OVS and ovn-controller are the host's: nothing here starts them
    every = [*spec["initContainers"], *spec["containers"]]
    for c in every:
        words = " ".join([*c.get("command", []), *c.get("args", [])])
        assert not re.search(
            r"ovs-vswitchd|ovsdb-server\b|ovs-ctl|start_controller|ovnkube\.sh", words
        )
        assert not re.search(r"(^|/| )ovn-controller( |$)", words), words
        assert c["name"] not in {"ovn-controller", "ovs-vswitchd", "ovs-daemons", "ovs-node"}
        if "env" in c:
            assert env_of(c) == NODE_ENV, c["name"]


def test_the_databases_and_northd_commands() -> None:
    cs = containers(pod(render()))
    assert cs["nb-ovsdb"]["command"] == [
        "/usr/share/ovn/scripts/ovn-ctl", "run_nb_ovsdb", "--no-monitor",
        "--db-nb-file=/etc/ovn/ovnnb_db.db", f"--db-nb-sock={NB}",
        "--ovn-nb-log=-vconsole:info -vsyslog:off -vfile:off",
    ]  # fmt: skip
    assert cs["sb-ovsdb"]["command"] == [
        "/usr/share/ovn/scripts/ovn-ctl", "run_sb_ovsdb", "--no-monitor",
        "--db-sb-file=/etc/ovn/ovnsb_db.db", f"--db-sb-sock={SB}",
        "--ovn-sb-log=-vconsole:info -vsyslog:off -vfile:off",
    ]  # fmt: skip
    assert cs["ovn-northd"]["command"] == [
        "/usr/bin/ovn-northd", f"--ovnnb-db=unix:{NB}", f"--ovnsb-db=unix:{SB}",
        "--pidfile=/var/run/ovn/ovn-northd.pid", "--unixctl=/var/run/ovn/ovn-northd.ctl",
        "-vconsole:info", "-vsyslog:off",
    ]  # fmt: skip
    for name in ("nb-ovsdb", "sb-ovsdb", "ovn-northd"):
        assert "args" not in cs[name]
        probe = cs[name]["readinessProbe"]["exec"]["command"]
        assert probe[:4] == ["ovn-appctl", "--timeout=5", "-t", probe[3]]
        assert probe[3].startswith("/var/run/ovn/")
    # the zone's name in NB_Global, set through the NB socket once it answers
    hook = cs["nb-ovsdb"]["lifecycle"]["postStart"]["exec"]["command"]
    assert hook[:2] == ["/bin/sh", "-c"]
    assert f'ovn-nbctl --db=unix:{NB} --timeout=5 set NB_Global . name="$K8S_NODE" ' in hook[2]
    assert env_of(cs["nb-ovsdb"]) == NODE_ENV


def test_ovnkube_controller_runs_the_zone_of_its_node() -> None:
    c = containers(pod(render()))["ovnkube-controller"]
    assert c["command"] == ["/usr/bin/ovnkube"]
    assert flags(c["args"]) == {
        "init-node": "$(K8S_NODE)",
        "init-network-controller-manager": "$(K8S_NODE)",
        "zone": "$(K8S_NODE)",
        "enable-interconnect": None,
        "nb-address": f"unix:{NB}",
        "sb-address": f"unix:{SB}",
        "cluster-subnets": "10.244.0.0/16/24",
        "k8s-service-cidr": "10.96.0.0/12",
        "loglevel": "4",
        "nodeport": None,
        "mtu": "1400",
        "encap-type": "geneve",
        "encap-ip": "$(K8S_NODE_IP)",
        "gateway-mode": "shared",
        "k8s-apiserver": "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)",
        "k8s-token-file": "/var/run/secrets/kubernetes.io/serviceaccount/token",
        "k8s-cacert": "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
        "ovn-config-namespace": NS,
        "metrics-bind-address": "$(K8S_NODE_IP):9410",
        "ovn-metrics-bind-address": "$(K8S_NODE_IP):9476",
        "logfile": "/var/log/ovn-kubernetes/ovnkube.log",
        "logfile-maxsize": "100",
        "logfile-maxbackups": "5",
        "logfile-maxage": "5",
    }
    assert env_of(c) == NODE_ENV
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {
        "metrics": 9410, "ovn-metrics": 9476
    }  # fmt: skip


def test_every_variable_reference_resolves() -> None:
    """Kubernetes expands $(VAR) in command and args from the container's env (and the
    KUBERNETES_SERVICE_* variables every pod has); an unknown one would stay literal."""
    objs = render()
    for key in (DS, DEPLOY):
        spec = pod(objs, key)
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            known = set(env_of(c)) | {"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"}
            for word in [*c.get("command", []), *c.get("args", [])]:
                for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", word):
                    assert var in known, (c["name"], word)


def test_the_init_containers_install_the_cni_and_point_ovn_controller_at_the_zone() -> None:
    inits = containers(pod(render()), init=True)
    cni = inits["install-cni"]
    script = cni["command"][2]
    assert cni["command"][:2] == ["/bin/sh", "-ec"]
    assert "cp -f /usr/libexec/cni/ovn-k8s-cni-overlay /opt/cni/bin/" in script
    assert script.rstrip().endswith("/opt/cni/bin/ovn-k8s-cni-overlay")
    assert cni["volumeMounts"] == [{"name": "host-opt-cni-bin", "mountPath": "/opt/cni/bin"}]

    cfg = inits["ovn-controller-config"]
    assert cfg["command"][:2] == ["/bin/sh", "-ec"]
    assert "/etc/openvswitch/system-id.conf" in cfg["command"][2]
    assert 'exec "$@"' in cfg["command"][2]
    assert cfg["args"] == [
        "ovs-vsctl", "--db=unix:/var/run/openvswitch/db.sock", "--timeout=30",
        "set", "Open_vSwitch", ".",
        f"external_ids:ovn-remote=unix:{SB}",
        "external_ids:ovn-encap-type=geneve",
        "external_ids:ovn-encap-ip=$(K8S_NODE_IP)",
        "external_ids:system-id=$(K8S_NODE)",
    ]  # fmt: skip
    assert env_of(cfg) == NODE_ENV
    assert {m["mountPath"] for m in cfg["volumeMounts"]} == {
        "/var/run/openvswitch", "/etc/openvswitch"
    }  # fmt: skip
    vxlan = containers(pod(render({"network": {"encapType": "vxlan"}})), init=True)
    assert "external_ids:ovn-encap-type=vxlan" in vxlan["ovn-controller-config"]["args"]


def test_every_mount_is_a_declared_host_path() -> None:
    spec = pod(render())
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = [m for c in [*spec["initContainers"], *spec["containers"]] for m in c["volumeMounts"]]
    used = {m["name"] for m in mounts}
    assert used == set(volumes), "a mount without a volume, or a volume nobody mounts"
    assert all(set(v) == {"name", "hostPath"} for v in volumes.values())
    host = {name: v["hostPath"]["path"] for name, v in volumes.items()}
    assert set(host.values()) == {
        "/", "/var/lib/kubelet", "/etc/kubernetes", "/var/run/dbus", "/var/log/ovn-kubernetes",
        "/var/run/ovn-kubernetes", "/opt/cni/bin", "/etc/cni/net.d", "/var/run/netns",
        "/var/run/openvswitch", "/var/run/ovn", "/etc/openvswitch", "/etc/ovn",
    }  # fmt: skip
    for m in mounts:  # each host directory appears in the container where ovnkube/OVN look for it
        if host[m["name"]] != "/":
            assert m["mountPath"] == host[m["name"]], m
    (netns,) = [m for m in mounts if host[m["name"]] == "/var/run/netns"]
    assert netns["mountPropagation"] == "Bidirectional"
    (slash,) = [m for m in mounts if host[m["name"]] == "/"]
    assert slash == {"name": "host-slash", "mountPath": "/host", "readOnly": True}
    assert [m for m in mounts if m.get("mountPropagation")] == [netns]
    cs = containers(spec)
    # the sockets' directory is shared by the databases, northd and ovnkube (and the host)
    for name in ("nb-ovsdb", "sb-ovsdb", "ovn-northd", "ovnkube-controller"):
        assert "/var/run/ovn" in {m["mountPath"] for m in cs[name]["volumeMounts"]}
    for name in ("nb-ovsdb", "sb-ovsdb"):
        (etc_ovn,) = [m for m in cs[name]["volumeMounts"] if m["mountPath"] == "/etc/ovn"]
        assert not etc_ovn.get("readOnly")


def test_only_ovnkube_is_privileged() -> None:
    spec = pod(render())
    cs = containers(spec)
    assert cs["ovnkube-controller"]["securityContext"] == {"runAsUser": 0, "privileged": True}
    for name, cap in (
        ("nb-ovsdb", "NET_ADMIN"),
        ("sb-ovsdb", "NET_ADMIN"),
        ("ovn-northd", "SYS_NICE"),
    ):
        sc = cs[name]["securityContext"]
        assert sc["capabilities"] == {"add": [cap]}
        assert "privileged" not in sc and sc["allowPrivilegeEscalation"] is False
    for c in spec["initContainers"]:
        sc = c["securityContext"]
        assert sc["capabilities"] == {"drop": ["ALL"]} and "privileged" not in sc
        assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False


def test_the_cluster_manager_runs_on_the_control_plane() -> None:
    objs = render()
    deploy = objs[DEPLOY]
    assert deploy["spec"]["replicas"] == 1
    spec = pod(objs, DEPLOY)
    assert spec["hostNetwork"] is True
    assert spec["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    assert {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists",
            "effect": "NoSchedule"} in spec["tolerations"]  # fmt: skip
    assert {"operator": "Exists"} not in spec["tolerations"]
    assert spec["serviceAccountName"] == "ovn-kubernetes-cluster-manager"
    assert spec["securityContext"]["runAsNonRoot"] is True
    (c,) = spec["containers"]
    assert c["name"] == "ovnkube-cluster-manager" and c["command"] == ["/usr/bin/ovnkube"]
    f = flags(c["args"])
    assert f["init-cluster-manager"] == "$(K8S_NODE)"
    assert "enable-interconnect" in f and f["enable-interconnect"] is None
    assert f["cluster-subnets"] == "10.244.0.0/16/24" and f["k8s-service-cidr"] == "10.96.0.0/12"
    assert f["metrics-bind-address"] == "$(K8S_NODE_IP):9411"
    assert f["k8s-token-file"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    # it allocates from the API only: no OVN database, no node role
    assert not {"nb-address", "sb-address", "init-node", "zone"} & set(f)
    assert not any(k.startswith("init-") and k != "init-cluster-manager" for k in f)
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "volumeMounts" not in c and "volumes" not in spec


def test_rbac_grants_exactly_what_ovnkube_needs() -> None:
    objs = render()
    assert rules_of(objs, "ClusterRole", "ovn-kubernetes-node") == [
        *READS,
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"],
         "verbs": ["create", "patch", "update"]},
        {"apiGroups": [""], "resources": ["pods/status", "nodes/status", "namespaces/status"],
         "verbs": ["patch", "update"]},
    ]  # fmt: skip
    assert rules_of(objs, "ClusterRole", "ovn-kubernetes-cluster-manager") == [
        *READS,
        {"apiGroups": [""], "resources": ["nodes/status", "services/status", "pods/status"],
         "verbs": ["patch", "update"]},
        {"apiGroups": ["k8s.ovn.org"],
         "resources": ["egressips", "egressfirewalls/status", "egressips/status",
                       "egressqoses/status", "egressservices/status",
                       "adminpolicybasedexternalroutes/status"],
         "verbs": ["patch", "update"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch", "update"]},
    ]  # fmt: skip
    assert rules_of(objs, "Role", "ovn-kubernetes-configmaps") == [
        {"apiGroups": [""], "resources": ["configmaps"],
         "verbs": ["get", "list", "watch", "create", "update", "patch"]}
    ]  # fmt: skip
    assert rules_of(objs, "Role", "ovn-kubernetes-leader-election") == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "verbs": ["get", "list", "watch", "create", "update", "patch"]}
    ]  # fmt: skip
    for role in ("ovn-kubernetes-configmaps", "ovn-kubernetes-leader-election"):
        assert objs[("Role", role)]["metadata"]["namespace"] == NS
    # no wildcard, no delete, no secrets anywhere
    for (kind, _), obj in objs.items():
        for rule in obj.get("rules", []) if kind.endswith("Role") else []:
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
            assert not {"delete", "deletecollection", "escalate", "bind"} & set(rule["verbs"])
            assert "secrets" not in rule["resources"]
    bindings = {
        (kind, name): (o["roleRef"]["kind"], o["roleRef"]["name"],
                       [(s["name"], s["namespace"]) for s in o["subjects"]])
        for (kind, name), o in objs.items()
        if kind.endswith("Binding")
    }  # fmt: skip
    node, cm = ("ovn-kubernetes-node", NS), ("ovn-kubernetes-cluster-manager", NS)
    assert bindings == {
        ("ClusterRoleBinding", "ovn-kubernetes-node"):
            ("ClusterRole", "ovn-kubernetes-node", [node]),
        ("ClusterRoleBinding", "ovn-kubernetes-cluster-manager"):
            ("ClusterRole", "ovn-kubernetes-cluster-manager", [cm]),
        ("RoleBinding", "ovn-kubernetes-node-configmaps"):
            ("Role", "ovn-kubernetes-configmaps", [node]),
        ("RoleBinding", "ovn-kubernetes-cluster-manager-configmaps"):
            ("Role", "ovn-kubernetes-configmaps", [cm]),
        ("RoleBinding", "ovn-kubernetes-cluster-manager-leader-election"):
            ("Role", "ovn-kubernetes-leader-election", [cm]),
        # the zone's network controller elects a leader on a Lease too (ovnkube.go, 2023)
        ("RoleBinding", "ovn-kubernetes-node-leader-election"):
            ("Role", "ovn-kubernetes-leader-election", [node]),
    }  # fmt: skip


def test_values_are_configurable() -> None:
    objs = render(
        {
            "network": {
                "clusterSubnets": ["10.128.0.0/14/23", "fd00:10:244::/48/64"],
                "serviceCIDRs": ["10.96.0.0/16", "fd00:10:96::/112"],
                "mtu": 8900,
                "gatewayMode": "local",
                "gatewayInterface": "breth0",
            },
            "kubernetes": {"apiServer": "https://10.0.0.10:6443"},
            "logLevel": 5,
            "ovnLogLevel": "dbg",
            "ovnkube": {"controllerInitFlag": "init-ovnkube-controller",
                        "extraArgs": ["--enable-multicast"]},
            "metrics": {"port": 19410},
            "node": {"resources": {"ovnkubeController": {"limits": {"memory": "1Gi"}}}},
            "imagePullSecrets": [{"name": "regcred"}],
            "podAnnotations": {"example.org/a": "b"},
            "controlPlane": {"replicas": 3},
        }
    )  # fmt: skip
    spec = pod(objs)
    cs = containers(spec)
    f = flags(cs["ovnkube-controller"]["args"])
    assert f["cluster-subnets"] == "10.128.0.0/14/23,fd00:10:244::/48/64"
    assert f["k8s-service-cidr"] == "10.96.0.0/16,fd00:10:96::/112"
    assert f["mtu"] == "8900" and f["gateway-mode"] == "local"
    assert f["gateway-interface"] == "breth0"
    assert f["k8s-apiserver"] == "https://10.0.0.10:6443"
    assert f["loglevel"] == "5" and f["init-ovnkube-controller"] == "$(K8S_NODE)"
    assert "init-network-controller-manager" not in f and "enable-multicast" in f
    assert f["metrics-bind-address"] == "$(K8S_NODE_IP):19410"
    assert "--ovn-nb-log=-vconsole:dbg -vsyslog:off -vfile:off" in cs["nb-ovsdb"]["command"]
    assert "-vconsole:dbg" in cs["ovn-northd"]["command"]
    assert cs["ovnkube-controller"]["resources"]["limits"] == {"memory": "1Gi"}
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert objs[DS]["spec"]["template"]["metadata"]["annotations"] == {"example.org/a": "b"}
    deploy = objs[DEPLOY]
    assert deploy["spec"]["replicas"] == 3
    cm = flags(pod(objs, DEPLOY)["containers"][0]["args"])
    assert cm["cluster-subnets"] == "10.128.0.0/14/23,fd00:10:244::/48/64"
    assert cm["k8s-apiserver"] == "https://10.0.0.10:6443"


def test_rbac_and_service_accounts_can_be_left_to_the_cluster() -> None:
    objs = render(
        {
            "rbac": {"create": False},
            "serviceAccount": {"create": False, "nodeName": "ovnkube-node",
                               "clusterManagerName": "ovnkube-cluster-manager"},
        }
    )  # fmt: skip
    assert set(objs) == {DS, DEPLOY}
    assert pod(objs)["serviceAccountName"] == "ovnkube-node"
    assert pod(objs, DEPLOY)["serviceAccountName"] == "ovnkube-cluster-manager"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"network": {"gatewayMode": "hybrid"}}, 'network.gatewayMode "hybrid" is not shared or local'),
        ({"network": {"encapType": "stt"}}, 'network.encapType "stt" is not geneve or vxlan'),
        ({"network": {"clusterSubnets": ["10.244.0.0/16"]}},
         'network.clusterSubnets entry "10.244.0.0/16" is not CIDR/hostSubnetLength'),
        ({"network": {"clusterSubnets": ["10.244.0.0/16/24", "pods"]}},
         'network.clusterSubnets entry "pods" is not CIDR/hostSubnetLength'),
        ({"network": {"clusterSubnets": ["10.244.0.0/24/16"]}},
         'network.clusterSubnets entry "10.244.0.0/24/16": the host subnet length must be longer'),
        ({"network": {"clusterSubnets": ["300.1.0.0/16/24"]}},
         'network.clusterSubnets entry "300.1.0.0/16/24" is not CIDR/hostSubnetLength'),
        ({"network": {"clusterSubnets": []}}, "network.clusterSubnets is empty"),
        ({"network": {"clusterSubnets": "10.244.0.0/16/24"}},
         "network.clusterSubnets must be a list"),
        ({"network": {"serviceCIDRs": ["10.96.0.0/33"]}},
         'network.serviceCIDRs entry "10.96.0.0/33" is not a CIDR'),
        ({"network": {"serviceCIDRs": []}}, "network.serviceCIDRs is empty"),
        ({"network": {"mtu": 575}}, "network.mtu 575 is out of range 576..9216"),
        ({"network": {"mtu": 9217}}, "network.mtu 9217 is out of range 576..9216"),
        ({"network": {"mtu": "jumbo"}}, 'network.mtu "jumbo" is not a number'),
        ({"network": {"mtu": 1400.5}}, "network.mtu 1400.5 is not a whole number"),
        ({"logLevel": 7}, "logLevel 7 is not one of 0..5"),
        ({"ovnLogLevel": "verbose"}, 'ovnLogLevel "verbose" is not one of off'),
        ({"ovnkube": {"controllerInitFlag": "init-master"}},
         'ovnkube.controllerInitFlag "init-master" is not init-network-controller-manager'),
        ({"kubernetes": {"apiServer": "10.0.0.10:6443"}},
         'kubernetes.apiServer "10.0.0.10:6443" is not an http(s)://host:port URL'),
        ({"network": {"gatewayInterface": "eth0; reboot"}},
         'network.gatewayInterface "eth0; reboot" is not an interface name'),
        ({"metrics": {"port": 70000}}, "metrics.port 70000 is not a port"),
    ],
)  # fmt: skip
def test_bad_values_fail_the_render_naming_the_value(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError, match=re.escape(message)):
        render(values)


@pytest.mark.parametrize("mtu", [576, 1400, 9216])
def test_mtu_bounds_are_inclusive(mtu: int) -> None:
    c = containers(pod(render({"network": {"mtu": mtu}})))["ovnkube-controller"]
    assert f"--mtu={mtu}" in c["args"]


def test_every_value_is_documented() -> None:
    """Each key in values.yaml has a `# --` comment, or lies under a documented key."""
    assert undocumented_values(CHART / "values.yaml") == []
