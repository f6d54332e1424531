"""Templates: vars rendered with the axes, values rendered with vars; strict, sandboxed errors."""

from __future__ import annotations

import pytest

from nvkr.errors import RecipeError
from nvkr.recipe.loader import load_recipe
from nvkr.recipe.matrix import expand
from nvkr.recipe.templates import is_template
from tests.helpers.recipes import MINIMAL, SHA, WriteFile

TEMPLATED = (
    MINIMAL.replace("  arch: [amd64]", "  arch: [amd64, arm64]")
    .replace(
        "  app: {path: app}",
        '  app: {path: app}\n  kubelet:\n    url: "https://dl.k8s.io/v{{ vars.patch }}/bin/linux/{{ arch }}/kubelet"\n    sha256: '
        + SHA,
    )
    .replace("  name: demo", '  name: "{{ recipe.name }}-{{ gpu }}-{{ arch }}"')
    + 'vars:\n  patch: "{{ kubernetes }}.3"\n'
)


def test_vars_and_values_are_rendered_per_variant(write: WriteFile) -> None:
    variants = expand(load_recipe(write("r.yaml", TEMPLATED)))
    assert [v.recipe.releaseSet.name for v in variants] == [
        "demo-hopper-amd64",
        "demo-hopper-arm64",
    ]
    arm = variants[1].recipe
    assert arm.vars == {"patch": "1.36.3"}
    assert (
        getattr(arm.sources["kubelet"], "url", None)
        == "https://dl.k8s.io/v1.36.3/bin/linux/arm64/kubelet"
    )


def test_the_loaded_recipe_keeps_templates(write: WriteFile) -> None:
    loaded = load_recipe(write("r.yaml", TEMPLATED))
    assert loaded.recipe.releaseSet.name == "{{ recipe.name }}-{{ gpu }}-{{ arch }}"


def test_undefined_name_names_file_line_and_available_names(write: WriteFile) -> None:
    path = write("r.yaml", TEMPLATED.replace("{{ arch }}/kubelet", "{{ archh }}/kubelet"))
    loaded = load_recipe(path)
    with pytest.raises(RecipeError) as err:
        expand(loaded)
    assert str(err.value) == f"{path}:11: sources.kubelet.url: template error: 'archh' is undefined"
    assert err.value.hint == "available names: gpu, kubernetes, arch, recipe.name, vars.patch"


def test_undefined_var(write: WriteFile) -> None:
    path = write("r.yaml", TEMPLATED.replace("vars.patch", "vars.ptach"))
    with pytest.raises(
        RecipeError,
        match=r"r\.yaml:11: sources\.kubelet\.url: template error: 'dict object' has no attribute 'ptach'",
    ):
        expand(load_recipe(path))


def test_vars_cannot_use_vars(write: WriteFile) -> None:
    path = write("r.yaml", TEMPLATED + '  other: "{{ vars.patch }}"\n')
    with pytest.raises(RecipeError) as err:
        expand(load_recipe(path))
    assert str(err.value) == f"{path}:20: vars.other: template error: 'vars' is undefined"
    assert err.value.hint == "available names: gpu, kubernetes, arch (vars cannot use other vars)"


def test_syntax_error(write: WriteFile) -> None:
    path = write("r.yaml", TEMPLATED.replace("{{ recipe.name }}", "{{ recipe.name }"))
    with pytest.raises(
        RecipeError, match=r"r\.yaml:17: releaseSet\.name: template error: .*\(template line 1\)"
    ):
        expand(load_recipe(path))


def test_sandbox_blocks_python_internals(write: WriteFile) -> None:
    path = write("r.yaml", TEMPLATED.replace("{{ recipe.name }}", "{{ gpu.__class__.__mro__ }}"))
    with pytest.raises(RecipeError, match=r"r\.yaml:17: releaseSet\.name: template error"):
        expand(load_recipe(path))


def test_runtime_error_in_a_template(write: WriteFile) -> None:
    path = write("r.yaml", TEMPLATED.replace("{{ recipe.name }}", "{{ gpu + 1 }}"))
    with pytest.raises(
        RecipeError, match=r"r\.yaml:17: releaseSet\.name: template error: TypeError"
    ):
        expand(load_recipe(path))


def test_rendered_value_is_validated_again(write: WriteFile) -> None:
    # A digest may be a template (per-arch pins in vars); what it renders to must be a digest.
    text = (
        TEMPLATED.replace("    sha256: " + SHA, '    sha256: "{{ vars.sum }}"')
        + '  sum: "{{ arch }}"\n'
    )
    path = write("r.yaml", text)
    loaded = load_recipe(path)  # the raw template passes
    with pytest.raises(
        RecipeError,
        match=r"sources\.kubelet\.sha256: expected a sha256 digest: 64 hex digits \(got '.*'\)",
    ):
        expand(loaded)


def test_a_templated_digest_renders_per_arch(write: WriteFile) -> None:
    text = (
        TEMPLATED.replace("    sha256: " + SHA, "    sha256: \"{{ vars['sum-' ~ arch] }}\"")
        + f'  sum-amd64: "{SHA}"\n  sum-arm64: "{SHA.replace("a", "b")}"\n'
    )
    cells = expand(load_recipe(write("r.yaml", text)))
    sums = {c.arch: c.recipe.sources["kubelet"].sha256 for c in cells}  # type: ignore[union-attr]
    assert sums["amd64"] == SHA and sums.get("arm64", SHA.replace("a", "b")) == SHA.replace(
        "a", "b"
    )


def test_references_are_checked_after_rendering(write: WriteFile) -> None:
    text = TEMPLATED.replace(
        '  name: "{{ recipe.name }}-{{ gpu }}-{{ arch }}"',
        '  name: "{{ recipe.name }}"\n  machineImages: ["{{ gpu }}"]',
    )
    path = write("r.yaml", text)
    with pytest.raises(RecipeError) as err:
        expand(load_recipe(path))
    assert str(err.value) == f"{path}:18: releaseSet.machineImages[0]: no artifact named 'hopper'"


def test_invalid_release_set_name_after_rendering(write: WriteFile) -> None:
    path = write(
        "r.yaml",
        TEMPLATED.replace("{{ recipe.name }}-{{ gpu }}", "{{ recipe.name }}/{{ gpu | upper }}"),
    )
    with pytest.raises(RecipeError) as err:
        expand(load_recipe(path))
    assert str(err.value) == (
        f"{path}:17: releaseSet.name: invalid release set name 'demo/HOPPER-amd64' (rendered from "
        "'{{ recipe.name }}/{{ gpu | upper }}-{{ arch }}'): expected lower-case a-z, 0-9, '.', '_', '-', "
        "starting with a letter or digit, at most 128 characters"
    )


def test_only_template_strings_are_rendered(write: WriteFile) -> None:
    assert is_template("a{{ b }}") and is_template("{% if x %}y{% endif %}")
    assert not is_template("plain {curly} text") and not is_template("{# comment #}")
    path = write(
        "r.yaml",
        TEMPLATED.replace("source: app}", "source: app, ldflags: ['-X main.x={not a template}']}"),
    )
    variant = expand(load_recipe(path))[0]
    assert variant.recipe.artifacts["agent"].ldflags == ["-X main.x={not a template}"]


def test_keys_are_not_rendered(write: WriteFile) -> None:
    path = write("r.yaml", TEMPLATED + '  "{{ gpu }}": x\n')
    assert expand(load_recipe(path))[0].recipe.vars["{{ gpu }}"] == "x"
