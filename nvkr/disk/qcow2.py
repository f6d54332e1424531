"""The raw disk file converted to QCOW2 with ``qemu-img``, with every format option pinned, so
the bytes depend on the raw image (and, compressed, on the compression library) alone, not on
qemu-img's defaults; then checked with ``qemu-img check``. The output appears under its name only
once it is complete.

Compression (the node image's ``compression``; qemu's ``docs/interop/qcow2.txt``, "Header",
"Compressed Clusters Descriptor"): a compressed cluster is one L2 entry with bit 62 set, its data
a deflate or zstd stream at any byte offset. The header's ``compression_type`` field (byte 104,
version 3) says which: 0 zlib, 1 zstd; a non-zero type must come with incompatible feature bit 3
("Compression type bit"), and "an implementation must fail to open an image if an unknown bit is
set". So a zstd image cannot be opened at all by a qemu-img older than 5.1 (qemu's
``qapi/block-core.json``, ``Qcow2CompressionType``, "Since: 5.1") or one built without zstd, as in
older ironic-python-agent ramdisks and provisioning hosts;
a zlib image sets no new bit and opens in every qemu-img that reads QCOW2 v3 (``compat=1.1``).
``zlib`` is the choice for such agents, ``zstd`` is smaller here and several times faster to write.

Why the bytes stay the same: qemu-img compresses each 64 KiB cluster on its own
(``block/qcow2-threads.c``: zlib raw deflate at ``Z_DEFAULT_COMPRESSION`` with a 4 KiB window,
zstd at ``ZSTD_CLEVEL_DEFAULT``; no option sets a level) and places each compressed cluster right
after the one before. That order holds only while writes are in order: ``-W`` (out-of-order
writes) gave another file on every run here, so it is never passed, and ``-m 1`` (one coroutine)
leaves qemu-img nothing to reorder. What remains is the compressor's output for a cluster, which
depends on the library's version: its Debian package (:data:`COMPRESSION_LIBRARY`) enters the
action key of every compressed image, and qemu-utils' already enters every one.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from nvkr.errors import IntegrityError
from nvkr.run import pinned_env, run, tail

#: QCOW2 v3 with qemu 7.2's defaults written out (``compression_type`` is set per image).
BASE_OPTIONS: Final = (
    "compat=1.1,cluster_size=65536,refcount_bits=16,lazy_refcounts=off,"
    "extended_l2=off,preallocation=off"
)

#: The uncompressed image's options, as they always were (an uncompressed image's header says
#: zlib, type 0: the field is written as zero).
QCOW2_OPTIONS: Final = f"{BASE_OPTIONS},compression_type=zlib"

#: What the node image's ``compression`` may say.
Compression = Literal["none", "zlib", "zstd"]
COMPRESSIONS: Final[tuple[Compression, ...]] = ("none", "zlib", "zstd")

#: The Debian package of the library qemu-img compresses with, per compression type (what
#: ``ldd /usr/bin/qemu-img`` shows: libz.so.1, libzstd.so.1).
COMPRESSION_LIBRARY: Final = {"zlib": "zlib1g", "zstd": "libzstd1"}

#: The level qemu-img compresses at (it has no option for it): the library's default.
COMPRESSION_LEVEL: Final = {"zlib": "Z_DEFAULT_COMPRESSION", "zstd": "ZSTD_CLEVEL_DEFAULT"}

#: qemu-img convert's coroutines when compressing (one: nothing runs out of order).
COROUTINES: Final = 1


@dataclass(frozen=True)
class Qcow2Result:
    """What :func:`convert` made and ``qemu-img check``/``info`` saw in it.

    Attributes:
        size: the QCOW2 file's size in bytes.
        virtual_size: the virtual disk size in bytes (the raw file's).
        compression: ``none``, ``zlib`` or ``zstd`` (as asked, and as the header says).
        compressed_clusters: clusters stored compressed (0 when uncompressed).
        allocated_clusters: clusters holding data (compressed or not).
    """

    size: int
    virtual_size: int
    compression: Compression
    compressed_clusters: int
    allocated_clusters: int


def convert_argv(raw: Path, out: Path, compression: Compression, *, meter: bool) -> list[str]:
    """The ``qemu-img convert`` command line for ``compression`` (``-p`` with ``meter``; it
    changes no byte). Uncompressed: the options every image had before compression existed."""
    argv = ["qemu-img", "convert", *(["-p"] if meter else []), "-f", "raw", "-O", "qcow2"]
    if compression == "none":
        return [*argv, "-o", convert_options(compression), str(raw), str(out)]
    return [
        *argv, "-c", "-m", str(COROUTINES), "-o", convert_options(compression),
        str(raw), str(out),
    ]  # fmt: skip


def convert_options(compression: Compression) -> str:
    """The QCOW2 format options (``qemu-img convert -o``) of an image of ``compression``."""
    if compression == "none":
        return QCOW2_OPTIONS
    return f"{BASE_OPTIONS},compression_type={compression}"


def convert(
    raw: Path,
    out: Path,
    *,
    compression: Compression = "none",
    log_file: Path | None = None,
    on_line: Callable[[str], bool] | None = None,
) -> Qcow2Result:
    """Convert the raw disk ``raw`` into the QCOW2 file ``out``, compressed with
    ``compression`` (see the module docstring).

    Written to a temporary name in ``out``'s directory, checked, then renamed over ``out``.
    With ``on_line`` (and ``log_file``) qemu-img runs with ``-p`` and its output goes through
    it (:func:`nvkr.monitor.tools.qemu_img_lines` reads the percentage); ``-p`` changes no byte
    of the image.

    Raises:
        IntegrityError: ``qemu-img check`` finds the new image corrupt or leaking clusters, its
            virtual size differs from the raw file's size, or its header names another
            compression type than asked for.
        ToolError: qemu-img failed or is missing (Debian package qemu-utils).
    """
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression {compression!r} is not one of {', '.join(COMPRESSIONS)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    env = pinned_env()
    try:
        meter = on_line is not None and log_file is not None
        run(
            convert_argv(raw, tmp, compression, meter=meter),
            env=env,
            log_file=log_file,
            on_line=on_line,
        )
        check = run(
            ["qemu-img", "check", "-f", "qcow2", "--output=json", str(tmp)], env=env, check=False
        )
        if check.returncode != 0:
            raise IntegrityError(
                f"qemu-img check found the new image for {out} damaged "
                f"(exit {check.returncode}):\n"
                + tail((check.stdout + check.stderr).decode(errors="replace"))
            )
        checked = json.loads(check.stdout)
        info = json.loads(
            run(["qemu-img", "info", "-f", "qcow2", "--output=json", str(tmp)], env=env).stdout
        )
        if info.get("virtual-size") != raw.stat().st_size:
            raise IntegrityError(
                f"the QCOW2 for {out} has virtual size {info.get('virtual-size')}, "
                f"the raw disk {raw.stat().st_size} bytes"
            )
        header_type = (info.get("format-specific") or {}).get("data", {}).get("compression-type")
        if header_type != ("zlib" if compression == "none" else compression):
            raise IntegrityError(
                f"the QCOW2 for {out} has compression type {header_type!r} in its header, "
                f"{compression} was asked for"
            )
        compressed = int(checked.get("compressed-clusters", 0))
        if compression == "none" and compressed:
            raise IntegrityError(f"the uncompressed QCOW2 for {out} has compressed clusters")
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    return Qcow2Result(
        size=out.stat().st_size,
        virtual_size=int(info["virtual-size"]),
        compression=compression,
        compressed_clusters=compressed,
        allocated_clusters=int(checked.get("allocated-clusters", 0)),
    )
