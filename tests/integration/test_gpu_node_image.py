"""End to end, at lock time: a GPU node's packages whose NVIDIA stack comes from a signed
suite/component apt repository (served on loopback by tests/helpers/aptrepo.py with the upstream
layout) named with a keyring file in the project, beside Debian's real mirror for the rest. The
lock pins the repository's packages (versions, ``arch: all``, URLs) in one closure with Debian's;
a Release file whose signature fails refuses the lock.

The image made from such packages, and its boot, are tested by the catalog leaf
(tests/integration/test_catalog_leaf.py, whose NVIDIA stand-ins are the same packages):
test_catalog_leaf_locks_and_builds_against_loopback_upstreams reads containerd's NVIDIA runtime
handler, the runtime stand-in, kubelet's unit and drop-in, the recipe's kubelet labels and the
manifest of every staged binary in the image;
test_cluster_api_bootstrap_data_joins_with_the_exports_kubeadm_configuration boots it to the
agent's readiness line with every binary of the manifest verified.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.helpers.aptrepo import DRIVER_VERSION, TOOLKIT_VERSION, AptRepo
from tests.helpers.nvkr import run_nvkr

pytestmark = pytest.mark.slow


RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: gpu-node}
epoch: "1764547200"
matrix: {gpu: [hopper], kubernetes: ["1.36"], arch: [amd64]}
sources:
  node-packages:
    apt:
@REPOS@
      nvidia: {url: "@NVIDIA_URL@", suite: stable, keyring: keys/nvidia.gpg}
    arch: "{{ arch }}"
    packages:
@PACKAGES@
      nvidia-container-toolkit: "@TOOLKIT@"
      nvidia-driver-570: "@DRIVER@"
artifacts:
  rootfs: {builder: rootfs, packages: node-packages}
releaseSet:
  name: gpu-node
"""


def _default_packages() -> tuple[str, str]:
    """The default recipe's Debian repositories (its OS layer's suites) and package pins for
    amd64 (the OS layer's list, the recipe's own and the amd64 overlay), as recipe lines."""
    from nvkr.recipe.loader import load_recipe
    from nvkr.recipe.matrix import expand

    loaded = load_recipe(REPO / "recipes" / "default.yaml")
    (variant,) = expand(loaded, [{"gpu": "hopper", "arch": "amd64"}])
    source = variant.recipe.sources["node-packages"]
    repos = "\n".join(
        f'      {name}: {{url: "{repo.url}", suite: {repo.suite}}}'
        for name, repo in sorted(source.apt.items())  # type: ignore[union-attr]
    )
    packages = "\n".join(
        f'      {name}: "{version}"'
        for name, version in sorted(source.packages.items())  # type: ignore[union-attr]
    )
    return repos, packages


def _project(tmp: Path, repo: AptRepo) -> Path:
    project = tmp / "project"
    (project / "keys").mkdir(parents=True)
    (project / "keys" / "nvidia.gpg").write_bytes(repo.keyring.read_bytes())
    repos, packages = _default_packages()
    text = (
        RECIPE.replace("@NVIDIA_URL@", str(repo.url))
        .replace("@REPOS@", repos)
        .replace("@PACKAGES@", packages)
        .replace("@TOOLKIT@", TOOLKIT_VERSION)
        .replace("@DRIVER@", DRIVER_VERSION)
    )
    (project / "gpu-node.yaml").write_text(text)
    return project


def test_gpu_stack_from_a_signed_apt_repo_is_locked_with_debians_packages(
    gpu_apt_repo: AptRepo, seed_store, tmp_path: Path
) -> None:
    project = _project(tmp_path, gpu_apt_repo)
    store = seed_store(tmp_path / "store")  # Debian's .debs, fetched before
    locked = run_nvkr("lock", "gpu-node.yaml", cwd=project, store=store)
    assert locked.code == 0, locked.stderr
    lock = json.loads((project / "lockfiles" / "gpu-node.lock.json").read_text())
    (apt_entry,) = [e for e in lock["sources"] if e["name"] == "node-packages"]
    debs = {p["name"]: p for p in apt_entry["resolved"]["packages"]}
    assert debs["nvidia-container-toolkit"]["version"] == TOOLKIT_VERSION
    assert debs["nvidia-driver-570"]["arch"] == "all"
    assert debs["libnvidia-container1"]["url"].startswith(str(gpu_apt_repo.url))
    assert debs["containerd"]["url"].startswith("http://deb.debian.org/debian/pool/")


def test_a_gpu_repo_whose_signature_fails_is_refused_at_lock(
    gpu_apt_repo: AptRepo, seed_store, tmp_path: Path
) -> None:
    project = _project(tmp_path, gpu_apt_repo)
    gpu_apt_repo.resign_with_other_key()
    store = seed_store(tmp_path / "store")
    res = run_nvkr("lock", "gpu-node.yaml", cwd=project, store=store)
    assert res.code == 3, res.stderr
    assert "error[NVKR-E-INTEGRITY]" in res.stderr and "Release signature" in res.stderr
    assert not (project / "lockfiles" / "gpu-node.lock.json").exists()
