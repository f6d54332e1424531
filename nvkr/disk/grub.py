"""GRUB for a disk image without grub-install: images made by ``grub-mkimage`` from the tree's own
modules (its pinned grub-pc-bin / grub-efi-*-bin packages), installed by nvkr.

``grub-mkimage`` must pack modules of its own GRUB release, so it is the tree's own (grub-common,
which those packages depend on, from the same source), run through the tree's dynamic loader
and libraries: natively on the tree's architecture, through qemu-user's binfmt_misc on another
(:func:`tree_mkimage`). The host's ``grub-mkimage`` serves only a tree without one, and only when
it is of the modules' release (:func:`check_host_grub`): a Debian 12 host cannot pack Debian 13's
GRUB 2.12.

Every image embeds the modules it needs (the tree's ``/boot/grub`` holds no module directory) and
an early configuration that finds the root file system by UUID and sets ``prefix`` to its
``/boot/grub``; the ``normal`` module then reads ``/boot/grub/grub.cfg`` from there.

- **BIOS (i386-pc)**: ``core.img`` goes into the BIOS boot partition and ``boot.img`` into the
  MBR, patched the way ``grub-bios-setup`` does when it embeds (GRUB 2.06 ``util/setup.c``,
  offsets from ``include/grub/i386/pc/boot.h`` and ``kernel.h``): see :func:`bios_boot_sectors`.
  Unlike ``grub-install`` no Reed-Solomon codes are added (``--no-rs-codes``): ``diskboot`` loads
  exactly ``core.img``'s sectors.
- **UEFI (x86_64-efi, arm64-efi)**: a standalone PE image, ``\\EFI\\BOOT\\BOOTX64.EFI`` or
  ``BOOTAA64.EFI`` on the ESP (the removable-media path: no NVRAM boot entry needed). Not signed:
  Secure Boot must be off.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nvkr.disk.layout import SECTOR, Arch, DiskLayout
from nvkr.errors import DiskError
from nvkr.run import CAN_RUN_HINT, can_run, pinned_env, run

# include/grub/i386/pc/boot.h
BPB_START = 0x03
BPB_END = 0x5A
KERNEL_SECTOR = 0x5C
BOOT_DRIVE = 0x64
DRIVE_CHECK = 0x66
WINDOWS_NT_MAGIC = 0x1B8
PART_END = 0x1FE
LIST_SIZE = 12  # struct grub_boot_blocklist {u64 start; u16 len; u16 segment}, packed
KERNEL_SEG = 0x800  # GRUB_BOOT_I386_PC_KERNEL_SEG
# include/grub/offsets.h
LINK_ADDR = 0x9000  # GRUB_KERNEL_I386_PC_LINK_ADDR
NO_REED_SOLOMON_LENGTH = 0x14  # in core.img's second sector (lzma_decompress / startup_raw.S)
#: setup.c's cap on embedded sectors: core.img must end below 0x78000 once loaded at LINK_ADDR.
MAX_CORE_SECTORS = (0x78000 - LINK_ADDR) // SECTOR

COMMON_MODULES = (
    "part_gpt", "part_msdos", "ext2", "fat", "search", "search_fs_uuid", "normal", "linux",
    "configfile", "echo", "test", "terminal", "gzio", "minicmd", "boot",
)  # fmt: skip
#: Per platform: (required modules besides COMMON_MODULES, modules used when present).
PLATFORM_MODULES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "i386-pc": (("biosdisk",), ("serial", "halt")),
    "x86_64-efi": ((), ("serial", "efi_gop", "efi_uga", "halt")),
    "arm64-efi": ((), ("serial", "efi_gop", "halt")),
}
#: Per arch: the platforms to build, each with the Debian package shipping its modules.
PLATFORMS: dict[str, tuple[tuple[str, str], ...]] = {
    "amd64": (("i386-pc", "grub-pc-bin"), ("x86_64-efi", "grub-efi-amd64-bin")),
    "arm64": (("arm64-efi", "grub-efi-arm64-bin"),),
}
EFI_BOOT_FILE = {"x86_64-efi": "EFI/BOOT/BOOTX64.EFI", "arm64-efi": "EFI/BOOT/BOOTAA64.EFI"}


@dataclass(frozen=True)
class GrubImage:
    """A GRUB image made for one platform: ``path`` in the work dir, e.g. ``core.img``."""

    platform: str
    path: Path


def module_dir(tree: Path, platform: str) -> Path:
    """The tree's GRUB module directory for ``platform`` (``usr/lib/grub/<platform>``)."""
    return tree / "usr" / "lib" / "grub" / platform


