"""Compatibility rules (recipes/compatibility.yaml): each rule passing and failing on crafted facts,
facts read from expanded variants (vars, apt pins, their disagreement), rules-file errors, and
`nvkr validate` / `plan` on small recipes inside a fake catalog."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from nvkr.catalog.evaluation import check_variants, evaluate_all, evaluate_cell
from nvkr.catalog.facts import (
    Disagreement,
    Fact,
    RuleSchemas,
    SchemaFile,
    VariantFacts,
    variant_facts,
)
from nvkr.catalog.loading import find_rules, load_rules
from nvkr.catalog.rules import CompatibilityRules
from nvkr.catalog.versions import VersionError, parse_calendar, parse_driver, parse_upstream
from nvkr.errors import RecipeError
from nvkr.recipe.loader import load_recipe
from nvkr.recipe.matrix import expand
from tests.helpers.cli import invoke
from tests.helpers.recipes import RULES_FILE, write_leaf_recipe

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rules() -> CompatibilityRules:
    return load_rules(RULES_FILE).rules


def fact(
    text: str, place: str = "x.yaml:1: vars.v", *, driver: bool = False, calendar: bool = False
) -> Fact:
    parse = parse_driver if driver else parse_calendar if calendar else parse_upstream
    return Fact(parse(text), text, place)


def facts(
    gpu: str = "hopper",
    kubernetes: str = "1.36",
    arch: str = "amd64",
    cluster: str | None = "1.36.3",
    flavours: tuple[str, ...] = ("open",),
    schemas: RuleSchemas | None = None,
    **components: str,
) -> VariantFacts:
    """Facts of a valid hopper/1.36/amd64 variant, with components overridden (None drops one)."""
    base = {
        "kubelet": "1.36.3",
        "kubeadm": "1.36.3",
        "kubectl": "1.36.3",
        "crictl": "1.36.0",
        "containerd": "2.1.4",
        "nvidia_driver": "580.95.05",
        "spire_agent": "1.15.3",
        "spire_server": "1.15.3",
        "ovn": "23.03.1",
        # client-go v0.34.1, as facts hold it: the Kubernetes release it belongs to
        "ovn_kubernetes_client_go": "1.34.1",
    }
    base.update(components)
    return VariantFacts(
        file="x.yaml",
        variant=f"gpu={gpu},kubernetes={kubernetes},arch={arch}",
        gpu=gpu,
        kubernetes=kubernetes,
        arch=arch,
        cluster=fact(cluster) if cluster else None,
        components={
            k.replace("_", "-"): fact(v, driver=k == "nvidia_driver", calendar=k == "ovn")
            for k, v in base.items()
            if v is not None
        },
        kernel_modules=frozenset(flavours),
        schemas={OVN_SCHEMA: schemas if schemas is not None else ovsdb()},
    )


OVN_SCHEMA = "ovn-kubernetes.ovn-schema"


def schema_file(database: str, version: str, where: str) -> SchemaFile:
    return SchemaFile(database, parse_upstream(version), version, where)


def ovsdb(
    nb: str = "7.11.0",
    sb: str = "20.41.0",
    server_nb: str = "7.11.0",
    server_sb: str = "20.41.0",
    *,
    unread: tuple[str, ...] = (),
) -> RuleSchemas:
    """What rule ovn-kubernetes.ovn-schema reads of a variant: the models' schemas (the pinned
    tree's model.go files) and the server's (ovn-central's .ovsschema files)."""
    return RuleSchemas(
        models=tuple(
            schema_file(db, v, f"{f} of ovnk at commit c0ffee, x.yaml:2: sources.ovnk.commit")
            for db, v, f in (
                ("OVN_Northbound", nb, "go-controller/pkg/nbdb/model.go"),
                ("OVN_Southbound", sb, "go-controller/pkg/sbdb/model.go"),
            )
        ),
        servers=tuple(
            schema_file(
                db, v, f"{f} of ovn-central 25.03.0-1, x.yaml:3: sources.img.packages.ovn-central"
            )
            for db, v, f in (
                ("OVN_Northbound", server_nb, "/usr/share/ovn/ovn-nb.ovsschema"),
                ("OVN_Southbound", server_sb, "/usr/share/ovn/ovn-sb.ovsschema"),
            )
            if v
        ),
        unread=unread,
        has_models=True,
        has_server=True,
    )


def failures(f: VariantFacts, rules: CompatibilityRules) -> dict[str, str]:
    return {v.rule: v.message for v in evaluate_all(f, rules).violations}


def test_a_valid_variant_applies_every_rule(rules):
    result = evaluate_all(facts(gpu="blackwell", arch="arm64"), rules)
    assert result.violations == []
    assert result.not_applicable == {}
    assert set(result.applied) == {r.id for r in rules.rules} | {"cluster.line", "pins.agree"}


def test_kubelet_newer_than_apiserver(rules):
    got = failures(facts(kubelet="1.37.0", crictl="1.37.0", containerd=None), rules)
    assert got == {
        "skew.kubelet": "kubelet 1.37.0 is 1 minor version newer than the cluster (kube-apiserver) "
        "1.36.3 (allowed: not newer; x.yaml:1: vars.v)"
    }


def test_kubelet_three_minors_older_passes_four_fails(rules):
    assert failures(facts(kubelet="1.33.9", crictl="1.33.0", containerd=None), rules) == {}
    got = failures(facts(kubelet="1.32.0", crictl="1.32.0", containerd=None), rules)
    assert got == {
        "skew.kubelet": "kubelet 1.32.0 is 4 minor versions older than the cluster (kube-apiserver) "
        "1.36.3 (allowed: at most 3 minor versions older; x.yaml:1: vars.v)"
    }


def test_kubeadm_must_be_the_cluster_version(rules):
    assert (
        "does not match the cluster (kube-apiserver) 1.36.3 (it must be the same version"
        in (failures(facts(kubeadm="1.36.2"), rules)["skew.kubeadm"])
    )
    assert failures(facts(kubeadm="1.35.3"), rules)["skew.kubeadm"].startswith(
        "kubeadm 1.35.3 is 1 minor version older than the cluster (kube-apiserver) 1.36.3 "
        "(allowed: the same minor"
    )
    assert failures(facts(kubeadm="v1.36.3"), rules) == {}


def test_kubectl_within_one_minor(rules):
    assert failures(facts(kubectl="1.35.0"), rules) == {}
    assert failures(facts(kubectl="1.37.1"), rules) == {}
    assert "2 minor versions older" in failures(facts(kubectl="1.34.0"), rules)["skew.kubectl"]


def test_crictl_same_minor_as_kubelet(rules):
    got = failures(facts(crictl="1.35.0"), rules)
    assert got == {
        "skew.crictl": "crictl 1.35.0 is 1 minor version older than kubelet 1.36.3 "
        "(allowed: the same minor; x.yaml:1: vars.v)"
    }


def test_containerd_by_kubelet_line(rules):
    got = failures(facts(containerd="1.7.28"), rules)
    assert got == {
        "containerd.kubernetes": "containerd 1.7.28 (x.yaml:1: vars.v) does not satisfy >=2.0.0, "
        "required for Kubernetes 1.36 (kubelet 1.36.3)"
    }
    on_135 = facts(
        kubernetes="1.35",
        cluster="1.35.2",
        kubelet="1.35.2",
        kubeadm="1.35.2",
        kubectl="1.35.2",
        crictl="1.35.0",
        containerd="1.7.28",
    )
    assert failures(on_135, rules) == {}
    # Fail closed: a kubelet line without a containerd constraint is a violation.
    older = failures(facts(kubelet="1.33.1", crictl="1.33.0", containerd="2.1.4"), rules)
    assert older["containerd.kubernetes"].startswith(
        "no containerd constraint for Kubernetes 1.33 (kubelet 1.33.1)"
    )


def test_spire_agent_not_newer_than_the_server_and_one_minor_older_at_most(rules):
    """spiffe/spire doc/upgrading.md: agents must not be newer than the oldest server they talk
    to and may be up to one minor version older; without the fleet's server version the rule
    does not apply."""
    assert failures(facts(spire_agent="1.14.0", spire_server="1.15.3"), rules) == {}
    got = failures(facts(spire_agent="1.16.0", spire_server="1.15.3"), rules)
    assert got == {
        "skew.spire-agent": "spire-agent 1.16.0 is 1 minor version newer than the SPIRE server "
        "1.15.3 (allowed: not newer; x.yaml:1: vars.v)"
    }
    got = failures(facts(spire_agent="1.13.3", spire_server="1.15.3"), rules)
    assert "2 minor versions older than the SPIRE server 1.15.3" in got["skew.spire-agent"]
    result = evaluate_all(facts(spire_server=None), rules)
    assert result.not_applicable["skew.spire-agent"] == (
        "no SPIRE server version of the fleet (vars.spireServerVersion)"
    )


def test_the_images_ovn_schemas_hold_ovn_kubernetes_models(rules):
    """libovsdb refuses a server whose schema lacks a table or column of ovnkube's models
    (ovn-org/ovn-kubernetes#3590): per database, the schema the pinned models were generated
    from must be at most the one ovn-central ships, both named with where they were read."""
    assert failures(facts(schemas=ovsdb()), rules) == {}
    assert failures(facts(schemas=ovsdb(nb="7.3.0", sb="20.33.0")), rules) == {}
    got = failures(facts(schemas=ovsdb(nb="7.12.0")), rules)
    assert got == {
        OVN_SCHEMA: "the OVN_Northbound models are generated from schema 7.12.0 "
        "(go-controller/pkg/nbdb/model.go of ovnk at commit c0ffee, x.yaml:2: sources.ovnk.commit), "
        "newer than the OVN_Northbound 7.11.0 that ovn-central ships (/usr/share/ovn/ovn-nb.ovsschema "
        "of ovn-central 25.03.0-1, x.yaml:3: sources.img.packages.ovn-central): the models must be "
        "at most the server's schema; pin a commit whose models are generated from "
        "OVN_Northbound 7.11.0 or older, or pin ovn-central at a version shipping a newer schema"
    }
    # the other side of the same rule: an older OVN under the same models (bookworm's 23.03)
    older = facts(schemas=ovsdb(server_nb="7.0.0", server_sb="20.27.0"))
    messages = [v.message for v in evaluate_all(older, rules).violations]
    assert len(messages) == 2, messages  # one per database
    assert "schema 7.11.0" in messages[0] and "OVN_Northbound 7.0.0 that" in messages[0]
    assert "schema 20.41.0" in messages[1] and "OVN_Southbound 20.27.0 that" in messages[1]
    # a model whose database the package has no schema of
    got = failures(facts(schemas=ovsdb(server_sb="")), rules)
    assert got[OVN_SCHEMA].startswith("OVN_Southbound 20.41.0 (go-controller/pkg/sbdb/model.go")
    assert "ovn-central ships no schema of that database" in got[OVN_SCHEMA]
    # what could not be read fails closed
    got = failures(facts(schemas=ovsdb(unread=("ovnk at commit c0ffee has no file x",))), rules)
    assert got == {OVN_SCHEMA: "ovnk at commit c0ffee has no file x"}


def test_the_ovn_schema_rule_applies_only_to_what_was_read(rules):
    """validate reads no source; a variant without OVN-Kubernetes or without ovn-central has
    nothing to compare."""
    result = evaluate_all(replace(facts(), schemas=None), rules)
    assert result.not_applicable[OVN_SCHEMA] == (
        "read from the locked sources' bytes: checked by lock, plan and build"
    )
    result = evaluate_all(facts(schemas=replace(ovsdb(), has_models=False)), rules)
    assert result.not_applicable[OVN_SCHEMA] == (
        "no git source of https://github.com/ovn-org/ovn-kubernetes holds the models"
    )
    result = evaluate_all(facts(schemas=replace(ovsdb(), has_server=False)), rules)
    assert result.not_applicable[OVN_SCHEMA] == (
        "no apt source installs ovn-central, so the models of "
        "https://github.com/ovn-org/ovn-kubernetes have no schema to be held to"
    )


@pytest.mark.parametrize(
    ("client_go", "line", "cluster", "problem"),
    [
        ("v0.34.1", "1.36", "1.36.3", None),
        ("v0.34.1", "1.34", "1.34.2", None),
        ("v0.33.0", "1.36", "1.36.3", None),  # three minors older: kube-proxy's limit
        (
            "v0.32.4",
            "1.36",
            "1.36.3",
            "v0.32.4 (Kubernetes 1.32.4) is 4 minor versions older than the cluster "
            "(kube-apiserver) 1.36.3 (allowed: at most 3 minor versions older",
        ),
        (
            "v0.35.0",
            "1.34",
            "1.34.2",
            "v0.35.0 (Kubernetes 1.35.0) is 1 minor version newer than the cluster "
            "(kube-apiserver) 1.34.2 (allowed: not newer",
        ),
        ("v0.27.2", "1.34", "1.34.2", "is 7 minor versions older than the cluster"),
    ],
)
def test_ovn_kubernetes_client_go_lies_within_kube_proxys_skew(
    tmp_path, rules, client_go, line, cluster, problem
):
    """vars.ovnKubernetesClientGo (v0.X.Y: Kubernetes 1.X.Y's client libraries) read from a
    recipe and held to kube-proxy's skew against the cluster: not newer, three minors older at
    most (the 2023 commit bookworm's OVN forced, client-go 0.27, fails every line we ship)."""
    path = write_leaf_recipe(
        tmp_path / "r.yaml",
        line=line,
        cluster=cluster,
        vars={"kubeletVersion": cluster, "ovnKubernetesClientGo": client_go},
    )
    (variant,) = expand(load_recipe(path))
    f = variant_facts(variant, "r.yaml")
    assert str(f.components["ovn-kubernetes-client-go"].version) == "1." + client_go[3:]
    got = {v.rule: v.message for v in evaluate_all(f, rules).violations}
    if problem is None:
        assert "ovn-kubernetes.client-go" not in got, got
    else:
        assert problem in got["ovn-kubernetes.client-go"], got
        assert "vars.ovnKubernetesClientGo" in got["ovn-kubernetes.client-go"]


@pytest.mark.parametrize("bad", ["1.34.1", "v1.34.1", "0.34"])
def test_a_client_go_var_that_is_not_v0_x_y_names_the_field(tmp_path, bad):
    path = write_leaf_recipe(tmp_path / "r.yaml", vars={"ovnKubernetesClientGo": bad})
    (variant,) = expand(load_recipe(path))
    with pytest.raises(VersionError) as err:
        variant_facts(variant, "r.yaml")
    assert f"vars.ovnKubernetesClientGo: '{bad}'" in err.value.message


def test_a_rule_on_a_component_without_a_var_is_not_applicable_when_absent():
    """A rules file of the user's may name OVN (an apt pin only) in any version check; without
    the pin the rule does not apply, and says where the version would come from."""
    own = CompatibilityRules.model_validate(
        {
            "apiVersion": "nvkr.dev/v1alpha1",
            "kind": "CompatibilityRules",
            "rules": [
                {"id": "lines", "check": "kubernetes-lines", "source": "s", "lines": ["1.36"]},
                {"id": "arch", "check": "architectures", "source": "s", "values": ["amd64"]},
                {"id": "gpus", "check": "gpu-generations", "source": "s",
                 "generations": {"hopper": {}}},
                {"id": "ovn.skew", "check": "version-skew", "source": "s", "component": "ovn",
                 "against": "kubelet", "newerMinors": 0, "olderMinors": 0},
                {"id": "ovn.line", "check": "version-by-line", "source": "s", "component": "ovn",
                 "line": "matrix", "constraints": {"1.36": ">=23.3.0"}},
            ],
        }
    )  # fmt: skip
    result = evaluate_all(facts(ovn=None), own)
    assert result.not_applicable == {
        "ovn.skew": "no ovn staged (an apt pin)",
        "ovn.line": "no ovn staged (an apt pin)",
    }


def test_driver_branch(rules):
    got = failures(facts(gpu="blackwell", nvidia_driver="535.247.01"), rules)
    assert got == {
        "gpu.driver-branch": "blackwell needs NVIDIA driver branch 570 or newer, got 535.247.01 "
        "(branch 535, which supports ampere and hopper; x.yaml:1: vars.v)"
    }
    # Debian 13's branch: the message names the generations it does support
    got = failures(facts(gpu="blackwell", nvidia_driver="550.163.01"), rules)
    assert got == {
        "gpu.driver-branch": "blackwell needs NVIDIA driver branch 570 or newer, got 550.163.01 "
        "(branch 550, which supports ampere and hopper; x.yaml:1: vars.v)"
    }
    got = failures(facts(gpu="ampere", nvidia_driver="440.118.02"), rules)
    assert got == {
        "gpu.driver-branch": "ampere needs NVIDIA driver branch 450 or newer, got 440.118.02 "
        "(branch 440, which supports none of ampere, hopper and blackwell; x.yaml:1: vars.v)"
    }
    assert failures(facts(gpu="hopper", nvidia_driver="550.163.01"), rules) == {}
    assert failures(facts(gpu="blackwell", nvidia_driver="570.195.03"), rules) == {}
    assert failures(facts(gpu="hopper", nvidia_driver="535.247.01"), rules) == {}


def test_gpu_architectures_is_unsupported(rules):
    result = evaluate_all(facts(gpu="ampere", arch="arm64"), rules)
    (violation,) = result.violations
    assert (violation.rule, violation.message, violation.unsupported) == (
        "gpu.architectures",
        "ampere supports amd64, not arm64",
        True,
    )
    assert violation.values == {"gpu": "ampere", "arch": "arm64", "supported": "amd64"}
    assert evaluate_cell("ampere", "1.36", "arm64", rules) == result.violations
    assert evaluate_cell("ampere", "1.36", "amd64", rules) == []


def test_unknown_gpu_and_line_fail_closed(rules):
    result = evaluate_all(facts(gpu="volta", kubernetes="1.33", cluster="1.33.1"), rules)
    got = {v.rule: v.message for v in result.violations}
    assert got["gpu.generations"] == (
        "GPU generation 'volta' is not supported (supported: ampere, hopper, blackwell)"
    )
    assert got["kubernetes.lines"] == (
        "Kubernetes 1.33 is not a supported release line (supported: 1.34, 1.35, 1.36)"
    )
    assert all(
        v.unsupported == (v.rule in ("gpu.generations", "kubernetes.lines"))
        for v in result.violations
    )
    assert result.not_applicable["gpu.driver-branch"] == "GPU generation 'volta' is unknown"


def test_cluster_version_outside_its_line(rules):
    got = failures(
        facts(cluster="1.35.4", kubelet="1.35.4", kubeadm="1.35.4", crictl="1.35.0"), rules
    )
    assert got == {
        "cluster.line": "cluster version 1.35.4 (x.yaml:1: vars.v) is not in the variant's "
        "Kubernetes line 1.36"
    }


def test_open_kernel_modules(rules):
    got = failures(facts(gpu="blackwell", flavours=("proprietary",)), rules)
    assert got["gpu.open-kernel-modules"].startswith(
        "blackwell on amd64 needs NVIDIA's open GPU kernel modules, but the apt pins install the "
        "proprietary flavour"
    )
    # where the proprietary pin is written, and what to pin instead in either repository
    placed = replace(
        facts(gpu="blackwell", flavours=("proprietary",)),
        proprietary_pins=("gpu.yaml:9: sources.node-packages.packages.nvidia-kernel-dkms",),
    )
    assert failures(placed, rules)["gpu.open-kernel-modules"] == (
        "blackwell on amd64 needs NVIDIA's open GPU kernel modules, but the apt pins install the "
        "proprietary flavour (gpu.yaml:9: sources.node-packages.packages.nvidia-kernel-dkms): pin "
        "NVIDIA's nvidia-open or Debian's nvidia-open-kernel-dkms instead of cuda-drivers or "
        "nvidia-kernel-dkms"
    )
    assert failures(facts(gpu="hopper", arch="arm64", flavours=("proprietary",)), rules)
    result = evaluate_all(facts(gpu="hopper", flavours=("proprietary",)), rules)
    assert result.violations == []
    assert "gpu.open-kernel-modules" in result.not_applicable


def test_absent_facts_do_not_apply(rules):
    bare = facts(
        kubelet=None, kubeadm=None, kubectl=None, crictl=None, nvidia_driver=None, flavours=()
    )
    result = evaluate_all(bare, rules)
    assert result.violations == []
    assert result.not_applicable["skew.kubelet"] == "no kubelet staged (vars.kubeletVersion)"
    assert (
        result.not_applicable["containerd.kubernetes"] == "no kubelet staged (vars.kubeletVersion)"
    )
    assert "gpu.driver-branch" in result.not_applicable
    assert "cluster.line" in result.applied


def test_pin_disagreement_is_a_violation(rules):
    f = facts()
    var, pin = fact("2.1.4", "x.yaml:3: vars.containerdVersion"), fact("2.1.3", "x.yaml:9: pin")
    broken = VariantFacts(
        **{**f.__dict__, "disagreements": (Disagreement("containerd", var, pin),)}
    )
    assert failures(broken, rules) == {
        "pins.agree": "containerd 2.1.4 (x.yaml:3: vars.containerdVersion) disagrees with the pin "
        "2.1.3 (x.yaml:9: pin, upstream 2.1.3)"
    }


# -- facts from recipes ------------------------------------------------------------------------


def test_facts_from_vars_and_pins(tmp_path):
    path = write_leaf_recipe(
        tmp_path / "r.yaml",
        gpu="blackwell",
        vars={"nvidiaDriverVersion": "580.95.05", "containerdVersion": "2.1.4"},
        packages={
            "containerd": "2.1.4~ds1-1",
            "runc": "1.3.0+ds1-1",
            "nvidia-open": "580.95.05-1",
            "nvidia-driver-cuda": "580.95.05-1",
        },
    )
    (variant,) = expand(load_recipe(path))
    f = variant_facts(variant, "r.yaml")
    assert {k: str(v.version) for k, v in f.components.items()} == {
        "kubelet": "1.36.3",
        "containerd": "2.1.4",
        "runc": "1.3.0",
        "nvidia-driver": "580.95.05",
    }
    assert f.components["runc"].where.endswith(": sources.node-packages.packages.runc")
    assert f.components["kubelet"].where == f"{path}:6: vars.kubeletVersion"
    assert str(f.cluster.version) == "1.36.3"  # type: ignore[union-attr]
    assert f.kernel_modules == {"open"}
    assert f.disagreements == ()


@pytest.mark.parametrize(
    ("packages", "driver", "flavours"),
    [
        # Debian's versioned 535 packages (nvidia-tesla-535-*, Debian 13's non-free) are the
        # driver and its proprietary modules, as nvidia-kernel-dkms is
        ({"nvidia-tesla-535-kernel-dkms": "535.274.02-1~deb13u1"}, "535.274.02", {"proprietary"}),
        ({"nvidia-tesla-535-driver": "535.274.02-1~deb13u1"}, "535.274.02", set()),
        # Debian's OpenCL ICD is neither the driver nor the open kernel modules
        ({"nvidia-opencl-icd": "550.163.01-2"}, None, set()),
        ({"nvidia-tesla-535-opencl-icd": "535.274.02-1~deb13u1"}, None, set()),
        ({"nvidia-open-kernel-dkms": "550.163.01-2"}, "550.163.01", {"open"}),
        ({"nvidia-open-580": "580.95.05-1"}, "580.95.05", {"open"}),
    ],
)
def test_nvidia_package_names_as_debian_and_nvidia_write_them(
    tmp_path, packages: dict[str, str], driver: str | None, flavours: set[str]
):
    path = write_leaf_recipe(tmp_path / "r.yaml", gpu="blackwell", packages=packages)
    (variant,) = expand(load_recipe(path))
    f = variant_facts(variant, "r.yaml")
    got = f.components.get("nvidia-driver")
    assert (str(got.version) if got else None) == driver
    assert f.kernel_modules == flavours


def test_ovn_pins_are_one_calendar_version(tmp_path, rules):
    """The node's ovn-host and an image's ovn-central are OVN pins: read as OVN's YY.MM.PATCH
    (the month's leading zero kept in messages), they must agree (pins.agree)."""
    path = write_leaf_recipe(
        tmp_path / "r.yaml",
        packages={"ovn-host": "23.03.1-1~deb12u2", "ovn-central": "23.09.0-1"},
    )
    (variant,) = expand(load_recipe(path))
    f = variant_facts(variant, "r.yaml")
    assert f.components["ovn"].text == "23.09.0-1"  # the first pin, by package name
    got = failures(f, rules)
    assert got["pins.agree"].startswith("ovn 23.09.0-1 (")
    assert "disagrees with the pin 23.03.1-1~deb12u2" in got["pins.agree"]
    path.write_text(path.read_text().replace("23.09.0-1", "23.03.1-1~deb12u2"))
    (variant,) = expand(load_recipe(path))
    assert failures(variant_facts(variant, "r.yaml"), rules) == {}


def test_a_bad_calendar_version_names_file_and_field(tmp_path):
    path = write_leaf_recipe(tmp_path / "r.yaml", packages={"ovn-host": "23.03-1"})
    (variant,) = expand(load_recipe(path))
    with pytest.raises(VersionError) as err:
        variant_facts(variant, "r.yaml")
    assert err.value.message.startswith(
        f"{path}:13: sources.node-packages.packages.ovn-host: '23.03-1': upstream part: '23.03'"
    ), err.value.message
    assert "expected YY.MM.PATCH such as 23.03.1" in err.value.message


def test_var_and_pin_disagreeing(tmp_path, rules):
    path = write_leaf_recipe(
        tmp_path / "r.yaml",
        vars={"containerdVersion": "2.1.4"},
        packages={"containerd.io": "2.1.3-1~debian.12~bookworm"},
    )
    (variant,) = expand(load_recipe(path))
    f = variant_facts(variant, "r.yaml")
    (d,) = f.disagreements
    assert (d.component, d.var.text, d.pin.text) == (
        "containerd",
        "2.1.4",
        "2.1.3-1~debian.12~bookworm",
    )
    assert failures(f, rules)["pins.agree"].startswith(
        f"containerd 2.1.4 ({path}:7: vars.containerdVersion) disagrees with the pin "
        "2.1.3-1~debian.12~bookworm"
    )


def test_a_bad_version_var_names_file_and_field(tmp_path):
    path = write_leaf_recipe(tmp_path / "r.yaml", vars={"kubeletVersion": "1.36"})
    (variant,) = expand(load_recipe(path))
    with pytest.raises(VersionError) as err:
        variant_facts(variant, "r.yaml")
    assert err.value.message.startswith(f"{path}:6: vars.kubeletVersion: '1.36'")


# -- the rules file ----------------------------------------------------------------------------
def broken_rules(tmp_path: Path, old: str, new: str) -> Path:
    text = RULES_FILE.read_text()
    assert old in text
    path = tmp_path / "compatibility.yaml"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "    newerMinors: 0\n    olderMinors: 3",
            "    newerMinor: 0\n    olderMinors: 3",
            "rules[6].newerMinor: unknown key 'newerMinor'",
        ),
        ("    olderMinors: 3", '    olderMinors: "3"', "rules[6].olderMinors: expected an integer"),
        ("      hopper: 525\n", "", "rules[4].minimum: no entry for GPU generation 'hopper'"),
        (
            '"1.36": ">=2.0.0"',
            '"1.36": "2.0.0"',
            "rules[10].constraints.1.36: constraint '2.0.0': '2.0.0' has no operator",
        ),
        (
            'lines: ["1.34", "1.35", "1.36"]',
            'lines: ["1.34", "1.35", "1.36.1"]',
            "rules[0].lines[2]: '1.36.1' is a patch release",
        ),
        ("id: skew.kubectl", "id: skew.kubelet", "duplicate rule id 'skew.kubelet'"),
        ("check: architectures", "check: architecture", "rules[1]"),
    ],
)
def test_rules_file_errors_name_file_and_field(tmp_path, old, new, expected):
    path = broken_rules(tmp_path, old, new)
    with pytest.raises(RecipeError) as err:
        load_rules(path)
    assert str(path) in err.value.message
    assert expected in err.value.message


