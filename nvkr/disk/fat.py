"""The EFI system partition: a FAT32 image made by ``mkfs.fat`` and filled by ``mcopy``.

``mkfs.fat --invariant`` writes no time-dependent or random bytes when given the volume id
(``-i``, derived from the action key); mtools stamps the directories it creates with
``SOURCE_DATE_EPOCH`` and ``mcopy -m`` keeps the files' mtimes, which are set to the epoch first.
FAT times are local time, so ``TZ=UTC`` (the pinned environment) makes them the epoch in UTC.
File names are 8.3 upper case (``EFI/BOOT/BOOTX64.EFI``), so no VFAT long-name entry is written.
UEFI spec 2.10, 13.3 "File System Format" (FAT32 for system partitions) and 3.5.1.1 "Removable
Media Boot Behavior" (``\\EFI\\BOOT\\BOOT{X64,AA64}.EFI``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from nvkr.disk.layout import MIB, esp_size
from nvkr.errors import DiskError
from nvkr.run import pinned_env, run


def make_esp(
    image: Path,
    *,
    size: int,
    files: Mapping[str, Path],
    volume_id: str,
    label: str,
    hidden_sectors: int,
    epoch: int,
    workdir: Path,
    log_file: Path | None = None,
) -> None:
    """Create ``image`` (``size`` bytes) as a FAT32 file system holding ``files``.

    Args:
        files: destination path in the ESP (``"EFI/BOOT/BOOTX64.EFI"``, 8.3 upper-case parts)
            -> source file.
        volume_id: the volume serial number, 8 hex digits.
        label: the volume label, at most 11 characters.
        hidden_sectors: the partition's first LBA (the BPB's "hidden sectors" field).
    Raises:
        DiskError: a destination name is not an 8.3 upper-case name, or the files need a larger
            ESP (:func:`nvkr.disk.layout.esp_size`) than ``size``.
        ToolError: mkfs.fat or mtools failed or are missing (Debian: dosfstools, mtools).
    """
    for dest in files:
        for part in PurePosixPath(dest).parts:
            base, _, ext = part.partition(".")
            if not (
                part == part.upper() and 0 < len(base) <= 8 and len(ext) <= 3 and "." not in ext
            ):
                raise DiskError(f"ESP path {dest!r}: every part must be an 8.3 upper-case name")
    sizes = {dest: Path(src).stat().st_size for dest, src in files.items()}
    if esp_size(sizes.values()) > size:
        raise DiskError(
            f"the ESP's files ({sum(sizes.values())} bytes: "
            + ", ".join(f"{d} {n}" for d, n in sorted(sizes.items()))
            + f") do not fit its {size // MIB} MiB",
            hint="nvkr.disk.layout.esp_size gives the size they need",
        )
    with open(image, "wb") as f:
        f.truncate(size)
    env = pinned_env(
        {
            "SOURCE_DATE_EPOCH": str(epoch),
            "MTOOLS_SKIP_CHECK": "1",
            "MTOOLSRC": "/dev/null",
        },
        home=workdir,
    )
    run(
        ["mkfs.fat", "--invariant", "-F", "32", "-i", volume_id, "-n", label,
         "-h", str(hidden_sectors), str(image)],
        env=env,
        log_file=log_file,
    )  # fmt: skip
    staging = workdir / "esp-files"
    staging.mkdir(exist_ok=True)
    made: set[str] = set()
    for n, (dest, src) in enumerate(sorted(files.items())):
        parents = PurePosixPath(dest).parents
        for parent in reversed(list(parents)[:-1]):
            if str(parent) not in made:
                run(["mmd", "-i", str(image), f"::/{parent}"], env=env, log_file=log_file)
                made.add(str(parent))
        # mcopy -m keeps the source's mtime: give it the epoch on a private copy.
        staged = staging / f"{n}"
        shutil.copyfile(src, staged)
        os.utime(staged, (epoch, epoch))
        run(
            ["mcopy", "-m", "-i", str(image), str(staged), f"::/{dest}"], env=env, log_file=log_file
        )
