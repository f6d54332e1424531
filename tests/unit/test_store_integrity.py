"""Bytes are verified where they are used: a store blob changed after it was committed is never
built into an artifact nor linked into dist/ (hardening issue, item 1).

The small project below builds a daemonless container image whose one file is a url source from
a loopback server, so a build exercises the whole path a node image takes (source blob -> builder
-> output blobs -> release set assembly -> dist/) in about a second, without root or a toolchain.

The verbs run in this process (:func:`tests.helpers.cli.invoke`: the console script's entry point,
its output and exit codes); the store's warnings reach the result's stderr as a terminal shows them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from nvkr.store import Store
from tests.helpers.cli import invoke
from tests.helpers.recipes import SCRATCH_TOOL, write_scratch_tool_recipe

TOOL = SCRATCH_TOOL


@pytest.fixture
def project(tmp_path, http_dir):
    (http_dir.root / "tool").write_bytes(TOOL)
    proj = tmp_path / "proj"
    write_scratch_tool_recipe(proj, "sealed", http_dir.url, arches="amd64")
    return proj


def _build(proj: Path, store: Path, *args: str):
    if not (proj / "lockfiles" / "sealed.lock.json").exists():
        locked = invoke("lock", "recipes/sealed.yaml", cwd=proj, store=store)
        assert locked.code == 0, locked.stderr
    res = invoke("build", "recipes/sealed.yaml", "--json", *args, cwd=proj, store=store)
    assert res.code == 0, res.stderr
    result = res.json_events()[-1]
    assert result["event"] == "result"
    return res, result


def _flip(path: Path, keep_times: bool = False) -> None:
    """Flip one byte of a (read-only) store blob in place, as a stray write would."""
    st = path.stat()
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(st.st_size // 2)
        byte = f.read(1)
        f.seek(st.st_size // 2)
        f.write(bytes([byte[0] ^ 0x01]))
    os.chmod(path, 0o444)
    if keep_times:  # mtime put back: only the ctime (which no one can set) still tells
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _layout_blobs(dist: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (dist / "blobs" / "sha256").iterdir()}


def _assert_layout_sound(dist: Path) -> None:
    for name, data in _layout_blobs(dist).items():
        assert hashlib.sha256(data).hexdigest() == name, f"dist blob {name} is corrupt"


@pytest.mark.parametrize(
    "keep_times,link",
    [(False, False), (True, False), (True, True)],
    ids=["write", "write-then-utime", "write-utime-then-link"],
)
def test_a_corrupt_source_blob_is_fetched_again_not_built_in(project, tmp_path, keep_times, link):
    store = tmp_path / "store"
    _, first = _build(project, store)
    digest = first["releaseSets"][0]["digest"]
    for record in (store / "actions").glob("*.json"):
        record.unlink()  # every action must run again from its sources
    tool_blob = Store(store).blob_path("sha256:" + hashlib.sha256(TOOL).hexdigest())
    _flip(tool_blob, keep_times=keep_times)
    if link:  # issue 27, item 5: one more hard link changed the link count with the ctime
        os.link(tool_blob, tmp_path / "a-link")
    res, again = _build(project, store)
    assert again["releaseSets"][0]["digest"] == digest
    events = res.json_events()
    corrupt = [e for e in events if e["event"] == "blob-corrupt"]
    assert [e["digest"] for e in corrupt] == ["sha256:" + hashlib.sha256(TOOL).hexdigest()]
    assert any(e["event"] == "source-fetch" and e["source"] == "tool" for e in events)
    assert tool_blob.read_bytes() == TOOL
    _assert_layout_sound(project / "dist" / "sealed")


def test_a_corrupt_source_blob_says_why_it_is_fetched_again(project, tmp_path):
    store = tmp_path / "store"
    _build(project, store)
    for record in (store / "actions").glob("*.json"):
        record.unlink()
    _flip(Store(store).blob_path("sha256:" + hashlib.sha256(TOOL).hexdigest()))
    res = invoke("build", "recipes/sealed.yaml", cwd=project, store=store)
    assert res.code == 0, res.stderr
    line = next(x for x in res.stderr.splitlines() if " is corrupt " in x)
    assert hashlib.sha256(TOOL).hexdigest()[:12] in line and "deleted" in line, line


@pytest.mark.parametrize(
    "keep_times,rm_dist",
    [(False, False), (True, False), (True, True)],
    ids=["write", "write-then-utime", "write-utime-then-rm-dist"],
)
def test_a_noop_build_never_links_a_corrupt_output_into_dist(
    project, tmp_path, keep_times, rm_dist
):
    store = tmp_path / "store"
    _, first = _build(project, store)
    dist = project / "dist" / "sealed"
    good = _layout_blobs(dist)
    layer = max(good, key=lambda name: len(good[name]))  # the image layer holding the tool
    _flip(Store(store).blob_path("sha256:" + layer), keep_times=keep_times)
    if rm_dist:  # issue 27, item 5: the dist/ link removed, so the link count changed too
        shutil.rmtree(dist)
    res, again = _build(project, store)
    assert again["releaseSets"][0]["digest"] == first["releaseSets"][0]["digest"]
    assert again["built"], "the action whose output was corrupt must run again"
    assert any(e["event"] == "blob-corrupt" for e in res.json_events())
    assert _layout_blobs(dist) == good
    _assert_layout_sound(dist)
    # and the rebuilt store is sound again: the next build is a no-op
    _, third = _build(project, store)
    assert third["upToDate"] and not third["built"]


def test_every_blob_is_sealed_after_a_build(project, tmp_path):
    """What a no-op checks is each blob's seal (tests/unit/test_store.py: no hashing then)."""
    store = tmp_path / "store"
    _build(project, store)
    _, again = _build(project, store)
    assert again["upToDate"]
    seals = Store(store).root / "seals" / "sha256"
    assert sorted(p.name for p in seals.iterdir()) == sorted(
        p.name for p in Store(store).blobs_dir.iterdir()
    )


