"""The store: verified writes, nothing partial left behind, the action cache."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from nvkr.action import ActionOutput, ActionResult
from nvkr.errors import ChecksumError, IntegrityError
from nvkr.store import Store


def _listing(store: Store) -> list[str]:
    return sorted(
        str(p.relative_to(store.root))
        for p in store.root.rglob("*")
        if p.is_file() and p.name != "lock"
    )


def test_add_bytes_is_content_addressed(tmp_path):
    store = Store(tmp_path / "s")
    info = store.add_bytes(b"hello")
    assert info.digest == "sha256:" + hashlib.sha256(b"hello").hexdigest()
    assert info.size == 5
    assert store.read_blob(info.digest) == b"hello"
    assert store.add_bytes(b"hello") == info
    assert not os.listdir(store.tmp_dir)


def test_writer_checks_digest_and_leaves_nothing(tmp_path):
    store = Store(tmp_path / "s")
    before = _listing(store)
    wrong = "sha256:" + "0" * 64
    with (
        pytest.raises(ChecksumError) as e,
        store.writer(expected={"sha256": wrong}, what="source 'x'", url="http://h/x") as w,
    ):
        w.write(b"payload")
        w.commit()
    assert e.value.exit_code == 3
    assert "http://h/x" in e.value.message and wrong in e.value.message
    assert "sha256:" + hashlib.sha256(b"payload").hexdigest() in e.value.message
    assert _listing(store) == before


def test_writer_checks_size_and_sha512(tmp_path):
    store = Store(tmp_path / "s")
    with (
        pytest.raises(ChecksumError, match="expected 10 bytes, got 3"),
        store.writer(expected_size=10) as w,
    ):
        w.write(b"abc")
        w.commit()
    sha512 = "sha512:" + hashlib.sha512(b"abc").hexdigest()
    with store.writer(expected={"sha512": sha512}, expected_size=3) as w:
        w.write(b"abc")
        info = w.commit()
    assert info.digests["sha512"] == sha512
    assert not os.listdir(store.tmp_dir)


def test_exception_mid_write_leaves_nothing(tmp_path):
    store = Store(tmp_path / "s")
    with pytest.raises(RuntimeError), store.writer() as w:
        w.write(b"partial")
        raise RuntimeError("connection dropped")
    assert not os.listdir(store.tmp_dir)
    assert not os.listdir(store.blobs_dir)


def test_action_cache_round_trip_and_missing_blob(tmp_path):
    store = Store(tmp_path / "s")
    info = store.add_bytes(b"out")
    key = "sha256:" + "a" * 64
    assert store.get_action(key) is None
    result = ActionResult(
        key=key,
        builder="b",
        name="n",
        outputs=(ActionOutput("o", info.digest, 3, "text/plain", "primary"),),
        metadata={},
    )
    store.put_action(key, result)
    assert store.get_action(key) == result
    os.chmod(store.blob_path(info.digest), 0o644)
    store.blob_path(info.digest).unlink()
    assert store.get_action(key) is None, "an entry whose output blob is gone is a cache miss"


def test_verify_blob_detects_corruption(tmp_path):
    store = Store(tmp_path / "s")
    info = store.add_bytes(b"data")
    store.verify_blob(info.digest)
    path = store.blob_path(info.digest)
    os.chmod(path, 0o644)
    path.write_bytes(b"dat4")
    with pytest.raises(IntegrityError, match="corrupt"):
        store.verify_blob(info.digest)


def _no_hashing(monkeypatch, store):
    def refuse(digest):
        raise AssertionError(f"{digest} was hashed in full")

    monkeypatch.setattr(store, "hash_blob", refuse)


def test_a_sealed_blob_is_checked_without_hashing(tmp_path, monkeypatch):
    store = Store(tmp_path / "s")
    info = store.add_bytes(b"sealed" * 1000)
    assert (store.seals_dir / info.digest.split(":")[1]).is_file()
    _no_hashing(monkeypatch, store)
    assert store.has_blob(info.digest)
    assert store.checked_path(info.digest) == store.blob_path(info.digest)
    # the links nvkr makes and removes itself (dist/, a mirror) are sealed as they are made
    with store.linking([info.digest]):
        os.link(store.blob_path(info.digest), tmp_path / "linked")
    assert store.has_blob(info.digest)
    with store.linking([info.digest]):
        (tmp_path / "linked").unlink()
    assert store.has_blob(info.digest)


def test_a_foreign_link_is_hashed_once_then_sealed(tmp_path, monkeypatch):
    """A link nvkr did not make changes the ctime like a write with its mtime set back: only
    a full hash tells them apart (issue 27, item 5)."""
    store = Store(tmp_path / "s")
    info = store.add_bytes(b"linked by someone else")
    os.link(store.blob_path(info.digest), tmp_path / "linked")
    calls = []
    real = store.hash_blob
    monkeypatch.setattr(store, "hash_blob", lambda d: calls.append(d) or real(d))
    assert store.has_blob(info.digest) and store.has_blob(info.digest)
    assert calls == [info.digest]


def test_a_blob_without_a_seal_is_hashed_once_then_sealed(tmp_path, monkeypatch):
    store = Store(tmp_path / "s")
    info = store.add_bytes(b"from an older nvkr")
    (store.seals_dir / info.digest.split(":")[1]).unlink()
    calls = []
    real = store.hash_blob
    monkeypatch.setattr(store, "hash_blob", lambda d: calls.append(d) or real(d))
    assert store.has_blob(info.digest) and store.has_blob(info.digest)
    assert calls == [info.digest]


@pytest.mark.parametrize("change", ["chmod", "touch"])
def test_a_metadata_change_is_hashed_and_an_intact_blob_kept(tmp_path, change):
    store = Store(tmp_path / "s")
    info = store.add_bytes(b"kept")
    path = store.blob_path(info.digest)
    if change == "chmod":
        os.chmod(path, 0o444)  # same mode, but ctime moves
        os.chmod(path, 0o644)
        os.chmod(path, 0o444)
    else:
        os.utime(path, (1, 1))
    notices = []
    store.notice = lambda d, r: notices.append(d)
    assert store.has_blob(info.digest) and notices == []


@pytest.mark.parametrize("utime_back", [False, True])
def test_a_write_after_commit_is_caught_deleted_and_reported(tmp_path, utime_back):
    store = Store(tmp_path / "s")
    info = store.add_bytes(b"original bytes")
    path = store.blob_path(info.digest)
    st = path.stat()
    os.chmod(path, 0o644)
    path.write_bytes(b"tampered bytes")
    os.chmod(path, 0o444)
    if utime_back:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    notices = []
    store.notice = lambda d, r: notices.append((d, r))
    with pytest.raises(IntegrityError, match="corrupt"):
        store.checked_path(info.digest)
    assert not path.exists() and notices[0][0] == info.digest
    assert "written after it was stored" in notices[0][1]
    assert not store.has_blob(info.digest) and len(notices) == 1
    assert store.add_bytes(b"original bytes") == info and store.has_blob(info.digest)


def _write_in_place_keeping_mtime(path) -> None:
    """Change a blob's bytes (same size) and set its mtime back: only the ctime still tells."""
    st = path.stat()
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.write(b"T")
    os.chmod(path, 0o444)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("links", ["added", "removed"])
