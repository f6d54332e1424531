"""End to end: a catalog leaf (recipes/catalog/hopper-k8s1.36.yaml: base + gpu/hopper +
kubernetes/1.36 layers) locked and built against loopback stand-ins of every upstream it names, so
the code paths are the real ones: NVIDIA's flat CUDA repository and Docker's repository (signed
Release files, keys fetched by URL and pinned by fingerprint), dl.k8s.io's binaries and cri-tools'
GitHub release with their published .sha256 files, Debian's real mirror for the rest.

The leaf here extends the real leaf and changes only what a test cannot have: the two repository
keys' fingerprints (NVIDIA's and Docker's private keys are not ours) and the matrix (amd64 only).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.helpers.aptrepo import AptRepo, DebSpec, build_apt_repo, gpu_stack_packages
from tests.helpers.disk import read_root_file
from tests.helpers.k8smirror import K8sMirror, serve_k8s_mirror
from tests.helpers.nvkr import Result, make_clone, run_nvkr, seed

pytestmark = pytest.mark.slow


DRIVER = "580.105.08-1"
CONTAINERD = "2.2.1-1~debian.12~bookworm"
#: seconds: cloud-init's stages and the bootstrap under TCG on two loaded cores
BOOT_TIMEOUT = 1800.0
NVIDIA_UPSTREAM = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"
DOCKER_UPSTREAM = "https://download.docker.com/linux/debian"

LEAF = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: hopper-k8s1.36-loopback}
extends: [hopper-k8s1.36.yaml]
matrix:
  exclude: [{arch: arm64}]
sources:
  node-packages:
    apt:
      nvidia-cuda: {keyring: {fingerprint: @NVIDIA_FPR@}}
      docker: {keyring: {fingerprint: @DOCKER_FPR@}}
artifacts:
  node-image: {size: 3GiB}
"""


def _nvidia_packages() -> list[DebSpec]:
    """The packages gpu/hopper.yaml pins, in miniature (the toolkit and its libraries from
    :func:`tests.helpers.aptrepo.gpu_stack_packages`)."""
    stack = [d for d in gpu_stack_packages("amd64") if "container" in d.name]
    return [
        *stack,
        DebSpec(
            "nvidia-driver-cuda",
            DRIVER,
            "amd64",
            files={"/usr/bin/nvidia-smi": b'#!/bin/sh\necho "NVIDIA-SMI 580.105.08"\n'},
            license="NVIDIA-Proprietary",
        ),
        DebSpec(
            "nvidia-kernel-open-dkms",
            DRIVER,
            "amd64",
            files={"/usr/src/nvidia-580.105.08/dkms.conf": b'PACKAGE_NAME="nvidia"\n'},
            license="MIT",
        ),
        DebSpec(
            "nvidia-fabricmanager-580",
            DRIVER,
            "amd64",
            files={"/usr/bin/nv-fabricmanager": b"#!/bin/sh\necho fabricmanager\n"},
            license="NVIDIA-Proprietary",
        ),
    ]


def _fingerprint(repo: AptRepo) -> str:
    assert repo._gpg is not None
    return repo._gpg.fingerprint


@dataclass
class Leaf:
    """The loopback leaf locked and built once per module: ``project`` (the clone holding the
    leaf recipe and its lockfile), ``store``, ``rel`` (the leaf's path in ``project``),
    ``mirrors`` (the ``--mirror`` arguments), ``layout`` (the release set), ``built`` (the
    build's result) and the served stand-ins (``k8s``, ``nvidia``, ``docker``)."""

    project: Path
    store: Path
    rel: str
    mirrors: list[str]
    layout: Path
    locked: Result
    built: Result
    k8s: K8sMirror
    nvidia: AptRepo
    docker: AptRepo