def test_store_verify_finds_what_a_seal_cannot_see_and_repair_refetches(project, tmp_path):
    store = tmp_path / "store"
    _, first = _build(project, store)
    s = Store(store)
    digest = "sha256:" + hashlib.sha256(TOOL).hexdigest()
    path = s.blob_path(digest)
    _flip(path)
    s.seal(digest)  # bit rot: the bytes changed, the seal (size, mtime, ctime) still matches
    ok = invoke("store", "verify", cwd=project, store=store)
    assert ok.code == 3, ok.stdout + ok.stderr
    assert hashlib.sha256(TOOL).hexdigest() in ok.stdout + ok.stderr
    assert path.exists(), "store verify without --repair deletes nothing"
    rep = invoke("store", "verify", "--repair", "--json", cwd=project, store=store)
    assert rep.code == 0, rep.stderr
    report = json.loads(rep.stdout)
    assert report["corrupt"] == [digest] and report["repaired"] is True
    assert report["blobs"] == len(list(s.blobs_dir.iterdir())) + 1
    assert not path.exists()
    for record in (store / "actions").glob("*.json"):
        record.unlink()
    _, again = _build(project, store)
    assert again["releaseSets"][0]["digest"] == first["releaseSets"][0]["digest"]
    assert path.read_bytes() == TOOL
    assert invoke("store", "verify", cwd=project, store=store).code == 0


def test_store_verify_names_the_action_whose_output_is_corrupt(project, tmp_path):
    store = tmp_path / "store"
    _build(project, store)
    records = [json.loads(p.read_bytes()) for p in (store / "actions").glob("*.json")]
    (image,) = [r for r in records if r["builder"] == "container-image"]
    layer = max(image["outputs"], key=lambda o: o["size"])["digest"].split(":")[1]
    s = Store(store)
    _flip(s.blob_path("sha256:" + layer))
    s.seal("sha256:" + layer)
    res = invoke("store", "verify", cwd=project, store=store)
    assert res.code == 3
    (line,) = [x for x in res.stdout.splitlines() if x.strip().startswith("corrupt")]
    assert layer in line and "output of " in line and "(container-image)" in line, line
    report = json.loads(invoke("store", "verify", "--json", cwd=project, store=store).stdout)
    assert any(o.endswith("(container-image)") for o in report["owners"]["sha256:" + layer])
