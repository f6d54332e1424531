"""nvkr.delivery.export and ``nvkr release-set export``: JSON against its schema, Cluster API YAML."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from nvkr.delivery import export
from nvkr.delivery.export import release as export_release
from nvkr.errors import IntegrityError, UsageError
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import LayoutReader
from nvkr.releaseset import read_metadata
from nvkr.releaseset.signing import release_set_entry
from tests.helpers.cli import invoke
from tests.helpers.sample_set import build

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


#: The deprecated versions (Cluster API 1.x before 1.16, CAPM3 1.12): these tests read their
#: shapes; test_export_capi_rules.py has the v1beta2 defaults.
V1BETA1 = export.ApiVersions("v1beta1", "v1beta1")


def _capi(meta: dict[str, Any], digest: str, **kw: Any) -> list[dict[str, Any]]:
    kw.setdefault("api", V1BETA1)
    text = export.dump_yaml(
        export.export_capi(meta, digest, cluster_name="gpu-cluster-1", namespace="fleet", **kw)
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
        "Cluster": "cluster.x-k8s.io/v1beta1",
        # the placeholder infrastructure cluster, of the default machine template's provider
        "Metal3Cluster": "infrastructure.cluster.x-k8s.io/v1beta1",
        "KubeadmControlPlane": "controlplane.cluster.x-k8s.io/v1beta1",
        "MachineDeployment": "cluster.x-k8s.io/v1beta1",
        "KubeadmConfigTemplate": "bootstrap.cluster.x-k8s.io/v1beta1",
        "MachineHealthCheck": "cluster.x-k8s.io/v1beta1",
        # placeholders of the machine templates the control plane and the pools name
        "Metal3MachineTemplate": "infrastructure.cluster.x-k8s.io/v1beta1",
    }
    assert "nvkr.dev/placeholder" in docs[1]["metadata"]["annotations"]
    placeholders = [d for d in docs if d["kind"] == "Metal3MachineTemplate"]
    assert len(placeholders) == len(pools) + 1
    assert all("nvkr.dev/placeholder" in d["metadata"]["annotations"] for d in placeholders)
    names = [
        d["metadata"]["name"]
        for d in docs
        if d["kind"] not in ("Metal3Cluster", "Metal3MachineTemplate")
    ]
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


def test_cli_json_and_capi(
    layout: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = invoke(*["release-set", "export", str(layout), "--format", "json"])
    assert code == 0, err
    jsonschema.validate(json.loads(out), SCHEMA)
    target = tmp_path / "capi.yaml"
    code, out, err = invoke(
        *["release-set", "export", str(layout), "--format", "capi", "--out", str(target)]
    )
    assert code == 0 and out == ""
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2, warnings
    assert "no machine image" in warnings[0] and "installs a CNI" in warnings[1]
    kinds = {d["kind"] for d in yaml.safe_load_all(target.read_text())}
    assert kinds == {
        "Cluster",
        "Metal3Cluster",
        "KubeadmControlPlane",
        "MachineDeployment",
        "KubeadmConfigTemplate",
        "MachineHealthCheck",
        "ConfigMap",
        "ClusterResourceSet",
        "Metal3MachineTemplate",  # placeholders: no reference dangles
    }


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # an empty directory is no release set at all: a usage error (a damaged layout exits 3)
    code, _, err = invoke(*["release-set", "export", str(tmp_path), "--format", "json"])
    assert code == 2 and "is not a release set" in err
    code, _, err = invoke(*["release-set", "export", str(tmp_path), "--format", "xml"])
    assert code == 2
    code, _, _ = invoke(*["release-set", "export", str(tmp_path / "missing"), "--format", "json"])
    assert code == 2
    # --repository is checked before anything is read
    for repository, want in [
        ("not a ref!", "names no repository"),
        ("127.0.0.1:5000/GPU", "lower case: 'gpu'"),
        ("reg.example/sets:v1", "names a tag or digest"),
    ]:
        argv = ["release-set", "export", str(tmp_path), "--format", "json"]
        code, out, err = invoke(*[*argv, "--repository", repository])
        assert code == 2 and want in err and out == "", (repository, err)


# -- Metal3 infrastructure templates -------------------------------------------------------------
BASE = "https://images.example/nvkr/"
VIP = export.parse_endpoint("10.0.0.10:6443")


def _disk(variant: dict[str, str]) -> str:
    return (
        "sha256:" + hashlib.sha256(f"disk {variant['gpu']} {variant['arch']}".encode()).hexdigest()
    )


def with_node_image(meta: dict[str, Any], media_type: str = mt.NVKR_QCOW2) -> dict[str, Any]:
    """The metadata with a ``node-image`` machine image per variant (a QCOW2 disk per GPU and
    arch, as ``assemble`` records a machine-image artifact) named by every node pool."""
    meta = copy.deepcopy(meta)
    for variant in meta["variants"]:
        disk = _disk(variant)
        manifest = "sha256:" + hashlib.sha256(disk.encode()).hexdigest()
        meta["artifacts"].append(
            {
                "name": "node-image",
                "kind": "machine-image",
                "variant": dict(variant),
                "artifactType": mt.NVKR_MACHINE_IMAGE,
                "platform": {"os": "linux", "architecture": variant["arch"]},
                "manifest": {"mediaType": mt.OCI_MANIFEST, "digest": manifest, "size": 512},
                "primary": {
                    "name": "disk.qcow2",
                    "mediaType": media_type,
                    "digest": disk,
                    "size": 4096,
                },
            }
        )
    meta["machineImages"] = ["node-image"]
    for pool in meta["nodePoolReleases"]:
        pool["machineImage"] = "node-image"
    return meta


def _by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def test_metal3_templates(loaded: tuple[dict[str, Any], str]) -> None:
    meta, digest = loaded
    meta = with_node_image(meta)
    docs = _capi(
        meta,
        digest,
        infrastructure="metal3",
        image_urls=export.ImageUrls.from_base_url(BASE),
        control_plane_endpoint=VIP,
    )
    for d in docs:
        assert isinstance(d["apiVersion"], str) and isinstance(d["kind"], str)
        assert DNS_LABEL.match(d["metadata"]["name"])
    templates = _by_kind(docs, "Metal3MachineTemplate")
    pools = meta["nodePoolReleases"]
    assert len(templates) == len(pools) + 1
    order = [(d["kind"], d["metadata"]["name"]) for d in docs]
    for t in templates.values():
        assert t["apiVersion"] == "infrastructure.cluster.x-k8s.io/v1beta1"
        assert t["metadata"]["namespace"] == "fleet"
        assert t["metadata"]["annotations"]["nvkr.dev/release-set"] == digest
    # each MachineDeployment boots its own pool's disk, from a template written before it
    mds = _by_kind(docs, "MachineDeployment")
    disks = set()
    for name, md in mds.items():
        ref = md["spec"]["template"]["spec"]["infrastructureRef"]
        assert ref == {
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "Metal3MachineTemplate",
            "name": name,
        }
        assert order.index(("Metal3MachineTemplate", name)) < order.index(
            ("MachineDeployment", name)
        )
        gpu, arch = (
            dict(kv.split("=") for kv in _node_labels(docs, name).split(","))[k]
            for k in ("nvkr.dev/gpu-generation", "kubernetes.io/arch")
        )
        hexdigest = _disk({"gpu": gpu, "arch": arch}).removeprefix("sha256:")
        assert templates[name]["spec"] == {
            "template": {
                "spec": {
                    "image": {
                        "url": f"https://images.example/nvkr/{hexdigest}.qcow2",
                        "checksum": hexdigest,
                        "checksumType": "sha256",
                        "format": "qcow2",
                    },
                    "dataTemplate": {"name": "gpu-cluster-1-metadata"},
                }
            }
        }
        assert templates[name]["metadata"]["annotations"] == md["metadata"]["annotations"]
        disks.add(hexdigest)
    assert len(disks) == len(pools)
    # the control plane boots the first amd64 pool's image (hopper, amd64)
    [kcp] = _by_kind(docs, "KubeadmControlPlane").values()
    cp_ref = kcp["spec"]["machineTemplate"]["infrastructureRef"]
    assert cp_ref["kind"] == "Metal3MachineTemplate"
    assert order.index((cp_ref["kind"], cp_ref["name"])) < order.index(
        ("KubeadmControlPlane", kcp["metadata"]["name"])
    )
    cp_image = templates[cp_ref["name"]]["spec"]["template"]["spec"]["image"]
    assert cp_image["checksum"] == _disk({"gpu": "hopper", "arch": "amd64"})[7:]


def _node_labels(docs: list[dict[str, Any]], name: str) -> str:
    tmpl = _by_kind(docs, "KubeadmConfigTemplate")[name]["spec"]["template"]["spec"]
    labels: str = tmpl["joinConfiguration"]["nodeRegistration"]["kubeletExtraArgs"]["node-labels"]
    return labels


def test_metal3_adds_only_templates_and_is_deterministic(
    loaded: tuple[dict[str, Any], str],
) -> None:
    meta, digest = loaded
    meta = with_node_image(meta)
    kw: dict[str, Any] = {"cluster_name": "c", "namespace": "n", "api": V1BETA1}
    urls = export.ImageUrls.from_registry("reg.example:5000", "gpu/sets")
    first = export.dump_yaml(
        export.export_capi(
            meta, digest, infrastructure="metal3", image_urls=urls, control_plane_endpoint=VIP, **kw
        )
    )
    again = export.dump_yaml(
        export.export_capi(
            copy.deepcopy(meta),
            digest,
            infrastructure="metal3",
            image_urls=export.ImageUrls.from_registry("reg.example:5000", "gpu/sets"),
            control_plane_endpoint=VIP,
            **kw,
        )
    )
    assert first == again
    plain = export.dump_yaml(export.export_capi(meta, digest, control_plane_endpoint=VIP, **kw))
    # Metal3 writes its templates and the infrastructure cluster where the plain export leaves
    # placeholders, and gives every node CAPM3's uuid label; everything else is the same
    assert first.count(",metal3.io/uuid={{ ds.meta_data.uuid }}") == 2 + len(
        meta["nodePoolReleases"]
    )
    docs = list(yaml.safe_load_all(first.replace(",metal3.io/uuid={{ ds.meta_data.uuid }}", "")))
    added = {"Metal3MachineTemplate", "Metal3DataTemplate", "Metal3Cluster"}
    plain_docs = [d for d in yaml.safe_load_all(plain) if d["kind"] not in added]
    assert [d for d in docs if d["kind"] not in added] == plain_docs
    [m3c] = [d for d in docs if d["kind"] == "Metal3Cluster"]
    assert m3c["spec"] == {
        "controlPlaneEndpoint": {"host": "10.0.0.10", "port": 6443},
        "cloudProviderEnabled": False,  # CAPM3 reads the metal3.io/uuid label only then
    }
    for d in docs:
        if d["kind"] == "Metal3MachineTemplate":
            image = d["spec"]["template"]["spec"]["image"]
            assert image["url"] == (
                f"https://reg.example:5000/v2/gpu/sets/blobs/sha256:{image['checksum']}"
            )


def test_image_urls() -> None:
    hexdigest = "ab" * 32
    digest = "sha256:" + hexdigest
    assert export.ImageUrls.from_base_url("http://10.0.0.1:8080/img").url(digest) == (
        f"http://10.0.0.1:8080/img/{hexdigest}.qcow2"
    )
    assert export.ImageUrls.from_registry("reg.example", "a/b").url(digest) == (
        f"https://reg.example/v2/a/b/blobs/sha256:{hexdigest}"
    )
    assert (
        export.ImageUrls.from_registry("localhost:5000", "a")
        .url(digest)
        .startswith("http://localhost:5000/v2/a/blobs/")
    )
    assert (
        export.ImageUrls.from_registry("reg.lan", "a", insecure=True)
        .url(digest)
        .startswith("http://reg.lan/")
    )
    for bad in ("ftp://host/x", "images/nvkr", "https:///x", "https://h/x?sig=1"):
        with pytest.raises(UsageError, match="image base URL"):
            export.ImageUrls.from_base_url(bad)
    with pytest.raises(IntegrityError, match="not sha256"):
        export.ImageUrls.from_base_url(BASE).url("sha256:" + "AB" * 32)


def test_metal3_control_plane_pool(loaded: tuple[dict[str, Any], str]) -> None:
    meta, digest = loaded
    meta = with_node_image(meta)

    def cp_image(pool: str | None, metadata: dict[str, Any] = meta) -> str:
        docs = export.export_capi(
            metadata,
            digest,
            cluster_name="c",
            namespace="n",
            infrastructure="metal3",
            image_urls=export.ImageUrls.from_base_url(BASE),
            control_plane_endpoint=VIP,
            control_plane_pool=pool,
            api=V1BETA1,
        )
        [kcp] = [d for d in docs if d["kind"] == "KubeadmControlPlane"]
        name = kcp["spec"]["machineTemplate"]["infrastructureRef"]["name"]
        [tmpl] = [
            d
            for d in docs
            if d["kind"] == "Metal3MachineTemplate" and d["metadata"]["name"] == name
        ]
        checksum: str = tmpl["spec"]["template"]["spec"]["image"]["checksum"]
        return checksum

    # default: the first amd64 pool, also when an arm64 pool comes first
    arm64_first = {**meta, "nodePoolReleases": meta["nodePoolReleases"][::-1]}
    assert arm64_first["nodePoolReleases"][0]["variant"]["arch"] == "arm64"
    assert cp_image(None, arm64_first) == _disk({"gpu": "blackwell", "arch": "amd64"})[7:]
    assert cp_image(None) == _disk({"gpu": "hopper", "arch": "amd64"})[7:]
    assert cp_image("blackwell-arm64") == _disk({"gpu": "blackwell", "arch": "arm64"})[7:]
    # a recipe pool name shared across arches: its amd64 release
    assert cp_image("blackwell") == _disk({"gpu": "blackwell", "arch": "amd64"})[7:]
    with pytest.raises(UsageError, match="not a node-pool release") as err:
        cp_image("volta")
    assert err.value.hint is not None and "blackwell-arm64" in err.value.hint


def test_metal3_host_arch_label(loaded: tuple[dict[str, Any], str]) -> None:
    """Metal3 matches hosts by label only: each template asks for hosts of its image's arch."""
    meta, digest = loaded
    meta = with_node_image(meta)
    kw: dict[str, Any] = {
        "cluster_name": "c",
        "namespace": "n",
        "infrastructure": "metal3",
        "image_urls": export.ImageUrls.from_base_url(BASE),
        "control_plane_endpoint": VIP,
    }
    plain = _by_kind(export.export_capi(meta, digest, **kw), "Metal3MachineTemplate")
    assert all("hostSelector" not in t["spec"]["template"]["spec"] for t in plain.values())
    docs = export.export_capi(meta, digest, host_arch_label="example.com/cpu", **kw)
    templates = _by_kind(docs, "Metal3MachineTemplate")
    arch_of_disk = {_disk(v)[7:]: v["arch"] for v in meta["variants"]}
    assert len(templates) == len(meta["nodePoolReleases"]) + 1
    for name, t in templates.items():
        spec = t["spec"]["template"]["spec"]
        # each template asks for hosts of the arch of the disk it boots
        want = arch_of_disk[spec["image"]["checksum"]]
        assert spec["hostSelector"] == {"matchLabels": {"example.com/cpu": want}}, name
    assert {
        t["spec"]["template"]["spec"]["hostSelector"]["matchLabels"]["example.com/cpu"]
        for t in templates.values()
    } == {"amd64", "arm64"}
    # the rest is unchanged
    for name, t in templates.items():
        del t["spec"]["template"]["spec"]["hostSelector"]
        assert t == plain[name]
    for good in ("Arch", "kubernetes.io/arch", "a.b-c/x_y.z", "x" * 63):
        export.check_label_key(good, "k")
    for bad in ("-arch", "a/b/c", "UPPER.example/arch", "x" * 64, "example.com/", "a b"):
        with pytest.raises(UsageError, match="not a Kubernetes label key"):
            export.export_capi(meta, digest, host_arch_label=bad, **kw)
    kw.pop("infrastructure"), kw.pop("image_urls"), kw.pop("control_plane_endpoint")
    with pytest.raises(UsageError, match="hosts of Metal3 templates") as err:
        export.export_capi(meta, digest, host_arch_label="kubernetes.io/arch", **kw)
    assert err.value.hint == "add --infrastructure metal3"


