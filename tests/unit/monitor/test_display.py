"""The display a human gets: the rich live display under a real pseudo-terminal, plain lines
without one (a CI log), and the plain renderer's progress lines for a long, silent action."""

from __future__ import annotations

import hashlib
import io
import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

from nvkr.monitor.events import ActionProgress, ActionStarted
from nvkr.monitor.plain import PlainMonitor
from tests.helpers import REPO
from tests.helpers.nvkr import run_nvkr
from tests.helpers.streams import RECIPE, TOOL

_ANSI = re.compile(rb"\x1b\[")


def _project(tmp_path: Path, http_dir) -> Path:
    (http_dir.root / "tool").write_bytes(TOOL)
    proj = tmp_path / "proj"
    (proj / "recipes").mkdir(parents=True)
    (proj / "recipes" / "small.yaml").write_text(
        RECIPE.format(base=http_dir.url, sha=hashlib.sha256(TOOL).hexdigest())
    )
    return proj


def _under_pty(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, bytes]:
    """Run ``argv`` with stdin, stdout and stderr on a new pseudo-terminal; all it wrote."""
    main, child = pty.openpty()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=child, stdout=child, stderr=child)
    os.close(child)
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    return proc.wait(timeout=300), out


def test_build_under_a_pty_shows_the_live_display_and_plain_lines_without(tmp_path, http_dir):
    proj = _project(tmp_path, http_dir)
    env = {
        **os.environ,
        "NVKR_CACHE": str(tmp_path / "store"),
        "NVKR_CONFIG": str(tmp_path / "none.yaml"),
        "TERM": "xterm-256color",
        "COLUMNS": "120",
    }
    env.pop("NVKR_PROGRESS", None)
    argv = [sys.executable, "-m", "nvkr", "build", "recipes/small.yaml", "--jobs", "1"]
    code, out = _under_pty(argv, proj, env)
    assert code == 0, out.decode(errors="replace")
    assert _ANSI.search(out), "no ANSI codes on a terminal"
    assert b"\x1b[?25l" in out, "the live display hides the cursor while it runs"
    text = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", out).decode(errors="replace")
    assert re.search(r"build 5 actions.*\b[0-5]/5\b", text), "done/total of the build"
    assert "built    pkgs [amd64]" in text and "nvkr: build took" in text

    plain = run_nvkr(
        "build", "recipes/small.yaml", cwd=proj, store=tmp_path / "store2", env={"TERM": "xterm"}
    )
    assert plain.code == 0, plain.stderr
    assert "\x1b" not in plain.stderr, "ANSI codes in a CI log"
    assert "  built    pkgs [amd64]" in plain.stderr
    assert "release set small → dist/small sha256:" in plain.stderr
    assert plain.stdout == ""


def test_plain_renderer_prints_progress_of_a_silent_action_every_n_seconds():
    """A long action that prints nothing still gives a CI log a line every ``every`` seconds,
    with the latest progress its builder reported."""

    class Action:
        key, name, builder = "sha256:" + "a" * 64, "rootfs [arm64]", "rootfs"

    out = io.StringIO()
    monitor = PlainMonitor("build", out, every=0.2)
    monitor.emit(ActionStarted(Action()))
    monitor.emit(ActionProgress(Action(), 4, 9, "steps", "installing remaining packages"))
    time.sleep(0.7)
    monitor.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("  building rootfs [arm64] (rootfs, aaaaaaaaaaaa)")
    running = [line for line in lines if line.startswith("  running  rootfs [arm64] ")]
    assert len(running) >= 2, lines
    assert running[-1].endswith(": installing remaining packages (4/9 steps)")


def test_plain_renderer_prints_a_running_line_for_a_long_boot():
    """A boot test under TCG can take minutes before its console says ready: a CI log gets a
    ``running`` line for the image every ``every`` seconds until its result."""
    from nvkr.monitor.events import BootImageResult, BootStart

    out = io.StringIO()
    monitor = PlainMonitor("boot-test", out, every=0.2)
    monitor.emit(BootStart("disk.qcow2", "amd64", "bios", "tcg", 300.0, "c.log", 1))
    time.sleep(0.7)
    monitor.emit(BootImageResult("disk.qcow2", None, True, "tcg", "c.log", line="ready"))
    stopped = len(out.getvalue().splitlines())
    time.sleep(0.5)
    monitor.close()
    lines = out.getvalue().splitlines()
    assert (
        lines[0]
        == "boot-test: booting disk.qcow2 (amd64) under tcg, timeout 300 s, console log c.log"
    )
    running = [
        line for line in lines if line.startswith("  running  boot-test disk.qcow2 (amd64) ")
    ]
    assert len(running) >= 2, lines
    assert lines[stopped - 1] == "ok disk.qcow2: ready (0.0 s, tcg)" and len(lines) == stopped


