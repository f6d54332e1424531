"""A store that stays bounded: GC roots, ``nvkr store du`` and ``nvkr store gc`` (CI-at-scale
issue, item 7), on a small project whose one source changes between builds (a daemonless image
of a url file from a loopback server: a build takes about a second)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nvkr.errors import UsageError
from nvkr.quantities import parse_duration, parse_size
from nvkr.store import Store
from nvkr.store_gc import collect, usage
from nvkr.storelock import GC, READERS
from tests.helpers.cli import invoke
from tests.helpers.nvkr import start_nvkr
from tests.helpers.registry import Registry

RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {{name: bounded}}
epoch: "1700000000"
matrix: {{gpu: [hopper], kubernetes: ["1.36"], arch: [amd64]}}
sources:
  tool: {{url: "{base}/tool-{n}", sha256: "{sha}"}}
artifacts:
  image:
    builder: container-image
    base: scratch
    files: {{/usr/bin/tool: {{source: tool, mode: "0755"}}}}
releaseSet:
  name: bounded
  clusterRelease: {{kubernetes: "1.36.4", images: [image]}}
"""


def _tool(n: int) -> bytes:
    return f"#!/bin/sh\necho tool {n}\n".encode() + bytes([n]) * 200_000


class Project:
    def __init__(self, root: Path, http) -> None:
        self.root, self.http, self.store = root, http, root / "store"
        (root / "proj" / "recipes").mkdir(parents=True)

    @property
    def proj(self) -> Path:
        return self.root / "proj"

    def build(self, n: int, *args: str) -> dict:
        """Build generation ``n`` (its own tool file); the JSON result."""
        (self.http.root / f"tool-{n}").write_bytes(_tool(n))
        (self.proj / "recipes" / "bounded.yaml").write_text(
            RECIPE.format(base=self.http.url, n=n, sha=hashlib.sha256(_tool(n)).hexdigest())
        )
        res = invoke(
            "build", "recipes/bounded.yaml", "--json", *args, cwd=self.proj, store=self.store
        )
        assert res.code == 0, res.stderr
        return res.json_events()[-1]

    def nvkr(self, *args: str):
        """``nvkr ARGS`` in this process (the verbs that run while gc holds the store start a
        process of their own: :func:`_waits_for_gc`)."""
        return invoke(*args, cwd=self.proj, store=self.store)


@pytest.fixture
def project(tmp_path, http_dir) -> Project:
    return Project(tmp_path, http_dir)


def _blob_bytes(store: Path) -> int:
    return sum(p.stat().st_size for p in (store / "blobs" / "sha256").iterdir())


def test_every_build_roots_what_it_used(project):
    result = project.build(1)
    (root_file,) = (project.store / "roots").iterdir()
    root = json.loads(root_file.read_bytes())
    assert root_file.name == f"{root['invocationId']}.json"
    assert set(result["built"]) <= set(root["actions"])
    assert "sha256:" + hashlib.sha256(_tool(1)).hexdigest() in root["blobs"]
    assert [r["digest"] for r in root["releaseSets"]] == [result["releaseSets"][0]["digest"]]
    again = project.build(1)  # a no-op roots the whole plan too
    assert again["upToDate"]
    roots = [json.loads(p.read_bytes()) for p in (project.store / "roots").iterdir()]
    assert len(roots) == 2 and roots[0]["actions"] == roots[1]["actions"]


def test_gc_after_three_changed_rebuilds_keeps_one_builds_worth(project):
    project.build(1)
    one_build = _blob_bytes(project.store)
    project.build(2)
    project.build(3)
    assert _blob_bytes(project.store) > 2.5 * one_build
    du = json.loads(project.nvkr("store", "du", "--json").stdout)
    assert du["outputs"]["container-image"] > 0 and du["sources"] > 0 and du["unreached"] == 0
    dry = json.loads(project.nvkr("store", "gc", "--dry-run", "--json").stdout)
    assert dry["blobsRemoved"] > 0 and dry["dryRun"]
    assert _blob_bytes(project.store) > 2.5 * one_build, "--dry-run removes nothing"
    swept = project.nvkr("store", "gc")
    assert swept.code == 0, swept.stderr
    assert "store gc: kept 1 builds" in swept.stdout
    assert _blob_bytes(project.store) <= 1.1 * one_build
    # what is left is exactly what the newest build needs: it is a no-op, fetching nothing
    project.http.root.joinpath("tool-3").unlink()
    assert project.build(3, "--offline")["upToDate"]
    assert project.nvkr("store", "verify").code == 0
    # an older generation is gone from the store: it builds again (its source fetched anew)
    rebuilt = project.build(1)
    assert rebuilt["built"]


