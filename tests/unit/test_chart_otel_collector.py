"""The OpenTelemetry Collector chart (charts/otel-collector), checked with real Helm: it lints
clean (strict) and renders; each collector's configuration uses only components it defines,
from the distribution it names, with the RBAC and host mounts its receivers need; bad values
fail the render with the value's name (issue: the seeds' node image, item 3)."""

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
    merge_values,
    undocumented_values,
)

CHART = Path(__file__).resolve().parents[2] / "charts" / "otel-collector"
PINNED = {"image": {"digest": DIGEST}, "otlp": {"endpoint": "otlp.example:4317"}}
COMPONENTS = ("receivers", "processors", "exporters", "extensions")


def render(values: dict[str, Any] | None = None) -> dict[tuple[str, str], Any]:
    """The rendered objects by (kind, name), with PINNED under ``values``."""
    with helm.Chart.load(str(CHART)) as chart:
        rendered = chart.render(
            merge_values(PINNED, values or {}), name="obs", namespace="monitoring"
        )
    docs = [
        d
        for name, text in rendered.items()
        if name.endswith(".yaml")
        for d in yaml.safe_load_all(text)
        if d
    ]
    objs = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    assert len(objs) == len(docs)
    return objs


def config(objs: dict[tuple[str, str], Any], component: str) -> dict[str, Any]:
    cfg = yaml.safe_load(
        objs[("ConfigMap", f"obs-otel-collector-{component}")]["data"]["config.yaml"]
    )
    assert isinstance(cfg, dict)
    return cfg


def assert_complete(cfg: dict[str, Any]) -> None:
    """What the collector checks at start: every component a pipeline (or the service) names
    is defined, and every defined receiver, processor and exporter is in a pipeline."""
    used = {"receivers": set(), "processors": set(), "exporters": set()}
    for pipeline in cfg["service"]["pipelines"].values():
        for kind in used:
            names = pipeline.get(kind, [])
            assert names or kind == "processors", pipeline
            missing = set(names) - set(cfg.get(kind) or {})
            assert not missing, f"{kind} {missing} used but not defined"
            used[kind] |= set(names)
    for kind, names in used.items():
        assert set(cfg.get(kind) or {}) == names, f"{kind} defined but unused"
    assert set(cfg["service"]["extensions"]) == set(cfg["extensions"])


def pod(objs: dict[tuple[str, str], Any], kind: str, name: str) -> dict[str, Any]:
    return dict(objs[(kind, name)]["spec"]["template"]["spec"])


def test_chart_yaml() -> None:
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["apiVersion"] == "v2" and meta["name"] == "otel-collector"
    assert meta["version"] == "0.1.0" and isinstance(meta["appVersion"], str)
    assert meta["kubeVersion"] == ">=1.34.0-0"


def test_lints_clean_with_a_pinned_image_and_an_endpoint() -> None:
    assert_lints_clean(CHART, PINNED)


def test_the_node_collector_by_default() -> None:
    objs = render()
    assert set(objs) == {
        ("ConfigMap", "obs-otel-collector-node"),
        ("DaemonSet", "obs-otel-collector-node"),
        ("ServiceAccount", "obs-otel-collector"),
        ("ClusterRole", "obs-otel-collector"),
        ("ClusterRoleBinding", "obs-otel-collector"),
    }
    cfg = config(objs, "node")
    assert_complete(cfg)
    assert set(cfg["receivers"]) == {
        "otlp", "hostmetrics", "kubeletstats", "filelog", "prometheus/dcgm"
    }  # fmt: skip
    assert cfg["exporters"] == {
        "otlp": {"endpoint": "otlp.example:4317", "compression": "gzip", "tls": {"insecure": False}}
    }
    kubelet = cfg["receivers"]["kubeletstats"]
    assert kubelet["auth_type"] == "serviceAccount"
    assert kubelet["endpoint"] == "https://${env:K8S_NODE_NAME}:10250"
    assert cfg["receivers"]["hostmetrics"]["root_path"] == "/hostfs"
    assert cfg["receivers"]["filelog"]["include"] == ["/var/log/pods/*/*/*.log"]
    assert cfg["receivers"]["filelog"]["exclude"] == [
        "/var/log/pods/monitoring_obs-otel-collector-node-*_*/*/*.log"
    ]
    (scrape,) = cfg["receivers"]["prometheus/dcgm"]["config"]["scrape_configs"]
    (sd,) = scrape["kubernetes_sd_configs"]
    assert sd["selectors"] == [
        {"role": "pod", "field": "spec.nodeName=${env:K8S_NODE_NAME}",
         "label": "app=nvidia-dcgm-exporter"}
    ]  # fmt: skip
    assert scrape["relabel_configs"][0]["regex"] == "9400"
    assert cfg["processors"]["k8sattributes"]["filter"] == {"node_from_env_var": "K8S_NODE_NAME"}

    spec = pod(objs, "DaemonSet", "obs-otel-collector-node")
    (c,) = spec["containers"]
    assert c["image"] == f"otel/opentelemetry-collector-contrib@{DIGEST}"
    assert c["args"] == ["--config=/conf/config.yaml"]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"]}
    assert env == {"K8S_NODE_NAME": "spec.nodeName", "MY_POD_IP": "status.podIP"}
    assert {p["name"]: p.get("hostPort") for p in c["ports"]} == {
        "health": None, "otlp-grpc": 4317, "otlp-http": 4318
    }  # fmt: skip
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["hostfs"] == {
        "name": "hostfs", "mountPath": "/hostfs", "readOnly": True,
        "mountPropagation": "HostToContainer",
    }  # fmt: skip
    assert mounts["varlogpods"]["readOnly"] is True
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["hostfs"]["hostPath"] == {"path": "/"}
    assert volumes["varlogpods"]["hostPath"] == {"path": "/var/log/pods"}
    assert volumes["config"]["configMap"]["name"] == "obs-otel-collector-node"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["serviceAccountName"] == "obs-otel-collector"