def test_live_display_is_not_imported_off_a_terminal():
    """rich stays out of ``nvkr publish``'s start-up when stderr is no terminal."""
    probe = (
        "import sys\nfrom nvkr.monitor import open_monitor\n"
        "m = open_monitor('publish', as_json=False); m.close()\n"
        "print(type(m).__name__, any(n == 'rich' or n.startswith('rich.') for n in sys.modules))"
    )
    env = {k: v for k, v in os.environ.items() if k != "NVKR_PROGRESS"}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO, env=env
    ).stdout
    assert out.split() == ["PlainMonitor", "False"]


def test_live_display_shows_the_image_being_booted_with_its_elapsed_time():
    from nvkr.monitor.events import BootImageResult, BootStall, BootStart
    from nvkr.monitor.live import LiveMonitor

    monitor = LiveMonitor("boot-test")
    try:
        start = BootStart("disk.qcow2", "amd64", "bios", "kvm", 300.0, "c.log", 1, shown="")
        monitor.emit(start)
        (task,) = monitor.progress.tasks
        assert task.description == "booting disk.qcow2 (amd64) [dim]under kvm[/]"
        assert task.started and task.elapsed is not None  # TimeElapsedColumn's figure
        monitor.emit(BootStall("disk.qcow2", "kvm", 30.0, "", "silent", "tcg", "c.log"))
        assert monitor.progress.tasks == []
        monitor.emit(start._replace(accel="tcg", attempt=2, shown="set [cpu k8s1.31 amd64]"))
        (task,) = monitor.progress.tasks
        assert task.description == r"booting set \[cpu k8s1.31 amd64] [dim]under tcg[/]"
        monitor.emit(BootImageResult("disk.qcow2", None, True, "tcg", "c.log", line="ready"))
        assert monitor.progress.tasks == []
    finally:
        monitor.close()


def test_live_display_names_a_transfer_under_way_and_its_bytes_without_a_total():
    from nvkr.monitor.events import Transfer
    from nvkr.monitor.live import LiveMonitor, _Amount

    monitor = LiveMonitor("build")
    try:
        monitor.emit(Transfer("fetched", "debian-packages", 3 << 20, None))
        (task,) = monitor.progress.tasks
        assert task.description == "fetching debian-packages"
        assert _Amount().render(task).plain == "3.0 MiB"  # the server said no size: so far
        monitor.emit(Transfer("pushed", "registry/set:1", 1 << 30, 4 << 30))
        pushed = monitor.progress.tasks[1]
        assert pushed.description == "pushing registry/set:1"
        assert _Amount().render(pushed).plain == "1.0/4.0 GiB"
        monitor.emit(Transfer("fetched", "debian-packages", 5 << 20, None, finished=True))
        assert [t.description for t in monitor.progress.tasks] == ["pushing registry/set:1"]
    finally:
        monitor.close()


def test_plain_renderer_says_fetching_while_a_download_runs_and_its_size_and_time_at_its_end():
    """What a helper read in a CI log: the 30 s line said ``fetched node-packages: 92.5 MiB of
    113.2 MiB`` mid-download and no line said when it ended (the action's time holds both)."""
    import io

    from nvkr.monitor.events import Transfer
    from nvkr.monitor.plain import PlainMonitor

    out = io.StringIO()
    monitor = PlainMonitor("build", out, every=3600)
    try:
        monitor.emit(Transfer("fetched", "node-packages", 97 << 20, 113 << 20))
        monitor.emit(Transfer("pushed", "registry/set:1", 1 << 30, None))
        assert monitor.progress_lines() == [
            "  fetching node-packages: 97.0 MiB of 113.0 MiB",
            "  pushing registry/set:1: 1.0 GiB",
        ]
        monitor.emit(Transfer("fetched", "node-packages", 113 << 20, 113 << 20, finished=True))
        monitor.emit(Transfer("pushed", "registry/set:1", 2 << 30, None, finished=True))
    finally:
        monitor.close()
    # the end of a source's download is a line of its own; a push's end is the publish's lines
    assert out.getvalue().splitlines() == ["  fetched  node-packages 113.0 MiB in 0 s"]
    assert monitor.progress_lines() == []
