"""The Cluster API export against the field rules read from the CAPI/CAPM3 Go types, the
v1beta1/v1beta2 shapes, the control-plane endpoint, CABPK's user-data and the add-ons."""

from __future__ import annotations

import copy
import io
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from nvkr.delivery import export
from nvkr.delivery.export import addons, cabpk
from nvkr.delivery.export import release as export_release
from nvkr.delivery.export.capi.fieldrules import RULES, check_documents
from nvkr.errors import UsageError
from nvkr.oci.layout import LayoutReader
from nvkr.releaseset import read_metadata
from nvkr.releaseset.signing import release_set_entry
from tests.helpers.cli import invoke
from tests.helpers.sample_set import build
from tests.unit.test_export import BASE, VIP, with_node_image


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    _, _, path = build(tmp_path)
    return path


@pytest.fixture
def loaded(layout: Path) -> tuple[dict[str, Any], str]:
    return read_metadata(layout), str(release_set_entry(LayoutReader(layout))["digest"])


def _export(meta: dict[str, Any], digest: str, capi: str, metal3: bool, **kw: Any) -> list[Any]:
    if metal3:
        kw.setdefault("image_urls", export.ImageUrls.from_base_url(BASE))
        kw.update(infrastructure="metal3")
        meta = with_node_image(meta)
    kw.setdefault("api", export.ApiVersions(capi))
    return export.export_capi(
        meta,
        digest,
        cluster_name="gpu-cluster-1",
        namespace="fleet",
        control_plane_endpoint=VIP,
        addons={"agent-chart": "apiVersion: v1\nkind: ServiceAccount\n"},
        **kw,
    )


@pytest.mark.parametrize("metal3", [False, True])
@pytest.mark.parametrize("capi", ["v1beta1", "v1beta2"])
def test_every_document_passes_the_field_rules(
    loaded: tuple[dict[str, Any], str], capi: str, metal3: bool
) -> None:
    meta, digest = loaded
    docs = _export(meta, digest, capi, metal3)
    # without --infrastructure the machine templates are placeholders: no reference dangles
    assert check_documents(docs) == []
    kinds = {d["kind"] for d in docs}
    assert {"Cluster", "Metal3Cluster", "ClusterResourceSet", "ConfigMap"} <= kinds
    if metal3:
        assert {"Metal3DataTemplate", "Metal3MachineTemplate"} <= kinds
    ruled = [d for d in docs if (d["apiVersion"], d["kind"]) in RULES]
    assert len(ruled) == len(docs)  # every kind written has a rule
    for rule in RULES.values():
        assert "cluster-api" in rule["source"] or "k8s.io/api" in rule["source"]


def test_v1beta2_shapes(loaded: tuple[dict[str, Any], str]) -> None:
    meta, digest = loaded
    docs = {(d["kind"], d["metadata"]["name"]): d for d in _export(meta, digest, "v1beta2", True)}
    cluster = docs[("Cluster", "gpu-cluster-1")]
    assert cluster["apiVersion"] == "cluster.x-k8s.io/v1beta2"
    assert cluster["spec"]["controlPlaneRef"] == {
        "apiGroup": "controlplane.cluster.x-k8s.io",
        "kind": "KubeadmControlPlane",
        "name": "gpu-cluster-1-control-plane",
    }
    assert cluster["spec"]["infrastructureRef"]["apiGroup"] == "infrastructure.cluster.x-k8s.io"
    kcp = docs[("KubeadmControlPlane", "gpu-cluster-1-control-plane")]
    assert kcp["spec"]["machineTemplate"]["spec"]["infrastructureRef"]["kind"] == (
        "Metal3MachineTemplate"
    )
    spec = kcp["spec"]["kubeadmConfigSpec"]
    assert "networking" not in spec["clusterConfiguration"]
    args = spec["initConfiguration"]["nodeRegistration"]["kubeletExtraArgs"]
    assert isinstance(args, list) and args[0]["name"] == "node-labels"
    assert spec["joinConfiguration"]["nodeRegistration"]["criSocket"] == (
        "unix:///run/containerd/containerd.sock"
    )
    mhc = next(d for k, d in docs.items() if k[0] == "MachineHealthCheck")
    assert mhc["spec"]["checks"]["nodeStartupTimeoutSeconds"] == 1200
    v1 = {(d["kind"]): d for d in _export(meta, digest, "v1beta1", True)}
    assert v1["MachineHealthCheck"]["spec"]["nodeStartupTimeout"] == "1200s"
    assert v1["Cluster"]["spec"]["controlPlaneRef"]["apiVersion"] == (
        "controlplane.cluster.x-k8s.io/v1beta1"
    )


def _broken(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind)


