"""A node image that boots by itself under QEMU, in one boot: OVMF, on a disk larger than the
image that ends in a config drive as Metal3/Ironic writes it (a config-2 partition: vfat,
openstack/latest/meta_data.json and user_data), to the node agent's readiness line and labels.
cloud-init reads the config drive (ConfigDrive): its host name from the meta-data, and the
user-data's ``growpart: {mode: "off"}`` leaves the growth to nvkr's growroot, which grows the
root partition and file system up to the config-2 partition and not over it; after power-off
the config-2 entry and its bytes are unchanged. The image is the session's default build's
blackwell amd64 one (the node-image builder's :func:`nvkr.disk.assemble_disk` of the default
amd64 root filesystem). SeaBIOS boots amd64 images in the catalog leaves' Cluster API boots
(tests/integration/test_catalog_leaf.py, NoCloud user-data, where cloud-init's own growpart
finds the root at the disk's end); hopper's arm64 image boots through the CLI in
tests/integration/test_node_image.py. The boot runs in the background from the session's
first test (:func:`start_in_background`), once the default build is done, beside the tests that
read it. Prints the time of every step (run with ``-s``).

Set ``NVKR_TEST_ROOTFS_TAR`` to an mmdebstrap tar (linux-image-cloud-amd64, grub-pc-bin,
grub-efi-amd64-bin, initramfs-tools, udev, cloud-guest-utils, e2fsprogs) to assemble and boot
that instead, without the default build (it has no node agent nor cloud-init: the boot ends
at growroot).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nvkr.disk import assemble_disk, prepare_boot_files
from nvkr.machine.boot import boot_test
from nvkr.machine.qemu import OVMF
from tests.helpers.background import BackgroundTest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="mmdebstrap --mode=root needs root"),
    pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="qemu missing"),
    # the image comes from the session's default build unless $NVKR_TEST_ROOTFS_TAR names a tar
    *([] if os.environ.get("NVKR_TEST_ROOTFS_TAR") else [pytest.mark.default_build]),
]

EPOCH = 1764547200
SEED = hashlib.sha256(b"nvkr integration test node image").hexdigest()
SIZE = 2 << 30
# Booted: growroot's last line (resize2fs's verdict), which its unit writes to the console itself
# (StandardOutput=journal+console). systemd's own status lines ("Finished nvkr-growroot",
# "Reached target multi-user") stop once the serial getty holds the console, and under load the
# getty started first: the console then never showed them (seen: a 300 s timeout after growroot's
# "Nothing to do!" line, SeaBIOS and OVMF alike).
BOOTED = r"nvkr-growroot: The filesystem (?:is already|on \S+ is now) \d+ \(4k\) blocks long"
BROKEN = r"Kernel panic|emergency mode|Failed to start|nvkr-growroot: .*failed"
TIMINGS: dict[str, object] = {}


def _report(key: str, value: object) -> None:
    """Keep a figure, and show it (with -s): on the process's own stderr, never ``print``'s
    ``sys.stdout``, which a background boot shares with whatever test runs meanwhile (an
    in-process CLI's captured stdout, whose JSON it broke: ci21)."""
    TIMINGS[key] = value
    (sys.__stderr__ or sys.stderr).write(f"\n[timing] {key}: {json.dumps(value)}\n")


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


@dataclass
class Image:
    """A node image to boot: its QCOW2, its root file system's UUID and whether it holds the
    node agent (the default build's images do; an assembled ``$NVKR_TEST_ROOTFS_TAR`` not)."""

    qcow2: Path
    fs_uuid: str
    agent: bool


def _default_image(started: Future[Any], work: Path) -> Image:
    """The blackwell amd64 node image of the session's default build (the node-image builder's
    :func:`nvkr.disk.assemble_disk` of the default rootfs; its assembly's reproducibility is the
    session's ``verify --rebuild``'s, from another store and extraction), once ``started`` (the
    session's ``_default_build_started``) has it."""
    from tests.helpers.disk import read_root_file
    from tests.helpers.nvkr import machine_image

    clone, _, first = started.result().first
    assert first.code == 0, f"the session's default build failed: {first.stderr[-3000:]}"
    layout = clone / "dist" / "nvkr-default-k8s1.36"
    qcow2 = machine_image(layout, gpu="blackwell", arch="amd64")
    raw = work / "image.raw"
    subprocess.run(["qemu-img", "convert", "-O", "raw", str(qcow2), str(raw)], check=True)
    fstab = read_root_file(raw, "/etc/fstab")
    raw.unlink()
    (uuid,) = re.findall(r"^UUID=(\S+)\s+/\s", fstab, re.M)
    return Image(qcow2, uuid, agent=True)


def start_in_background(request: pytest.FixtureRequest) -> BackgroundTest:
    """The boot, started at the session's first test in a thread of its own
    (tests/helpers/background.py): it waits for the session's default build, then boots in a
    child process (tests/helpers/boot_child.py) while the tests reading that build run; with
    ``$NVKR_TEST_ROOTFS_TAR``, it assembles that tar into a 2 GiB disk first."""
    if not Path(OVMF[0]).is_file() or shutil.which("mkfs.fat") is None:
        return BackgroundTest.start(request, "disk-boot", lambda tmp: None)  # the test skips
    given = os.environ.get("NVKR_TEST_ROOTFS_TAR")
    if given and Path(given).is_file():

        def assembled(tmp: Path) -> None:
            result = _assemble(Path(given), tmp / "image")
            _report("assemble phases (seconds)", result.phases)
            _boot_and_check(Image(result.qcow2, result.fs_uuid, agent=False), tmp)

        return BackgroundTest.start(request, "disk-boot", assembled)

    def default(tmp: Path, started: Future[Any]) -> None:
        _boot_and_check(_default_image(started, tmp), tmp)

    return BackgroundTest.start(request, "disk-boot", default, "_default_build_started")


#: growroot's verdict on a disk larger than the image
GROWN = r"nvkr-growroot: The filesystem on /dev/vda3 is now \d+ \(4k\) blocks long"
#: cloud-init's last line, naming the datasource it found
CONFIG_DRIVE_READ = r"Cloud-init v\. \S+ finished at .*DataSourceConfigDrive"
CONFIG_DRIVE_HOST = "cfgdrive-node"
#: what the config drive's user_data asks: cloud-init's growpart off, so nvkr's growroot grows
CONFIG_DRIVE_USER_DATA = '#cloud-config\ngrowpart: {mode: "off"}\n'
MIB = 1 << 20
#: the disk: the image's 4 GiB, 2 GiB to grow into, and the config drive at the end
DISK_SIZE, DRIVE_SIZE = 6 << 30, 64 * MIB


def _config_drive(work: Path, size: int) -> Path:
    """A vfat file system labelled config-2 with openstack/latest/meta_data.json and user_data
    (the config drive layout, as Ironic writes it)."""
    fs = work / "config-2.img"
    with open(fs, "wb") as f:
        f.truncate(size)
    env = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}
    subprocess.run(["mkfs.fat", "-n", "config-2", str(fs)], check=True, capture_output=True)
    files = {
        "meta_data.json": json.dumps({"uuid": "7c1bb0a6-7bd0-4f7e-9d3c-0b2b1f0f7a10",
                                      "hostname": CONFIG_DRIVE_HOST, "name": CONFIG_DRIVE_HOST}),
        "user_data": CONFIG_DRIVE_USER_DATA,
    }  # fmt: skip
    for d in ("::/openstack", "::/openstack/latest"):
        subprocess.run(["mmd", "-i", str(fs), d], check=True, env=env)
    for name, text in files.items():
        (work / name).write_text(text)
        subprocess.run(["mcopy", "-i", str(fs), str(work / name), f"::/openstack/latest/{name}"],
                       check=True, env=env)  # fmt: skip
    return fs


