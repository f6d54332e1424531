"""Reproducibility primitives: SOURCE_DATE_EPOCH, deterministic tar and gzip.

Every builder that writes an archive uses these so that the same tree gives the same bytes on any
machine, under any umask, TZ or locale (DESIGN.md, "Reproducibility rules"):

- members sorted by path bytes, directories included; uid/gid 0, empty owner names;
- modes normalised to 0755 (directories and files with any execute bit) or 0644;
- every mtime set to the epoch (an integer), no PAX atime/ctime;
- gzip with mtime 0, no file name, OS byte 255, a fixed compression level.
"""

from __future__ import annotations

import fnmatch
import gzip
import io
import os
import stat
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

from nvkr.errors import RecipeError, UsageError

GZIP_LEVEL = 9
#: The largest epoch (seconds since 1970-01-01 UTC, 2106-02-07T06:28:15Z) that every consumer
#: of the epoch stores: 32-bit unsigned seconds, as the initramfs's cpio newc headers (8 hex
#: digits) and gzip's MTIME field (RFC 1952) hold them, within FAT's 2107 limit (the ESP). tar's
#: 11 octal digits (2242), ext4's 34-bit times (2446) and Python's datetime (9999) allow more.
EPOCH_MAX = 2**32 - 1
EPOCH_RANGE = f"0 .. {EPOCH_MAX} (1970-01-01 .. 2106-02-07 UTC)"


def epoch_problem(value: str) -> str | None:
    """What is wrong with ``value`` as an epoch (decimal seconds in ``0 .. EPOCH_MAX``), or None.

    The recipe model (field ``epoch``) and :func:`source_date_epoch` both ask this."""
    if not value.isascii() or not value.isdigit():
        return f"expected decimal seconds since 1970-01-01 UTC in {EPOCH_RANGE}"
    if int(value) > EPOCH_MAX:
        return f"out of range: expected {EPOCH_RANGE}"
    return None


def source_date_epoch(recipe_epoch: str | None, *, fallback: int | None = None) -> int:
    """The build's epoch in seconds since 1970-01-01 UTC, in ``0 .. EPOCH_MAX``.

    Order: ``$SOURCE_DATE_EPOCH``, else the recipe's ``epoch``, else ``fallback`` (the newest git
    commit time among sources), else 0 (reproducible-builds.org "SOURCE_DATE_EPOCH" spec).

    Raises:
        UsageError: ``$SOURCE_DATE_EPOCH`` is not decimal seconds in range (naming the variable
            and the range).
        RecipeError: the recipe's ``epoch``, or the newest commit time, is out of range.
    """
    env = os.environ.get("SOURCE_DATE_EPOCH")
    if env is not None:
        problem = epoch_problem(env)
        if problem is not None:
            raise UsageError(
                f"SOURCE_DATE_EPOCH is {env!r}: {problem}",
                hint="unset it to use the recipe's epoch, or e.g. SOURCE_DATE_EPOCH=1764547200",
            )
        return int(env)
    if recipe_epoch is not None:
        problem = epoch_problem(recipe_epoch)
        if problem is not None:
            raise RecipeError(
                f"recipe field 'epoch' is {recipe_epoch!r}: {problem}",
                hint='e.g. epoch: "1764547200"',
            )
        return int(recipe_epoch)
    if fallback is not None and not 0 <= fallback <= EPOCH_MAX:
        raise RecipeError(
            f"the newest git commit time among the sources is {fallback}: out of range for the "
            f"build's epoch, expected {EPOCH_RANGE}",
            hint='set the recipe\'s epoch (e.g. epoch: "1764547200") or SOURCE_DATE_EPOCH',
        )
    return fallback if fallback is not None else 0


def _norm_mode(mode: int) -> int:
    if stat.S_ISDIR(mode) or mode & 0o111:
        return 0o755
    return 0o644


def _walk(root: Path, exclude: Callable[[str], bool]) -> list[str]:
    """Relative POSIX paths under ``root`` (not following symlinks), sorted by bytes."""
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        for name in [*dirnames, *filenames]:
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if exclude(rel):
                if name in dirnames:
                    dirnames.remove(name)
                continue
            out.append(rel)
    out.sort(key=lambda p: p.encode())
    return out


