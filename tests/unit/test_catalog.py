"""The shipped catalog (recipes/base.yaml, gpu/, kubernetes/, catalog/): every leaf validates
under recipes/compatibility.yaml, layers refuse to stand alone, `nvkr recipes list` shows the
combinations, and `nvkr diff` between two Kubernetes releases of one GPU generation names the
changed binaries and packages. No network: nothing here fetches."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.helpers.cli import invoke

LEAVES = sorted((REPO / "recipes" / "catalog").glob("*.yaml"))


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)


def test_catalog_has_a_leaf_per_generation_and_release() -> None:
    names = {p.stem for p in LEAVES}
    assert names == {
        f"{g}-k8s{k}" for g in ("ampere", "hopper", "blackwell") for k in ("1.34", "1.35", "1.36")
    } | {"hopper-debian-k8s1.36"}  # NVIDIA's driver from Debian's archive (driver only)


def test_every_leaf_boots_the_full_kernel() -> None:
    """Bare-metal pools: every leaf extends kernel/full.yaml (Debian's linux-image-amd64/-arm64,
    with the NIC, disk, IOMMU, MCE/EDAC/IPMI and DRM drivers the cloud kernel lacks)."""
    for leaf in LEAVES:
        assert "../kernel/full.yaml" in leaf.read_text(), leaf.name


def _on_debian_12(tmp_path: Path) -> Path:
    """A copy of recipes/ in ``tmp_path`` where every leaf has a Debian 12 twin beside it,
    ``<leaf>-debian12.yaml``: the same layers with recipes/os/debian-12.yaml as its OS (what a
    user who must stay on Debian 12 writes). Returns the copy's catalog directory."""
    import shutil

    shutil.copytree(REPO / "recipes", tmp_path / "recipes")
    catalog = tmp_path / "recipes" / "catalog"
    for leaf in LEAVES:
        text = leaf.read_text()
        assert "extends: [../os/debian-13.yaml," in text, leaf.name
        twin = text.replace("../os/debian-13.yaml", "../os/debian-12.yaml").replace(
            f"name: {leaf.stem}\n", f"name: {leaf.stem}-debian12\n"
        )
        (catalog / f"{leaf.stem}-debian12.yaml").write_text(twin)
    return catalog


