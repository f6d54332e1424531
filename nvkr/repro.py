"""Reproducibility primitives, one home each: the epoch, tar members, the sorted walk, gzip.

Every archive nvkr writes is built from these, so that the same tree gives the same bytes on any
machine, under any umask, TZ or locale (README "The store and reproducibility"):

- the epoch: :func:`source_date_epoch` (``$SOURCE_DATE_EPOCH``, the recipe's ``epoch``, the
  newest commit time) and :func:`clamp_mtime` / :func:`clamp_tree_mtimes` (nothing newer);
- the sorted walk: :func:`sorted_tree`, every path under a root sorted by its bytes
  (:func:`path_key`), directories included;
- tar: :func:`tar_writer` (PAX format, UTF-8 names), :func:`tar_member` (a normalised header:
  uid/gid 0, empty owner names, an integer mtime, no PAX atime/ctime), :func:`normal_mode` (0755
  for directories and files with any execute bit, else 0644), :func:`tree_members` (a tree's
  headers in sorted order) and :func:`write_tar` / :func:`tar_bytes` on top of them;
- gzip: :func:`gzip_writer` / :func:`gzip_bytes`, a fixed header (mtime 0, no file name, OS byte
  255) at a fixed level.
"""

from __future__ import annotations

import fnmatch
import gzip
import io
import os
import stat
import tarfile
from collections.abc import Callable, Iterator, Mapping, Sequence
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


def clamp_mtime(mtime: float, epoch: int) -> int:
    """``mtime`` clamped into ``0 .. epoch``, as an integer (SOURCE_DATE_EPOCH clamping: a time
    after the epoch becomes the epoch, one before 1970 becomes 0, fractions are dropped)."""
    return max(0, min(int(mtime), epoch))


def clamp_tree_mtimes(tree: Path, epoch: int) -> None:
    """Set every mtime (and atime) in ``tree`` newer than ``epoch`` to ``epoch``, symlinks
    included (SOURCE_DATE_EPOCH clamping, as mmdebstrap does for the packages' own files)."""
    for root, dirs, files in os.walk(tree):
        for name in dirs + files:
            path = os.path.join(root, name)
            st = os.lstat(path)
            if st.st_mtime > epoch:
                os.utime(path, (epoch, epoch), follow_symlinks=False)
    if os.lstat(tree).st_mtime > epoch:
        os.utime(tree, (epoch, epoch))


def path_key(name: str) -> bytes:
    """The sort key of a path or member name: its bytes (UTF-8; a file name that is not UTF-8
    keeps its own bytes through ``surrogateescape``), so ``B`` < ``a`` < ``b`` < ``b-`` < ``b/``."""
    return name.encode("utf-8", "surrogateescape")


def sorted_tree(root: Path, exclude: Callable[[str], bool] | None = None) -> list[str]:
    """Relative POSIX paths under ``root`` (not ``root`` itself; not following symlinks),
    directories included, sorted by :func:`path_key`.

    Args:
        exclude: called with each relative path; True drops it (and, for a directory,
            everything below).
    """
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        for name in [*dirnames, *filenames]:
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if exclude is not None and exclude(rel):
                if name in dirnames:
                    dirnames.remove(name)
                continue
            out.append(rel)
    out.sort(key=path_key)
    return out


def normal_mode(mode: int) -> int:
    """0755 for a directory or a file with any execute bit in ``mode`` (an ``st_mode`` or bare
    permission bits), else 0644: what is left of a mode once the umask no longer shows."""
    if stat.S_ISDIR(mode) or mode & 0o111:
        return 0o755
    return 0o644


def tar_writer(out: BinaryIO) -> tarfile.TarFile:
    """A tar writer over ``out`` in nvkr's format: PAX (plain ustar headers, with a PAX record
    only where a name, link target or size does not fit them), names in UTF-8. Close it (``with``)
    to write the end-of-archive blocks."""
    return tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8")


