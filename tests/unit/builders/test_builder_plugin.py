"""A new builder is one folder plus one line in the builder table.

``plugin/text_file/`` is a whole builder (``artifact.py``: its recipe model, ``builder.py``: its
Builder) outside nvkr. Each nvkr run below is a fresh interpreter that adds the folder to the
path and one line to :data:`nvkr.builders.table.BUILDER_TABLE` before anything reads the table,
then runs the real CLI: the recipe model, the JSON Schema, validation, the lock, the planner,
the executor, the store, the SBOM and the release set take the builder as they take the built-in
ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PLUGINS = Path(__file__).resolve().parent / "plugin"

# The one line: what a builder of nvkr itself adds to nvkr/builders/table.py.
REGISTER = """\
import sys
from nvkr.builders import table
from text_file.artifact import TextFileArtifact
table.BUILDER_TABLE += (
    table.BuilderLine("text-file", "text_file.builder:TextFileBuilder", TextFileArtifact),
)
from nvkr.cli import main
sys.argv[0] = "nvkr"
main()
"""

RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: notes}
epoch: "1700000000"
matrix:
  gpu: [hopper]
  kubernetes: ["1.36"]
  arch: [amd64, arm64]
artifacts:
  note: {builder: text-file, text: "%s", filename: note.txt}
releaseSet:
  name: notes
"""


def _nvkr(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PLUGINS), *sys.path])}
    return subprocess.run(
        [sys.executable, "-c", REGISTER, "--store", str(tmp_path / "store"), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )


def test_a_builder_in_its_own_folder_plans_and_builds_through_the_engine(tmp_path: Path) -> None:
    (tmp_path / "notes.yaml").write_text(RECIPE % "hello")
    schema = _nvkr(tmp_path, "schema")
    assert schema.returncode == 0, schema.stderr
    assert "TextFileArtifact" in json.loads(schema.stdout)["$defs"]

    locked = _nvkr(tmp_path, "lock", "notes.yaml", "--lockfile", "notes.lock.json")
    assert locked.returncode == 0, locked.stderr
    plan = _nvkr(tmp_path, "plan", "notes.yaml", "--lockfile", "notes.lock.json", "--json")
    assert plan.returncode == 0, plan.stderr
    actions = json.loads(plan.stdout)["actions"]
    notes = [a for a in actions if a["builder"] == "text-file"]
    assert sorted(a["name"] for a in notes) == ["note [amd64]", "note [arm64]"]
    assert {a["params"]["text"] for a in notes} == {"hello (amd64)\n", "hello (arm64)\n"}
    assert {a["builder"] for a in actions} == {"text-file", "sbom", "release-set"}

    built = _nvkr(
        tmp_path,
        "build",
        "notes.yaml",
        "--lockfile",
        "notes.lock.json",
        "--locked",
        "--out",
        "dist",
    )
    assert built.returncode == 0, built.stderr
    blobs = tmp_path / "dist" / "notes" / "blobs" / "sha256"
    contents = {p.read_bytes() for p in blobs.iterdir()}
    assert {b"hello (amd64)\n", b"hello (arm64)\n"} <= contents
    spdx = [json.loads(c) for c in contents if c.startswith(b"{") and b'"spdxVersion"' in c]
    assert sorted(d["name"] for d in spdx) == ["note", "note"]

    again = _nvkr(
        tmp_path,
        "build",
        "notes.yaml",
        "--lockfile",
        "notes.lock.json",
        "--locked",
        "--out",
        "dist",
    )
    assert again.returncode == 0, again.stderr
    assert "up to date" in again.stderr


def test_the_new_builders_check_runs_on_validate(tmp_path: Path) -> None:
    (tmp_path / "notes.yaml").write_text(RECIPE % "")
    result = _nvkr(tmp_path, "validate", "notes.yaml")
    assert result.returncode == 2, result.stderr
    assert "artifacts.note.text: text is empty" in result.stderr
