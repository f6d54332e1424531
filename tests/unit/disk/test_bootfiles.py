"""prepare_boot_files: grub.cfg, fstab, the growroot unit, and what it refuses."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from nvkr.disk import prepare_boot_files
from nvkr.disk.bootfiles import ASSETS, GROWROOT_SCRIPT, GROWROOT_UNIT, GROWROOT_WANTS
from nvkr.errors import DiskError
from tests.helpers.disk import EPOCH, KVER, SEED


def _prepare(tree, **kw):
    args = {"arch": "amd64", "seed": SEED, "kernel_args": [], "epoch": EPOCH, **kw}
    return prepare_boot_files(tree, **args)


def test_grub_cfg_boots_the_one_kernel_by_fs_uuid(tree):
    layout = _prepare(tree, kernel_args=["quiet", "nvkr.role=worker", "a b", 'x="1"'])
    cfg = (tree / "boot/grub/grub.cfg").read_text()
    assert layout.kernel == f"boot/vmlinuz-{KVER}" and layout.initrd == f"boot/initrd.img-{KVER}"
    assert f"search --no-floppy --fs-uuid --set=root {layout.fs_uuid}" in cfg
    assert (
        f"linux /boot/vmlinuz-{KVER} root=UUID={layout.fs_uuid} ro console=tty0 "
        "console=ttyS0,115200n8 panic=-1 quiet nvkr.role=worker 'a b' 'x=\"1\"'\n"
    ) in cfg
    assert f"initrd /boot/initrd.img-{KVER}\n" in cfg
    assert "set timeout=0" in cfg
    assert layout.cmdline in cfg


def test_arm64_uses_the_pl011_console(tree):
    layout = _prepare(tree, arch="arm64")
    assert "console=ttyAMA0,115200n8" in layout.cmdline
    assert layout.root_partition == 2


def test_fstab_and_growroot_unit_enabled(tree):
    layout = _prepare(tree)
    fstab = (tree / "etc/fstab").read_text()
    assert f"UUID={layout.fs_uuid}\t/\text4\t" in fstab
    unit = tree / GROWROOT_UNIT
    assert "ExecStart=/usr/lib/nvkr/nvkr-growroot" in unit.read_text()
    assert "ConditionPathExists=!/var/lib/nvkr/growroot.done" in unit.read_text()
    wants = tree / GROWROOT_WANTS
    assert os.readlink(wants) == f"/{GROWROOT_UNIT}"
    script = tree / GROWROOT_SCRIPT
    assert script.read_bytes() == (ASSETS / "nvkr-growroot.sh").read_bytes()
    for path, mode in ((unit, 0o644), (script, 0o755), (tree / "etc/fstab", 0o644)):
        st = path.lstat()
        assert (st.st_mode & 0o7777, int(st.st_mtime)) == (mode, EPOCH), path
    assert int(wants.lstat().st_mtime) == EPOCH
    assert int((tree / "usr/lib/nvkr").stat().st_mtime) == EPOCH  # created for the script
    # Running it twice gives the same files (the symlink is replaced, not an error).
    _prepare(tree)
    assert os.readlink(wants) == f"/{GROWROOT_UNIT}"


def test_growroot_script_is_posix_sh():
    sh = shutil.which("sh")
    assert sh is not None
    subprocess.run([sh, "-n", str(ASSETS / "nvkr-growroot.sh")], check=True)


def test_no_kernel(tree):
    (tree / f"boot/vmlinuz-{KVER}").unlink()
    with pytest.raises(DiskError, match=r"exactly one kernel .*/boot/vmlinuz-\*, found none"):
        _prepare(tree)


def test_two_kernels_are_named(tree):
    (tree / "boot/vmlinuz-6.2.0-other").write_bytes(b"x")
    with pytest.raises(DiskError, match=f"found vmlinuz-{KVER}, vmlinuz-6.2.0-other"):
        _prepare(tree)


def test_kernel_and_initrd_of_different_versions(tree):
    (tree / f"boot/initrd.img-{KVER}").rename(tree / "boot/initrd.img-6.2.0-other")
    with pytest.raises(DiskError, match="different versions"):
        _prepare(tree)


def test_kernel_argument_grub_cannot_carry(tree):
    with pytest.raises(DiskError, match=r"cannot be written into grub\.cfg"):
        _prepare(tree, kernel_args=["it's"])
