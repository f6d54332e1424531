"""nvkr.export and ``nvkr release-set export``: JSON against its schema, Cluster API YAML."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from nvkr import export
from nvkr.cli import main, release_set_export
from nvkr.cli import release_set as release_set_cli
from nvkr.errors import UsageError
from nvkr.oci.layout import LayoutReader
from nvkr.releaseset import read_metadata
from nvkr.releaseset.signing import release_set_entry
from tests.unit.test_releaseset import build

SCHEMA = json.loads(
    (Path(__file__).parents[2] / "schema" / "release-set-export.schema.json").read_text()
)
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    _, _, path = build(tmp_path)
    return path


@pytest.fixture
def loaded(layout: Path) -> tuple[dict[str, Any], str]:
    return read_metadata(layout), str(release_set_entry(LayoutReader(layout))["digest"])


def with_machine_image(meta: dict[str, Any]) -> dict[str, Any]:
    """The metadata as if the per-arch ``agent`` binary were each pool's machine image."""
    meta = copy.deepcopy(meta)
    meta["machineImages"] = ["agent"]
    for pool in meta["nodePoolReleases"]:
        pool["machineImage"] = "agent"
    return meta


def test_json_validates_and_is_deterministic(loaded: tuple[dict[str, Any], str]) -> None:
    meta, digest = loaded
    doc = export.export_json(meta, digest)
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft202012Validator)
    assert doc == export.export_json(copy.deepcopy(meta), digest)
    assert (doc["apiVersion"], doc["kind"], doc["schemaVersion"]) == (
        "nvkr.dev/v1alpha1",
        "ReleaseSet",
        1,
    )
    assert doc["digest"] == digest
    assert doc["clusterRelease"]["kubernetesVersion"] == "1.36.3"
    assert doc["machineImages"] == []
    assert all(p["machineImage"] is None for p in doc["nodePoolReleases"])
    assert all(p["kubernetes"] == "1.36.3" for p in doc["nodePoolReleases"])
    # deduplicated by digest: the image index shared by variants appears once per digest
    keys = [(a["name"], a["digest"]) for a in doc["artifacts"]]
    assert len(keys) == len(set(keys))
    assert {a["name"] for a in doc["artifacts"]} == {"agent", "agent-image", "agent-chart"}
    per_variant = {a["manifest"]["digest"]: a for a in meta["artifacts"] if a["name"] == "agent"}
    for pool in doc["nodePoolReleases"]:
        [art] = pool["artifacts"]
        assert art["kind"] == "binary"
        assert per_variant[art["digest"]]["platform"]["architecture"] == pool["arch"]


def test_json_machine_images_with_url(loaded: tuple[dict[str, Any], str]) -> None:
    meta, digest = loaded
    doc = export.export_json(with_machine_image(meta), digest, repository="reg.example/nvkr/set")
    jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft202012Validator)
    assert doc["machineImages"]
    for image in doc["machineImages"]:
        assert image["url"] == f"reg.example/nvkr/set@{image['digest']}"
        assert image["arch"] in {"amd64", "arm64"} and image["gpuGeneration"]
        assert image["size"] > 0
    assert all(p["machineImage"] for p in doc["nodePoolReleases"])


def _capi(meta: dict[str, Any], digest: str, **kw: Any) -> list[dict[str, Any]]:
    text = export.dump_yaml(
        export.export_capi(meta, digest, cluster_name="GPU.Cluster_1", namespace="Fleet", **kw)
    )
    assert "&id" not in text
    return [d for d in yaml.safe_load_all(text) if d is not None]