@pytest.mark.parametrize(
    ("capi", "breakage", "want"),
    [
        (
            "v1beta1",
            lambda d: _broken(d, "MachineDeployment")["spec"].pop("clusterName"),
            "required field spec.clusterName is missing",
        ),
        (
            "v1beta2",
            lambda d: _broken(d, "KubeadmControlPlane")["spec"].pop("version"),
            "required field spec.version",
        ),
        (
            "v1beta1",
            lambda d: _broken(d, "Cluster")["spec"].update(bogus=1),
            "spec.bogus is no field",
        ),
        (
            "v1beta2",
            lambda d: _broken(d, "Cluster")["spec"]["controlPlaneRef"].update(name="nope"),
            "KubeadmControlPlane/nope, which the export does not hold",
        ),
        (
            "v1beta2",
            lambda d: _broken(d, "MachineDeployment")["spec"]["template"]["spec"]["bootstrap"][
                "configRef"
            ].update(apiVersion="bootstrap.cluster.x-k8s.io/v1beta2"),
            "v1beta2 reference",
        ),
        (
            "v1beta1",
            lambda d: _broken(d, "ClusterResourceSet")["spec"]["resources"][0].update(name="gone"),
            "ConfigMap/gone",
        ),
        (
            "v1beta1",
            lambda d: _broken(d, "Metal3MachineTemplate")["spec"]["template"]["spec"][
                "dataTemplate"
            ].update(name="gone"),
            "Metal3DataTemplate/gone",
        ),
        (
            "v1beta2",
            lambda d: _broken(d, "KubeadmConfigTemplate")["spec"]["template"]["spec"][
                "joinConfiguration"
            ]["nodeRegistration"].update(kubeletExtraArgs={"a": "b"}),
            "must be a list in bootstrap.cluster.x-k8s.io/v1beta2",
        ),
        (
            "v1beta2",
            lambda d: _broken(d, "KubeadmControlPlane")["spec"]["kubeadmConfigSpec"][
                "clusterConfiguration"
            ].update(networking={}),
            "clusterConfiguration.networking is no field",
        ),
        (
            "v1beta1",
            lambda d: _broken(d, "Metal3MachineTemplate")["spec"]["template"]["spec"][
                "image"
            ].update(diskFormat="iso"),
            "'iso' is not one of",
        ),
        (
            "v1beta1",
            lambda d: _broken(d, "Metal3Cluster")["spec"]["controlPlaneEndpoint"].pop("port"),
            "controlPlaneEndpoint.port is missing",
        ),
        (
            "v1beta1",
            lambda d: _broken(d, "MachineHealthCheck")["metadata"].update(name="Bad_Name"),
            "is not a DNS-1123 label",
        ),
        (
            "v1beta1",
            lambda d: _broken(d, "Cluster").update(apiVersion="cluster.x-k8s.io/v9"),
            "no field rule",
        ),
        (
            "v1beta2",
            lambda d: _broken(d, "ClusterResourceSet")["spec"].pop("resources"),
            "required field spec.resources is missing",
        ),
        (
            "v1beta1",
            lambda d: _broken(d, "MachineDeployment")["spec"].update(clusterName="c" * 64),
            "spec.clusterName is longer than 63",
        ),
        (
            "v1beta2",
            lambda d: _broken(d, "MachineHealthCheck")["spec"].update(clusterName="c" * 64),
            "spec.clusterName is longer than 63",
        ),
        (
            "v1beta1",
            lambda d: _broken(d, "KubeadmControlPlane")["spec"].update(version="v" * 257),
            "spec.version is longer than 256",
        ),
        (
            "v1beta1",
            lambda d: _broken(d, "MachineHealthCheck")["spec"].update(unhealthyRange="3-5"),
            "does not match",
        ),
        (
            "v1beta1",
            lambda d: _broken(d, "Metal3MachineTemplate")["spec"]["template"]["spec"].update(
                bogus=1
            ),
            "spec.template.spec.bogus is no field",
        ),
        (
            "v1beta1",
            lambda d: _broken(d, "Metal3MachineTemplate")["spec"]["template"]["spec"].update(
                automatedCleaningMode="all"
            ),
            "'all' is not one of",
        ),
        (
            "v1beta1",
            lambda d: _broken(d, "Metal3DataTemplate")["spec"].update(clusterName=""),
            "required field spec.clusterName is missing",
        ),
    ],
)
def test_a_broken_document_fails_the_rules(
    loaded: tuple[dict[str, Any], str], capi: str, breakage: Any, want: str
) -> None:
    meta, digest = loaded
    docs = copy.deepcopy(_export(meta, digest, capi, True))
    assert check_documents(docs) == []
    breakage(docs)
    problems = check_documents(docs)
    assert any(want in p for p in problems), problems


def test_control_plane_endpoint() -> None:
    assert str(export.parse_endpoint("API.Example.com:6443")) == "api.example.com:6443"
    assert export.parse_endpoint("[fd00::10]:443").host == "fd00::10"
    for bad, want in [
        ("10.0.0.1", "not HOST:PORT"),
        ("10.0.0.1:0", "not 1..65535"),
        ("10.0.0.1:70000", "not 1..65535"),
        ("bad_host!:6443", "neither an IP address"),
        ("[nothex]:6443", "not HOST:PORT"),
        # an all-numeric dotted name is a mistyped IPv4 address, not a DNS name
        ("999.1.1.1:6443", "not an IPv4 address"),
        ("10.0.0:6443", "not an IPv4 address"),
        # an unspecified address is no endpoint to reach
        ("0.0.0.0:6443", "unspecified address"),
        ("[::]:6443", "unspecified address"),
    ]:
        with pytest.raises(UsageError, match=want):
            export.parse_endpoint(bad)
    with pytest.raises(UsageError, match="not HOST:PORT") as err:
        export.parse_endpoint("fd00::1:6443")
    assert err.value.hint is not None and "[fd00::1]:6443" in err.value.hint
    with pytest.raises(UsageError, match="not HOST:PORT") as err:
        export.parse_endpoint("fd00::10")
    assert err.value.hint is not None and "[fd00::10]:6443" in err.value.hint


def test_metal3_needs_an_endpoint(loaded: tuple[dict[str, Any], str]) -> None:
    meta, digest = loaded
    with pytest.raises(UsageError, match="control plane's address") as err:
        export.export_capi(
            with_node_image(meta),
            digest,
            cluster_name="c",
            namespace="n",
            infrastructure="metal3",
            image_urls=export.ImageUrls.from_base_url(BASE),
        )
    assert err.value.hint is not None and "--control-plane-endpoint" in err.value.hint


@pytest.mark.parametrize("capi", ["v1beta1", "v1beta2"])
def test_cabpk_user_data_from_the_template(loaded: tuple[dict[str, Any], str], capi: str) -> None:
    meta, digest = loaded
    docs = _export(meta, digest, capi, True)
    template = cabpk.pick_template(docs, "hopper")
    text = cabpk.user_data(template, "v1.36.3", "10.0.0.10:6443")
    assert text.startswith("## template: jinja\n#cloud-config\n")
    config = yaml.safe_load(text.split("\n", 2)[2])
    paths = [f["path"] for f in config["write_files"]]
    assert paths == ["/run/kubeadm/kubeadm-join-config.yaml", "/run/cluster-api/placeholder"]
    assert config["runcmd"] == [
        "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml && echo success > "
        "/run/cluster-api/bootstrap-success.complete"
    ]
    [join] = yaml.safe_load_all(config["write_files"][0]["content"])
    assert join["apiVersion"] == "kubeadm.k8s.io/v1beta4" and join["kind"] == "JoinConfiguration"
    assert join["discovery"]["bootstrapToken"]["apiServerEndpoint"] == "10.0.0.10:6443"
    # the join configuration is the template's, in kubeadm v1beta4's shape
    want = copy.deepcopy(template["spec"]["template"]["spec"]["joinConfiguration"])
    args = want["nodeRegistration"]["kubeletExtraArgs"]
    if isinstance(args, dict):
        want["nodeRegistration"]["kubeletExtraArgs"] = [
            {"name": k, "value": v} for k, v in sorted(args.items())
        ]
    # and the taint CABPK adds to a worker's join
    want["nodeRegistration"]["taints"] = [UNINITIALIZED]
    assert join["nodeRegistration"] == want["nodeRegistration"]
    labels = dict(
        kv.split("=") for kv in join["nodeRegistration"]["kubeletExtraArgs"][0]["value"].split(",")
    )
    assert labels["nvkr.dev/gpu-generation"] == "hopper"
    # kubeadm v1beta3 below 1.31: a map
    old = yaml.safe_load(
        yaml.safe_load(cabpk.user_data(template, "v1.30.2").split("\n", 2)[2])["write_files"][0][
            "content"
        ]
    )
    assert old["apiVersion"] == "kubeadm.k8s.io/v1beta3"
    assert isinstance(old["nodeRegistration"]["kubeletExtraArgs"], dict)


