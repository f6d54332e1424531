"""Commands chrooted into a tree in private namespaces: they see the tree, not the host; binds
are read-only unless asked; nothing is mounted on the host, even when the command is killed.

The tree is made of the host's own ``env``, ``sh``, ``cat`` and ``sleep`` with the libraries
``ldd`` names (a real, tiny root file system), as root.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from nvkr.errors import ToolError
from nvkr.mountns import Bind, chroot_argv
from nvkr.run import pinned_env, run

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tree: runs as root")

PROGRAMS = ("/usr/bin/env", "/bin/sh", "/bin/cat", "/bin/sleep")


def _tree(root: Path) -> Path:
    for d in ("proc", "dev", "tmp", "etc", "usr"):
        (root / d).mkdir(parents=True, exist_ok=True)
    files = set(PROGRAMS)
    for program in PROGRAMS:
        out = subprocess.run(["ldd", program], capture_output=True, text=True, check=True).stdout
        files.update(re.findall(r"(/\S+) \(0x", out))
    for f in files:
        real = Path(os.path.realpath(f))
        for name in {f, str(real)}:
            dest = root / name.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            if not dest.exists():
                shutil.copy2(real, dest)
    (root / "etc" / "marker").write_text("the tree\n")
    return root


def _mounted(path: Path) -> bool:
    """Whether anything is mounted at or below ``path`` in this (the host's) mount namespace."""
    text = Path("/proc/self/mountinfo").read_text()
    return any(line.split()[4].startswith(str(path)) for line in text.splitlines())


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return _tree(tmp_path / "tree")


def test_the_command_sees_the_tree_and_its_binds(tree: Path, tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    out.mkdir()
    (data / "in.txt").write_text("from the host\n")
    (tmp_path / "root").mkdir()
    binds = [Bind(data, "/tmp/nvkr/data"), Bind(out, "/tmp/nvkr/out", writable=True)]
    script = (
        "cat /etc/marker /tmp/nvkr/data/in.txt > /tmp/nvkr/out/seen; "
        "cat /proc/net/dev > /tmp/nvkr/out/net; "
        "echo x > /tmp/nvkr/data/new 2>/dev/null || echo data-ro >> /tmp/nvkr/out/seen; "
        "echo x > /etc/new 2>/dev/null || echo tree-ro >> /tmp/nvkr/out/seen; "
        "cat /dev/null && echo dev-null >> /tmp/nvkr/out/seen; "
        "echo $$ >> /tmp/nvkr/out/seen"
    )
    argv = chroot_argv(tree, tmp_path / "root", binds, ["/bin/sh", "-c", script], cwd="/tmp/nvkr")
    run(argv, env=pinned_env())
    assert (out / "seen").read_text().splitlines() == [
        "the tree",  # not the host's /etc
        "from the host",
        "data-ro",
        "tree-ro",
        "dev-null",  # the host's node, usable
        "1",  # the first process of its own PID namespace
    ]
    # a network namespace of its own: loopback only
    interfaces = [line.split(":")[0].strip() for line in (out / "net").read_text().splitlines()[2:]]
    assert interfaces == ["lo"]
    assert not (data / "new").exists() and not (tree / "etc" / "new").exists()
    assert not _mounted(tmp_path), "no mount is left on the host"
    assert list((tmp_path / "root").iterdir()) == []


def test_a_failing_command_is_a_tool_error(tree: Path, tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    argv = chroot_argv(tree, tmp_path / "root", [], ["/bin/sh", "-c", "exit 3"], cwd="/")
    with pytest.raises(ToolError, match="exited with 3"):
        run(argv, env=pinned_env())


def test_killed_midway_nothing_stays_mounted_or_running(tree: Path, tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    argv = chroot_argv(tree, tmp_path / "root", [], ["/bin/sleep", "300"], cwd="/")
    proc = subprocess.Popen(argv, env=pinned_env())
    try:
        deadline = time.monotonic() + 30
        sleeper = None
        while sleeper is None and time.monotonic() < deadline:
            found = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True)
            child = found.stdout.split()
            if child and Path(f"/proc/{child[0]}/exe").exists():
                exe = os.readlink(f"/proc/{child[0]}/exe")
                if exe.endswith("sleep"):
                    sleeper = int(child[0])
            time.sleep(0.1)
        assert sleeper is not None, "the command did not start"
        # mounted in its namespace, never in the host's
        assert " - tmpfs nvkr-tmp " in Path(f"/proc/{sleeper}/mountinfo").read_text()
        assert not _mounted(tmp_path)
        os.kill(proc.pid, signal.SIGKILL)  # unshare itself, as when nvkr is killed
        proc.wait(timeout=10)
        for _ in range(100):
            if not Path(f"/proc/{sleeper}").exists():
                break
            time.sleep(0.05)
        assert not Path(f"/proc/{sleeper}").exists(), "the command died with unshare"
        assert not _mounted(tmp_path)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_binds_must_go_under_tmp(tree: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not an absolute path under /tmp"):
        chroot_argv(tree, tmp_path / "root", [Bind(tmp_path, "/usr/src")], ["true"], cwd="/")
