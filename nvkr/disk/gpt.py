"""The GUID partition table of a raw disk file, written by ``sfdisk`` (no loop device, no kernel).

sfdisk gets a complete script: the disk GUID, ``first-lba``, and for every partition its start,
size, type, unique GUID and name, so nothing is left to sfdisk's defaults or to chance (UEFI spec
2.10, 5.3 "GUID Partition Table (GPT) Disk Layout": protective MBR in LBA 0, header in LBA 1, the
128-entry array after it, the backup array and header in the last 33 sectors). The table is read
back with ``sfdisk --json`` and compared, so a silently "aligned" partition is an error.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from nvkr.disk.layout import ALIGN, SECTOR, DiskLayout, PlacedPartition
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
