"""The harness's isolation (tests/helpers/isolation.py): a test never sees the developer's HOME,
store, config or SOURCE_DATE_EPOCH. Run as a nested pytest under a developer-like environment
(a HOME with an nvkr config that would break any command reading it, NVKR_CACHE, NVKR_CONFIG,
SOURCE_DATE_EPOCH and XDG dirs pointing at it), where the inner test checks what it sees."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvkr.fetch.mirrors import default_config_path
from nvkr.store import default_root
from tests.helpers import REPO, isolation
from tests.helpers.cli import invoke

INNER = "HARNESS_DEVELOPER_HOME"  # not NVKR_*: the isolation unsets those


@pytest.mark.skipif(INNER not in os.environ, reason="run by the test below, in a nested pytest")
def test_inner_sees_only_its_own_home(isolated_home: Path) -> None:
    developer = Path(os.environ[INNER])
    assert Path.home() == isolated_home and not isolated_home.is_relative_to(developer)
    assert not [v for v in os.environ if v.startswith("NVKR_") and v not in isolation.KEEP]
    assert "SOURCE_DATE_EPOCH" not in os.environ
    for var in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        assert Path(os.environ[var]).is_relative_to(isolated_home), var
    assert default_root().is_relative_to(isolated_home)
    assert default_config_path().is_relative_to(isolated_home)
    # a verb that reads the config and opens the store: the developer's would fail it
    result = invoke("plan", REPO / "recipes" / "default.yaml")
    assert result.code == 0, result.stderr
    assert not (developer / "store").exists()


def test_no_test_reads_the_developers_home_store_or_config(tmp_path: Path) -> None:
    developer = tmp_path / "developer"
    (developer / ".config" / "nvkr").mkdir(parents=True)
    broken = "mirrors: [this is not a mirror list\n"
    (developer / ".config" / "nvkr" / "config.yaml").write_text(broken)
    (developer / "config.yaml").write_text(broken)
    env = {
        **os.environ,
        "HOME": str(developer),
        "NVKR_CACHE": str(developer / "store"),
        "NVKR_CONFIG": str(developer / "config.yaml"),
        "SOURCE_DATE_EPOCH": "1",
        "NVKR_REGISTRY_PASSWORD": "the developer's",
        "XDG_CONFIG_HOME": str(developer / ".config"),
        "XDG_CACHE_HOME": str(developer / ".cache"),
        INNER: str(developer),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
         f"{__file__}::test_inner_sees_only_its_own_home"],
        cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 passed" in proc.stdout


#: Run under ``-n 2`` by the test below (a file of its own: a test asking for the default build
#: here would make this session start it)
XDIST_INNER = """\
import pytest


@pytest.mark.slow
@pytest.mark.default_build
def test_asking_for_the_default_build():
    raise AssertionError("never reached: a worker fails it at setup")


def test_plain():
    pass
"""


def test_under_xdist_a_test_using_the_default_build_fails_saying_why_and_nothing_builds(
    tmp_path: Path,
) -> None:
    (tmp_path / "inner").mkdir()
    (tmp_path / "inner" / "test_inner.py").write_text(XDIST_INNER)
    base = tmp_path / "base"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
         "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path), "-n", "2",
         f"--basetemp={base}", str(tmp_path / "inner")],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 passed, 1 error" in proc.stdout, proc.stdout[-3000:]
    assert "uses the session's default build or runs in the background: run it without -n" in (
        proc.stdout
    )
    # no worker started the session's default build (its tree is made before anything else)
    assert not list(base.glob("*/default-build*")), sorted(base.glob("*/*"))


def test_a_background_thread_at_a_lower_priority_starts_its_cli_runs_niced(tmp_path: Path) -> None:
    """tests/helpers/background.py's ``nice``: the CLI runs a background thread starts carry it
    (``nice -n``, so every process of the build inherits it); other threads' do not."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.helpers.nvkr import in_background, start_nvkr

    def version() -> tuple[list[str], int]:
        started = start_nvkr("--version", cwd=tmp_path, store=tmp_path / "store")
        # the niced process's own view: nice(0) returns the current value
        probe = subprocess.run(
            [*started.proc.args[: started.proc.args.index(sys.executable)], sys.executable,
             "-c", "import os; print(os.nice(0))"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert started.result().code == 0
        return list(started.proc.args), int(probe.stdout) - os.nice(0)

    with ThreadPoolExecutor(1, initializer=in_background, initargs=(dict(os.environ), 5)) as pool:
        args, raised = pool.submit(version).result()
    assert args[:3] == ["nice", "-n", "5"] and raised == 5
    args, raised = version()
    assert args[0] == sys.executable and raised == 0
