"""End to end: the default recipe's hopper/amd64 node image with cloud-init, booted in QEMU.

(A boot with NoCloud user-data is the catalog leaf's Cluster API bootstrap test,
tests/integration/test_catalog_leaf.py; ``boot-test --user-data``'s CLI is tested against a fake
QEMU in tests/unit/boot/test_user_data.py.)

* The unbooted image holds nothing of a first run (read from its root file system).
* A config drive as Metal3/Ironic writes it: a config-2 partition (vfat, openstack/latest/
  meta_data.json) added at the end of a grown copy of the image. Booted on a writable overlay,
  cloud-init reads it (ConfigDrive), nvkr's growroot and cloud-init's growpart grow the root
  partition only up to it, and after power-off the partition table's config-2 entry and the
  partition's bytes are unchanged and /etc/hostname holds the config drive's hostname.

The image comes from the session's default build (its release set), or
from ``$NVKR_TEST_BUILT_STORE`` (a store holding an earlier build of the default recipe,
hard-linked: only what changed is rebuilt) to run this module alone. Boots run under TCG on
loaded machines too: their timeouts are generous.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from nvkr.agent_labels import AGENT_LABELS, check_agent_labels
from nvkr.machine.boot import boot_test
from tests.helpers.disk import debugfs_read
from tests.helpers.nvkr import machine_image, make_clone, seed_from_build, start_nvkr

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="mmdebstrap --mode=root needs root"),
    pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="qemu missing"),
    pytest.mark.skipif(shutil.which("cloud-init") is None, reason="cloud-init missing"),
    # the image comes from the session's default build unless $NVKR_TEST_BUILT_STORE names one
    *([] if os.environ.get("NVKR_TEST_BUILT_STORE") else [pytest.mark.default_build]),
]

BOOT_TIMEOUT = 1800.0  # seconds: cloud-init's four stages under TCG on two loaded cores
CONFIG_DRIVE_HOST = "cfgdrive-node"


@pytest.fixture(scope="module")
def cloud_init_image(tmp_path_factory, request) -> Path:
    """The hopper/amd64 QCOW2 of the default recipe as this tree builds it: from the session's
    default build (``default_build``, made for other tests anyway: a no-op here), or, to run this
    module alone, from a store holding an earlier build (``$NVKR_TEST_BUILT_STORE``)."""
    built = os.environ.get("NVKR_TEST_BUILT_STORE")
    if built:
        tmp = tmp_path_factory.mktemp("cloud-init-image")
        store = seed_from_build(tmp / "store", Path(built))
        clone = make_clone(tmp / "clone")
        res = start_nvkr(
            "build", "--locked", "--variant", "gpu=hopper,arch=amd64", cwd=clone, store=store,
            timeout=3600,
        ).result()  # fmt: skip
        assert res.code == 0, res.stderr
    else:  # the session's build wrote every variant's image into its clone's release set
        clone = request.getfixturevalue("default_build").clone
    return machine_image(clone / "dist" / "nvkr-default-k8s1.36", gpu="hopper", arch="amd64")


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
            chunk = f.read(min(left, 1 << 20))
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()


def _config_drive(work: Path, size: int) -> Path:
    """A vfat file system labelled config-2 with openstack/latest/meta_data.json (the config
    drive layout, as Ironic writes it)."""
    fs = work / "config-2.img"
    with open(fs, "wb") as f:
        f.truncate(size)
    env = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}
    subprocess.run(["mkfs.fat", "-n", "config-2", str(fs)], check=True, capture_output=True)
    meta = work / "meta_data.json"
    meta.write_text(json.dumps({"uuid": "7c1bb0a6-7bd0-4f7e-9d3c-0b2b1f0f7a10",
                                "hostname": CONFIG_DRIVE_HOST, "name": CONFIG_DRIVE_HOST}))  # fmt: skip
    for d in ("::/openstack", "::/openstack/latest"):
        subprocess.run(["mmd", "-i", str(fs), d], check=True, env=env)
    subprocess.run(["mcopy", "-i", str(fs), str(meta), "::/openstack/latest/meta_data.json"],
                   check=True, env=env)  # fmt: skip
    return fs


def test_the_image_holds_nothing_of_a_first_run(cloud_init_image, tmp_path) -> None:
    """Read from the image's root file system, unbooted: machine-id(5)'s first-boot marker, no
    host name, no cloud-init instance state, no SSH host keys; nvkr's datasources."""
    disk = tmp_path / "disk.raw"
    subprocess.run(["qemu-img", "convert", "-O", "raw", str(cloud_init_image), str(disk)],
                   check=True)  # fmt: skip
    assert debugfs_read(disk, "/etc/machine-id") == "uninitialized\n"
    assert debugfs_read(disk, "/etc/hostname") == ""
    assert "127.0.1.1" not in debugfs_read(disk, "/etc/hosts")
    cfg = debugfs_read(disk, "/etc/cloud/cloud.cfg.d/90-nvkr.cfg")
    assert "\ndatasource_list: [ NoCloud, ConfigDrive, None ]\n" in cfg
    listing = debugfs_read(disk, "/var/lib/cloud", command="ls -l")
    assert set(_names(listing)) <= {".", ".."}, listing
    assert "ssh_host_" not in debugfs_read(disk, "/etc/ssh", command="ls -l")


