"""Credentials never leave through the event stream: every renderer strips a URL's user info
from what it writes (issue 27, item 6), whatever event carries the URL — an error is stripped
where it is made (:class:`~nvkr.errors.NvkrError`), a builder's warning or a store notice is not."""

from __future__ import annotations

import io
import time
from types import SimpleNamespace

import pytest

from nvkr.monitor.events import ActionWarning, StoreNotice, Transfer
from nvkr.monitor.jsonl import JsonMonitor
from nvkr.monitor.plain import PlainMonitor

SECRET = "s3cr%40t"
URL = f"https://builder:{SECRET}@files.example/pkg.tar.gz"
ACTION = SimpleNamespace(
    key="sha256:" + "0" * 64, name="url/pkg@arch=amd64", builder="go-binary", ref="go-binary/pkg"
)


@pytest.mark.parametrize(
    "event",
    [
        ActionWarning(ACTION, f"fetched {URL} without a checksum file", hint=f"pin {URL}"),
        StoreNotice("blob-corrupt", "sha256:" + "1" * 64, f"from {URL}"),
    ],
    ids=["warning", "store-notice"],
)
@pytest.mark.parametrize("renderer", ["jsonl", "plain"])
def test_no_renderer_writes_a_urls_password(event: object, renderer: str) -> None:
    out = io.StringIO()
    monitor = JsonMonitor(out) if renderer == "jsonl" else PlainMonitor("build", out)
    monitor.emit(event)  # type: ignore[arg-type]
    text = out.getvalue()
    assert "files.example/pkg.tar.gz" in text, text  # the event was written...
    assert SECRET not in text and "builder:" not in text, text  # ...without its user info


def test_the_plain_progress_line_of_a_transfer_writes_no_password() -> None:
    """A download's progress line (every 30 s of a long transfer) names what is downloaded."""
    out = io.StringIO()
    monitor = PlainMonitor("build", out, every=0.01)
    monitor.emit(Transfer("fetched", URL, 1 << 20, 10 << 20, False))
    try:
        for _ in range(500):
            if "files.example" in out.getvalue():
                break
            time.sleep(0.01)
    finally:
        monitor.close()
    assert "files.example/pkg.tar.gz" in out.getvalue(), out.getvalue()
    assert SECRET not in out.getvalue() and "builder:" not in out.getvalue(), out.getvalue()


def test_the_json_monitor_writes_warning_notes_to_stderr() -> None:
    """Notes stay out of the JSON stream (stdout), but a warning or note still reaches a person:
    on stderr, as the plain lines say it (found by the fresh-user trial: ``build --json``
    without a lockfile said nothing of it)."""
    from nvkr.monitor.events import Note

    out, err = io.StringIO(), io.StringIO()
    monitor = JsonMonitor(out, err)
    monitor.emit(Note("no lockfile lockfiles/x.lock.json: resolved now", level="warning"))
    monitor.emit(Note(f"building 1 selected variant from {URL}", level="note"))
    monitor.emit(Note("recipe x: 1 variant"))  # informational: for the text display only
    assert out.getvalue() == ""
    assert err.getvalue().splitlines() == [
        "warning: no lockfile lockfiles/x.lock.json: resolved now",
        "note: building 1 selected variant from https://files.example/pkg.tar.gz",
    ]