def _with_config_drive(image: Path, work: Path) -> Path:
    """A raw copy of ``image`` grown to :data:`DISK_SIZE`, its backup GPT moved to the new end
    and a config-2 partition of :data:`DRIVE_SIZE` appended before it, holding
    :func:`_config_drive` (as Ironic writes a config drive onto a host's disk)."""
    disk = work / "disk.raw"
    subprocess.run(["qemu-img", "convert", "-O", "raw", str(image), str(disk)], check=True)
    with open(disk, "r+b") as f:
        f.truncate(DISK_SIZE)
    subprocess.run(["sfdisk", "--relocate", "gpt-bak-std", str(disk)], check=True,
                   capture_output=True)  # fmt: skip
    sectors, drive = DISK_SIZE // 512, DRIVE_SIZE // 512
    start = (sectors - 34 - drive) // 2048 * 2048  # at the end, before the backup GPT
    subprocess.run(["sfdisk", "--append", str(disk)], check=True, capture_output=True,
                   input=f"start={start}, size={drive}, name=config-2\n".encode())  # fmt: skip
    fs = _config_drive(work, DRIVE_SIZE)
    subprocess.run(["dd", f"if={fs}", f"of={disk}", "bs=512", f"seek={start}", "conv=notrunc",
                    "status=none"], check=True)  # fmt: skip
    fs.unlink()
    return disk


