"""The root file system of a disk image (QCOW2 or raw), for reading without a mount.

``nvkr image ls|cat|diff`` and the disk tests come here with a disk file; :func:`open_root_fs`
reads its first sectors (``qemu-img dd`` for a QCOW2), finds the root partition in the GPT
(:func:`nvkr.disk.gpt.root_entry`: the Discoverable Partitions root type nvkr's layout gives it),
and returns an :class:`~nvkr.disk.ext4read.Ext4Reader` on it. A raw disk is read in place (debugfs
at the partition's offset); a QCOW2's root partition is first converted to a sparse raw file in a
temporary directory (``qemu-img convert`` of a ``raw`` view with the partition's offset and size:
only that partition's data is written, about the used bytes of the file system), removed when the
context ends.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from nvkr.disk.ext4read import Ext4Reader
from nvkr.disk.gpt import GPT_HEAD_SECTORS, GptEntry, read_gpt, root_entry
from nvkr.disk.layout import SECTOR, TYPE_ESP
from nvkr.errors import DiskError, UsageError
from nvkr.run import pinned_env, run

#: The first bytes of a QCOW2 file (QEMU's docs/interop/qcow2.txt, "Header": magic).
QCOW2_MAGIC: Final = b"QFI\xfb"


def disk_format(disk: Path) -> str:
    """``qcow2`` or ``raw``, from the file's first bytes.

    Raises:
        UsageError: ``disk`` is no readable file.
    """
    try:
        with open(disk, "rb") as f:
            magic = f.read(4)
    except IsADirectoryError as e:
        raise UsageError(f"{disk} is a directory, not a disk image") from e
    except OSError as e:
        raise UsageError(f"cannot read disk image {disk}: {e.strerror}") from e
    return "qcow2" if magic == QCOW2_MAGIC else "raw"


def _opt(value: str) -> str:
    """A value for QEMU's ``key=value,...`` option syntax (a comma is written twice)."""
    return value.replace(",", ",,")


def _qcow2_head(disk: Path, tmp: Path) -> bytes:
    head = tmp / "head.raw"
    run(
        ["qemu-img", "dd", "-f", "qcow2", "-O", "raw", f"bs={SECTOR}",
         f"count={GPT_HEAD_SECTORS}", f"if={disk}", f"of={head}"],
        env=pinned_env(),
    )  # fmt: skip
    return head.read_bytes()


@contextlib.contextmanager
def open_root_fs(disk: Path, *, what: str | None = None) -> Iterator[Ext4Reader]:
    """An :class:`Ext4Reader` on the root file system of the disk image ``disk`` (module doc).

    Args:
        what: names the image in errors (default: its path).
    Raises:
        UsageError: ``disk`` is not a readable file.
        DiskError: no GPT, or no ext4 file system in its root partition.
        ToolError: qemu-img or debugfs failed or is missing.
    """
    label = what or str(disk)
    fmt = disk_format(disk)
    if fmt == "raw":
        with open(disk, "rb") as f:
            entry = root_entry(read_gpt(f.read(GPT_HEAD_SECTORS * SECTOR), what=label), what=label)
        yield Ext4Reader(disk, offset=entry.offset, what=f"{label} partition {entry.number}")
        return
    with tempfile.TemporaryDirectory(prefix="nvkr-image-") as name:
        tmp = Path(name)
        entry = root_entry(read_gpt(_qcow2_head(disk, tmp), what=label), what=label)
        info = json.loads(
            run(
                ["qemu-img", "info", "-f", "qcow2", "--output=json", str(disk)], env=pinned_env()
            ).stdout
        )
        if entry.offset + entry.size > int(info.get("virtual-size", 0)):
            raise DiskError(
                f"{label}: partition {entry.number} ends beyond the disk's virtual size "
                f"({info.get('virtual-size')} bytes)"
            )
        raw = tmp / "root.raw"
        view = (
            f"driver=raw,offset={entry.offset},size={entry.size},file.driver=qcow2,"
            f"file.file.driver=file,file.file.filename={_opt(str(disk))}"
        )
        # -W: out-of-order writes (a temporary raw file: only the bytes matter, not the order)
        run(
            ["qemu-img", "convert", "-W", "--image-opts", view, "-O", "raw", str(raw)],
            env=pinned_env(),
        )
        yield Ext4Reader(raw, what=f"{label} partition {entry.number}")


def _partition_raw(disk: Path, entry: GptEntry, out: Path) -> Path:
    """The partition ``entry`` of ``disk`` (QCOW2 or raw) as a raw file ``out``."""
    fmt = disk_format(disk)
    view = (
        f"driver=raw,offset={entry.offset},size={entry.size},file.driver={fmt},"
        + (f"file.file.driver=file,file.file.filename={_opt(str(disk))}" if fmt == "qcow2"
           else f"file.filename={_opt(str(disk))}")
    )  # fmt: skip
    run(["qemu-img", "convert", "-W", "--image-opts", view, "-O", "raw", str(out)],
        env=pinned_env())  # fmt: skip
    return out


def read_esp_files(disk: Path, paths: list[str], *, what: str | None = None) -> dict[str, bytes]:
    """The files ``paths`` (``EFI/BOOT/GRUBX64.EFI``) of the disk image's EFI system partition
    that it holds (mtools, no mount); {} when the disk has no ESP.

    Raises:
        UsageError: ``disk`` is not a readable file; DiskError: no GPT.
    """
    label = what or str(disk)
    with tempfile.TemporaryDirectory(prefix="nvkr-esp-") as name:
        tmp = Path(name)
        if disk_format(disk) == "qcow2":
            head = _qcow2_head(disk, tmp)
        else:
            with open(disk, "rb") as f:
                head = f.read(GPT_HEAD_SECTORS * SECTOR)
        esp = [e for e in read_gpt(head, what=label) if e.type_guid == TYPE_ESP.upper()]
        if not esp:
            return {}
        image = _partition_raw(disk, esp[0], tmp / "esp.fat")
        env = pinned_env({"MTOOLS_SKIP_CHECK": "1", "MTOOLSRC": "/dev/null"}, home=tmp)
        found: dict[str, bytes] = {}
        for n, path in enumerate(paths):
            out = tmp / f"{n}.bin"
            done = run(["mcopy", "-n", "-i", str(image), f"::/{path}", str(out)], env=env,
                       check=False)  # fmt: skip
            if done.returncode == 0 and out.is_file():
                found[path] = out.read_bytes()
        return found


def disk_head(disk: Path) -> bytes:
    """The first sectors of the disk image (QCOW2 or raw) that hold its GPT: the protective MBR,
    the header and the entries (what firmware reads and measures)."""
    if disk_format(disk) == "raw":
        with open(disk, "rb") as f:
            return f.read(GPT_HEAD_SECTORS * SECTOR)
    with tempfile.TemporaryDirectory(prefix="nvkr-head-") as name:
        return _qcow2_head(disk, Path(name))
