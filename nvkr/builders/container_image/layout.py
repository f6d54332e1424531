"""Laying out a daemonless container image's files in its work dir (the ``container-image`` run).

:func:`assemble` puts every entry of the action's ``files`` params under the image's root: an
artifact's primary output, a file source, a file or directory of a tree source, or an archive
unpacked, with the modes the plan fixed; :func:`rootfs_layer` takes a rootfs artifact's tar as
the first layer as it is. :mod:`nvkr.builders.container_image.builder` then writes the layer.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import zipfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import IO

from nvkr.builders.api import ActionContext
from nvkr.builders.container_image.params import (
    ArtifactFile,
    FileParams,
    RootfsBase,
    TreeFile,
    UnpackedFile,
)
from nvkr.errors import BuildError
from nvkr.oci.image import Layer, normalise_layer
from nvkr.repro import normal_mode


def _parents(root: Path, rel: str) -> Path:
    """``root / rel`` with its parent directories made (mode 0755, whatever the umask)."""
    here = root
    for part in PurePosixPath(rel).parts[:-1]:
        here = here / part
        if here.is_symlink() or (here.exists() and not here.is_dir()):
            raise BuildError(f"/{rel}: /{here.relative_to(root)} is already a file in the image")
        if not here.exists():
            here.mkdir()
            os.chmod(here, 0o755)
    return root / rel


def _put_file(src: Path, root: Path, rel: str, mode: int) -> None:
    """Copy ``src`` (a file or symlink) to ``root/rel`` with ``mode``, replacing a file there."""
    target = _parents(root, rel)
    if target.is_dir() and not target.is_symlink():
        raise BuildError(f"/{rel}: a directory is already at that path in the image")
    if target.exists() or target.is_symlink():
        target.unlink()
    shutil.copyfile(src, target, follow_symlinks=False)
    if not target.is_symlink():
        os.chmod(target, mode)


def _primary(ctx: ActionContext, f: ArtifactFile) -> Path:
    out = ctx.deps[f.action].output("primary", f"artifact {f.artifact!r}")
    return ctx.store.checked_path(out.digest)


def _put_tree(ctx: ActionContext, i: int, f: TreeFile, rootfs: Path, modes: dict[str, int]) -> None:
    staging = ctx.workdir / f"source-{i}"
    staging.mkdir()
    with tarfile.open(ctx.input_path(f.input), mode="r:*") as tar:
        # 'tar' and not 'data': symlinks to absolute paths are normal inside an image
        tar.extractall(staging, filter="tar")
    chosen = staging / f.select if f.select else staging
    # a symlinked directory on the way to 'path' must not lead out of the source (to the host)
    way = chosen.parent if f.select else staging
    if not Path(os.path.realpath(way)).is_relative_to(os.path.realpath(staging)):
        raise BuildError(f"source {f.source!r}: {f.select!r} leads outside the source")
    if not chosen.exists() and not chosen.is_symlink():
        raise BuildError(
            f"source {f.source!r} has no {f.select!r}",
            hint="files.<dest>.path is relative to the root of the source",
        )
    rel = f.path
    mode = int(f.mode, 8) if f.mode else None
    if chosen.is_dir() and not chosen.is_symlink():
        target = _parents(rootfs, rel) if rel else rootfs
        # merging into files laid out before: a symlink there would have copytree write through
        # it, possibly outside the work dir
        if target.is_symlink():
            raise BuildError(f"source {f.source!r} goes to /{rel}, which is already a symlink")
        for dirpath, dirnames, filenames in os.walk(target):
            for name in (*dirnames, *filenames):
                if os.path.islink(os.path.join(dirpath, name)):
                    inner = os.path.relpath(os.path.join(dirpath, name), rootfs)
                    raise BuildError(
                        f"source {f.source!r} goes to /{rel}, where /{inner} is already a "
                        "symlink; give overlapping files separate destinations"
                    )
        shutil.copytree(chosen, target, symlinks=True, dirs_exist_ok=True)
        if not rel:
            os.chmod(rootfs, 0o755)
        if mode is not None:
            for dirpath, _, filenames in os.walk(chosen):
                for name in filenames:
                    inner = os.path.relpath(os.path.join(dirpath, name), chosen)
                    if not os.path.islink(os.path.join(dirpath, name)):
                        modes[str(PurePosixPath(rel, inner))] = mode
        return
    if not rel:
        raise BuildError(f"source {f.source!r}: {f.select!r} is a file; it cannot be '/'")
    if mode is None:  # the source's own mode (its tar holds 0644 or 0755)
        mode = normal_mode(os.lstat(chosen).st_mode)
    _put_file(chosen, rootfs, rel, mode)
    modes[rel] = mode


def rootfs_layer(ctx: ActionContext, base: RootfsBase, compression: str) -> Layer:
    """The rootfs artifact's tar as a layer: every member kept as mmdebstrap wrote it (owners,
    modes, setuid bits, links, device nodes, file capabilities), sorted, times clamped to the
    epoch, compressed like the image's other layers (:func:`nvkr.oci.image.normalise_layer`)."""
    tar_out = ctx.deps[base.action].output("primary", f"base rootfs {base.rootfs!r}")
    with open(ctx.store.checked_path(tar_out.digest), "rb") as tar:
        return normalise_layer(tar, ctx.store, epoch=ctx.action.epoch, compression=compression)


