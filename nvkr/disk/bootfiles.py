"""The files a tree needs to boot from its own disk: GRUB's configuration, ``/etc/fstab`` and the
first-boot unit that grows the root partition, rendered from the builder's assets
(``builders/node-image/``) with the identifiers of the disk's :class:`~nvkr.disk.layout.DiskLayout`.

Written files are owned by root (when nvkr runs as root), 0644 (the growroot script 0755), with
mtime = the epoch; directories created for them too.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from pathlib import Path

import jinja2

from nvkr.builders.assets import asset_dir
from nvkr.disk.layout import Arch, DiskLayout, disk_layout
from nvkr.errors import DiskError

#: The node-image builder's assets (Jinja2 templates, unit files, scripts).
ASSETS = asset_dir("node-image")
GROWROOT_UNIT = "etc/systemd/system/nvkr-growroot.service"
GROWROOT_WANTS = "etc/systemd/system/multi-user.target.wants/nvkr-growroot.service"
GROWROOT_SCRIPT = "usr/lib/nvkr/nvkr-growroot"
SERIAL_CONSOLE = {"amd64": "ttyS0,115200n8", "arm64": "ttyAMA0,115200n8"}
#: Kernel arguments written into grub.cfg as they are; anything else is single-quoted for GRUB.
_PLAIN_ARG = re.compile(r"^[A-Za-z0-9_.,:/=+@%-]+$")


def _find_one(boot: Path, pattern: str, what: str) -> Path:
    found = sorted(p for p in boot.glob(pattern) if p.is_file() and not p.is_symlink())
    if len(found) != 1:
        listed = ", ".join(p.name for p in found) if found else "none"
        raise DiskError(
            f"expected exactly one {what} {boot}/{pattern}, found {listed}",
            hint="the rootfs must hold one kernel package (e.g. linux-image-cloud-amd64) "
            "and initramfs-tools",
        )
    return found[0]


def find_kernel(tree: Path) -> tuple[str, str]:
    """The tree's kernel and initrd as tree-relative paths (``boot/vmlinuz-V``,
    ``boot/initrd.img-V``), for the same version ``V``.

    Raises:
        DiskError: none, several, or a kernel and an initrd of different versions.
    """
    boot = tree / "boot"
    kernel = _find_one(boot, "vmlinuz-*", "kernel")
    initrd = _find_one(boot, "initrd.img-*", "initrd")
    version = kernel.name.removeprefix("vmlinuz-")
    if initrd.name != f"initrd.img-{version}":
        raise DiskError(f"kernel {kernel} and initrd {initrd} are of different versions")
    return f"boot/{kernel.name}", f"boot/{initrd.name}"


def grub_arg(arg: str) -> str:
    """One kernel argument as a GRUB script word (grub.cfg is parsed like a shell script).

    Raises:
        DiskError: the argument is empty or holds a single quote or a line break.
    """
    if _PLAIN_ARG.match(arg):
        return arg
    if not arg or "'" in arg or "\n" in arg:
        raise DiskError(f"kernel argument {arg!r} cannot be written into grub.cfg")
    return f"'{arg}'"


def kernel_cmdline(layout: DiskLayout, kernel_args: Sequence[str]) -> str:
    """``root=UUID=<fs uuid> ro console=tty0 console=<serial> panic=-1 <kernel_args>``.

    The serial console comes last so it is ``/dev/console`` (systemd's status lines go there);
    ``panic=-1`` reboots at once on a panic, which ``qemu -no-reboot`` turns into an exit.
    """
    base = [
        f"root=UUID={layout.fs_uuid}",
        "ro",
        "console=tty0",
        f"console={SERIAL_CONSOLE[layout.arch]}",
        "panic=-1",
    ]
    return " ".join([*base, *(grub_arg(a) for a in kernel_args)])


def _environment(assets: Path) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(assets)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def _is_root() -> bool:
    return os.geteuid() == 0


def _mkdirs(tree: Path, rel: str) -> list[Path]:
    """Create the parents of tree-relative ``rel`` that are missing (0755, root); return them."""
    missing: list[Path] = []
    parent = (tree / rel).parent
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    for d in reversed(missing):
        d.mkdir(mode=0o755)
        os.chmod(d, 0o755)
        if _is_root():
            os.lchown(d, 0, 0)
    return missing


def _stamp_dirs(dirs: list[Path], epoch: int) -> None:
    """mtime = epoch on the directories created (after their entry was added)."""
    for d in dirs:
        os.utime(d, (epoch, epoch))


def _write(tree: Path, rel: str, data: bytes, *, mode: int, epoch: int) -> None:
    created = _mkdirs(tree, rel)
    path = tree / rel
    if path.is_symlink() or path.is_dir():
        raise DiskError(f"{path} is a symlink or a directory; nvkr writes a file there")
    path.write_bytes(data)
    os.chmod(path, mode)
    if _is_root():
        os.lchown(path, 0, 0)
    os.utime(path, (epoch, epoch))
    _stamp_dirs(created, epoch)


def _symlink(tree: Path, rel: str, target: str, *, epoch: int) -> None:
    created = _mkdirs(tree, rel)
    path = tree / rel
    if path.is_symlink() or path.exists():
        path.unlink()
    os.symlink(target, path)
    if _is_root():
        os.lchown(path, 0, 0)
    os.utime(path, (epoch, epoch), follow_symlinks=False)
    _stamp_dirs(created, epoch)


def prepare_boot_files(
    tree: Path,
    *,
    arch: Arch,
    seed: str,
    kernel_args: Sequence[str],
    epoch: int,
    assets: Path | None = None,
) -> DiskLayout:
    """Write ``boot/grub/grub.cfg``, ``etc/fstab`` and the growroot unit (enabled) and script into
    ``tree``, and return the disk layout they refer to.

    Args:
        tree: the root file system tree; must hold exactly one ``/boot/vmlinuz-*`` and its
            ``/boot/initrd.img-*``.
        arch: ``"amd64"`` or ``"arm64"``.
        seed: the action key's hex digest; every UUID and GUID of the disk derives from it.
        kernel_args: extra kernel command-line arguments, appended in order.
        epoch: SOURCE_DATE_EPOCH, the mtime of every file written.
        assets: the template directory; defaults to the repository's ``builders/node-image``.
    Returns:
        the :class:`DiskLayout` to pass to :func:`nvkr.disk.assemble_disk`.
    Raises:
        DiskError: no kernel/initrd, several, or a kernel argument GRUB cannot carry.
    """
    assets = assets or ASSETS
    kernel, initrd = find_kernel(tree)
    layout = disk_layout(arch, seed)
    cmdline = kernel_cmdline(layout, kernel_args)
    layout = dataclasses.replace(layout, kernel=kernel, initrd=initrd, cmdline=cmdline)
    env = _environment(assets)
    values = {
        "fs_uuid": layout.fs_uuid,
        "kernel": kernel,
        "initrd": initrd,
        "cmdline": cmdline,
        "title": f"nvkr node ({kernel.removeprefix('boot/vmlinuz-')})",
        "arch": arch,
        "root_partuuid": layout.root_partuuid,
    }
    for rel, template in (("boot/grub/grub.cfg", "grub.cfg.j2"), ("etc/fstab", "fstab.j2")):
        text = env.get_template(template).render(values)
        _write(tree, rel, text.encode(), mode=0o644, epoch=epoch)
    _write(
        tree,
        GROWROOT_UNIT,
        (assets / "nvkr-growroot.service").read_bytes(),
        mode=0o644,
        epoch=epoch,
    )
    _write(
        tree,
        GROWROOT_SCRIPT,
        (assets / "nvkr-growroot.sh").read_bytes(),
        mode=0o755,
        epoch=epoch,
    )
    _symlink(tree, GROWROOT_WANTS, f"/{GROWROOT_UNIT}", epoch=epoch)
    return layout
