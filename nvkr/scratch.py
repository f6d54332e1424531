"""Entries of a store's ``tmp/``: claimed while in use, removed once the process using them died.

Everything nvkr writes passes through ``tmp/`` (in-flight downloads ``blob-*``, action work dirs
``act-*``, apt and pip work dirs, unpacking toolchains), and a process that is SIGKILLed leaves
its entries there. So that the next build can tell them from those of a build running at the same
time (on the same store or, through ``verify --rebuild --seed-store``, inside it), each entry is
*claimed*: its creator holds an exclusive ``flock(2)`` on it (a file's own descriptor, a directory
opened read-only) for as long as it uses it. The kernel drops the lock when the process dies,
however it dies, and in every PID namespace alike. An entry nobody holds a lock on is a
leftover.

Creating and claiming are two steps, so they happen under a shared lock on ``tmp.lock`` beside
``tmp/``; :func:`remove_leftovers` takes it exclusively while it tells dead entries from live
ones, so it never sees an entry between its creation and its claim.

Before a leftover is removed, every mount under it (mmdebstrap's proc, sys and dev, left by a
version of nvkr that ran it in the build's own mount namespace) is unmounted and every loop
device backed by a file in it detached: a recursive delete must never walk into a mounted
``/dev`` or ``/sys``. :func:`remove_tree` applies the same rule to a process's own work dirs.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from nvkr.run import run

log = logging.getLogger("nvkr.scratch")


@contextlib.contextmanager
def _creating(guard: Path) -> Iterator[None]:
    """Held while one entry is made and claimed (shared: creators do not wait for each other)."""
    with open(guard, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_SH)
        yield


def claimed_file(tmp: Path, guard: Path, prefix: str) -> tuple[int, Path]:
    """A new file in ``tmp`` and its open descriptor (read-write), claimed until it is closed.

    ``guard`` is the store's ``tmp.lock``. The caller keeps the descriptor open until the file
    is renamed away or deleted.
    """
    with _creating(guard):
        fd, name = tempfile.mkstemp(prefix=prefix, dir=tmp)
        fcntl.flock(fd, fcntl.LOCK_EX)  # a fresh file: never blocks
    return fd, Path(name)


def claimed_dir(tmp: Path, guard: Path, prefix: str) -> tuple[int, Path]:
    """A new directory in ``tmp`` and a read-only descriptor of it holding its claim."""
    with _creating(guard):
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=tmp))
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        fcntl.flock(fd, fcntl.LOCK_EX)
    return fd, path


# -- mounts and loop devices --------------------------------------------------------------------
def _unescape(field: str) -> str:
    r"""A path as /proc/self/mountinfo writes it (space, tab, newline, backslash as \ooo)."""
    for esc, ch in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(esc, ch)
    return field


def _inside(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below ``path`` in this process's mount namespace, deepest first."""
    top = os.path.realpath(path)
    try:
        text = Path("/proc/self/mountinfo").read_text()
    except OSError:  # no /proc: nothing can be told, and nothing was mounted by us
        return []
    points = [_unescape(line.split()[4]) for line in text.splitlines() if line.strip()]
    return sorted((p for p in points if _inside(p, top)), key=lambda p: (-p.count("/"), p))


def loop_devices_under(path: Path) -> list[str]:
    """Loop devices (``/dev/loopN``) whose backing file is at or below ``path``."""
    top = os.path.realpath(path)
    found = []
    for backing in sorted(Path("/sys/block").glob("loop*/loop/backing_file")):
        with contextlib.suppress(OSError):
            name = backing.read_text().rstrip("\n").removesuffix(" (deleted)")
            if _inside(name, top):
                found.append(f"/dev/{backing.parent.parent.name}")
    return found