def test_cabpk_files_commands_and_errors() -> None:
    doc = {
        "kind": "KubeadmConfigTemplate",
        "metadata": {"name": "c-pool"},
        "spec": {
            "template": {
                "spec": {
                    "files": [{"path": "/etc/x.conf", "content": "x", "permissions": "0600"}],
                    "preKubeadmCommands": ["echo 'pre'"],
                    "postKubeadmCommands": ["echo post"],
                    "users": [{"name": "ops", "sshAuthorizedKeys": ["ssh-ed25519 AAAA"]}],
                    "joinConfiguration": {"nodeRegistration": {}},
                }
            }
        },
    }
    config = yaml.safe_load(cabpk.user_data(doc, "1.36").split("\n", 2)[2])
    assert config["write_files"][0] == {
        "path": "/etc/x.conf",
        "permissions": "0600",
        "content": "x",
    }
    assert config["runcmd"][0] == "echo 'pre'" and config["runcmd"][-1] == "echo post"
    assert config["users"] == [{"name": "ops", "ssh_authorized_keys": ["ssh-ed25519 AAAA"]}]
    with pytest.raises(UsageError, match="no kubeadm configuration"):
        cabpk.user_data({"kind": "Cluster", "spec": {}}, "1.36")
    with pytest.raises(UsageError, match="older than"):
        cabpk.kubeadm_api_version("1.21.0")
    with pytest.raises(UsageError, match="no node pool 'volta'") as err:
        cabpk.pick_template([doc], "volta")
    assert err.value.hint is not None and "c-pool" in err.value.hint


def test_cli_v1beta2_and_bootstrap_data(layout: Path, tmp_path: Path) -> None:
    target, user_data = tmp_path / "capi.yaml", tmp_path / "user-data"
    argv = ["release-set", "export", str(layout), "--format", "capi", "--api-version", "v1beta2"]
    argv += ["--control-plane-endpoint", "10.0.0.10:6443", "--out", str(target)]
    code, _, err = invoke(*argv, "--bootstrap-data", "hopper", str(user_data))
    assert code == 0, err
    docs = [d for d in yaml.safe_load_all(target.read_text()) if d]
    assert check_documents(docs) == []
    assert {d["apiVersion"] for d in docs if d["kind"] == "Cluster"} == {"cluster.x-k8s.io/v1beta2"}
    text = user_data.read_text()
    assert text.startswith("## template: jinja\n") and "10.0.0.10:6443" in text
    # the add-on: the sample chart rendered (it has no templates: an empty manifest)
    [crs] = [d for d in docs if d["kind"] == "ClusterResourceSet"]
    assert crs["spec"]["resources"] == [{"kind": "ConfigMap", "name": "nvkr-addon-agent-chart"}]
    assert crs["spec"]["clusterSelector"] == {"matchLabels": {"nvkr.dev/addons": "nvkr"}}
    for bad, want in [
        (["--control-plane-endpoint", "10.0.0.1"], "not HOST:PORT"),
        (["--api-version", "v1alpha4"], "v1alpha4"),
        (["--bootstrap-data", "volta", str(user_data)], "no node pool"),
    ]:
        code, _, err = invoke(*["release-set", "export", str(layout), "--format", "capi", *bad])
        assert code == 2 and want in err, (bad, err)
    code, _, err = invoke(
        *["release-set", "export", str(layout), "--format", "json", "--api-version", "v1beta1"]
    )
    assert code == 2 and "--format capi" in err


def test_bootstrap_data_names_pools_as_the_readme_does(layout: Path, tmp_path: Path) -> None:
    """POOL is a node-pool name (``hopper``, ``control-plane``); the MachineDeployment's name
    (``nvkr-hopper``) works too. Without --control-plane-endpoint the join's endpoint is the
    placeholder, which stderr says."""
    argv = ["release-set", "export", str(layout), "--format", "capi", "--out", str(tmp_path / "c")]
    code, _, err = invoke(*argv, "--bootstrap-data", "volta", str(tmp_path / "ud"))
    assert code == 2, err
    assert "hint: one of: control-plane, hopper, blackwell-amd64, blackwell-arm64\n" in err
    for pool in ("blackwell-arm64", "nvkr-hopper", "control-plane"):
        code, _, err = invoke(*argv, "--bootstrap-data", pool, str(tmp_path / pool))
        assert code == 0, err
        assert (
            f"warning: the bootstrap data's apiServerEndpoint is {cabpk.PLACEHOLDER_ENDPOINT}"
            in err
        )
    join = yaml.safe_load(
        yaml.safe_load((tmp_path / "control-plane").read_text().split("\n", 2)[2])["write_files"][
            -2
        ]["content"]
    )
    assert join["kind"] == "JoinConfiguration" and "controlPlane" in join
    argv += ["--control-plane-endpoint", "10.0.0.10:6443"]
    code, _, err = invoke(*argv, "--bootstrap-data", "hopper", str(tmp_path / "ud"))
    assert code == 0 and "apiServerEndpoint" not in err, err


