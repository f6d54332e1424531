"""Parallel blob downloads in ``nvkr pull`` against real CNCF distribution 2.8.

The release set here is shaped like a default one: several large machine images (random bytes
standing in for QCOW2 disks) next to small manifests, provenance and metadata. The large blobs
download side by side (the fault proxy proves it by holding each one until all are in flight),
the layout is byte-identical whatever the number of workers, and any failure among concurrent
downloads (a registry error, a digest mismatch, a manifest failing while blobs are in flight)
leaves DIR as it was, no temp directory and no worker thread behind.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nvkr.delivery.publish import publish_layout
from nvkr.delivery.pull import pull_release_set
from nvkr.errors import IntegrityError, RegistryError
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import LayoutReader
from nvkr.oci.registry import RegistryClient
from tests.helpers.cli import invoke_output
from tests.helpers.machine_sets import IMAGES, make_machine_image_set
from tests.helpers.registry import FaultProxy, Logged, Registry, run_proxy


def images(layout: Path) -> list[str]:
    """The digests of the set's machine-image disks, in walk order."""
    return [
        b.digest for b in LayoutReader(layout).walk(deep=False) if b.media_type == mt.NVKR_QCOW2
    ]


def snapshot(layout: Path) -> dict[str, tuple[int, bytes]]:
    """Every file of a layout: relative path → (mode, bytes)."""
    return {
        str(p.relative_to(layout)): (p.stat().st_mode, p.read_bytes())
        for p in sorted(layout.rglob("*"))
        if p.is_file()
    }


def pull_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("nvkr-pull")]


