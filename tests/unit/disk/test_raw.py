"""Raw disk files (nvkr.disk.raw): a sparse file's digest read from its data alone."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from nvkr.disk import raw

MIB = 1 << 20


def _write(path: Path, size: int, data: dict[int, bytes]) -> None:
    """A sparse file of ``size`` bytes holding ``data`` (offset -> bytes), holes elsewhere."""
    raw.create_sparse(path, size)
    with open(path, "r+b") as f:
        for offset, chunk in data.items():
            os.pwrite(f.fileno(), chunk, offset)


@pytest.mark.parametrize(
    ("size", "data"),
    [
        (0, {}),
        (3 * MIB + 5, {}),  # all hole, not a multiple of the chunk
        (4 * MIB, {0: b"\x01" * 4096}),  # data first, then a hole to the end
        (4 * MIB + 17, {4 * MIB: b"tail" * 4}),  # a hole first, data at the very end
        (9 * MIB, {MIB + 3: b"a" * 70000, 6 * MIB: os.urandom(2 * MIB + 1)}),  # both, unaligned
        (2 * MIB, {0: bytes(2 * MIB)}),  # zeros written as data
        (5 * MIB, {0: os.urandom(5 * MIB)}),  # no hole
    ],
    ids=["empty", "all-hole", "data-first", "data-last", "mixed", "written-zeros", "no-hole"],
)
def test_the_sparse_digest_is_the_digest_of_every_byte(
    tmp_path: Path, size: int, data: dict[int, bytes]
) -> None:
    path = tmp_path / "disk.raw"
    _write(path, size, data)
    assert raw.sha256_sparse(path) == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