def _unpack(ctx: ActionContext, f: UnpackedFile, root: Path, modes: dict[str, int]) -> None:
    """Lay the members of a zip (a wheel) or tar source out under ``root/path``: regular files
    and directories, each mode 0755 when the archive marks it executable, else 0644 (a wheel's
    installer would do the same). A file already in the image is an error, not overwritten.

    Raises:
        BuildError: a member leading outside the destination, a wheel's ``.data`` directory
            (scripts, headers: they need an installer), a member that is neither file nor
            directory, or one already in the image.
    """
    where = f"source {f.source!r} (unpacked to /{f.path})"
    path = ctx.input_path(f.input)
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                kind = (info.external_attr >> 16) & 0o170000
                if kind not in (0, 0o100000, 0o040000):
                    raise BuildError(
                        f"{where}: member {info.filename!r} is not a file or directory"
                    )
                with archive.open(info) as data:
                    mode = (info.external_attr >> 16) & 0o777
                    _unpack_member(where, f, root, modes, info.filename, info.is_dir(), mode, data)
        return
    if not tarfile.is_tarfile(path):
        raise BuildError(f"{where}: neither a zip nor a tar archive")
    with tarfile.open(path, mode="r:*") as tar:
        for m in tar.getmembers():
            if not (m.isfile() or m.isdir()):
                raise BuildError(f"{where}: member {m.name!r} is not a file or directory")
            member = tar.extractfile(m) if m.isfile() else None
            _unpack_member(where, f, root, modes, m.name, m.isdir(), m.mode, member)


def _unpack_member(
    where: str,
    f: UnpackedFile,
    root: Path,
    modes: dict[str, int],
    name: str,
    is_dir: bool,
    mode: int,
    data: IO[bytes] | None,
) -> None:
    inner = PurePosixPath(name)
    if inner.is_absolute() or ".." in inner.parts:
        raise BuildError(f"{where}: member {name!r} leads outside its destination")
    if inner.parts and inner.parts[0].endswith(".data"):
        raise BuildError(
            f"{where}: member {name!r}: a wheel's {inner.parts[0]}/ directory "
            "(scripts, headers, data) needs an installer",
            hint="unpack takes wheels whose files all go to site-packages",
        )
    rel = str(PurePosixPath(f.path, inner)) if f.path else str(inner)
    if is_dir or data is None:
        _mkdirs(root, rel)
        return
    target = _parents(root, rel)
    if target.exists() or target.is_symlink():
        raise BuildError(f"{where}: /{rel} is already in the image")
    with open(target, "wb") as dst:
        shutil.copyfileobj(data, dst)
    modes[rel] = normal_mode(mode & 0o777)  # a file: its permission bits only
    os.chmod(target, modes[rel])


def _mkdirs(root: Path, rel: str) -> None:
    """``root/rel`` and its parents as directories (mode 0755, whatever the umask)."""
    target = _parents(root, rel)
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise BuildError(f"/{rel}: a file is already at that path in the image")
    if not target.exists():
        target.mkdir()
        os.chmod(target, 0o755)


def assemble(ctx: ActionContext, rootfs: Path, files: Sequence[FileParams]) -> dict[str, int]:
    """Lay ``files`` (the action's, in order) out under ``rootfs``; return the explicit modes
    (relative path → mode)."""
    modes: dict[str, int] = {}
    for i, f in enumerate(files):
        if isinstance(f, UnpackedFile):
            if f.path:
                _mkdirs(rootfs, f.path)
            _unpack(ctx, f, rootfs, modes)
        elif isinstance(f, ArtifactFile):
            mode = int(f.mode, 8)
            _put_file(_primary(ctx, f), rootfs, f.path, mode)
            modes[f.path] = mode
        elif isinstance(f, TreeFile):
            _put_tree(ctx, i, f, rootfs, modes)
        else:
            mode = int(f.mode, 8)
            _put_file(ctx.input_path(f.input), rootfs, f.path, mode)
            modes[f.path] = mode
    return modes
