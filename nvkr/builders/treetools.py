"""Programs of a root filesystem run from the tar the rootfs action made, without unpacking it.

A builder that signs or assembles what a tree holds uses the tree's own tools (the kernel's
``sign-file``, systemd's ``ukify`` and the tree's Python), so their versions are the locked
packages' and already in the rootfs key. :func:`extract` takes the members a tool needs out of
the tar; :func:`loader_argv` runs a program through the tree's own dynamic loader and libraries,
as :func:`nvkr.disk.grub.tree_mkimage` runs GRUB's (qemu-user's binfmt for a foreign tree).
"""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from nvkr.disk.grub import TREE_LOADER
from nvkr.errors import BuildError, ToolError
from nvkr.run import CAN_RUN_HINT, can_run


def member_name(info: tarfile.TarInfo) -> str:
    """A member's path in the tree, without the ``./`` mmdebstrap's tar puts first."""
    return info.name.removeprefix("./")


def library_dir(arch: str) -> PurePosixPath:
    """The tree's multiarch library directory, ``usr/lib/<triplet>``."""
    if arch not in TREE_LOADER:
        raise BuildError(f"no dynamic loader known for a {arch} tree")
    return PurePosixPath("usr/lib") / TREE_LOADER[arch][0]


def is_library(name: str, arch: str) -> bool:
    """Whether tree path ``name`` is a shared library (or the loader) of the tree's multiarch
    directory itself (not its subdirectories)."""
    path = PurePosixPath(name)
    loader = TREE_LOADER[arch][1]
    return path.parent == library_dir(arch) and (path.name == loader or ".so" in path.name)


def extract(tf: tarfile.TarFile, dest: Path, wanted: Callable[[str], bool]) -> list[str]:
    """The regular files, symlinks and directories of ``tf`` whose tree path ``wanted`` accepts,
    extracted under ``dest`` (tarfile's ``tar`` filter: nothing leaves ``dest``); their paths."""
    members = [
        m
        for m in tf.getmembers()
        if (m.isfile() or m.issym() or m.isdir()) and wanted(member_name(m))
    ]
    tf.extractall(dest, members=members, filter="tar")
    return [member_name(m) for m in members]


def loader_argv(dest: Path, arch: str, program: str, what: str) -> list[str]:
    """The argv that runs tree path ``program`` (extracted under ``dest`` with the libraries,
    :func:`is_library`) through the tree's dynamic loader.

    Raises:
        ToolError: the host cannot run ``arch`` binaries (names what to install).
        BuildError: the loader or the program was not extracted.
    """
    ok, said = can_run(arch)
    if not ok:
        raise ToolError(
            f"{what} runs the {arch} tree's own programs, and this host cannot run {arch} "
            f"binaries (arch-test {arch}: {said})",
            hint=CAN_RUN_HINT,
        )
    libdir = dest / library_dir(arch)
    ld = libdir / TREE_LOADER[arch][1]
    if not ld.is_file():
        raise BuildError(f"the {arch} tree has no dynamic loader /{library_dir(arch)}")
    if not (dest / program).is_file():
        raise BuildError(f"the {arch} tree has no /{program}")
    return [str(ld), "--library-path", str(libdir), str(dest / program)]