def _sfdisk(disk: Path) -> dict:
    """sfdisk's table of ``disk``, without the partitions' node names (the file's name)."""
    out = subprocess.run(["sfdisk", "--json", str(disk)], capture_output=True, check=True)
    table: dict = json.loads(out.stdout)["partitiontable"]
    for part in table["partitions"]:
        del part["node"]
    return table


def _partition_bytes(disk: Path, part: dict) -> str:
    h = hashlib.sha256()
    with open(disk, "rb") as f:
        f.seek(part["start"] * 512)
        left = part["size"] * 512
        while left:
            chunk = f.read(min(left, MIB))
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()


@pytest.mark.skipif(not Path(OVMF[0]).is_file(), reason="ovmf missing")
@pytest.mark.skipif(shutil.which("mkfs.fat") is None, reason="dosfstools missing")
def test_boots_with_ovmf_reads_its_config_drive_grows_its_root_up_to_it_and_reports_ready(
    _started_in_background,
):
    """:func:`_boot_and_check`, run in the background (:func:`start_in_background`)."""
    _started_in_background[__name__].check()


def _boot_and_check(node_image: Image, tmp_path: Path) -> None:
    """One boot (each TCG boot is a minute of a core), on a writable overlay of
    :func:`_with_config_drive`: growroot grows partition 3 and its file system up to the
    config-2 partition, cloud-init names ConfigDrive as its datasource and writes the config
    drive's host name; then the agent's readiness line and labels (no GPU in QEMU; the two
    binaries of the image's manifest checked). After power-off: the config-2 entry and bytes
    unchanged, the root grown but ending before them."""
    from nvkr.agent_labels import AGENT_LABELS, check_agent_labels
    from tests.helpers.boot_child import boot_test
    from tests.helpers.disk import debugfs_read

    disk = _with_config_drive(node_image.qcow2, tmp_path)
    before = _sfdisk(disk)
    drive_part = before["partitions"][-1]
    drive_bytes = _partition_bytes(disk, drive_part)
    overlay = tmp_path / "overlay.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(disk), "-F", "raw",
                    str(overlay)], check=True)  # fmt: skip
    agent = {
        "expect": r"nvkr-node-agent: ready", "then": AGENT_LABELS,
        "wait_for": [GROWN, CONFIG_DRIVE_READ],
    }  # fmt: skip
    result = boot_test(
        overlay, fail=BROKEN, firmware="efi", timeout=1800, then_timeout=900, snapshot=False,
        log_file=tmp_path / "efi.log", **(agent if node_image.agent else {"expect": GROWN}),
    )  # fmt: skip
    _report("boot seconds (OVMF, config drive, grow, " + result.accel + ")", result.seconds)
    assert result.firmware == "efi"
    lines = "\n".join(result.lines)
    assert f"root=UUID={node_image.fs_uuid}" in lines
    assert "nvkr-growroot: CHANGED: partition=3" in lines, "growroot grew it, not cloud-init"

    after_disk = tmp_path / "after.raw"
    subprocess.run(["qemu-img", "convert", "-O", "raw", str(overlay), str(after_disk)],
                   check=True)  # fmt: skip
    overlay.unlink()
    after = _sfdisk(after_disk)
    assert after["partitions"][-1] == drive_part, "the config-2 entry is as Ironic wrote it"
    assert _partition_bytes(after_disk, after["partitions"][-1]) == drive_bytes
    root_before, root_after = before["partitions"][-2], after["partitions"][-2]
    assert root_after["start"] == root_before["start"]
    assert root_before["size"] < root_after["size"]
    assert root_after["start"] + root_after["size"] <= drive_part["start"]
    assert drive_part["start"] - (root_after["start"] + root_after["size"]) < 2048, "up to it"
    _report("root partition (MiB)", [root_before["size"] * 512 // MIB,
                                      root_after["size"] * 512 // MIB])  # fmt: skip
    if not node_image.agent:
        return
    assert "manifest=ok(2 files)" in result.matched, "the agent checked node-agent and kubectl"
    # the agent's labels agree with its readiness line: no GPU in QEMU, so no generation found
    labels = check_agent_labels(result.matched, result.lines)
    assert (labels["nvidia.com/gpu.present"], labels["nvidia.com/gpu.count"]) == ("false", "0")
    hostname = debugfs_read(after_disk, "/etc/hostname", partition=-2, unclean=True)
    assert hostname.strip() == CONFIG_DRIVE_HOST


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
