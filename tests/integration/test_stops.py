"""End to end: stopping a build in the middle of a root filesystem, as a CI system cancels one.

mmdebstrap (root mode) mounts proc, sys and dev into its chroot under the action's work dir in the
store's ``tmp/``. A SIGTERM to nvkr alone must stop it cleanly (exit 143, nothing mounted, nothing
left in ``tmp/``); a SIGKILL, to nvkr alone or to its whole process group, must leave no mount in
any mount namespace and no process of the build running, and the next build removes what the
killed one left and succeeds. The build is the default recipe's amd64 hopper variant from a store
that holds its sources (the first minute is spent in the root filesystem).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.nvkr import make_clone, run_nvkr

pytestmark = pytest.mark.slow

VARIANT = "gpu=hopper,kubernetes=1.36,arch=amd64"
NEXT_ACTION = f"kube-packages/kube-packages@{VARIANT}"


def _unescape(field: str) -> str:
    """A mountinfo path: spaces, tabs, newlines and backslashes are written as octal escapes."""
    for esc, ch in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(esc, ch)
    return field


def _pids() -> list[str]:
    return [p for p in os.listdir("/proc") if p.isdigit()]


def mounts_under(path: Path) -> list[str]:
    """Mount points at or under ``path`` in the mount namespace of any process on the machine
    (mmdebstrap's own namespace included, which the build's /proc/self/mountinfo does not show)."""
    top = str(path)
    found: set[str] = set()
    for pid in _pids():
        try:
            text = Path(f"/proc/{pid}/mountinfo").read_text()
        except OSError:  # gone meanwhile
            continue
        for line in text.splitlines():
            point = _unescape(line.split()[4])
            if point == top or point.startswith(top + "/"):
                found.add(point)
    return sorted(found)


def processes_in(path: Path) -> list[str]:
    """``pid: cmdline`` of every process whose command line, working directory or root is in
    ``path`` (chroot'd maintainer scripts have their root there)."""
    top = str(path)
    found = []
    for pid in _pids():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            where = [os.readlink(f"/proc/{pid}/{link}") for link in ("cwd", "root")]
        except OSError:
            continue
        if top in cmdline or any(w == top or w.startswith(top + "/") for w in where):
            found.append(f"{pid}: {cmdline[:200]}")
    return found


def _start_build(clone: Path, store: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "NVKR_CACHE": str(store), "NVKR_CONFIG": str(clone / "none.yaml")}
    return subprocess.Popen(
        [sys.executable, "-m", "nvkr", "build", "--locked", "--variant", VARIANT],
        cwd=clone,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a CI job's
    )


def _wait_for_chroot_mounts(proc: subprocess.Popen[str], tmp: Path, timeout: float = 900) -> None:
    """Until mmdebstrap has mounted proc (or anything) in its chroot under ``tmp``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the build ended (exit {proc.returncode}) before mmdebstrap mounted")
        if any(p.endswith("/proc") for p in mounts_under(tmp)):
            return
        time.sleep(0.2)
    pytest.fail(f"mmdebstrap mounted nothing under {tmp} in {timeout} s")


def _settled(store: Path, timeout: float = 30) -> tuple[list[str], list[str]]:
    """(mounts, processes) in the store, once both are gone or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        left = mounts_under(store), processes_in(store)
        if left == ([], []) or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


@pytest.fixture
def clone_and_store(tmp_path: Path, seed_store) -> tuple[Path, Path]:
    store = seed_store(tmp_path / "store")  # every locked source, fetched before
    return make_clone(tmp_path / "clone"), Path(os.path.realpath(store))


def test_sigterm_mid_rootfs_exits_143_and_leaves_nothing(clone_and_store) -> None:
    clone, store = clone_and_store
    proc = _start_build(clone, store)
    _wait_for_chroot_mounts(proc, store / "tmp")
    started = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)  # nvkr's pid only, as `docker stop` and many CIs do
    _, err = proc.communicate(timeout=120)
    stopped = time.monotonic() - started
    assert proc.returncode == 143, err
    assert "error[NVKR-E-INTERRUPTED]: terminated" in err and "Traceback" not in err, err
    assert _settled(store) == ([], [])
    assert os.listdir(store / "tmp") == [], "a clean stop removes its own work dirs"
    assert stopped < 60, f"stopping took {stopped:.1f} s"


@pytest.mark.parametrize("target", ["leader", "group"])
def test_kill_9_mid_rootfs_leaves_no_mount_and_the_next_build_cleans_up(
    clone_and_store, target: str
) -> None:
    clone, store = clone_and_store
    proc = _start_build(clone, store)
    _wait_for_chroot_mounts(proc, store / "tmp")
    if target == "leader":
        os.kill(proc.pid, signal.SIGKILL)
    else:  # CI's SIGKILL after the grace period goes to the job's whole process group
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    mounts, processes = _settled(store)
    assert mounts == [], "a mount survived the kill"
    assert processes == [], "a process of the killed build runs on"
    left = os.listdir(store / "tmp")
    assert left, "the killed build left its work dirs (what the next build must remove)"
    if target == "group":
        return  # one build after a kill is enough: the leader case does it
    # Any build takes the store lock, whose holder removes what dead builds left: the next one
    # builds a single action needing only sources (minutes less than the whole variant again).
    again = run_nvkr("build", "--locked", "--action", NEXT_ACTION, cwd=clone, store=store)
    assert again.code == 0, again.stderr
    assert "store: removed" in again.stderr and "dead" in again.stderr, again.stderr
    assert os.listdir(store / "tmp") == []
    assert mounts_under(store) == []
