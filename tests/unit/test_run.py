"""The subprocess gateway (nvkr.run): tools die with nvkr, stop when it stops, and mount only in
namespaces of their own. Real processes and real signals; the namespace tests need root."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from nvkr import run as gateway
from nvkr.errors import Interrupted, ToolError
from nvkr.run import resume, run, stop_tools

REPO = Path(__file__).resolve().parents[2]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mount namespaces need root")


@pytest.fixture(autouse=True)
def _no_stop_left_behind():
    yield
    resume()  # a test that stopped tools does not stop the next test's


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _wait_gone(pids: list[int], timeout: float = 20) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _wait_file(path: Path, proc: subprocess.Popen[str], timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text()
        if proc.poll() is not None:
            pytest.fail(f"the script ended first: {proc.communicate()}")
        time.sleep(0.05)
    pytest.fail(f"{path} was not written in {timeout} s")


def _script(body: str) -> subprocess.Popen[str]:
    """A Python process using nvkr.run the way nvkr does (its own session, like a CI job)."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(body)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@pytest.mark.parametrize("thread", ["main", "worker"])
def test_a_tool_dies_with_nvkr_even_when_nvkr_is_sigkilled(tmp_path: Path, thread: str) -> None:
    # PR_SET_PDEATHSIG fires when the thread that forked ends: the executor forks from the
    # worker threads of a thread pool, which wait for the tool as the main thread does
    pidfile = tmp_path / "pid"
    proc = _script(f"""
        from concurrent.futures import ThreadPoolExecutor
        from nvkr.run import run

        def tool():
            run(["sh", "-c", "echo $$ > {pidfile}; exec sleep 300"])

        if {thread!r} == "worker":
            ThreadPoolExecutor(2, thread_name_prefix="nvkr-action").submit(tool).result()
        else:
            tool()
    """)
    tool = int(_wait_file(pidfile, proc))
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert _wait_gone([tool]) == [], f"the tool {tool} outlived nvkr"


def test_a_tool_started_by_a_worker_thread_lives_while_that_thread_waits(tmp_path: Path) -> None:
    # the main thread ending first (the interpreter then waits for the pool's threads) must not
    # kill a tool a worker started: the death signal is tied to the thread that forked
    done = tmp_path / "done"
    proc = _script(f"""
        import threading
        from nvkr.run import run

        threading.Thread(
            target=run, args=(["sh", "-c", "sleep 1; echo ok > {done}"],), name="worker"
        ).start()
    """)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert done.read_text() == "ok\n"


def test_tools_run_in_their_own_process_group_with_stdin_from_dev_null() -> None:
    # a Ctrl-C or a CI's signal to nvkr's group reaches nvkr alone, which stops each tool once;
    # a tool in a background group must never read the terminal (it would stop on SIGTTIN)
    code = "import os, sys; print(os.getpgrp() == os.getpid(), repr(sys.stdin.read()))"
    out = run([sys.executable, "-c", code]).stdout.decode()
    assert out == "True ''\n"
    assert run(["cat"], input=b"fed\n").stdout == b"fed\n"


def test_a_missing_working_directory_is_not_a_missing_tool(tmp_path: Path) -> None:
    with pytest.raises(ToolError) as e:
        run(["true"], cwd=tmp_path / "gone")
    assert f"working directory {tmp_path / 'gone'} does not exist" in e.value.message
    assert "not found" not in e.value.message