def _names(listing: str) -> list[str]:
    return [line.split()[-1] for line in listing.splitlines() if line.strip()]


def test_a_config_drive_partition_is_read_and_left_alone(cloud_init_image, tmp_path) -> None:
    disk = tmp_path / "disk.raw"
    subprocess.run(["qemu-img", "convert", "-O", "raw", str(cloud_init_image), str(disk)],
                   check=True)  # fmt: skip
    mib = 1024 * 1024
    with open(disk, "r+b") as f:
        f.truncate(disk.stat().st_size + 128 * mib)  # the disk is larger than the image
    subprocess.run(["sfdisk", "--relocate", "gpt-bak-std", str(disk)], check=True,
                   capture_output=True)  # fmt: skip
    sectors, drive = disk.stat().st_size // 512, 64 * mib // 512
    start = (sectors - 34 - drive) // 2048 * 2048  # at the end, before the backup GPT
    subprocess.run(["sfdisk", "--append", str(disk)], check=True, capture_output=True,
                   input=f"start={start}, size={drive}, name=config-2\n".encode())  # fmt: skip
    fs = _config_drive(tmp_path, drive * 512)
    subprocess.run(["dd", f"if={fs}", f"of={disk}", "bs=512", f"seek={start}", "conv=notrunc",
                    "status=none"], check=True)  # fmt: skip
    before = _sfdisk(disk)
    drive_part = before["partitions"][-1]
    drive_bytes = _partition_bytes(disk, drive_part)
    overlay = tmp_path / "overlay.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(disk), "-F", "raw",
                    str(overlay)], check=True)  # fmt: skip
    result = boot_test(
        overlay, accel="tcg", timeout=BOOT_TIMEOUT, snapshot=False, then=AGENT_LABELS,
        then_timeout=BOOT_TIMEOUT, log_file=tmp_path / "console.log",
        wait_for=[r"Cloud-init v\. \S+ finished at .*DataSourceConfigDrive"],
    )  # fmt: skip
    assert check_agent_labels(result.matched, result.lines)
    # cloud-init's growpart (cloud-init.service) grows the root up to config-2; nvkr-growroot,
    # after it, finds nothing to do and says why
    (grown,) = [line for line in result.lines if "nvkr-growroot: partition" in line]
    assert "already ends at the end of the disk or at the next partition" in grown
    after_disk = tmp_path / "after.raw"
    subprocess.run(["qemu-img", "convert", "-O", "raw", str(overlay), str(after_disk)],
                   check=True)  # fmt: skip
    after = _sfdisk(after_disk)
    assert after["partitions"][-1] == drive_part
    assert _partition_bytes(after_disk, after["partitions"][-1]) == drive_bytes
    root_before, root_after = before["partitions"][-2], after["partitions"][-2]
    assert root_after["start"] == root_before["start"]
    assert root_before["size"] <= root_after["size"]
    assert root_after["start"] + root_after["size"] <= drive_part["start"]
    hostname = debugfs_read(after_disk, "/etc/hostname", partition=-2, unclean=True)
    assert hostname.strip() == CONFIG_DRIVE_HOST
    print(f"root partition: {root_before['size'] * 512 // mib} MiB -> "
          f"{root_after['size'] * 512 // mib} MiB; config-2 at sector {drive_part['start']}")  # fmt: skip
