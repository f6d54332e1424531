"""Executing a plan: cached actions are skipped, the rest run in parallel up to ``jobs``.

Only what the roots (the release sets) need is considered: an action whose result is in the
action cache is not run and its own inputs are not even fetched, which is what makes a no-op
rebuild take well under a second. Ready actions run on a thread pool (builders spend their time in
subprocesses). Before a builder runs, the sources it reads are put in the store
(:func:`nvkr.fetch.ensure`, once per digest even when several actions want it). A failed action
stops the scheduling of new ones; those already running finish and are cached; the build then
fails with the failed action's log tail. Ctrl-C (or SIGTERM, which the CLI turns into the same
path) cancels what has not started, stops the running tools (:func:`nvkr.run.stop_tools`) and
leaves the store consistent, since every store write is a verified rename.

Every action record the executor writes carries ``run``: ``{"invocationId": <UUID of this
execute() call, i.e. of one nvkr build>, "startedOn", "finishedOn"}`` (RFC 3339 UTC, to the
second; the start is taken before the action's sources are fetched). Nothing hashes records
(action keys come from inputs, a release set from output digests), so the times never reach an
artifact; a cached action keeps the times of the run that built it, and the build record
(:mod:`nvkr.releaseset.record`) reads them from there. Records written before nvkr stored times
have no ``run``.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from nvkr.builders import ActionContext, get_builder
from nvkr.errors import BuildError, Interrupted, NvkrError
from nvkr.fetch import FetchContext, ensure
from nvkr.plan import Action, Plan
from nvkr.provenance import timestamp
from nvkr.run import request_stop, resume, stop_requested, stop_tools, tail
from nvkr.store import Store

Event = Callable[..., None]


@dataclass
class BuildReport:
    """What a build did: action keys ``built`` (builders ran) and ``cached``, every result, and
    ``invocation_id``: the UUID recorded in the ``run`` of every action this build ran."""

    built: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    invocation_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    @property
    def up_to_date(self) -> bool:
        return not self.built


class _SourceGate:
    """Fetch each source digest once, even when parallel actions ask for it at the same time."""

    def __init__(self, ctx: FetchContext, emit: Event) -> None:
        self.ctx = ctx
        self.emit = emit
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def ensure(self, action: Action) -> None:
        for src in action.sources.values():
            with self._guard:
                lock = self._locks.setdefault(src.digest, threading.Lock())
            with lock:
                if src.entry.get("kind") != "path" and not self.ctx.store.has_blob(src.digest):
                    self.emit("source-fetch", source=src)
                got = ensure(src.name, src.spec, src.entry, self.ctx, base_dir=src.base_dir)
            if got != src.digest:  # a path source edited since the plan was made
                raise BuildError(
                    f"source {src.name!r}: the store holds {got}, the plan expects {src.digest}",
                    hint="the source changed during the build; run the same command again",
                )


def _needed(
    plan: Plan, store: Store, targets: list[str] | None = None
) -> tuple[list[str], dict[str, dict[str, Any]], list[str]]:
    """Action keys to run (dependencies first), the cached results found on the way, and the
    actions that are missing: dependencies of ``targets`` (default: the plan's roots, whose
    dependencies are built) that are outside ``targets`` and not cached."""
    cached: dict[str, dict[str, Any]] = {}
    to_run: list[str] = []
    missing: list[str] = []
    seen: set[str] = set()
    selected = set(targets) if targets is not None else None

    def visit(key: str) -> None:
        if key in seen:
            return
        seen.add(key)
        result = store.get_action(key)
        if result is not None:
            cached[key] = result
            return
        if selected is not None and key not in selected:
            missing.append(key)
            return
        for dep in plan.actions[key].deps:
            visit(dep)
        to_run.append(key)

    for root in targets if targets is not None else plan.roots:
        visit(root)
    return to_run, cached, missing


def _closure(plan: Plan, keys: list[str]) -> set[str]:
    """``keys`` and every action they depend on, directly or not."""
    seen: set[str] = set()
    stack = list(keys)
    while stack:
        key = stack.pop()
        if key not in seen:
            seen.add(key)
            stack.extend(plan.actions[key].deps)
    return seen


def run_action(
    action: Action,
    store: Store,
    deps: dict[str, dict[str, Any]],
    *,
    invocation_id: str | None = None,
    started: float | None = None,
) -> dict[str, Any]:
    """Run one action's builder in a fresh work dir and record its result in the action cache.

    The result is ``{"key", "builder", "name", "outputs", "metadata", "hermetic"[,
    "warnings"][, "log"], "run": {"invocationId", "startedOn", "finishedOn"}}``: ``hermetic``
    is :attr:`Action.hermetic` (whether the key covers every tool that can change the outputs:
    only such a result may be shared beyond this store), ``warnings`` what the builder warned
    about (``{"message"[, "hint"]}`` each), ``invocation_id`` (default: a new UUID),
    ``started`` (seconds since 1970, default: now) and the time the builder returned, both as
    RFC 3339 UTC (:func:`nvkr.provenance.timestamp`).

    Raises:
        NvkrError: the builder failed: the same class (so the same code and exit code, e.g. an
            IntegrityError exits 3), its message prefixed with the action, its builder and key,
            and followed by the log's tail.
        BuildError: the builder hit an OSError (disk full, permissions), named likewise.
    """
    builder = get_builder(action.builder)
    started = time.time() if started is None else started
    with store.workdir(prefix=f"act-{action.key[7:19]}-") as workdir:
        ctx = ActionContext(action, store, workdir, deps)
        try:
            builder.run(ctx)
        except NvkrError as e:
            # The error keeps its class, code and exit code (an integrity failure exits 3, a
            # recipe error 2); its message gains the action and the tail of its log.
            e.message = f"{_failed(action)}: {e.message}{_log_tail(ctx, e.message)}"
            e.args = (e.message,)
            raise
        except OSError as e:
            # The machine, not nvkr: a full disk, a permission, a file that went away.
            where = f" ({e.filename})" if e.filename else ""
            message = f"{_failed(action)}: {e.strerror or e}{where}"
            raise BuildError(
                message + _log_tail(ctx, message),
                hint="free space in the store's file system, or check its permissions",
            ) from e
        result: dict[str, Any] = {
            "key": action.key,
            "builder": action.builder,
            "name": action.name,
            "outputs": ctx.outputs,
            "metadata": ctx.metadata,
            "hermetic": action.hermetic,
        }
        if ctx.warnings:
            result["warnings"] = ctx.warnings
        if ctx.log_file.exists():
            result["log"] = store.add_file(ctx.log_file, what="build log").digest
    result["run"] = {
        "invocationId": invocation_id or str(uuid.uuid4()),
        "startedOn": timestamp(started),
        "finishedOn": timestamp(max(started, time.time())),  # a clock stepped back mid-action
    }
    store.put_action(action.key, result)
    return result


def _failed(action: Action) -> str:
    return f"action {action.name!r} (builder {action.builder}, key {action.key[:19]}) failed"


def _log_tail(ctx: ActionContext, message: str) -> str:
    """The tail of the action's log on a line of its own, unless ``message`` already holds it."""
    log = ctx.log_file.read_text(errors="replace") if ctx.log_file.exists() else ""
    return f"\n{tail(log)}" if log and tail(log) not in message else ""


