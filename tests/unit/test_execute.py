"""The executor: caching, parallelism, failures and Ctrl-C, with small in-process builders."""

from __future__ import annotations

import dataclasses
import os
import threading
from pathlib import Path

import pytest

from nvkr.action import Action, action_key
from nvkr.errors import (
    BuildError,
    ChecksumError,
    IntegrityError,
    Interrupted,
    NvkrError,
    RecipeError,
    ToolError,
)
from nvkr.execute import execute
from nvkr.fetch.context import FetchContext
from nvkr.monitor import ListMonitor
from nvkr.monitor.events import ActionStarted, ActionWarning, Event, event_name
from nvkr.run import run
from nvkr.store import Store
from tests.helpers import lock_entry
from tests.helpers.recorder import echo_action, make_plan


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "store")


def test_builds_then_everything_is_cached(recorder, store):
    a, b = echo_action("a"), echo_action("b")
    top = echo_action("top", deps=[a.key, b.key])
    plan = make_plan(a, b, top, roots=[top])
    report = execute(plan, store, FetchContext(store=store), jobs=2)
    assert sorted(recorder.calls) == ["a", "b", "top"]
    assert report.built[-1] == top.key and not report.cached
    recorder.calls.clear()
    again = execute(plan, store, FetchContext(store=store), jobs=2)
    assert recorder.calls == [], "a no-op rebuild runs no builder"
    assert again.up_to_date and again.cached == [top.key]
    assert again.results[top.key] == report.results[top.key]
    assert not os.listdir(store.tmp_dir)


def test_independent_actions_run_in_parallel(recorder, store):
    barrier = threading.Barrier(2, timeout=10)
    recorder.hooks = {"a": lambda ctx: barrier.wait(), "b": lambda ctx: barrier.wait()}
    a, b = echo_action("a"), echo_action("b")
    top = echo_action("top", deps=[a.key, b.key])
    execute(make_plan(a, b, top, roots=[top]), store, FetchContext(store=store), jobs=2)
    # With jobs=1 the barrier would time out (BrokenBarrierError) instead.
    assert sorted(recorder.calls) == ["a", "b", "top"]


def test_failure_reports_log_tail_and_keeps_finished_actions(recorder, store):
    b_started = threading.Event()

    def fail(ctx):
        b_started.wait(10)
        run(
            ["sh", "-c", "echo compiling; echo 'main.go:3: undefined: frob' >&2; exit 1"],
            log_file=ctx.log_file,
        )

    recorder.hooks = {"a": fail, "b": lambda ctx: b_started.set()}
    a, b = echo_action("a"), echo_action("b")
    top = echo_action("top", deps=[a.key, b.key])
    with pytest.raises(ToolError) as e:  # the failed tool's own error, named by the action
        execute(make_plan(a, b, top, roots=[top]), store, FetchContext(store=store), jobs=2)
    assert e.value.exit_code == 1
    assert "'a'" in e.value.message and "undefined: frob" in e.value.message
    assert "top" not in recorder.calls
    assert store.get_action(b.key) is not None, "the action that finished stays cached"
    assert store.get_action(a.key) is None
    assert not os.listdir(store.tmp_dir)


def test_tool_error_is_wrapped_with_action_name(recorder, store):
    recorder.hooks = {"a": lambda ctx: (_ for _ in ()).throw(ToolError("tool 'mkfs' not found"))}
    a = echo_action("a")
    with pytest.raises(ToolError, match=r"action 'a'.*tool 'mkfs' not found"):
        execute(make_plan(a, roots=[a]), store, FetchContext(store=store), jobs=1)


@pytest.mark.parametrize(
    ("error", "code", "exit_code"),
    [
        (IntegrityError("store blob sha256:ab is corrupt"), "NVKR-E-INTEGRITY", 3),
        (ChecksumError("sha256 mismatch"), "NVKR-E-CHECKSUM", 3),
        (RecipeError("a link out of the source", hint="fix it"), "NVKR-E-RECIPE", 2),
    ],
)
def test_an_error_raised_in_a_builder_keeps_its_code_and_exit_code(
    recorder, store, error, code, exit_code
):
    def fail(ctx):
        raise error

    recorder.hooks = {"a": fail}
    a = echo_action("a")
    with pytest.raises(NvkrError) as e:
        execute(make_plan(a, roots=[a]), store, FetchContext(store=store), jobs=1)
    assert (e.value.code, e.value.exit_code) == (code, exit_code)
    assert e.value.message.startswith("action 'a' (builder test-echo, key sha256:")
    assert e.value.message.endswith(str(error)) and e.value.hint == error.hint


