"""The plan memo (:mod:`nvkr.planmemo`): a no-op ``nvkr build`` answered from the memo gives
the full path's output, and every input the memo covers, changed, sends the next build the
full path (observed through :func:`nvkr.session.make_session_plan`, which only it calls)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.helpers.cli import invoke
from tests.helpers.nvkr import Result
from tests.helpers.recipes import SCRATCH_TOOL

_RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {{name: memo}}
extends: [layer.yaml]
epoch: "1700000000"
matrix:
  gpu: [hopper]
  kubernetes: ["1.36"]
  arch: [amd64]
sources:
  tool:
    url: "{base}/tool"
    sha256: "{sha}"
  conf:
    path: ../conf
artifacts:
  image:
    builder: container-image
    base: scratch
    files:
      /usr/bin/tool: {{source: tool, mode: "0755"}}
      /etc/memo: {{source: conf}}
    entrypoint: ["/usr/bin/tool"]
"""
_LAYER = """\
# the release set, from a layer the recipe extends
releaseSet:
  name: memo
  clusterRelease: {kubernetes: "1.36.4", images: [image]}
"""


class Project:
    """A small recipe (a layer it extends, a url and a path source), locked and built."""

    def __init__(self, root: Path, base_url: str) -> None:
        self.root, self.store = root / "proj", root / "store"
        recipes = self.root / "recipes"
        recipes.mkdir(parents=True)
        sha = hashlib.sha256(SCRATCH_TOOL).hexdigest()
        (recipes / "memo.yaml").write_text(_RECIPE.format(base=base_url, sha=sha))
        (recipes / "layer.yaml").write_text(_LAYER)
        (self.root / "conf").mkdir()
        (self.root / "conf" / "memo.conf").write_text("one\n")
        self.env: dict[str, str | None] = {}

    def nvkr(self, *args: object, env: dict[str, str | None] | None = None) -> Result:
        return invoke(*args, cwd=self.root, store=self.store, env={**self.env, **(env or {})})

    def build(self, *args: object, env: dict[str, str | None] | None = None) -> Result:
        res = self.nvkr("build", "recipes/memo.yaml", "--locked", *args, env=env)
        assert res.code == 0, res.output
        return res

    @property
    def dist(self) -> Path:
        return self.root / "dist" / "memo"

    def memos(self) -> list[Path]:
        return sorted((self.store / "state" / "plan-memo").glob("*.json"))


@pytest.fixture
def project(tmp_path: Path, http_dir) -> Project:
    (http_dir.root / "tool").write_bytes(SCRATCH_TOOL)
    proj = Project(tmp_path, http_dir.url)
    locked = proj.nvkr("lock", "recipes/memo.yaml")
    assert locked.code == 0, locked.output
    proj.build()  # builds
    proj.build()  # a full no-op: writes the memo
    return proj