def test_keep_holds_a_release_set_and_what_built_it(project):
    project.build(1, "--out", "kept")
    first = project.build(1)["releaseSets"][0]["digest"]
    project.build(2)
    swept = json.loads(project.nvkr("store", "gc", "--keep", "kept/bounded", "--json").stdout)
    assert swept["rootsKept"] == 2  # the two builds that wrote generation 1
    assert project.build(1, "--offline")["releaseSets"][0]["digest"] == first
    bad = project.nvkr("store", "gc", "--keep", "nowhere")
    assert bad.code == 2 and "--keep nowhere: not a release set layout" in bad.stderr


def test_older_than_and_max_size(project):
    for n in (1, 2, 3):
        project.build(n)
    total = _blob_bytes(project.store)
    kept = json.loads(project.nvkr("store", "gc", "--older-than", "1d", "--json").stdout)
    assert kept["blobsRemoved"] == 0 and kept["rootsKept"] == 3
    limited = json.loads(
        project.nvkr(
            "store", "gc", "--older-than", "1d", "--max-size", str(total // 2), "--json"
        ).stdout
    )
    assert limited["rootsKept"] == 1 and not limited["overSize"]
    assert _blob_bytes(project.store) <= total // 2
    assert project.build(3)["upToDate"], "the newest build is what was kept"
    pinned = project.nvkr("store", "gc", "--keep", "dist/bounded", "--max-size", "1KiB")
    assert pinned.code == 0 and "more than --max-size 1KiB" in pinned.stderr
    assert project.build(3)["upToDate"], "--keep is never let go"
    tiny = json.loads(project.nvkr("store", "gc", "--max-size", "1KiB", "--json").stdout)
    assert not tiny["overSize"] and tiny["rootsKept"] == 0 and tiny["bytesKept"] == 0


def test_usage_counts_each_blob_once(project):
    project.build(1)
    store = Store(project.store)
    u = usage(store)
    blobs = sum(p.stat().st_size for p in store.blobs_dir.iterdir())
    assert u.sources + sum(u.outputs.values()) + u.build_logs + u.unreached == blobs
    (store.actions_dir / "stray.json").write_text("{")  # unreadable: ignored, then swept
    assert usage(store).unreached == u.unreached
    collect(store)
    assert not (store.actions_dir / "stray.json").exists()


def test_usage_counts_the_plan_memo_as_metadata(project):
    """``state/`` (the plan memo) was in no line of ``store du``: its bytes are metadata."""
    project.build(1)
    store = Store(project.store)
    before = usage(store).metadata
    memo = store.root / "state" / "plan-memo"
    memo.mkdir(parents=True, exist_ok=True)
    (memo / "extra.json").write_bytes(b"{}" * 2500)
    after = usage(store)
    assert after.metadata == before + 5000 and after.as_json()["total"] == after.total


def test_usage_counts_only_boot_consoles_as_consoles(project):
    """A fresh user's trial: ``466 bytes boot-test consoles`` with no boot run: the actions'
    durations (``logs/durations/``) were counted as consoles. They are metadata; consoles are
    ``logs/boot-test/``."""
    project.build(1)
    store = Store(project.store)
    durations = store.root / "logs" / "durations"
    assert any(durations.iterdir()), "a build records its actions' durations"
    u = usage(store)
    assert u.consoles == 0
    console = store.root / "logs" / "boot-test" / "boot.log"
    console.parent.mkdir(parents=True)
    console.write_bytes(b"x" * 700)
    after = usage(store)
    assert after.consoles == 700 and after.metadata == u.metadata


@pytest.mark.parametrize(
    ("text", "seconds"), [("30d", 30 * 86400), ("12h", 43200), ("1w2d", 9 * 86400), ("45s", 45)]
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "30", "d", "1y", "-1d", "1.5h", "1d "])
def test_bad_durations_say_what_is_expected(text):
    with pytest.raises(UsageError, match="is not a duration"):
        parse_duration(text)