def platforms(tree: Path, arch: Arch) -> list[str]:
    """The GRUB platforms to install for ``arch``: those whose module directory is in the tree.

    amd64 needs i386-pc (the image must boot on BIOS; UEFI is added when x86_64-efi is there);
    arm64 needs arm64-efi.

    Raises:
        DiskError: a required platform's modules are missing; the message names the package.
    """
    wanted = PLATFORMS[arch]
    present = [p for p, _ in wanted if (module_dir(tree, p) / "kernel.img").is_file()]
    required, package = wanted[0]
    if required not in present:
        raise DiskError(
            f"the tree has no GRUB {required} modules ({module_dir(tree, required)}/kernel.img); "
            f"a {arch} node image boots with GRUB",
            hint=f"add Debian package {package} to the rootfs package set"
            + (f" (and {wanted[1][1]} for UEFI)" if len(wanted) > 1 else ""),
        )
    return present


#: Per arch: the tree's multiarch library directory and its dynamic loader there
TREE_LOADER: dict[str, tuple[str, str]] = {
    "amd64": ("x86_64-linux-gnu", "ld-linux-x86-64.so.2"),
    "arm64": ("aarch64-linux-gnu", "ld-linux-aarch64.so.1"),
}


def tree_mkimage(tree: Path, arch: Arch) -> list[str] | None:
    """The argv that runs the tree's own ``grub-mkimage``: its dynamic loader with the tree's
    library directories first (no chroot, no root), or None when the tree has no grub-mkimage.

    Raises:
        DiskError: the tree is of an architecture this host cannot run (no qemu-user binfmt
            entry): names both and what to install.
    """
    binary = tree / "usr" / "bin" / "grub-mkimage"
    triplet, loader = TREE_LOADER[arch]
    libdir = tree / "usr" / "lib" / triplet
    ld = libdir / loader
    # real files inside the tree (a symlink's target would be read on the host)
    if not (binary.is_file() and not binary.is_symlink() and ld.is_file() and not ld.is_symlink()):
        return None
    ok, said = can_run(arch)
    if not ok:
        raise DiskError(
            f"the {arch} tree's GRUB images are made by its own grub-mkimage, and this host cannot "
            f"run {arch} binaries (arch-test {arch}: {said})",
            hint=CAN_RUN_HINT,
        )
    return [str(ld), "--library-path", f"{libdir}:{tree / 'lib' / triplet}", str(binary)]


def _grub_version_of_tree(mod_dir: Path) -> str | None:
    info = mod_dir / "modinfo.sh"
    if not info.is_file():
        return None
    m = re.search(r'^grub_version="?([^"\n]+)"?$', info.read_text(errors="replace"), re.M)
    return m.group(1) if m else None


def check_host_grub(tree: Path, platform: str) -> str:
    """The host's grub-mkimage version, checked against the GRUB release of the tree's modules.

    Raises:
        DiskError: the versions differ (grub-mkimage must pack modules of its own release).
        ToolError: grub-mkimage is missing (Debian package grub-common).
    """
    out = run(["grub-mkimage", "--version"], env=pinned_env()).stdout.decode(errors="replace")
    m = re.search(r"\(GRUB\)\s+(\S+)", out)
    host = m.group(1) if m else out.strip()
    tree_version = _grub_version_of_tree(module_dir(tree, platform))
    if tree_version is not None and not (
        host == tree_version
        or host.startswith(tree_version + "-")
        or host.startswith(tree_version + "~")
    ):
        raise DiskError(
            f"the host's grub-mkimage is GRUB {host}, the tree's {platform} modules are GRUB "
            f"{tree_version}",
            hint="install the host's grub-common from the same GRUB release as the rootfs",
        )
    return host


def early_config(layout: DiskLayout) -> str:
    """The configuration embedded in every image: find the root file system, set ``prefix``."""
    return (
        f"search --no-floppy --fs-uuid --set=root {layout.fs_uuid}\nset prefix=($root)/boot/grub\n"
    )


def modules_for(mod_dir: Path, platform: str) -> list[str]:
    """The modules to embed for ``platform``: required ones (DiskError when one is missing from
    ``mod_dir``) plus the optional ones ``mod_dir`` has."""
    required, optional = PLATFORM_MODULES[platform]
    missing = [m for m in (*COMMON_MODULES, *required) if not (mod_dir / f"{m}.mod").is_file()]
    if missing:
        raise DiskError(f"GRUB modules missing from {mod_dir}: {', '.join(missing)}")
    return [*COMMON_MODULES, *required, *(m for m in optional if (mod_dir / f"{m}.mod").is_file())]


def mkimage(
    tree: Path,
    platform: str,
    out: Path,
    *,
    layout: DiskLayout,
    workdir: Path,
    log_file: Path | None = None,
) -> GrubImage:
    """Build the GRUB image for ``platform`` from the tree's modules into ``out``.

    Raises:
        DiskError: modules missing, or a core.img too large to embed.
        ToolError: grub-mkimage failed or is missing.
    """
    mod_dir = module_dir(tree, platform)
    mkimage_argv = tree_mkimage(tree, layout.arch)
    if mkimage_argv is None:
        check_host_grub(tree, platform)
        mkimage_argv = ["grub-mkimage"]
    cfg = workdir / f"early-{platform}.cfg"
    cfg.write_text(early_config(layout))
    fmt = {"i386-pc": "i386-pc", "x86_64-efi": "x86_64-efi", "arm64-efi": "arm64-efi"}[platform]
    argv = [
        *mkimage_argv, "-O", fmt, "-d", str(mod_dir), "-c", str(cfg), "-p", "/boot/grub",
        "-o", str(out), *modules_for(mod_dir, platform),
    ]  # fmt: skip
    run(argv, env=pinned_env(), log_file=log_file)
    if platform == "i386-pc":
        sectors = (out.stat().st_size + SECTOR - 1) // SECTOR
        if sectors > MAX_CORE_SECTORS:
            raise DiskError(
                f"core.img is {sectors} sectors; GRUB can embed at most {MAX_CORE_SECTORS}"
            )
    return GrubImage(platform, out)