@pytest.fixture(scope="module")
def leaf(
    tmp_path_factory: pytest.TempPathFactory, go_toolchain: tuple[Path, str]
) -> Iterator[Leaf]:
    tmp = tmp_path_factory.mktemp("catalog-leaf")
    k8s = serve_k8s_mirror(
        tmp / "k8s", releases=("1.36.4",), arches=("amd64",), recording_kubeadm=True
    )
    nvidia = build_apt_repo(tmp / "nvidia", suite="/", components=(), packages=_nvidia_packages())
    containerd = DebSpec(
        "containerd.io",
        CONTAINERD,
        "amd64",
        component="stable",
        files={"/usr/bin/containerd": b"#!/bin/sh\necho containerd 2.2.1\n"},
        fields={"Provides": "containerd, runc", "Conflicts": "containerd, runc"},
    )
    docker = build_apt_repo(
        tmp / "docker", suite="bookworm", components=("stable",), packages=[containerd]
    )
    try:
        for repo in (nvidia, docker):
            repo.serve()
        (nvidia.root / "3bf863cc.pub").write_bytes(nvidia.keyring.read_bytes())
        (docker.root / "gpg").write_bytes(docker.keyring.read_bytes())
        project = make_clone(tmp / "project")
        (project / "recipes" / "catalog" / "loopback.yaml").write_text(
            LEAF.replace("@NVIDIA_FPR@", _fingerprint(nvidia)).replace(
                "@DOCKER_FPR@", _fingerprint(docker)
            )
        )
        mirrors = [
            *k8s.mirror_args(),
            *("--mirror", f"{NVIDIA_UPSTREAM}={nvidia.url}/"),
            *("--mirror", f"{DOCKER_UPSTREAM}={docker.url}"),
        ]
        # Debian's .debs and the Go toolchain, fetched before
        store = seed(tmp / "store", go_toolchain)
        rel = "recipes/catalog/loopback.yaml"
        locked = run_nvkr("lock", rel, *mirrors, cwd=project, store=store)
        built = (
            run_nvkr("build", rel, "--locked", *mirrors, "--json", cwd=project, store=store)
            if locked.code == 0
            else locked
        )
        yield Leaf(
            project, store, rel, mirrors, project / "dist" / "nvkr-hopper-k8s1.36", locked,
            built, k8s, nvidia, docker,
        )  # fmt: skip
    finally:
        for served in (k8s, nvidia, docker):
            served.close()


