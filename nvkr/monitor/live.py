"""The live display: a rich progress area on stderr when it is a terminal.

The only module of nvkr's event stream that imports rich (``nvkr publish`` off a terminal never
loads it). Above the live area go the same lines a CI log gets (:mod:`nvkr.monitor.lines`); the
area itself shows, while work runs: one row for the verb's total (actions done/total for a
build), one per running action with a spinner, its builder's progress bar when it reports one,
its elapsed time and, where earlier runs of its action key give one, the estimate
(``~2m10s``), one byte bar per transfer (downloads, uploads, pulls), and the image a boot test
is booting with its elapsed time. The live area is
cleared at the end, and the total time is the last line.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from nvkr.monitor.events import (
    ActionCached,
    ActionDone,
    ActionFailed,
    ActionProgress,
    ActionsPlanned,
    ActionStarted,
    BootImageResult,
    BootStall,
    BootStart,
    Event,
    Step,
    Transfer,
)
from nvkr.monitor.lines import event_lines
from nvkr.monitor.plain import elapsed, progress_text
from nvkr.quantities import human_size
from nvkr.redact import redact_text

_STYLES = {"warning:": "yellow", "  failed": "red", "  built": "green", "error": "red"}


class _Amount(ProgressColumn):
    """``3/9``, bytes as ``1.2/4.0 GiB`` (rich's DownloadColumn), or ``1.2 MiB`` so far
    without a total (a download whose size the server did not say); else nothing without a
    total."""

    def __init__(self) -> None:
        super().__init__()
        self._bytes = DownloadColumn(binary_units=True)

    def render(self, task: Task) -> Text:
        if task.total is None:
            unit = task.fields.get("unit")
            return Text(human_size(int(task.completed)) if unit == "bytes" else "")
        if task.fields.get("unit") == "bytes":
            return self._bytes.render(task)
        if task.fields.get("unit") == "percent":
            return Text(f"{task.completed:.0f}%")
        return Text(f"{task.completed:g}/{task.total:g}")


class _Estimate(ProgressColumn):
    """``~2m10s``: what earlier runs of the action took (nothing without an estimate)."""

    def render(self, task: Task) -> Text:
        estimate = task.fields.get("estimate")
        return Text(f"~{elapsed(estimate)}" if estimate else "", style="dim")


class LiveMonitor:
    """The rich live display for ``verb`` on stderr (thread-safe)."""

    def __init__(self, verb: str) -> None:
        self.verb = verb
        self.console = Console(stderr=True, highlight=False)
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(bar_width=24),
            _Amount(),
            TimeElapsedColumn(),
            _Estimate(),
            console=self.console,
            transient=True,
            refresh_per_second=8,
        )
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._total: TaskID | None = None
        self._actions: dict[str, TaskID] = {}
        self._transfers: dict[tuple[str, str], TaskID] = {}
        self._done = 0
        self.progress.start()

    def emit(self, event: Event) -> None:
        with self._lock:
            for line in event_lines(event):
                style = next((s for p, s in _STYLES.items() if line.startswith(p)), None)
                # credentials never leave (nvkr.redact): whatever event carries a URL
                self.console.print(Text(redact_text(line), style=style or ""), soft_wrap=True)
            self._update(event)

    def _update(self, event: Event) -> None:
        match event:
            case ActionsPlanned(actions=total, to_run=to_run):
                self._total = self.progress.add_task(
                    f"[bold]{self.verb}[/] {total} actions", total=to_run or 1, unit="steps"
                )
            case ActionStarted(action=a, estimate=estimate):
                self._actions[a.key] = self.progress.add_task(
                    escape(a.name), total=None, estimate=estimate, unit=""
                )
            case ActionProgress(action=a):
                self._action_progress(a, event)
            case ActionDone(action=a) | ActionFailed(action=a):
                task = self._actions.pop(a.key, None)
                if task is not None:
                    self.progress.remove_task(task)
                self._done += 1
                if self._total is not None:
                    self.progress.update(self._total, completed=self._done)
            case ActionCached():
                pass
            case Transfer():
                self._transfer(event)
            case Step(verb="publish" | "copy" as verb, name="start", fields=f):
                self._total = self.progress.add_task(
                    f"[bold]{verb}[/] {escape(str(f.get('name') or f['reference']))}",
                    total=f.get("bytes") or None,
                    unit="bytes",
                )
            case Step(name="blob-uploaded" | "blob-skipped" | "blob-mounted" | "blob", fields=f):
                if self._total is not None and not f.get("reused"):
                    self.progress.advance(self._total, f.get("size", 0))
            case BootStart() | BootStall() | BootImageResult():
                self._boot(event)
            case Step(verb="pull", name="start", fields=f):
                self._total = self.progress.add_task(
                    f"[bold]pull[/] {escape(str(f['reference']))}",
                    total=f.get("bytes") or None,
                    unit="bytes",
                )

    def _action_progress(self, action: Any, p: ActionProgress) -> None:
        task = self._actions.get(action.key)
        if task is None:
            return
        self.progress.update(
            task,
            description=f"{escape(action.name)} [dim]{escape(progress_text(p))}[/]",
            total=p.total,
            completed=p.done,
            unit=p.unit,
        )

    def _boot(self, event: BootStart | BootStall | BootImageResult) -> None:
        """One row for the image being booted, with its elapsed time: a new row per attempt,
        none once the image has its result."""
        task = self._actions.pop(f"boot:{event.image}", None)
        if task is not None:
            self.progress.remove_task(task)
        if isinstance(event, BootStart):
            name = event.shown or f"{event.image} ({event.arch})"
            self._actions[f"boot:{event.image}"] = self.progress.add_task(
                f"booting {escape(name)} [dim]under {event.accel}[/]", total=None, unit=""
            )

    def _transfer(self, t: Transfer) -> None:
        key = (t.direction, t.what)
        task = self._transfers.get(key)
        if t.finished:
            if task is not None:
                self.progress.remove_task(task)
                del self._transfers[key]
            return
        if task is None:
            doing = t.under_way
            task = self._transfers[key] = self.progress.add_task(
                f"{doing} {escape(redact_text(t.what))}", total=t.total, unit="bytes"
            )
        self.progress.update(task, completed=t.done, total=t.total)

    def close(self) -> None:
        with self._lock:
            self.progress.stop()
            self.console.print(
                Text(
                    f"nvkr: {self.verb} took {elapsed(time.monotonic() - self._started)}",
                    style="dim",
                )
            )
