"""`nvkr recipes list` on a small catalog in tmp_path: ok, invalid, unsupported, no recipe and a
broken file, as a table and as JSON; layers and the rules file are not leaves."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers.cli import invoke
from tests.helpers.recipes import RULES_FILE, write_leaf_recipe

LAYER = """\
apiVersion: nvkr.dev/v1alpha1
kind: RecipeLayer
vars: {kubeletVersion: "1.36.3"}
"""


@pytest.fixture
def catalog(tmp_path, monkeypatch) -> Path:
    recipes = tmp_path / "recipes"
    (recipes / "layers").mkdir(parents=True)
    shutil.copy(RULES_FILE, recipes / "compatibility.yaml")
    (recipes / "layers" / "k8s.yaml").write_text(LAYER)
    # ok: hopper on 1.36, both arches.
    write_leaf_recipe(recipes / "catalog" / "hopper.yaml", arch="amd64, arm64")
    # invalid: Blackwell with a 535 driver.
    write_leaf_recipe(
        recipes / "catalog" / "blackwell.yaml",
        gpu="blackwell",
        vars={"nvidiaDriverVersion": "535.247.01"},
    )
    # unsupported although a recipe covers it: ampere on arm64; and an unknown generation.
    write_leaf_recipe(recipes / "catalog" / "ampere.yaml", gpu="ampere", arch="arm64")
    write_leaf_recipe(recipes / "catalog" / "volta.yaml", gpu="volta")
    # broken: a recipe that does not load.
    (recipes / "catalog" / "broken.yaml").write_text(
        "apiVersion: nvkr.dev/v1alpha1\nkind: Recipe\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setenv("NVKR_CONFIG", str(tmp_path / "no-config.yaml"))
    return tmp_path


def test_list_json(catalog, capsys):
    code, out, err = invoke(*["recipes", "list", "--json"])
    assert code == 0, err
    rows = json.loads(out)
    assert all(
        set(r) == {"gpu", "kubernetes", "arch", "status", "recipes", "violations", "error"}
        for r in rows
    )
    by_cell = {(r["gpu"], r["kubernetes"], r["arch"]): r for r in rows if r["gpu"]}
    # The table: 3 generations x 3 lines x 2 arches, plus the volta cell a recipe covers.
    assert len(by_cell) == 19
    ok = by_cell[("hopper", "1.36", "arm64")]
    assert (ok["status"], ok["recipes"], ok["violations"]) == (
        "ok",
        ["recipes/catalog/hopper.yaml"],
        [],
    )
    invalid = by_cell[("blackwell", "1.36", "amd64")]
    assert invalid["status"] == "invalid"
    assert invalid["violations"] == [
        {
            "recipe": "recipes/catalog/blackwell.yaml",
            "rule": "gpu.driver-branch",
            "message": "blackwell needs NVIDIA driver branch 570 or newer, got 535.247.01 "
            "(branch 535, which supports ampere and hopper; "
            "recipes/catalog/blackwell.yaml:7: vars.nvidiaDriverVersion)",
            "values": {
                "gpu": "blackwell",
                "driver": "535.247.01",
                "branch": "535",
                "minimum": "570",
                "supports": "ampere, hopper",
            },
        }
    ]
    ampere = by_cell[("ampere", "1.36", "arm64")]
    assert ampere["status"] == "unsupported" and ampere["recipes"] == [
        "recipes/catalog/ampere.yaml"
    ]
    assert [(v["recipe"], v["rule"], v["message"]) for v in ampere["violations"]] == [
        (None, "gpu.architectures", "ampere supports amd64, not arm64")
    ]
    assert by_cell[("ampere", "1.34", "arm64")]["status"] == "unsupported"
    assert by_cell[("volta", "1.36", "amd64")]["status"] == "unsupported"
    assert by_cell[("hopper", "1.35", "amd64")] == {
        "gpu": "hopper",
        "kubernetes": "1.35",
        "arch": "amd64",
        "status": "no recipe",
        "recipes": [],
        "violations": [],
        "error": None,
    }
    (broken,) = [r for r in rows if r["status"] == "broken"]
    assert broken["recipes"] == ["recipes/catalog/broken.yaml"]
    assert "recipes/catalog/broken.yaml:1: missing required key 'metadata'" in broken["error"]
    # Layers and the rules file are not leaves: nothing lists them.
    assert not any("layers" in p or "compatibility" in p for r in rows for p in r["recipes"])


def test_list_table(catalog, capsys):
    code, out, err = invoke(*["recipes", "list"])
    assert code == 0, err
    lines = out.splitlines()

    def row(*cells: str) -> str:
        """The combination's line and its indented violation lines."""
        (at,) = [i for i, line in enumerate(lines) if line.split()[:4] == list(cells)]
        following = lines[at + 1 :]
        block = [lines[at]]
        for x in following:
            if not x.startswith("    "):
                break
            block.append(x)
        return "\n".join(block)

    assert "recipes/catalog/hopper.yaml" in row("hopper", "1.36", "amd64", "ok")
    assert "rule gpu.driver-branch: blackwell needs NVIDIA driver branch 570 or newer" in row(
        "blackwell", "1.36", "amd64", "invalid"
    )
    assert "rule gpu.architectures: ampere supports amd64, not arm64" in row(
        "ampere", "1.35", "arm64", "unsupported"
    )
    assert "rule gpu.generations: GPU generation 'volta' is not supported" in row(
        "volta", "1.36", "amd64", "unsupported"
    )
    assert row("hopper", "1.34", "arm64", "no").endswith("no recipe")
    assert (
        "19 combinations under recipes/compatibility.yaml: 2 ok, 1 invalid, 4 unsupported, "
        "12 no recipe"
    ) in out
    assert (
        "broken recipes/catalog/broken.yaml: recipes/catalog/broken.yaml:1: missing required" in out
    )


