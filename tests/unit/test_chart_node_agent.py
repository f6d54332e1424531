"""The node agent's chart (charts/node-agent), packaged by the helm-chart builder and checked with
real Helm: it lints clean (strict), renders with its defaults once nvkr pinned the image, and the
DaemonSet runs the agent the way the agent's daemon mode expects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

helm = pytest.importorskip("helm_python")

from tests.helpers.charts import (  # noqa: E402
    DIGEST,
    assert_lints_clean,
    helm_checks,
    package_chart,
    undocumented_values,
)

CHART = Path(__file__).resolve().parents[2] / "charts" / "node-agent"
REPOSITORY = "registry.example/nvkr/node-agent"


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """charts/node-agent packaged by the builder with a fake image index digest."""
    return package_chart(
        tmp_path_factory.mktemp("node-agent"),
        CHART,
        version="0.1.0",
        appVersion="0.1.0",
        images={"image": {"artifact": "agent-image", "repository": REPOSITORY}},
    )


def render(chart: Path, values: dict[str, Any] | None = None) -> dict[str, Any]:
    """Rendered manifests by kind (one object of each kind in this chart)."""
    with helm.Chart.load(str(chart)) as c:
        rendered = c.render(values, name="gpu", namespace="nvkr-system")
    docs = [
        d
        for name, text in rendered.items()
        if name.endswith(".yaml")
        for d in yaml.safe_load_all(text)
        if d
    ]
    by_kind = {d["kind"]: d for d in docs}
    assert len(by_kind) == len(docs)
    return by_kind


def agent_container(objs: dict[str, Any]) -> dict[str, Any]:
    (container,) = objs["DaemonSet"]["spec"]["template"]["spec"]["containers"]
    return dict(container)


def test_chart_yaml() -> None:
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["apiVersion"] == "v2" and meta["name"] == "node-agent"
    assert meta["version"] == "0.1.0" and meta["appVersion"] == "0.1.0"  # a string
    assert meta["kubeVersion"] == ">=1.34.0-0"


def test_packaged_chart_lints_and_renders_with_defaults(packaged: Path) -> None:
    rendered = helm_checks(packaged)
    assert {
        "node-agent/templates/daemonset.yaml",
        "node-agent/templates/serviceaccount.yaml",
        "node-agent/templates/clusterrole.yaml",
        "node-agent/templates/clusterrolebinding.yaml",
        "node-agent/templates/NOTES.txt",
    } <= set(rendered)
    assert f"{REPOSITORY}@{DIGEST}" in rendered["node-agent/templates/NOTES.txt"]


def test_daemonset_runs_the_agent_on_gpu_nodes(packaged: Path) -> None:
    objs = render(packaged)
    pod = objs["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    c = agent_container(objs)
    assert c["image"] == f"{REPOSITORY}@{DIGEST}"
    assert c["command"] == ["/usr/bin/node-agent"]
    for flag in ("--listen=:8080", "--interval=60s", "--apply-node-labels", "--sysfs=/host/sys"):
        assert flag in c["args"]
    assert c["env"][0] == {
        "name": "NODE_NAME",
        "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
    }
    assert c["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["resources"]["requests"] and c["resources"]["limits"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    sys_mount = next(m for m in c["volumeMounts"] if m["name"] == "sys")
    assert sys_mount == {"name": "sys", "mountPath": "/host/sys", "readOnly": True}
    sys_volume = next(v for v in pod["volumes"] if v["name"] == "sys")
    assert sys_volume["hostPath"]["path"] == "/sys"
    # the label file goes to a writable scratch dir (the root filesystem is read-only)
    assert "--labels-file=/run/nvkr/node-labels.env" in c["args"]
    assert any(m["mountPath"] == "/run/nvkr" for m in c["volumeMounts"])


def test_rbac_lets_the_agent_label_its_node(packaged: Path) -> None:
    objs = render(packaged)
    sa = objs["ServiceAccount"]["metadata"]["name"]
    assert objs["DaemonSet"]["spec"]["template"]["spec"]["serviceAccountName"] == sa
    assert objs["ClusterRole"]["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}
    ]
    binding = objs["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == objs["ClusterRole"]["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa, "namespace": "nvkr-system"}
    ]


def test_values_are_configurable(packaged: Path) -> None:
    objs = render(
        packaged,
        {
            # Helm merges maps: a default key is dropped with null
            "nodeSelector": {"nvidia.com/gpu.present": None, "node-role.example/gpu": "yes"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu"}],
            "agent": {"interval": "5m", "port": 9090, "applyNodeLabels": False},
            "rbac": {"create": False},
            "serviceAccount": {"create": False, "name": "existing"},
            "priorityClassName": "system-node-critical",
        },
    )
    pod = objs["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"node-role.example/gpu": "yes"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "gpu"}]
    assert pod["serviceAccountName"] == "existing"
    assert pod["priorityClassName"] == "system-node-critical"
    c = agent_container(objs)
    assert "--interval=5m" in c["args"] and "--listen=:9090" in c["args"]
    assert "--apply-node-labels" not in c["args"]
    assert c["ports"][0]["containerPort"] == 9090
    assert not {"ClusterRole", "ClusterRoleBinding", "ServiceAccount"} & set(objs)


def test_source_chart_refuses_to_render_an_unpinned_image() -> None:
    with (
        helm.Chart.load(str(CHART)) as chart,
        pytest.raises(helm.HelmError, match=r"image\.digest is required"),
    ):
        chart.render(name="gpu", namespace="default")
    with helm.Chart.load(str(CHART)) as chart, pytest.raises(helm.HelmError, match="sha256"):
        chart.render({"image": {"digest": "latest"}}, name="gpu", namespace="default")
    assert_lints_clean(CHART, {"image": {"digest": DIGEST}})


def test_every_value_is_documented() -> None:
    """Each key in values.yaml has a `# --` comment, or lies under a documented key."""
    assert undocumented_values(CHART / "values.yaml") == []
