"""Writing a layout directory: links vs copies, modes, up-to-date check, atomic swap."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from nvkr.errors import IntegrityError
from nvkr.oci import layoutdir
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import (
    LayoutReader,
    artifact_manifest,
    descriptor,
    image_index,
    index_bytes,
    manifest_bytes,
)


class Source:
    """A directory of blobs named by hex digest (like the store), with a chosen file mode."""

    def __init__(self, root: Path, mode: int) -> None:
        self.root = root
        root.mkdir()
        self.mode = mode
        self.blobs: list[tuple[str, int]] = []
        self.put(mt.EMPTY_JSON)
        binary = self.put(b"binary bytes")
        m = manifest_bytes(
            artifact_manifest(mt.NVKR_BINARY, [descriptor(mt.OCTET_STREAM, binary, 12)])
        )
        self.put(m)
        top = image_index([descriptor(mt.OCI_MANIFEST, m, annotations={mt.ANN_REF_NAME: "x"})])
        self.index_json = index_bytes(top)

    def put(self, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        path = self.path(digest)
        path.write_bytes(data)
        path.chmod(self.mode)
        self.blobs.append((digest, len(data)))
        return digest

    def path(self, digest: str) -> Path:
        return self.root / digest.split(":", 1)[1]


def modes(root: Path) -> dict[str, int]:
    return {
        str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in sorted(root.rglob("*"))
    }


def test_links_read_only_sources(tmp_path: Path) -> None:
    src = Source(tmp_path / "src", 0o444)
    target = tmp_path / "out" / "x"
    assert layoutdir.write_layout(target, src.index_json, src.blobs, src.path) is True
    for digest, _ in src.blobs:
        assert (target / "blobs" / "sha256" / digest[7:]).stat().st_ino == src.path(
            digest
        ).stat().st_ino
    LayoutReader(target).walk()


def test_copies_when_the_source_mode_differs_and_never_chmods_the_source(tmp_path: Path) -> None:
    src = Source(tmp_path / "src", 0o644)
    target = tmp_path / "x"
    layoutdir.write_layout(target, src.index_json, src.blobs, src.path)
    for digest, _ in src.blobs:
        copy = (target / "blobs" / "sha256" / digest[7:]).stat()
        assert copy.st_nlink == 1 and stat.S_IMODE(copy.st_mode) == layoutdir.BLOB_MODE
        assert stat.S_IMODE(src.path(digest).stat().st_mode) == 0o644


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077, 0o277])
def test_modes_do_not_depend_on_the_umask(tmp_path: Path, umask: int) -> None:
    src = Source(tmp_path / "src", 0o444)
    old = os.umask(umask)
    try:
        layoutdir.write_layout(tmp_path / "x", src.index_json, src.blobs, src.path)
    finally:
        os.umask(old)
    got = modes(tmp_path / "x")
    assert got.pop("index.json") == got.pop("oci-layout") == 0o644
    assert got.pop("blobs") == got.pop("blobs/sha256") == 0o755
    assert set(got.values()) == {0o444}


def test_up_to_date_is_left_alone(tmp_path: Path) -> None:
    src = Source(tmp_path / "src", 0o444)
    target = tmp_path / "x"
    layoutdir.write_layout(target, src.index_json, src.blobs, src.path)
    ino = target.stat().st_ino
    assert layoutdir.write_layout(target, src.index_json, src.blobs, src.path) is False
    assert target.stat().st_ino == ino
    assert layoutdir.up_to_date(target, src.index_json, src.blobs)
    assert not layoutdir.up_to_date(target, src.index_json + b" ", src.blobs)
    assert not layoutdir.up_to_date(target, src.index_json, [*src.blobs, ("sha256:" + "0" * 64, 1)])
    assert not layoutdir.up_to_date(tmp_path / "absent", src.index_json, src.blobs)


def test_duplicate_digests_are_one_file(tmp_path: Path) -> None:
    src = Source(tmp_path / "src", 0o444)
    layoutdir.write_layout(tmp_path / "x", src.index_json, src.blobs + src.blobs, src.path)
    assert len(list((tmp_path / "x" / "blobs" / "sha256").iterdir())) == len(src.blobs)


def test_an_incomplete_closure_is_never_exposed(tmp_path: Path) -> None:
    src = Source(tmp_path / "src", 0o444)
    with pytest.raises(IntegrityError, match="is missing"):
        layoutdir.write_layout(tmp_path / "out" / "x", src.index_json, src.blobs[:-1], src.path)
    assert list((tmp_path / "out").iterdir()) == []


def test_missing_or_resized_source(tmp_path: Path) -> None:
    src = Source(tmp_path / "src", 0o444)
    digest, size = src.blobs[1]
    with pytest.raises(IntegrityError, match="expected 13"):
        layoutdir.write_layout(
            tmp_path / "x", src.index_json, [*src.blobs[:1], (digest, size + 1)], src.path
        )
    src.path(digest).unlink()
    with pytest.raises(IntegrityError, match="is missing"):
        layoutdir.write_layout(tmp_path / "x", src.index_json, src.blobs, src.path)
    assert not (tmp_path / "x").exists()


def test_exchange_swaps_two_directories_or_says_it_cannot(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "from-a").touch()
    (b / "from-b").touch()
    if layoutdir._exchange(a, b):
        assert (a / "from-b").exists() and (b / "from-a").exists()
    else:  # kernel or file system without RENAME_EXCHANGE: nothing moved
        assert (a / "from-a").exists() and (b / "from-b").exists()
    with pytest.raises(OSError):
        if not layoutdir._exchange(a, tmp_path / "absent"):
            raise OSError("unsupported")
