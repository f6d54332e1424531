"""The store's two ``flock(2)`` locks, taken so that a verb that has to wait says what for.

``lock`` (:meth:`nvkr.store.Store.lock`) is held by a build, ``mirror export`` and ``store gc``;
``gc.lock`` (:func:`reader_lock`) shared by every verb that reads the store and exclusive for
``store gc``. Each is first tried without blocking; when another process holds it, one line
(``nvkr.store: waiting for a running build ... in /path/to/store to finish``, a warning on the
``nvkr.store`` logger, or the caller's ``on_wait``) says what the verb waits for before it
blocks, so a build queued behind another, or a gc behind a long build, is never silent.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

log = logging.getLogger("nvkr.store")

#: Told what a verb waits for, once, before it blocks on a lock.
OnWait = Callable[[str], None]

#: What holds each lock, as a waiting verb names it.
HOLDER_OF_LOCK = "a running build (or mirror export, or store gc)"
READERS = "the nvkr processes reading this store (build, plan, lock, pull, verify, mirror)"
GC = "a running store gc"


def _say(message: str) -> None:
    log.warning("%s", message)


def flock_said(f: IO[bytes], mode: int, holder: str, root: Path, on_wait: OnWait | None) -> None:
    """``flock(f, mode)``, blocking; when another process holds it, ``on_wait`` (default: a
    warning on ``nvkr.store``) is told ``waiting for <holder> in <root> to finish``
    first."""
    try:
        fcntl.flock(f.fileno(), mode | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    (on_wait or _say)(f"waiting for {holder} in {root} to finish")
    fcntl.flock(f.fileno(), mode)


@contextlib.contextmanager
def reader_lock(
    root: Path, *, exclusive: bool = False, on_wait: OnWait | None = None
) -> Iterator[None]:
    """:meth:`nvkr.store.Store.reading` for a store that may not exist (then there is nothing to
    guard: ``nvkr pull`` reuses the blobs of a store it never creates)."""
    if not Path(root).is_dir():
        yield
        return
    with open(Path(root) / "gc.lock", "a+b") as f:
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        flock_said(f, mode, READERS if exclusive else GC, Path(root), on_wait)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