def test_an_os_error_in_a_builder_is_a_build_error_not_an_internal_one(recorder, store):
    def fail(ctx):
        raise OSError(28, "No space left on device", str(ctx.workdir / "disk.raw"))

    recorder.hooks = {"a": fail}
    a = echo_action("a")
    with pytest.raises(BuildError) as e:
        execute(make_plan(a, roots=[a]), store, FetchContext(store=store), jobs=1)
    assert "internal" not in e.value.message
    assert "action 'a'" in e.value.message and "No space left on device" in e.value.message


def test_ctrl_c_cancels_pending_and_leaves_store_consistent(recorder, store):
    a, b = echo_action("a"), echo_action("b")
    top = echo_action("top", deps=[a.key, b.key])

    class Stop:
        def emit(self, event):
            if isinstance(event, ActionStarted) and event.action.name == "a":
                raise KeyboardInterrupt

        def close(self):
            pass

    with pytest.raises(Interrupted) as e:
        execute(
            make_plan(a, b, top, roots=[top]),
            store,
            FetchContext(store=store),
            jobs=1,
            monitor=Stop(),
        )
    assert e.value.exit_code == 130
    assert "top" not in recorder.calls
    assert not os.listdir(store.tmp_dir)
    for key in (a.key, b.key):
        result = store.get_action(key)
        assert result is None or all(store.has_blob(o.digest) for o in result.outputs)
    # The next run completes the build.
    execute(make_plan(a, b, top, roots=[top]), store, FetchContext(store=store), jobs=1)
    assert store.get_action(top.key) is not None


def test_action_key_covers_every_input():
    base = action_key("b", "1", {"p": 1}, {"src": "sha256:" + "0" * 64}, {"go": "1.27.3"}, 10)
    assert base == action_key(
        "b", "1", {"p": 1}, {"src": "sha256:" + "0" * 64}, {"go": "1.27.3"}, 10
    )
    variants = [
        action_key("c", "1", {"p": 1}, {"src": "sha256:" + "0" * 64}, {"go": "1.27.3"}, 10),
        action_key("b", "2", {"p": 1}, {"src": "sha256:" + "0" * 64}, {"go": "1.27.3"}, 10),
        action_key("b", "1", {"p": 2}, {"src": "sha256:" + "0" * 64}, {"go": "1.27.3"}, 10),
        action_key("b", "1", {"p": 1}, {"src": "sha256:" + "1" * 64}, {"go": "1.27.3"}, 10),
        action_key("b", "1", {"p": 1}, {"src": "sha256:" + "0" * 64}, {"go": "1.27.2"}, 10),
        action_key("b", "1", {"p": 1}, {"src": "sha256:" + "0" * 64}, {"go": "1.27.3"}, 11),
    ]
    assert base not in variants and len(set(variants)) == len(variants)


def test_sources_are_fetched_once_before_the_builders_that_read_them(recorder, store, tmp_path):
    import hashlib

    from nvkr.builders.api import ResolvedSource
    from nvkr.recipe.sources import UrlSource

    payload = tmp_path / "tool.bin"
    payload.write_bytes(b"tool bytes")
    digest = "sha256:" + hashlib.sha256(b"tool bytes").hexdigest()
    url = payload.as_uri()
    src = ResolvedSource(
        name="tool",
        spec=UrlSource(url=url, sha256=digest[7:]),
        entry=lock_entry(
            {"kind": "url", "url": url, "size": 10, "digest": digest, "sha256": digest}
        ),
        base_dir=tmp_path,
    )
    seen: list[bool] = []
    recorder.hooks = {n: (lambda ctx: seen.append(ctx.store.has_blob(digest))) for n in ("a", "b")}
    actions = []
    for name in ("a", "b"):
        key = action_key("test-echo", "1", {"n": name}, {"tool": digest}, {}, 0)
        actions.append(
            Action(
                key=key,
                builder="test-echo",
                builder_version="1",
                name=name,
                params={"n": name},
                inputs={"tool": digest},
                tools={},
                epoch=0,
                sources={"tool": src},
            )
        )
    events: list[Event] = []
    top = echo_action("top", deps=[a.key for a in actions])
    execute(
        make_plan(*actions, top, roots=[top]),
        store,
        FetchContext(store=store),
        jobs=2,
        monitor=ListMonitor(events),
    )
    assert seen == [True, True], "the source is in the store before each builder runs"
    kinds = [event_name(e) for e in events]
    assert kinds.count("source-fetch") == 1, "two actions share one download"
    assert store.read_blob(digest) == b"tool bytes"


