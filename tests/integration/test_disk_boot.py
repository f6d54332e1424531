"""A real Debian 12 tree (mmdebstrap from Debian's mirror) assembled into a 2 GiB node image that
boots by itself under QEMU/TCG: SeaBIOS and OVMF, growroot on a larger disk, a bit-identical
rebuild. Prints the time of every step (run with ``-s`` to see them).

Set ``NVKR_TEST_ROOTFS_TAR`` to an mmdebstrap tar with the same packages to skip the download.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from nvkr.disk import assemble_disk, prepare_boot_files
from nvkr.machine.boot import boot_test
from nvkr.machine.qemu import OVMF

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="mmdebstrap --mode=root needs root"),
    pytest.mark.skipif(shutil.which("mmdebstrap") is None, reason="mmdebstrap missing"),
    pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="qemu missing"),
    # the rootfs comes from the session's default build unless $NVKR_TEST_ROOTFS_TAR names one
    *([] if os.environ.get("NVKR_TEST_ROOTFS_TAR") else [pytest.mark.default_build]),
]

EPOCH = 1764547200
SEED = hashlib.sha256(b"nvkr integration test node image").hexdigest()
SIZE = 2 << 30
PACKAGES = (
    "systemd-sysv,linux-image-cloud-amd64,grub-pc-bin,grub-efi-amd64-bin,initramfs-tools,udev,"
    "cloud-guest-utils,e2fsprogs"
)
MIRRORS = [
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
]
# Booted: growroot's last line (resize2fs's verdict), which its unit writes to the console itself
# (StandardOutput=journal+console). systemd's own status lines ("Finished nvkr-growroot",
# "Reached target multi-user") stop once the serial getty holds the console, and under load the
# getty started first: the console then never showed them (seen: a 300 s timeout after growroot's
# "Nothing to do!" line, SeaBIOS and OVMF alike).
BOOTED = r"nvkr-growroot: The filesystem (?:is already|on \S+ is now) \d+ \(4k\) blocks long"
BROKEN = r"Kernel panic|emergency mode|Failed to start|nvkr-growroot: .*failed"
TIMINGS: dict[str, object] = {}


def _report(key: str, value: object) -> None:
    TIMINGS[key] = value
    print(f"\n[timing] {key}: {json.dumps(value)}")


def _default_build_rootfs(store: Path, arch: str) -> Path | None:
    """The rootfs tar of ``arch`` the session's default build made (its rootfs action's output)."""
    for entry in sorted((store / "actions").glob("*.json")):
        result = json.loads(entry.read_text())
        meta = result.get("metadata") or {}
        outputs = result.get("outputs") or []
        if meta.get("arch") == arch and [o.get("name") for o in outputs] == ["rootfs.tar"]:
            return store / "blobs" / "sha256" / outputs[0]["digest"][7:]
    return None


@pytest.fixture(scope="module")
def rootfs_tar(tmp_path_factory, request) -> Path:
    """``$NVKR_TEST_ROOTFS_TAR``, else the amd64 rootfs of the session's default build (made
    by nvkr's rootfs builder from the locked .debs: kernel, GRUB, cloud-guest-utils included),
    else a fresh mmdebstrap from Debian's mirror."""
    given = os.environ.get("NVKR_TEST_ROOTFS_TAR")
    if given and Path(given).is_file():
        return Path(given)
    built = _default_build_rootfs(request.getfixturevalue("default_build").store, "amd64")
    if built is not None:
        return built
    out = tmp_path_factory.mktemp("rootfs") / "rootfs.tar"
    start = time.monotonic()
    subprocess.run(
        ["mmdebstrap", "--mode=root", "--variant=minbase", f"--include={PACKAGES}",
         "--components=main", "bookworm", str(out), *MIRRORS],
        env={**os.environ, "SOURCE_DATE_EPOCH": str(EPOCH)},
        check=True,
        capture_output=True,
    )  # fmt: skip
    _report("mmdebstrap seconds", round(time.monotonic() - start, 1))
    return out


