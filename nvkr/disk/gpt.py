"""The GUID partition table of a raw disk file, written by ``sfdisk`` (no loop device, no kernel).

sfdisk gets a complete script: the disk GUID, ``first-lba``, and for every partition its start,
size, type, unique GUID and name, so nothing is left to sfdisk's defaults or to chance (UEFI spec
2.10, 5.3 "GUID Partition Table (GPT) Disk Layout": protective MBR in LBA 0, header in LBA 1, the
128-entry array after it, the backup array and header in the last 33 sectors). The table is read
back with ``sfdisk --json`` and compared, so a silently "aligned" partition is an error.

:func:`read_gpt` parses a table from the disk's first sectors alone (``nvkr image`` reads them out
of a QCOW2 with ``qemu-img dd``, where sfdisk would want the whole disk for the backup table).
"""

from __future__ import annotations

import json
import struct
import uuid
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nvkr.disk.layout import ALIGN, SECTOR, TYPE_ROOT, DiskLayout, PlacedPartition
from nvkr.errors import DiskError
from nvkr.run import pinned_env, run


def sfdisk_script(layout: DiskLayout, placed: Sequence[PlacedPartition]) -> str:
    """The sfdisk script (util-linux sfdisk(8), "Input formats") for ``placed`` partitions."""
    lines = [
        "label: gpt",
        f"label-id: {layout.disk_guid.upper()}",
        "unit: sectors",
        f"first-lba: {ALIGN // SECTOR}",
        f"sector-size: {SECTOR}",
        "",
    ]
    for pp in placed:
        p = pp.partition
        if '"' in p.name or "\n" in p.name:
            raise DiskError(f"GPT partition name {p.name!r} cannot be written by sfdisk")
        lines.append(
            f"{p.number} : start={pp.start}, size={pp.sectors}, type={p.type_guid}, "
            f'uuid={p.guid.upper()}, name="{p.name}"'
        )
    return "\n".join(lines) + "\n"


def write_gpt(
    raw: Path,
    layout: DiskLayout,
    placed: Sequence[PlacedPartition],
    *,
    log_file: Path | None = None,
) -> bytes:
    """Write the protective MBR and both GPTs of ``layout`` into the raw disk file ``raw``.

    ``raw`` must already have its final size. Returns the 512-byte protective MBR as written (the
    BIOS boot code keeps its disk signature and partition table, grub setup.c style).

    Raises:
        DiskError: sfdisk's table differs from the one asked for.
        ToolError: sfdisk failed or is missing.
    """
    script = sfdisk_script(layout, placed)
    env = pinned_env()
    run(
        ["sfdisk", "--no-reread", "--no-tell-kernel", "--wipe", "never", str(raw)],
        env=env,
        input=script.encode(),
        log_file=log_file,
    )
    got = json.loads(run(["sfdisk", "--json", str(raw)], env=env).stdout)["partitiontable"]
    want = [
        (pp.partition.number, pp.start, pp.sectors, pp.partition.type_guid.upper(),
         pp.partition.guid.upper(), pp.partition.name)
        for pp in placed
    ]  # fmt: skip
    have = [
        (n, e["start"], e["size"], e["type"].upper(), e["uuid"].upper(), e.get("name", ""))
        for n, e in enumerate(got.get("partitions", []), start=1)
    ]  # fmt: skip
    if got.get("id", "").upper() != layout.disk_guid.upper() or have != want:
        raise DiskError(
            f"sfdisk wrote another partition table into {raw} than asked for",
            hint=f"asked: {want}; written: {have} (disk GUID {got.get('id')})",
        )
    with open(raw, "rb") as f:
        return f.read(SECTOR)


#: Sectors :func:`read_gpt` needs: the protective MBR, the header and a 128-entry array.
GPT_HEAD_SECTORS = 2 + 32


@dataclass(frozen=True)
class GptEntry:
    """One used entry of a GPT: ``number`` (1-based), ``type_guid`` and ``guid`` (upper case),
    ``name``, and ``start``/``sectors`` in 512-byte sectors."""

    number: int
    type_guid: str
    guid: str
    name: str
    start: int
    sectors: int

    @property
    def offset(self) -> int:
        """Byte offset of the partition on the disk."""
        return self.start * SECTOR

    @property
    def size(self) -> int:
        """Length of the partition in bytes."""
        return self.sectors * SECTOR


def read_gpt(head: bytes, *, what: str = "the disk") -> list[GptEntry]:
    """The used partition entries of the primary GPT in ``head`` (the disk's first bytes: at
    least the header's LBA 1 and its entry array, :data:`GPT_HEAD_SECTORS` sectors for the
    usual 128 entries), in table order. Both CRC32s are checked (UEFI spec 2.10, 5.3.2 "GPT
    Header", 5.3.3 "GPT Partition Entry Array").

    Raises:
        DiskError: no GPT signature, a CRC mismatch, or an entry array beyond ``head`` (``what``
            names the disk in the message).
    """
    header = head[SECTOR : 2 * SECTOR]
    if len(header) < 92 or header[:8] != b"EFI PART":
        raise DiskError(
            f"{what} has no GUID partition table (no 'EFI PART' signature in LBA 1)",
            hint="nvkr reads machine images with a GPT, as the node-image builder writes them",
        )
    size, crc, entries_lba, count, entry_size, entries_crc = _header_fields(header)
    check = bytearray(header[:size])
    check[16:20] = b"\0\0\0\0"
    if size < 92 or size > SECTOR or zlib.crc32(check) != crc:
        raise DiskError(f"{what}: the GPT header's CRC32 does not match (a damaged table)")
    start, length = entries_lba * SECTOR, count * entry_size
    array = head[start : start + length]
    if entry_size < 128 or len(array) < length:
        raise DiskError(f"{what}: the GPT entry array ({count} x {entry_size} bytes) is unreadable")
    if zlib.crc32(array) != entries_crc:
        raise DiskError(f"{what}: the GPT entry array's CRC32 does not match (a damaged table)")
    found = []
    for i in range(count):
        e = array[i * entry_size : (i + 1) * entry_size]
        if e[:16] == bytes(16):
            continue
        first, last = struct.unpack_from("<QQ", e, 32)
        found.append(
            GptEntry(
                number=i + 1,
                type_guid=str(uuid.UUID(bytes_le=e[:16])).upper(),
                guid=str(uuid.UUID(bytes_le=e[16:32])).upper(),
                name=e[56:128].decode("utf-16-le", errors="replace").split("\0", 1)[0],
                start=first,
                sectors=last - first + 1,
            )
        )
    return found


def _header_fields(header: bytes) -> tuple[int, int, int, int, int, int]:
    """``(header size, header CRC32, entry array LBA, entry count, entry size, array CRC32)``."""
    size, crc = struct.unpack_from("<II", header, 12)
    entries_lba, count, entry_size, entries_crc = struct.unpack_from("<QIII", header, 72)
    return size, crc, entries_lba, count, entry_size, entries_crc


def root_entry(entries: Sequence[GptEntry], *, what: str = "the disk") -> GptEntry:
    """The root file system's entry: the one with a Discoverable Partitions root type (amd64,
    arm64; :data:`nvkr.disk.layout.TYPE_ROOT`), else the last one (nvkr's layout puts root last).

    Raises:
        DiskError: the table is empty.
    """
    roots = {t.upper() for t in TYPE_ROOT.values()}
    typed = [e for e in entries if e.type_guid in roots]
    if typed:
        return typed[-1]
    if not entries:
        raise DiskError(f"{what}: the GPT lists no partition")
    return entries[-1]
