"""`.ci/check-modules`: module length and import cycles (every import counts: at import time,
inside a function, under TYPE_CHECKING), on small package trees in tmp_path and on nvkr/."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / ".ci" / "check-modules"


def _load() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("check_modules", str(SCRIPT))
    spec = importlib.util.spec_from_loader("check_modules", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_modules"] = module  # dataclasses look their module up there
    loader.exec_module(module)
    return module


check_modules = _load()


def _tree(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (paths relative to ``root/pkg``) and return the package directory."""
    pkg = root / "pkg"
    for rel, text in {"__init__.py": "", **files}.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return pkg


def _run(pkg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(pkg), *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_clean_tree_passes(tmp_path: Path) -> None:
    # imports of every kind, all pointing one way: a -> b -> sub -> sub.c -> sub.d
    pkg = _tree(
        tmp_path,
        {
            "a.py": "from pkg import b\ndef f():\n    import pkg.sub.d\n",
            "b.py": "import os\nfrom typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from pkg.sub import C\n",
            "sub/__init__.py": "from pkg.sub.c import C\n",
            "sub/c.py": "class C:\n    def m(self):\n        from pkg.sub.d import D\n",
            "sub/d.py": "class D: pass\n",
        },
    )
    result = _run(pkg)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "6 modules" in result.stdout


def test_a_cycle_is_named_with_each_import(tmp_path: Path) -> None:
    pkg = _tree(
        tmp_path,
        {
            "a.py": "import os\nfrom pkg.b import thing\n",
            "b.py": "try:\n    from . import c\nexcept ImportError:\n    pass\nthing = 1\n",
            "c.py": "if True:\n    import pkg.a\n",
        },
    )
    result = _run(pkg)
    assert result.returncode == 1
    assert "import cycle: pkg.a -> pkg.b -> pkg.c -> pkg.a" in result.stdout
    assert "pkg/a.py:2: pkg.a imports pkg.b (at import time)" in result.stdout
    assert "pkg/b.py:2: pkg.b imports pkg.c (at import time)" in result.stdout
    assert "pkg/c.py:2: pkg.c imports pkg.a (at import time)" in result.stdout


def test_a_cycle_only_through_an_import_inside_a_function_fails(tmp_path: Path) -> None:
    pkg = _tree(
        tmp_path,
        {
            "a.py": "import os\nfrom pkg.b import B\n",
            "b.py": "class B:\n    def m(self):\n        from pkg.a import f\n        return f\n",
        },
    )
    result = _run(pkg)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "import cycle: pkg.a -> pkg.b -> pkg.a" in result.stdout
    assert "pkg/a.py:2: pkg.a imports pkg.b (at import time)" in result.stdout
    assert "pkg/b.py:3: pkg.b imports pkg.a (inside a function)" in result.stdout


def test_a_cycle_only_under_type_checking_fails(tmp_path: Path) -> None:
    pkg = _tree(
        tmp_path,
        {
            "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
            "b.py": "import typing\nif typing.TYPE_CHECKING:\n    import pkg.a\nelse:\n    pass\n",
        },
    )
    result = _run(pkg)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "import cycle: pkg.a -> pkg.b -> pkg.a" in result.stdout
    assert "pkg/a.py:3: pkg.a imports pkg.b (under TYPE_CHECKING)" in result.stdout
    assert "pkg/b.py:3: pkg.b imports pkg.a (under TYPE_CHECKING)" in result.stdout


def test_a_step_names_the_import_that_runs_first_of_several(tmp_path: Path) -> None:
    # b imports a in a function and at module level: the message names the module-level one
    pkg = _tree(
        tmp_path,
        {
            "a.py": "from pkg import b\n",
            "b.py": "def f():\n    from pkg import a\nfrom pkg import a\n",
        },
    )
    result = _run(pkg)
    assert result.returncode == 1
    assert "pkg/b.py:3: pkg.b imports pkg.a (at import time)" in result.stdout


def test_a_type_checking_else_branch_counts(tmp_path: Path) -> None:
    pkg = _tree(
        tmp_path,
        {
            "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    pass\n"
            "else:\n    from pkg import b\n",
            "b.py": "from pkg import a\n",
        },
    )
    result = _run(pkg)
    assert result.returncode == 1
    assert "pkg.a -> pkg.b -> pkg.a" in result.stdout


def test_package_init_and_relative_imports(tmp_path: Path) -> None:
    # pkg.sub's __init__ runs whenever pkg.sub.x is imported: importing pkg.sub.x from pkg.top
    # while pkg.sub's __init__ imports pkg.top is a cycle through the __init__.
    pkg = _tree(
        tmp_path,
        {
            "top.py": "import pkg.sub.x\n",
            "sub/__init__.py": "from ..top import *\n",
            "sub/x.py": "from .y import Y\n",
            "sub/y.py": "Y = 1\n",
        },
    )
    result = _run(pkg)
    assert result.returncode == 1
    assert "pkg.sub -> pkg.top -> pkg.sub" in result.stdout
    assert "pkg.sub.x" not in result.stdout.split("\n")[0]


def test_a_sibling_import_is_no_cycle_but_a_name_from_the_own_init_is(tmp_path: Path) -> None:
    files = {
        "sub/__init__.py": "from pkg.sub.x import X\nHELPER = 1\n",
        "sub/x.py": "from pkg.sub.y import Y\nX = Y\n",
        "sub/y.py": "Y = 1\n",
    }
    assert _run(_tree(tmp_path, files)).returncode == 0
    (tmp_path / "pkg" / "sub" / "x.py").write_text("from pkg.sub import HELPER\nX = HELPER\n")
    result = _run(tmp_path / "pkg")
    assert result.returncode == 1
    assert "pkg.sub -> pkg.sub.x -> pkg.sub" in result.stdout


def test_a_too_long_module_is_named(tmp_path: Path) -> None:
    pkg = _tree(tmp_path, {"long.py": "x = 1\n" * 601, "ok.py": "x = 1\n" * 600})
    result = _run(pkg)
    assert result.returncode == 1
    assert result.stdout.splitlines() == ["pkg/long.py: 601 lines (limit 600): split it by concept"]
    assert _run(pkg, "--max-lines", "601").returncode == 0


def test_tarjan_finds_every_component() -> None:
    graph = {"a": ["b"], "b": ["a", "c"], "c": ["d"], "d": ["c"], "e": ["e"]}
    components = check_modules.strongly_connected(["a", "b", "c", "d", "e"], graph)
    assert sorted(components) == [["a", "b"], ["c", "d"], ["e"]]
    assert check_modules.one_cycle(["c", "d"], graph) == ["c", "d", "c"]


def test_no_package_is_a_usage_error(tmp_path: Path) -> None:
    result = _run(tmp_path)
    assert result.returncode == 2
    assert "no package" in result.stderr


def test_the_real_tree_has_no_cycle() -> None:
    root = SCRIPT.parents[1] / "nvkr"
    assert "nvkr.oci.registry" in check_modules.discover(root)
    result = _run(root)  # nvkr/, as .ci/run checks it
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no cycle" in result.stdout