def test_a_write_hidden_by_a_link_count_change_is_caught(tmp_path, links):
    """Issue 27, item 5: a write in place, its mtime restored, and one more (or one fewer) hard
    link passed the seal, whose rule accepted a ctime change when the link count changed."""
    store = Store(tmp_path / "s")
    info = store.add_bytes(b"original bytes")
    path = store.blob_path(info.digest)
    other = tmp_path / "dist-link"
    if links == "removed":  # e.g. a dist/ layout linked it, and the seal was taken with that link
        os.link(path, other)
        store.seal(info.digest)
    _write_in_place_keeping_mtime(path)
    if links == "added":
        os.link(path, other)
    else:
        other.unlink()
    notices = []
    store.notice = lambda d, r: notices.append((d, r))
    with pytest.raises(IntegrityError, match="corrupt"):
        store.checked_path(info.digest)
    assert [d for d, _ in notices] == [info.digest]
    assert "written after it was stored" in notices[0][1]


def test_nvkr_relinking_a_blob_never_seals_a_write_it_did_not_make(tmp_path):
    """nvkr takes the ctime of its own links into the seal; a write before the link is not."""
    store = Store(tmp_path / "s")
    info = store.add_bytes(b"original bytes")
    path = store.blob_path(info.digest)
    _write_in_place_keeping_mtime(path)
    with store.linking([info.digest]):  # as materialize or mirror export link it
        os.link(path, tmp_path / "dist-link")
    store.notice = lambda d, r: None
    with pytest.raises(IntegrityError, match="corrupt"):
        store.checked_path(info.digest)


def test_committing_over_a_corrupt_blob_replaces_it(tmp_path):
    store = Store(tmp_path / "s")
    info = store.add_bytes(b"payload")
    path = store.blob_path(info.digest)
    os.chmod(path, 0o644)
    path.write_bytes(b"paYload")
    store.notice = lambda d, r: None
    assert store.add_bytes(b"payload") == info
    assert path.read_bytes() == b"payload"


def test_read_blob_hashes_what_it_reads(tmp_path):
    store = Store(tmp_path / "s")
    info = store.add_bytes(b"manifest")
    path = store.blob_path(info.digest)
    os.chmod(path, 0o644)
    path.write_bytes(b"manifesT")
    store.seal(info.digest)  # a seal cannot see it; a full read does
    store.notice = lambda d, r: None
    with pytest.raises(IntegrityError, match="corrupt"):
        store.read_blob(info.digest)
    assert not path.exists()


# -- a verb that waits for the store says so (found by the fresh-user trial) -------------------
@pytest.mark.parametrize(
    ("held", "wanted", "says"),
    [
        ("lock", "lock", "a running build"),  # a second build sat silent behind the first
        ("reading", "gc", "reading this store"),  # gc behind the readers
        ("gc", "reading", "store gc"),  # a reader (build, plan, pull...) behind a running gc
    ],
)
def test_a_verb_that_waits_for_the_store_says_what_it_waits_for(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, held: str, wanted: str, says: str
) -> None:
    import logging
    import threading

    store = Store(tmp_path / "store")
    holding, release = threading.Event(), threading.Event()

    def take(what: str) -> Any:
        if what == "lock":
            return store.lock()
        return store.reading(exclusive=what == "gc")

    def hold() -> None:
        with take(held):
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(10)
    timer = threading.Timer(0.3, release.set)
    timer.start()
    try:
        with caplog.at_level(logging.INFO, logger="nvkr.store"), take(wanted):
            pass
    finally:
        release.set()
        holder.join()
        timer.cancel()
    said = [r.getMessage() for r in caplog.records if "waiting for" in r.getMessage()]
    assert len(said) == 1 and says in said[0], caplog.records
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="nvkr.store"), take(wanted):
        pass  # nothing holds the store: no word
    assert not [r for r in caplog.records if "waiting for" in r.getMessage()]
