"""Matrix expansion: cells, exclude, --variant selections, criteria overlays (fail closed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvkr.errors import RecipeError, RecipeReferenceError, UsageError
from nvkr.recipe.loader import load_recipe
from nvkr.recipe.matrix import Variant, expand, parse_variant_option
from tests.helpers.recipes import FIXTURES, MINIMAL, WriteFile

GRID = (
    MINIMAL.replace("  gpu: [hopper]", "  gpu: [hopper, blackwell]")
    .replace('  kubernetes: ["1.36"]', '  kubernetes: ["1.35", "1.36"]')
    .replace("  arch: [amd64]", "  arch: [amd64, arm64]")
)


def _ids(variants: list[Variant]) -> list[str]:
    return [v.id for v in variants]


# -- --variant ---------------------------------------------------------------------------------
def test_parse_variant_option() -> None:
    assert parse_variant_option("gpu=hopper,kubernetes=1.36,arch=amd64") == {
        "gpu": "hopper",
        "kubernetes": "1.36",
        "arch": "amd64",
    }
    assert parse_variant_option("arch=arm64") == {"arch": "arm64"}
    assert parse_variant_option(" gpu = hopper , arch=amd64 ") == {"gpu": "hopper", "arch": "amd64"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty selection"),
        ("gpu", "'gpu' is not AXIS=VALUE"),
        ("gpu=", "'gpu=' is not AXIS=VALUE"),
        ("=hopper", "is not AXIS=VALUE"),
        ("gpu=hopper,", "'' is not AXIS=VALUE"),
        ("gpus=hopper", "unknown axis 'gpus' (axes: gpu, kubernetes, arch)"),
        ("gpu=hopper,gpu=blackwell", "axis 'gpu' given twice"),
    ],
)
def test_parse_variant_option_errors(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        parse_variant_option(text)
    assert err.value.exit_code == 2


# -- cells -------------------------------------------------------------------------------------
def test_expand_is_the_product_in_matrix_order(write: WriteFile) -> None:
    variants = expand(load_recipe(write("r.yaml", GRID)))
    assert _ids(variants) == [
        "gpu=hopper,kubernetes=1.35,arch=amd64",
        "gpu=hopper,kubernetes=1.35,arch=arm64",
        "gpu=hopper,kubernetes=1.36,arch=amd64",
        "gpu=hopper,kubernetes=1.36,arch=arm64",
        "gpu=blackwell,kubernetes=1.35,arch=amd64",
        "gpu=blackwell,kubernetes=1.35,arch=arm64",
        "gpu=blackwell,kubernetes=1.36,arch=amd64",
        "gpu=blackwell,kubernetes=1.36,arch=arm64",
    ]
    first = variants[0]
    assert (first.gpu, first.kubernetes, first.arch) == ("hopper", "1.35", "amd64")
    assert first.axes == {"gpu": "hopper", "kubernetes": "1.35", "arch": "amd64"}
    assert first.recipe.overlays == []
    assert len(set(variants)) == 8 and variants[0] == expand(load_recipe(write("r.yaml", GRID)))[0]


def test_exclude_drops_matching_cells(write: WriteFile) -> None:
    text = GRID.replace(
        "  arch: [amd64, arm64]\n",
        "  arch: [amd64, arm64]\n  exclude:\n    - {gpu: hopper, arch: arm64}\n    - {kubernetes: '1.35'}\n",
    )
    assert _ids(expand(load_recipe(write("r.yaml", text)))) == [
        "gpu=hopper,kubernetes=1.36,arch=amd64",
        "gpu=blackwell,kubernetes=1.36,arch=amd64",
        "gpu=blackwell,kubernetes=1.36,arch=arm64",
    ]


def test_exclude_value_not_in_matrix_is_an_error(write: WriteFile) -> None:
    path = write(
        "r.yaml",
        GRID.replace(
            "  arch: [amd64, arm64]\n", "  arch: [amd64, arm64]\n  exclude: [{gpu: hoper}]\n"
        ),
    )
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    assert (
        str(err.value)
        == f"{path}:8: matrix.exclude[0].gpu: exclude entry gpu: 'hoper' is not a matrix gpu value (matrix.gpu: hopper, blackwell)"
    )


def test_duplicate_matrix_value_is_an_error(write: WriteFile) -> None:
    path = write("r.yaml", MINIMAL.replace("  arch: [amd64]", "  arch: [amd64, amd64]"))
    with pytest.raises(
        RecipeError, match=r"r\.yaml:7: matrix\.arch\[1\]: matrix arch lists 'amd64' twice"
    ):
        load_recipe(path)


# -- selections --------------------------------------------------------------------------------
def test_selections_keep_cells_matching_any(write: WriteFile) -> None:
    loaded = load_recipe(write("r.yaml", GRID))
    selected = expand(
        loaded,
        [
            parse_variant_option("gpu=blackwell,kubernetes=1.36"),
            parse_variant_option("gpu=hopper,arch=arm64,kubernetes=1.35"),
        ],
    )
    assert _ids(selected) == [
        "gpu=hopper,kubernetes=1.35,arch=arm64",
        "gpu=blackwell,kubernetes=1.36,arch=amd64",
        "gpu=blackwell,kubernetes=1.36,arch=arm64",
    ]
    assert len(expand(loaded, [])) == len(expand(loaded, None)) == 8


def test_selection_value_not_in_matrix(write: WriteFile) -> None:
    loaded = load_recipe(write("r.yaml", GRID))
    with pytest.raises(UsageError) as err:
        expand(loaded, [{"kubernetes": "1.37"}])
    assert (
        str(err.value)
        == "--variant: kubernetes '1.37' is not in the matrix of demo (allowed: 1.35, 1.36)"
    )


def test_selection_of_an_excluded_cell(write: WriteFile) -> None:
    loaded = load_recipe(
        write(
            "r.yaml",
            GRID.replace(
                "  arch: [amd64, arm64]\n",
                "  arch: [amd64, arm64]\n  exclude: [{gpu: hopper, arch: arm64}]\n",
            ),
        )
    )
    with pytest.raises(
        UsageError,
        match=r"--variant gpu=hopper,arch=arm64: every matching cell is excluded by matrix\.exclude",
    ) as err:
        expand(loaded, [{"gpu": "hopper", "arch": "arm64"}])
    assert err.value.hint is not None and "gpu=hopper,kubernetes=1.35,arch=amd64" in err.value.hint


# -- criteria overlays -------------------------------------------------------------------------
OVERLAID = (
    GRID
    + """\
