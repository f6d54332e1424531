"""The golden plan (tests/golden/plan.json, :mod:`tests.helpers.golden`): the default recipe's
plan keeps its build digest and every builder's action key, so a change that would invalidate
every cache shows here and in review. Plan only: no source is fetched, no builder runs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from tests.helpers import golden


def test_the_default_plan_matches_the_golden_file(tmp_path: Path) -> None:
    expected = json.loads(golden.GOLDEN.read_text())
    current = golden.summarize(golden.current_plan(tmp_path / "store"))
    changed = golden.differences(expected, current)
    assert not changed, "the default recipe's plan changed:\n  " + "\n  ".join(
        [*changed, "", golden.WHY]
    )


def test_the_golden_file_names_every_builder_of_the_plan_once(tmp_path: Path) -> None:
    plan = golden.current_plan(tmp_path / "store")
    expected = json.loads(golden.GOLDEN.read_text())
    assert set(expected["actions"]) == {a["builder"] for a in plan["actions"]}
    assert expected["releaseSetDigest"].startswith("sha256:")


def test_a_changed_key_or_builder_is_reported() -> None:
    expected = json.loads(golden.GOLDEN.read_text())
    changed = copy.deepcopy(expected)
    changed["actions"]["rootfs"]["key"] = "sha256:" + "0" * 64
    del changed["actions"]["sbom"]
    changed["buildDigest"] = "sha256:" + "1" * 64
    lines = golden.differences(expected, changed)
    assert lines[0].startswith(f"buildDigest: {expected['buildDigest']} -> sha256:111")
    assert any(line.startswith("rootfs: rootfs/rootfs@") and "-> rootfs/" in line for line in lines)
    assert any(line.startswith("sbom: no longer in the plan") for line in lines)
    assert golden.differences(expected, expected) == []
