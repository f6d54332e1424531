"""The helm-chart builder on a chart of OVN-Kubernetes' upstream shape (helm/ovn-kubernetes at
51b98b91, ../shared facts in recipes/network/): the chart in a subdirectory of its source, CRDs
in ``crds/`` that are symlinks to ``../../../dist/templates/*.yaml.j2`` (outside the chart, inside
the repository), local subcharts switched by ``tags``, no root ``values.yaml`` but one values
file per mode, and switches that are booleans and integers. Upstream cannot be reached here: the
stand-in is written in miniature with that layout, and every archive is loaded, linted and
rendered by real Helm.
"""

from __future__ import annotations

import os
from pathlib import Path

import pydantic
import pytest
import yaml

pytest.importorskip("helm_python")

from nvkr.builders.helm_chart.artifact import HelmChartArtifact
from nvkr.errors import BuildError, RecipeError
from nvkr.helm.chart import load_dir
from nvkr.store import Store
from tests.helpers.charts import (
    DIGEST,
    build_chart,
    helm_checks,
    members,
    output,
    plan_chart,
)

CHART = "helm/ovn-kubernetes"
CRD = "k8s.ovn.org_egressips.yaml"
CRD_TEXT = (
    "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
    "metadata:\n  name: egressips.k8s.ovn.org\nspec:\n  group: k8s.ovn.org\n"
    "  names: {kind: EgressIP, listKind: EgressIPList, plural: egressips, singular: egressip}\n"
    "  scope: Cluster\n  versions:\n  - name: v1\n    served: true\n    storage: true\n"
    "    schema:\n      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}\n"
)


def _subchart(name: str) -> dict[str, str]:
    return {
        f"charts/{name}/Chart.yaml": f"apiVersion: v2\nname: {name}\nversion: 1.2.0\n",
        f"charts/{name}/templates/daemonset.yaml": (
            "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n"
            f"  name: {name}\n  namespace: {{{{ .Release.Namespace }}}}\n"
            f"spec:\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n"
            f"    metadata: {{labels: {{app: {name}}}}}\n    spec:\n      containers:\n"
            f"      - name: {name}\n"
            '        image: "{{ .Values.global.image.repository }}:{{ .Values.global.image.tag }}"\n'
            "        env:\n        - name: OVN_MTU\n"
            '          value: "{{ .Values.global.mtu }}"\n'
            "        - name: K8S_APISERVER\n"
            '          value: "{{ .Values.global.k8sAPIServer }}"\n'
        ),
    }


def _upstream(root: Path) -> Path:
    """The stand-in repository at ``root``: ``dist/templates`` and ``helm/ovn-kubernetes``."""
    files = {
        f"dist/templates/{CRD}.j2": CRD_TEXT,
        "README.md": "OVN-Kubernetes (stand-in)\n",
        f"{CHART}/Chart.yaml": (
            "apiVersion: v2\nname: ovn-kubernetes\ndescription: OVN-Kubernetes (stand-in)\n"
            "version: 1.2.0\nappVersion: 1.2.0\ndependencies:\n"
            "  - {name: ovnkube-node, version: 1.2.0, tags: [ovnkube-node]}\n"
            "  - {name: ovs-node, version: 1.2.0, tags: [ovs-node]}\n"
        ),
        f"{CHART}/values-single-node-zone.yaml": (
            "# interconnect: one zone per node\ntags:\n  ovnkube-node: true\n"
            "  ovs-node: true  # the chart runs Open vSwitch unless told the host does\n"
            "global:\n  image:\n    repository: ghcr.io/ovn-kubernetes/ovn-kubernetes/ovn-kube-ubuntu\n"
            "    tag: master\n  mtu: 1400\n  k8sAPIServer: https://172.25.0.2:6443\n"
            "skipCallToK8s: false\n"
        ),
        f"{CHART}/values-no-ic.yaml": "tags:\n  ovnkube-node: false\n  ovs-node: true\n",
        f"{CHART}/templates/_helpers.tpl": '{{- define "ovn.name" -}}ovn-kubernetes{{- end }}\n',
        **{f"{CHART}/{k}": v for k, v in _subchart("ovnkube-node").items()},
        **{f"{CHART}/{k}": v for k, v in _subchart("ovs-node").items()},
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / CHART / "crds").mkdir()
    os.symlink(f"../../../dist/templates/{CRD}.j2", root / CHART / "crds" / CRD)
    return root


#: what a recipe sets over values-single-node-zone.yaml: OVS on the host, the API server, the
#: MTU, the offline-rendering switches
OVERRIDES: dict[str, str | bool | int] = {
    "tags.ovs-node": False,
    "skipCallToK8s": True,
    "global.skipCallToK8s": True,
    "global.mtu": 8900,
    "global.k8sAPIServer": "https://10.0.0.1:6443",
}