def test_find_rules(tmp_path):
    catalog = tmp_path / "recipes"
    (catalog / "sub").mkdir(parents=True)
    assert find_rules(catalog / "sub" / "r.yaml") is None
    shutil.copy(RULES_FILE, catalog / "compatibility.yaml")
    assert find_rules(catalog / "sub" / "r.yaml") == catalog / "compatibility.yaml"
    assert find_rules(tmp_path / "r.yaml") is None


def test_default_recipe_validates_with_the_real_rules():
    recipe = REPO / "recipes" / "default.yaml"
    report = check_variants(recipe, expand(load_recipe(recipe)))
    assert report.rules_path is not None and report.rules_path.endswith(
        "recipes/compatibility.yaml"
    )
    assert {"kubernetes.lines", "gpu.architectures", "cluster.line"} <= set(report.applied)
    assert report.not_applicable["skew.kubelet"] == "no kubelet staged (vars.kubeletVersion)"


# -- the CLI -----------------------------------------------------------------------------------


@pytest.fixture
def catalog(tmp_path, monkeypatch) -> Path:
    (tmp_path / "recipes").mkdir()
    shutil.copy(RULES_FILE, tmp_path / "recipes" / "compatibility.yaml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NVKR_CACHE", str(tmp_path / "store"))
    monkeypatch.setenv("NVKR_CONFIG", str(tmp_path / "no-config.yaml"))
    return tmp_path