def _release(path: Path) -> tuple[int, int]:
    """Unmount (lazily) every mount below ``path`` and detach its loop devices.

    Returns (mounts unmounted, loop devices detached). Failures are logged; the caller checks
    :func:`mounts_under` again before deleting anything.
    """
    unmounted = detached = 0
    for point in mounts_under(path):
        proc = run(["umount", "--lazy", point], check=False, cleanup=True)
        if proc.returncode == 0:
            unmounted += 1
        elif point in mounts_under(path):  # not gone with a parent unmounted before it
            log.warning("cannot unmount %s: %s", point, proc.stderr.decode(errors="replace"))
    for dev in loop_devices_under(path):
        proc = run(["losetup", "--detach", dev], check=False, cleanup=True)
        if proc.returncode == 0:
            detached += 1
        else:
            log.warning("cannot detach %s: %s", dev, proc.stderr.decode(errors="replace"))
    return unmounted, detached


def _delete(path: Path) -> bool:
    """Delete ``path`` (a file or a tree) unless a mount is below it; True when it is gone."""
    if mounts_under(path):
        log.warning("not deleting %s: still mounted below it: %s", path, mounts_under(path))
        return False
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return not os.path.lexists(path)


def remove_tree(path: Path) -> bool:
    """Delete ``path`` (a file or a tree) after unmounting and detaching what is attached below
    it. Returns False, deleting nothing, when a mount is still there (a delete would cross it)."""
    if not os.path.lexists(path):
        return True
    _release(path)
    return _delete(path)


def _size(path: Path) -> int:
    """Bytes of the regular files at or below ``path`` (symlinks not followed)."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    if not os.path.isdir(path) or os.path.islink(path):
        return st.st_size
    total = 0
    for root, _dirs, files in os.walk(path, onerror=lambda e: None):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


# -- leftovers -----------------------------------------------------------------------------------
@dataclass
class Cleanup:
    """What :func:`remove_leftovers` did: entries of ``tmp/`` removed and their size in bytes,
    mounts unmounted and loop devices detached below them, and entries ``kept`` because a mount
    below them could not be unmounted."""

    removed: list[str] = field(default_factory=list)
    bytes: int = 0
    unmounted: int = 0
    detached: int = 0
    kept: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.removed or self.unmounted or self.detached or self.kept)


def cleanup_line(cleaned: Cleanup | None) -> str | None:
    """The line saying what :meth:`nvkr.store.Store.lock` removed of dead builds' leftovers
    (a :class:`Cleanup`), or None when there was nothing."""
    from nvkr.quantities import human_size, plural

    if not cleaned:
        return None
    line = (
        f"store: removed {plural(len(cleaned.removed), 'leftover')} of dead builds from tmp/ "
        f"({human_size(cleaned.bytes)})"
    )
    if cleaned.unmounted:
        line += f", unmounted {cleaned.unmounted}"
    if cleaned.detached:
        line += f", detached {plural(cleaned.detached, 'loop device')}"
    if cleaned.kept:
        line += f"; kept {', '.join(cleaned.kept)}: still mounted below (see --debug)"
    return line


def _is_claimed(path: Path) -> bool | None:
    """True when a live process holds ``path``'s claim, False when nobody does, None when it
    vanished meanwhile."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError:  # a symlink (ELOOP) or unreadable: nvkr never made it as such
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops the lock just taken: a dead entry stays dead
    return False


def remove_leftovers(tmp: Path, guard: Path) -> Cleanup:
    """Remove every entry of ``tmp`` that no live process claims (module docstring).

    Call it while holding the store lock, so two cleanups do not race. Entries of processes
    running at the same time are never touched, nor the mounts below them.
    """
    report = Cleanup()
    with open(guard, "a+b") as g:
        fcntl.flock(g.fileno(), fcntl.LOCK_EX)  # no entry is between creation and claim now
        try:
            names = sorted(os.listdir(tmp))
        except FileNotFoundError:
            return report
        dead = [tmp / n for n in names if _is_claimed(tmp / n) is False]
    for path in dead:
        unmounted, detached = _release(path)
        report.unmounted += unmounted
        report.detached += detached
        size = _size(path) if not mounts_under(path) else 0
        if _delete(path):
            report.removed.append(path.name)
            report.bytes += size
        else:
            report.kept.append(path.name)
    return report