def test_catalog_leaf_locks_and_builds_against_loopback_upstreams(
    leaf: Leaf, tmp_path: Path
) -> None:
    project, store, rel = leaf.project, leaf.store, leaf.rel
    k8s, nvidia = leaf.k8s, leaf.nvidia

    validated = run_nvkr("validate", rel, cwd=project, store=store)
    assert validated.code == 0, validated.stderr
    assert "containerd.kubernetes" in validated.stdout

    locked = leaf.locked
    assert locked.code == 0, locked.stderr
    lock = json.loads((project / "lockfiles" / "catalog" / "loopback.lock.json").read_text())
    entries = {e["name"]: e["resolved"] for e in lock["sources"]}
    debs = {p["name"]: p for p in entries["node-packages"]["packages"]}
    # every URL in the lock is the upstream's, never the loopback mirror's
    assert debs["nvidia-driver-cuda"]["version"] == DRIVER
    assert debs["nvidia-driver-cuda"]["url"].startswith(NVIDIA_UPSTREAM)
    assert debs["containerd.io"]["url"].startswith(DOCKER_UPSTREAM + "/pool/")
    assert "containerd" not in debs and "runc" not in debs  # containerd.io replaces Debian's
    assert debs["linux-headers-cloud-amd64"]["version"] == "6.1.192-3"
    keyrings = entries["node-packages"]["keyrings"]
    key = "sha256:" + __import__("hashlib").sha256(nvidia.keyring.read_bytes()).hexdigest()
    assert keyrings["nvidia-cuda"] == key
    assert entries["kubelet"]["url"] == "https://dl.k8s.io/release/v1.36.4/bin/linux/amd64/kubelet"
    assert entries["kubelet"]["digest"] == "sha256:" + k8s.kube("kubelet", "amd64").sha256

    built = leaf.built
    assert built.code == 0, built.stderr
    layout = leaf.layout
    from nvkr.releaseset import read_metadata

    meta = read_metadata(layout)
    assert meta["clusterRelease"]["kubernetes"] == "1.36.4"
    # the OpenTelemetry collector chart of the base layer, its upstream image pinned by digest
    assert [c["name"] for c in meta["clusterRelease"]["charts"]] == [
        "agent-chart",
        "collector-chart",
    ]
    (collector,) = [a for a in meta["artifacts"] if a["name"] == "collector-chart"]
    tgz = layout / "blobs" / "sha256" / collector["primary"]["digest"][7:]
    with tarfile.open(tgz) as tf:
        member = tf.extractfile("otel-collector/values.yaml")
        assert member is not None
        values = yaml.safe_load(member.read())
    assert values["image"]["repository"] == "otel/opentelemetry-collector-contrib"
    assert values["image"]["digest"] == (
        "sha256:213886eb6407af91b87fa47551c3632be1a6419ff3a5114ef1e6fc364628496f"
    )
    assert values["otlp"]["endpoint"] == "otel-gateway.observability.svc:4317"
    (image,) = [a for a in meta["artifacts"] if a["kind"] == "machine-image"]
    qcow2 = layout / "blobs" / "sha256" / image["primary"]["digest"][7:]
    raw = tmp_path / "disk.raw"
    subprocess.run(
        ["qemu-img", "convert", "-f", "qcow2", "-O", "raw", str(qcow2), str(raw)], check=True
    )
    sources = read_root_file(raw, "/etc/apt/sources.list")
    assert f"{NVIDIA_UPSTREAM} /\n" in sources
    assert "signed-by=/etc/apt/keyrings/nvkr-nvidia-cuda.gpg" in sources
    assert f"{DOCKER_UPSTREAM} bookworm stable" in sources
    assert 'default_runtime_name = "nvidia"' in read_root_file(raw, "/etc/containerd/config.toml")
    dropin = read_root_file(raw, "/etc/systemd/system/kubelet.service.d/20-nvkr.conf")
    assert "nvidia.com/mig.config=all-disabled" in dropin
    assert "iommu=pt" in read_root_file(raw, "/boot/grub/grub.cfg")
    staged = {
        f["path"]: f["sha256"]
        for f in json.loads(read_root_file(raw, "/etc/nvkr/manifest.json"))["files"]
    }
    assert staged["/usr/bin/kubelet"] == k8s.kube("kubelet", "amd64").sha256
    assert set(staged) >= {"/usr/bin/kubeadm", "/usr/bin/kubectl", "/usr/bin/crictl"}
    # the image's SBOM shows what kubeadm needs, so a Cluster API export does not warn
    from nvkr.delivery.export import missing_for_kubeadm
    from nvkr.oci.layout import LayoutReader

    reader = LayoutReader(layout)
    sbom = reader.read_json(image["sbom"])
    assert missing_for_kubeadm(json.loads(reader.read_blob(sbom["layers"][0]))) == []
    capi = run_nvkr(
        "release-set", "export", str(layout), "--format", "capi", cwd=project, store=store
    )
    assert capi.code == 0 and "KubeadmControlPlane" in capi.stdout, capi.stderr
    assert "kubeadm" not in capi.stderr, capi.stderr

    # Air-gapped: export what the lock pins, import it into an empty store, build offline:
    # the same release set, byte for byte.
    exported = run_nvkr("mirror", "export", rel, str(tmp_path / "export"), cwd=project, store=store)
    assert exported.code == 0, exported.stderr
    offline_store = tmp_path / "offline-store"
    imported = run_nvkr(
        "mirror", "import", str(tmp_path / "export"), cwd=project, store=offline_store
    )
    assert imported.code == 0, imported.stderr
    rebuilt = run_nvkr(
        "build",
        rel,
        "--locked",
        "--offline",
        "--out",
        "dist-offline",
        cwd=project,
        store=offline_store,
    )
    assert rebuilt.code == 0, rebuilt.stderr
    again = project / "dist-offline" / "nvkr-hopper-k8s1.36" / "index.json"
    assert again.read_bytes() == (layout / "index.json").read_bytes()


