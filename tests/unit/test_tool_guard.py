"""The fast tier's guard (tests/helpers/toolguard.py, README "Tests"): a test not marked slow that
starts QEMU, mmdebstrap or podman fails naming the tool and saying to mark it slow, whether it
starts the tool itself, through nvkr in-process (nvkr's fixed PATH), or in a Python process it
starts; a fake of the test's own runs. These tests start nothing: each start is refused before
the tool runs, and each takes the refusals it caused from the log, so its own teardown passes.
The last one runs a nested pytest whose tests swallow the refusal, and sees them fail anyway."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nvkr.run import FIXED_PATH, run
from tests.helpers import REPO, toolguard

INSTALLED = ("qemu-system-x86_64", "qemu-system-aarch64", "mmdebstrap", "podman")


def _refused() -> list[str]:
    """The tool of each refusal logged during this test so far (the log is emptied)."""
    lines = toolguard.take(Path(os.environ[toolguard.ENV]))
    return [line.split()[0].rsplit("/", 1)[-1] for line in lines]


def test_a_stand_in_found_on_path_exits_non_zero_naming_the_tool_and_the_marker() -> None:
    for name in toolguard.SHIMMED:
        proc = subprocess.run([name, "--version"], capture_output=True, text=True, check=False)
        assert proc.returncode == toolguard.SHIM_STATUS, name
        assert f"{name} started by a test not marked slow" in proc.stderr
        assert "pytest.mark.slow" in proc.stderr
    assert _refused() == list(toolguard.SHIMMED)


@pytest.mark.parametrize("name", INSTALLED)
def test_nvkr_starting_the_installed_tool_in_process_is_refused(name: str) -> None:
    # nvkr.run.run looks the tool up on nvkr's fixed PATH, where no stand-in is: the audit hook
    assert shutil.which(name, path=FIXED_PATH), f"{name} is not installed (install.sh installs it)"
    with pytest.raises(toolguard.GuardedTool, match=rf"^{name} started by .*pytest\.mark\.slow"):
        run([name, "--version"])
    with pytest.raises(toolguard.GuardedTool):
        subprocess.run([shutil.which(name, path=FIXED_PATH) or name, "--version"], check=False)
    assert _refused() == [name, name]


def test_a_python_process_the_test_starts_is_guarded_too() -> None:
    code = "from nvkr.run import run; run(['mmdebstrap', '--version'])"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    assert "GuardedTool: mmdebstrap started by a test not marked slow" in proc.stderr
    assert _refused() == ["mmdebstrap"]


def test_a_fake_of_the_tests_own_runs_by_path_or_first_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "bin" / "qemu-system-x86_64"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho fake qemu\n")
    fake.chmod(0o755)
    assert run([fake]).stdout == b"fake qemu\n"  # as tests/helpers/fake_qemu.py's are given
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(["qemu-system-x86_64"], capture_output=True, text=True, check=True)
    assert proc.stdout == "fake qemu\n"
    assert _refused() == []


def test_a_background_thread_of_the_session_starts_the_tools_and_the_test_still_cannot() -> None:
    """A thread made one of the session's background threads (tests/helpers/nvkr.py's
    ``in_background``, as a module's work started at the session's first test runs) starts
    the installed tool while the guard is on; the test's own thread is still refused."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.helpers.nvkr import in_background

    name = "qemu-system-x86_64"
    with ThreadPoolExecutor(1, initializer=in_background, initargs=({"PATH": FIXED_PATH},)) as pool:
        ran = pool.submit(run, [name, "--version"]).result()
    assert b"QEMU emulator version" in ran.stdout
    assert toolguard.active()
    with pytest.raises(toolguard.GuardedTool):
        run([name, "--version"])
    assert _refused() == [name]


INNER = """
import os, shutil, subprocess

import pytest

from tests.helpers import toolguard


@pytest.fixture
def default_build():
    pytest.fail("never made: the guard refuses the test first")


def test_swallows_the_stand_ins_refusal():
    subprocess.run(["mmdebstrap", "--version"], capture_output=True, check=False)


def test_swallows_the_hooks_refusal():
    try:
        subprocess.run([shutil.which("podman", path=toolguard.FIXED_PATH), "--version"])
    except toolguard.GuardedTool:
        pass


def test_uses_the_default_build(default_build):
    pass


@pytest.mark.slow
def test_marked_slow_is_not_guarded():
    assert not toolguard.active() and toolguard.ENV not in os.environ
    assert "tool-guard" not in shutil.which("mmdebstrap")
"""


def test_a_test_not_marked_slow_fails_even_when_it_swallows_the_refusal(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(INNER)
    env = {k: v for k, v in os.environ.items() if k not in (toolguard.ENV, "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if "tool-guard" not in p)
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
         "-p", "tests.helpers.isolation", "-o", "markers=slow: the slow tier", "test_inner.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    # the calls pass; the teardown (the setup, for the default build) is what fails
    assert "3 passed, 3 errors in" in out, out
    assert "ERROR test_inner.py::test_marked_slow" not in out
    for name, tool in (("stand_ins", "mmdebstrap"), ("hooks", "podman")):
        teardown = out.split(f"ERROR at teardown of test_swallows_the_{name}_refusal")[1]
        assert teardown.lstrip("_ \n").startswith(f"{tool} started by a test not marked slow")
    setup = out.split("ERROR at setup of test_uses_the_default_build")[1]
    assert "not marked slow: it uses the session's default build" in setup
    assert "never made" not in out
    assert _refused() == []  # the nested run's refusals went to its own log
