"""Podman's Docker-API service for tests of the ``docker`` container-image backend.

:func:`podman_service` starts ``podman system service`` on a unix socket in a temp dir, with its
own storage (the ``vfs`` driver: no overlay mounts, nothing shared with the machine's podman) and a
containers.conf that works on a CI machine without systemd: host network namespace, no cgroups,
``cgroupfs``, file events and ``runc`` (crun fails on hybrid cgroups). Nothing is pulled: no
registry is searched for short names. The session fixture :func:`podman_docker_host` yields the
``DOCKER_HOST`` URL; a missing podman fails the tests (CI installs it), it never skips them.

A plugin of tests/conftest.py: a test names ``podman_docker_host`` as a parameter.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

INSTALL_HINT = "apt-get install -y --no-install-recommends podman buildah runc uidmap"
START_TIMEOUT = 30.0  # seconds; the service answers in about 1 s here

CONTAINERS_CONF = """\
[containers]
netns = "host"
cgroups = "disabled"

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{root}/events.log"
runtime = "runc"
tmp_dir = "{root}/tmp"
static_dir = "{root}/graph/libpod"
volume_path = "{root}/graph/volumes"

[network]
network_backend = "cni"
"""

STORAGE_CONF = """\
[storage]
driver = "vfs"
runroot = "{root}/run"
graphroot = "{root}/graph"
"""

# No unqualified-search registries: a short name never reaches out to docker.io.
REGISTRIES_CONF = """\
unqualified-search-registries = []
"""


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def ping(sock: Path, timeout: float = 2.0) -> bool:
    """True when the Docker API on unix socket ``sock`` answers ``GET /_ping`` with ``OK``."""
    conn = _UnixHTTPConnection(str(sock), timeout)
    try:
        conn.request("GET", "/_ping")
        resp = conn.getresponse()
        return resp.status == 200 and resp.read().strip() == b"OK"
    except OSError:
        return False
    finally:
        conn.close()


def podman_env(root: Path) -> dict[str, str]:
    """The environment for a podman (service or CLI) using the private storage under ``root``.

    Writes the three config files under ``root`` (created if needed).
    """
    root.mkdir(parents=True, exist_ok=True)
    files = {
        "CONTAINERS_CONF": ("containers.conf", CONTAINERS_CONF),
        "CONTAINERS_STORAGE_CONF": ("storage.conf", STORAGE_CONF),
        "CONTAINERS_REGISTRIES_CONF": ("registries.conf", REGISTRIES_CONF),
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTAINERS_")}
    env.pop("DOCKER_HOST", None)
    for var, (name, text) in files.items():
        path = root / name
        path.write_text(text.format(root=root))
        env[var] = str(path)
    return env


@contextlib.contextmanager
def podman_service(root: Path) -> Iterator[str]:
    """Run ``podman system service`` with private storage under ``root``; yield its DOCKER_HOST.

    The URL is ``unix://<root>/podman.sock``. On exit the service is stopped (SIGTERM, then
    SIGKILL after 10 s) and ``root`` is removed.

    Raises:
        pytest.fail.Exception: podman is not installed, or the socket does not answer within
            30 s (the message holds the service's log).
    """
    podman = shutil.which("podman")
    if podman is None:
        pytest.fail(f"podman is not installed (the docker backend's tests need it): {INSTALL_HINT}")
    for tool in ("runc", "buildah"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed (podman builds with it): {INSTALL_HINT}")
    env = podman_env(root)
    sock = root / "podman.sock"
    log_path = root / "service.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [podman, "system", "service", "--time=0", f"unix://{sock}"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not ping(sock):
            if proc.poll() is not None or time.monotonic() > deadline:
                why = f"exited with {proc.returncode}" if proc.poll() is not None else "timed out"
                pytest.fail(
                    f"podman system service {why} before {sock} answered /_ping:\n"
                    + log_path.read_text(errors="replace")[-2000:]
                )
            time.sleep(0.1)
        yield f"unix://{sock}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def podman_docker_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``unix://.../podman.sock``: one podman Docker-API service for the whole session."""
    with podman_service(tmp_path_factory.mktemp("podman")) as url:
        yield url
