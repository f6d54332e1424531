"""The py3compile calls a tree's postinsts make, recorded during the installation and run at its
end in one process (builders/rootfs/defer-py3compile.essential-hook, run-py3compile.customize-hook,
py3compile-batch.py), run here with the host's own dh-python py3compile on directories of a
test: every call's files are compiled with the bytes py3compile gives them call by call, and a
call that fails fails the batch, naming it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nvkr.builders.rootfs.builder import ASSETS

PY3COMPILE = shutil.which("py3compile", path="/usr/bin")
pytestmark = pytest.mark.skipif(PY3COMPILE is None, reason="dh-python's py3compile not installed")


def _modules(root: Path, text: str = "VALUE = {n}\n") -> list[Path]:
    paths = []
    for n, name in enumerate(("a", "b")):
        path = root / f"{name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.format(n=n))
        os.utime(path, (1700000000, 1700000000))
        paths.append(path)
    return paths


def _calls(path: Path, *calls: list[str]) -> Path:
    """The recorder's format: each call's arguments NUL-terminated, one call per line."""
    path.write_bytes(b"".join(b"".join(a.encode() + b"\0" for a in c) + b"\n" for c in calls))
    return path


def _batch(calls: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1700000000"}
    return subprocess.run(
        ["/usr/bin/python3", str(ASSETS / "py3compile-batch.py"), str(calls), str(PY3COMPILE)],
        capture_output=True, text=True, env=env,
    )  # fmt: skip


def _pycs(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.pyc"))}


def test_recorded_calls_compile_what_each_call_would(tmp_path: Path) -> None:
    batched, single = tmp_path / "batchd", tmp_path / "single"  # names of one length
    for root in (batched, single):
        _modules(root / "one")
        _modules(root / "two")
    proc = _batch(_calls(tmp_path / "calls", [str(batched / "one")], [str(batched / "two")]))
    assert proc.returncode == 0, proc.stderr
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1700000000"}
    for sub in ("one", "two"):
        subprocess.run([sys.executable, str(PY3COMPILE), str(single / sub)], check=True, env=env)
    got, want = _pycs(batched), _pycs(single)
    assert len(got) == 4 and got.keys() == want.keys()
    # the same bytes but for the path compiled into each (batchd/ against single/)
    for name in got:
        assert got[name].replace(b"batchd", b"single") == want[name], name


def test_a_failing_call_fails_the_batch_and_is_named(tmp_path: Path) -> None:
    _modules(tmp_path / "good")
    _modules(tmp_path / "bad", "def broken(:\n")
    calls = _calls(tmp_path / "calls", [str(tmp_path / "good")], [str(tmp_path / "bad")])
    proc = _batch(calls)
    assert proc.returncode != 0
    assert "byte-compiling the recorded py3compile calls failed" in proc.stderr
    assert "SyntaxError" in proc.stderr or "invalid syntax" in proc.stderr, proc.stderr
    assert len(_pycs(tmp_path / "good")) == 2


def test_an_unknown_option_is_named(tmp_path: Path) -> None:
    proc = _batch(_calls(tmp_path / "calls", ["--no-such-option"]))
    assert proc.returncode != 0
    assert "py3compile --no-such-option failed" in proc.stderr