def test_rbac_grants_what_the_enabled_receivers_read() -> None:
    rules = render()[("ClusterRole", "obs-otel-collector")]["rules"]
    granted = {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    assert {
        ("", "pods"),
        ("", "nodes/stats"),
        ("", "nodes/proxy"),
        ("apps", "replicasets"),
    } <= granted
    assert all(set(rule["verbs"]) <= {"get", "list", "watch"} for rule in rules), "read-only"
    no_kubelet = render({"node": {"kubeletStats": False}})[("ClusterRole", "obs-otel-collector")]
    assert ("", "nodes/stats") not in {
        (g, r) for rule in no_kubelet["rules"] for g in rule["apiGroups"] for r in rule["resources"]
    }
    binding = render()[("ClusterRoleBinding", "obs-otel-collector")]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "obs-otel-collector", "namespace": "monitoring"}
    ]


def test_receivers_turned_off_leave_no_config_mount_or_pipeline_entry() -> None:
    objs = render(
        {"node": {"hostMetrics": False, "logs": False, "dcgmExporter": {"enabled": False},
                  "kubeletStats": False, "otlpHostPorts": False}}
    )  # fmt: skip
    cfg = config(objs, "node")
    assert_complete(cfg)
    assert set(cfg["receivers"]) == {"otlp"}
    (c,) = pod(objs, "DaemonSet", "obs-otel-collector-node")["containers"]
    assert [m["name"] for m in c["volumeMounts"]] == ["config"]
    assert all("hostPort" not in p for p in c["ports"])


def test_the_cluster_collector_is_one_replica_with_cluster_metrics_and_events() -> None:
    objs = render({"cluster": {"enabled": True}, "otlp": {"protocol": "http",
                   "endpoint": "https://otlp.example:4318", "headers": {"x-tenant": "gpu"}}})  # fmt: skip
    deployment = objs[("Deployment", "obs-otel-collector-cluster")]
    assert deployment["spec"]["replicas"] == 1
    cfg = config(objs, "cluster")
    assert_complete(cfg)
    assert set(cfg["receivers"]) == {"k8s_cluster", "k8sobjects"}
    assert cfg["receivers"]["k8sobjects"]["objects"] == [
        {"name": "events", "group": "events.k8s.io", "mode": "watch"}
    ]
    assert cfg["exporters"]["otlphttp"]["endpoint"] == "https://otlp.example:4318"
    assert cfg["exporters"]["otlphttp"]["headers"] == {"x-tenant": "gpu"}
    assert_complete(config(objs, "node"))
    rules = objs[("ClusterRole", "obs-otel-collector")]["rules"]
    granted = {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    assert {("events.k8s.io", "events"), ("apps", "deployments"), ("batch", "jobs")} <= granted
    (c,) = pod(objs, "Deployment", "obs-otel-collector-cluster")["containers"]
    assert [m["name"] for m in c["volumeMounts"]] == ["config"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"otlp": {"endpoint": ""}}, "otlp.endpoint is required"),
        ({"distribution": "core"}, "distribution core has no Kubernetes receivers"),
        ({"distribution": "custom"}, 'distribution "custom" is not one of contrib, k8s, core'),
        ({"otlp": {"protocol": "http"}}, "protocol http needs an http:// or https:// URL"),
        ({"otlp": {"protocol": "udp"}}, 'otlp.protocol "udp" is not grpc or http'),
        ({"image": {"digest": "latest"}}, "is not sha256:<64 lower-case hex>"),
        ({"image": {"digest": ""}}, "image.digest is required"),
    ],
)
def test_bad_values_fail_the_render_naming_the_value(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError, match=re.escape(message)):
        render(values)


def test_every_value_is_documented() -> None:
    """Each key in values.yaml has a `# --` comment, or lies under a documented key."""
    assert undocumented_values(CHART / "values.yaml") == []