def test_a_chart_of_upstreams_shape_is_packaged_with_its_values_file_and_links_followed(
    tmp_path: Path,
) -> None:
    """The CRD symlinked from outside the chart is packaged as the file it points to (as
    ``helm package`` does), the named values file becomes values.yaml with the recipe's typed
    values set in place (its comments kept), and Helm renders the node zone without OVS."""
    repo = _upstream(tmp_path / "ovn-kubernetes")
    store = Store(tmp_path / "store")
    result = build_chart(
        store, repo, subdir=CHART, valuesFile="values-single-node-zone.yaml", values=OVERRIDES
    )
    files = members(output(store, result, "primary"))
    assert files[f"ovn-kubernetes/crds/{CRD}"].decode() == CRD_TEXT
    assert "ovn-kubernetes/values-single-node-zone.yaml" in files  # the chart's own file stays
    values = files["ovn-kubernetes/values.yaml"].decode()
    assert values.startswith("# interconnect: one zone per node\ntags:\n")
    assert "  ovs-node: false  # the chart runs Open vSwitch unless told the host does\n" in values
    loaded = yaml.safe_load(values)
    assert loaded["tags"] == {"ovnkube-node": True, "ovs-node": False}
    assert loaded["global"]["mtu"] == 8900 and loaded["skipCallToK8s"] is True
    assert loaded["global"]["skipCallToK8s"] is True
    tgz = tmp_path / "chart.tgz"
    tgz.write_bytes(output(store, result, "primary"))
    rendered = helm_checks(tgz)
    names = sorted(rendered)
    assert names == ["ovn-kubernetes/charts/ovnkube-node/templates/daemonset.yaml"], names
    ds = yaml.safe_load(rendered[names[0]])
    env = {e["name"]: e["value"] for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env == {"OVN_MTU": "8900", "K8S_APISERVER": "https://10.0.0.1:6443"}
    log = store.blob_path(result["log"]).read_text()
    assert f"followed symlink crds/{CRD} -> ../../../dist/templates/{CRD}.j2" in log
    assert "values.yaml: values-single-node-zone.yaml\n" in log


def test_an_image_pin_can_ride_in_the_tag(tmp_path: Path) -> None:
    """Upstream's chart prints its image as repository:tag (global.image): the pin writes the
    repository and TAG@sha256:<hex> as the tag, no digest key, and the rendered image is the
    pinned one; a digest pin's params keep the key they had (no tag field)."""
    repo = _upstream(tmp_path / "ovn-kubernetes")
    store = Store(tmp_path / "store")
    pin = {"artifact": "ovnkube-image", "repository": "ghcr.io/nvkr/ovnkube", "tag": "1.2.0"}
    result = build_chart(
        store,
        repo,
        subdir=CHART,
        valuesFile="values-single-node-zone.yaml",
        images={"global.image": pin},
        values=OVERRIDES,
    )
    files = members(output(store, result, "primary"))
    image = yaml.safe_load(files["ovn-kubernetes/values.yaml"])["global"]["image"]
    assert image == {"repository": "ghcr.io/nvkr/ovnkube", "tag": f"1.2.0@{DIGEST}"}
    tgz = tmp_path / "chart.tgz"
    tgz.write_bytes(output(store, result, "primary"))
    (manifest,) = helm_checks(tgz).values()
    container = yaml.safe_load(manifest)["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"ghcr.io/nvkr/ovnkube:1.2.0@{DIGEST}"
    spec, _, _ = plan_chart(store, repo, subdir=CHART, images={"global.image": pin})
    assert spec.params["images"]["global.image"]["tag"] == "1.2.0"
    by_digest = {k: v for k, v in pin.items() if k != "tag"}
    spec, _, _ = plan_chart(store, repo, subdir=CHART, images={"global.image": by_digest})
    assert "tag" not in spec.params["images"]["global.image"]
    with pytest.raises(BuildError, match=r"values key global\.image\.tag is also 'global\.image'"):
        build_chart(
            store,
            repo,
            subdir=CHART,
            valuesFile="values-single-node-zone.yaml",
            images={"global.image": pin},
            values={"global.image.tag": "latest"},
        )


def test_values_file_and_typed_values_enter_the_key_only_when_set(tmp_path: Path) -> None:
    """``valuesFile`` is in the params only when the recipe sets it (every other chart keeps its
    key); a boolean and a string of the same text are different values and different keys."""
    repo = _upstream(tmp_path / "ovn-kubernetes")
    store = Store(tmp_path / "store")
    plain, _, _ = plan_chart(store, repo, subdir=CHART)
    assert "valuesFile" not in plain.params
    with_file, _, _ = plan_chart(store, repo, subdir=CHART, valuesFile="values-no-ic.yaml")
    assert with_file.params["valuesFile"] == "values-no-ic.yaml"
    as_bool, a, _ = plan_chart(store, repo, subdir=CHART, values={"skipCallToK8s": True})
    _, b, _ = plan_chart(store, repo, subdir=CHART, values={"skipCallToK8s": "true"})
    assert as_bool.params["values"] == {"skipCallToK8s": True} and a.key != b.key


def test_a_values_file_the_chart_does_not_have_names_the_ones_it_has(tmp_path: Path) -> None:
    """A path source's chart is on disk when the plan is made: a valuesFile it lacks is a recipe
    error then, before anything builds, naming the field, the directory and the values files it
    has. A git source's tree is read only when the chart builds: the same check refuses it
    there, with the same list."""
    repo = _upstream(tmp_path / "ovn-kubernetes")
    store = Store(tmp_path / "store")
    with pytest.raises(RecipeError) as planned:
        plan_chart(store, repo, subdir=CHART, valuesFile="values.yaml")
    message = planned.value.message
    assert f"valuesFile: valuesFile 'values.yaml': the chart {repo / CHART} has no such file" in (
        message
    )
    assert "(its values files: values-no-ic.yaml, values-single-node-zone.yaml)" in message
    # the build's own check, on the tree it extracted (what a git source gets)
    from nvkr.builders.helm_chart.builder import _values_from_file

    chart = load_dir(repo / CHART, "chart-src", lambda _m: None, within=repo)
    with pytest.raises(BuildError) as built:
        _values_from_file(chart, "values.yaml", "chart-src")
    assert "valuesFile 'values.yaml': the chart has no such file" in built.value.message
    assert "(its values files: values-no-ic.yaml, values-single-node-zone.yaml)" in (
        built.value.message
    )
    # a chart with its own values.yaml names it too (a user's local chart, say)
    (repo / CHART / "values.yaml").write_text("tags: {}\n")
    with pytest.raises(RecipeError, match=r"values-single-node-zone.yaml, values.yaml\)"):
        plan_chart(store, repo, subdir=CHART, valuesFile="values-x.yaml")
    chart = load_dir(repo / CHART, "chart-src", lambda _m: None, within=repo)
    with pytest.raises(
        BuildError,
        match=r"\(its values files: values-no-ic.yaml, "
        r"values-single-node-zone.yaml, values.yaml\)",
    ):
        _values_from_file(chart, "values-x.yaml", "chart-src")


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ("../../../../outside.yaml", "which leads out of the source"),
        ("/etc/passwd", "an absolute path"),
    ],
)
def test_a_chart_link_leaving_the_sources_tree_is_refused(
    tmp_path: Path, target: str, problem: str
) -> None:
    """Inside the source's tree a link is followed; one that leaves it is refused, naming the
    link (relative to the chart) and its target as written."""
    repo = _upstream(tmp_path / "ovn-kubernetes")
    os.symlink(target, repo / CHART / "crds" / "leaving.yaml")
    with pytest.raises(RecipeError) as e:
        build_chart(Store(tmp_path / "store"), repo, subdir=CHART)
    assert e.value.message.endswith(f"crds/leaving.yaml is a link to {target!r}, {problem}")


