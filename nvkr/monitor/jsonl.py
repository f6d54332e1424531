"""The ``--json`` renderer: one JSON object per event, one line each, on stdout.

Every object has ``v`` (:data:`nvkr.monitor.events.STREAM_VERSION`), ``ts`` (RFC 3339 UTC to the
millisecond) and ``event`` (:func:`~nvkr.monitor.events.event_name`), then the event's own keys
(:meth:`~nvkr.monitor.events.Event.to_json`), sorted. Human-only :class:`~nvkr.monitor.events.Note`
events are left out; ``bytes`` events of one transfer at most every :data:`BYTES_EVERY` seconds
(and its last), so a large upload does not flood the stream.
"""

from __future__ import annotations

import json
import threading
import time
from typing import IO, Final

from nvkr.monitor.events import STREAM_VERSION, Event, Note, Transfer, event_name
from nvkr.monitor.lines import event_lines
from nvkr.redact import redact_text

#: seconds between two ``bytes`` events of the same transfer
BYTES_EVERY: Final = 1.0


def now_rfc3339() -> str:
    """The current time as ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (UTC)."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


class JsonMonitor:
    """Writes each event to ``out`` as one JSON line (thread-safe), flushed at once so a reader
    of a pipe sees it when it happens. A :class:`Note` stays out of the stream; a warning or
    note one goes to ``err`` (stderr) as the plain display writes it, so a person still reads
    it."""

    def __init__(self, out: IO[str], err: IO[str] | None = None) -> None:
        self.out = out
        self.err = err
        self._lock = threading.Lock()
        self._last_bytes: dict[tuple[str, str], float] = {}

    def emit(self, event: Event) -> None:
        if isinstance(event, Note):
            if self.err is not None and event.level != "info":
                with self._lock:
                    for line in event_lines(event):
                        self.err.write(redact_text(line) + "\n")
                    self.err.flush()
            return
        with self._lock:
            if isinstance(event, Transfer) and not self._due(event):
                return
            doc = {"v": STREAM_VERSION, "ts": now_rfc3339(), "event": event_name(event)}
            doc.update(event.to_json())
            # credentials never leave (nvkr.redact): whatever event carries a URL
            self.out.write(redact_text(json.dumps(doc, sort_keys=True)) + "\n")
            self.out.flush()

    def _due(self, event: Transfer) -> bool:
        key = (event.direction, event.what)
        now = time.monotonic()
        if not event.finished and now - self._last_bytes.get(key, -BYTES_EVERY) < BYTES_EVERY:
            return False
        self._last_bytes[key] = now
        return True

    def close(self) -> None:
        with self._lock:
            self.out.flush()
