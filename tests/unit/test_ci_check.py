"""``nvkr ci check``: a generated pipeline against what its recorded command writes now; and the
pipelines committed under ci/ are current (the drift test)."""

from __future__ import annotations

import json

import pytest

from nvkr.ci import recorded_command
from tests.helpers import REPO
from tests.helpers.cli import invoke
from tests.helpers.fanout import RECIPE, write_fan_project

IMAGE = "registry.example/nvkr/nvkr-ci@sha256:" + "cd" * 32


@pytest.fixture
def fan(tmp_path):
    project = write_fan_project(tmp_path / "proj")
    store = tmp_path / "store"
    for platform, name in (("github", "ci/github/fan.yml"), ("gitlab", "ci/gitlab/fan.yml")):
        res = invoke(
            "ci", "generate", platform, "recipes/fan.yaml", "--cache", "registry.example/c",
            "--image", IMAGE, "--out", name, cwd=project, store=store,
        )  # fmt: skip
        assert res.code == 0, res.stderr
    (project / "ci" / "README.yml").write_text("not: generated\n")
    return project, store


def test_a_current_pipeline_passes(fan):
    project, store = fan
    res = invoke("ci", "check", cwd=project, store=store)
    assert res.code == 0, res.stderr
    assert "2 generated pipelines were up to date" in res.stderr


def test_an_edited_pipeline_fails_with_a_diff(fan):
    project, store = fan
    path = project / "ci" / "github" / "fan.yml"
    path.write_text(path.read_text().replace("fail-fast: false", "fail-fast: true"))
    res = invoke("ci", "check", cwd=project, store=store)
    assert res.code == 1, res.stderr
    assert "NVKR-E-DRIFT" in res.stderr and "ci/github/fan.yml" in res.stderr
    assert "ci/gitlab" not in res.stderr.split("differ")[1].split("hint")[0]
    assert "--- ci/github/fan.yml (committed)" in res.stdout
    assert "-      fail-fast: true\n" in res.stdout and "+      fail-fast: false\n" in res.stdout
    # a file can be checked alone
    alone = invoke("ci", "check", "ci/gitlab/fan.yml", cwd=project, store=store)
    assert alone.code == 0, alone.stderr
    # --write rewrites what drifted, and then all is current
    fixed = invoke("ci", "check", "--write", cwd=project, store=store)
    assert fixed.code == 0 and "rewrote ci/github/fan.yml" in fixed.stderr, fixed.stderr
    assert "fail-fast: false" in path.read_text()
    assert invoke("ci", "check", cwd=project, store=store).code == 0


def test_a_changed_recipe_makes_its_pipelines_drift(fan):
    project, store = fan
    recipe = project / "recipes" / "fan.yaml"
    recipe.write_text(recipe.read_text().replace("gpu: [hopper, blackwell]", "gpu: [hopper]"))
    res = invoke("ci", "check", cwd=project, store=store)
    assert res.code == 1, res.stderr
    assert "2 of 2 generated pipelines differ" in res.stderr
    assert "-          - unit: blackwell-amd64" in res.stdout


def test_no_generated_pipeline_is_an_error(tmp_path):
    project = write_fan_project(tmp_path / "proj")
    (project / "ci").mkdir()
    (project / "ci" / "mine.yml").write_text("jobs: {}\n")
    res = invoke("ci", "check", cwd=project, store=tmp_path / "store")
    assert res.code == 1 and "no generated pipeline under ci" in res.stderr, res.stderr


def test_the_header_records_the_canonical_command(fan):
    project, _ = fan
    command = recorded_command((project / "ci" / "gitlab" / "fan.yml").read_text())
    assert command == [
        "nvkr", "ci", "generate", "gitlab", "recipes/fan.yaml", "--by", "variant",
        "--cache", "registry.example/c", "--image", IMAGE, "--out", "ci/gitlab/fan.yml",
    ]  # fmt: skip


def test_image_from_a_built_release_set_pins_its_image_index(tmp_path):
    head, rest = RECIPE.split("  gpu-image:")
    one_image = head + rest[rest.index("  tool-chart:") :]  # the recipe without gpu-image
    project = write_fan_project(tmp_path / "proj", one_image)
    store = tmp_path / "store"
    built = invoke("build", "recipes/fan.yaml", cwd=project, store=store)
    assert built.code == 0, built.stderr
    show = invoke("release-set", "show", "dist/fan-k8s1.36", "--json", cwd=project, store=store)
    assert show.code == 0, show.stderr
    images = [a for a in json.loads(show.stdout)["metadata"]["artifacts"] if a["kind"] == "image"]
    digest = images[0]["index"]["digest"]
    res = invoke(
        "ci", "generate", "argo", "recipes/fan.yaml", "--cache", "registry.example/c",
        "--image", "registry.example/nvkr-ci", "--image-from", "dist/fan-k8s1.36",
        cwd=project, store=store,
    )  # fmt: skip
    assert res.code == 0, res.stderr
    assert f"--image registry.example/nvkr-ci@{digest}" in res.stdout.splitlines()[1]
    assert f"image: registry.example/nvkr-ci@{digest}" in res.stdout


def test_the_committed_pipelines_are_current(tmp_path):
    """The drift test: every pipeline under ci/ is what its header's command writes now. When it
    fails, run `nvkr ci check --write` at the repository's root and commit the result."""
    res = invoke("ci", "check", cwd=REPO, store=tmp_path / "store")
    assert res.code == 0, res.stdout + res.stderr
    assert "6 generated pipelines were up to date" in res.stderr


@pytest.mark.parametrize(
    "name", ["ci/github/catalog.yml", "ci/gitlab/catalog.gitlab-ci.yml", "ci/argo/catalog.yaml"]
)
def test_the_catalog_pipelines_build_every_leaf_of_the_catalog(name):
    """`nvkr ci check` regenerates from the header's own leaf list, so a leaf added to
    recipes/catalog/ and left out of the header passed it (hopper-debian did, for two stops)."""
    import shlex

    command = shlex.split((REPO / name).read_text().splitlines()[1].removeprefix("#   "))
    leaves = sorted(
        p.relative_to(REPO).as_posix() for p in (REPO / "recipes/catalog").glob("*.yaml")
    )
    assert sorted(a for a in command if a.startswith("recipes/catalog/")) == leaves


COMMITTED = sorted(
    p.relative_to(REPO).as_posix()
    for p in (REPO / "ci").glob("*/*.y*ml")
    if p.parent.name != "image"
)


@pytest.mark.parametrize("name", COMMITTED)
def test_the_committed_pipelines_validate(name):
    import yaml

    from tests.helpers.civalidate import (
        actionlint_errors,
        argo_problems,
        gitlab_problems,
        jsonschema_problems,
    )

    path = REPO / name
    doc = yaml.safe_load(path.read_text())
    platform = path.parent.name
    if platform == "github":
        assert jsonschema_problems(path, "vendor.github-workflows") == ""
        assert actionlint_errors(path, ["ubuntu-24.04", "ubuntu-24.04-arm"]) == []
    elif platform == "gitlab":
        assert jsonschema_problems(path, "vendor.gitlab-ci") == ""
        assert gitlab_problems(doc, max_needs=50) == []
    else:
        assert platform == "argo" and argo_problems(doc) == []