def test_cluster_api_bootstrap_data_joins_with_the_exports_kubeadm_configuration(
    leaf: Leaf, tmp_path: Path
) -> None:
    """The leaf's node image boots with the user-data Cluster API's kubeadm bootstrap provider
    writes for a node of its pool, made by ``release-set export --format capi --bootstrap-data``
    from the export's own KubeadmConfigTemplate, on a NoCloud seed (``nvkr boot-test
    --user-data``'s machinery). Its kubeadm is the mirror's recording stand-in.

    What this proves: the image's cloud-init takes NoCloud bootstrap data in CABPK's form (the
    ``## template: jinja`` header rendered from the meta-data, write_files, runcmd) and runs the
    bootstrap as Cluster API writes it: ``kubeadm join --config
    /run/kubeadm/kubeadm-join-config.yaml`` with exactly the join configuration the export
    produced (the pool's node labels in it), then the bootstrap contract's sentinel; the image's
    kubelet drop-in (the pool's kubelet arguments and labels) and the agent's readiness stay in
    place beside it. What it cannot prove: that a real kubeadm accepts that configuration and
    joins a control plane (kubeadm and a cluster are not reachable from here), nor the
    placeholder token and CA hash a real CABPK fills in.
    """
    from nvkr.delivery.export.cabpk import JOIN_CONFIG_PATH, SENTINEL
    from nvkr.machine.cloudinit import boot_with_user_data, parse_report
    from nvkr.releaseset import read_metadata
    from tests.helpers.k8smirror import KUBEADM_ARGS, KUBEADM_CONFIG

    assert leaf.built.code == 0, leaf.built.stderr
    user_data = tmp_path / "user-data"
    capi = run_nvkr(
        "release-set", "export", str(leaf.layout), "--format", "capi",
        "--control-plane-endpoint", "192.0.2.10:6443",
        "--bootstrap-data", "hopper-amd64", str(user_data),
        cwd=leaf.project, store=leaf.store,
    )  # fmt: skip
    assert capi.code == 0, capi.stderr
    assert "cloud-init" not in capi.stderr, "the leaf's image has cloud-init: no warning"
    text = user_data.read_text()
    assert text.startswith("## template: jinja\n#cloud-config\n"), text[:80]
    written = {f["path"]: f for f in yaml.safe_load(text)["write_files"]}
    join = yaml.safe_load(written[JOIN_CONFIG_PATH]["content"])
    assert join["kind"] == "JoinConfiguration"
    docs = [d for d in yaml.safe_load_all(capi.stdout) if d]
    (template,) = [d for d in docs if d["kind"] == "KubeadmConfigTemplate"]
    want_args = template["spec"]["template"]["spec"]["joinConfiguration"]["nodeRegistration"][
        "kubeletExtraArgs"
    ]
    want_labels = (
        want_args["node-labels"]
        if isinstance(want_args, dict)
        else next(a["value"] for a in want_args if a["name"] == "node-labels")
    )
    got_args = join["nodeRegistration"]["kubeletExtraArgs"]
    got = {a["name"]: a["value"] for a in got_args} if isinstance(got_args, list) else got_args
    assert got["node-labels"] == want_labels
    assert "nvkr.dev/gpu-generation=hopper" in want_labels.split(",")

    meta = read_metadata(leaf.layout)
    (image,) = [a for a in meta["artifacts"] if a["kind"] == "machine-image"]
    qcow2 = leaf.layout / "blobs" / "sha256" / image["primary"]["digest"][7:]
    raw = tmp_path / "disk.raw"
    subprocess.run(["qemu-img", "convert", "-O", "raw", str(qcow2), str(raw)], check=True)
    dropin_path = "/etc/systemd/system/kubelet.service.d/20-nvkr.conf"
    dropin = read_root_file(raw, dropin_path)
    raw.unlink()
    assert "nvidia.com/mig.config=all-disabled" in dropin

    result = boot_with_user_data(
        qcow2,
        user_data=user_data,
        expect_files=[SENTINEL, KUBEADM_ARGS, KUBEADM_CONFIG, dropin_path],
        timeout=BOOT_TIMEOUT,
        report_timeout=BOOT_TIMEOUT,
        log_file=tmp_path / "console.log",
    )
    assert all(c.ok for c in result.checks), result.checks
    report = parse_report(result.boot.lines)["files"]
    args = f"join\n--config\n{JOIN_CONFIG_PATH}\n".encode()
    assert report[KUBEADM_ARGS]["sha256"] == hashlib.sha256(args).hexdigest(), "kubeadm's argv"
    # kubeadm was given the file cloud-init wrote, which is the user-data's (checked by
    # boot_with_user_data): the export's join configuration
    assert report[KUBEADM_CONFIG]["sha256"] == report[JOIN_CONFIG_PATH]["sha256"]
    assert report[SENTINEL] is not None, "the bootstrap contract's sentinel"
    assert report[dropin_path]["sha256"] == hashlib.sha256(dropin.encode()).hexdigest()
    assert "nvkr-node-agent: ready" in result.boot.matched


