"""The store: verified writes, nothing partial left behind, the action cache."""

from __future__ import annotations

import hashlib
import os

import pytest

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
    result = {"key": key, "outputs": [{"name": "o", "digest": info.digest, "size": 3}]}
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