def test_stop_terminates_then_kills_and_no_tool_starts_afterwards(tmp_path: Path) -> None:
    # one tool exits on SIGTERM, the other ignores it (and so does its child): stop_tools
    # SIGKILLs the group of the second after the grace period
    errors: dict[str, BaseException] = {}
    pids: dict[str, int] = {}

    def tool(name: str, script: str) -> None:
        try:
            run(["sh", "-c", f"echo $$ > {tmp_path / name}; {script}"])
        except BaseException as e:
            errors[name] = e

    threads = [
        threading.Thread(target=tool, args=("polite", "exec sleep 300")),
        threading.Thread(target=tool, args=("stubborn", "trap '' TERM; sleep 300 & wait; wait")),
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while len(pids) < 2 and time.monotonic() < deadline:
        for name in ("polite", "stubborn"):
            f = tmp_path / name
            if f.exists() and f.read_text().endswith("\n"):
                pids[name] = int(f.read_text())
        time.sleep(0.05)
    started = time.monotonic()
    stop_tools(grace=1.0)
    for t in threads:
        t.join(30)
    assert time.monotonic() - started < 15
    assert _wait_gone(list(pids.values())) == []
    for name in ("polite", "stubborn"):
        assert isinstance(errors[name], Interrupted), errors
    with pytest.raises(Interrupted, match="not started"):
        run(["true"])
    assert run(["true"], cleanup=True).returncode == 0, "clean-up steps still run"
    resume()
    assert run(["true"]).returncode == 0


def test_a_tool_that_times_out_is_stopped_with_its_children(tmp_path: Path) -> None:
    pidfile = tmp_path / "child"
    with pytest.raises(ToolError, match="timed out after 1"):
        run(["sh", "-c", f"sleep 300 & echo $! > {pidfile}; wait"], timeout=1)
    assert _wait_gone([int(pidfile.read_text())]) == []


@needs_root
def test_isolated_mounts_are_private_to_the_tool(tmp_path: Path) -> None:
    point = tmp_path / "point"
    point.mkdir()
    script = f"mount -t tmpfs nvkr-test {point} && echo x > {point}/inside && grep -c {point} /proc/self/mountinfo"
    proc = run(["sh", "-c", script], isolate=True)
    assert proc.stdout.decode().strip() == "1", "the tool sees its mount"
    assert str(point) not in Path("/proc/self/mountinfo").read_text()
    assert not (point / "inside").exists(), "what it wrote went into its own tmpfs"


@needs_root
def test_sigkill_of_nvkr_ends_an_isolated_tool_its_children_and_its_mounts(tmp_path: Path) -> None:
    # mmdebstrap's case: the tool mounts, forks workers, and nvkr is SIGKILLed meanwhile
    point = tmp_path / "chroot" / "proc"
    point.mkdir(parents=True)
    pidfile = tmp_path / "up"
    inner = f"mount -t tmpfs nvkr-test {point}; sleep 300 & sleep 300 & echo up > {pidfile}; wait"
    proc = _script(f"""
        from nvkr.run import run
        run(["sh", "-c", {inner!r}], isolate=True)
    """)
    _wait_file(pidfile, proc)

    def ours() -> list[int]:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if str(point) in Path(f"/proc/{pid}/mountinfo").read_text():
                    found.append(int(pid))
            except OSError:
                pass
        return found

    inside = ours()
    assert inside, "the tool and its children run with the mount"
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert _wait_gone(inside) == [], "every process of the namespace ended"
    assert ours() == [], "no namespace keeps the mount"
    assert not any(p.name for p in point.iterdir())


def test_isolated_is_argv_unchanged_for_other_users(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gateway.os, "geteuid", lambda: 1000)
    assert gateway.isolated(["mmdebstrap", "x"]) == ["mmdebstrap", "x"]
    monkeypatch.setattr(gateway.os, "geteuid", lambda: 0)
    argv = gateway.isolated(["mmdebstrap", "x"])
    assert argv[0] == "unshare" and argv[-3:] == ["--", "mmdebstrap", "x"]
    assert {"--mount", "--pid", "--fork", "--kill-child"} <= set(argv)


def test_debug_logs_each_tools_environment_sorted_with_secrets_masked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = gateway.pinned_env(
        {
            "NVKR_KEY_PASSPHRASE": "hunter2",
            "GITHUB_TOKEN": "ghp_abc123",
            "REGISTRY_PASSWORD": "pa55",
            "https_proxy": "http://alice:pw0rd@proxy.example:3128",
            "ZED": "last",
        }
    )
    with caplog.at_level("DEBUG", logger="nvkr.run"):
        run(["true"], env=env)
    text = caplog.text
    assert "run: true" in text
    for secret in ("hunter2", "ghp_abc123", "pa55", "alice", "pw0rd"):
        assert secret not in text
    lines = [ln.strip() for ln in text.splitlines() if "=" in ln and not ln.startswith("DEBUG")]
    names = [ln.split("=", 1)[0] for ln in lines]
    assert names == sorted(env)
    assert "NVKR_KEY_PASSPHRASE=***" in lines
    assert "GITHUB_TOKEN=***" in lines
    assert "REGISTRY_PASSWORD=***" in lines
    assert "https_proxy=http://proxy.example:3128" in lines
    assert "TZ=UTC" in lines and "ZED=last" in lines


def test_the_environment_is_not_logged_without_debug(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="nvkr.run"):
        run(["true"], env=gateway.pinned_env({"ZED": "last"}))
    assert "ZED" not in caplog.text
