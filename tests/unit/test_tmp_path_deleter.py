"""The suite's ``tmp_path`` (tests/helpers/tmpdirs.py): a passed test's tree is deleted by the
deleter thread, not in the test's teardown, and is gone when the session ends; a failed test's
tree is kept, as pytest keeps it. Run as a nested pytest with the plugin, whose conftest logs
every ``shutil.rmtree`` with the thread that ran it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

CONFTEST = """
import os, shutil, threading

_rmtree = shutil.rmtree


def _logged(path, *args, **kwargs):
    with open(os.environ["TMP_LOG"], "a") as f:
        f.write(f"rmtree {threading.current_thread().name} {path}\\n")
    return _rmtree(path, *args, **kwargs)


shutil.rmtree = _logged
"""

TESTS = """
import os


def _note(what, path):
    with open(os.environ["TMP_LOG"], "a") as f:
        f.write(f"{what} {path}\\n")


def test_passes(tmp_path):
    for n in range(200):
        (tmp_path / f"d{n % 10}").mkdir(exist_ok=True)
        (tmp_path / f"d{n % 10}" / str(n)).write_text("x")
    _note("passed", tmp_path)


def test_fails(tmp_path):
    (tmp_path / "evidence").write_text("kept")
    _note("failed", tmp_path)
    assert False


def test_without_tmp_path():
    _note("plain", "-")
"""


def test_a_passed_tests_tree_is_deleted_in_the_background_and_a_failed_ones_kept(
    tmp_path: Path,
) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "conftest.py").write_text(CONFTEST)
    (tests / "test_trees.py").write_text(TESTS)
    log, base = tmp_path / "log", tmp_path / "base"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.helpers.tmpdirs", "-p",
         "no:cacheprovider", "-p", "no:randomly", "-o", "tmp_path_retention_policy=failed",
         "--basetemp", str(base), "--rootdir", str(tests), str(tests)],
        cwd=REPO, env={**os.environ, "TMP_LOG": str(log)}, capture_output=True, text=True,
        check=False, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 failed, 2 passed" in proc.stdout
    lines = log.read_text().splitlines()
    (passed,) = [line.split(" ", 1)[1] for line in lines if line.startswith("passed ")]
    (failed,) = [line.split(" ", 1)[1] for line in lines if line.startswith("failed ")]
    assert not Path(passed).exists(), "the passed test's tree is gone when the session ends"
    assert f"rmtree tmp-path-deleter {passed}" in lines, lines
    assert (Path(failed) / "evidence").read_text() == "kept"
    assert not any(line.startswith("rmtree") and failed in line for line in lines)