def bios_boot_sectors(
    boot_img: bytes, core_img: bytes, mbr: bytes, core_lba: int, room: int
) -> tuple[bytes, bytes]:
    """``boot.img`` and ``core.img`` patched for a disk, as grub-bios-setup does when it embeds
    core.img in a BIOS boot partition (GRUB 2.06 util/setup.c, ``SETUP`` with
    ``add_rs_codes = 0``, ``allow_floppy = 0``).

    Args:
        boot_img: the tree's ``i386-pc/boot.img`` (512 bytes).
        core_img: the image :func:`mkimage` made.
        mbr: the disk's current sector 0 (sfdisk's protective MBR).
        core_lba: the first sector of the BIOS boot partition.
        room: the BIOS boot partition's length in sectors.
    Returns:
        (the MBR to write at sector 0, core.img padded to whole sectors for ``core_lba``).
    Raises:
        DiskError: a malformed image, or a partition too small for core.img.
    """
    if len(boot_img) != SECTOR or boot_img[PART_END : PART_END + 2] != b"\x55\xaa":
        raise DiskError("GRUB boot.img is not a 512-byte boot sector")
    if len(mbr) != SECTOR:
        raise DiskError("the disk's MBR is not 512 bytes")
    nsec = (len(core_img) + SECTOR - 1) // SECTOR
    if nsec < 2 or nsec > min(room, MAX_CORE_SECTORS):
        raise DiskError(
            f"core.img needs {nsec} sectors; the BIOS boot partition has {room} "
            f"(and GRUB embeds at most {MAX_CORE_SECTORS})"
        )
    boot = bytearray(boot_img)
    # Copy the possible DOS BPB; nop the boot-drive check (a hard disk, not a floppy).
    boot[BPB_START:BPB_END] = mbr[BPB_START:BPB_END]
    boot[DRIVE_CHECK : DRIVE_CHECK + 2] = b"\x90\x90"
    # Keep the disk signature and the (protective) partition table.
    boot[WINDOWS_NT_MAGIC:PART_END] = mbr[WINDOWS_NT_MAGIC:PART_END]
    # write_rootdev(): boot drive 0xff (use the BIOS's), LE u64 first sector of core.img.
    boot[BOOT_DRIVE] = 0xFF
    boot[KERNEL_SECTOR : KERNEL_SECTOR + 8] = struct.pack("<Q", core_lba)

    core = bytearray(core_img) + bytes(nsec * SECTOR - len(core_img))
    no_rs = struct.unpack_from("<H", core, SECTOR + NO_REED_SOLOMON_LENGTH)[0]
    if no_rs == 0xFFFF:
        raise DiskError("core.img version mismatch (no Reed-Solomon length field)")
    # Clean out the blocklists: from the end of sector 0 backwards until the terminator.
    first = SECTOR - LIST_SIZE
    pos = first
    while struct.unpack_from("<H", core, pos + 8)[0]:
        core[pos : pos + LIST_SIZE] = bytes(LIST_SIZE)
        pos -= LIST_SIZE
        if pos <= 0:
            raise DiskError("no terminator in the core image's blocklist")
    # save_blocklists() over the contiguous sectors: sector 0 is diskboot itself, the rest is one
    # block loaded at segment 0x820 (just after diskboot at 0x8000); then a terminator.
    struct.pack_into("<QHH", core, first, core_lba + 1, nsec - 1, KERNEL_SEG + (SECTOR >> 4))
    core[first - LIST_SIZE : first] = bytes(LIST_SIZE)
    return bytes(boot), bytes(core)


def install_bios(
    raw: Path, *, core_img: Path, boot_img: Path, mbr: bytes, core_lba: int, room: int
) -> int:
    """Write the patched MBR and core.img into the raw disk file; returns core.img's sectors."""
    boot, core = bios_boot_sectors(
        boot_img.read_bytes(), core_img.read_bytes(), mbr, core_lba, room
    )
    with open(raw, "r+b") as f:
        f.seek(core_lba * SECTOR)
        f.write(core)
        f.seek(0)
        f.write(boot)
    return len(core) // SECTOR


def efi_files(images: Sequence[GrubImage]) -> dict[str, Path]:
    """ESP destination -> image for the UEFI images among ``images``."""
    return {EFI_BOOT_FILE[i.platform]: i.path for i in images if i.platform in EFI_BOOT_FILE}
