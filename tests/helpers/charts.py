"""Helm charts for the helm-chart builder tests: plan and run the builder over a chart directory
(:func:`plan_chart`, :func:`build_chart` with a fake image-index result), read what it wrote
(:func:`output`, :func:`members`), and check an archive with real Helm (:func:`helm_checks`,
helm-python-sdk, imported only there)."""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from nvkr.action import Action, action_key
from nvkr.builders.api import ActionSpec, ResolvedSource
from nvkr.builders.helm_chart.artifact import HelmChartArtifact
from nvkr.builders.helm_chart.builder import HelmChartBuilder
from nvkr.execute import run_action
from nvkr.recipe.sources import PathSource
from nvkr.repro import tar_bytes
from nvkr.store import Store
from tests.helpers import lock_entry
from tests.helpers.results import results

DIGEST = "sha256:" + "5e" * 32
EPOCH = 1764547200
CHART_MEDIA = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
CONFIG_MEDIA = "application/vnd.cncf.helm.config.v1+json"


class FakeRefs:
    """PlanRefs for one chart: its source, and an image-index action per image artifact."""

    def __init__(self, src: ResolvedSource) -> None:
        self.src = src
        self.indexes: dict[str, Action] = {}

    def source(self, name: str) -> ResolvedSource:
        assert name == self.src.name
        return self.src

    def artifact(self, name: str) -> Action:  # pragma: no cover - charts use image_index
        raise AssertionError(name)

    def image_index(self, name: str) -> Action:
        params = {"name": name, "platforms": []}
        key = action_key("image-index", "1", params, {}, {}, EPOCH)
        action = Action(key, "image-index", "1", name, params, {}, {}, EPOCH)
        return self.indexes.setdefault(name, action)


def chart_source(store: Store, root: Path, name: str = "chart-src") -> ResolvedSource:
    """A path source for ``root`` whose blob (the deterministic tar) is in ``store``."""
    digest = store.add_bytes(tar_bytes(root, epoch=0)).digest
    return ResolvedSource(
        name=name,
        spec=PathSource(path=root.name),
        entry=lock_entry({"kind": "path", "path": f"charts/{root.name}", "digest": digest}),
        base_dir=root.parent,
    )


def plan_chart(store: Store, root: Path, **fields: Any) -> tuple[ActionSpec, Action, FakeRefs]:
    """Plan a helm-chart artifact over ``root``; returns the spec, the action and the refs."""
    src = chart_source(store, root)
    artifact = HelmChartArtifact.model_validate(
        {"builder": "helm-chart", "source": src.name, "version": "0.1.0", **fields}
    )
    refs = FakeRefs(src)
    # a plan reads only the variant's locations (for messages): none written here
    variant = SimpleNamespace(locations={})
    spec = HelmChartBuilder().plan("chart", artifact, variant, refs)  # type: ignore[arg-type]
    version = HelmChartBuilder.version
    key = action_key("helm-chart", version, spec.params, spec.inputs, spec.tools, EPOCH, spec.deps)
    action = Action(
        key=key,
        builder="helm-chart",
        builder_version=version,
        name="chart",
        params=spec.params,
        inputs=spec.inputs,
        tools=spec.tools,
        epoch=EPOCH,
        deps=spec.deps,
        sources=spec.sources,
    )
    return spec, action, refs


def build_chart(
    store: Store, root: Path, *, index_digest: str = DIGEST, **fields: Any
) -> dict[str, Any]:
    """Plan and run the builder (as the executor does) with a fake image-index result."""
    _, action, _ = plan_chart(store, root, **fields)
    deps = results(
        {k: {"outputs": [], "metadata": {"indexDigest": index_digest}} for k in action.deps}
    )
    return run_action(action, store, deps).to_json()


def package_chart(tmp: Path, root: Path, **fields: Any) -> Path:
    """The chart at ``root`` packaged by the helm-chart builder (with a fake image-index result
    and ``fields`` as the recipe's artifact), written to ``tmp/<dir name>-<version>.tgz``; the
    builder table is left as it was."""
    from nvkr.builders import api

    api.get_builder("go-binary")
    saved = api.REGISTRY.get("helm-chart")
    api.REGISTRY["helm-chart"] = HelmChartBuilder()
    try:
        store = Store(tmp / "store")
        result = build_chart(store, root, **fields)
        tgz = tmp / f"{root.name}-{fields['version']}.tgz"
        tgz.write_bytes(output(store, result, "primary"))
        return tgz
    finally:
        if saved is None:
            api.REGISTRY.pop("helm-chart", None)
        else:
            api.REGISTRY["helm-chart"] = saved


def merge_values(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` merged onto ``base`` as Helm merges values: maps by key, anything else replaced."""
    out = dict(base)
    for key, value in over.items():
        merged = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merge_values(out[key], value) if merged else value
    return out


def output(store: Store, result: dict[str, Any], role: str) -> bytes:
    """The bytes of the one output of ``result`` with ``role``."""
    (out,) = [o for o in result["outputs"] if o["role"] == role]
    return store.read_blob(out["digest"])


def members(tgz: bytes) -> dict[str, bytes]:
    """name -> bytes of every member of a .tgz."""
    with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]


def assert_lints_clean(path: Path, values: dict[str, Any] | None = None) -> None:
    """Helm lints the chart (directory or archive) at ``path`` strictly, with ``values``: no
    error and no finding above info."""
    import helm_python as helm

    report = helm.lint(str(path), values=values, strict=True)
    assert report["errors"] == [], report
    assert all(m["severity"] < 2 for m in report["messages"]), report


def helm_checks(path: Path) -> dict[str, str]:
    """Helm loads the archive, lints it strictly with no finding above info, and renders it
    with its default values; returns the rendered manifests."""
    import helm_python as helm

    assert_lints_clean(path)
    with helm.Chart.load(str(path)) as chart:
        return dict(chart.render(name="rel", namespace="default"))


def write_chart(root: Path, files: dict[str, str]) -> Path:
    """A chart directory at ``root`` holding ``files`` (relative path -> text)."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def undocumented_values(values_yaml: Path) -> list[str]:
    """The keys of a chart's values.yaml with no comment line above them and no documented
    ancestor (a `# --` comment documents a key and everything under it)."""
    documented: list[int] = []  # indents of the documented ancestors
    previous = ""
    missing = []
    for line in values_yaml.read_text().splitlines():
        m = re.match(r"^( *)([A-Za-z][\w.-]*):", line)
        if m:
            indent = len(m.group(1))
            documented = [i for i in documented if i < indent]
            if previous.lstrip().startswith("#"):
                documented.append(indent)
            elif not documented and not line.rstrip().endswith(":"):
                missing.append(m.group(2))
        if line.strip():
            previous = line
    return missing
