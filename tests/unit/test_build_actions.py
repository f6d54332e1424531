"""``nvkr build --action REF``: exactly the selected actions of the full plan, their dependencies
from the store; references that name no action or several; ``--push`` of a partial build."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers.cli import invoke
from tests.helpers.fanout import write_fan_project

RECIPE = "recipes/fan.yaml"


@pytest.fixture
def fan(tmp_path):
    return write_fan_project(tmp_path / "proj"), tmp_path / "store"


def _refs(project, store) -> dict[str, str]:
    plan = invoke("plan", RECIPE, "--json", cwd=project, store=store)
    assert plan.code == 0, plan.stderr
    return {a["ref"]: a["key"] for a in json.loads(plan.stdout)["actions"]}


def _result(res) -> dict:
    assert res.code == 0, res.stderr
    return res.json_events()[-1]


def test_plan_json_names_every_action_by_a_reference_without_digests(fan):
    project, store = fan
    refs = _refs(project, store)
    assert "container-image/tool-image@gpu=hopper,kubernetes=1.36,arch=amd64" in refs
    assert "image-index/tool-image@gpu=hopper,kubernetes=1.36,arch=amd64" in refs
    assert "container-image/gpu-image@gpu=blackwell,kubernetes=1.36,arch=arm64" in refs
    assert "release-set/fan-k8s1.36" in refs
    assert len(refs) == len(set(refs.values())), "one reference per action"
    assert not any("sha256" in ref for ref in refs)


def test_action_builds_only_that_action_and_writes_no_release_set(fan):
    project, store = fan
    refs = _refs(project, store)
    # a subset of the axes is enough when every matching variant shares the action
    got = _result(
        invoke(
            "build", RECIPE, "--action", "container-image/tool-image@arch=amd64", "--json",
            cwd=project, store=store,
        )
    )  # fmt: skip
    want = refs["container-image/tool-image@gpu=hopper,kubernetes=1.36,arch=amd64"]
    assert got["built"] == [want] and got["releaseSets"] == []
    assert not (project / "dist").exists()
    assert len(os.listdir(store / "actions")) == 1, "no other action ran"


def test_a_dependency_that_is_not_cached_fails_naming_it_before_anything_runs(fan):
    project, store = fan
    amd = invoke(
        "build", RECIPE, "--action", "container-image/tool-image@arch=amd64",
        cwd=project, store=store,
    )  # fmt: skip
    assert amd.code == 0, amd.stderr
    before = sorted(os.listdir(store / "actions"))
    res = invoke(
        "build", RECIPE, "--action", "image-index/tool-image", "--action", "sbom/tool-image",
        cwd=project, store=store,
    )  # fmt: skip
    assert res.code == 1, res.stderr
    assert "container-image/tool-image@gpu=hopper,kubernetes=1.36,arch=arm64" in res.stderr
    assert "tool-image@gpu=hopper,kubernetes=1.36,arch=amd64" not in res.stderr
    assert sorted(os.listdir(store / "actions")) == before, "nothing was built"


def test_selected_actions_that_depend_on_each_other_build_in_one_invocation(fan):
    project, store = fan
    refs = _refs(project, store)
    args = [
        "--action", "container-image/tool-image@arch=amd64",
        "--action", "container-image/tool-image@arch=arm64",
        "--action", "image-index/tool-image",
    ]  # fmt: skip
    got = _result(invoke("build", RECIPE, *args, "--json", cwd=project, store=store))
    assert sorted(got["built"]) == sorted(
        refs[r]
        for r in (
            "container-image/tool-image@gpu=hopper,kubernetes=1.36,arch=amd64",
            "container-image/tool-image@gpu=hopper,kubernetes=1.36,arch=arm64",
            "image-index/tool-image@gpu=hopper,kubernetes=1.36,arch=amd64",
        )
    )
    again = _result(invoke("build", RECIPE, *args, "--json", cwd=project, store=store))
    assert again["built"] == [] and again["upToDate"]


@pytest.mark.parametrize(
    ("ref", "needles"),
    [
        ("tool-image", ["not an action reference", "BUILDER/ARTIFACT@"]),
        ("container-image/nope@arch=amd64", ["names no action", "container-image/tool-image@"]),
        ("container-image/tool-image@arch=s390x", ["s390x", "not in the matrix"]),
        (
            "container-image/tool-image",
            ["names 2 actions", "@gpu=hopper,kubernetes=1.36,arch=amd64", "arch=arm64"],
        ),
        (
            "container-image/gpu-image@arch=amd64",
            ["names 2 actions", "gpu=hopper", "gpu=blackwell"],
        ),
    ],
)
def test_a_reference_naming_no_action_or_several_is_a_usage_error(fan, ref, needles):
    project, store = fan
    res = invoke("build", RECIPE, "--action", ref, cwd=project, store=store)
    assert res.code == 2, res.stderr
    for needle in needles:
        assert needle in res.stderr
    assert not (store / "actions").exists() or not os.listdir(store / "actions")


@pytest.mark.parametrize(
    "selection",
    [
        ["--variant", "gpu=hopper"],
        ["--action", "container-image/tool-image@arch=amd64"],
        ["--action", "release-set/fan-k8s1.36"],
    ],
)
def test_push_of_a_partial_build_is_refused_before_anything_builds(fan, selection):
    project, store = fan
    res = invoke("build", RECIPE, *selection, "--push", "127.0.0.1:1/fan", cwd=project, store=store)
    assert res.code == 2, res.stderr
    assert "is not the full release set; it is never pushed" in res.stderr
    assert not (store / "actions").exists() or not os.listdir(store / "actions")
