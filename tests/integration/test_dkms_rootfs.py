"""End to end: DKMS's build of a kernel module inside the rootfs action is reproducible.

A recipe made for this test: one root filesystem of Debian 13's packages from Debian's mirror,
Debian's full kernel and its headers at the OS layer's version (recipes/os/debian-13.yaml:
vars.debianKernelVersion, as the catalog's bare-metal leaves pin them) and v4l2loopback-dkms,
a small out-of-tree module that DKMS builds from source in the package's postinst, as it builds
NVIDIA's. ``nvkr lock`` resolves the closure; the tree is built in one clone, then again in a
second clone from a store holding only the first store's blobs (no action record: the builder
runs), offline, with umask 002 and another TZ. The same action key and the same bytes, with the
module in the tree unsigned, built for the tree's kernel, and nothing of DKMS's build left.

NVIDIA's own DKMS build (nvidia-kernel-dkms, the catalog's Debian-driver leaf) runs once in the
suite (tests/integration/test_catalog_leaf.py: its modules' vermagic, symbols and loading in a
boot). A second build of it costs about 350 CPU-seconds (213 s on a quiet two-core machine), so
its reproducibility is checked on demand by ``benchmarks/dkms.py --twice`` (two cold builds in
two stores, the digests compared). The two packages differ in what their Kbuild files compile;
both go through the same DKMS, the same kernel build system and the rootfs builder's DKMS hooks
(builders/rootfs-dkms/: no signing key, no build tree or log left in the tree).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from nvkr.store import Store
from tests.helpers import REPO
from tests.helpers.background import BackgroundTest
from tests.helpers.nvkr import Result, run_nvkr, seed
from tests.helpers.results import record_of

pytestmark = pytest.mark.slow

MODULE = "v4l2loopback"
PACKAGE_VERSION = "0.15.0-2"  # trixie main, arch all (the module's source for DKMS)
REL = "recipes/dkms.yaml"
ACTION = "rootfs/dkms-rootfs@gpu=hopper,kubernetes=none,arch=amd64"


def _recipe() -> str:
    """The recipe, its kernel and initramfs pins the OS layer's (one place names them)."""
    layer = yaml.safe_load((REPO / "recipes/os/debian-13.yaml").read_text())
    apt = layer["sources"]["node-packages"]["apt"]
    pins = layer["sources"]["node-packages"]["packages"]
    kernel = layer["vars"]["debianKernelVersion"]
    recipe = {
        "apiVersion": "nvkr.dev/v1alpha1",
        "kind": "Recipe",
        "metadata": {"name": "dkms-small"},
        "epoch": "1764547200",
        "matrix": {"gpu": ["hopper"], "kubernetes": ["none"], "arch": ["amd64"]},
        "sources": {
            "node-packages": {
                "apt": apt,
                "arch": "amd64",
                "packages": {
                    "linux-image-amd64": kernel,
                    "linux-headers-amd64": kernel,
                    # the initramfs the kernel's postinst makes, compressed as the nodes' are
                    "initramfs-tools": pins["initramfs-tools"],
                    "zstd": pins["zstd"],
                    f"{MODULE}-dkms": PACKAGE_VERSION,
                },
            }
        },
        "artifacts": {
            "dkms-rootfs": {"builder": "rootfs", "packages": "node-packages"},
            # a recipe releases something; only the root filesystem's action is built (--action)
            "dkms-image": {"builder": "container-image", "base": {"rootfs": "dkms-rootfs"}},
        },
        "releaseSet": {"name": "dkms-small", "artifacts": ["dkms-image"]},
    }
    return yaml.safe_dump(recipe, sort_keys=False)


def _done(result: Result) -> dict:
    """The rootfs action's ``action-done`` event of a ``--json`` build."""
    assert result.code == 0, result.stderr
    (done,) = [
        e for e in result.json_events() if e["event"] == "action-done" and e["builder"] == "rootfs"
    ]
    return done


def _twice(tmp_path: Path, go_toolchain: tuple[Path, str]) -> None:
    """The test's body, run in the background (:func:`start_in_background`)."""
    first = tmp_path / "first"
    (first / "recipes").mkdir(parents=True)
    (first / REL).write_text(_recipe())
    store_a = seed(tmp_path / "store-a", go_toolchain)  # the default lock's .debs, some shared
    locked = run_nvkr("lock", REL, cwd=first, store=store_a)
    assert locked.code == 0, locked.stderr
    built = _done(run_nvkr("build", REL, "--locked", "--action", ACTION, "--json",
                           cwd=first, store=store_a))  # fmt: skip

    second = tmp_path / "second"
    shutil.copytree(first, second, ignore=shutil.ignore_patterns("dist"))
    store_b = Store(tmp_path / "store-b")
    for blob in Store(store_a).blobs_dir.iterdir():  # the sources, no action record
        os.link(blob, store_b.blob_path("sha256:" + blob.name))
    again = _done(run_nvkr(
        "build", REL, "--locked", "--offline", "--action", ACTION, "--json",
        cwd=second, store=store_b.root, umask=0o002, env={"TZ": "Asia/Kolkata"},
    ))  # fmt: skip
    assert again["key"] == built["key"], "the second clone's action key"
    key = built["key"]
    ra, rb = record_of(Store(store_a).get_action(key)), record_of(store_b.get_action(key))
    assert ra is not None and rb is not None
    assert ra["outputs"] == rb["outputs"], "the second clone's tree differs"

    # what DKMS left in the tree: the module for the tree's kernel, unsigned, and no build of it
    lock = json.loads(next((first / "lockfiles").rglob("dkms*.lock.json")).read_text())
    packages = {p["name"] for e in lock["sources"] for p in e["resolved"].get("packages", [])}
    assert {"dkms", f"{MODULE}-dkms", "linux-headers-amd64"} <= packages
    (tar_out,) = [o for o in ra["outputs"] if o["name"] == "rootfs.tar"]
    tree = Store(store_a).blob_path(tar_out["digest"])
    with tarfile.open(tree) as tar:
        names = tar.getnames()
        (ko,) = [n for n in names if n.endswith(f"/updates/dkms/{MODULE}.ko.xz")]
        kernel = ko.split("/lib/modules/")[1].split("/")[0]
        member = tar.extractfile(ko)
        assert member is not None
        (tmp_path / "m.ko.xz").write_bytes(member.read())
    info = subprocess.run(
        ["modinfo", str(tmp_path / "m.ko.xz")], capture_output=True, text=True, check=True
    )
    fields = dict(line.split(":", 1) for line in info.stdout.splitlines() if ":" in line)
    assert fields["vermagic"].split()[0] == kernel, fields["vermagic"]
    assert "sig_id" not in fields and "signer" not in fields, "the module is signed"
    left = [n for n in names if "/var/lib/dkms/" in n]
    assert not [n for n in left if n.endswith(("mok.key", "mok.pub", "make.log"))], left
    assert not [n for n in left if n.endswith("/build") or "/log/" in n], left


def start_in_background(request: pytest.FixtureRequest) -> BackgroundTest:
    """The test's body, from the session's first test on, beside the other tests (minutes of
    builds that need nothing of the default build: tests/helpers/background.py)."""
    return BackgroundTest.start(request, "dkms", _twice, "go_toolchain")


def test_a_dkms_module_is_built_the_same_from_a_second_clone_offline(
    _started_in_background: dict[str, BackgroundTest],
) -> None:
    _started_in_background[__name__].check()