def test_render_chart_pins_what_the_chart_says() -> None:
    files = {
        "demo/Chart.yaml": b"apiVersion: v2\nname: demo\nversion: 0.1.0\n",
        "demo/values.yaml": b"image: reg.example/agent@sha256:" + b"a" * 64 + b"\n",
        "demo/templates/ds.yaml": (
            b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: {{ .Release.Name }}\n"
            b"  namespace: {{ .Release.Namespace }}\nspec:\n  containers:\n"
            b"  - name: a\n    image: {{ .Values.image }}\n"
        ),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    text = addons.render_chart(buf.getvalue(), "demo")
    [pod] = [d for d in yaml.safe_load_all(text) if d]
    assert pod["metadata"] == {"name": "demo", "namespace": "kube-system"}
    assert pod["spec"]["containers"][0]["image"] == "reg.example/agent@sha256:" + "a" * 64


def test_warns_for_an_image_without_cloud_init(
    loaded: tuple[dict[str, Any], str], layout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spdx = {"packages": [{"name": "kubeadm"}, {"name": "kubelet"}]}
    assert export.missing_for_kubeadm(spdx) == []
    assert export.missing_for_kubeadm(spdx, ("cloud-init",)) == ["cloud-init"]
    monkeypatch.setattr(
        export_release, "image_sboms", lambda *_: [("node-image [hopper amd64]", spdx)]
    )
    code, _, err = invoke(*["release-set", "export", str(layout), "--format", "capi"])
    assert code == 0, err
    [warning] = [w for w in err.splitlines() if "cloud-init" in w]
    assert "node-image [hopper amd64]" in warning and warning.startswith("warning:")
    # only cloud-init lacks: no kubeadm warning
    assert "cannot bootstrap" not in err


@pytest.mark.parametrize(
    ("kernel", "infrastructure", "warns"),
    [
        ("linux-image-cloud-amd64", "metal3", True),
        ("linux-image-6.1.0-57-cloud-arm64", "metal3", True),
        ("linux-image-amd64", "metal3", False),
        ("linux-image-6.1.0-57-amd64", "metal3", False),
        ("linux-image-cloud-amd64", None, False),  # a VM's infrastructure: the cloud kernel fits
    ],
)
def test_a_metal3_export_warns_for_a_pool_booting_the_cloud_kernel(
    loaded: tuple[dict[str, Any], str],
    monkeypatch: pytest.MonkeyPatch,
    kernel: str,
    infrastructure: str | None,
    warns: bool,
) -> None:
    """Debian's cloud kernel is built without bare-metal NIC and disk drivers, the AMD IOMMU,
    MCE, EDAC, IPMI and DRM (its /boot/config: ``# CONFIG_E1000E is not set``...): a Metal3
    export says which pool's image boots it."""
    spdx = {"packages": [{"name": n} for n in ("kubeadm", "kubelet", "cloud-init", kernel)]}
    assert export.cloud_kernels(spdx) == ([kernel] if "cloud" in kernel else [])
    monkeypatch.setattr(
        export_release, "image_sboms", lambda *_: [("node-image [hopper amd64]", spdx)]
    )
    meta, digest = loaded
    warnings: list[str] = []
    options = export_release.ExportOptions(fmt="capi", infrastructure=infrastructure)
    export_release._warn_capi("layout", meta, digest, options, None, warnings.append)  # type: ignore[arg-type]
    found = [w for w in warnings if "cloud kernel" in w]
    if not warns:
        assert found == [], found
        return
    [warning] = found
    assert warning.startswith(
        f"warning: machine image node-image [hopper amd64] boots Debian's cloud kernel ({kernel})"
    )
    assert "e1000e" in warning and "AMD IOMMU" in warning and "recipes/kernel/full.yaml" in warning


def test_v1beta1_cluster_resource_set_resources_are_optional(
    loaded: tuple[dict[str, Any], str],
) -> None:
    """exp/addons/api/v1beta1 has ``resources`` ``+optional``/omitempty; v1beta2 made it
    ``+required`` (MinItems=1): only v1beta2's rule may ask for it."""
    meta, digest = loaded
    docs = copy.deepcopy(_export(meta, digest, "v1beta1", True))
    _broken(docs, "ClusterResourceSet")["spec"].pop("resources")
    assert check_documents(docs) == []


def test_every_rule_names_a_file_and_commit() -> None:
    for key, rule in RULES.items():
        if key[0] == "v1":
            continue
        assert "@" in rule["source"] and ".go" in rule["source"], (key, rule["source"])


def test_unknown_api_versions_are_refused() -> None:
    for capi, metal3, want in [
        ("v1beta3", "v1beta2", "--api-version 'v1beta3'"),
        ("v1beta2", "v1alpha5", "--metal3-api-version 'v1alpha5'"),
    ]:
        with pytest.raises(UsageError, match=want):
            export.ApiVersions(capi, metal3)


@pytest.mark.parametrize(
    "option",
    [
        ["--bootstrap-data", "hopper-amd64", "user-data"],
        ["--cluster-name", "gpu"],
        ["--namespace", "fleet"],
        ["--infrastructure-kind", "FooMachineTemplate"],
        ["--infrastructure-api-version", "infrastructure.cluster.x-k8s.io/v1beta2"],
        ["--image-base-url", BASE],
        ["--control-plane-pool", "hopper"],
        ["--image-url-from-registry", "--repository", "127.0.0.1:5000/sets"],
        ["--image-url-oci", "--repository", "127.0.0.1:5000/sets"],
        ["--control-plane-endpoint", "10.0.0.10:6443"],
        ["--api-version", "v1beta1"],
        ["--metal3-api-version", "v1beta1"],
        ["--infrastructure", "metal3"],
        ["--host-arch-label", "kubernetes.io/arch"],
    ],
)
def test_json_refuses_every_capi_only_option(
    layout: Path, tmp_path: Path, option: list[str]
) -> None:
    """An option only a Cluster API export reads is a usage error with --format json (it would
    be ignored, or, for --bootstrap-data, crash on the JSON document), and nothing is written."""
    option = [str(tmp_path / o) if o == "user-data" else o for o in option]
    argv = ["release-set", "export", str(layout), "--format", "json", *option]
    code, out, err = invoke(*argv)
    assert code == 2 and "use it with --format capi" in err and out == "", (option, err)
    assert option[0] in err and not (tmp_path / "user-data").exists()


# -- issue 27 item 2: a Metal3 export a Machine can finish ---------------------------------------
UUID_LABEL = "metal3.io/uuid={{ ds.meta_data.uuid }}"


def _labels_of(registration: dict[str, Any]) -> list[str]:
    args = registration["kubeletExtraArgs"]
    value = (
        args["node-labels"]
        if isinstance(args, dict)
        else next(a["value"] for a in args if a["name"] == "node-labels")
    )
    return str(value).split(",")


def _registrations(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for d in docs:
        if d["kind"] == "KubeadmControlPlane":
            spec = d["spec"]["kubeadmConfigSpec"]
            out["init"] = spec["initConfiguration"]["nodeRegistration"]
            out["cp-join"] = spec["joinConfiguration"]["nodeRegistration"]
        elif d["kind"] == "KubeadmConfigTemplate":
            reg = d["spec"]["template"]["spec"]["joinConfiguration"]["nodeRegistration"]
            out[d["metadata"]["name"]] = reg
    return out


@pytest.mark.parametrize("capi", ["v1beta1", "v1beta2"])
def test_metal3_nodes_carry_the_uuid_label_capm3_sets_the_provider_id_from(
    loaded: tuple[dict[str, Any], str], capi: str
) -> None:
    """Without an external cloud provider CAPM3 finds a Machine's Node by the label
    metal3.io/uuid (cloud-init renders ds.meta_data.uuid): the control plane and every pool."""
    meta, digest = loaded
    regs = _registrations(_export(meta, digest, capi, True))
    assert len(regs) == 2 + len(meta["nodePoolReleases"])
    for where, reg in regs.items():
        assert UUID_LABEL in _labels_of(reg), where
    # Metal3's contract only: another provider's export does not get it
    for where, reg in _registrations(_export(meta, digest, capi, False)).items():
        assert not any(v.startswith("metal3.io/uuid") for v in _labels_of(reg)), where


@pytest.mark.parametrize("capi", ["v1beta1", "v1beta2"])
def test_the_control_plane_carries_no_worker_pools_label(
    loaded: tuple[dict[str, Any], str], capi: str
) -> None:
    meta, digest = loaded
    for metal3 in (False, True):
        regs = _registrations(_export(meta, digest, capi, metal3))
        for where in ("init", "cp-join"):
            keys = {kv.split("=")[0] for kv in _labels_of(regs[where])}
            assert "nvkr.dev/node-pool" not in keys and "nvkr.dev/gpu-generation" not in keys
            assert "kubernetes.io/arch" in keys


@pytest.mark.parametrize("kind", ["Metal3MachineTemplate", "AWSMachineTemplate"])
@pytest.mark.parametrize("capi", ["v1beta1", "v1beta2"])
def test_an_export_without_infrastructure_leaves_no_reference_dangling(
    loaded: tuple[dict[str, Any], str], capi: str, kind: str
) -> None:
    """Every machine template the KubeadmControlPlane and the MachineDeployments name is in the
    export: a placeholder of the provider's kind, annotated like the placeholder cluster."""
    meta, digest = loaded
    version = "infrastructure.cluster.x-k8s.io/v1beta1"
    docs = _export(
        meta, digest, capi, False, infrastructure_kind=kind, infrastructure_api_version=version
    )
    assert check_documents(docs) == []
    templates = [d for d in docs if d["kind"] == kind]
    assert len(templates) == len(meta["nodePoolReleases"]) + 1
    for t in templates:
        assert "nvkr.dev/placeholder" in t["metadata"]["annotations"]
        assert t["apiVersion"] == version


@pytest.mark.parametrize("name", ["GPU.Cluster_1", "c" * 64, "-gpu"])
def test_a_cluster_name_that_is_no_dns_label_is_an_error(
    loaded: tuple[dict[str, Any], str], layout: Path, name: str
) -> None:
    meta, digest = loaded
    with pytest.raises(UsageError, match="--cluster-name"):
        export.export_capi(meta, digest, cluster_name=name, namespace="n")
    code, out, err = invoke(
        *["release-set", "export", str(layout), "--format", "capi", "--cluster-name", name]
    )
    assert code == 2 and out == "" and "--cluster-name" in err and "DNS-1123" in err, err


def test_the_defaults_are_v1beta2_and_metal3_v1beta1_is_kept(
    loaded: tuple[dict[str, Any], str],
) -> None:
    """Cluster API deprecated v1beta1 (no longer served from 1.16); CAPM3 1.13 serves v1beta2
    (image.diskFormat), CAPM3 1.12 only v1beta1 (image.format)."""
    meta, digest = loaded
    imaged = with_node_image(meta)
    kw: dict[str, Any] = {
        "cluster_name": "c",
        "namespace": "n",
        "infrastructure": "metal3",
        "image_urls": export.ImageUrls.from_base_url(BASE),
        "control_plane_endpoint": VIP,
    }
    docs = export.export_capi(imaged, digest, **kw)
    assert check_documents(docs) == []
    versions = {d["kind"]: d["apiVersion"] for d in docs}
    assert versions["Cluster"] == "cluster.x-k8s.io/v1beta2"
    assert versions["Metal3MachineTemplate"] == "infrastructure.cluster.x-k8s.io/v1beta2"
    assert versions["Metal3Cluster"] == "infrastructure.cluster.x-k8s.io/v1beta2"
    m3mt = next(d for d in docs if d["kind"] == "Metal3MachineTemplate")
    image = m3mt["spec"]["template"]["spec"]["image"]
    assert image["diskFormat"] == "qcow2" and "format" not in image
    # Metal3ObjectRef: name and namespace
    assert m3mt["spec"]["template"]["spec"]["dataTemplate"] == {
        "name": "c-metadata",
        "namespace": "n",
    }
    old = export.export_capi(imaged, digest, api=export.ApiVersions("v1beta2", "v1beta1"), **kw)
    assert check_documents(old) == []
    m3mt = next(d for d in old if d["kind"] == "Metal3MachineTemplate")
    assert m3mt["apiVersion"] == "infrastructure.cluster.x-k8s.io/v1beta1"
    assert m3mt["spec"]["template"]["spec"]["image"]["format"] == "qcow2"


@pytest.mark.parametrize("metal3", ["v1beta1", "v1beta2"])
def test_metal3_versions_pass_their_own_rules_only(
    loaded: tuple[dict[str, Any], str], metal3: str
) -> None:
    meta, digest = loaded
    docs = copy.deepcopy(
        _export(meta, digest, "v1beta2", True, api=export.ApiVersions("v1beta2", metal3))
    )
    assert check_documents(docs) == []
    image = _broken(docs, "Metal3MachineTemplate")["spec"]["template"]["spec"]["image"]
    # the other version's name of the disk format is an unknown field
    if metal3 == "v1beta2":
        image["format"] = image.pop("diskFormat")
    else:
        image["diskFormat"] = image.pop("format")
    assert any("is no field" in p for p in check_documents(docs)), check_documents(docs)


def test_cli_defaults_and_metal3_v1beta1(layout: Path) -> None:
    argv = ["release-set", "export", str(layout), "--format", "capi"]
    code, out, err = invoke(*argv)
    assert code == 0, err
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert {d["apiVersion"] for d in docs if d["kind"] == "Cluster"} == {"cluster.x-k8s.io/v1beta2"}
    placeholder = [d for d in docs if d["kind"] == "Metal3Cluster"]
    assert placeholder[0]["apiVersion"] == "infrastructure.cluster.x-k8s.io/v1beta2"
    code, out, err = invoke(*argv, "--metal3-api-version", "v1beta1")
    assert code == 0, err
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert {d["apiVersion"] for d in docs if d["kind"] == "Metal3Cluster"} == {
        "infrastructure.cluster.x-k8s.io/v1beta1"
    }
    code, _, err = invoke(*argv, "--metal3-api-version", "v1alpha5")
    assert code == 2 and "--metal3-api-version" in err


def _config(text: str) -> dict[str, Any]:
    assert text.startswith("## template: jinja\n#cloud-config\n")
    config: dict[str, Any] = yaml.safe_load(text.split("\n", 2)[2])
    return config


def _join(config: dict[str, Any]) -> dict[str, Any]:
    [content] = [f["content"] for f in config["write_files"] if f["path"] == cabpk.JOIN_CONFIG_PATH]
    join: dict[str, Any] = yaml.safe_load(content)
    return join


UNINITIALIZED = {"key": "node.cluster.x-k8s.io/uninitialized", "effect": "NoSchedule"}


@pytest.mark.parametrize("capi", ["v1beta1", "v1beta2"])
def test_worker_bootstrap_data_carries_the_uninitialized_taint(
    loaded: tuple[dict[str, Any], str], capi: str
) -> None:
    """CABPK adds node.cluster.x-k8s.io/uninitialized:NoSchedule to a worker's join (Cluster
    API drops it once it has synced the Machine's labels); not to a control-plane join."""
    meta, digest = loaded
    docs = _export(meta, digest, capi, True)
    worker = _join(_config(cabpk.user_data(cabpk.pick_template(docs, "hopper"), "v1.36.3")))
    assert worker["nodeRegistration"]["taints"] == [UNINITIALIZED]
    cp = _join(_config(cabpk.user_data(cabpk.pick_template(docs, "control-plane"), "v1.36.3")))
    assert "taints" not in cp["nodeRegistration"]
    # a template with taints of its own keeps them, the taint is added once
    template = copy.deepcopy(cabpk.pick_template(docs, "hopper"))
    reg = template["spec"]["template"]["spec"]["joinConfiguration"]["nodeRegistration"]
    reg["taints"] = [{"key": "gpu", "value": "true", "effect": "NoSchedule"}, UNINITIALIZED]
    again = _join(_config(cabpk.user_data(template, "v1.36.3")))
    assert again["nodeRegistration"]["taints"] == reg["taints"]


CP_FILES = [
    ("ca.crt", "0640"),
    ("ca.key", "0600"),
    ("sa.pub", "0640"),
    ("sa.key", "0600"),
    ("front-proxy-ca.crt", "0640"),
    ("front-proxy-ca.key", "0600"),
    ("etcd/ca.crt", "0640"),
    ("etcd/ca.key", "0600"),
]


@pytest.mark.parametrize("certificates_dir", [None, "/var/lib/pki"])
def test_control_plane_bootstrap_data_writes_the_join_certificates(
    loaded: tuple[dict[str, Any], str], certificates_dir: str | None
) -> None:
    """A control-plane join needs the cluster's CAs and service-account key, which CABPK writes
    (secret.NewControlPlaneJoinCerts, Certificate.AsFiles) before the join: placeholders here."""
    meta, digest = loaded
    docs = copy.deepcopy(_export(meta, digest, "v1beta2", True))
    kcp = cabpk.pick_template(docs, "control-plane")
    pki = "/etc/kubernetes/pki"
    if certificates_dir is not None:
        kcp["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["certificatesDir"] = (
            certificates_dir
        )
        pki = certificates_dir
    config = _config(cabpk.user_data(kcp, "v1.36.3"))
    written = [(f["path"], f["permissions"], f["owner"]) for f in config["write_files"]]
    assert written[: len(CP_FILES)] == [(f"{pki}/{n}", p, "root:root") for n, p in CP_FILES]
    assert all("placeholder" in f["content"] for f in config["write_files"][: len(CP_FILES)])
    worker = _config(cabpk.user_data(cabpk.pick_template(docs, "hopper"), "v1.36.3"))
    assert not any(f["path"].startswith(pki) for f in worker["write_files"])


@pytest.mark.skipif(shutil.which("cloud-init") is None, reason="needs cloud-init")
@pytest.mark.parametrize("pool", ["hopper", "control-plane"])
def test_bootstrap_data_renders_the_uuid_under_cloud_init(
    layout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool: str
) -> None:
    """cloud-init renders the jinja user-data from the meta-data Ironic writes (its uuid) and
    the rendered cloud-config passes cloud-init's schema."""
    import subprocess

    meta = read_metadata(layout)
    monkeypatch.setattr(
        export_release,
        "load_release_set",
        lambda source, registry=None: (with_node_image(meta), {"digest": "sha256:" + "0" * 64}),
    )
    monkeypatch.setattr(export_release, "rendered_addons", lambda *_: {})
    user_data = tmp_path / "user-data"
    code, _, err = invoke(
        *["release-set", "export", str(layout), "--format", "capi", "--infrastructure", "metal3"],
        *["--control-plane-endpoint", "10.0.0.10:6443", "--image-base-url", BASE],
        *["--out", str(tmp_path / "capi.yaml"), "--bootstrap-data", pool, str(user_data)],
    )
    assert code == 0, err
    uuid = "5e9d7a52-0a3b-4c1e-9c55-2f6d3a0e8b11"
    instance = tmp_path / "instance-data.json"
    instance.write_text(json.dumps({"ds": {"meta_data": {"uuid": uuid}}, "v1": {}}))
    rendered = subprocess.run(
        ["cloud-init", "devel", "render", "-i", str(instance), str(user_data)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "{{" not in rendered
    (tmp_path / "rendered").write_text(rendered)
    subprocess.run(
        ["cloud-init", "schema", "--config-file", str(tmp_path / "rendered")],
        capture_output=True,
        text=True,
        check=True,
    )
    config = yaml.safe_load(rendered)
    assert f"metal3.io/uuid={uuid}" in _labels_of(_join(config)["nodeRegistration"])


def test_a_cluster_release_without_a_cni_warns(layout: Path) -> None:
    """Nodes become Ready only once a CNI writes its configuration into /etc/cni/net.d."""
    code, _, err = invoke(*["release-set", "export", str(layout), "--format", "capi"])
    assert code == 0
    [warning] = [w for w in err.splitlines() if "CNI" in w]
    assert warning.startswith("warning:") and "Ready" in warning
    calico = (
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: calico-node}\nspec:\n"
        "  template:\n    spec:\n      volumes:\n      - name: cni-net-dir\n"
        "        hostPath:\n          path: /etc/cni/net.d\n"
    )
    flow = "kind: DaemonSet\nspec: {template: {spec: {volumes: [{hostPath: {path: /etc/cni/net.d/}}]}}}\n"
    assert export_release.cni_addons({"calico": calico, "agent": "kind: ServiceAccount\n"}) == [
        "calico"
    ]
    assert export_release.cni_addons({"ovn": "---\n" + flow}) == ["ovn"]
    assert export_release.cni_addons({"agent": "kind: ServiceAccount\n", "empty": ""}) == []


# -- issue 27 item 3: machine images straight from the registry (oci://) -------------------------
def test_oci_image_urls_name_the_per_arch_machine_image_manifest(
    loaded: tuple[dict[str, Any], str],
) -> None:
    """Ironic (29.0+) deploys oci://REGISTRY/REPO@sha256:<image manifest> with the disk as
    layers[0]; CAPM3 1.14 forbids checksum fields for such a URL."""
    meta, digest = loaded
    imaged = with_node_image(meta)
    urls = export.ImageUrls.from_oci("reg.example:5000", "gpu/sets")
    docs = _export(meta, digest, "v1beta2", True, image_urls=urls)
    assert check_documents(docs) == []
    manifests = {
        (a["variant"]["gpu"], a["variant"]["arch"]): a["manifest"]["digest"]
        for a in imaged["artifacts"]
        if a["name"] == "node-image"
    }
    seen = set()
    for d in docs:
        if d["kind"] != "Metal3MachineTemplate":
            continue
        image = d["spec"]["template"]["spec"]["image"]
        assert set(image) == {"url", "diskFormat"}, image
        assert image["url"].startswith("oci://reg.example:5000/gpu/sets@sha256:")
        seen.add(image["url"].rsplit("@", 1)[1])
    assert seen == set(manifests.values())
    # a checksum beside an oci:// URL is what CAPM3 refuses
    broken = copy.deepcopy(docs)
    _broken(broken, "Metal3MachineTemplate")["spec"]["template"]["spec"]["image"].update(
        checksum="ab" * 32
    )
    assert any("oci://" in p for p in check_documents(broken)), check_documents(broken)
    # and an http URL without one is still a missing checksum
    plain = copy.deepcopy(_export(meta, digest, "v1beta2", True))
    _broken(plain, "Metal3MachineTemplate")["spec"]["template"]["spec"]["image"].pop("checksum")
    assert any("image.checksum is missing" in p for p in check_documents(plain))


def test_oci_image_urls_need_capm3_v1beta2(loaded: tuple[dict[str, Any], str]) -> None:
    meta, digest = loaded
    urls = export.ImageUrls.from_oci("reg.example", "gpu/sets")
    with pytest.raises(UsageError, match="--image-url-oci") as err:
        _export(
            meta,
            digest,
            "v1beta2",
            True,
            image_urls=urls,
            api=export.ApiVersions("v1beta2", "v1beta1"),
        )
    assert err.value.hint is not None and "v1beta2" in err.value.hint


def test_cli_image_url_oci(
    loaded: tuple[dict[str, Any], str], layout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    meta, digest = loaded
    monkeypatch.setattr(
        export_release,
        "load_release_set",
        lambda source, registry=None: (with_node_image(meta), {"digest": digest}),
    )
    monkeypatch.setattr(export_release, "rendered_addons", lambda *_: {})
    heads: list[Any] = []
    monkeypatch.setattr(
        "nvkr.delivery.export.images.check_anonymous_reads", lambda *a: heads.append(a)
    )
    metal3 = ["--format", "capi", "--infrastructure", "metal3"]
    metal3 += ["--control-plane-endpoint", "10.0.0.10:6443"]
    code, out, err = invoke(
        *["release-set", "export", "ghcr.io/acme/sets:v1", *metal3, "--image-url-oci"]
    )
    assert code == 0, err
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert check_documents(docs) == []
    urls = {
        d["spec"]["template"]["spec"]["image"]["url"]
        for d in docs
        if d["kind"] == "Metal3MachineTemplate"
    }
    assert urls and all(u.startswith("oci://ghcr.io/acme/sets@sha256:") for u in urls)
    assert heads == []  # no anonymous HEAD on an oci:// URL: Ironic pulls through the registry API
    for extra, want in [
        (["--image-base-url", BASE], "give one of them"),
        (["--image-url-from-registry"], "give one of them"),
        (["--metal3-api-version", "v1beta1"], "CAPM3 v1beta2"),
    ]:
        code, _, err = invoke(
            *["release-set", "export", "ghcr.io/acme/sets:v1", *metal3, "--image-url-oci", *extra]
        )
        assert code == 2 and want in err and "--image-url-oci" in err, (extra, err)
    code, _, err = invoke(*["release-set", "export", str(layout), *metal3, "--image-url-oci"])
    assert code == 2 and "is a directory" in err, err
    code, _, err = invoke(
        *["release-set", "export", str(layout), "--format", "json", "--image-url-oci"]
    )
    assert code == 2 and "--format capi" in err, err


@pytest.mark.parametrize("namespace", ["Fleet", "gpu_fleet", "n" * 64])
def test_a_namespace_that_is_no_dns_label_is_an_error(
    loaded: tuple[dict[str, Any], str], layout: Path, namespace: str
) -> None:
    """Like --cluster-name: never rewritten (``Fleet`` was written as ``fleet``)."""
    meta, digest = loaded
    with pytest.raises(UsageError, match="--namespace"):
        export.export_capi(meta, digest, cluster_name="c", namespace=namespace)
    code, out, err = invoke(
        *["release-set", "export", str(layout), "--format", "capi", "--namespace", namespace]
    )
    assert code == 2 and out == "" and "--namespace" in err and "DNS-1123" in err, err


def test_init_user_data_is_cabpks_first_control_plane_node(layout: Path, tmp_path: Path) -> None:
    """The first control-plane node's cloud-config: ``kubeadm init`` with the export's
    KubeadmControlPlane's clusterConfiguration and initConfiguration (the pool's labels, the
    image's CRI socket), in the shape CABPK's controlplane_init.go writes."""
    target = tmp_path / "capi.yaml"
    argv = ["release-set", "export", str(layout), "--format", "capi", "--out", str(target)]
    code, _, err = invoke(*argv, "--control-plane-endpoint", "10.0.0.10:6443")
    assert code == 0, err
    docs = [d for d in yaml.safe_load_all(target.read_text()) if d]
    [kcp] = [d for d in docs if d["kind"] == "KubeadmControlPlane"]
    text = cabpk.init_user_data(kcp, str(kcp["spec"]["version"]), "10.0.0.10:6443")
    assert text.startswith(cabpk.HEADER)
    config = yaml.safe_load(text[len(cabpk.HEADER) :])
    files = {f["path"]: f for f in config["write_files"]}
    assert cabpk.JOIN_CONFIG_PATH not in files
    cluster, init = yaml.safe_load_all(files[cabpk.INIT_CONFIG_PATH]["content"])
    assert cluster["kind"] == "ClusterConfiguration" and init["kind"] == "InitConfiguration"
    assert cluster["controlPlaneEndpoint"] == "10.0.0.10:6443"
    assert cluster["kubernetesVersion"] == kcp["spec"]["version"]
    assert cluster["certificatesDir"] == "/etc/kubernetes/pki"
    spec = kcp["spec"]["kubeadmConfigSpec"]["initConfiguration"]["nodeRegistration"]
    assert init["nodeRegistration"]["criSocket"] == spec["criSocket"]
    labels = {a["name"]: a["value"] for a in init["nodeRegistration"]["kubeletExtraArgs"]}
    want = spec["kubeletExtraArgs"]  # a {name, value} list in v1beta2 (the default), a map before
    want = {a["name"]: a["value"] for a in want} if isinstance(want, list) else want
    assert labels == {"node-labels": want["node-labels"]}
    assert config["runcmd"] == [cabpk.INIT_COMMAND]
    with pytest.raises(UsageError, match="does not initialize"):
        cabpk.init_user_data({"kind": "KubeadmConfigTemplate"}, "1.36.3")


@pytest.mark.parametrize("metal3_version", ["v1beta1", "v1beta2"])
@pytest.mark.parametrize("capi", ["v1beta1", "v1beta2"])
def test_the_metal3_cluster_says_no_cloud_provider_so_capm3_reads_the_uuid_label(
    loaded: tuple[dict[str, Any], str], capi: str, metal3_version: str
) -> None:
    """CAPM3's webhook defaults ``cloudProviderEnabled`` to true when neither it nor v1beta1's
    deprecated ``noCloudProvider`` is set, and then waits for a cloud provider to set each
    Node's providerID: the ``metal3.io/uuid`` label the export gives every node is read only
    with ``cloudProviderEnabled: false`` (found by the fresh-user trial)."""
    meta, digest = loaded
    api = export.ApiVersions(capi, metal3_version)
    docs = _export(meta, digest, capi, True, api=api)
    (cluster,) = [d for d in docs if d["kind"] == "Metal3Cluster"]
    assert cluster["apiVersion"] == f"infrastructure.cluster.x-k8s.io/{metal3_version}"
    assert cluster["spec"]["cloudProviderEnabled"] is False
    assert "noCloudProvider" not in cluster["spec"]  # deprecated; both set must agree
    assert check_documents(docs) == []


@pytest.mark.parametrize("metal3", [False, True])
@pytest.mark.parametrize("capi", ["v1beta1", "v1beta2"])
def test_every_kubeadm_configuration_applies_the_images_kubelet_patches(
    loaded: tuple[dict[str, Any], str], capi: str, metal3: bool
) -> None:
    """kubeadm init and join replace the image's /var/lib/kubelet/config.yaml: every init and
    join configuration (the KubeadmControlPlane's and each KubeadmConfigTemplate's) names the
    image's patches directory, whose kubeletconfiguration patch holds the image's kubelet
    settings, and CABPK's user-data carries it into kubeadm's own configuration."""
    meta, digest = loaded
    docs = _export(meta, digest, capi, metal3)
    assert check_documents(docs) == []
    configs = {}
    for d in docs:
        if d["kind"] == "KubeadmControlPlane":
            spec = d["spec"]["kubeadmConfigSpec"]
            configs["init"] = spec["initConfiguration"]
            configs["cp-join"] = spec["joinConfiguration"]
        elif d["kind"] == "KubeadmConfigTemplate":
            configs[d["metadata"]["name"]] = d["spec"]["template"]["spec"]["joinConfiguration"]
    assert len(configs) == 2 + len(meta["nodePoolReleases"])
    for where, config in configs.items():
        assert config["patches"] == {"directory": "/etc/nvkr/kubeadm-patches"}, where
    [join] = yaml.safe_load_all(
        yaml.safe_load(
            cabpk.user_data(cabpk.pick_template(docs, "hopper"), "v1.36.3")[len(cabpk.HEADER) :]
        )["write_files"][0]["content"]
    )
    assert join["patches"] == {"directory": "/etc/nvkr/kubeadm-patches"}
    kcp = cabpk.pick_template(docs, "control-plane")
    init_config = yaml.safe_load(cabpk.init_user_data(kcp, "v1.36.3")[len(cabpk.HEADER) :])
    [init] = [
        d
        for f in init_config["write_files"]
        if f["path"] == cabpk.INIT_CONFIG_PATH
        for d in yaml.safe_load_all(f["content"])
        if d["kind"] == "InitConfiguration"
    ]
    assert init["patches"] == {"directory": "/etc/nvkr/kubeadm-patches"}


@pytest.mark.parametrize(
    ("capi", "breakage", "want"),
    [
        (
            "v1beta2",
            lambda spec: spec["joinConfiguration"]["patches"].update(directory=""),
            "joinConfiguration.patches.directory is shorter than 1",
        ),
        (
            "v1beta1",
            lambda spec: spec["joinConfiguration"]["patches"].update(dir="/x"),
            "joinConfiguration.patches.dir is no field",
        ),
    ],
)
def test_the_rules_check_the_patches_of_a_kubeadm_configuration(
    loaded: tuple[dict[str, Any], str], capi: str, breakage: Any, want: str
) -> None:
    meta, digest = loaded
    docs = copy.deepcopy(_export(meta, digest, capi, True))
    breakage(_broken(docs, "KubeadmConfigTemplate")["spec"]["template"]["spec"])
    problems = check_documents(docs)
    assert any(want in p for p in problems), problems


@pytest.mark.parametrize("flag", ["--bootstrap-data", "--out"])
def test_an_output_in_a_missing_directory_names_the_flag_and_path(
    layout: Path, tmp_path: Path, flag: str
) -> None:
    """The error names the path given and its flag, not the temporary file written first
    (found by the fresh-user trial: ``/nonexistent/dir/.ud.yaml.tmp: No such file``)."""
    missing = tmp_path / "no" / "such" / "ud.yaml"
    argv = ["release-set", "export", str(layout), "--format", "capi"]
    if flag == "--out":
        argv += ["--out", str(missing)]
    else:
        argv += ["--out", str(tmp_path / "c.yaml"), "--bootstrap-data", "hopper", str(missing)]
    code, _, err = invoke(*argv)
    assert code == 2, err
    assert f"{flag} {missing}" in err and ".tmp" not in err, err
    assert not missing.parent.exists()
