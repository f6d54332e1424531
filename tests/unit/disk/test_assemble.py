"""assemble_disk end to end on a small tree: bit-identical output, and what the disk holds."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import time
from pathlib import Path

import pytest

from nvkr.disk import assemble_disk, min_size_bytes, prepare_boot_files
from nvkr.disk.layout import MIB
from nvkr.errors import DiskError
from tests.helpers.disk import EPOCH, SEED, make_tree, needs_grub, needs_tools, umask

pytestmark = [needs_tools, needs_grub]
SIZE = 128 * MIB


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _assemble(base: Path, *, mask: int, seed: str = SEED, size: int = SIZE):
    tree = make_tree(base / "tree")
    with umask(mask):
        layout = prepare_boot_files(
            tree, arch="amd64", seed=seed, kernel_args=["quiet"], epoch=EPOCH
        )
        work = base / "work"
        work.mkdir()
        result = assemble_disk(
            tree,
            base / "out" / "node.qcow2",
            layout=layout,
            size_bytes=size,
            epoch=EPOCH,
            workdir=work,
            log_file=base / "disk.log",
            keep_raw=True,
        )
    return layout, result


@pytest.fixture(scope="module")
def two_builds(tmp_path_factory):
    """The same inputs assembled twice: other dirs, umask, TZ, locale, and a second later."""
    mp = pytest.MonkeyPatch()
    try:
        mp.setenv("TZ", "America/New_York")
        mp.setenv("LC_ALL", "C")
        a = _assemble(tmp_path_factory.mktemp("first"), mask=0o002)
        time.sleep(1.1)  # the second tree's ctimes and atimes are a second later
        mp.setenv("TZ", "Asia/Kolkata")
        mp.setenv("LC_ALL", "C.UTF-8")
        b = _assemble(tmp_path_factory.mktemp("second-with-a-longer-name"), mask=0o022)
    finally:
        mp.undo()
    return a, b


def test_same_inputs_give_the_same_raw_and_qcow2(two_builds):
    (_, a), (_, b) = two_builds
    assert a.raw is not None and b.raw is not None
    assert a.raw != b.raw and a.qcow2 != b.qcow2
    assert _sha(a.raw) == _sha(b.raw)
    assert _sha(a.qcow2) == _sha(b.qcow2)
    assert a.qcow2_size == b.qcow2_size == a.qcow2.stat().st_size


def test_result_fields(two_builds):
    (layout, r), _ = two_builds
    assert r.raw_size == SIZE and r.raw is not None and r.raw.stat().st_size == SIZE
    assert (r.fs_uuid, r.root_partuuid, r.root_partition) == (
        layout.fs_uuid,
        layout.root_partuuid,
        3,
    )
    assert set(r.phases) == {"filesystem", "times", "bootloader", "disk", "convert"}
    assert all(v >= 0 for v in r.phases.values())
    assert r.grub_platforms == ("i386-pc", "x86_64-efi")
    assert r.inodes > 20
    assert r.raw.stat().st_blocks * 512 < SIZE // 4  # the raw disk stays sparse
    assert sorted(p.name for p in r.raw.parent.iterdir()) == ["disk.raw"]  # scratch removed
    assert sorted(p.name for p in r.qcow2.parent.iterdir()) == ["node.qcow2"]


def test_gpt_and_bios_boot_code(two_builds):
    (layout, r), _ = two_builds
    assert r.raw is not None
    table = json.loads(subprocess.check_output(["sfdisk", "--json", str(r.raw)]))
    parts = table["partitiontable"]["partitions"]
    assert [(p["start"], p["uuid"].lower(), p["name"]) for p in parts] == [
        (2048, layout.partitions[0].guid, "BIOS boot"),
        (4096, layout.partitions[1].guid, "EFI System"),
        (135168, layout.root_partuuid, "root-x86-64"),
    ]
    with open(r.raw, "rb") as f:
        mbr = f.read(512)
        f.seek(2048 * 512)
        core0 = f.read(512)
    assert struct.unpack_from("<Q", mbr, 0x5C)[0] == 2048  # core.img's first sector
    assert mbr[0x66:0x68] == b"\x90\x90" and mbr[0x1C2] == 0xEE and mbr[0x1FE:] == b"\x55\xaa"
    start, length, segment = struct.unpack_from("<QHH", core0, 500)
    assert (start, segment) == (2049, 0x820) and 100 < length < 888


def _partition(raw: Path, start: int, sectors: int, dest: Path) -> Path:
    with open(raw, "rb") as fi, open(dest, "wb") as fo:
        fi.seek(start * 512)
        left = sectors * 512
        while left:
            block = fi.read(min(left, 1 << 20))
            fo.write(block)
            left -= len(block)
    return dest


def test_esp_holds_the_efi_grub(two_builds, tmp_path):
    (layout, r), _ = two_builds
    assert r.raw is not None
    esp = _partition(r.raw, 4096, 131072, tmp_path / "esp.img")
    env = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}
    listing = subprocess.check_output(["mdir", "-i", str(esp), "::/EFI/BOOT"], env=env, text=True)
    assert "BOOTX64  EFI" in listing and "2025-12-01" in listing
    subprocess.run(["mcopy", "-i", str(esp), "::/EFI/BOOT/BOOTX64.EFI", str(tmp_path / "x.efi")],
                   env=env, check=True)  # fmt: skip
    efi = (tmp_path / "x.efi").read_bytes()
    assert efi[:2] == b"MZ" and layout.fs_uuid.encode() in efi
    subprocess.run(["fsck.fat", "-n", str(esp)], check=True, capture_output=True)


def test_root_file_system(two_builds, tmp_path):
    (layout, r), _ = two_builds
    assert r.raw is not None
    root = r.partitions[-1]
    img = _partition(r.raw, root.start, root.sectors, tmp_path / "root.ext4")
    head = subprocess.check_output(
        ["dumpe2fs", "-h", str(img)], text=True, stderr=subprocess.DEVNULL
    )
    assert f"Filesystem UUID:          {layout.fs_uuid}" in head
    assert f"Directory Hash Seed:      {layout.fs_hash_seed}" in head
    assert "Filesystem volume name:   nvkr-root" in head
    assert "orphan_file" not in head and "metadata_csum" in head
    assert f"Block count:              {root.size // 4096}" in head
    cfg = subprocess.check_output(["debugfs", "-R", "cat /boot/grub/grub.cfg", str(img)], text=True,
                                  stderr=subprocess.DEVNULL)  # fmt: skip
    assert f"root=UUID={layout.fs_uuid}" in cfg and cfg.rstrip().endswith("}")
    subprocess.run(["e2fsck", "-fn", str(img)], check=True, capture_output=True)


def test_qcow2_is_uncompressed_and_equals_the_raw(two_builds):
    (_, r), _ = two_builds
    assert r.raw is not None
    check = json.loads(
        subprocess.check_output(["qemu-img", "check", "--output=json", str(r.qcow2)])
    )
    assert check.get("compressed-clusters", 0) == 0 and check["check-errors"] == 0
    info = json.loads(subprocess.check_output(["qemu-img", "info", "--output=json", str(r.qcow2)]))
    assert info["format"] == "qcow2" and info["virtual-size"] == SIZE
    subprocess.run(
        ["qemu-img", "compare", "-f", "raw", "-F", "qcow2", str(r.raw), str(r.qcow2)],
        check=True,
        capture_output=True,
    )


def test_another_seed_gives_other_bytes(two_builds, tmp_path):
    (_, a), _ = two_builds
    _, c = _assemble(tmp_path, mask=0o022, seed="c0ffee" * 8)
    assert c.raw is not None and a.raw is not None
    assert _sha(c.raw) != _sha(a.raw)


def test_too_small_disk_names_both_sizes_and_leaves_nothing(tmp_path):
    tree = make_tree(tmp_path / "tree")
    (tree / "srv" / "blob").write_bytes(os.urandom(40 * MIB))
    layout = prepare_boot_files(tree, arch="amd64", seed=SEED, kernel_args=[], epoch=EPOCH)
    out = tmp_path / "out" / "node.qcow2"
    out.parent.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(DiskError, match=r"tree .* \(40\.\d MiB in \d+ inodes\) does not fit the root partition \(33.0 MiB\)") as e:  # fmt: skip
        assemble_disk(tree, out, layout=layout, size_bytes=100 * MIB, epoch=EPOCH, workdir=work)
    assert "make the disk at least" in (e.value.hint or "")
    assert list(out.parent.iterdir()) == []
    assert list(work.iterdir()) == []
    assert min_size_bytes(tree, layout=layout) > 100 * MIB


def test_tree_without_boot_files(tmp_path):
    tree = make_tree(tmp_path / "tree")
    from nvkr.disk import disk_layout

    with pytest.raises(DiskError, match=r"grub\.cfg is missing"):
        assemble_disk(
            tree,
            tmp_path / "x.qcow2",
            layout=disk_layout("amd64", SEED),
            size_bytes=SIZE,
            epoch=EPOCH,
            workdir=tmp_path,
        )


def test_a_secure_boot_chain_replaces_grubs_efi_image_on_the_esp(tmp_path):
    """With efi_files (a node image's secureBoot.uki: shim, MokManager, the signed UKI) the ESP
    holds those files under their removable-path names and no GRUB EFI image; GRUB still
    boots BIOS machines (amd64)."""
    tree = make_tree(tmp_path / "tree")
    layout = prepare_boot_files(tree, arch="amd64", seed=SEED, kernel_args=[], epoch=EPOCH)
    chain = {}
    for dest, data in (("EFI/BOOT/BOOTX64.EFI", b"MZshim"), ("EFI/BOOT/MMX64.EFI", b"MZmm"),
                       ("EFI/BOOT/GRUBX64.EFI", b"MZuki")):  # fmt: skip
        chain[dest] = tmp_path / dest.replace("/", "_")
        chain[dest].write_bytes(data)
    (tmp_path / "work").mkdir()
    r = assemble_disk(
        tree, tmp_path / "node.qcow2", layout=layout, size_bytes=SIZE, epoch=EPOCH,
        workdir=tmp_path / "work", keep_raw=True, efi_files=chain,
    )  # fmt: skip
    assert r.grub_platforms == ("i386-pc",) and r.raw is not None
    esp = _partition(r.raw, 4096, 131072, tmp_path / "esp.img")
    env = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}
    listing = subprocess.check_output(["mdir", "-i", str(esp), "::/EFI/BOOT"], env=env, text=True)
    names = {line.split()[0] for line in listing.splitlines() if " EFI " in line}
    assert {"BOOTX64", "MMX64", "GRUBX64"} <= names, listing
    for dest, src in chain.items():
        out = tmp_path / "read.efi"
        subprocess.run(["mcopy", "-n", "-i", str(esp), f"::/{dest}", str(out)], env=env, check=True)
        assert out.read_bytes() == src.read_bytes()
    subprocess.run(["fsck.fat", "-n", str(esp)], check=True, capture_output=True)


def test_a_secure_boot_chain_too_large_for_64_mib_gets_a_larger_esp(tmp_path):
    """Debian's generic arm64 kernel makes a 74 MB UKI: the ESP grows to 128 MiB to hold it
    (with 64 MiB mcopy failed with "Disk full"), and the root partition starts after it."""
    tree = make_tree(tmp_path / "tree")
    layout = prepare_boot_files(tree, arch="arm64", seed=SEED, kernel_args=[], epoch=EPOCH)
    chain = {}
    for dest, size in (("EFI/BOOT/BOOTAA64.EFI", 1_000_000), ("EFI/BOOT/MMAA64.EFI", 900_000),
                       ("EFI/BOOT/GRUBAA64.EFI", 74_339_264)):  # fmt: skip
        chain[dest] = tmp_path / dest.replace("/", "_")
        with open(chain[dest], "wb") as f:
            f.write(b"MZ" + dest.encode())
            f.truncate(size)
    (tmp_path / "work").mkdir()
    r = assemble_disk(
        tree, tmp_path / "node.qcow2", layout=layout, size_bytes=256 * MIB, epoch=EPOCH,
        workdir=tmp_path / "work", keep_raw=True, efi_files=chain,
    )  # fmt: skip
    assert r.raw is not None
    esp_part = r.partitions[0]
    assert (esp_part.partition.role, esp_part.start, esp_part.sectors) == (
        "esp", 2048, 128 * MIB // 512)  # fmt: skip
    assert r.partitions[-1].start == 129 * MIB // 512
    esp = _partition(r.raw, 2048, 128 * MIB // 512, tmp_path / "esp.img")
    env = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}
    out = tmp_path / "read.efi"
    subprocess.run(["mcopy", "-n", "-i", str(esp), "::/EFI/BOOT/GRUBAA64.EFI", str(out)],
                   env=env, check=True)  # fmt: skip
    assert out.read_bytes() == chain["EFI/BOOT/GRUBAA64.EFI"].read_bytes()
    subprocess.run(["fsck.fat", "-n", str(esp)], check=True, capture_output=True)


def test_an_esp_too_small_for_its_files_is_named_before_mkfs(tmp_path):
    from nvkr.disk import fat

    big = tmp_path / "uki.efi"
    with open(big, "wb") as f:
        f.truncate(70 * MIB)
    with pytest.raises(DiskError, match=r"ESP's files \(73400320 bytes: EFI/BOOT/GRUBAA64\.EFI "
                       r"73400320\) do not fit its 64 MiB"):  # fmt: skip
        fat.make_esp(tmp_path / "esp.fat", size=64 * MIB, files={"EFI/BOOT/GRUBAA64.EFI": big},
                     volume_id="12345678", label="ESP", hidden_sectors=2048, epoch=EPOCH,
                     workdir=tmp_path)  # fmt: skip
    assert not (tmp_path / "esp.fat").exists()