def test_the_loader_follows_links_only_inside_the_tree_it_is_given(tmp_path: Path) -> None:
    """:func:`nvkr.helm.chart.load_dir` itself (a tree not from a tar): without ``within`` a
    link out of the chart is refused, with it one inside ``within`` is followed and reported,
    and one leaving ``within`` is refused."""
    repo = _upstream(tmp_path / "ovn-kubernetes")
    chart = repo / CHART
    with pytest.raises(BuildError, match=rf"c/crds/{CRD}: symlink to .* points outside the chart$"):
        load_dir(chart, "c")
    followed: list[str] = []
    loaded = load_dir(chart, "c", within=repo, followed=followed)
    assert followed == [f"crds/{CRD} -> ../../../dist/templates/{CRD}.j2"]
    assert [f.name for f in loaded.files if f.name.startswith("crds/")] == [f"crds/{CRD}"]
    with pytest.raises(
        BuildError, match=r"c/crds/k8s.ovn.org_egressips.yaml: .* outside the chart's source"
    ):
        load_dir(chart, "c", within=repo / "helm")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"valuesFile": "../values.yaml"}, "expected a YAML file inside the chart directory"),
        ({"valuesFile": "values.txt"}, "expected a YAML file inside the chart directory"),
        ({"valuesFile": "/values.yaml"}, "expected a YAML file inside the chart directory"),
        ({"values": {"global.mtu": 1.5}}, "expected a string, boolean or integer, not 1.5"),
        ({"values": {"tags": ["a"]}}, r"expected a string, boolean or integer, not \['a'\]"),
        (
            {"images": {"image": {"reference": "r/x@sha256:" + "1" * 64, "tag": "a b"}}},
            "should match pattern",
        ),
    ],
)
def test_bad_values_fields_are_refused_by_the_model(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(pydantic.ValidationError, match=message):
        HelmChartArtifact.model_validate(
            {"builder": "helm-chart", "source": "s", "version": "0.1.0", **fields}
        )
