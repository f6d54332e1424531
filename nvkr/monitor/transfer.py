"""Byte counts of transfers for the event stream, without the transfer code knowing a monitor.

- Downloads (:mod:`nvkr.fetch.http`) call :func:`report` with the bytes written so far; whoever
  started the fetch (the executor, for one source) says where that goes with :func:`reporting`,
  a context variable, so it holds for the thread that downloads and nothing else.
- Uploads read their blob through :class:`ReadProgress`, which counts what the registry client
  reads (a retried chunk seeks back, and the count with it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import IO, Any, cast

#: ``report(done)``: bytes so far
BytesReport = Callable[[int], None]

_current: ContextVar[BytesReport | None] = ContextVar("nvkr_transfer_report", default=None)


@contextlib.contextmanager
def reporting(report: BytesReport) -> Iterator[None]:
    """Send this thread's :func:`report` calls to ``report`` while the block runs."""
    token = _current.set(report)
    try:
        yield
    finally:
        _current.reset(token)


def current() -> BytesReport | None:
    """Where this thread's :func:`report` calls go (None: nowhere), for code that downloads in
    other threads and sends their bytes on (:mod:`nvkr.fetch.apt`)."""
    return _current.get()


def report(done: int) -> None:
    """``done`` bytes of the current download are in (nothing when no one listens)."""
    listener = _current.get()
    if listener is not None:
        listener(done)


class ReadProgress:
    """A binary file whose reads are counted: ``report(position)`` after each ``read``. Only
    what a registry upload uses (read, seek, tell, a context manager) is passed through."""

    def __init__(self, f: IO[bytes], report: BytesReport) -> None:
        self._f, self._report = f, report

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self._report(self._f.tell())
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> ReadProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._f.close()


def counted(f: IO[bytes], report: BytesReport) -> IO[bytes]:
    """``f`` read through :class:`ReadProgress`, typed as the file an upload opener returns."""
    return cast(IO[bytes], ReadProgress(f, report))
