"""The session's background modules (tests/conftest.py, README "Tests"): a test module that defines
``start_in_background(request)`` has it called at the session's first test, before any other
module's test runs; the module itself runs after every other module, its fixtures read the
handle, and the handle is closed at the session's end. Run as a nested pytest over two modules
written for it, with tests/conftest.py as a plugin; each step appends a line to a log."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

BACKGROUND = """
import os
from pathlib import Path

LOG = Path(os.environ["BG_LOG"])


def _log(line):
    with LOG.open("a") as f:
        f.write(line + "\\n")


class Handle:
    def close(self):
        _log("closed")


def start_in_background(request):
    _log("started")
    return Handle()


def test_the_module_reads_its_handle(_started_in_background):
    _log("background module's test")
    assert isinstance(_started_in_background[__name__], Handle)
"""

PLAIN = """
import os
from pathlib import Path


def test_plain():
    with Path(os.environ["BG_LOG"]).open("a") as f:
        f.write("plain module's test\\n")
"""


def test_a_background_module_starts_first_runs_last_and_is_closed(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    # collected first (by name), run last
    (tests / "test_a_background.py").write_text(BACKGROUND)
    (tests / "test_z_plain.py").write_text(PLAIN)
    log = tmp_path / "log"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
         "-p", "no:randomly", "--rootdir", str(tests), str(tests)],
        cwd=REPO, env={**os.environ, "BG_LOG": str(log)}, capture_output=True, text=True,
        check=False, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "2 passed" in proc.stdout
    assert log.read_text().splitlines() == [
        "started",
        "plain module's test",
        "background module's test",
        "closed",
    ]
