"""End to end: a Go module in a git source's subdirectory with a committed ``vendor/`` (the
shape of OVN-Kubernetes: ``go-controller/`` holds go.mod, vendor/, cmd/ovnkube and pkg/),
built by the go-binary builder with the pinned toolchain (issue: the seeds' node image, item 1).

A loopback repository of that shape stands in for the upstream (unreachable here). Checked: two
clones with two stores lock and build the same binary; it runs, with the vendored dependency
linked and the commit and commit date stamped from the pin (``stamp``); a ``subdir`` without
go.mod and a vendor tree out of sync with go.mod are clear errors that leave no release set
(built in the first clone's store, whose toolchain is unpacked: an error needs no fresh store).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from nvkr.releaseset import read_metadata
from tests.helpers import REPO
from tests.helpers.nvkr import run_nvkr, seed
from tests.helpers.ovnkubernetes import CONFIG, Upstream, make_upstream

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> Upstream:
    """The stand-in repository: a good commit, then one whose go.mod requires a dependency
    version its vendor tree does not hold."""
    return make_upstream(tmp_path_factory.mktemp("upstream") / "ovn-kubernetes")


def _clone(root: Path, url: str, commit: str, subdir: str = "go-controller") -> Path:
    """A repository holding one recipe: ovnkube from ``subdir`` of the upstream at ``commit``,
    with the default recipe's pinned Go toolchain."""
    default = yaml.safe_load((REPO / "recipes" / "default.yaml").read_text())
    recipe = {
        "apiVersion": "nvkr.dev/v1alpha1",
        "kind": "Recipe",
        "metadata": {"name": "ovn"},
        "matrix": {"gpu": ["hopper"], "kubernetes": ["1.36"], "arch": ["amd64"]},
        "sources": {
            "ovn-kubernetes": {"git": url, "commit": commit, "subdir": subdir},
            "go": default["sources"]["go"],
        },
        "artifacts": {
            "ovnkube": {
                "builder": "go-binary",
                "source": "ovn-kubernetes",
                "package": "./cmd/ovnkube",
                "stamp": {f"{CONFIG}.Commit": "commit", f"{CONFIG}.BuildDate": "commitDate"},
            }
        },
        "releaseSet": {"name": "ovn", "artifacts": ["ovnkube"]},
    }
    (root / "recipes").mkdir(parents=True)
    (root / "recipes" / "ovn.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    return root


def _binary(clone: Path) -> Path:
    layout = clone / "dist" / "ovn"
    (art,) = [a for a in read_metadata(layout)["artifacts"] if a["name"] == "ovnkube"]
    return layout / "blobs" / "sha256" / art["primary"]["digest"].split(":", 1)[1]


@pytest.fixture(scope="module")
def first_build(upstream, go_toolchain, tmp_path_factory) -> tuple[Path, Path]:
    """(clone, store) of the good commit, locked and built: the first of the two clones, whose
    store (the toolchain unpacked, Go's build cache warm) the error tests build in too."""
    root = tmp_path_factory.mktemp("first")
    clone = _clone(root / "a", upstream.repo.as_uri(), upstream.good)
    store = seed(root / "a-store", go_toolchain)
    locked = run_nvkr("lock", "recipes/ovn.yaml", cwd=clone, store=store)
    assert locked.code == 0, locked.stderr
    built = run_nvkr("build", "recipes/ovn.yaml", "--locked", cwd=clone, store=store)
    assert built.code == 0, built.stderr
    return clone, store


def test_a_vendored_module_in_a_subdirectory_builds_the_same_from_two_clones(
    upstream, go_toolchain, first_build, tmp_path
) -> None:
    repo, good = upstream.repo, upstream.good
    clone = _clone(tmp_path / "b", repo.as_uri(), good)
    # a store of its own: nothing shared, Go's build cache neither
    store = seed(tmp_path / "b-store", go_toolchain, go_cache=False)
    locked = run_nvkr("lock", "recipes/ovn.yaml", cwd=clone, store=store)
    assert locked.code == 0, locked.stderr
    built = run_nvkr("build", "recipes/ovn.yaml", "--locked", cwd=clone, store=store)
    assert built.code == 0, built.stderr
    binaries = [_binary(first_build[0]), _binary(clone)]
    a, b = (p.read_bytes() for p in binaries)
    assert a == b, "two clones, two stores: the same ovnkube"
    ovnkube = tmp_path / "ovnkube"  # the layout's blob is read-only, not executable
    ovnkube.write_bytes(a)
    ovnkube.chmod(0o755)
    out = subprocess.run([str(ovnkube)], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["vendored", "dep", "v1.2.3", good, "2026-05-28T20:26:40Z"]


def test_a_subdir_without_go_mod_names_the_source_and_subdir(
    upstream, first_build, tmp_path
) -> None:
    repo, good = upstream.repo, upstream.good
    clone = _clone(tmp_path / "clone", repo.as_uri(), good, subdir="docs")
    store = first_build[1]  # an error needs no fresh store: save the toolchain's unpacking
    assert run_nvkr("lock", "recipes/ovn.yaml", cwd=clone, store=store).code == 0
    res = run_nvkr("build", "recipes/ovn.yaml", "--locked", cwd=clone, store=store)
    assert res.code == 1, res.stderr
    assert "source 'ovn-kubernetes' (subdir 'docs' of file://" in res.stderr
    assert "is not a Go module: it has no go.mod at its root" in res.stderr
    assert "Traceback" not in res.stderr and not (clone / "dist").exists()


def test_a_vendor_tree_out_of_sync_with_go_mod_is_named_with_gos_lines(
    upstream, first_build, tmp_path
) -> None:
    repo, stale = upstream.repo, upstream.stale
    clone = _clone(tmp_path / "clone", repo.as_uri(), stale)
    store = first_build[1]  # an error needs no fresh store: save the toolchain's unpacking
    assert run_nvkr("lock", "recipes/ovn.yaml", cwd=clone, store=store).code == 0
    res = run_nvkr("build", "recipes/ovn.yaml", "--locked", cwd=clone, store=store)
    assert res.code == 1, res.stderr
    assert (
        f"source 'ovn-kubernetes' (subdir 'go-controller' of {repo.as_uri()} at {stale}): "
        "vendor/modules.txt is out of sync with go.mod" in res.stderr
    )
    assert "example.org/dep@v1.2.4" in res.stderr, "Go's own line, naming the module"
    assert "go: inconsistent vendoring:" in res.stderr, "the work dir's path is not shown"
    assert "go mod vendor" in res.stderr
    assert not (clone / "dist").exists()