vars: {driver: generic}
overlays:
  - when: {gpu: hopper}
    vars: {driver: "570"}
  - when: {gpu: blackwell}
    extends: [gpu/blackwell.yaml]
  - when: {gpu: blackwell, arch: arm64}  # cgo, with the tools tree it needs
    sources:
      tools-packages:
        apt: {debian: {url: "http://deb.debian.org/debian", suite: bookworm}}
        arch: amd64
        packages: {gcc: "4:12.2.0-3", libc6-dev: "2.36-9+deb12u14"}
    artifacts:
      tools: {builder: rootfs, packages: tools-packages}
      agent: {cgo: true, toolsTree: tools}
  - when: {arch: amd64}  # an overlay names arch, so every arch needs one (fail closed)
"""
)


def test_overlays_apply_only_to_matching_cells(write: WriteFile) -> None:
    write("gpu/blackwell.yaml", "vars: {driver: '580'}\nsources:\n  fabric: {path: ../fabric}\n")
    variants = {v.id: v for v in expand(load_recipe(write("r.yaml", OVERLAID)))}
    hopper = variants["gpu=hopper,kubernetes=1.36,arch=arm64"]
    blackwell_amd = variants["gpu=blackwell,kubernetes=1.36,arch=amd64"]
    blackwell_arm = variants["gpu=blackwell,kubernetes=1.36,arch=arm64"]
    assert hopper.recipe.vars == {"driver": "570"}
    assert "fabric" not in hopper.recipe.sources
    assert blackwell_amd.recipe.vars == {"driver": "580"}
    assert "fabric" in blackwell_amd.recipe.sources
    # Path sources declared by an overlay file are relative to that file.
    assert blackwell_amd.source_dirs["fabric"].name == "gpu"
    assert blackwell_amd.source_dirs["app"] == hopper.source_dirs["app"]
    assert blackwell_arm.recipe.artifacts["agent"].cgo is True
    assert "tools" in blackwell_arm.recipe.artifacts
    assert blackwell_amd.recipe.artifacts["agent"].cgo is False
    assert "tools" not in blackwell_amd.recipe.artifacts


def test_overlay_null_deletes_and_lists_replace(write: WriteFile) -> None:
    text = (
        MINIMAL
        + """\
vars: {keep: a, drop: b}
overlays:
  - when: {gpu: hopper}
    vars: {drop: null}
    artifacts:
      agent: {tags: [x, y]}
