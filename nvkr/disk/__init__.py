"""Disk images for the ``node-image`` builder: a root file system tree in, a bootable,
bit-for-bit reproducible QCOW2 out, without loop devices, mounts or root-only kernel features.

The builder calls :func:`prepare_boot_files` on the staged tree (GRUB configuration, fstab,
first-boot growroot unit; returns the :class:`DiskLayout` with every identifier derived from the
action key), then :func:`assemble_disk` (ext4 by ``mkfs.ext4 -d`` + ``debugfs``, GPT by
``sfdisk``, GRUB by ``grub-mkimage`` installed as grub-bios-setup would, FAT ESP by ``mkfs.fat``
+ mtools, ``qemu-img convert``). :mod:`nvkr.machine.boot` boots the result in QEMU.
"""

from __future__ import annotations

from nvkr.disk.assemble import DiskResult, assemble_disk, min_size_bytes
from nvkr.disk.bootfiles import prepare_boot_files
from nvkr.disk.layout import DiskLayout, Partition, PlacedPartition, disk_layout

__all__ = [
    "DiskLayout",
    "DiskResult",
    "Partition",
    "PlacedPartition",
    "assemble_disk",
    "disk_layout",
    "min_size_bytes",
    "prepare_boot_files",
]
