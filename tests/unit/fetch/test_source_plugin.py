"""A new source kind is its model, its fetcher and one line in the source table.

``plugin/note_source/`` is a whole source kind outside nvkr (``model.py``: its recipe model,
``entry.py``: its lock entry's type, ``fetcher.py``: its SourceKind; a ``note`` source's bytes
are the text the recipe writes), with
a ``copy-source`` builder to make an artifact of it. Each nvkr run below is a fresh interpreter
that adds the folder to the path and one line to :data:`nvkr.fetch.table.SOURCE_TABLE` (and the
builder's line to the builder table) before anything reads the tables, then runs the real CLI:
the recipe's source union and its JSON Schema, the lock, the build, the provenance, ``mirror
export`` and ``import``, ``lock --update`` and ``diff`` take the kind as they take the built-in
ones; no file of nvkr names it. Its lock entry is a type of its own (``entry.py``, named by its
table line), read from and written to the lockfile as the built-in kinds' are.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nvkr.canonical import canonical_json_file
from nvkr.errors import LockError
from nvkr.fetch import table

PLUGINS = Path(__file__).resolve().parent / "plugin"

# The one line: what a source kind of nvkr itself adds to nvkr/fetch/table.py (the builder's
# line only makes an artifact of the source).
REGISTER = """\
import sys
from nvkr.fetch import table
from note_source.entry import NoteEntry
from note_source.model import NoteSource
table.SOURCE_TABLE += (
    table.SourceLine("note", NoteSource, NoteEntry, "note_source.fetcher:NoteKind"),
)
from nvkr.builders import table as builders
from note_source.copy_artifact import CopySourceArtifact
builders.BUILDER_TABLE += (
    builders.BuilderLine(
        "copy-source", "note_source.copy_builder:CopySourceBuilder", CopySourceArtifact
    ),
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
  arch: [amd64]
sources:
  greeting: {note: "%s"}
artifacts:
  greet: {builder: copy-source, source: greeting, filename: greeting.txt}
releaseSet:
  name: notes
"""

LOCK = Path("lockfiles", "notes.lock.json")


def _nvkr(cwd: Path, store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PLUGINS), *sys.path])}
    return subprocess.run(
        [sys.executable, "-c", REGISTER, "--store", str(store), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )


def _provenance(layout: Path) -> list[dict[str, Any]]:
    """The SLSA provenance statements among a release set's blobs."""
    found = []
    for blob in (layout / "blobs" / "sha256").iterdir():
        data = blob.read_bytes()
        if data.startswith(b"{") and b'"resolvedDependencies"' in data:
            found.append(json.loads(data))
    return found


def test_a_source_kind_in_its_own_folder_locks_builds_exports_and_is_named_in_provenance(
    tmp_path: Path,
) -> None:
    (tmp_path / "notes.yaml").write_text(RECIPE % "hello from a note")
    store = tmp_path / "store"
    schema = _nvkr(tmp_path, store, "schema")
    assert schema.returncode == 0, schema.stderr
    assert "NoteSource" in json.loads(schema.stdout)["$defs"]

    locked = _nvkr(tmp_path, store, "lock", "notes.yaml")
    assert locked.returncode == 0, locked.stderr
    (entry,) = json.loads((tmp_path / LOCK).read_text())["sources"]
    resolved = entry["resolved"]
    assert resolved["kind"] == "note" and resolved["size"] == len("hello from a note")

    built = _nvkr(tmp_path, store, "build", "notes.yaml", "--locked", "--out", "dist")
    assert built.returncode == 0, built.stderr
    layout = tmp_path / "dist" / "notes"
    blobs = layout / "blobs" / "sha256"
    assert (blobs / resolved["digest"].split(":", 1)[1]).read_bytes() == b"hello from a note"
    (statement,) = _provenance(layout)
    dependencies = statement["predicate"]["buildDefinition"]["resolvedDependencies"]
    assert dependencies == [
        {
            "name": "greeting",
            "digest": {"sha256": resolved["digest"].split(":", 1)[1]},
            "annotations": {"kind": "note", "size": str(resolved["size"])},  # the kind's own
        }
    ]

    exported = _nvkr(tmp_path, store, "mirror", "export", "notes.yaml", "export")
    assert exported.returncode == 0, exported.stderr
    index = json.loads((tmp_path / "export" / "index.json").read_text())
    (source,) = index["sources"]
    assert (source["name"], source["kind"], source["digest"]) == (
        "greeting",
        "note",
        resolved["digest"],
    )
    assert source["blobs"] == [{"digest": resolved["digest"], "size": 17, "urls": []}]

    # the export is all an offline build on another machine needs: the same release set
    fresh = tmp_path / "fresh"
    imported = _nvkr(tmp_path, fresh, "mirror", "import", "export")
    assert imported.returncode == 0, imported.stderr
    again = _nvkr(
        tmp_path, fresh, "build", "notes.yaml", "--locked", "--offline", "--out", "dist-offline"
    )
    assert again.returncode == 0, again.stderr
    first = json.loads((layout / "index.json").read_text())
    assert json.loads((tmp_path / "dist-offline" / "notes" / "index.json").read_text()) == first


def test_lock_update_leaves_a_kind_without_a_hook_alone_and_diff_names_its_change(
    tmp_path: Path,
) -> None:
    (tmp_path / "notes.yaml").write_text(RECIPE % "one")
    store = tmp_path / "store"
    assert _nvkr(tmp_path, store, "lock", "notes.yaml").returncode == 0
    update = _nvkr(tmp_path, store, "lock", "notes.yaml", "--update")
    assert update.returncode == 0, update.stderr
    assert "greeting: left alone (a note source has no upstream listing)" in update.stderr
    named = _nvkr(tmp_path, store, "lock", "notes.yaml", "--update", "greeting")
    assert named.returncode == 2
    assert "--update greeting: a note source has no upstream listing" in named.stderr

    before = (tmp_path / LOCK).read_text()
    (tmp_path / "old.lock.json").write_text(before)
    (tmp_path / "notes.yaml").write_text(RECIPE % "two")
    assert _nvkr(tmp_path, store, "lock", "notes.yaml").returncode == 0
    diff = _nvkr(tmp_path, store, "diff", "--exit-code", "old.lock.json", str(LOCK))
    assert diff.returncode == 1, diff.stderr
    assert "greeting.note: 'one' -> 'two'" in diff.stdout
    assert "greeting.resolved.digest: 'sha256:" in diff.stdout  # the kind's identity


def test_the_kind_declares_its_own_lock_entry_type_and_its_entries_round_trip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table line names the kind's entry type: the lockfile's note entry reads into a
    ``NoteEntry`` and is written back as the same bytes; a malformed one is refused by its
    fields."""
    (tmp_path / "notes.yaml").write_text(RECIPE % "round trip")
    locked = _nvkr(tmp_path, tmp_path / "store", "lock", "notes.yaml")
    assert locked.returncode == 0, locked.stderr
    monkeypatch.syspath_prepend(str(PLUGINS))
    from note_source.entry import NoteEntry
    from note_source.model import NoteSource

    line = table.SourceLine("note", NoteSource, NoteEntry, "note_source.fetcher:NoteKind")
    monkeypatch.setattr(table, "SOURCE_TABLE", (*table.SOURCE_TABLE, line))
    raw = (tmp_path / LOCK).read_bytes()
    doc = json.loads(raw)
    (source,) = doc["sources"]
    where = f"{LOCK}: lock entry for source 'greeting'"
    entry = table.read_entry(source["resolved"], where=where)
    assert isinstance(entry, NoteEntry) and entry.size == len("round trip")
    source["resolved"] = entry.to_json()
    assert canonical_json_file(doc) == raw
    with pytest.raises(LockError, match=f"^{where}: size is a string, not an integer"):
        table.read_entry({**source["resolved"], "size": "10"}, where=where)