def test_validate_passes_and_lists_rules(catalog, capsys):
    write_leaf_recipe(catalog / "recipes" / "ok.yaml", vars={"kubeadmVersion": "1.36.3"})
    code, out, err = invoke(*["validate", "recipes/ok.yaml"])
    assert code == 0, err
    assert (
        "compatibility rules recipes/compatibility.yaml: 8 rules checked: kubernetes.lines, " in out
    )
    assert "gpu.architectures, skew.kubelet, skew.kubeadm, cluster.line, pins.agree\n" in out
    assert "  not applicable: skew.kubectl: no kubectl staged (vars.kubectlVersion)\n" in out
    assert (
        "  not applicable: containerd.kubernetes: no containerd staged "
        "(vars.containerdVersion or an apt pin)\n"
    ) in out


def test_validate_fails_with_every_violation(catalog, capsys):
    write_leaf_recipe(
        catalog / "recipes" / "bad.yaml",
        gpu="ampere",
        arch="arm64",
        vars={"kubeadmVersion": "1.36.2"},
    )
    code, out, err = invoke(*["validate", "recipes/bad.yaml"])
    assert code == 2 and out == ""
    assert err.startswith(
        "error[NVKR-E-RECIPE]: recipes/bad.yaml: variant gpu=ampere,kubernetes=1.36,arch=arm64: "
        "rule gpu.architectures: ampere supports amd64, not arm64\n"
        "recipes/bad.yaml: variant gpu=ampere,kubernetes=1.36,arch=arm64: rule skew.kubeadm: "
        "kubeadm 1.36.2 does not match the cluster (kube-apiserver) 1.36.3"
    )
    assert "hint: the rules are in recipes/compatibility.yaml" in err


def test_plan_refuses_an_invalid_combination(catalog, capsys):
    write_leaf_recipe(catalog / "recipes" / "bad.yaml", gpu="volta")
    code, _, err = invoke(*["plan", "recipes/bad.yaml", "--offline"])
    assert code == 2
    assert "rule gpu.generations: GPU generation 'volta' is not supported" in err


def test_validate_outside_a_catalog_and_with_rules(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_leaf_recipe(tmp_path / "r.yaml", gpu="volta")
    code, out, _ = invoke(*["validate", "r.yaml"])
    assert code == 0
    assert out.endswith(
        "no compatibility rules apply (no recipes/compatibility.yaml above r.yaml)\n"
    )
    code, _, err = invoke(*["validate", "r.yaml", "--rules", str(RULES_FILE)])
    assert code == 2 and "rule gpu.generations" in err


def test_committed_schema_matches_the_models():
    from nvkr.catalog.rules import json_schema_bytes

    committed = (REPO / "schema" / "compatibility.schema.json").read_bytes()
    assert committed == json_schema_bytes(), (
        "regenerate: python -c 'from nvkr.catalog.rules import json_schema_bytes; "
        'open("schema/compatibility.schema.json", "wb").write(json_schema_bytes())\''
    )
