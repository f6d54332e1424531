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


# -- python3.X-minimal's and python3.X's own byte-compilation of the standard library ---------
# Their postinsts run ``/usr/bin/python3.X -E -S /usr/lib/python3.X/py_compile.py FILE...``:
# the essential hook, given the tree's version, diverts the interpreter to a recorder of those
# calls, which passes every other call on; the customize hooks put it back and run them.


def _fake_chroot(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A ``chroot`` on PATH that logs each call and runs its command on the host (the hooks'
    ``dpkg-divert`` calls only logged): the hooks' shell logic, without a tree."""
    bin_dir, log = tmp_path / "fakebin", tmp_path / "chroot.log"
    bin_dir.mkdir()
    (bin_dir / "chroot").write_text(
        f'#!/bin/sh\necho "$*" >>{log}\nshift\n[ "$1" = dpkg-divert ] && exit 0\nexec "$@"\n'
    )
    (bin_dir / "chroot").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}, log


def test_the_essential_hook_diverts_the_trees_python_to_a_recorder(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    env, log = _fake_chroot(tmp_path)
    hook = ASSETS / "defer-py3compile.essential-hook"
    subprocess.run([str(hook), str(root), "3.13"], check=True, env=env)
    diverted = log.read_text().splitlines()
    assert diverted == [
        f"{root} dpkg-divert --quiet --local --rename --divert /usr/bin/py3compile.nvkr "
        "--add /usr/bin/py3compile",
        f"{root} dpkg-divert --quiet --local --rename --divert /usr/bin/python3.13.nvkr "
        "--add /usr/bin/python3.13",
    ]
    wrapper = root / "usr/bin/python3.13"
    assert os.access(wrapper, os.X_OK)
    # the recorder, its tree paths pointed at this test's: the calls' directory, and the real
    # interpreter a stand-in that prints its arguments
    calls, real = tmp_path / "calls", tmp_path / "real-python"
    calls.mkdir()
    real.write_text('#!/bin/sh\nprintf "[%s]" "$@"\n')
    real.chmod(0o755)
    text = wrapper.read_text().replace("/var/lib/nvkr-py3compile", str(calls))
    wrapper.write_text(text.replace("exec /usr/bin/python3.13.nvkr", f"exec {real}"))

    def python(*args: str) -> str:
        return subprocess.run(
            [str(wrapper), *args], check=True, capture_output=True, text=True
        ).stdout

    script = "/usr/lib/python3.13/py_compile.py"
    # the two postinsts' calls (the second with -O, as debian_config's optimize asks): recorded
    assert (
        python("-E", "-S", script, "/usr/lib/python3.13/a.py", "/usr/lib/python3.13/b c.py") == ""
    )
    assert python("-E", "-S", "-O", script, "/usr/lib/python3.13/d.py") == ""
    assert (calls / "py_compile.1").read_text() == f"/usr/bin/python3.13 -E -S {script}\n"
    assert (calls / "py_compile.1.files").read_bytes() == (
        b"/usr/lib/python3.13/a.py\0/usr/lib/python3.13/b c.py\0"
    )
    assert (calls / "py_compile.2").read_text() == f"/usr/bin/python3.13 -E -S -O {script}\n"
    assert (calls / "py_compile.2.files").read_bytes() == b"/usr/lib/python3.13/d.py\0"
    # everything else runs, every argument kept: options, another script, py_compile by -m
    assert python("-E", "-c", "print(1)") == "[-E][-c][print(1)]"
    assert python("-m", "py_compile", "x.py") == "[-m][py_compile][x.py]"
    assert (
        python("/usr/lib/python3.13/other.py", script)
        == f"[/usr/lib/python3.13/other.py][{script}]"
    )
    assert python() == "[]"
    assert sorted(p.name for p in calls.iterdir()) == [
        "py_compile.1", "py_compile.1.files", "py_compile.2", "py_compile.2.files"
    ]  # fmt: skip


def test_without_a_python_the_essential_hook_diverts_only_py3compile(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    env, log = _fake_chroot(tmp_path)
    subprocess.run(
        [str(ASSETS / "defer-py3compile.essential-hook"), str(root)], check=True, env=env
    )
    assert [line.split()[-1] for line in log.read_text().splitlines()] == ["/usr/bin/py3compile"]
    assert not (root / "usr/bin/python3.13").exists()


def test_the_customize_hook_runs_the_recorded_compilations_as_they_were_asked(
    tmp_path: Path,
) -> None:
    """Each recorded call runs once, with its interpreter, options and files (a name with a
    space too), and writes the .pyc files a direct run of py_compile writes."""
    root = tmp_path / "tree"
    recorded = root / "var/lib/nvkr-py3compile"
    recorded.mkdir(parents=True)
    env, log = _fake_chroot(tmp_path)
    env["SOURCE_DATE_EPOCH"] = "1700000000"
    hooked, direct = tmp_path / "hookd", tmp_path / "direc"  # names of one length
    for where in (hooked, direct):
        _modules(where / "one")
        _modules(where / "two words")
    command = f"{sys.executable} -E -S {Path(py_compile_module()).resolve()}\n"
    for n, sub in ((1, "one"), (2, "two words")):
        (recorded / f"py_compile.{n}").write_text(command)
        files = sorted((hooked / sub).glob("*.py"))
        (recorded / f"py_compile.{n}.files").write_bytes(b"".join(bytes(f) + b"\0" for f in files))
    subprocess.run([str(ASSETS / "run-py3compile.customize-hook"), str(root)], check=True, env=env)
    for sub in ("one", "two words"):
        subprocess.run(
            [sys.executable, "-E", "-S", "-m", "py_compile", *sorted((direct / sub).glob("*.py"))],
            check=True, env=env,
        )  # fmt: skip
    got, want = _pycs(hooked), _pycs(direct)
    assert len(got) == 4 and got.keys() == want.keys()
    for name in got:
        assert got[name].replace(b"hookd", b"direc") == want[name], name
    runs = [line for line in log.read_text().splitlines() if "py_compile" in line]
    assert len(runs) == 2, runs
    assert not recorded.exists()  # the recordings go with the tree's work files


def py_compile_module() -> str:
    import py_compile

    return py_compile.__file__
