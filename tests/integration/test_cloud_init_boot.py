"""The default recipe's hopper/amd64 node image holds nothing of a first run, read unbooted.

Its boots are elsewhere: with a config drive as Metal3/Ironic writes it (cloud-init's
ConfigDrive, the root grown up to the config-2 partition and not over it) in
tests/integration/test_disk_boot.py; with NoCloud user-data in the catalog leaf's Cluster API
bootstrap tests (tests/integration/test_catalog_leaf.py); ``boot-test --user-data``'s CLI is tested
against a fake QEMU in tests/unit/boot/test_user_data.py.

The image comes from the session's default build (its release set), or
from ``$NVKR_TEST_BUILT_STORE`` (a store holding an earlier build of the default recipe,
hard-linked: only what changed is rebuilt) to run this module alone.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers.disk import debugfs_read
from tests.helpers.nvkr import machine_image, make_clone, seed_from_build, start_nvkr

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="mmdebstrap --mode=root needs root"),
    # the image comes from the session's default build unless $NVKR_TEST_BUILT_STORE names one
    *([] if os.environ.get("NVKR_TEST_BUILT_STORE") else [pytest.mark.default_build]),
]


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