def test_kubeadm_needs_from_the_sbom() -> None:
    """A machine image can bootstrap through kubeadm when its SBOM shows kubeadm and kubelet,
    as Debian packages or as staged files."""
    pkgs = {"packages": [{"name": "kubelet"}, {"name": "kubeadm"}, {"name": "containerd"}]}
    assert export.missing_for_kubeadm(pkgs) == []
    files = {"files": [{"fileName": "./usr/bin/kubeadm"}, {"fileName": "./usr/bin/kubelet"}]}
    assert export.missing_for_kubeadm(files) == []
    staged_cli = {"packages": [{"name": "coreutils"}], "files": [{"fileName": "./usr/bin/kubectl"}]}
    assert export.missing_for_kubeadm(staged_cli) == ["kubeadm", "kubelet"]
    assert export.missing_for_kubeadm({"files": [{"fileName": "./opt/bin/kubeadm"}]}) == ["kubelet"]


def test_machine_image_sboms_of_the_pools(loaded: tuple[dict[str, Any], str]) -> None:
    meta, _ = loaded
    meta = with_node_image(meta)
    assert export.machine_image_sboms(meta) == {}  # the sample's images carry no SBOM
    for i, art in enumerate(a for a in meta["artifacts"] if a["name"] == "node-image"):
        art["sbom"] = {"mediaType": mt.OCI_MANIFEST, "digest": f"sha256:{i:064x}", "size": 9}
    found = export.machine_image_sboms(meta)
    labels = sorted(label for label, _ in found.values())
    want = sorted(f"node-image [{v['gpu']} {v['arch']}]" for v in meta["variants"])
    assert labels == want and len(found) == len(meta["variants"])
    # an image no node pool boots is not checked
    meta["nodePoolReleases"] = []
    assert export.machine_image_sboms(meta) == {}