@pytest.fixture(scope="module")
def machines(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    layout = make_machine_image_set(tmp_path_factory.mktemp("machines"), count=IMAGES)
    repo = "pull/machines"
    report = publish_layout(layout, f"{registry.host}/{repo}", RegistryClient(registry.host))
    disks = images(layout)
    assert len(disks) == IMAGES
    return {"layout": layout, "repo": repo, "digest": report.digest, "images": disks}


def ref_of(host: str, machines: dict[str, Any]) -> str:
    return f"{host}/{machines['repo']}@{machines['digest']}"


def test_workers_1_and_4_write_byte_identical_layouts(registry, machines, tmp_path):
    layouts = {}
    for workers in (1, 4):
        events: list[tuple[str, dict[str, Any]]] = []
        out = tmp_path / f"w{workers}"
        with RegistryClient(registry.host) as client:
            report = pull_release_set(
                ref_of(registry.host, machines),
                out,
                client,
                workers=workers,
                on_event=lambda kind, fields, events=events: events.append((kind, fields)),
            )
        layouts[workers] = snapshot(out)
        fetched = {f["digest"]: f["size"] for kind, f in events if kind == "blob"}
        assert len(fetched) == report.blobs == sum(1 for kind, _ in events if kind == "blob")
        assert sum(fetched.values()) == report.bytes
        assert set(machines["images"]) <= set(fetched)
    assert layouts[1] == layouts[4]
    original = snapshot(machines["layout"])
    assert {k: v[1] for k, v in layouts[4].items()} == {k: v[1] for k, v in original.items()}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w1", "w4"]  # no temp dir left
    assert pull_threads() == []


def test_large_blobs_download_concurrently(registry, machines, tmp_path):
    """Hold the first four disk GETs until all four are in flight: only parallel downloads (the
    default 4 workers) get through."""
    disks = set(machines["images"])
    gate = threading.Barrier(4, timeout=20)
    held: list[str] = []
    lock = threading.Lock()

    def hold(entry: Logged) -> None:
        if entry.method == "GET" and entry.path.rsplit("/", 1)[-1] in disks:
            with lock:  # the proxy's handler threads call this at once
                first = len(held) < 4
                held.append(entry.path)
            if first:
                gate.wait()

    with run_proxy(registry.host) as proxy:
        proxy.hook = hold
        with RegistryClient(proxy.host) as client:
            report = pull_release_set(ref_of(proxy.host, machines), tmp_path / "out", client)
        fetched = [e for e in proxy.requests("GET", "/blobs/") if e.path.split("/")[-1] in disks]
    assert not gate.broken
    assert len(fetched) == IMAGES  # each disk once
    assert report.blobs == len(list((tmp_path / "out" / "blobs" / "sha256").iterdir()))


def _fail_first_disk(proxy: FaultProxy, disks: list[str]) -> None:
    """The first disk asked for is answered 404, once the walk is over (it asks for referrers:
    every disk is in the pool by then); the other disks wait until it was, and a little more:
    the failure happens while they are in flight or queued, and they go on only after it."""
    walked, failed = threading.Event(), threading.Event()

    def hold(entry: Logged) -> None:
        if "/referrers/" in entry.path or "/manifests/sha256-" in entry.path:
            walked.set()
        if entry.method != "GET" or entry.path.rsplit("/", 1)[-1] not in disks:
            return
        if entry.action == "status":
            walked.wait(20)
            failed.set()
        else:
            failed.wait(20)
            time.sleep(0.5)

    proxy.add("status", method="GET", path="|".join(disks), status=404, code="BLOB_UNKNOWN")
    proxy.hook = hold


def test_one_failing_download_among_concurrent_ones_leaves_dir_untouched(
    registry, machines, tmp_path
):
    out = tmp_path / "pulled"
    with RegistryClient(registry.host) as client:
        pull_release_set(ref_of(registry.host, machines), out, client)
    disks = machines["images"]
    for disk in disks:  # else the next pulls reuse them from DIR and download no disk at all
        (out / "blobs" / "sha256" / disk.split(":", 1)[1]).unlink()
    before = snapshot(out)
    with run_proxy(registry.host) as proxy:
        _fail_first_disk(proxy, disks)
        code, text = invoke_output("pull", ref_of(proxy.host, machines), str(out))  # 4 workers
        failing = next(e for e in proxy.log if e.action == "status").path.rsplit("/", 1)[-1]
        asked = {e.path.rsplit("/", 1)[-1] for e in proxy.requests("GET", "/blobs/")}
    assert code == RegistryError.exit_code, text
    # the failing disk and the ones in flight with it were asked for; the queued ones never
    assert failing in asked and len(asked & set(disks)) <= 4 < len(disks)
    assert failing in text and "404" in text
    assert snapshot(out) == before  # the earlier pull's layout, as it was
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pulled"]  # no temp dir
    assert pull_threads() == []

    with run_proxy(registry.host) as proxy:
        _fail_first_disk(proxy, disks)
        with RegistryClient(proxy.host) as client, pytest.raises(RegistryError) as err:
            pull_release_set(ref_of(proxy.host, machines), out, client, workers=2)
        failing = next(e for e in proxy.log if e.action == "status").path.rsplit("/", 1)[-1]
        asked = {e.path.rsplit("/", 1)[-1] for e in proxy.requests("GET", "/blobs/")}
    assert err.value.status == 404 and failing in str(err.value)
    # the failing disk and at most the other worker's were asked for
    assert failing in asked and len(asked & set(disks)) <= 2
    assert snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pulled"]
    assert pull_threads() == []


def test_digest_mismatch_on_one_blob_among_many_exits_3_and_writes_nothing(
    registry, machines, tmp_path
):
    bad = machines["images"][-1]
    path = registry.blob_data(bad)
    saved = path.read_bytes()
    try:
        path.write_bytes(saved[:-1] + bytes([saved[-1] ^ 1]))
        out = tmp_path / "pulled"
        code, text = invoke_output("pull", ref_of(registry.host, machines), str(out))
        assert code == IntegrityError.exit_code == 3, text
        assert bad in text
        assert not out.exists() and list(tmp_path.iterdir()) == []
        with RegistryClient(registry.host) as client, pytest.raises(IntegrityError):
            pull_release_set(ref_of(registry.host, machines), out, client, workers=8)
        assert not out.exists() and list(tmp_path.iterdir()) == []
        assert pull_threads() == []
    finally:
        path.write_bytes(saved)


def test_manifest_failure_while_blobs_download_cleans_up(registry, machines, tmp_path):
    """A manifest that fails after disks went to the pool: the workers are stopped and joined
    before the temp directory goes, so nothing is left behind."""
    disks = machines["images"]
    downloading = threading.Event()

    def hold(entry: Logged) -> None:
        if entry.method == "GET" and entry.path.rsplit("/", 1)[-1] in disks:
            downloading.set()
        elif entry.action == "status":
            downloading.wait(20)  # fail the manifest only once a disk download is under way

    with run_proxy(registry.host) as proxy:
        # read_remote_metadata fetches two manifests; the walk refetches the index, then the
        # metadata manifest, then the artifacts' (each sends its disk to the pool): fail the
        # second artifact's
        proxy.add("status", method="GET", path="/manifests/sha256:", status=404, nth=6, times=0)
        proxy.hook = hold
        out = tmp_path / "pulled"
        with RegistryClient(proxy.host) as client, pytest.raises(RegistryError):
            pull_release_set(ref_of(proxy.host, machines), out, client)
        asked = [e.path.split("/")[-1] for e in proxy.requests("GET", "/blobs/")]
    assert downloading.is_set() and set(asked) & set(disks)  # disks were downloading
    assert not out.exists() and list(tmp_path.iterdir()) == []
    assert pull_threads() == []


def test_workers_below_one_is_refused(registry, machines, tmp_path):
    with RegistryClient(registry.host) as client, pytest.raises(ValueError, match="workers"):
        pull_release_set(ref_of(registry.host, machines), tmp_path / "x", client, workers=0)
    assert list(tmp_path.iterdir()) == []
