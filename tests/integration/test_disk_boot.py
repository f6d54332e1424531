"""A node image that boots by itself under QEMU/TCG, in one boot: OVMF, on a disk larger than the
image (growroot grows the root partition and file system), to the node agent's readiness line
and labels. The image is the session's default build's blackwell amd64 one (the node-image
builder's :func:`nvkr.disk.assemble_disk` of the default amd64 root filesystem). SeaBIOS boots
amd64 images in hopper's config-drive boot (tests/integration/test_cloud_init_boot.py) and the
catalog leaves' Cluster API boots (tests/integration/test_catalog_leaf.py); hopper's arm64 image
boots through the CLI in tests/integration/test_node_image.py. Prints the time of every step
(run with ``-s``).

Set ``NVKR_TEST_ROOTFS_TAR`` to an mmdebstrap tar (linux-image-cloud-amd64, grub-pc-bin,
grub-efi-amd64-bin, initramfs-tools, udev, cloud-guest-utils, e2fsprogs) to assemble and boot
that instead, without the default build (it has no node agent: the boot ends at growroot).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from nvkr.disk import assemble_disk, prepare_boot_files
from nvkr.machine.boot import boot_test
from nvkr.machine.qemu import OVMF

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
    TIMINGS[key] = value
    print(f"\n[timing] {key}: {json.dumps(value)}")


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


@pytest.fixture(scope="module")
def node_image(request, tmp_path_factory) -> Image:
    """The blackwell amd64 node image of the session's default build (the node-image builder's
    :func:`nvkr.disk.assemble_disk` of the default rootfs; its assembly's reproducibility is the
    session's ``verify --rebuild``'s, from another store and extraction), or, with
    ``$NVKR_TEST_ROOTFS_TAR``, that tar assembled here into a 2 GiB disk."""
    given = os.environ.get("NVKR_TEST_ROOTFS_TAR")
    if given and Path(given).is_file():
        result = _assemble(Path(given), tmp_path_factory.mktemp("image"))
        _report("assemble phases (seconds)", result.phases)
        return Image(result.qcow2, result.fs_uuid, agent=False)
    from tests.helpers.disk import read_root_file
    from tests.helpers.nvkr import machine_image

    layout = request.getfixturevalue("default_build").clone / "dist" / "nvkr-default-k8s1.36"
    qcow2 = machine_image(layout, gpu="blackwell", arch="amd64")
    raw = tmp_path_factory.mktemp("image") / "disk.raw"
    subprocess.run(["qemu-img", "convert", "-O", "raw", str(qcow2), str(raw)], check=True)
    fstab = read_root_file(raw, "/etc/fstab")
    raw.unlink()
    (uuid,) = re.findall(r"^UUID=(\S+)\s+/\s", fstab, re.M)
    return Image(qcow2, uuid, agent=True)


#: growroot's verdict on a disk larger than the image
GROWN = r"nvkr-growroot: The filesystem on /dev/vda3 is now \d+ \(4k\) blocks long"


@pytest.mark.skipif(not Path(OVMF[0]).is_file(), reason="ovmf missing")
def test_boots_by_itself_with_ovmf_grows_its_root_and_reports_ready(node_image, tmp_path):
    """One boot (each TCG boot is a minute of both cores): OVMF, a 6 GiB overlay of the image
    (growroot grows partition 3 and its file system to the disk's end), then the agent's
    readiness line and labels (no GPU in QEMU; the two binaries of the image's manifest
    checked)."""
    from nvkr.agent_labels import AGENT_LABELS, check_agent_labels

    bigger = tmp_path / "bigger.qcow2"
    subprocess.run(
        ["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(node_image.qcow2), "-F", "qcow2",
         str(bigger), "6G"],
        check=True,
    )  # fmt: skip
    agent = {"expect": r"nvkr-node-agent: ready", "then": AGENT_LABELS, "wait_for": [GROWN]}
    result = boot_test(
        bigger, fail=BROKEN, firmware="efi", timeout=900, then_timeout=900,
        log_file=tmp_path / "efi.log", **(agent if node_image.agent else {"expect": GROWN}),
    )  # fmt: skip
    _report("boot seconds (OVMF, grow, " + result.accel + ")", result.seconds)
    assert result.firmware == "efi"
    lines = "\n".join(result.lines)
    assert f"root=UUID={node_image.fs_uuid}" in lines
    assert "CHANGED: partition=3" in lines
    if not node_image.agent:
        return
    assert "manifest=ok(2 files)" in result.matched, "the agent checked node-agent and kubectl"
    # the agent's labels agree with its readiness line: no GPU in QEMU, so no generation found
    labels = check_agent_labels(result.matched, result.lines)
    assert (labels["nvidia.com/gpu.present"], labels["nvidia.com/gpu.count"]) == ("false", "0")


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
