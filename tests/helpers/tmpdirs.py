"""``tmp_path`` as pytest makes it, with a passed test's tree deleted beside the next tests.

pytest (``tmp_path_retention_policy = "failed"``, pyproject.toml) deletes a passed test's
``tmp_path`` in its teardown, in the foreground: for an end-to-end test holding stores, root
filesystems and Go caches that took up to 50 s of a run's wall time per test. This plugin's
``tmp_path`` is the same directory (``<basetemp>/<test name, 30 characters>N``, from the public
``tmp_path_factory``), kept when the test failed, as pytest keeps it; a passed test's tree is
handed to one thread that deletes trees in the order they came while the next tests run. The
session waits for it before it ends (pytest then removes the base directory), so a run leaves
what it left before. ``tmpdir`` (py.path) is built on ``tmp_path`` and follows it.
"""

from __future__ import annotations

import queue
import re
import shutil
import threading
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

_CALL_PASSED = pytest.StashKey[bool]()


class _Deleter:
    """One thread that deletes the trees given to it, in order (one at a time: the disk is
    shared with the tests, which come first)."""

    def __init__(self) -> None:
        self._trees: queue.Queue[Path | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="tmp-path-deleter", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (tree := self._trees.get()) is not None:
            shutil.rmtree(tree, ignore_errors=True)  # best effort, as pytest's own deletion

    def delete(self, tree: Path) -> None:
        self._trees.put(tree)

    def close(self) -> None:
        """Wait until every tree given is deleted."""
        self._trees.put(None)
        self._thread.join()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[_CALL_PASSED] = report.passed
    return report


@pytest.fixture(scope="session")
def _tmp_path_deleter() -> Iterator[_Deleter]:
    deleter = _Deleter()
    yield deleter
    deleter.close()


@pytest.fixture
def tmp_path(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    _tmp_path_deleter: _Deleter,
) -> Iterator[Path]:
    """A temporary directory unique to the test (see the module's docstring)."""
    name = re.sub(r"[\W]", "_", request.node.name)[:30]
    path = tmp_path_factory.mktemp(name, numbered=True)
    yield path
    policy = request.config.getini("tmp_path_retention_policy")
    if policy == "failed" and request.node.stash.get(_CALL_PASSED, True):
        _tmp_path_deleter.delete(path)
