"""qemu-img convert as nvkr runs it (a real qemu-img): the uncompressed command line of every
image built before compression existed, and compressed QCOW2s that come out the same in another
directory, that ``qemu-img check`` and ``info`` show compressed, and that read back as the raw
disk."""

from __future__ import annotations

import hashlib
import json
import subprocess
import typing
from pathlib import Path

import pytest

from nvkr.builders.node_image.artifact import NodeImageArtifact
from nvkr.builders.node_image.params import Compression as ParamsCompression
from nvkr.disk import qcow2
from tests.helpers.disk import needs_tools

pytestmark = [needs_tools]
MIB = 1 << 20


def _raw(path: Path) -> Path:
    """A raw disk of text-like data (compressible), random data (not), and a hole."""
    block = b"".join(b"line %06d of a root file system image\n" % i for i in range(2000))
    data = (block * (2 * MIB // len(block) + 1))[: 2 * MIB]
    rnd = b"".join(hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(MIB // 32))
    path.write_bytes(data + rnd + bytes(3 * MIB) + data[:MIB])
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _qemu_json(*args: str) -> dict[str, typing.Any]:
    out = subprocess.run(["qemu-img", *args, "--output=json"], capture_output=True, check=True)
    result: dict[str, typing.Any] = json.loads(out.stdout)
    return result


def test_the_compression_values_agree_everywhere() -> None:
    """The recipe field, the action's params and the disk code accept the same three values."""
    field = NodeImageArtifact.model_fields["compression"].annotation
    assert typing.get_args(field) == qcow2.COMPRESSIONS
    assert typing.get_args(ParamsCompression) == qcow2.COMPRESSIONS
    assert set(qcow2.COMPRESSION_LIBRARY) == set(qcow2.COMPRESSION_LEVEL) == {"zlib", "zstd"}


def test_uncompressed_images_keep_their_command_line(tmp_path: Path) -> None:
    """An uncompressed image is converted exactly as before compression existed (its bytes, and
    so the default recipe's release set, stay the same): no -c, no -m, the same options."""
    argv = qcow2.convert_argv(tmp_path / "d.raw", tmp_path / "d.qcow2", "none", meter=False)
    assert argv == [
        "qemu-img", "convert", "-f", "raw", "-O", "qcow2", "-o",
        "compat=1.1,cluster_size=65536,refcount_bits=16,lazy_refcounts=off,extended_l2=off,"
        "preallocation=off,compression_type=zlib",
        str(tmp_path / "d.raw"), str(tmp_path / "d.qcow2"),
    ]  # fmt: skip
    zstd = qcow2.convert_argv(tmp_path / "d.raw", tmp_path / "d.qcow2", "zstd", meter=True)
    assert zstd[:4] == ["qemu-img", "convert", "-p", "-f"]
    assert zstd[zstd.index("-c") :][:3] == ["-c", "-m", "1"], "one coroutine"
    assert "-W" not in zstd, "out-of-order writes reorder compressed clusters"
    assert zstd[zstd.index("-o") + 1].endswith(",preallocation=off,compression_type=zstd")


@pytest.mark.parametrize("compression", ["zlib", "zstd"])
def test_a_compressed_qcow2_is_the_same_in_another_directory(
    tmp_path: Path, compression: qcow2.Compression
) -> None:
    raw = _raw(tmp_path / "disk.raw")
    a = qcow2.convert(raw, tmp_path / "a" / "disk.qcow2", compression=compression)
    b = qcow2.convert(raw, tmp_path / "second-with-a-longer-name" / "disk.qcow2",
                      compression=compression)  # fmt: skip
    plain = qcow2.convert(raw, tmp_path / "plain.qcow2")
    a_path, b_path = (
        tmp_path / "a" / "disk.qcow2",
        tmp_path / "second-with-a-longer-name" / "disk.qcow2",
    )
    assert _sha(a_path) == _sha(b_path)
    assert a == b and a.size == a_path.stat().st_size
    assert a.compression == compression and a.virtual_size == raw.stat().st_size
    assert a.compressed_clusters > 0 and a.compressed_clusters <= a.allocated_clusters
    assert a.size < plain.size, "compression made it smaller"
    assert plain.compression == "none" and plain.compressed_clusters == 0
    checked = _qemu_json("check", str(a_path))
    assert checked["check-errors"] == 0 and checked["compressed-clusters"] == a.compressed_clusters
    info = _qemu_json("info", str(a_path))
    assert info["format-specific"]["data"]["compression-type"] == compression
    # the spec's header: compression_type at byte 104 (0 zlib, 1 zstd) with incompatible
    # feature bit 3 set for zstd only
    header = a_path.read_bytes()[:112]
    incompatible = int.from_bytes(header[72:80], "big")
    assert header[104] == (1 if compression == "zstd" else 0)
    assert bool(incompatible & 0b1000) == (compression == "zstd")
    back = tmp_path / "back.raw"
    subprocess.run(["qemu-img", "convert", "-f", "qcow2", "-O", "raw", str(a_path), str(back)],
                   check=True)  # fmt: skip
    assert _sha(back) == _sha(raw)


def test_an_unknown_compression_is_refused_before_qemu_img_runs(tmp_path: Path) -> None:
    raw = _raw(tmp_path / "disk.raw")
    with pytest.raises(ValueError, match="compression 'gzip' is not one of none, zlib, zstd"):
        qcow2.convert(raw, tmp_path / "x.qcow2", compression="gzip")  # type: ignore[arg-type]
    assert not list(tmp_path.glob("*.qcow2")) and not list(tmp_path.glob(".*tmp"))
