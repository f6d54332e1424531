"""The Cluster API export against the field rules read from the CAPI/CAPM3 Go types, the
v1beta1/v1beta2 shapes, the control-plane endpoint, CABPK's user-data and the add-ons."""

from __future__ import annotations

import copy
import io
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
        kw.update(infrastructure="metal3", image_urls=export.ImageUrls.from_base_url(BASE))
        meta = with_node_image(meta)
    return export.export_capi(
        meta,
        digest,
        cluster_name="GPU.Cluster_1",
        namespace="Fleet",
        api=export.ApiVersions(capi),
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
    # without --infrastructure the user brings the machine templates
    external = frozenset() if metal3 else frozenset({"Metal3MachineTemplate"})
    assert check_documents(docs, external) == []
    if not metal3:
        assert any("Metal3MachineTemplate" in p for p in check_documents(docs))
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
            ].update(format="iso"),
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
    assert check_documents(docs, frozenset({"Metal3MachineTemplate"})) == []
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
        *["release-set", "export", str(layout), "--format", "json", "--api-version", "v1beta2"]
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


def test_metal3_v1beta2_is_refused(layout: Path) -> None:
    """No CAPM3 v1beta2 field rules were read, so nvkr does not write unchecked documents."""
    with pytest.raises(UsageError, match="no field rules were read for CAPM3 v1beta2"):
        export.ApiVersions("v1beta2", "v1beta2")
    argv = ["release-set", "export", str(layout), "--format", "capi"]
    result = invoke(*argv, "--metal3-api-version", "v1beta2")
    assert result.code == 2, result.output
    assert "no field rules were read for CAPM3 v1beta2" in result.output


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
        ["--control-plane-endpoint", "10.0.0.10:6443"],
        ["--api-version", "v1beta2"],
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
    assert labels == {"node-labels": spec["kubeletExtraArgs"]["node-labels"]}
    assert config["runcmd"] == [cabpk.INIT_COMMAND]
    with pytest.raises(UsageError, match="does not initialize"):
        cabpk.init_user_data({"kind": "KubeadmConfigTemplate"}, "1.36.3")