def test_capi_resources(loaded: tuple[dict[str, Any], str]) -> None:
    meta, digest = loaded
    docs = _capi(meta, digest)
    kinds = [d["kind"] for d in docs]
    pools = meta["nodePoolReleases"]
    assert kinds.count("KubeadmControlPlane") == 1
    assert kinds.count("MachineDeployment") == kinds.count("KubeadmConfigTemplate") == len(pools)
    api = {d["kind"]: d["apiVersion"] for d in docs}
    assert api == {
        "KubeadmControlPlane": "controlplane.cluster.x-k8s.io/v1beta1",
        "MachineDeployment": "cluster.x-k8s.io/v1beta1",
        "KubeadmConfigTemplate": "bootstrap.cluster.x-k8s.io/v1beta1",
    }
    names = [d["metadata"]["name"] for d in docs]
    assert all(DNS_LABEL.match(n) and len(n) <= 63 for n in names)
    assert len(set(names)) == len(names) - len(pools)  # MD and its template share a name
    for d in docs:
        assert d["metadata"]["namespace"] == "fleet"
        assert d["metadata"]["annotations"]["nvkr.dev/release-set"] == digest
    [kcp] = [d for d in docs if d["kind"] == "KubeadmControlPlane"]
    assert kcp["spec"]["version"] == "v1.36.3"
    templates = {d["metadata"]["name"]: d for d in docs if d["kind"] == "KubeadmConfigTemplate"}
    labels_seen = set()
    for md in (d for d in docs if d["kind"] == "MachineDeployment"):
        spec = md["spec"]["template"]["spec"]
        assert spec["version"] == "v1.36.3"
        assert spec["clusterName"] == md["spec"]["clusterName"] == "gpu-cluster-1"
        assert spec["infrastructureRef"] == {
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "Metal3MachineTemplate",
            "name": md["metadata"]["name"],
        }
        ref = spec["bootstrap"]["configRef"]
        assert ref["kind"] == "KubeadmConfigTemplate" and ref["name"] in templates
        assert md["metadata"]["annotations"]["nvkr.dev/machine-image"] == "none"
        tmpl = templates[ref["name"]]["spec"]["template"]["spec"]
        node_labels = tmpl["joinConfiguration"]["nodeRegistration"]["kubeletExtraArgs"][
            "node-labels"
        ]
        labels = dict(kv.split("=") for kv in node_labels.split(","))
        assert set(labels) == {
            "nvkr.dev/gpu-generation",
            "kubernetes.io/arch",
            "nvkr.dev/node-pool",
        }
        assert (
            md["spec"]["selector"]["matchLabels"]["nvkr.dev/node-pool"]
            == labels["nvkr.dev/node-pool"]
        )
        labels_seen.add(node_labels)
    # the fixture's pools share names across arches; each still gets its own labels
    assert len(labels_seen) == len(pools)
    for pool in pools:
        assert any(f"nvkr.dev/gpu-generation={pool['variant']['gpu']}" in s for s in labels_seen)


def test_capi_deterministic_and_options(loaded: tuple[dict[str, Any], str]) -> None:
    meta, digest = loaded
    kw: dict[str, Any] = {"cluster_name": "c", "namespace": "n"}
    first = export.dump_yaml(export.export_capi(meta, digest, **kw))
    assert first == export.dump_yaml(export.export_capi(copy.deepcopy(meta), digest, **kw))
    docs = export.export_capi(
        with_machine_image(meta),
        digest,
        repository="reg.example/set",
        infrastructure_kind="AWSMachineTemplate",
        infrastructure_api_version="infrastructure.cluster.x-k8s.io/v1beta2",
        **kw,
    )
    for md in (d for d in docs if d["kind"] == "MachineDeployment"):
        ann = md["metadata"]["annotations"]
        assert re.match(r"^sha256:[0-9a-f]{64}$", ann["nvkr.dev/machine-image"])
        assert (
            ann["nvkr.dev/machine-image-ref"] == f"reg.example/set@{ann['nvkr.dev/machine-image']}"
        )
        assert md["spec"]["template"]["spec"]["infrastructureRef"]["kind"] == "AWSMachineTemplate"


def test_capi_without_cluster_release(loaded: tuple[dict[str, Any], str]) -> None:
    meta, digest = loaded
    meta = {**meta, "clusterRelease": None}
    jsonschema.validate(export.export_json(meta, digest), SCHEMA)
    with pytest.raises(UsageError, match="no clusterRelease"):
        export.export_capi(meta, digest, cluster_name="c", namespace="n")


@pytest.mark.parametrize(
    ("text", "want"),
    [("Hopper.AMD64", "hopper-amd64"), ("a__b", "a-b"), ("-x-", "x")],
)
def test_dns_label(text: str, want: str) -> None:
    assert export.dns_label(text) == want


def test_dns_label_long_and_empty() -> None:
    long = export.dns_label("x" * 100)
    assert len(long) == 63 and DNS_LABEL.match(long)
    assert long != export.dns_label("x" * 101)
    with pytest.raises(UsageError):
        export.dns_label("...")


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    # The lead registers the command in the release-set group; until then, do it here.
    release_set_cli.command.add_command(release_set_export.command, "export")
    try:
        main(argv)
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_json_and_capi(
    layout: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(["release-set", "export", str(layout), "--format", "json"], capsys)
    assert code == 0, err
    jsonschema.validate(json.loads(out), SCHEMA)
    target = tmp_path / "capi.yaml"
    code, out, err = _run(
        ["release-set", "export", str(layout), "--format", "capi", "--out", str(target)], capsys
    )
    assert code == 0 and out == ""
    assert len([line for line in err.splitlines() if line.startswith("warning:")]) == 1
    assert "no machine image" in err
    kinds = {d["kind"] for d in yaml.safe_load_all(target.read_text())}
    assert kinds == {"KubeadmControlPlane", "MachineDeployment", "KubeadmConfigTemplate"}


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # an empty directory is no release set at all: a usage error (a damaged layout exits 3)
    code, _, err = _run(["release-set", "export", str(tmp_path), "--format", "json"], capsys)
    assert code == 2 and "is not a release set" in err
    code, _, err = _run(["release-set", "export", str(tmp_path), "--format", "xml"], capsys)
    assert code == 2
    code, _, _ = _run(
        ["release-set", "export", str(tmp_path / "missing"), "--format", "json"], capsys
    )
    assert code == 2