"""
    )
    (variant,) = expand(load_recipe(write("r.yaml", text)))
    assert variant.recipe.vars == {"keep": "a"}
    assert variant.recipe.artifacts["agent"].tags == ["x", "y"]


def test_overlay_file_null_deletes_a_recipe_value(write: WriteFile) -> None:
    write("gpu/hopper.yaml", "extends: [common.yaml]\nvars: {drop: null}\n")
    write("gpu/common.yaml", "vars: {common: c}\n")
    text = (
        MINIMAL
        + "vars: {keep: a, drop: b}\noverlays:\n  - when: {gpu: hopper}\n    extends: [gpu/hopper.yaml]\n"
    )
    (variant,) = expand(load_recipe(write("r.yaml", text)))
    assert variant.recipe.vars == {"keep": "a", "common": "c"}


def test_overlay_when_value_not_in_matrix(write: WriteFile) -> None:
    path = write("r.yaml", MINIMAL + "overlays:\n  - when: {gpu: hoper}\n    vars: {a: b}\n")
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    assert (
        str(err.value)
        == f"{path}:16: overlays[0].when.gpu: overlay criterion gpu: 'hoper' is not a matrix gpu value (matrix.gpu: hopper)"
    )


def test_overlay_when_float_gets_quote_hint(write: WriteFile) -> None:
    path = write("r.yaml", MINIMAL + "overlays:\n  - when: {kubernetes: 1.36}\n")
    with pytest.raises(
        RecipeError,
        match=r"r\.yaml:16: overlays\[0\]\.when\.kubernetes: expected a string; YAML read 1\.36 as a float",
    ):
        load_recipe(path)


def test_axis_value_honoured_by_no_overlay(write: WriteFile) -> None:
    text = MINIMAL.replace("  gpu: [hopper]", "  gpu: [ampere, hopper, blackwell]") + (
        "overlays:\n  - when: {gpu: hopper}\n  - when: {gpu: blackwell}\n"
    )
    path = write("r.yaml", text)
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    assert str(err.value) == (
        f"{path}:5: matrix.gpu[0]: matrix gpu value 'ampere' is honoured by no overlay (overlays exist for: blackwell, hopper)"
    )
    assert err.value.hint is not None and "when: {gpu: ampere}" in err.value.hint


def test_overlay_file_may_hold_only_overlay_keys(write: WriteFile) -> None:
    hopper = write("gpu/hopper.yaml", "vars: {}\nmatrix: {gpu: [hopper]}\n")
    path = write(
        "r.yaml", MINIMAL + "overlays:\n  - when: {gpu: hopper}\n    extends: [gpu/hopper.yaml]\n"
    )
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    assert (
        str(err.value)
        == f"{hopper}:2: matrix: unknown key 'matrix' in an overlay file (allowed: extends, vars, sources, artifacts, releaseSet)"
    )


def test_missing_overlay_file_names_the_overlay_line(write: WriteFile) -> None:
    path = write(
        "r.yaml",
        MINIMAL + "overlays:\n  - when: {gpu: hopper}\n    extends:\n      - gpu/hopper.yaml\n",
    )
    with pytest.raises(RecipeReferenceError) as err:
        load_recipe(path)
    assert str(err.value) == (
        f"{path}:18: overlays[0].extends[0]: extends file 'gpu/hopper.yaml' not found (looked for {path.parent}/gpu/hopper.yaml)"
    )


def test_overlay_files_are_relative_to_the_declaring_file(write: WriteFile) -> None:
    write("base/gpu/hopper.yaml", "vars: {driver: '570'}\n")
    write(
        "base/common.yaml", "overlays:\n  - when: {gpu: hopper}\n    extends: [gpu/hopper.yaml]\n"
    )
    path = write("r.yaml", "extends: [base/common.yaml]\n" + MINIMAL)
    (variant,) = expand(load_recipe(path))
    assert variant.recipe.vars == {"driver": "570"}


def test_invalid_overlay_value_is_reported_at_the_overlay_file(write: WriteFile) -> None:
    hopper = write("gpu/hopper.yaml", "artifacts:\n  agent:\n    cgo: 'yes'\n")
    loaded = load_recipe(
        write(
            "r.yaml",
            MINIMAL + "overlays:\n  - when: {gpu: hopper}\n    extends: [gpu/hopper.yaml]\n",
        )
    )
    with pytest.raises(RecipeError) as err:
        expand(loaded)
    assert str(err.value) == f"{hopper}:3: artifacts.agent.cgo: expected true or false (got 'yes')"


def test_float_in_overlay_vars_fails_at_load(write: WriteFile) -> None:
    path = write(
        "r.yaml", MINIMAL + "overlays:\n  - when: {gpu: hopper}\n    vars: {cuda: 12.10}\n"
    )
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    assert (
        str(err.value)
        == f'{path}:17: overlays[0].vars.cuda: expected a string; YAML read 12.10 as a float: quote it: "12.10"'
    )


def test_fixture_variants() -> None:
    loaded = load_recipe(FIXTURES / "gpu-node" / "gpu-node.yaml")
    variants = expand(loaded)
    assert _ids(variants) == [
        "gpu=hopper,kubernetes=1.35,arch=amd64",
        "gpu=hopper,kubernetes=1.36,arch=amd64",
        "gpu=blackwell,kubernetes=1.35,arch=amd64",
        "gpu=blackwell,kubernetes=1.35,arch=arm64",
        "gpu=blackwell,kubernetes=1.36,arch=amd64",
        "gpu=blackwell,kubernetes=1.36,arch=arm64",
    ]
    last = variants[-1].recipe
    assert last.releaseSet.name == "gpu-node-blackwell-k8s1.36-arm64"
    assert last.vars == {
        "goVersion": "1.27.3",
        "kernelModules": "open",
        "driverBranch": "580",
        "kubernetesPatch": "1.36.3",
    }
    kubelet = last.sources["kubelet"]
    assert (
        getattr(kubelet, "url", None) == "https://dl.k8s.io/release/v1.36.3/bin/linux/arm64/kubelet"
    )
    assert last.artifacts["agent"].ldflags == ["-X main.gpu=blackwell", "-X main.driver=580"]
    assert (
        last.releaseSet.clusterRelease is not None
        and last.releaseSet.clusterRelease.kubernetes == "1.36.3"
    )
    assert variants[-1].source_dirs["fabric-manager"] == Path(FIXTURES / "gpu-node" / "gpu")