def test_metal3_errors(loaded: tuple[dict[str, Any], str]) -> None:
    meta, digest = loaded
    urls = export.ImageUrls.from_base_url(BASE)
    kw: dict[str, Any] = {"cluster_name": "c", "namespace": "n", "control_plane_endpoint": VIP}
    with pytest.raises(UsageError, match="have none") as err:
        export.export_capi(meta, digest, infrastructure="metal3", image_urls=urls, **kw)
    assert "hopper" in err.value.message and "blackwell-arm64" in err.value.message
    imaged = with_node_image(meta)
    with pytest.raises(UsageError, match="needs a URL"):
        export.export_capi(imaged, digest, infrastructure="metal3", **kw)
    with pytest.raises(UsageError, match="only --infrastructure writes"):
        export.export_capi(imaged, digest, image_urls=urls, **kw)
    with pytest.raises(UsageError, match="only --infrastructure writes"):
        export.export_capi(imaged, digest, control_plane_pool="hopper", **kw)
    with pytest.raises(UsageError, match="'aws' is not one"):
        export.export_capi(imaged, digest, infrastructure="aws", image_urls=urls, **kw)
    with pytest.raises(UsageError, match="not AWSMachineTemplate"):
        export.export_capi(
            imaged,
            digest,
            infrastructure="metal3",
            image_urls=urls,
            infrastructure_kind="AWSMachineTemplate",
            **kw,
        )
    # a machine image whose disk is not QCOW2 (here: the agent binary)
    with pytest.raises(UsageError, match="QCOW2"):
        export.export_capi(
            with_machine_image(meta), digest, infrastructure="metal3", image_urls=urls, **kw
        )
    raw = with_node_image(meta, media_type="application/vnd.nvkr.disk.raw")
    with pytest.raises(UsageError, match=r"disk\.raw"):
        export.export_capi(raw, digest, infrastructure="metal3", image_urls=urls, **kw)
    broken = with_node_image(meta)
    for art in broken["artifacts"]:
        if art["name"] == "node-image":
            art["primary"]["digest"] = "sha256:1234"
    with pytest.raises(IntegrityError, match="disk digest"):
        export.export_capi(broken, digest, infrastructure="metal3", image_urls=urls, **kw)


