"""Every string nvkr writes into YAML reads back as that same string.

A table of strings that YAML readers like to turn into something else (every number notation of
YAML 1.1 and 1.2, booleans, nulls, timestamps, the 1.1 value key ``=``, indicators, spaces) goes
through every writer nvkr has: Chart.yaml, values.yaml image pins, exported Kubernetes documents,
``lock --update``'s in-place recipe edits and the mirror config snippet. Each output is read back
by PyYAML (YAML 1.1), ruamel.yaml (YAML 1.2 core schema) and, where Helm is the consumer, by Helm
itself (helm-python-sdk: Helm v4's Go code, sigs.k8s.io/yaml over go-yaml), and must give the
identical ``str``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from ruamel.yaml import YAML

from nvkr.airgap.serve import config_snippet
from nvkr.delivery.export import dump_yaml
from nvkr.helm.metadata import chart_yaml, read_metadata, sanitize
from nvkr.helm.values import set_images
from nvkr.recipe.yamlsource import Location
from nvkr.update.edit import Edit, apply_edits

DIGEST = "sha256:" + "5e" * 32

# fmt: off
BOOLEANS = (
    "y", "Y", "n", "N", "yes", "Yes", "YES", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF",
    "true", "True", "TRUE", "false", "False", "FALSE",
)
# fmt: on

AMBIGUOUS = [
    # integers: decimal, signs, YAML 1.1 octal, 1.2 octal, hex, binary, underscores, base 60
    "0",
    "17",
    "-17",
    "+17",
    "017",
    "09",
    "0o17",
    "0O17",
    "-0o17",
    "0x1F",
    "0X1f",
    "-0x1F",
    "0b101",
    "-0b101",
    "1_000",
    "1__0",
    "+1_0",
    "0_17",
    "0x_1F",
    "190:20:30",
    "-1:20",
    "1:20",
    "12345678901234567890123",
    # floats: exponents with and without a dot or sign, leading/trailing dot, inf, nan, base 60
    "1e3",
    "1E3",
    "1e+3",
    "1e-3",
    "1.5E+3",
    "1.5e3",
    "5e676289",
    "1_0e3",
    "1.0",
    ".5",
    "-.5",
    "5.",
    "+1.0",
    "1_0.5",
    "190:20:30.15",
    ".inf",
    ".Inf",
    ".INF",
    "-.inf",
    "+.inf",
    "-.Inf",
    ".nan",
    ".NaN",
    ".NAN",
    # booleans, YAML 1.1 (y/n included: the 1.1 spec and go-yaml have them, PyYAML does not)
    *BOOLEANS,
    # nulls and the empty string
    "null",
    "Null",
    "NULL",
    "~",
    "",
    # timestamps: dates, single-digit month/day (go-yaml), date-times in several spellings
    "2001-12-14",
    "2001-1-2",
    "2001-12-14t21:59:43.10-05:00",
    "2001-12-14T21:59:43Z",
    "2001-12-14 21:59:43.10 -5",
    "2002-12-14 21:59:43.10",
    # the YAML 1.1 value key, the merge key
    "=",
    "<<",
    # indicators, spaces, quotes, escapes
    " leading",
    "trailing ",
    " ",
    "a: b",
    "a:b",
    "#x",
    "x #y",
    "- x",
    "-",
    "?",
    "? x",
    ":",
    "[x]",
    "{x}",
    "a, b",
    "*x",
    "&x",
    "!x",
    "%x",
    "@x",
    "`x",
    "'x'",
    '"x"',
    "it's",
    'say "hi"',
    "back\\slash",
    "tab\there",
    "bell\x07",
    "nbsp\xa0here",
    "é ü ✓",
    "---",
    "...",
    # what nvkr usually writes: these must stay plain where the writer writes plain
    "0.1.0",
    "v1.2.3",
    "1.2.3-rc.1+b.5",
    "ghcr.io/nvkr/node-agent",
    DIGEST,
    "https://dl.k8s.io/",
]


def _ruamel() -> YAML:
    y = YAML(typ="safe", pure=True)
    y.version = (1, 2)
    return y


def read_back(text: str) -> dict[str, Any]:
    """``text`` loaded by PyYAML (YAML 1.1) and ruamel.yaml (YAML 1.2)."""
    return {"pyyaml (1.1)": yaml.safe_load(text), "ruamel (1.2)": _ruamel().load(text)}


def assert_same_str(got: dict[str, Any], want: str, where: str) -> None:
    for reader, value in got.items():
        assert type(value) is str and value == want, (
            f"{where}: {reader} reads {value!r} ({type(value).__name__}), written {want!r}"
        )


def ids(s: str) -> str:
    return repr(s)


# -- Chart.yaml ----------------------------------------------------------------------------------
@pytest.mark.parametrize("s", AMBIGUOUS, ids=ids)
def test_chart_yaml_strings_read_back(s: str) -> None:
    meta = {
        "name": "demo",
        "version": "0.1.0",
        "apiVersion": "v2",
        "appVersion": s or "x",
        "keywords": [s],
        "annotations": {"k": s, (s or "empty"): "v"},
    }
    text = chart_yaml(meta).decode()
    for reader, doc in read_back(text).items():
        assert_same_str({reader: doc["appVersion"]}, s or "x", text)
        assert_same_str({reader: doc["keywords"][0]}, s, text)
        assert_same_str({reader: doc["annotations"]["k"]}, s, text)
        (key,) = [k for k in doc["annotations"] if k != "k"]
        assert_same_str({reader: key}, s or "empty", text)
    # nvkr's own strict reader (the one the builder uses on a chart's Chart.yaml) agrees
    assert read_metadata(text.encode(), "Chart.yaml")["appVersion"] == sanitize(s or "x")


# -- values.yaml ---------------------------------------------------------------------------------
@pytest.mark.parametrize("s", AMBIGUOUS, ids=ids)
def test_values_yaml_image_pins_read_back(s: str) -> None:
    for data in (
        b"image:\n  repository: old\n  digest: ''\n",  # set in place
        b"other: 1\n",  # created
        None,  # no values.yaml at all
    ):
        text = set_images(data, {"image": (s, DIGEST)}, "values.yaml").decode()
        for reader, doc in read_back(text).items():
            assert_same_str({reader: doc["image"]["repository"]}, s, text)
            assert_same_str({reader: doc["image"]["digest"]}, DIGEST, text)


# -- exported documents --------------------------------------------------------------------------
@pytest.mark.parametrize("s", AMBIGUOUS, ids=ids)
def test_exported_documents_read_back(s: str) -> None:
    doc = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "x", "labels": {"k": s}},
        "data": {(s or "empty"): s},
        "items": [s, {"nested": [s]}],
    }
    text = dump_yaml([doc])
    for reader, got in read_back(text).items():
        assert_same_str({reader: got["metadata"]["labels"]["k"]}, s, text)
        assert_same_str({reader: next(iter(got["data"]))}, s or "empty", text)
        assert_same_str({reader: next(iter(got["data"].values()))}, s, text)
        assert_same_str({reader: got["items"][0]}, s, text)
        assert_same_str({reader: got["items"][1]["nested"][0]}, s, text)


# -- lock --update's in-place edits --------------------------------------------------------------
SINGLE_LINE = [s for s in AMBIGUOUS if "\n" not in s]


@pytest.mark.parametrize("s", SINGLE_LINE, ids=ids)
@pytest.mark.parametrize("written", ["1.36.3", '"1.36.3"', "'1.36.3'"])
def test_recipe_edits_read_back(s: str, written: str, tmp_path: Path) -> None:
    file = tmp_path / "r.yaml"
    data = f"vars:\n  pin: {written}  # pinned\n  flow: {{a: {written}, b: 2}}\n".encode()
    edits = [
        Edit(Location(file, 2, 8, "1.36.3"), "vars.pin", "1.36.3", s),
        Edit(Location(file, 3, 13, "1.36.3"), "vars.flow.a", "1.36.3", s),
    ]
    text = apply_edits(data, edits, file).decode()
    assert text.endswith("  # pinned\n" + text.splitlines(keepends=True)[-1]), text
    for reader, doc in read_back(text).items():
        assert_same_str({reader: doc["vars"]["pin"]}, s, text)
        assert_same_str({reader: doc["vars"]["flow"]["a"]}, s, text)
        assert doc["vars"]["flow"]["b"] == 2, text


# -- the mirror config snippet -------------------------------------------------------------------
@pytest.mark.parametrize("s", AMBIGUOUS, ids=ids)
def test_mirror_config_snippet_reads_back(s: str) -> None:
    text = config_snippet([s], "http://127.0.0.1:1")
    for reader, doc in read_back(text).items():
        assert_same_str({reader: doc["mirrors"][0]["prefix"]}, s, text)
        want = f"http://127.0.0.1:1/{urlsplit(s).netloc}/"
        assert_same_str({reader: doc["mirrors"][0]["replacement"]}, want, text)


# -- Helm, the real consumer ---------------------------------------------------------------------
helm_strings = [s for s in AMBIGUOUS if s]


@pytest.fixture(scope="module")
def helm() -> Any:
    return pytest.importorskip("helm_python")


def test_helm_reads_chart_yaml_and_values_back(helm: Any, tmp_path: Path) -> None:
    """Helm's own loader (Chart.yaml into its Metadata struct, values.yaml through
    sigs.k8s.io/yaml) reads every string back: appVersion ``1e3`` stays ``"1e3"``."""
    wrong = []
    for i, s in enumerate(helm_strings):
        chart = tmp_path / f"c{i}"
        (chart / "templates").mkdir(parents=True)
        meta = {"apiVersion": "v2", "name": "demo", "version": "0.1.0", "appVersion": s}
        (chart / "Chart.yaml").write_bytes(chart_yaml(meta))
        (chart / "values.yaml").write_bytes(set_images(None, {"image": (s, DIGEST)}, "v"))
        with helm.Chart.load(str(chart)) as loaded:
            app = loaded.metadata.get("appVersion")
            repo = loaded.values["image"]["repository"]
        if app != sanitize(s):
            wrong.append(f"appVersion {s!r} -> {app!r}")
        if repo != s:
            wrong.append(f"values image.repository {s!r} -> {repo!r}")
    assert not wrong, "\n".join(wrong)


def test_helm_reads_exported_documents_back(helm: Any) -> None:
    """kubectl and Helm read manifests with sigs.k8s.io/yaml; Helm's values reader is that."""
    wrong = []
    for s in AMBIGUOUS:
        text = dump_yaml([{"data": {"k": s}, "list": [s]}])
        got = helm.values_from_yaml(text)
        if got != {"data": {"k": s}, "list": [s]}:
            wrong.append(f"{s!r} -> {got!r}")
    assert not wrong, "\n".join(wrong)


# -- no more quotes than needed ------------------------------------------------------------------
USUAL = ["0.1.0", "v1.2.3", "1.2.3-rc.1+b.5", "ghcr.io/nvkr/node-agent", "node_agent", DIGEST]


@pytest.mark.parametrize("s", USUAL)
def test_what_nvkr_usually_writes_stays_plain(s: str) -> None:
    from nvkr.yamlemit import plain_is_str, scalar

    assert plain_is_str(s) and scalar(s) == s
    meta = {"name": "demo", "version": "0.1.0", "apiVersion": "v2", "appVersion": s}
    assert f"\nappVersion: {s}\n" in chart_yaml(meta).decode(), "as helm package writes it"
    assert f"\n  k: {s}\n" in dump_yaml([{"data": {"k": s}}])


def test_colon_is_quoted_inside_flow_collections_only() -> None:
    from nvkr.yamlemit import scalar

    assert scalar(DIGEST) == DIGEST
    assert scalar(DIGEST, flow=True) == f'"{DIGEST}"', "libyaml-based readers refuse {a: b:c}"