def test_sizes():
    assert parse_size("20GiB") == 20 << 30 and parse_size("500MB") == 500 * 10**6
    assert parse_size("1024") == 1024 and parse_size("2.5 GiB") == int(2.5 * (1 << 30))
    with pytest.raises(UsageError, match="is not a size"):
        parse_size("lots")


# -- gc against what else runs ---------------------------------------------------------------------
def _gc_in_thread(store: Store) -> tuple[threading.Thread, list[object], list[str]]:
    """gc started in a thread: the thread, its result once done, what it said it waits for
    (before it blocks on a lock)."""
    done: list[object] = []
    waits: list[str] = []
    thread = threading.Thread(
        target=lambda: done.append(collect(store, on_wait=waits.append)), daemon=True
    )
    thread.start()
    return thread, done, waits


def _until(condition, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return bool(condition())


def test_gc_waits_for_a_reader_and_a_reader_for_gc(project):
    project.build(1)
    store = Store(project.store)
    with store.reading():
        thread, done, waits = _gc_in_thread(store)
        assert _until(lambda: waits or done), "gc neither waited nor finished"
        assert not done, "gc ran while a reader held the store"
        assert waits == [f"waiting for {READERS} in {project.store} to finish"]
    thread.join(30)
    assert done


def _holding_gc(store: Path) -> subprocess.Popen[str]:
    """A process that holds the store's reader lock exclusively, as a running gc does, until
    its stdin closes; it prints one line once it holds it."""
    code = (
        "import sys; from nvkr.store import Store\n"
        f"with Store({str(store)!r}).reading(exclusive=True):\n"
        "    print('held', flush=True); sys.stdin.read()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def _blocked_on(proc: subprocess.Popen[str], lock: Path) -> bool:
    """Whether ``proc`` comes to wait for an flock of the file ``lock`` (a ``->`` line of
    /proc/locks: a blocked waiter) before it ends (within 60 s)."""
    inode = lock.stat().st_ino

    def waiting() -> bool:
        for line in Path("/proc/locks").read_text().splitlines():
            f = line.split()
            if f[1] == "->" and f[5] == str(proc.pid) and int(f[6].rsplit(":", 1)[1]) == inode:
                return True
        return False

    return _until(lambda: waiting() or proc.poll() is not None) and proc.poll() is None


def _waits_for_gc(project: Project, *args: str) -> None:
    """``nvkr ARGS`` started while gc runs does not run until gc is done (it blocks on the
    store's reader lock, saying so), then succeeds."""
    gc = _holding_gc(project.store)
    try:
        started = start_nvkr(*args, cwd=project.proj, store=project.store, timeout=120)
        blocked = _blocked_on(started.proc, project.store / "gc.lock")
        assert blocked, f"nvkr {args[0]} ran during a gc"
    finally:
        assert gc.stdin is not None
        gc.stdin.close()
        gc.wait(10)
    res = started.result()
    assert res.code == 0, res.stderr
    assert f"waiting for {GC} in {project.store} to finish" in res.stderr, res.stderr


def test_build_plan_lock_and_mirror_export_wait_for_gc(project):
    project.build(1)
    _waits_for_gc(project, "build", "recipes/bounded.yaml")
    _waits_for_gc(project, "plan", "recipes/bounded.yaml")
    _waits_for_gc(project, "lock", "recipes/bounded.yaml")
    _waits_for_gc(project, "mirror", "export", "recipes/bounded.yaml", "exported")


def test_pull_and_verify_rebuild_wait_for_gc(project, registry: Registry):
    project.build(1)
    ref = f"{registry.host}/bounded"
    published = project.nvkr("publish", "dist/bounded", ref)
    assert published.code == 0, published.stderr
    digest = json.loads(project.nvkr("release-set", "show", "dist/bounded", "--json").stdout)[
        "digest"
    ]
    _waits_for_gc(project, "pull", f"{ref}@{digest}", "pulled")
    assert project.nvkr("lock", "recipes/bounded.yaml").code == 0  # --rebuild needs a lock
    _waits_for_gc(
        project, "verify", "dist/bounded", "--rebuild", "--seed-store", str(project.store)
    )


def test_a_build_running_during_gc_keeps_what_it_uses(project):
    """gc started while a build runs waits for it (the build holds the reader and the store
    lock), then keeps that build's outputs: it is the newest root."""
    import http.server

    project.build(1)
    release, arrived = threading.Event(), threading.Event()
    body = _tool(2)

    class Held(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # the build's download waits until the test lets it go
            arrived.set()
            release.wait(60)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Held)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        (project.proj / "recipes" / "bounded.yaml").write_text(
            RECIPE.format(base=base, n=2, sha=hashlib.sha256(body).hexdigest())
        )
        started = start_nvkr("build", "recipes/bounded.yaml", cwd=project.proj,
                             store=project.store)  # fmt: skip
        assert arrived.wait(120), "the build never asked for its source"
        thread, done, waits = _gc_in_thread(Store(project.store))
        assert _until(lambda: waits or done), "gc neither waited nor finished"
        assert not done, "gc ran during a build"
        assert waits == [f"waiting for {READERS} in {project.store} to finish"]
        release.set()
        res = started.result()
        assert res.code == 0, res.stderr
        thread.join(60)
        assert done
    finally:
        server.shutdown()
        server.server_close()
    res = project.nvkr("build", "recipes/bounded.yaml", "--json", "--offline")
    assert res.code == 0 and res.json_events()[-1]["upToDate"], res.stderr


def test_builds_finished_in_the_same_second_are_ordered_by_when_their_root_was_written(tmp_path):
    """finishedOn holds whole seconds, and three builds of a small recipe on a fast machine end
    in one: --max-size evicted by invocation id then, so the newest build could be the one let
    go (test_older_than_and_max_size failed so once). The root file's write time orders them."""
    import os
    from types import SimpleNamespace

    from nvkr.store_gc import _roots, write_root

    store = Store(tmp_path / "store")
    plan = SimpleNamespace(actions={})
    # invocation ids in the reverse of the order the builds finished, all in one second
    for i, invocation in enumerate(("c-last", "b-middle", "a-first")[::-1]):
        path = write_root(
            store, invocation_id=invocation, recipe="r.yaml", plan=plan, release_sets=[],
            finished=1_800_000_000.5,
        )  # fmt: skip
        os.utime(path, ns=(1_800_000_000_000_000_000 + i, 1_800_000_000_000_000_000 + i))
    assert [r.path.stem for r in _roots(store)] == ["a-first", "b-middle", "c-last"]
    # and in the reverse: the newest written is last, whatever its name
    for i, invocation in enumerate(("a-first", "b-middle", "c-last")[::-1]):
        path = store.roots_dir / f"{invocation}.json"
        os.utime(path, ns=(1_900_000_000_000_000_000 + i, 1_900_000_000_000_000_000 + i))
    assert [r.path.stem for r in _roots(store)] == ["c-last", "b-middle", "a-first"]


@pytest.mark.parametrize("held", ["build", "reader"])
def test_gc_says_when_it_waits_for_a_running_build_or_reader(tmp_path: Path, held: str) -> None:
    store = Store(tmp_path / "store")
    said: list[str] = []
    release = threading.Event()

    def hold() -> None:
        ctx = store.lock() if held == "build" else store.reading()
        with ctx:
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    time.sleep(0.1)

    def on_wait(message: str) -> None:
        said.append(message)
        release.set()

    try:
        collect(store, on_wait=on_wait)
    finally:
        release.set()
        holder.join()
    assert len(said) == 1 and "waiting" in said[0], said
    said.clear()
    collect(store, on_wait=said.append)  # nothing holds the store: no word
    assert said == []
