"""End to end: a catalog leaf (recipes/catalog/hopper-k8s1.36.yaml: base + gpu/hopper +
kubernetes/1.36 layers) locked and built against loopback stand-ins of every upstream it names, so
the code paths are the real ones: NVIDIA's flat CUDA repository and Docker's repository (signed
Release files, keys fetched by URL and pinned by fingerprint), dl.k8s.io's binaries and cri-tools'
GitHub release with their published .sha256 files, Debian's real mirror for the rest.

The leaf here extends the real leaf and changes only what a test cannot have: the two repository
keys' fingerprints (NVIDIA's and Docker's private keys are not ours) and the matrix (amd64 only).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.aptrepo import AptRepo, DebSpec, build_apt_repo, gpu_stack_packages
from tests.helpers.disk import read_root_file
from tests.helpers.k8smirror import K8sMirror, serve_k8s_mirror
from tests.helpers.nvkr import Result, make_clone, run_nvkr, seed

pytestmark = pytest.mark.slow


DRIVER = "580.105.08-1"
CONTAINERD = "2.2.1-1~debian.12~bookworm"
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
