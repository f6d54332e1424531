"""The build as a library call (:mod:`nvkr.session`, :mod:`nvkr.build`): a small recipe built
in a process that never imports click, to the same release set ``nvkr build`` writes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.helpers.cli import invoke
from tests.helpers.recipes import SCRATCH_TOOL, write_scratch_tool_recipe

#: Builds the recipe in argv[1] into argv[3] on the store argv[2] through the library, and
#: prints what it got as JSON: the release sets written, the events' names, and whether click
#: was ever imported.
_LIBRARY_BUILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from nvkr.build import BuildOptions, build
    from nvkr.monitor import ListMonitor
    from nvkr.session import open_session
    from nvkr.store import Store

    recipe, store, out = (Path(a) for a in sys.argv[1:4])
    session = open_session(recipe, store=Store(store), locked=True)
    monitor = ListMonitor()
    outcome = build(session, BuildOptions(out=out, jobs=2, locked=True), monitor)
    print(json.dumps({
        "written": [w.to_json() for w in outcome.written],
        "built": len(outcome.report.built),
        "events": [type(e).__name__ for e in monitor.events],
        "click": "click" in sys.modules,
    }))
    """
)


@pytest.fixture
def project(tmp_path: Path, http_dir) -> Path:
    (http_dir.root / "tool").write_bytes(SCRATCH_TOOL)
    proj = tmp_path / "proj"
    write_scratch_tool_recipe(proj, "lib", http_dir.url, arches="amd64, arm64")
    locked = invoke("lock", "recipes/lib.yaml", cwd=proj, store=tmp_path / "store")
    assert locked.code == 0, locked.stderr
    return proj


def _library_build(proj: Path, store: Path, out: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", _LIBRARY_BUILD, "recipes/lib.yaml", str(store), str(out)],
        cwd=proj,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(proj)},
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_small_recipe_builds_through_the_library_call_without_click(
    project: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    got = _library_build(project, store, project / "dist-lib")
    assert got["click"] is False, "the library build imported click"
    (written,) = got["written"]
    assert written["name"] == "lib" and Path(written["path"]) == project / "dist-lib" / "lib"
    assert Path(written["buildRecord"]).is_file()
    assert got["built"] > 0
    assert got["events"][-1] == "Result" and "ActionDone" in got["events"]

    # the verb writes the same release set from another store
    res = invoke("build", "recipes/lib.yaml", "--locked", "--json", cwd=project,
                 store=tmp_path / "store-cli")  # fmt: skip
    assert res.code == 0, res.stderr
    (cli_set,) = json.loads(res.stdout.splitlines()[-1])["releaseSets"]
    assert cli_set["digest"] == written["digest"]
    lib_index = (project / "dist-lib" / "lib" / "index.json").read_bytes()
    assert (project / "dist" / "lib" / "index.json").read_bytes() == lib_index

    # a no-op through the library: nothing built, the same set
    again = _library_build(project, store, project / "dist-lib")
    assert again["built"] == 0 and again["written"][0]["digest"] == written["digest"]


def test_a_library_build_of_a_partial_matrix_with_push_is_refused_before_building(
    project: Path, tmp_path: Path
) -> None:
    from nvkr.build import BuildOptions, build
    from nvkr.errors import UsageError
    from nvkr.monitor import ListMonitor
    from nvkr.oci.reference import Reference
    from nvkr.session import open_session
    from nvkr.store import Store

    session = open_session(
        project / "recipes" / "lib.yaml", ("arch=arm64",), store=Store(tmp_path / "store")
    )
    options = BuildOptions(out=tmp_path / "out", push=Reference.parse("127.0.0.1:1/lib/set"))
    monitor = ListMonitor()
    with pytest.raises(UsageError, match="selected variants is not the full release set"):
        build(session, options, monitor)
    assert monitor.events == [] and not (tmp_path / "out").exists()
