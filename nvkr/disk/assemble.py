"""Assembling a node image's disk from a prepared tree, phase by phase, into a QCOW2.

1. **filesystem**: ``mkfs.ext4 -d`` makes the root file system image from the tree
   (:mod:`nvkr.disk.ext4`).
2. **times**: ``debugfs`` pins every inode's times to the epoch; ``e2fsck -fn`` checks the result.
3. **bootloader**: GRUB images from the tree's modules (:mod:`nvkr.disk.grub`) and the EFI system
   partition holding the UEFI ones (:mod:`nvkr.disk.fat`).
4. **disk**: a sparse raw file with the GPT (:mod:`nvkr.disk.gpt`), the partition images written
   at their offsets, GRUB's boot sector and core.img (BIOS).
5. **convert**: ``qemu-img convert`` to QCOW2 and ``qemu-img check`` (:mod:`nvkr.disk.qcow2`).

Intermediate files live in a new ``workdir/disk-*/`` directory, removed at the end (the raw disk
is kept on request); the QCOW2 appears at ``out`` only when complete.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from nvkr.disk import ext4, fat, grub, qcow2, raw
from nvkr.disk.gpt import write_gpt
from nvkr.disk.layout import (
    ESP_LABEL,
    Arch,
    DiskLayout,
    PlacedPartition,
    disk_layout,
    esp_size,
)
from nvkr.disk.qcow2 import Compression
from nvkr.errors import DiskError
from nvkr.monitor.tools import Report, qemu_img_lines


@dataclass(frozen=True)
class DiskResult:
    """What :func:`assemble_disk` made.

    Attributes:
        qcow2: the QCOW2 image (``out``).
        raw_size: the virtual disk size in bytes.
        qcow2_size: the QCOW2 file's size in bytes.
        compression: ``none``, ``zlib`` or ``zstd`` (:mod:`nvkr.disk.qcow2`).
        compressed_clusters: clusters the QCOW2 stores compressed.
        raw_digest: ``sha256:<hex>`` of the raw disk (all ``raw_size`` bytes) when it was asked
            for (``raw_digest=True``), else None.
        fs_uuid: the root file system's UUID.
        root_partuuid: the root partition's unique GUID.
        root_partition: the root partition's number.
        phases: seconds per phase: ``filesystem``, ``times``, ``bootloader``, ``disk``,
            ``convert`` (and ``raw-digest`` when it was asked for).
        grub_platforms: the GRUB platforms installed, e.g. ``("i386-pc", "x86_64-efi")``.
        partitions: the partitions as placed (first LBA, sectors).
        inodes: allocated inodes in the root file system.
        raw: the raw disk file when ``keep_raw`` was asked for, else None.
    """

    qcow2: Path
    raw_size: int
    qcow2_size: int
    fs_uuid: str
    root_partuuid: str
    root_partition: int
    phases: dict[str, float]
    grub_platforms: tuple[str, ...] = ()
    partitions: tuple[PlacedPartition, ...] = ()
    inodes: int = 0
    raw: Path | None = None
    compression: Compression = "none"
    compressed_clusters: int = 0
    raw_digest: str | None = None


#: the phases of :func:`assemble_disk`, in order (its progress reports count them)
PHASES = ("filesystem", "times", "bootloader", "disk", "convert")


@dataclass
class _Timer:
    phases: dict[str, float] = field(default_factory=dict)
    report: Report | None = None  # told of each phase as it starts

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if self.report is not None:
            k = PHASES.index(name) + 1
            self.report(k, len(PHASES), "steps", f"disk: {name}")
        start = time.monotonic()
        try:
            yield
        finally:
            self.phases[name] = round(self.phases.get(name, 0.0) + time.monotonic() - start, 3)


def _grub_platforms(tree: Path, arch: Arch, *, uefi: bool) -> list[str]:
    """The GRUB platforms to make images for: all the tree has (:func:`grub.platforms`), or
    without ``uefi`` (another chain boots UEFI machines) the BIOS one alone, amd64's."""
    if uefi:
        return grub.platforms(tree, arch)
    if arch != "amd64":
        return []
    return [p for p in grub.platforms(tree, arch) if p not in grub.EFI_BOOT_FILE]


def min_size_bytes(tree: Path, *, layout: DiskLayout | None = None) -> int:
    """An estimate of the smallest disk (bytes, a multiple of 1 MiB) that holds ``tree`` with
    ``layout``'s other partitions (default: the amd64 layout, the larger one). For messages."""
    layout = layout or disk_layout("amd64", "0")
    stats = ext4.scan_tree(tree, epoch=2**62)
    return ext4.min_fs_bytes(stats) + layout.fixed_bytes()


