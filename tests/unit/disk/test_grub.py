"""GRUB: platform choice, images from the tree's modules, and the grub-bios-setup patching."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from nvkr.disk import grub
from nvkr.disk.layout import disk_layout
from nvkr.errors import DiskError
from tests.helpers.disk import HOST_GRUB, SEED, make_tree, needs_grub, needs_tools

BOOT_IMG = HOST_GRUB / "i386-pc" / "boot.img"


def _mbr() -> bytes:
    """A protective MBR as sfdisk writes it, with a disk signature to keep."""
    mbr = bytearray(512)
    mbr[0x1B8:0x1BC] = b"SIGN"
    mbr[0x1BE:0x1CE] = bytes.fromhex("000200eeffffff01000000ffff3f00")[:15] + b"\0"
    mbr[0x1FE:] = b"\x55\xaa"
    return bytes(mbr)


def _core(sectors: int) -> bytes:
    """A core.img shape: diskboot's default blocklist at the end of sector 0 (start 2,
    len sectors - 1, segment 0x820), a no-Reed-Solomon length in sector 1, odd length."""
    core = bytearray(b"\xaa" * (sectors * 512 - 100))
    core[488:500] = bytes(12)
    struct.pack_into("<QHH", core, 500, 2, sectors - 1, 0x820)
    struct.pack_into("<H", core, 512 + 0x14, 0x75B)
    return bytes(core)


@needs_grub
def test_bios_boot_sectors_patch_like_grub_setup():
    boot_img = BOOT_IMG.read_bytes()
    mbr = _mbr()
    boot, core = grub.bios_boot_sectors(boot_img, _core(300), mbr, core_lba=2048, room=2048)
    assert len(boot) == 512 and len(core) == 300 * 512
    # setup.c: BPB copied from the disk, boot-drive check nop'ed, partition table kept.
    assert boot[0x03:0x5A] == mbr[0x03:0x5A]
    assert boot[0x66:0x68] == b"\x90\x90"
    assert boot[0x1B8:0x1FE] == mbr[0x1B8:0x1FE]
    assert boot[0x1FE:] == b"\x55\xaa"
    # write_rootdev(): kernel sector (LE u64) and boot drive 0xff.
    assert struct.unpack_from("<Q", boot, 0x5C)[0] == 2048
    assert boot[0x64] == 0xFF
    # Everything else is boot.img's code.
    assert boot[0x68:0x1B8] == boot_img[0x68:0x1B8]
    # save_blocklists(): one block, sectors 2049.. (len 299) at segment 0x820; a terminator.
    assert struct.unpack_from("<QHH", core, 500) == (2049, 299, 0x820)
    assert core[488:500] == bytes(12)
    assert core[512 : 300 * 512 - 100] == _core(300)[512:]
    assert core[300 * 512 - 100 :] == bytes(100)  # padded with zeros


@needs_grub
@pytest.mark.parametrize(
    ("core", "room", "match"),
    [
        (_core(300), 200, "BIOS boot partition has 200"),
        (_core(900), 2048, "at most 888"),
        (b"\xaa" * 400, 2048, "needs 1 sectors"),
    ],
)
def test_bios_boot_sectors_refuses_what_cannot_boot(core, room, match):
    with pytest.raises(DiskError, match=match):
        grub.bios_boot_sectors(BOOT_IMG.read_bytes(), core, _mbr(), core_lba=2048, room=room)


def test_bios_boot_sectors_checks_boot_img():
    with pytest.raises(DiskError, match="boot sector"):
        grub.bios_boot_sectors(bytes(512), _core(10), _mbr(), core_lba=2048, room=2048)


def test_platforms_need_i386_pc_on_amd64_and_name_the_package(tmp_path):
    tree = make_tree(tmp_path / "t", grub=("x86_64-efi",))
    with pytest.raises(DiskError, match="no GRUB i386-pc modules") as e:
        grub.platforms(tree, "amd64")
    assert "grub-pc-bin" in (e.value.hint or "")
    with pytest.raises(DiskError) as e:
        grub.platforms(tree, "arm64")
    assert "grub-efi-arm64-bin" in (e.value.hint or "")


@needs_grub
def test_platforms_skip_a_missing_efi_platform(tmp_path):
    assert grub.platforms(make_tree(tmp_path / "a"), "amd64") == ["i386-pc", "x86_64-efi"]
    assert grub.platforms(make_tree(tmp_path / "b", grub=("i386-pc",)), "amd64") == ["i386-pc"]


def test_modules_for_reports_missing_required_modules(tmp_path):
    mod_dir = tmp_path / "i386-pc"
    mod_dir.mkdir()
    for m in [*grub.COMMON_MODULES, "serial"]:
        (mod_dir / f"{m}.mod").write_bytes(b"")
    with pytest.raises(DiskError, match="biosdisk"):
        grub.modules_for(mod_dir, "i386-pc")
    (mod_dir / "biosdisk.mod").write_bytes(b"")
    mods = grub.modules_for(mod_dir, "i386-pc")
    assert "serial" in mods and "halt" not in mods and "biosdisk" in mods


def test_host_grub_must_match_the_tree(tmp_path, monkeypatch):
    mod_dir = tmp_path / "usr" / "lib" / "grub" / "i386-pc"
    mod_dir.mkdir(parents=True)
    (mod_dir / "modinfo.sh").write_text('grub_version="1.99"\n')

    class Done:
        stdout = b"grub-mkimage (GRUB) 2.06-13+deb12u2\n"

    monkeypatch.setattr(grub, "run", lambda *a, **k: Done())
    with pytest.raises(DiskError, match=r"host's grub-mkimage is GRUB 2.06-13\+deb12u2.*GRUB 1.99"):
        grub.check_host_grub(tmp_path, "i386-pc")
    (mod_dir / "modinfo.sh").write_text('grub_version="2.06"\n')
    assert grub.check_host_grub(tmp_path, "i386-pc") == "2.06-13+deb12u2"


@needs_tools
@needs_grub
def test_mkimage_is_deterministic_and_embeds_the_early_config(tmp_path):
    tree = make_tree(tmp_path / "t")
    layout = disk_layout("amd64", SEED)
    outs: list[bytes] = []
    for n in (1, 2):
        work = tmp_path / f"w{n}"
        work.mkdir()
        for platform in ("i386-pc", "x86_64-efi"):
            img = grub.mkimage(tree, platform, work / "img", layout=layout, workdir=work)
            outs.append(Path(img.path).read_bytes())
    assert outs[0] == outs[2] and outs[1] == outs[3]
    assert f"--set=root {layout.fs_uuid}".encode() in outs[1]  # the EFI image is not compressed
    assert outs[1][:2] == b"MZ"


def _tree_with_own_grub_mkimage(root: Path, grub_version: str) -> Path:
    """A tree whose i386-pc modules say they are GRUB ``grub_version`` and which holds a
    grub-mkimage of its own (the host's program, with its loader and libraries, copied in)."""
    import shutil
    import subprocess

    tree = make_tree(root, grub=())
    mod_dir = grub.module_dir(tree, "i386-pc")
    shutil.copytree(HOST_GRUB / "i386-pc", mod_dir)
    info = mod_dir / "modinfo.sh"
    info.write_text(
        "".join(
            f'grub_version="{grub_version}"\n' if line.startswith("grub_version=") else line
            for line in info.read_text().splitlines(keepends=True)
        )
    )
    host = shutil.which("grub-mkimage")
    assert host is not None
    shutil.copyfile(host, tree / "usr" / "bin" / "grub-mkimage")
    libdir = tree / "usr" / "lib" / "x86_64-linux-gnu"
    libdir.mkdir(parents=True)
    ldd = subprocess.run(["ldd", host], capture_output=True, text=True, check=True).stdout
    for line in ldd.splitlines():
        path = line.split("=>")[-1].split("(")[0].strip()
        if path.startswith("/"):
            name = "ld-linux-x86-64.so.2" if "ld-linux" in path else Path(path).name
            shutil.copyfile(path, libdir / name)
    (libdir / "ld-linux-x86-64.so.2").chmod(0o755)
    return tree


@needs_tools
@needs_grub
def test_mkimage_runs_the_trees_own_grub_mkimage(tmp_path):
    """Modules of a GRUB release the host's grub-mkimage is not (Debian 13's 2.12 on a Debian 12
    host) are packed by the tree's own grub-mkimage, run through the tree's loader; without
    one, the host's refuses them naming both releases."""
    import platform

    if platform.machine() != "x86_64":
        pytest.skip("the copied loader is x86_64's")
    layout = disk_layout("amd64", SEED)
    tree = _tree_with_own_grub_mkimage(tmp_path / "t", "9.99")
    argv = grub.tree_mkimage(tree, "amd64")
    assert argv is not None and argv[0] == str(
        tree / "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
    )
    assert argv[-1] == str(tree / "usr/bin/grub-mkimage")
    own = grub.mkimage(tree, "i386-pc", tmp_path / "own.img", layout=layout, workdir=tmp_path)
    # the same program as the host's: the same image as the host's makes from the same modules
    host_tree = make_tree(tmp_path / "h", grub=("i386-pc",))
    host = grub.mkimage(
        host_tree, "i386-pc", tmp_path / "host.img", layout=layout, workdir=tmp_path
    )
    assert own.path.read_bytes() == host.path.read_bytes()
    (tree / "usr" / "bin" / "grub-mkimage").unlink()
    assert grub.tree_mkimage(tree, "amd64") is None
    with pytest.raises(
        DiskError,
        match=r"host's grub-mkimage is GRUB \S+, the tree's i386-pc modules are GRUB 9.99",
    ):
        grub.mkimage(tree, "i386-pc", tmp_path / "no.img", layout=layout, workdir=tmp_path)


def test_a_tree_the_host_cannot_run_names_what_to_install(tmp_path, monkeypatch):
    """An arm64 tree's grub-mkimage runs under qemu-user: without a binfmt entry the error says
    so (not an exec failure) and what to install."""
    tree = tmp_path / "t"
    (tree / "usr" / "bin").mkdir(parents=True)
    (tree / "usr" / "bin" / "grub-mkimage").write_bytes(b"\x7fELF")
    libdir = tree / "usr" / "lib" / "aarch64-linux-gnu"
    libdir.mkdir(parents=True)
    (libdir / "ld-linux-aarch64.so.1").write_bytes(b"\x7fELF")
    monkeypatch.setattr(grub, "can_run", lambda arch: (False, "arm64: not supported"))
    with pytest.raises(
        DiskError, match=r"arm64 tree's GRUB images .* cannot run arm64 binaries"
    ) as e:
        grub.tree_mkimage(tree, "arm64")
    assert "qemu-user-static" in (e.value.hint or "")