def test_cli_metal3(
    loaded: tuple[dict[str, Any], str],
    layout: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = str(layout)
    metal3 = ["--format", "capi", "--infrastructure", "metal3"]
    metal3 += ["--control-plane-endpoint", "10.0.0.10:6443"]
    for extra, want in [
        (["--image-base-url", BASE], "have none"),  # the fixture's pools have no machine image
        ([], "needs a URL"),
        (["--image-base-url", BASE, "--image-url-from-registry"], "both give"),
        (["--image-url-from-registry"], "is a directory"),
        (["--image-base-url", "images/"], "image base URL"),
    ]:
        code, _, err = invoke(*["release-set", "export", path, *metal3, *extra])
        assert code == 2 and want in err, (extra, err)
    code, _, err = invoke(
        *["release-set", "export", path, "--format", "json", "--infrastructure", "metal3"]
    )
    assert code == 2 and "--format capi" in err
    # a registry reference: the blob URLs of its repository (the loader is stubbed, no network)
    meta, digest = loaded
    seen: list[tuple[str, bool]] = []

    def fake_load(source: str, *, registry: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        seen.append((source, registry.insecure))
        return with_node_image(meta), {"digest": digest}

    monkeypatch.setattr(export_release, "load_release_set", fake_load)
    # reg.example does not exist: the anonymous HEADs are tested against a real registry in
    # test_export_images.py; here only which URLs they go to
    heads: list[list[str]] = []
    monkeypatch.setattr(
        "nvkr.delivery.export.images.check_anonymous_reads",
        lambda urls, warn: heads.append(list(urls)),
    )
    # the charts are read from the registry too: no add-ons here (rendered in test_addons_*)
    monkeypatch.setattr(export_release, "rendered_addons", lambda *_: {})
    target = tmp_path / "metal3.yaml"
    ref = "reg.example/gpu/sets:v1"
    argv = [
        "release-set",
        "export",
        ref,
        *metal3,
        "--image-url-from-registry",
        "--out",
        str(target),
    ]
    # amd64 and arm64 machine images, and templates that select any host: said on stderr
    code, out, err = invoke(*argv)
    assert code == 0 and out == "" and "--host-arch-label" in err and "amd64, arm64" in err
    argv += ["--host-arch-label", "kubernetes.io/arch"]
    code, out, err = invoke(*argv)
    # the add-ons are stubbed out: no CNI, which is the only warning
    [warning] = err.splitlines()
    assert code == 0 and out == "" and "installs a CNI" in warning, err
    assert seen == [(ref, False)] * 2
    docs = [d for d in yaml.safe_load_all(target.read_text()) if d is not None]
    urls = {
        d["spec"]["template"]["spec"]["image"]["url"]
        for d in docs
        if d["kind"] == "Metal3MachineTemplate"
    }
    assert urls == {f"https://reg.example/v2/gpu/sets/blobs/{_disk(v)}" for v in meta["variants"]}
    assert heads == [sorted(urls)] * 2
    first = target.read_bytes()
    assert invoke(*argv)[0] == 0 and target.read_bytes() == first
    # a directory exported with --repository: that registry's blobs
    code, out, _ = invoke(
        *[
            "release-set",
            "export",
            path,
            *metal3,
            "--image-url-from-registry",
            "--repository",
            "localhost:5000/sets",
            "--control-plane-pool",
            "blackwell-arm64",
        ],
    )
    assert code == 0 and "http://localhost:5000/v2/sets/blobs/sha256:" in out
