"""Writing one file whole or not at all: nvkr's one atomic writer.

Every file nvkr writes outside the store's blob writer (lockfiles, pipelines, release-set
signatures and records, exported indexes and checksums, seals, estimates) goes through
:func:`write_atomic`: a new temp file in the target's directory (the same file system, so the
rename is atomic), written, fsync'd, renamed over the target, then the directory fsync'd so the
rename survives a crash. A reader sees the old file or the new one, never half of one; on any
failure the temp file is removed and the target is as it was. (Several files as one change,
all or none, is :func:`nvkr.update.write_atomically`, which stages through this.)
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


def write_atomic(
    target: Path, data: bytes, *, mode: int | None = None, prefix: str | None = None
) -> None:
    """Write ``data`` to ``target`` all or nothing (see the module).

    Args:
        mode: the file's permission bits; None: as ``open`` creates a file (0666 less the
            umask), for the files a user keeps (a lockfile, a pipeline).
        prefix: the temp file's name prefix (default ``.<name>.tmp-``), for a directory whose
            owner recognises and sweeps its own leftovers.
    Raises:
        OSError: the directory does not exist or cannot be written (the target unchanged).
    """
    tmp = stage(target, data, mode=mode, prefix=prefix)
    try:
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    sync_directory(target.parent)


def stage(target: Path, data: bytes, *, mode: int | None = None, prefix: str | None = None) -> Path:
    """A new temp file beside ``target`` holding ``data`` (fsync'd, ``mode`` as
    :func:`write_atomic`), for the caller to rename over ``target``; removed on failure."""
    name = f"{prefix or f'.{target.name[:40]}.tmp-'}{os.getpid()}-{secrets.token_hex(4)}"
    tmp = target.parent / name
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    return tmp


def sync_directory(directory: Path) -> None:
    """fsync ``directory`` (a rename in it is then on disk); best effort: some file systems
    refuse it."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
