"""A slow module's test body run in the background (tests/conftest.py, ``_started_in_background``).

The session's wall time is the longest of its lanes: pytest's own thread runs the tests one after
another, while the default build and the background modules run beside it. A test of minutes that
needs nothing of the default build (a build of its own recipe, twice) would add its minutes to
pytest's lane; started at the session's first test in a thread of its own, it overlaps the rest.
Its module defines::

    def start_in_background(request):
        return BackgroundTest.start(request, "cgo", _body, "go_toolchain")

    def test_cgo(_started_in_background):
        _started_in_background[__name__].check()

``_body(tmp, go_toolchain)`` is the test's body (its asserts and all), given a fresh directory of
the session's temporary tree and the named session fixtures; :meth:`BackgroundTest.check` waits
for it and raises what it raised (an assert's message rewritten by pytest, as in any test module).
The body's directory is deleted as soon as it passes (a failed body's stays, as a failed test's
``tmp_path`` does).

``nice``: the body's CLI runs (:func:`tests.helpers.nvkr.start_nvkr`) at that lower CPU
priority. For bodies that only build (no boot: a TCG guest starved of CPU trips its own timers),
whose results no test needs before the session's end: the two lanes that end last, pytest's own
and the catalog leaf's chain of builds and boots, then get the cores first, and these fill what
those leave idle.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.nvkr import in_background


class BackgroundTest:
    """A test body running in a thread of its own (see the module's docstring)."""

    def __init__(
        self, name: str, tmp: Path, body: Callable[..., None], *args: Any, nice: int = 0
    ) -> None:
        self.tmp = tmp
        pool = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=name, initializer=in_background,
            initargs=(dict(os.environ), nice),
        )  # fmt: skip
        self._future: Future[None] = pool.submit(self._run, body, tmp, *args)
        pool.shutdown(wait=False)

    @staticmethod
    def _run(body: Callable[..., None], tmp: Path, *args: Any) -> None:
        """``body(tmp, *args)``; its directory deleted as soon as it passed (its stores and trees
        are gigabytes: the session's peak of disk use is every lane's at once)."""
        body(tmp, *args)
        shutil.rmtree(tmp, ignore_errors=True)

    @classmethod
    def start(
        cls,
        request: pytest.FixtureRequest,
        name: str,
        body: Callable[..., None],
        *fixtures: str,
        nice: int = 0,
    ) -> BackgroundTest:
        """``body(tmp, *fixtures' values)`` started now, ``tmp`` a fresh directory named
        ``name`` in the session's temporary tree (``nice``: see the module's docstring)."""
        tmp = request.getfixturevalue("tmp_path_factory").mktemp(name)
        args = (request.getfixturevalue(f) for f in fixtures)
        return cls(name, tmp, body, *args, nice=nice)

    def check(self) -> None:
        """Wait for the body; raise what it raised."""
        self._future.result()

    def close(self) -> None:
        """At the session's end: wait for the body (its test may not have waited)."""
        wait([self._future])
