"""Stopping the real CLI as a CI system cancels a job: SIGTERM (exit 143, like Ctrl-C's 130),
SIGKILL (the tool dies with nvkr, the next build removes what it left), and leftovers of dead
builds removed at the start of the next build (mounted ones too, as root).

A small recipe of this directory's own chart builds with the real helm-chart builder. To hold a
tool running where the test wants it, a driver script starts the CLI after replacing that
builder's ``run`` (an action's worker thread) or the planning step (the main thread, as when
`nvkr build` resolves a source with pip) by a call of a shell through nvkr's gateway.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.nvkr import run_nvkr

RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: stops}
epoch: "1700000000"
matrix: {gpu: [hopper], kubernetes: ["1.36"], arch: [amd64]}
sources:
  chart: {path: ../chart}
artifacts:
  chart: {builder: helm-chart, source: chart, version: "0.1.0"}
releaseSet:
  name: "stops-{{ kubernetes }}"
"""

DRIVER = """\
import os
import sys

import nvkr.run
from nvkr.run import run

if "STOPS_GRACE" in os.environ:  # seconds a stopped tool gets before SIGKILL (default 8)
    nvkr.run.STOP_GRACE = float(os.environ["STOPS_GRACE"])

where, script, pidfile = sys.argv[1:4]
del sys.argv[1:4]
tool = ["sh", "-c", f"echo $$ > {pidfile}; {script}"]

if where == "action":
    from nvkr.builders.helm_chart import builder as helm_chart

    def slow_run(self, ctx):
        run(tool, log_file=ctx.log_file)

    helm_chart.HelmChartBuilder.run = slow_run
else:  # the main thread, before the store lock (sources resolved with pip or git)
    from nvkr import session

    plan = session.make_session_plan

    def slow_plan(*args, **kwargs):
        run(tool)
        return plan(*args, **kwargs)

    session.make_session_plan = slow_plan

from nvkr.cli import main

main()
"""

#: a tool that exits on SIGTERM, and one that ignores it (as does its child)
POLITE = "exec sleep 300"
STUBBORN = "trap '' TERM; sleep 300 & wait; wait"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    (proj / "recipes").mkdir(parents=True)
    (proj / "recipes" / "stops.yaml").write_text(RECIPE)
    chart = proj / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: stops\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text("greeting: hello\n")
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: stops}\n"
        "data: {greeting: {{ .Values.greeting | quote }}}\n"
    )
    (tmp_path / "driver.py").write_text(DRIVER)
    return proj


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _wait_gone(pid: int, timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


class Driven:
    """``nvkr build`` started through the driver, with its tool running (``tool`` its pid)."""

    def __init__(
        self, project: Path, store: Path, where: str, script: str, grace: float | None = None
    ) -> None:
        pidfile = project.parent / f"tool-{where}.pid"
        env = {**os.environ, "NVKR_CACHE": str(store), "NVKR_CONFIG": str(project / "none")}
        if grace is not None:
            env["STOPS_GRACE"] = str(grace)
        driver = [sys.executable, str(project.parent / "driver.py"), where, script, str(pidfile)]
        self.proc = subprocess.Popen(
            [*driver, "build", "recipes/stops.yaml"],
            cwd=project,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a CI job's process group
        )
        deadline = time.monotonic() + 60
        while not (pidfile.exists() and pidfile.read_text().endswith("\n")):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"no tool started: {self.proc.communicate()}")
            time.sleep(0.05)
        self.tool = int(pidfile.read_text())

    def wait(self) -> tuple[int, str]:
        _, err = self.proc.communicate(timeout=120)
        return self.proc.returncode, err


@pytest.mark.parametrize("where", ["action", "main"])
@pytest.mark.parametrize(
    ("sig", "code", "word"),
    [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")],
)
def test_a_stop_signal_to_nvkr_alone_stops_its_tool(
    project: Path, tmp_path: Path, where: str, sig: int, code: int, word: str
) -> None:
    store = tmp_path / "store"
    run = Driven(project, store, where, POLITE)
    os.kill(run.proc.pid, sig)  # nvkr's pid only: `docker stop`, many CI runners
    got, err = run.wait()
    assert got == code, err
    assert f"error[NVKR-E-INTERRUPTED]: {word}" in err and "Traceback" not in err, err
    assert _wait_gone(run.tool, timeout=5), "the tool was stopped with nvkr"
    assert os.listdir(store / "tmp") == []
    assert not (project / "dist").exists()


def test_sigterm_kills_a_tool_that_ignores_it_after_the_grace_period(
    project: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    # a grace of 1 s, not the default 8: the same path, SIGKILL once it has passed
    run = Driven(project, store, "action", STUBBORN, grace=1.0)
    started = time.monotonic()
    os.killpg(run.proc.pid, signal.SIGTERM)  # the whole job's group: nvkr alone gets it
    got, err = run.wait()
    assert got == 143, err
    assert 1.0 <= time.monotonic() - started < 60
    assert _wait_gone(run.tool)
    assert os.listdir(store / "tmp") == []


def test_sigkill_kills_the_tool_and_the_next_build_removes_what_it_left(
    project: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    run = Driven(project, store, "action", POLITE)
    os.killpg(run.proc.pid, signal.SIGKILL)
    got, _ = run.wait()
    assert got == -signal.SIGKILL
    assert _wait_gone(run.tool), "the tool died with nvkr (PR_SET_PDEATHSIG)"
    (left,) = os.listdir(store / "tmp")
    assert left.startswith("act-"), left
    again = run_nvkr("build", "recipes/stops.yaml", cwd=project, store=store)
    assert again.code == 0, again.stderr
    assert "store: removed 1 leftover of dead builds from tmp/" in again.stderr, again.stderr
    assert os.listdir(store / "tmp") == []
    assert (project / "dist" / "stops-1.36" / "index.json").is_file()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")
def test_the_next_build_unmounts_and_removes_a_mounted_leftover(
    project: Path, tmp_path: Path
) -> None:
    # what an older nvkr left after a SIGKILL mid-rootfs: mmdebstrap's proc still mounted
    store = tmp_path / "store"
    chroot = store / "tmp" / "act-8678c9044f04-dead" / "tmp" / "mmdebstrap.X"
    (chroot / "proc").mkdir(parents=True)
    (store / "tmp" / "blob-dead").write_bytes(b"\0" * (3 << 20))
    subprocess.run(["mount", "-t", "tmpfs", "nvkr-test", str(chroot / "proc")], check=True)
    try:
        res = run_nvkr("build", "recipes/stops.yaml", cwd=project, store=store)
    finally:
        subprocess.run(["umount", "--lazy", str(chroot / "proc")], check=False, capture_output=True)
    assert res.code == 0, res.stderr
    line = "store: removed 2 leftovers of dead builds from tmp/ (3.0 MiB), unmounted 1"
    assert line in res.stderr, res.stderr
    assert os.listdir(store / "tmp") == []
    assert str(store) not in Path("/proc/self/mountinfo").read_text()
