"""Every test runs as a new user on this machine would: its own empty ``HOME`` (with only a git
identity), its own XDG config, cache, data and state directories under it, no ``NVKR_*``
variable but the machine's :data:`KEEP` (so the store defaults to ``~/.cache/nvkr`` and the
config to ``~/.config/nvkr/config.yaml``, both inside that ``HOME``), no ``SOURCE_DATE_EPOCH``,
no ``DOCKER_CONFIG`` or registry auth file, and loopback never sent through a proxy. No test
reads the developer's config or store, and none writes to them.

Kept from the machine: pip's own configuration (``PIP_CONFIG_FILE`` names the user's pip.conf
when there is one), so source fetches keep the machine's package index route, as nvkr's pypi
fetcher does for a real user. Session fixtures (``default_sources``, ``default_build``) are set up
before this function-scoped fixture and pass their stores explicitly.

Also here, the fast tier's guard (:mod:`tests.helpers.toolguard`): a test not marked ``slow`` that
starts QEMU, mmdebstrap or podman, or uses the session's default build, fails.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import toolguard

#: NVKR_* variables that describe the machine, not the developer: kept (the README's end-to-end
#: boot tests honour NVKR_BOOT_ACCEL where KVM misbehaves)
KEEP = ("NVKR_BOOT_ACCEL",)
#: variables that would point nvkr, skopeo or docker clients at the developer's state
_UNSET = ("SOURCE_DATE_EPOCH", "DOCKER_CONFIG", "REGISTRY_AUTH_FILE")
_XDG = {
    "XDG_CONFIG_HOME": ".config",
    "XDG_CACHE_HOME": ".cache",
    "XDG_DATA_HOME": ".local/share",
    "XDG_STATE_HOME": ".local/state",
}
LOOPBACK = ("127.0.0.1", "127.0.0.2", "localhost")
GITCONFIG = "[user]\n\tname = nvkr tests\n\temail = tests@nvkr.invalid\n"


def _user_pip_config() -> Path | None:
    """The pip.conf pip would read from the real user's config dir, if any."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    path = Path(base) / "pip" / "pip.conf"
    return path if path.is_file() else None


@pytest.fixture(autouse=True)
def isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """A fresh ``HOME`` for the test (returned), and the environment described above."""
    pip_config = _user_pip_config()
    home = tmp_path_factory.mktemp("home")
    (home / ".gitconfig").write_text(GITCONFIG)
    monkeypatch.setenv("HOME", str(home))
    for var, sub in _XDG.items():
        monkeypatch.setenv(var, str(home / sub))
    for var in [v for v in os.environ if v.startswith("NVKR_") and v not in KEEP] + list(_UNSET):
        monkeypatch.delenv(var, raising=False)
    if pip_config is not None and "PIP_CONFIG_FILE" not in os.environ:
        monkeypatch.setenv("PIP_CONFIG_FILE", str(pip_config))
    for var in ("no_proxy", "NO_PROXY"):
        current = os.environ.get(var, "")
        missing = [h for h in LOOPBACK if h not in current.split(",")]
        monkeypatch.setenv(var, ",".join(filter(None, [current, *missing])))
    yield home
    shutil.rmtree(home, ignore_errors=True)  # per test, so a long session leaves no homes behind


# -- the fast tier's guard (tests/helpers/toolguard.py) -----------------------------------------
# The audit hook is on from the start of a test's setup (before its module and session fixtures
# are made: a fixture that starts podman for a test not marked slow is refused too) to the end
# of its teardown. The environment that carries the guard into the processes a test starts is set
# by the function fixture below only, so a session fixture's long-lived process (the default
# build, started at the session's first test) never inherits it.
_GUARD_FILES = pytest.StashKey[tuple[Path, Path, Path]]()


def _guarded(item: pytest.Item) -> bool:
    return item.get_closest_marker("slow") is None


def _heavy_fixture(item: pytest.Item) -> str | None:
    """Why ``item`` belongs to the slow tier by what it asks for, or None: the session's
    default build (a full build of recipes/default.yaml)."""
    if "default_build" in getattr(item, "fixturenames", ()) or item.get_closest_marker(
        "default_build"
    ):
        return "it uses the session's default build (a full build of recipes/default.yaml)"
    return None


def pytest_configure(config: pytest.Config) -> None:
    directory = Path(tempfile.mkdtemp(prefix="nvkr-tool-guard-"))
    config.stash[_GUARD_FILES] = toolguard.prepare(directory)
    toolguard.install(config.stash[_GUARD_FILES][2])


def pytest_unconfigure(config: pytest.Config) -> None:
    toolguard.activate(False)
    files = config.stash.get(_GUARD_FILES, None)
    if files is not None:
        shutil.rmtree(files[2].parent, ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    if _guarded(item):
        heavy = _heavy_fixture(item)
        if heavy is not None:
            pytest.fail(f"a test not marked slow: {heavy}; mark it pytest.mark.slow", pytrace=False)
        toolguard.take(item.config.stash[_GUARD_FILES][2])  # an earlier test's leftovers
        toolguard.activate(True)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    try:
        result = yield
    finally:
        toolguard.activate(False)
    started = toolguard.take(item.config.stash[_GUARD_FILES][2]) if _guarded(item) else []
    if started:
        tools = sorted({line.split()[0].rsplit("/", 1)[-1] for line in started})
        lines = [*(toolguard.message(t) for t in tools), "started:", *started]
        pytest.fail("\n".join(lines), pytrace=False)
    return result


@pytest.fixture(autouse=True)
def tool_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """For a test not marked slow: the guard's stand-ins first on ``PATH``, its
    ``sitecustomize`` on ``PYTHONPATH`` and its log in ``$PYTEST_TOOL_GUARD_LOG``, so the
    processes the test starts (``python -m nvkr``, a shell script) are guarded too."""
    if not _guarded(request.node):
        return
    shims, site, log = request.config.stash[_GUARD_FILES]
    monkeypatch.setenv("PATH", os.pathsep.join([str(shims), os.environ.get("PATH", os.defpath)]))
    python_path = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(python_path))
    monkeypatch.setenv(toolguard.ENV, str(log))