def tar_member(
    name: str,
    *,
    mtime: int,
    mode: int,
    kind: bytes = tarfile.REGTYPE,
    size: int = 0,
    linkname: str = "",
) -> tarfile.TarInfo:
    """A normalised tar header: uid/gid 0, empty owner names, mtime ``mtime`` (an integer: no
    PAX mtime record), no PAX atime/ctime, ``mode`` as given (:func:`normal_mode` for a tree).

    Args:
        kind: the member type (``tarfile.REGTYPE``, ``DIRTYPE``, ``SYMTYPE``...).
        size: a regular file's size in bytes.
        linkname: a link's target.
    """
    info = tarfile.TarInfo(name)
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = mtime
    info.mode = mode
    info.type = kind
    info.size = size
    info.linkname = linkname
    return info


def tree_members(
    root: Path,
    *,
    epoch: int,
    unsupported: Callable[[Path], Exception],
    prefix: str = "",
    exclude: Callable[[str], bool] | None = None,
    modes: Mapping[str, int] | None = None,
) -> Iterator[tuple[tarfile.TarInfo, Path | None]]:
    """The tree under ``root`` as tar headers in :func:`sorted_tree` order, each with the file
    whose bytes follow it (None for a directory or symlink).

    Every member is a :func:`tar_member` with mtime ``epoch``: symlinks kept as links (mode 0777),
    directories and files with :func:`normal_mode`, unless ``modes`` names the path (relative to
    ``root``, e.g. ``{"etc/app/key": 0o600}``), whose mode is used as given.

    Args:
        unsupported: the error for a member that is neither a file, a directory nor a symlink
            (a socket, device or fifo), given its path; raised.
        prefix: prepended to every member name (e.g. ``"chart/"``).
        exclude: as :func:`sorted_tree`.
    """
    for rel in sorted_tree(root, exclude):
        path = root / rel
        st = os.lstat(path)
        mode = modes.get(rel, normal_mode(st.st_mode)) if modes else normal_mode(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            info = tar_member(
                prefix + rel,
                mtime=epoch,
                mode=0o777,
                kind=tarfile.SYMTYPE,
                linkname=os.readlink(path),
            )
            yield info, None
        elif stat.S_ISDIR(st.st_mode):
            yield tar_member(prefix + rel, mtime=epoch, mode=mode, kind=tarfile.DIRTYPE), None
        elif stat.S_ISREG(st.st_mode):
            yield tar_member(prefix + rel, mtime=epoch, mode=mode, size=st.st_size), path
        else:
            raise unsupported(path)


def write_tar(
    root: Path,
    out: BinaryIO,
    *,
    epoch: int,
    prefix: str = "",
    exclude: Callable[[str], bool] = lambda rel: rel == ".git" or rel.startswith(".git/"),
) -> None:
    """Write the tree under ``root`` to ``out`` as a deterministic (uncompressed) tar: the
    :func:`tree_members` of ``root`` through a :func:`tar_writer`.

    Args:
        prefix: prepended to every member name (e.g. ``"chart/"``); empty for none.
        exclude: called with each relative POSIX path; True drops it (and, for a directory,
            everything below). ``.git`` is excluded by default.
    Raises:
        RecipeError: a member is neither a file, a directory nor a symlink (sockets, devices).
    """

    def unsupported(path: Path) -> RecipeError:
        return RecipeError(f"{path}: only files, directories and symlinks can be archived")

    with tar_writer(out) as tar:
        members = tree_members(
            root, epoch=epoch, unsupported=unsupported, prefix=prefix, exclude=exclude
        )
        for info, path in members:
            if path is None:
                tar.addfile(info)
            else:
                with open(path, "rb") as f:
                    tar.addfile(info, f)


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


def gzip_writer(out: BinaryIO, level: int = GZIP_LEVEL) -> gzip.GzipFile:
    """A gzip stream into ``out`` with a fixed header: mtime 0, no file name (RFC 1952 FNAME
    absent), OS byte 255, compression ``level`` (:data:`GZIP_LEVEL`). Close it to write the
    trailer; closing it leaves ``out`` open."""
    return gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=level, mtime=0)


def gzip_bytes(data: bytes, level: int = GZIP_LEVEL) -> bytes:
    """``data`` through a :func:`gzip_writer`."""
    buf = io.BytesIO()
    with gzip_writer(buf, level) as gz:
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