def test_sigterm_stops_a_running_tool_and_keeps_the_finished_actions(recorder, store, tmp_path):
    # the CLI's handler turns SIGTERM into a KeyboardInterrupt in the main thread, which waits
    # for the actions: the tool a worker thread runs is stopped (it got no signal of its own),
    # the finished action stays cached, exit 143
    import signal
    import time

    from nvkr.cli import _on_stop_signal

    pidfile = tmp_path / "tool.pid"

    def slow(ctx):
        run(["sh", "-c", f"echo $$ > {pidfile}; exec sleep 60"], log_file=ctx.log_file)

    a, b = echo_action("a"), echo_action("b")
    top = echo_action("top", deps=[a.key, b.key])

    def send_sigterm_once_the_tool_runs_and_b_is_cached():
        while not (pidfile.exists() and pidfile.read_text().endswith("\n")):
            time.sleep(0.02)
        while store.get_action(b.key) is None:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)

    recorder.hooks = {"a": slow}
    previous = signal.signal(signal.SIGTERM, _on_stop_signal)
    try:
        threading.Thread(
            target=send_sigterm_once_the_tool_runs_and_b_is_cached, daemon=True
        ).start()
        started = time.monotonic()
        with pytest.raises(Interrupted) as e:
            execute(make_plan(a, b, top, roots=[top]), store, FetchContext(store=store), jobs=2)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert time.monotonic() - started < 30, "the tool was stopped, not waited for"
    assert e.value.exit_code == 143 and e.value.message.startswith("terminated;")
    stat = Path(f"/proc/{int(pidfile.read_text())}/stat")
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    assert store.get_action(b.key) is not None and store.get_action(a.key) is None
    assert "top" not in recorder.calls
    assert not os.listdir(store.tmp_dir)
    assert run(["true"]).returncode == 0, "the executor leaves no stop behind for its caller"


def test_records_say_hermetic_and_warnings_come_back_from_the_cache(recorder, store):
    """An action's record says whether its key covers every tool (for a shared cache to keep
    the rest local); a builder's warning is kept in the record and emitted again by a no-op
    rebuild, where the action is only found below a cached one."""
    recorder.hooks["a"] = lambda ctx: ctx.warn("a is odd", hint="make it even")
    a = echo_action("a")
    b = dataclasses.replace(echo_action("b"), hermetic=False)
    top = echo_action("top", deps=[a.key, b.key])
    plan = make_plan(a, b, top, roots=[top])
    events: list[Event] = []
    execute(plan, store, FetchContext(store=store), jobs=1, monitor=ListMonitor(events))
    record_a, record_b = store.get_action(a.key), store.get_action(b.key)
    assert record_a is not None and record_b is not None
    json_a, json_b = record_a.to_json(), record_b.to_json()
    assert json_a["hermetic"] is True and json_b["hermetic"] is False
    assert json_a["warnings"] == [{"message": "a is odd", "hint": "make it even"}]
    assert "warnings" not in json_b
    warned = [(e.action.name, e.message, e.hint) for e in events if isinstance(e, ActionWarning)]
    assert warned == [("a", "a is odd", "make it even")]
    events.clear()
    again = execute(plan, store, FetchContext(store=store), jobs=1, monitor=ListMonitor(events))
    assert again.up_to_date
    warned = [(e.action.name, e.message) for e in events if isinstance(e, ActionWarning)]
    assert warned == [("a", "a is odd")]


def test_a_per_arch_source_downloads_as_its_own_transfer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Both arches' apt packages download at the same time under one source name: each is a
    transfer of its own (``node-packages [arm64]``), so the plain log's 'fetched ... in N s'
    times each one (the arm64 download was printed as 5 s: the amd64 one's start was taken);
    a source without an arch keeps its name."""
    from types import SimpleNamespace

    import nvkr.execute as execute
    from nvkr.monitor.events import Transfer

    events: list[Transfer] = []
    monkeypatch.setattr(execute, "ensure", lambda *a, **k: "sha256:" + "0" * 64)
    monkeypatch.setattr(execute, "entry_blobs", lambda entry: [])
    gate = execute._SourceGate(ctx=FetchContext(store=Store(tmp_path / "s")), emit=events.append)
    for spec in (SimpleNamespace(arch="arm64"), SimpleNamespace()):
        src = SimpleNamespace(name="node-packages", spec=spec, entry={}, base_dir=None)
        gate._fetch(src, fetching=True, total=10)  # type: ignore[arg-type]
    assert [(e.what, e.finished) for e in events] == [
        ("node-packages [arm64]", True),
        ("node-packages", True),
    ]


def test_a_fetchers_note_is_a_note_of_the_builds_stream(tmp_path: Path) -> None:
    """What a fetcher says for a person (.debs fetched from a snapshot archive, issue 31) goes
    to the build's event stream as a note, not to the log."""
    import nvkr.execute as execute
    from nvkr.monitor.events import Note

    events: list[Event] = []
    gate = execute._SourceGate(ctx=FetchContext(store=Store(tmp_path / "s")), emit=events.append)
    gate.ctx.note("fetched 2 .debs of source 'x' from the snapshot archive A")
    assert events == [Note("fetched 2 .debs of source 'x' from the snapshot archive A", "note")]
