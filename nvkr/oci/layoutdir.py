"""Writing an OCI image layout directory atomically from blobs already on disk.

:func:`nvkr.releaseset.materialize` (and later ``nvkr pull``/``export``) hands this module the
layout's ``index.json`` bytes and the digests of its blobs; the blobs come from the store. The
directory is built next to its final place, checked, then swapped in, so a reader of
``dist/<name>/`` sees either the old layout or the new one, never a mix, and a failure leaves the
old one untouched (image-spec v1.1.0 image-layout.md for the shape).
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

from nvkr.atomic import sync_directory
from nvkr.errors import IntegrityError
from nvkr.oci.layout import LayoutReader, blob_name, layout_file_bytes

log = logging.getLogger("nvkr.oci.layoutdir")

#: Blobs are content-addressed and, when hard-linked, share their inode with the store's
#: read-only blob: they stay read-only in the layout so an edit in dist/ can never corrupt the
#: store, and a copied blob gets the same mode so the layout looks the same either way.
BLOB_MODE: Final = 0o444
#: ``index.json`` and ``oci-layout``.
FILE_MODE: Final = 0o644
DIR_MODE: Final = 0o755

_CHUNK = 1 << 20


def write_layout(
    target: Path,
    index_json: bytes,
    blobs: Sequence[tuple[str, int]],
    blob_source: Callable[[str], Path],
    *,
    force: bool = False,
) -> bool:
    """Make ``target`` an OCI image layout with ``index_json`` and ``blobs``, atomically.

    Built in ``<parent>/.<name>.tmp-XXXX`` (hard links from ``blob_source(digest)`` when on the
    same file system and the source already has :data:`BLOB_MODE`; else copies, re-hashed),
    checked with :meth:`LayoutReader.walk` (sizes of leaf blobs, digests of manifests), then
    swapped in with ``renameat2(RENAME_EXCHANGE)`` where the kernel and file system have it, else
    with two renames; the old directory is deleted afterwards. Modes are set explicitly, never
    left to the umask: directories 0755, ``index.json``/``oci-layout`` 0644, blobs 0444.

    Args:
        target: the layout directory, e.g. ``dist/<name>``; its parent is created if needed.
        index_json: the exact bytes of ``index.json``.
        blobs: ``(digest "sha256:<hex>", size in bytes)`` of every blob the layout holds.
        blob_source: where the bytes of a digest are (e.g. :meth:`nvkr.store.Store.blob_path`).
        force: rewrite even a ``target`` that looks up to date. Its blobs are compared by size
            only; a caller that hashed every blob it hands over (``nvkr pull``) must not keep a
            damaged file of the same size.
    Returns:
        False when ``target`` already had these ``index.json`` bytes, the ``oci-layout`` file and
        every blob at its size (nothing is touched; never with ``force``), True when it was
        (re)written.
    Raises:
        IntegrityError: a source blob is missing, has another size or (when copied) another
            digest, or the new layout's closure is incomplete.
        OSError: the file system refused. In every failure the temp dir is removed and an
            existing ``target`` is left as it was.
    """
    target = Path(target)
    if (
        not force
        and up_to_date(target, index_json, blobs)
        and links_current(target, {digest: blob_source(digest) for digest, _ in blobs})
    ):
        log.debug("%s is up to date", target)
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        os.chmod(tmp, DIR_MODE)  # mkdtemp makes 0700
        _populate(tmp, index_json, blobs, blob_source)
        LayoutReader(tmp).walk(deep=False)  # never expose a layout with a dangling reference
        _swap_into_place(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return True


def up_to_date(target: Path, index_json: bytes, blobs: Sequence[tuple[str, int]]) -> bool:
    """True when ``target`` holds exactly ``index_json``, ``oci-layout`` and every blob at its size.

    Sizes only, for speed (a QCOW2 is gigabytes); ``nvkr verify`` re-hashes.
    """
    try:
        if (target / "index.json").read_bytes() != index_json:
            return False
        if (target / "oci-layout").read_bytes() != layout_file_bytes():
            return False
        return all((target / blob_name(d)).stat().st_size == size for d, size in blobs)
    except OSError:
        return False


def links_current(target: Path, sources: Mapping[str, Path]) -> bool:
    """False when a blob of layout ``target`` is a hard link to another inode than its source
    on the same file system (the source was replaced, e.g. a corrupt store blob fetched or built
    again, so the layout still holds the old bytes); True otherwise, and for copies.

    Args:
        sources: digest (``sha256:<hex>``) -> the path the layout's blob was linked from.
    """
    for digest, source in sources.items():
        try:
            have, want = (target / blob_name(digest)).stat(), source.stat()
        except OSError:
            return False
        # link_or_copy links whenever it can: on one file system, another inode means the
        # source was replaced after the layout was written
        if (
            have.st_dev == want.st_dev
            and have.st_ino != want.st_ino
            and want.st_mode & 0o7777 == BLOB_MODE
        ):
            return False
    return True


def _mkdir(path: Path) -> None:
    path.mkdir()
    os.chmod(path, DIR_MODE)


def _write_file(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fchmod(f.fileno(), mode)
        os.fsync(f.fileno())


def _populate(
    tmp: Path, index_json: bytes, blobs: Sequence[tuple[str, int]], source: Callable[[str], Path]
) -> None:
    _mkdir(tmp / "blobs")
    for digest, size in blobs:
        dst = tmp / blob_name(digest)
        if not dst.parent.is_dir():
            _mkdir(dst.parent)
        if not dst.exists():  # a digest listed twice is one file
            link_or_copy(source(digest), dst, digest, size)
    _write_file(tmp / "oci-layout", layout_file_bytes(), FILE_MODE)
    # index.json last: tools treat a directory that has one as a complete layout.
    _write_file(tmp / "index.json", index_json, FILE_MODE)


_NO_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EACCES}


def link_or_copy(src: Path, dst: Path, digest: str, size: int) -> None:
    """Put blob ``src`` at ``dst`` with mode :data:`BLOB_MODE`: a hard link, else a checked copy.

    Raises:
        IntegrityError: ``src`` is missing, is not ``size`` bytes, or (copied) does not hash to
            ``digest``.
    """
    try:
        st = src.stat()
    except OSError as e:
        raise IntegrityError(f"blob {digest} is missing ({src})", hint="build again") from e
    if st.st_size != size:
        raise IntegrityError(
            f"blob {src} is {st.st_size} bytes, expected {size}", hint="build again"
        )
    # Link only when the source already has the layout's mode: a chmod on the link would change
    # the store's inode too.
    if st.st_mode & 0o7777 == BLOB_MODE:
        try:
            os.link(src, dst)
            return
        except OSError as e:
            if e.errno not in _NO_LINK:
                raise
    alg = digest.split(":", 1)[0]
    h = hashlib.new(alg)
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out, open(src, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            out.write(chunk)
        out.flush()
        os.fchmod(out.fileno(), BLOB_MODE)
        os.fsync(out.fileno())
    if f"{alg}:{h.hexdigest()}" != digest:
        raise IntegrityError(
            f"blob {src} is corrupt: it hashes to {alg}:{h.hexdigest()}, expected {digest}",
            hint="delete it from the store and build again",
        )


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2  # linux/fs.h


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directory entries atomically with renameat2(2); False when unsupported here."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False  # a libc without the wrapper (glibc < 2.28)
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False  # an old kernel, or a file system without RENAME_EXCHANGE
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def _swap_into_place(tmp: Path, target: Path) -> None:
    """Make ``tmp`` appear at ``target``; the previous ``target`` (if any) is deleted after."""
    if not target.exists() and not target.is_symlink():
        try:
            os.rename(tmp, target)
            sync_directory(target.parent)
            return
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise  # else another process made it meanwhile: swap with theirs below
    if _exchange(tmp, target):
        old = tmp  # after the exchange the temp name holds the previous layout
    else:
        old = target.with_name(tmp.name.replace(".tmp-", ".old-", 1))
        os.rename(target, old)
        try:
            os.rename(tmp, target)
        except BaseException:
            os.rename(old, target)  # put the previous layout back before reporting
            raise
    sync_directory(target.parent)
    shutil.rmtree(old, ignore_errors=True)
    if old.exists():
        log.warning("could not remove the previous layout at %s; delete it by hand", old)