def _extract(tar: Path, dest: Path) -> Path:
    dest.mkdir(parents=True)
    subprocess.run(
        ["tar", "--xattrs", "--xattrs-include=*", "--numeric-owner", "-C", str(dest), "-xpf",
         str(tar)],
        check=True,
    )  # fmt: skip
    return dest


def _assemble(tar: Path, base: Path):
    tree = _extract(tar, base / "tree")
    layout = prepare_boot_files(tree, arch="amd64", seed=SEED, kernel_args=[], epoch=EPOCH)
    work = base / "work"
    work.mkdir()
    result = assemble_disk(
        tree,
        base / "node.qcow2",
        layout=layout,
        size_bytes=SIZE,
        epoch=EPOCH,
        workdir=work,
        log_file=base / "disk.log",
    )
    shutil.rmtree(tree)
    return result


@pytest.fixture(scope="module")
def node_image(rootfs_tar, tmp_path_factory):
    result = _assemble(rootfs_tar, tmp_path_factory.mktemp("image"))
    _report("assemble phases (seconds)", result.phases)
    _report("image", {"qcow2_bytes": result.qcow2_size, "inodes": result.inodes})
    return result


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def test_boots_by_itself_with_seabios(node_image, tmp_path):
    result = boot_test(
        node_image.qcow2, expect=BOOTED, fail=BROKEN, timeout=300, log_file=tmp_path / "b.log"
    )
    _report("boot seconds (SeaBIOS, " + result.accel + ")", result.seconds)
    text = "\n".join(result.lines)
    assert f"root=UUID={node_image.fs_uuid}" in text
    assert "Nothing to do!" in result.matched, "a disk of the image's size has nothing to grow"


@pytest.mark.skipif(not Path(OVMF[0]).is_file(), reason="ovmf missing")
def test_boots_by_itself_with_ovmf(node_image):
    result = boot_test(node_image.qcow2, expect=BOOTED, fail=BROKEN, firmware="efi", timeout=300)
    _report("boot seconds (OVMF, " + result.accel + ")", result.seconds)
    assert result.firmware == "efi"


def test_root_grows_to_a_larger_disk(node_image, tmp_path):
    bigger = tmp_path / "bigger.qcow2"
    subprocess.run(
        ["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(node_image.qcow2), "-F", "qcow2",
         str(bigger), "3G"],
        check=True,
    )  # fmt: skip
    result = boot_test(
        bigger,
        expect=r"nvkr-growroot: The filesystem on /dev/vda3 is now \d+ \(4k\) blocks long",
        fail=BROKEN,
        timeout=300,
    )
    assert any("CHANGED: partition=3" in line for line in result.lines)


def test_rebuild_from_another_extraction_is_bit_identical(node_image, rootfs_tar, tmp_path):
    again = _assemble(rootfs_tar, tmp_path / "again-elsewhere")
    assert _sha256(again.qcow2) == _sha256(node_image.qcow2)


@pytest.mark.skipif(
    not Path(os.environ.get("NVKR_TEST_ROOTFS_TAR_ARM64", "/nonexistent")).is_file(),
    reason="set NVKR_TEST_ROOTFS_TAR_ARM64 to an arm64 mmdebstrap tar (linux-image-cloud-arm64, "
    "grub-efi-arm64-bin, ...); building one under emulation takes about 5 minutes",
)
def test_arm64_boots_by_itself_with_uefi(tmp_path):
    tar = Path(os.environ["NVKR_TEST_ROOTFS_TAR_ARM64"])
    tree = _extract(tar, tmp_path / "tree")
    layout = prepare_boot_files(tree, arch="arm64", seed=SEED, kernel_args=[], epoch=EPOCH)
    work = tmp_path / "work"
    work.mkdir()
    result = assemble_disk(
        tree, tmp_path / "arm64.qcow2", layout=layout, size_bytes=SIZE, epoch=EPOCH, workdir=work
    )
    assert result.grub_platforms == ("arm64-efi",) and result.root_partition == 2
    booted = boot_test(result.qcow2, arch="arm64", expect=BOOTED, fail=BROKEN, timeout=600)
    _report("boot seconds (arm64 UEFI, " + booted.accel + ")", booted.seconds)
    assert booted.firmware == "efi"
