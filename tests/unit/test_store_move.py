"""An action's output moved into the store, not copied (nvkr/store_move.py): what a copy into the
store guarantees holds for a move, and what cannot be moved is copied and left alone."""

from __future__ import annotations

import hashlib
import os
import signal
import stat
from pathlib import Path

import pytest

from nvkr.errors import Interrupted
from nvkr.run import request_stop, resume
from nvkr.store import Store
from nvkr.store_move import move_file

DATA = b"a node image, in miniature\n" * 50_000  # more than one read


def _output(store: Store, name: str = "out.qcow2", data: bytes = DATA) -> Path:
    """A file as a builder leaves it: in a work dir under the store's tmp/."""
    work = store.tmp_dir / "act-0123456789ab-x"
    work.mkdir(parents=True, exist_ok=True)
    path = work / name
    path.write_bytes(data)
    return path


def test_an_output_is_renamed_into_the_store_hashed_sealed_and_read_only(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    path = _output(store)
    inode = os.stat(path).st_ino
    info = move_file(store, path, what="output 'disk'")
    digest = "sha256:" + hashlib.sha256(DATA).hexdigest()
    assert (info.digest, info.size, info.digests) == (digest, len(DATA), {"sha256": digest})
    assert not path.exists(), "moved, not copied"
    blob = store.blob_path(digest)
    assert os.stat(blob).st_ino == inode, "the same file, renamed"
    assert stat.S_IMODE(os.stat(blob).st_mode) == 0o444
    assert blob.read_bytes() == DATA
    assert store.has_blob(digest) and store.checked_path(digest) == blob  # its seal holds


def test_an_intact_blob_of_the_same_bytes_is_kept_and_the_output_deleted(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    first = move_file(store, _output(store, "a"))
    kept = os.stat(store.blob_path(first.digest)).st_ino
    path = _output(store, "b")
    assert move_file(store, path).digest == first.digest
    assert not path.exists()
    assert os.stat(store.blob_path(first.digest)).st_ino == kept


def test_a_corrupt_blob_of_the_same_digest_is_replaced(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    digest = move_file(store, _output(store, "a")).digest
    blob = store.blob_path(digest)
    blob.chmod(0o644)
    blob.write_bytes(b"rot")
    path = _output(store, "b")
    move_file(store, path)
    assert not path.exists() and blob.read_bytes() == DATA and store.has_blob(digest)


def test_a_file_with_another_hard_link_is_copied_and_left_as_it_was(tmp_path: Path) -> None:
    """Renaming it would make the other name a read-only blob too."""
    store = Store(tmp_path / "store")
    path = _output(store)
    other = path.with_name("other")
    os.link(path, other)
    info = move_file(store, path)
    assert path.read_bytes() == other.read_bytes() == DATA
    assert stat.S_IMODE(os.stat(path).st_mode) != 0o444, "the file's own mode is untouched"
    blob = store.blob_path(info.digest)
    assert os.stat(blob).st_ino != os.stat(path).st_ino and blob.read_bytes() == DATA


@pytest.mark.skipif(
    not Path("/dev/shm").is_dir() or os.stat("/dev/shm").st_dev == os.stat("/tmp").st_dev,
    reason="no second file system at /dev/shm",
)
def test_a_file_on_another_file_system_is_copied_and_left_as_it_was(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    path = Path("/dev/shm") / f"nvkr-test-move-{os.getpid()}"
    path.write_bytes(DATA)
    try:
        info = move_file(store, path)
        assert path.read_bytes() == DATA
        assert store.blob_path(info.digest).read_bytes() == DATA
    finally:
        path.unlink()


def test_a_stop_request_leaves_the_output_where_it_was(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    path = _output(store)
    request_stop(signal.SIGTERM)
    try:
        with pytest.raises(Interrupted, match="output 'disk' not stored"):
            move_file(store, path, what="output 'disk'")
    finally:
        resume()
    assert path.read_bytes() == DATA
    assert not any(store.blobs_dir.iterdir())
