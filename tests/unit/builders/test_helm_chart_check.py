"""The helm-chart builder checks a chart the way users install it.

Charts may refuse the ``default`` namespace on purpose (NVIDIA's device-plugin chart does) or
need values to render; the recipe's ``check: {namespace, values}`` is what Helm's lint and render
get. A chart that never uses the image digest nvkr pinned in values.yaml (it hard-codes its
image, or reads another key) builds, with a warning naming the chart, the key and the digest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

pytest.importorskip("helm_python")

from nvkr.builders import api
from nvkr.builders.helm_chart.artifact import HelmChartArtifact
from nvkr.builders.helm_chart.builder import HelmChartBuilder
from nvkr.errors import BuildError
from nvkr.execute import execute
from nvkr.fetch.context import FetchContext
from nvkr.monitor import ListMonitor
from nvkr.monitor.events import ActionWarning, Event, event_name
from nvkr.plan import Plan
from nvkr.store import Store
from tests.helpers.charts import (
    DIGEST,
    build_chart,
    members,
    output,
    plan_chart,
    write_chart,
)
from tests.helpers.results import result as read_record

IMAGE = {"image": {"artifact": "agent-image", "repository": "registry.example/nvkr/agent"}}

# Like NVIDIA's k8s-device-plugin chart: refuses the default namespace, needs a value.
OWN_NAMESPACE = {
    "Chart.yaml": "apiVersion: v2\nname: guarded\nversion: 0.1.0\n",
    "values.yaml": "image:\n  repository: example.org/x\n  digest: ''\nmode: ''\n",
    "templates/_guard.tpl": '{{- define "guarded.guard" -}}\n'
    '{{- if eq .Release.Namespace "default" }}{{ fail "install into its own namespace" }}'
    "{{ end -}}\n{{- end }}\n",
    "templates/cm.yaml": '{{ include "guarded.guard" . }}apiVersion: v1\nkind: ConfigMap\n'
    "metadata:\n  name: {{ .Release.Name }}\n  namespace: {{ .Release.Namespace }}\ndata:\n"
    '  image: "{{ .Values.image.repository }}@{{ .Values.image.digest }}"\n'
    '  mode: {{ required "mode is required" .Values.mode | quote }}\n',
}

# Ignores the pin: its image is written into the template.
HARD_CODED = {
    "Chart.yaml": "apiVersion: v2\nname: pinless\nversion: 0.1.0\n",
    "values.yaml": "image:\n  repository: example.org/x\n",
    "templates/pod.yaml": "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {{ .Release.Name }}\n"
    "spec:\n  containers:\n    - name: c\n      image: example.org/fixed:1.0\n",
    "templates/NOTES.txt": "Image digest: {{ .Values.image.digest }}\n",  # not a manifest
}


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    api.get_builder("go-binary")
    monkeypatch.setitem(api.REGISTRY, "helm-chart", HelmChartBuilder())


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "store")


def test_a_chart_refusing_the_default_namespace_fails_without_a_check(
    store: Store, tmp_path: Path
) -> None:
    chart = write_chart(tmp_path / "guarded", OWN_NAMESPACE)
    with pytest.raises(BuildError, match="install into its own namespace") as e:
        build_chart(store, chart, images=IMAGE)
    assert "namespace 'default'" in e.value.message
    assert e.value.hint and "check: {namespace" in e.value.hint


def test_the_check_renders_in_the_recipes_namespace_with_its_values(
    store: Store, tmp_path: Path
) -> None:
    chart = write_chart(tmp_path / "guarded", OWN_NAMESPACE)
    check = {"namespace": "gpu-operator", "values": {"mode": "strict"}}
    result = build_chart(store, chart, images=IMAGE, check=check)
    assert "warnings" not in result, "the pin is used"
    log = store.read_blob(result["log"]).decode()
    assert "namespace gpu-operator" in log and "rendered guarded/templates/cm.yaml" in log
    # the check's values are the check's only: the packaged values.yaml has no 'mode: strict'
    values = members(output(store, result, "primary"))["guarded/values.yaml"].decode()
    assert "mode: ''" in values and "strict" not in values


def test_the_check_is_in_the_action_key_only_when_set(store: Store, tmp_path: Path) -> None:
    chart = write_chart(tmp_path / "guarded", OWN_NAMESPACE)
    plain, _, _ = plan_chart(store, chart, images=IMAGE)
    assert "check" not in plain.params, "recipes without check: keep their action keys"
    check = {"namespace": "gpu-operator", "values": {"mode": "strict", "n": [1, True, None]}}
    spec, _, _ = plan_chart(store, chart, images=IMAGE, check=check)
    assert spec.params["check"] == check
    other, _, _ = plan_chart(store, chart, images=IMAGE, check={**check, "namespace": "x"})
    assert other.params != spec.params
    defaulted, _, _ = plan_chart(store, chart, images=IMAGE, check={"values": {"mode": "a"}})
    assert defaulted.params["check"] == {"namespace": "default", "values": {"mode": "a"}}


@pytest.mark.parametrize(
    "check",
    [
        {"namespace": "Default"},
        {"namespace": "gpu_operator"},
        {"namespace": "-gpu"},
        {"namespace": "gpu-"},
        {"namespace": ""},
        {"namespace": "a" * 64},
        {"namespace": 1},
        {"values": ["a"]},
        {"values": {"a": 1}, "extra": True},
    ],
)
def test_check_fields_are_validated_strictly(check: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        HelmChartArtifact.model_validate(
            {"builder": "helm-chart", "source": "s", "version": "0.1.0", "check": check}
        )


def test_a_float_in_the_checks_values_is_refused_by_the_model() -> None:
    with pytest.raises(ValidationError, match=r"limits.cpu is the float 0.5.*\"0.5\""):
        HelmChartArtifact.model_validate(
            {
                "builder": "helm-chart",
                "source": "s",
                "version": "0.1.0",
                "check": {"values": {"limits": {"cpu": 0.5}}},
            }
        )


def test_a_chart_ignoring_the_pinned_digest_builds_with_a_warning(
    store: Store, tmp_path: Path
) -> None:
    chart = write_chart(tmp_path / "pinless", HARD_CODED)
    result = build_chart(store, chart, images=IMAGE)
    ((warning,),) = [w.values() for w in result["warnings"]]  # a message, no hint
    assert "pinless" in warning and "image.digest" in warning and DIGEST in warning
    assert "ignores the pin" in warning
    assert f"warning: {warning}" in store.read_blob(result["log"]).decode()


def test_the_warning_is_an_event_when_built_and_when_cached(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chart = write_chart(tmp_path / "pinless", HARD_CODED)
    _, action, refs = plan_chart(store, chart, images=IMAGE)
    # the chart's source blob is in the store already (plan_chart put it there)
    monkeypatch.setattr(
        "nvkr.execute.ensure", lambda name, spec, entry, ctx, base_dir: entry.digest
    )
    (index,) = refs.indexes.values()
    # the image-index action as cached, so the plan runs the chart alone
    store.put_action(
        index.key,
        read_record({"key": index.key, "outputs": [], "metadata": {"indexDigest": DIGEST}}),
    )
    plan = Plan(
        recipe=None,  # type: ignore[arg-type]
        variants=[],
        epoch=0,
        actions={index.key: index, action.key: action},
        roots=[action.key],
        release_sets={},
    )
    for expected in ("action-done", "action-cached"):
        events: list[Event] = []
        execute(plan, store, FetchContext(store=store), monitor=ListMonitor(events))
        named = [event_name(e) for e in events]
        kinds = [k for k in named if k in ("action-done", "action-cached", "action-warning")]
        assert kinds[-2:] == [expected, "action-warning"], events
        warned = [e for e in events if isinstance(e, ActionWarning)]
        assert [e.action.key for e in warned] == [action.key]
        assert DIGEST in warned[0].message and "image.digest" in warned[0].message


RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: charts}
epoch: "1700000000"
matrix: {gpu: [hopper], kubernetes: ["1.36"], arch: [amd64]}
sources:
  charts: {path: ../charts}
  data: {path: ../data}
artifacts:
  img: {builder: container-image, files: {/data: {source: data}}}
  pinless:
    builder: helm-chart
    source: charts
    subdir: pinless
    version: "0.1.0"
    images: {image: {artifact: img, repository: example.org/img}}
  guarded:
    builder: helm-chart
    source: charts
    subdir: guarded
    version: "0.1.0"
    images: {image: {artifact: img, repository: example.org/img}}
    check: {namespace: gpu-operator, values: {mode: strict}}
releaseSet:
  name: charts
  clusterRelease: {kubernetes: "1.36.0", charts: [pinless, guarded], images: [img]}
"""