def write_tar(
    root: Path,
    out: BinaryIO,
    *,
    epoch: int,
    prefix: str = "",
    exclude: Callable[[str], bool] = lambda rel: rel == ".git" or rel.startswith(".git/"),
) -> None:
    """Write the tree under ``root`` to ``out`` as a deterministic (uncompressed) tar.

    Args:
        prefix: prepended to every member name (e.g. ``"chart/"``); empty for none.
        exclude: called with each relative POSIX path; True drops it (and, for a directory,
            everything below). ``.git`` is excluded by default.
    Raises:
        RecipeError: a member is neither a file, a directory nor a symlink (sockets, devices).
    """
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in _walk(root, exclude):
            path = root / rel
            st = os.lstat(path)
            info = tarfile.TarInfo(prefix + rel)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = epoch
            info.mode = _norm_mode(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                info.type = tarfile.SYMTYPE
                info.linkname = os.readlink(path)
                info.mode = 0o777
                tar.addfile(info)
            elif stat.S_ISDIR(st.st_mode):
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif stat.S_ISREG(st.st_mode):
                info.size = st.st_size
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                raise RecipeError(f"{path}: only files, directories and symlinks can be archived")


def tar_bytes(root: Path, *, epoch: int, prefix: str = "", exclude: Sequence[str] = ()) -> bytes:
    """:func:`write_tar` into memory (for small trees such as an agent's source), leaving out
    ``.git`` and what :func:`excluder` ``exclude`` matches."""
    buf = io.BytesIO()
    write_tar(root, buf, epoch=epoch, prefix=prefix, exclude=excluder(exclude))
    return buf.getvalue()


def excluder(patterns: Sequence[str]) -> Callable[[str], bool]:
    """A :func:`write_tar` ``exclude`` test: ``.git``, and every relative path that a pattern
    matches (``fnmatch``): a pattern with a ``/`` against the whole path, one without against
    the path's last name (``__pycache__``, ``*.pyc``)."""
    whole = [p.strip("/") for p in patterns if "/" in p.strip("/")]
    names = [p.strip("/") for p in patterns if "/" not in p.strip("/")]

    def exclude(rel: str) -> bool:
        if rel == ".git" or rel.startswith(".git/"):
            return True
        name = rel.rsplit("/", 1)[-1]
        return any(fnmatch.fnmatchcase(name, p) for p in names) or any(
            fnmatch.fnmatchcase(rel, p) for p in whole
        )

    return exclude


def gzip_bytes(data: bytes, level: int = GZIP_LEVEL) -> bytes:
    """gzip ``data`` with a clean header: mtime 0, no file name (RFC 1952 FNAME absent)."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=level, mtime=0) as gz:
        gz.write(data)
    return buf.getvalue()


def extract_tar(data: BinaryIO, dest: Path, *, what: str = "source", under: str = "") -> None:
    """Extract a tar nvkr wrote (or any tar) into ``dest`` with the ``data`` filter (no escapes).

    Args:
        what: how messages name the tree, e.g. ``chart ../charts/node-agent``.
        under: the directory inside the tar that ``what`` names (a chart's ``subdir``); member
            names in messages are relative to it.
    Raises:
        RecipeError: a member is a link to an absolute path or out of the tree, would be written
            outside ``dest``, or is a device: naming the member and the link's target as
            written (a link's target is outside the source's digest, so it is never followed).
    """
    with tarfile.open(fileobj=data, mode="r:*") as tar:
        try:
            tar.extractall(dest, filter="data")
        except tarfile.FilterError as e:
            raise RecipeError(
                _filter_message(e, what, under),
                hint="make the link relative and inside the tree, or replace it with the file "
                "it points to",
            ) from None


def _filter_message(error: tarfile.FilterError, what: str, under: str) -> str:
    member = error.tarinfo
    name = member.name
    if under and name.startswith(under.rstrip("/") + "/"):
        name = name[len(under.rstrip("/")) + 1 :]
    if isinstance(error, tarfile.AbsoluteLinkError):
        return f"{what}: {name} is a link to {member.linkname!r}, an absolute path"
    if isinstance(error, tarfile.LinkOutsideDestinationError):
        return f"{what}: {name} is a link to {member.linkname!r}, which leads out of the source"
    if isinstance(error, tarfile.SpecialFileError):
        return f"{what}: {name} is a device or other special file"
    return f"{what}: member {name!r} would be written outside the source"