@pytest.mark.parametrize(
    ("leaf", "driver"),
    [
        ("hopper-debian-k8s1.36", "550.163.01-2"),
        ("hopper-debian-k8s1.36-debian12", "535.309.01-0+deb12u1"),
    ],
    ids=["debian-13", "debian-12"],
)
def test_debians_driver_is_refused_for_blackwell(
    leaf: str, driver: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Debian's own driver branch (550 on Debian 13, 535 on Debian 12) is below Blackwell's
    minimum (570), and it is the proprietary flavour, which Blackwell cannot use at any version:
    a leaf putting it on Blackwell is refused by both rules, naming the version, where it is
    set and which generations the branch does support; nothing is built (validate)."""
    catalog = _on_debian_12(tmp_path)
    (catalog / "blackwell-debian.yaml").write_text(
        "apiVersion: nvkr.dev/v1alpha1\nkind: Recipe\nmetadata: {name: blackwell-debian}\n"
        f"extends: [{leaf}.yaml]\nmatrix: {{gpu: [blackwell]}}\n"
    )
    monkeypatch.chdir(tmp_path)
    code, _out, err = invoke(*["validate", "recipes/catalog/blackwell-debian.yaml"])
    assert code == 2, err
    branch = driver.split(".")[0]
    assert (
        f"rule gpu.driver-branch: blackwell needs NVIDIA driver branch 570 or newer, got {driver}"
        f" (branch {branch}, which supports ampere and hopper; recipes/gpu/hopper-debian.yaml:"
    ) in err, err
    assert "sources.node-packages.packages.nvidia-kernel-dkms)" in err, err
    assert (
        "rule gpu.open-kernel-modules: blackwell on amd64 needs NVIDIA's open GPU kernel modules,"
        " but the apt pins install the proprietary flavour (recipes/gpu/hopper-debian.yaml:"
    ) in err, err
    assert "Debian's nvidia-open-kernel-dkms instead of" in err, err


@pytest.mark.parametrize("leaf", LEAVES, ids=lambda p: p.stem)
def test_every_leaf_stays_valid_on_debian_12(
    leaf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Debian 12 stays a choice: each leaf's twin on recipes/os/debian-12.yaml validates under
    the rules, plans its units, and installs bookworm's packages from every layer (the OS
    layer's vars: kernel, GRUB, Open vSwitch, Debian's NVIDIA driver, Docker's suite and
    package, NVIDIA's repository), not one of trixie's."""
    from nvkr.recipe.loader import load_recipe
    from nvkr.recipe.matrix import expand

    catalog = _on_debian_12(tmp_path)
    monkeypatch.chdir(tmp_path)
    rel = f"recipes/catalog/{leaf.stem}-debian12.yaml"
    code, out, err = invoke("validate", rel)
    assert code == 0, err
    assert "gpu.driver-branch" in out and "containerd.kubernetes" in out, out
    code, out, err = invoke("plan", rel, "--fan-out", "--by", "variant")
    assert code == 0, err
    assert f"nvkr build {rel} --locked --variant gpu=" in out, out
    for variant in expand(load_recipe(catalog / f"{leaf.stem}-debian12.yaml")):
        src = variant.recipe.sources["node-packages"]
        suites = {name: repo.suite for name, repo in src.apt.items()}
        assert suites["debian"] == "bookworm" and suites["docker"] == "bookworm", suites
        pins = src.packages
        assert pins[f"linux-image-{variant.arch}"] == "6.1.192-3", pins
        assert pins["openvswitch-switch"] == "3.1.0-2+deb12u1", pins
        assert pins["containerd.io"].endswith("-1~debian.12~bookworm"), pins
        assert not [v for v in pins.values() if "deb13" in v or "trixie" in v], pins
        if "nvidia-cuda" in src.apt:
            assert "/repos/debian12/" in src.apt["nvidia-cuda"].url
        if "nvidia-kernel-dkms" in pins:
            assert pins["nvidia-kernel-dkms"] == "535.309.01-0+deb12u1"


@pytest.mark.parametrize("leaf", LEAVES, ids=lambda p: p.stem)
def test_every_leaf_validates_under_the_rules(
    leaf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = invoke(*["validate", str(leaf.relative_to(REPO))])
    assert code == 0, err
    assert "compatibility rules recipes/compatibility.yaml" in out
    # validate reads no source; lock, plan and build read the models and ovn-central's schemas
    assert (
        "not applicable: ovn-kubernetes.ovn-schema: read from the locked sources' bytes: "
        "checked by lock, plan and build"
    ) in out
    for rule in (
        "skew.kubelet",
        "skew.kubeadm",
        "containerd.kubernetes",
        "gpu.driver-branch",
        "ovn-kubernetes.client-go",
    ):
        assert rule in out.split("\n  not applicable")[0]  # the catalog stages all of them


def test_a_newer_ovn_kubernetes_client_go_than_the_cluster_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leaf moving OVN-Kubernetes to a commit whose client-go is newer than the cluster fails
    rule ovn-kubernetes.client-go, naming the versions and where they are set; nothing is built
    (validate). Its models against the image's OVN are read from the bytes:
    tests/unit/test_ovsdb_schemas.py, and a locked leaf in tests/integration/test_catalog_leaf.py."""
    import shutil

    shutil.copytree(REPO / "recipes", tmp_path / "recipes")
    leaf = tmp_path / "recipes" / "catalog" / "hopper-newer-ovnk.yaml"
    leaf.write_text(
        "apiVersion: nvkr.dev/v1alpha1\nkind: Recipe\nmetadata: {name: hopper-newer-ovnk}\n"
        "extends: [hopper-k8s1.34.yaml]\n"
        'vars: {ovnKubernetesClientGo: "v0.35.0"}\n'
    )
    monkeypatch.chdir(tmp_path)
    code, _out, err = invoke(*["validate", "recipes/catalog/hopper-newer-ovnk.yaml"])
    assert code == 2, err
    assert "ovn-kubernetes.client-go" in err and "v0.35.0 (Kubernetes 1.35.0)" in err, err
    assert "1 minor version newer than the cluster (kube-apiserver) 1.34.2" in err, err


@pytest.mark.parametrize("offline", [True, False], ids=["offline", "unreachable"])
def test_planning_a_leaf_without_its_lockfile_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline: bool
) -> None:
    """The leaves ship without lockfiles: ``nvkr plan`` of one resolves every source from its
    upstream, and where it cannot (``--offline`` with an empty store, or an upstream this
    machine cannot reach: a mirror to a closed port here) the hint names the missing lockfile
    and the ``nvkr lock`` that writes it, before the fetch's own advice."""
    leaf = "recipes/catalog/hopper-k8s1.36.yaml"
    args = ["--offline"] if offline else ["--mirror", "https://github.com/=http://127.0.0.1:9/"]
    if not offline:
        args += ["--mirror", "https://dl.k8s.io/=http://127.0.0.1:9/"]
    monkeypatch.setenv("NVKR_CONFIG", str(tmp_path / "none.yaml"))
    code, _out, err = invoke("plan", leaf, *args, store=tmp_path / "store")
    assert code != 0, err
    lockfile = REPO / "lockfiles" / "catalog" / "hopper-k8s1.36.lock.json"
    assert (
        f"hint: there is no lockfile at {lockfile}, so every source is resolved from its upstream"
        f" now: `nvkr lock {leaf}` where they are reachable writes it; "
    ) in err, err


@pytest.mark.parametrize(
    "layer", ["recipes/base.yaml", "recipes/gpu/hopper.yaml", "recipes/kubernetes/1.36.yaml"]
)
def test_a_layer_cannot_be_built_alone(layer: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = invoke(*["validate", layer])
    assert code == 2
    assert re.search(rf"{re.escape(layer)}:\d+: kind: RecipeLayer is a recipe layer", err)


def test_recipes_list_shows_every_combination(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = invoke(*["recipes", "list", "--json"])
    assert code == 0, err
    rows = {(r["gpu"], r["kubernetes"], r["arch"]): r for r in json.loads(out)}
    assert len(rows) == 18
    assert {k for k, r in rows.items() if r["status"] == "unsupported"} == {
        ("ampere", k, "arm64") for k in ("1.34", "1.35", "1.36")
    }
    assert all(r["status"] == "ok" for k, r in rows.items() if k[0] != "ampere" or k[2] == "amd64")
    assert (
        "recipes/catalog/blackwell-k8s1.36.yaml" in rows[("blackwell", "1.36", "arm64")]["recipes"]
    )


def test_diff_between_two_kubernetes_releases_names_binaries_and_packages(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = invoke(
        "diff",
        "recipes/catalog/hopper-k8s1.34.yaml",
        "recipes/catalog/hopper-k8s1.36.yaml",
        "--json",
    )
    assert code == 0, err
    doc = json.loads(out)
    # the variants pair up across the Kubernetes axis instead of all being "added/removed"
    assert "gpu=hopper,kubernetes=1.34->1.36,arch=amd64" in doc["commonVariants"]
    assert doc["variants"] == {"added": [], "removed": []}
    changed: dict[str, list[str]] = {}
    for record in doc["sources"]:  # one record per distinct change (kubelet: one per arch)
        changed.setdefault(record["name"], []).extend(record["differences"])
    assert {"kubelet", "kubeadm", "kubectl", "crictl", "node-packages"} <= set(changed)
    lines = "\n".join(changed["kubelet"])
    assert "v1.34.2/bin/linux/amd64/kubelet" in lines and "v1.36.4/bin/linux/amd64/kubelet" in lines
    pkg = "\n".join(changed["node-packages"])
    assert "containerd.io: '2.1.5-1~debian.13~trixie' -> '2.2.1-1~debian.13~trixie'" in pkg