def test_list_needs_rules(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "recipes").mkdir()
    code, _, err = invoke(*["recipes", "list"])
    assert code == 2
    assert "recipes/compatibility.yaml: no compatibility rules file" in err


def test_a_combination_is_ok_when_one_covering_leaf_passes(catalog, capsys):
    # a second Hopper 1.36 leaf whose kubelet is newer than the cluster: the cell stays ok
    write_leaf_recipe(
        catalog / "recipes" / "catalog" / "hopper-bad.yaml",
        vars={"kubeletVersion": "1.37.0"},
    )
    code, out, err = invoke(*["recipes", "list", "--json"])
    assert code == 0, err
    rows = {(r["gpu"], r["kubernetes"], r["arch"]): r for r in json.loads(out) if r["gpu"]}
    cell = rows[("hopper", "1.36", "amd64")]
    assert cell["status"] == "ok"
    assert sorted(cell["recipes"]) == [
        "recipes/catalog/hopper-bad.yaml",
        "recipes/catalog/hopper.yaml",
    ]
    assert {v["recipe"] for v in cell["violations"]} == {"recipes/catalog/hopper-bad.yaml"}


def test_a_leaf_breaking_a_rule_is_named_even_where_its_combination_is_ok(catalog, capsys):
    # A user's leaf beside the catalog's: the cell stays ok because hopper.yaml covers it, but
    # the table marks the failing leaf in its rows and names it under the counts, so a new leaf
    # that breaks a rule never reads as "ok, 0 invalid" only.
    write_leaf_recipe(
        catalog / "recipes" / "catalog" / "hopper-bad.yaml",
        vars={"kubeletVersion": "1.37.0"},
        arch="amd64, arm64",
    )
    code, out, err = invoke(*["recipes", "list"])
    assert code == 0, err
    (amd64,) = [
        line for line in out.splitlines() if line.split()[:4] == ["hopper", "1.36", "amd64", "ok"]
    ]
    assert amd64.endswith(
        "recipes/catalog/hopper-bad.yaml (breaks a rule), recipes/catalog/hopper.yaml"
    )
    assert "    recipes/catalog/hopper-bad.yaml: rule " in out
    assert (
        "leaves breaking a rule (nvkr validate fails them): "
        "recipes/catalog/ampere.yaml (1 variant), recipes/catalog/blackwell.yaml (1 variant), "
        "recipes/catalog/hopper-bad.yaml (2 variants), recipes/catalog/volta.yaml (1 variant)"
    ) in out


def test_no_failing_leaf_line_when_every_leaf_passes(catalog, capsys):
    for name in ("blackwell", "ampere", "volta"):
        (catalog / "recipes" / "catalog" / f"{name}.yaml").unlink()
    code, out, err = invoke(*["recipes", "list"])
    assert code == 0, err
    assert "breaks a rule" not in out and "leaves breaking a rule" not in out
