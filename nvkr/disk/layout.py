"""The partition layout of a node image and every identifier in it, derived from the action key.

A node image is one GPT disk (UEFI spec 2.10, ch. 5 "GUID Partition Table (GPT) Disk Layout"):

======  ==========================  ========  ==================================================
number  partition                   size      type GUID
======  ==========================  ========  ==================================================
1       BIOS boot (amd64 only)      1 MiB     21686148-6449-6E6F-744E-656564454649 (GRUB core.img)
1 / 2   EFI system partition (FAT)  64 MiB+   C12A7328-F81F-11D2-BA4B-00A0C93EC93B
last    root (ext4)                 the rest  Discoverable Partitions Spec root type for the arch
======  ==========================  ========  ==================================================

64 MiB+: or the next multiple of 64 MiB that holds a Secure Boot chain too large for it
(:func:`esp_size`: Debian's generic arm64 kernel, an uncompressed Image, makes a 74 MB UKI).

Partitions start on 1 MiB boundaries; the root partition is last so it can grow to the end of a
larger disk on first boot. Disk and partition GUIDs, the file system UUID, its hash seed and the
ESP's volume id are UUIDv5 values of the seed (the action key), so two builds of the same inputs
write the same bytes and a different input never reuses an identifier.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from nvkr.errors import DiskError

Arch = Literal["amd64", "arm64"]
Role = Literal["bios", "esp", "root"]

SECTOR = 512
MIB = 1 << 20
#: Partition starts and sizes are multiples of this (the first partition starts at 1 MiB).
ALIGN = MIB
#: The backup GPT at the end of the disk: a 128-entry partition array (32 sectors) + the header.
GPT_BACKUP_SECTORS = 33
ESP_SIZE = 64 * MIB
#: Bytes of an ESP that hold no file data besides its FATs: the reserved sectors, the root and
#: ``EFI/BOOT`` directories, and room to spare (:func:`esp_size`).
ESP_OVERHEAD = 1 * MIB
BIOS_BOOT_SIZE = 1 * MIB

TYPE_BIOS_BOOT = "21686148-6449-6E6F-744E-656564454649"
TYPE_ESP = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
#: Discoverable Partitions Spec (UAPI group), "Root Partition" per architecture.
TYPE_ROOT: dict[str, str] = {
    "amd64": "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709",
    "arm64": "B921B045-1DF0-41C3-AF44-4C6F280D3FAE",
}
ROOT_NAME: dict[str, str] = {"amd64": "root-x86-64", "arm64": "root-arm64"}
FS_LABEL = "nvkr-root"
ESP_LABEL = "ESP"

#: Namespace of every UUIDv5 nvkr derives for disks (itself uuid5(URL, "https://nvkr.dev/disk")).
NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://nvkr.dev/disk")


def derive_uuid(seed: str, purpose: str) -> str:
    """``uuid5(NAMESPACE, f"{seed}/{purpose}")`` as lower-case text (RFC 9562 section 5.5).

    Args:
        seed: the action key's hex digest (any non-empty string works).
        purpose: what the identifier names, e.g. ``"disk"``, ``"partition/root"``, ``"ext4"``.
    """
    return str(uuid.uuid5(NAMESPACE, f"{seed}/{purpose}"))


@dataclass(frozen=True)
class Partition:
    """One GPT partition entry of a :class:`DiskLayout`.

    Attributes:
        number: 1-based entry number (the ``N`` of ``/dev/vdaN``).
        role: ``"bios"`` (GRUB's core.img), ``"esp"`` or ``"root"``.
        name: the GPT partition name (UTF-16 in the entry, at most 36 characters).
        type_guid: the partition type GUID, upper case.
        guid: the unique partition GUID (Linux's PARTUUID), lower case.
        size: bytes, a multiple of 1 MiB; None for the root partition, which takes the rest.
    """

    number: int
    role: Role
    name: str
    type_guid: str
    guid: str
    size: int | None


def esp_size(file_sizes: Iterable[int]) -> int:
    """The size of an ESP for files of ``file_sizes`` bytes: :data:`ESP_SIZE` when they fit in
    it (every image whose files fit keeps its bytes), else the smallest multiple of it that holds
    them.

    Counted without knowing mkfs.fat's choices, generously: each file rounded up to 4 KiB
    (clusters are 512 bytes to 4 KiB), two FATs of 4 bytes per 512-byte cluster (1/64 of the
    size), and :data:`ESP_OVERHEAD`.
    """
    data = sum(-(-n // 4096) * 4096 for n in file_sizes) + ESP_OVERHEAD
    size = ESP_SIZE
    while data + size // 64 > size:
        size += ESP_SIZE
    return size


@dataclass(frozen=True)
class PlacedPartition:
    """A :class:`Partition` placed on a disk of a given size: first LBA and length in sectors."""

    partition: Partition
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


@dataclass(frozen=True)
class DiskLayout:
    """What a node image's disk holds and how it is named, independent of the disk's size.

    Made by :func:`disk_layout` (through :func:`nvkr.disk.prepare_boot_files`); place it on a disk
    of a given size with :meth:`place`.

    Attributes:
        arch: ``"amd64"`` (BIOS + UEFI) or ``"arm64"`` (UEFI).
        disk_guid: the GPT disk GUID.
        partitions: in table order; the root partition is last.
        fs_uuid: the ext4 UUID (``root=UUID=...`` on the kernel command line, fstab, GRUB's search).
        fs_hash_seed: the ext4 directory-hash seed.
        fs_label: the ext4 label.
        esp_volume_id: the FAT volume serial number, 8 hex digits.
        kernel: the kernel's path in the tree, e.g. ``boot/vmlinuz-6.1.0-28-cloud-amd64``.
        initrd: the initrd's path in the tree, e.g. ``boot/initrd.img-6.1.0-28-cloud-amd64``.
        cmdline: the kernel command line GRUB passes.
    """

    arch: Arch
    disk_guid: str
    partitions: tuple[Partition, ...]
    fs_uuid: str
    fs_hash_seed: str
    fs_label: str
    esp_volume_id: str
    kernel: str = ""
    initrd: str = ""
    cmdline: str = ""

    def by_role(self, role: Role) -> Partition | None:
        """The partition with ``role``, or None (amd64 alone has a BIOS boot partition)."""
        return next((p for p in self.partitions if p.role == role), None)

    @property
    def root(self) -> Partition:
        """The root partition (always the last one)."""
        return self.partitions[-1]

    @property
    def root_partition(self) -> int:
        """The root partition's number."""
        return self.root.number

    @property
    def root_partuuid(self) -> str:
        """The root partition's unique GUID (Linux's PARTUUID)."""
        return self.root.guid

    def with_esp_size(self, size: int) -> DiskLayout:
        """This layout with an ESP of ``size`` bytes (a multiple of 1 MiB): :func:`esp_size`."""
        if size <= 0 or size % ALIGN:
            raise DiskError(f"ESP size {size} bytes is not a positive multiple of 1 MiB")
        parts = tuple(dataclasses.replace(p, size=size) if p.role == "esp" else p
                      for p in self.partitions)  # fmt: skip
        return dataclasses.replace(self, partitions=parts)

    def fixed_bytes(self) -> int:
        """Bytes of the disk that are not the root partition: partitions, alignment, both GPTs."""
        fixed = sum(p.size or 0 for p in self.partitions)
        return ALIGN + fixed + ALIGN  # the first MiB (MBR, GPT) and the last, partly the backup GPT

    def place(self, size_bytes: int) -> list[PlacedPartition]:
        """Place the partitions on a disk of ``size_bytes``: starts and lengths in 512-byte sectors.

        The first partition starts at 1 MiB, each next one where the previous ends; the root
        partition ends on the last 1 MiB boundary before the backup GPT.

        Raises:
            DiskError: the size is not a positive multiple of 1 MiB, or leaves no room for root.
        """
        if size_bytes <= 0 or size_bytes % ALIGN:
            raise DiskError(
                f"disk size {size_bytes} bytes is not a positive multiple of 1 MiB",
                hint='sizes are written like "4GiB" or "2048MiB"',
            )
        total = size_bytes // SECTOR
        last_usable = total - GPT_BACKUP_SECTORS - 1
        align = ALIGN // SECTOR
        placed: list[PlacedPartition] = []
        lba = align
        for part in self.partitions:
            if part.size is not None:
                sectors = part.size // SECTOR
            else:
                sectors = (last_usable + 1 - lba) // align * align
            if sectors <= 0 or lba + sectors - 1 > last_usable:
                raise DiskError(
                    f"a {size_bytes // MIB} MiB disk leaves no room for partition "
                    f"{part.number} ({part.name}); the {self.arch} layout needs "
                    f"{self.fixed_bytes() // MIB} MiB besides the root file system",
                    hint="give the node image a larger size",
                )
            placed.append(PlacedPartition(part, lba, sectors))
            lba += sectors
        return placed


def disk_layout(arch: Arch, seed: str) -> DiskLayout:
    """The layout for ``arch`` with every identifier derived from ``seed`` (see module docs).

    Raises:
        DiskError: ``arch`` is not amd64 or arm64, or ``seed`` is empty.
    """
    if arch not in TYPE_ROOT:
        raise DiskError(f"node images are built for amd64 or arm64, not {arch!r}")
    if not seed:
        raise DiskError("the disk layout needs a seed (the action key), got an empty string")
    roles: list[tuple[Role, str, str, int | None]] = []
    if arch == "amd64":
        roles.append(("bios", "BIOS boot", TYPE_BIOS_BOOT, BIOS_BOOT_SIZE))
    roles.append(("esp", "EFI System", TYPE_ESP, ESP_SIZE))
    roles.append(("root", ROOT_NAME[arch], TYPE_ROOT[arch], None))
    parts = tuple(
        Partition(
            number=n,
            role=role,
            name=name,
            type_guid=type_guid,
            guid=derive_uuid(seed, f"partition/{role}"),
            size=size,
        )
        for n, (role, name, type_guid, size) in enumerate(roles, start=1)
    )
    return DiskLayout(
        arch=arch,
        disk_guid=derive_uuid(seed, "disk"),
        partitions=parts,
        fs_uuid=derive_uuid(seed, "ext4"),
        fs_hash_seed=derive_uuid(seed, "ext4/hash-seed"),
        fs_label=FS_LABEL,
        esp_volume_id=uuid.UUID(derive_uuid(seed, "esp")).hex[:8].upper(),
    )