def execute(
    plan: Plan,
    store: Store,
    fetch: FetchContext,
    *,
    jobs: int = 2,
    event: Event | None = None,
    invocation_id: str | None = None,
    targets: list[str] | None = None,
) -> BuildReport:
    """Bring every root of ``plan`` into the action cache; return what was built and cached.

    With ``targets`` (action keys, ``nvkr build --action``) exactly those are brought in
    instead: what they depend on must already be cached, since only targets run.

    Each action run is recorded with ``invocation_id`` (default: a new UUID; the report's
    ``invocation_id`` either way) and its times (module docstring).

    ``event(kind, **fields)`` is called for ``action-cached``, ``action-start``, ``action-done``
    (with ``seconds``), ``action-failed`` (with ``error``), ``source-fetch`` (with ``source``,
    a :class:`~nvkr.builders.ResolvedSource` about to be downloaded; from a worker thread) and,
    once the roots are done, ``action-warning`` (with ``message`` and ``hint``, possibly None)
    for each warning recorded by an action the roots need, built now or before.

    Raises:
        BuildError: an action failed (after running ones have finished and been cached); a
            dependency of ``targets`` is neither a target nor cached (naming each, before
            anything runs).
        Interrupted: Ctrl-C (exit 130) or SIGTERM (exit 143).
    """
    emit: Event = event or (lambda kind, **f: None)
    report = BuildReport()
    if invocation_id is not None:
        report.invocation_id = invocation_id
    to_run, cached, missing = _needed(plan, store, targets)
    if missing:
        raise BuildError(
            f"the selected actions need {len(missing)} action(s) that are not cached: "
            + ", ".join(f"{plan.actions[k].ref} ({k[:19]})" for k in missing),
            hint="build those first (the fan-out units they belong to come earlier, "
            "`nvkr plan --fan-out`), or select them too",
        )
    report.cached = list(cached)
    report.results.update(cached)
    for key in cached:
        emit("action-cached", action=plan.actions[key])
    if not to_run:
        _emit_warnings(plan, store, report, emit, targets)
        return report

    gate = _SourceGate(fetch, emit)
    pending = list(to_run)
    running: dict[Future[dict[str, Any]], str] = {}
    failure: BaseException | None = None
    failed: Action | None = None

    def work(action: Action) -> dict[str, Any]:
        started = time.time()
        gate.ensure(action)
        deps = {k: report.results[k] for k in action.deps}
        return run_action(action, store, deps, invocation_id=report.invocation_id, started=started)

    pool = ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="nvkr-action")
    started: dict[str, float] = {}
    try:
        while pending or running:
            if failure is None:
                for key in list(pending):
                    if len(running) >= max(1, jobs):
                        break
                    if all(d in report.results for d in plan.actions[key].deps):
                        pending.remove(key)
                        started[key] = time.monotonic()
                        emit("action-start", action=plan.actions[key])
                        running[pool.submit(work, plan.actions[key])] = key
            elif not running:
                break
            if not running:
                raise NvkrError("internal: no action is ready but some are pending (cycle?)")
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:
                key = running.pop(fut)
                try:
                    report.results[key] = fut.result()
                    report.built.append(key)
                    emit(
                        "action-done",
                        action=plan.actions[key],
                        seconds=time.monotonic() - started[key],
                    )
                except BaseException as e:
                    emit("action-failed", action=plan.actions[key], error=e)
                    if failure is None:
                        failure, failed = e, plan.actions[key]
    except KeyboardInterrupt:
        # Ctrl-C, or SIGTERM turned into one by the CLI: the running tools are stopped (they
        # clean up, then are killed), their actions fail and are dropped, the finished ones
        # stay cached.
        request_stop(signal.SIGINT)  # a no-op after the CLI's signal handler made the request
        signum = stop_requested() or signal.SIGINT
        stop_tools()
        pool.shutdown(wait=True, cancel_futures=True)
        resume()
        raise Interrupted(
            f"{'terminated' if signum == signal.SIGTERM else 'interrupted'}; "
            f"{len(report.built)} finished actions are cached",
            hint="run the same command again to continue",
            signum=signum,
        ) from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    if failure is not None:
        assert failed is not None
        if isinstance(failure, NvkrError):
            raise failure
        if isinstance(failure, OSError):  # fetching its sources: the disk, the permissions
            where = f" ({failure.filename})" if failure.filename else ""
            raise BuildError(
                f"{_failed(failed)}: {failure.strerror or failure}{where}",
                hint="free space in the store's file system, or check its permissions",
            ) from failure
        # Anything else is a bug in nvkr (a builder's own exception), reported as one.
        raise NvkrError(
            f"internal error in {_failed(failed)}: {failure!r}",
            hint="run again with --debug for a traceback, and report it",
        ) from failure
    _emit_warnings(plan, store, report, emit, targets)
    return report


def _record(store: Store, key: str) -> dict[str, Any]:
    """The action record of ``key`` as stored, without checking its blobs (only its warnings
    are read; a no-op rebuild reads every record of the plan this way), or ``{}``."""
    try:
        record = json.loads(store.action_path(key).read_bytes())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _emit_warnings(
    plan: Plan, store: Store, report: BuildReport, emit: Event, targets: list[str] | None
) -> None:
    """``action-warning`` for every warning in the records of the actions the roots (or the
    ``targets``) need, in plan order: those below a cached action were never looked at, so
    their records are read from the action cache (a no-op rebuild warns as the first build
    did)."""
    needed = _closure(plan, targets if targets is not None else plan.roots)
    for key, action in plan.actions.items():
        if key not in needed:
            continue
        record = report.results.get(key) or _record(store, key)
        for warning in record.get("warnings") or []:
            emit(
                "action-warning",
                action=action,
                message=warning["message"],
                hint=warning.get("hint"),
            )
