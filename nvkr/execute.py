"""Executing a plan: cached actions are skipped, the rest run in parallel up to ``jobs``.

Only what the roots (the release sets) need is considered: an action whose result is in the
action cache is not run and its own inputs are not even fetched, which is what makes a no-op
rebuild take well under a second. Ready actions run on a thread pool (builders spend their time in
subprocesses). Before a builder runs, the sources it reads are put in the store
(:func:`nvkr.fetch.ensure`, once per digest even when several actions want it). A failed action
stops the scheduling of new ones; those already running finish and are cached; the build then
fails with the failed action's log tail. Ctrl-C cancels what has not started and leaves the
store consistent, since every store write is a verified rename.

Every action record the executor writes carries ``run``: ``{"invocationId": <UUID of this
execute() call, i.e. of one nvkr build>, "startedOn", "finishedOn"}`` (RFC 3339 UTC, to the
second; the start is taken before the action's sources are fetched). Nothing hashes records
(action keys come from inputs, a release set from output digests), so the times never reach an
artifact; a cached action keeps the times of the run that built it, and the build record
(:mod:`nvkr.releaseset.record`) reads them from there. Records written before nvkr stored times
have no ``run``.
"""

from __future__ import annotations

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
from nvkr.run import tail
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
            if got != src.digest:
                raise NvkrError(
                    f"source {src.name!r}: the store holds {got}, the plan expects {src.digest}"
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

    The result is ``{"key", "builder", "name", "outputs", "metadata"[, "warnings"][, "log"], "run":
    {"invocationId", "startedOn", "finishedOn"}}``: ``invocation_id`` (default: a new UUID),
    ``started`` (seconds since 1970, default: now) and the time the builder returned, both as
    RFC 3339 UTC (:func:`nvkr.provenance.timestamp`).

    Raises:
        BuildError: the builder failed; the message holds the action, its builder and log tail.
    """
    builder = get_builder(action.builder)
    started = time.time() if started is None else started
    with store.workdir(prefix=f"act-{action.key[7:19]}-") as workdir:
        ctx = ActionContext(action, store, workdir, deps)
        try:
            builder.run(ctx)
        except NvkrError as e:
            log = ctx.log_file.read_text(errors="replace") if ctx.log_file.exists() else ""
            detail = f"\n{tail(log)}" if log and tail(log) not in e.message else ""
            raise BuildError(
                f"action {action.name!r} (builder {action.builder}, key {action.key[:19]}) failed: {e.message}{detail}",
                hint=e.hint,
            ) from e
        result: dict[str, Any] = {
            "key": action.key,
            "builder": action.builder,
            "name": action.name,
            "outputs": ctx.outputs,
            "metadata": ctx.metadata,
        }
        if ctx.warnings:
            result["warnings"] = list(ctx.warnings)
        if ctx.log_file.exists():
            result["log"] = store.add_file(ctx.log_file, what="build log").digest
    result["run"] = {
        "invocationId": invocation_id or str(uuid.uuid4()),
        "startedOn": timestamp(started),
        "finishedOn": timestamp(max(started, time.time())),  # a clock stepped back mid-action
    }
    store.put_action(action.key, result)
    return result


def _warnings(emit: Event, action: Action, result: dict[str, Any]) -> None:
    for message in result.get("warnings") or []:
        emit("action-warning", action=action, message=str(message))


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
    (with ``seconds``), ``action-failed`` (with ``error``), ``action-warning`` (with
    ``message``: one per warning of the action's result, after its ``action-done`` or
    ``action-cached``, and for the stored results below cached actions too, so a cached output
    warns on every build) and ``source-fetch`` (with
    ``source``, a :class:`~nvkr.builders.ResolvedSource` about to be downloaded; from a worker
    thread).

    Raises:
        BuildError: an action failed (after running ones have finished and been cached); a
            dependency of ``targets`` is neither a target nor cached (naming each, before
            anything runs).
        Interrupted: Ctrl-C.
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
    closure = _closure(plan, targets) if targets is not None else set()
    report.cached = list(cached)
    report.results.update(cached)
    for key in cached:
        emit("action-cached", action=plan.actions[key])
        _warnings(emit, plan.actions[key], cached[key])
    for key, action in plan.actions.items():
        # below a cached action nothing is visited, yet its warnings still hold (of the
        # selected actions' closure only, when targets are given)
        if key not in cached and key not in to_run and (targets is None or key in closure):
            below = store.get_action(key)
            if below is not None:
                _warnings(emit, action, below)
    if not to_run:
        return report

    gate = _SourceGate(fetch, emit)
    pending = list(to_run)
    running: dict[Future[dict[str, Any]], str] = {}
    failure: BaseException | None = None

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
                    _warnings(emit, plan.actions[key], report.results[key])
                except BaseException as e:
                    emit("action-failed", action=plan.actions[key], error=e)
                    if failure is None:
                        failure = e
    except KeyboardInterrupt:
        pool.shutdown(wait=True, cancel_futures=True)
        raise Interrupted(
            f"interrupted; {len(report.built)} finished actions are cached",
            hint="run the same command again to continue",
        ) from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    if failure is not None:
        if isinstance(failure, NvkrError):
            raise failure
        raise BuildError(f"internal error in an action: {failure!r}") from failure
    return report