def assemble_disk(
    tree: Path,
    out: Path,
    *,
    layout: DiskLayout,
    size_bytes: int,
    epoch: int,
    workdir: Path,
    log_file: Path | None = None,
    keep_raw: bool = False,
    progress: Report | None = None,
    compression: Compression = "none",
    raw_digest: bool = False,
    efi_files: Mapping[str, Path] | None = None,
) -> DiskResult:
    """Make the bootable QCOW2 ``out`` of ``size_bytes`` virtual bytes from ``tree``.

    The tree is not modified (mtimes newer than the epoch are clamped in the image, not in the
    tree). Same tree, layout, size and epoch give the same raw and QCOW2 bytes, whatever the
    work dir, umask, TZ or locale.

    Args:
        tree: a root file system prepared by :func:`nvkr.disk.prepare_boot_files`.
        out: where the QCOW2 goes (replaced atomically).
        layout: what :func:`nvkr.disk.prepare_boot_files` returned.
        size_bytes: the virtual disk size, a multiple of 1 MiB.
        epoch: SOURCE_DATE_EPOCH.
        workdir: scratch space (needs room for the root file system image and the raw disk,
            both sparse).
        log_file: tool output is appended there.
        keep_raw: keep the raw disk (``workdir/disk-*/disk.raw``), in :attr:`DiskResult.raw`.
        progress: told ``(k, 5, "steps", "disk: <phase>")`` as each of :data:`PHASES` starts,
            then qemu-img's percentage (:mod:`nvkr.monitor.tools`).
        compression: the QCOW2's compressed clusters (:func:`nvkr.disk.qcow2.convert`).
        raw_digest: hash the raw disk (in the convert phase), so the QCOW2's provenance can
            name the disk it holds beside the container's own digest.
        efi_files: the ESP's files (destination -> file) instead of GRUB's UEFI image: the
            Secure Boot chain (shim, its MokManager, the signed UKI as shim's second stage).
            GRUB then boots BIOS machines only (amd64), and arm64 gets no GRUB image. The ESP
            is made as large as they need (:func:`nvkr.disk.layout.esp_size`).
    Raises:
        DiskError: a bad size, a tree that does not fit (both sizes named), missing GRUB
            modules or grub.cfg, a tool output nvkr does not accept.
        IntegrityError: e2fsck or qemu-img check reject what was made.
        ToolError: a disk tool failed or is missing.
    """
    if not (tree / "boot" / "grub" / "grub.cfg").is_file():
        raise DiskError(
            f"{tree}/boot/grub/grub.cfg is missing",
            hint="call nvkr.disk.prepare_boot_files on the tree first",
        )
    if efi_files is not None:  # a Secure Boot chain may outgrow the ESP (esp_size)
        layout = layout.with_esp_size(esp_size(Path(f).stat().st_size for f in efi_files.values()))
    placed = layout.place(size_bytes)
    by_role = {pp.partition.role: pp for pp in placed}
    workdir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="disk-", dir=workdir))
    timer = _Timer(report=progress)
    raw_path = scratch / "disk.raw"
    try:
        root = by_role["root"]
        root_img = scratch / "root.ext4"
        with timer.phase("filesystem"):
            stats = ext4.scan_tree(tree, epoch=epoch)
            ext4.make_ext4(
                tree,
                root_img,
                size=root.size,
                layout=layout,
                epoch=epoch,
                workdir=scratch,
                stats=stats,
                log_file=log_file,
            )
        with timer.phase("times"):
            inodes = ext4.set_times(
                root_img, epoch=epoch, newer=stats.newer, workdir=scratch, log_file=log_file
            )
        with timer.phase("bootloader"):
            images = [
                grub.mkimage(
                    tree,
                    platform,
                    scratch / f"grub-{platform}.img",
                    layout=layout,
                    workdir=scratch,
                    log_file=log_file,
                )
                for platform in _grub_platforms(tree, layout.arch, uefi=efi_files is None)
            ]
            esp = by_role["esp"]
            esp_img = scratch / "esp.fat"
            fat.make_esp(
                esp_img,
                size=esp.size,
                files=grub.efi_files(images) if efi_files is None else efi_files,
                volume_id=layout.esp_volume_id,
                label=ESP_LABEL,
                hidden_sectors=esp.start,
                epoch=epoch,
                workdir=scratch,
                log_file=log_file,
            )
        with timer.phase("disk"):
            raw.create_sparse(raw_path, size_bytes)
            mbr = write_gpt(raw_path, layout, placed, log_file=log_file)
            raw.copy_into(esp_img, raw_path, esp.offset)
            esp_img.unlink()
            raw.copy_into(root_img, raw_path, root.offset)
            root_img.unlink()
            bios = by_role.get("bios")
            core = next((i for i in images if i.platform == "i386-pc"), None)
            if bios is not None and core is not None:
                grub.install_bios(
                    raw_path,
                    core_img=core.path,
                    boot_img=grub.module_dir(tree, "i386-pc") / "boot.img",
                    mbr=mbr,
                    core_lba=bios.start,
                    room=bios.sectors,
                )
        with timer.phase("convert"):
            converted = qcow2.convert(
                raw_path,
                out,
                compression=compression,
                log_file=log_file,
                on_line=qemu_img_lines(progress) if progress is not None else None,
            )
        raw_sha = None
        if raw_digest:  # hashed whole, holes too: timed apart from the conversion
            start = time.monotonic()
            raw_sha = raw.sha256_sparse(raw_path)
            timer.phases["raw-digest"] = round(time.monotonic() - start, 3)
    finally:
        if keep_raw and raw_path.exists():
            for p in scratch.iterdir():
                if p.is_dir():
                    shutil.rmtree(p)
                elif p != raw_path:
                    p.unlink()
        else:
            shutil.rmtree(scratch)
    return DiskResult(
        qcow2=out,
        raw_size=size_bytes,
        qcow2_size=converted.size,
        fs_uuid=layout.fs_uuid,
        root_partuuid=layout.root_partuuid,
        root_partition=layout.root_partition,
        phases=timer.phases,
        grub_platforms=tuple(i.platform for i in images),
        partitions=tuple(placed),
        inodes=inodes,
        raw=raw_path if keep_raw else None,
        compression=converted.compression,
        compressed_clusters=converted.compressed_clusters,
        raw_digest=raw_sha,
    )
