"""The plain renderer: human lines on stderr when it is no terminal (a CI log, a pipe).

No colour, no cursor movement, never cut to a width: :func:`nvkr.monitor.lines.event_lines` for
each event, and, so that a long action never leaves a log silent, a ``running`` line for every
action (or image a boot test is booting) still running at most every :data:`PROGRESS_EVERY`
seconds, with the latest progress a builder reported (mmdebstrap's phase, qemu-img's
percentage) and byte counts of transfers.
"""

from __future__ import annotations

import threading
import time
from typing import IO, Any, Final, NamedTuple

from nvkr.monitor.events import (
    ActionDone,
    ActionFailed,
    ActionProgress,
    ActionStarted,
    BootImageResult,
    BootStall,
    BootStart,
    Event,
    Transfer,
)
from nvkr.monitor.lines import event_lines
from nvkr.quantities import human_size
from nvkr.redact import redact_text

#: seconds between two progress lines of a running action (or a transfer)
PROGRESS_EVERY: Final = 30.0


def elapsed(seconds: float) -> str:
    """``42 s``, ``3m05s``, ``1h02m``."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class _Booting(NamedTuple):
    """What a ``running`` line names for an image a boot test is booting."""

    name: str


class PlainMonitor:
    """Lines to ``out`` (thread-safe); a daemon thread prints the progress lines every
    ``every`` seconds while actions or transfers run."""

    def __init__(self, verb: str, out: IO[str], every: float = PROGRESS_EVERY) -> None:
        self.verb, self.out, self.every = verb, out, every
        self._lock = threading.Lock()
        self._running: dict[str, tuple[Any, float]] = {}  # key -> (action, monotonic start)
        self._progress: dict[str, ActionProgress] = {}
        self._transfers: dict[tuple[str, str], Transfer] = {}
        self._transfer_start: dict[tuple[str, str], float] = {}  # monotonic, first report
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def emit(self, event: Event) -> None:
        with self._lock:
            lines = [*event_lines(event), *self._fetch_done(event)]
            self._track(event)
            for line in lines:
                self.out.write(redact_text(line) + "\n")  # credentials never leave
            self.out.flush()

    def _fetch_done(self, event: Event) -> list[str]:
        """``  fetched  node-packages 113.2 MiB in 38 s`` when a source's download ends, so a
        log tells the download's time from the building's (the action's time holds both)."""
        if not (isinstance(event, Transfer) and event.finished and event.direction == "fetched"):
            return []
        started = self._transfer_start.get((event.direction, event.what))
        took = f" in {elapsed(time.monotonic() - started)}" if started is not None else ""
        return [f"  fetched  {event.what} {human_size(event.done)}{took}"]

    def _track(self, event: Event) -> None:
        match event:
            case ActionStarted(action=a):
                self._running[a.key] = (a, time.monotonic())
                self._start_ticker()
            case ActionDone(action=a) | ActionFailed(action=a):
                self._running.pop(a.key, None)
                self._progress.pop(a.key, None)
            case ActionProgress(action=a):
                self._progress[a.key] = event
            case BootStart():
                name = f"boot-test {event.shown or f'{event.image} ({event.arch})'}"
                self._running[f"boot:{event.image}"] = (_Booting(name), time.monotonic())
                self._start_ticker()
            case BootStall() | BootImageResult():
                self._running.pop(f"boot:{event.image}", None)
            case Transfer(finished=True):
                self._transfers.pop((event.direction, event.what), None)
                self._transfer_start.pop((event.direction, event.what), None)
            case Transfer():
                self._transfers[(event.direction, event.what)] = event
                self._transfer_start.setdefault((event.direction, event.what), time.monotonic())
                self._start_ticker()

    def _start_ticker(self) -> None:
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="nvkr-progress", daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(self.every):
            with self._lock:
                for line in self.progress_lines():
                    self.out.write(redact_text(line) + "\n")
                self.out.flush()

    def progress_lines(self) -> list[str]:
        """One line per running action and unfinished transfer (called with the lock held)."""
        now = time.monotonic()
        lines = []
        for key, (action, started) in self._running.items():
            line = f"  running  {action.name} {elapsed(now - started)}"
            if (p := self._progress.get(key)) is not None:
                line += f": {progress_text(p)}"
            lines.append(line)
        for t in self._transfers.values():
            total = f" of {human_size(t.total)}" if t.total else ""
            lines.append(f"  {t.under_way} {t.what}: {human_size(t.done)}{total}")
        return lines

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        with self._lock:
            self.out.flush()


def progress_text(p: ActionProgress) -> str:
    """``installing remaining packages (4/9 steps)``, ``42%``, ``1.2 GiB of 4.0 GiB``."""
    if p.unit == "percent":
        amount = f"{p.done:.0f}%"
    elif p.unit == "bytes":
        amount = human_size(int(p.done)) + (f" of {human_size(int(p.total))}" if p.total else "")
    else:
        amount = f"{p.done:g}/{p.total:g} {p.unit}" if p.total else f"{p.done:g} {p.unit}"
    return f"{p.what} ({amount})" if p.what else amount