@pytest.mark.parametrize("api_version", ["v1beta1", "v1beta2"])
def test_cluster_api_export_of_the_leaf_passes_the_field_rules(
    leaf: Leaf, api_version: str
) -> None:
    """``release-set export --format capi --infrastructure metal3`` of the built leaf, for
    Cluster API v1beta1 and v1beta2: every document passes the field rules read from the
    published Go types (nvkr/delivery/export/capi/fieldrules.py), and the export holds the
    Cluster, the Metal3Cluster and the cluster release's chart as add-ons (a ClusterResourceSet
    and the ConfigMap of the chart's rendered manifests, which pin the agent image by digest)."""
    from nvkr.delivery.export.capi.fieldrules import check_documents

    assert leaf.built.code == 0, leaf.built.stderr
    res = run_nvkr(
        "release-set", "export", str(leaf.layout), "--format", "capi",
        "--api-version", api_version, "--infrastructure", "metal3",
        "--control-plane-endpoint", "192.0.2.10:6443",
        "--image-base-url", "https://images.example/nvkr",
        cwd=leaf.project, store=leaf.store,
    )  # fmt: skip
    assert res.code == 0, res.stderr
    assert "warning" not in res.stderr, res.stderr  # kubeadm, kubelet and cloud-init are there
    docs = [d for d in yaml.safe_load_all(res.stdout) if d]
    assert check_documents(docs) == []
    kinds = {d["kind"] for d in docs}
    assert {
        "Cluster", "Metal3Cluster", "KubeadmControlPlane", "KubeadmConfigTemplate",
        "MachineDeployment", "MachineHealthCheck", "ClusterResourceSet", "ConfigMap",
        "Metal3MachineTemplate", "Metal3DataTemplate",
    } <= kinds  # fmt: skip
    (cluster,) = [d for d in docs if d["kind"] == "Cluster"]
    assert cluster["apiVersion"] == f"cluster.x-k8s.io/{api_version}"
    addons = "\n".join(
        str(v) for d in docs if d["kind"] == "ConfigMap" for v in d.get("data", {}).values()
    )
    assert "@sha256:" in addons, "the rendered chart pins the agent image by digest"
    assert "otel/opentelemetry-collector-contrib@sha256:213886eb" in addons, "the collector's"