@pytest.fixture
def plans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the full path's plans (the memo's hit makes none)."""
    import nvkr.session

    made: list[int] = []
    original = nvkr.session.make_session_plan

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        made.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(nvkr.session, "make_session_plan", counted)
    return made


def _events(res: Result) -> list[dict]:
    return [{k: v for k, v in e.items() if k != "ts"} for e in res.json_events()]


def test_a_hit_gives_the_full_paths_output_human_and_json(project: Project, plans: list[int]):
    off = {"NVKR_PLAN_MEMO": "off"}
    full_json, full_text = project.build("--json", env=off), project.build(env=off)
    assert len(plans) == 2
    (memo,) = project.memos()
    hit_json, hit_text = project.build("--json"), project.build()
    assert len(plans) == 2, "a hit planned"
    assert _events(hit_json) == _events(full_json)
    assert [e["event"] for e in _events(hit_json)] == ["actions-planned", "action-cached", "result"]
    assert _events(hit_json)[-1]["upToDate"] is True
    assert (hit_json.stderr, hit_text.stdout) == (full_json.stderr, full_text.stdout)
    assert hit_text.stderr == full_text.stderr
    assert "up to date" in hit_text.stderr
    roots = sorted((project.store / "roots").glob("*.json"))
    docs = [json.loads(p.read_bytes()) for p in roots]
    assert len(docs) == 6  # every build, hits too, roots what it used for gc
    strip = [{k: v for k, v in d.items() if k not in ("invocationId", "finishedOn")} for d in docs]
    assert all(d == strip[0] for d in strip)
    assert project.memos() == [memo]


def _edit(path: Path, text: str = "\n# edited\n") -> None:
    path.write_bytes(path.read_bytes() + text.encode())


def test_each_input_the_memo_covers_sends_the_next_build_the_full_path(
    project: Project, plans: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    import nvkr.planmemo

    recipes, dist = project.root / "recipes", project.dist
    first = _events(project.build("--json"))[-1]
    assert plans == [], "the memo of the first build missed"
    record = project.store / "actions" / f"{first['cached'][0].split(':')[1]}.json"

    def corrupt_memo() -> None:
        for memo in project.memos():
            memo.write_text("{not json")

    def set_config() -> None:  # the default one, in the test's own HOME
        config = Path.home() / ".config" / "nvkr" / "config.yaml"
        config.parent.mkdir(parents=True)
        config.write_text("mirrors: []\n")

    def rewrite_lockfile() -> None:
        lock = project.root / "lockfiles" / "memo.lock.json"
        data = lock.read_bytes()
        lock.unlink()
        lock.write_bytes(data)

    changes = {
        "the recipe file": lambda: _edit(recipes / "memo.yaml"),
        "a layer it extends": lambda: _edit(recipes / "layer.yaml"),
        "the lockfile": rewrite_lockfile,
        "the config file": set_config,
        "an environment variable": lambda: project.env.update(NVKR_PROGRESS="plain"),
        "a removed action record": lambda: record.unlink(),
        "an edited build record": lambda: _edit(dist.with_name("memo.build-record.json"), " "),
        "a removed dist blob": lambda: next((dist / "blobs" / "sha256").iterdir()).unlink(),
        "an edited index.json": lambda: _edit(dist / "index.json", " "),
        "a corrupt memo": corrupt_memo,
    }
    for what, change in changes.items():
        change()
        got = _events(project.build("--json"))[-1]
        assert plans == [1], f"{what}: the memo hit"
        assert got["buildDigest"] == first["buildDigest"], what
        assert got["releaseSets"] == first["releaseSets"], what
        project.build("--json")  # a full no-op after a rebuild (a removed record)
        plans.clear()
        project.build("--json")
        assert plans == [], f"{what}: the memo was not written again"

    # a CLI option is another memo: the first build with it plans, the next one hits
    for _ in range(2):
        project.build("--jobs", "1")
    assert plans == [1]
    plans.clear()

    # nvkr's own code (and builders' assets): test_the_code_fingerprint_covers_... below
    with monkeypatch.context() as m:
        m.setattr(nvkr.planmemo, "code_fingerprint", lambda: "another nvkr")
        project.build()
    assert plans == [1]
    plans.clear()

    # a path source's file: its digest, so the image's action, changes
    (project.root / "conf" / "memo.conf").write_text("two\n")
    changed = _events(project.build("--json"))[-1]
    assert plans == [1]
    assert changed["built"] and changed["buildDigest"] != first["buildDigest"]
    # the next build is a full no-op (nothing ran), whose memo answers the one after it
    for _ in range(2):
        assert _events(project.build("--json"))[-1]["buildDigest"] == changed["buildDigest"]
    assert plans == [1, 1]


def test_options_that_do_more_than_a_local_no_op_never_use_a_memo(
    project: Project, plans: list[int]
) -> None:
    (memo,) = project.memos()
    before = memo.read_bytes()
    project.build("--cached-only")
    project.build("--debug")
    project.build(env={"NVKR_PLAN_MEMO": "off"})
    assert len(plans) == 3
    assert project.memos() == [memo] and memo.read_bytes() == before


def test_the_code_fingerprint_covers_every_file_but_byte_code(tmp_path: Path) -> None:
    from nvkr.planmemo import code_fingerprint

    package = tmp_path / "nvkr"
    (package / "__pycache__").mkdir(parents=True)
    (package / "mod.py").write_text("x = 1\n")
    before = code_fingerprint(package)
    (package / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"byte code")
    assert code_fingerprint(package) == before
    (package / "mod.py").write_text("x = 22\n")
    assert code_fingerprint(package) != before


#: Replays a memo in a process of its own and says which of the modules that make a plan it
#: imported.
_IMPORTS = textwrap.dedent(
    """
    import sys
    from nvkr.cli import main
    main(sys.argv[1:])
    heavy = ("pydantic", "yaml", "nvkr.recipe", "nvkr.fetch", "nvkr.builders", "nvkr.plan",
             "nvkr.lock", "nvkr.build", "nvkr.session", "cryptography", "ruamel")
    print(sorted(m for m in sys.modules if m.split(".")[0] in heavy
                 or any(m == h or m.startswith(h + ".") for h in heavy)), file=sys.stderr)
    """
)


def test_a_hit_imports_nothing_that_plans(project: Project) -> None:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "NVKR_BOOT_ACCEL")}
    argv = [sys.executable, "-c", _IMPORTS, "--store", str(project.store), "build",
            "recipes/memo.yaml", "--locked"]  # fmt: skip
    env["PYTHONPATH"] = str(REPO)
    # the first, in an environment of its own, writes its memo; the second replays it
    runs = [
        subprocess.run(argv, cwd=project.root, env=env, capture_output=True, text=True)
        for _ in range(2)
    ]
    assert [r.returncode for r in runs] == [0, 0], runs[-1].stderr
    assert "pydantic" in runs[0].stderr.splitlines()[-1]
    assert runs[1].stderr.splitlines()[-1] == "[]", runs[1].stderr
    assert runs[1].stderr.splitlines()[:-1] == runs[0].stderr.splitlines()[:-1]


def test_a_hit_says_what_the_store_lock_cleaned_up_where_the_full_path_does(
    project: Project, plans: list[int]
) -> None:
    def leftover() -> None:
        (project.store / "tmp" / "work-of-a-dead-build").mkdir()

    leftover()
    full = project.build(env={"NVKR_PLAN_MEMO": "off"})
    leftover()
    hit = project.build()
    assert plans == [1]
    assert "store: removed 1 leftover" in hit.stderr
    assert hit.stderr == full.stderr


@pytest.mark.parametrize(
    "memo",
    ['{"version": 1}', "[]", '{"version": 1, "code": 1, "files": 2, "events": [["x"]]}', ""],
)
def test_a_memo_of_the_wrong_shape_takes_the_full_path(
    project: Project, plans: list[int], memo: str
) -> None:
    (path,) = project.memos()
    good = json.loads(path.read_bytes())
    path.write_text(memo)
    project.build()
    assert plans == [1]
    for key in ("gcRoot", "events", "records", "releaseSets"):
        path.write_text(json.dumps({**good, key: 7}))
        project.build()
    assert plans == [1, 1, 1, 1, 1]