def test_nvkr_build_prints_the_warning_on_every_build(tmp_path: Path) -> None:
    """The real CLI: the chart that needs its own namespace builds with its check, the one that
    hard-codes its image builds with a warning line (and a JSON event), cached or not."""
    import json

    from tests.helpers.nvkr import run_nvkr

    proj = tmp_path / "proj"
    write_chart(proj / "charts" / "pinless", HARD_CODED)
    write_chart(proj / "charts" / "guarded", OWN_NAMESPACE)
    (proj / "data").mkdir()
    (proj / "data" / "hello.txt").write_text("hello\n")
    (proj / "recipes").mkdir()
    (proj / "recipes" / "charts.yaml").write_text(RECIPE)
    store = tmp_path / "store"
    built = run_nvkr("build", "recipes/charts.yaml", cwd=proj, store=store)
    assert built.code == 0, built.stderr
    lines = [line for line in built.stderr.splitlines() if "warning:" in line]
    (line,) = [line for line in lines if "ignores the pin" in line]
    assert line.split() == ["warning:", "chart", "pinless:", *line.split()[3:]]
    assert (proj / "dist" / "charts" / "index.json").is_file(), "the release set is written"
    assert "image.digest (sha256:" in line and "guarded" not in " ".join(lines)
    again = run_nvkr("build", "recipes/charts.yaml", "--json", cwd=proj, store=store)
    assert again.code == 0, again.stderr
    events = [json.loads(x) for x in again.stdout.splitlines()]
    warned = [e for e in events if e["event"] == "action-warning"]
    assert [(e["name"], e["builder"]) for e in warned] == [("pinless", "helm-chart")]
    assert warned[0]["message"] == line.split("warning: ", 1)[1]
    assert [e["event"] for e in events if e.get("name") == "pinless"] == ["action-warning"]
