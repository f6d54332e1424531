"""One event stream, one display: how every long verb (``build``, ``publish``, ``pull``,
``boot-test``) reports.

Producers (the executor, the builders through
:meth:`nvkr.builders.api.ActionContext.progress`, the remote cache, publish and pull) send typed
events (:mod:`nvkr.monitor.events`) to a :class:`Monitor`; the verb picks one renderer with
:func:`open_monitor`:

- ``--json``: :class:`~nvkr.monitor.jsonl.JsonMonitor`, one JSON object per event on stdout,
  each with ``v`` (:data:`STREAM_VERSION`), ``ts`` and ``event``; the stream ends with a
  ``result`` or an ``error`` event carrying ``exitCode``;
- a terminal: :class:`~nvkr.monitor.live.LiveMonitor`, a live rich display on stderr (running
  actions with their elapsed time and estimate, done/total, byte bars), the only place rich is
  imported, so that a verb's start-up off a terminal never pays for it;
- otherwise (a CI log, a pipe): :class:`~nvkr.monitor.plain.PlainMonitor`, plain lines on
  stderr, with a progress line for a running action at most every
  :data:`~nvkr.monitor.plain.PROGRESS_EVERY` seconds.

Like osbuild's monitor, the producer never knows which renderer listens; unlike it, events are
typed values rather than method calls, so one ``emit`` serves every verb and a renderer is a
``match`` on the event's class. Events arrive from worker threads: every renderer serialises
them itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from typing import Protocol

from nvkr.monitor.events import STREAM_VERSION as STREAM_VERSION  # the stream's, re-exported
from nvkr.monitor.events import Error, Event


class Monitor(Protocol):
    """Where a verb's events go. ``emit`` may be called from any thread; ``close`` once, at
    the end (it stops a live display and prints what is left)."""

    def emit(self, event: Event) -> None: ...

    def close(self) -> None: ...


class ListMonitor:
    """Keeps every event in ``events`` (an in-process caller's or a test's monitor)."""

    def __init__(self, events: list[Event] | None = None) -> None:
        self.events: list[Event] = events if events is not None else []

    def emit(self, event: Event) -> None:
        self.events.append(event)  # list.append is atomic under the GIL

    def close(self) -> None:
        pass


def wants_live(stream: object) -> bool:
    """Whether human output on ``stream`` gets the live display: a terminal that is not
    ``TERM=dumb``, unless ``NVKR_PROGRESS=plain`` asks for plain lines (``live`` forces it)."""
    choice = os.environ.get("NVKR_PROGRESS", "auto")
    if choice in ("plain", "live"):
        return choice == "live"
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"


def open_monitor(verb: str, *, as_json: bool) -> Monitor:
    """The renderer for ``verb`` (``build``, ``publish``, ``pull``, ``boot-test``): JSON on stdout with
    ``as_json``, else the live display when stderr is a terminal, else plain lines on stderr."""
    if as_json:
        from nvkr.monitor.jsonl import JsonMonitor

        return JsonMonitor(sys.stdout, sys.stderr)
    if wants_live(sys.stderr):
        from nvkr.monitor.live import LiveMonitor  # rich: only on a terminal

        return LiveMonitor(verb)
    from nvkr.monitor.plain import PlainMonitor

    return PlainMonitor(verb, sys.stderr)


def error_event(e: BaseException) -> Error:
    """The ``error`` event for ``e``: an :class:`~nvkr.errors.NvkrError`'s code, message, hint
    and exit code; Ctrl-C 130, SIGTERM 143; anything else an internal error (exit 1)."""
    from nvkr.errors import NvkrError

    if isinstance(e, NvkrError):
        return Error(e.code, e.message, e.exit_code, e.hint)
    if isinstance(e, KeyboardInterrupt) or type(e).__name__ == "Abort":
        from nvkr.run import stop_requested

        signum = stop_requested() or signal.SIGINT
        what = "terminated" if signum == signal.SIGTERM else "interrupted"
        return Error("NVKR-E-INTERRUPTED", what, 128 + signum)
    return Error("NVKR-E-INTERNAL", f"internal error: {e!r}", 1)


@contextlib.contextmanager
def monitoring(monitor: Monitor) -> Iterator[Monitor]:
    """Use ``monitor`` for a verb's body: an exception that leaves it is reported as the
    stream's last event (:func:`error_event`) and raised on to the CLI's handler, and the
    monitor is closed either way."""
    try:
        yield monitor
    except BaseException as e:
        if not isinstance(e, SystemExit | GeneratorExit):
            monitor.emit(error_event(e))
        raise
    finally:
        monitor.close()
