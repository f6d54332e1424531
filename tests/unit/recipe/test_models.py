"""Model contract: frozen, strict, unknown keys rejected."""

from __future__ import annotations

import pydantic
import pytest

from nvkr.builders.go_binary.artifact import GoBinaryArtifact
from nvkr.builders.node_image.artifact import NodeImageArtifact
from nvkr.recipe.loader import load_recipe
from nvkr.recipe.models import Matrix, Recipe
from tests.helpers.recipes import FIXTURES


def test_models_are_frozen() -> None:
    recipe = load_recipe(FIXTURES / "gpu-node" / "gpu-node.yaml").recipe
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        recipe.epoch = "0"  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        recipe.matrix.gpu = ["ampere"]  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        recipe.releaseSet.name = "other"  # type: ignore[misc]


def test_models_are_strict_and_closed() -> None:
    with pytest.raises(pydantic.ValidationError):
        Matrix.model_validate({"gpu": ["hopper"], "kubernetes": [1.36], "arch": ["amd64"]})
    with pytest.raises(pydantic.ValidationError):
        GoBinaryArtifact.model_validate({"builder": "go-binary", "source": "a", "cgo": "yes"})
    with pytest.raises(pydantic.ValidationError):
        GoBinaryArtifact.model_validate({"builder": "go-binary", "source": "a", "colour": "red"})


def test_json_round_trip() -> None:
    recipe = load_recipe(FIXTURES / "gpu-node" / "gpu-node.yaml").recipe
    assert Recipe.model_validate_json(recipe.model_dump_json()) == recipe


@pytest.mark.parametrize("size", ["0MiB", "0GiB", "16384GiB", "99999999999999999999GiB"])
def test_a_node_image_size_out_of_range_is_refused(size: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=r"a disk size is 1MiB \.\. 16777215MiB"):
        NodeImageArtifact.model_validate(
            {"builder": "node-image", "rootfs": "r", "kubernetesVersion": "1.36.4", "size": size}
        )


def test_the_largest_node_image_size_is_accepted() -> None:
    for size in ("16383GiB", "16777215MiB", "1MiB"):
        artifact = NodeImageArtifact.model_validate(
            {"builder": "node-image", "rootfs": "r", "kubernetesVersion": "1.36.4", "size": size}
        )
        assert artifact.size == size


def test_max_pods_is_an_int32_as_kubelet_reads_it(tmp_path) -> None:
    """KubeletConfiguration's maxPods is an int32: a larger one would give a node image whose
    kubelet refuses its configuration at boot."""
    from nvkr.errors import RecipeError
    from tests.helpers.recipes import MINIMAL

    path = tmp_path / "r.yaml"
    path.write_text(
        MINIMAL.replace(
            "  agent: {builder: go-binary, source: app}\n",
            "  agent: {builder: go-binary, source: app}\n"
            "  node: {builder: node-image, rootfs: r, kubernetesVersion: 1.36.4,"
            " kubelet: {maxPods: 99999999999999999999}}\n",
        )
    )
    with pytest.raises(
        RecipeError,
        match=r"r\.yaml:13: artifacts\.node\.kubelet\.maxPods: "
        r"expected less than or equal to 2147483647",
    ):
        load_recipe(path)
