"""Executing a plan: cached actions are skipped, the rest run in parallel up to ``jobs``.

Only what the roots (the release sets) need is considered: an action whose result is in the
action cache is not run and its own inputs are not even fetched, which is what makes a no-op
rebuild take well under a second. Ready actions run on a thread pool (builders spend their time in
subprocesses). Before a builder runs, the sources it reads are put in the store
(:func:`nvkr.fetch.ensure`, once per digest even when several actions want it). A failed action
stops the scheduling of new ones; those already running finish and are cached; the build then
fails with the failed action's log tail. Ctrl-C cancels what has not started and leaves the
store consistent, since every store write is a verified rename.

With a remote cache (``nvkr build --cache-from``, :mod:`nvkr.cache`) the walk asks the local
store, then the caches, then builds: an action missing locally is looked up remotely (in a pool
of :data:`LOOKUP_JOBS`, as the walk reaches it), and a hit stops the descent like a local one, so
a fresh runner whose cache holds the node images downloads them and never the root filesystems
beneath. A result whose outputs reference blobs the store lacks (an image index taken from a cache
without the per-arch images its dependencies made) is used, and its dependencies are looked at
too. ``cached_only`` runs no builder: what is neither in the store nor in a cache is named in the
error.

Every action record the executor writes carries ``run``: ``{"invocationId": <UUID of this
execute() call, i.e. of one nvkr build>, "startedOn", "finishedOn"}`` (RFC 3339 UTC, to the
second; the start is taken before the action's sources are fetched), and the metadata keys its
builder declares as describing the run (``run_metadata``: node-image's ``timings``), which thus
never reach a result a cache shares (:mod:`nvkr.cache.entry`). Nothing hashes records
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
from typing import Any, Final, Protocol

from nvkr.builders import ActionContext, get_builder
from nvkr.cache.entry import missing_closure
from nvkr.errors import BuildError, Interrupted, NvkrError
from nvkr.fetch import FetchContext, ensure
from nvkr.plan import Action, Plan
from nvkr.provenance import timestamp
from nvkr.run import tail
from nvkr.store import Store

Event = Callable[..., None]
#: ``on_result(action, result, how)``: how is ``built``, ``cached`` (the store) or ``remote``.
ResultHook = Callable[[Action, dict[str, Any], str], None]

#: Remote lookups at a time: each is a few small requests (tag, referrers, signature, config)
#: before any download, so a handful in flight hides a registry's latency; more would only
#: burst requests at a registry that may rate-limit a CI fleet.
LOOKUP_JOBS: Final = 8


@dataclass(frozen=True)
class RemoteHit:
    """An action result taken from a remote cache: ``result`` (already in the action cache,
    its outputs in the store), ``cache`` (``REGISTRY/REPOSITORY``) and ``complete``: False when
    its outputs reference blobs the store lacks, so its dependencies are needed as well."""

    result: dict[str, Any]
    cache: str
    complete: bool = True


class RemoteLookup(Protocol):
    """What the executor asks before building an action the store lacks (:mod:`nvkr.cache`).

    ``lookup`` is called from worker threads; it never raises for a bad or missing entry (a
    miss is None) and reports what it did through its own events.
    """

    def lookup(self, action: Action) -> RemoteHit | None: ...


@dataclass
class BuildReport:
    """What a build did: action keys ``built`` (builders ran), ``cached`` (found in the store)
    and ``remote`` (key → the cache it came from), every result, and ``invocation_id``: the UUID
    recorded in the ``run`` of every action this build ran."""

    built: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    remote: dict[str, str] = field(default_factory=dict)
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


@dataclass
class _Walk:
    """What :func:`_needed` found: keys ``to_run`` (dependencies first), results ``cached`` in
    the store, ``remote`` hits, and ``incomplete``: results whose outputs reference blobs only
    their dependencies' results hold (so whatever reads them waits for those too)."""

    to_run: list[str]
    cached: dict[str, dict[str, Any]]
    remote: dict[str, RemoteHit]
    incomplete: set[str] = field(default_factory=set)

    def waits(self, plan: Plan, key: str) -> set[str]:
        """The keys whose results must be in before ``key`` runs: its dependencies, and through
        an incomplete one, that one's dependencies (transitively)."""
        out: set[str] = set()
        stack = list(plan.actions[key].deps)
        while stack:
            dep = stack.pop()
            if dep in out:
                continue
            out.add(dep)
            if dep in self.incomplete:
                stack.extend(plan.actions[dep].deps)
        return out


def _needed(plan: Plan, store: Store, remote: RemoteLookup | None = None) -> _Walk:
    """Walk down from the roots: the store first, then ``remote``, then the action is to run
    and its dependencies are looked at. Remote lookups run :data:`LOOKUP_JOBS` at a time."""
    cached: dict[str, dict[str, Any]] = {}
    hits: dict[str, RemoteHit] = {}
    missing: set[str] = set()
    incomplete: set[str] = set()
    seen: set[str] = set()
    pending: dict[Future[RemoteHit | None], str] = {}
    pool = (
        ThreadPoolExecutor(max_workers=LOOKUP_JOBS, thread_name_prefix="nvkr-lookup")
        if remote is not None
        else None
    )

    def descend(key: str) -> None:
        for dep in plan.actions[key].deps:
            visit(dep)

    def visit(key: str) -> None:
        if key in seen:
            return
        seen.add(key)
        result = store.get_action(key)
        if result is not None:
            cached[key] = result
            # a result an earlier build took from a cache may still lack its closure
            if "remote" in result and missing_closure(store, result.get("outputs") or []):
                incomplete.add(key)
                descend(key)
            return
        if pool is None:
            missing.add(key)
            descend(key)
            return
        pending[pool.submit(remote.lookup, plan.actions[key])] = key  # type: ignore[union-attr]

    try:
        for root in plan.roots:
            visit(root)
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                key = pending.pop(fut)
                hit = fut.result()
                if hit is None:
                    missing.add(key)
                    descend(key)
                else:
                    hits[key] = hit
                    if not hit.complete:
                        incomplete.add(key)
                        descend(key)
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return _Walk([k for k in plan.actions if k in missing], cached, hits, incomplete)


def _missing_error(plan: Plan, to_run: list[str]) -> BuildError:
    """``--cached-only`` found actions neither the store nor a cache holds: name each."""
    lines = []
    for key in to_run:
        a = plan.actions[key]
        variants = "; ".join(a.variants) if a.variants else "every variant"
        lines.append(f"  {a.name} (builder {a.builder}, variant {variants}, key {key})")
    return BuildError(
        f"--cached-only: {len(to_run)} action{'s' if len(to_run) != 1 else ''} "
        "neither in the store nor in a cache:\n" + "\n".join(lines),
        hint="build them first (the fan-out's jobs push them with --cache-to), or check "
        "--cache-from, --cache-salt and --cache-trust",
    )


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
    {"invocationId", "startedOn", "finishedOn"[, the builder's run_metadata keys]}}``:
    ``invocation_id`` (default: a new UUID),
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
        # what the builder says describes its run (times) goes with the run, not the metadata
        run_keys = [k for k in getattr(builder, "run_metadata", ()) if k in ctx.metadata]
        run_details = {k: ctx.metadata.pop(k) for k in run_keys}
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
        **run_details,
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
    remote: RemoteLookup | None = None,
    cached_only: bool = False,
    on_result: ResultHook | None = None,
) -> BuildReport:
    """Bring every root of ``plan`` into the action cache; return what was built and cached.

    ``remote`` is asked for what the store lacks before anything is built (module docstring);
    with ``cached_only`` nothing is built. ``on_result(action, result, how)`` is called (from
    this thread) for every result the build found or made: ``cached`` and ``remote`` ones as
    the walk finds them, ``built`` ones after their ``action-done`` (a cache writer pushes them).

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
        BuildError: an action failed (after running ones have finished and been cached), or
            ``cached_only`` and some action is neither in the store nor in a cache (each named).
        Interrupted: Ctrl-C.
    """
    emit: Event = event or (lambda kind, **f: None)
    hook: ResultHook = on_result or (lambda action, result, how: None)
    report = BuildReport()
    if invocation_id is not None:
        report.invocation_id = invocation_id
    walk = _needed(plan, store, remote)
    to_run, cached = walk.to_run, walk.cached
    report.cached = list(cached)
    report.results.update(cached)
    for key, hit in walk.remote.items():
        report.remote[key] = hit.cache
        report.results[key] = hit.result
    for key in cached:
        emit("action-cached", action=plan.actions[key])
        _warnings(emit, plan.actions[key], cached[key])
        hook(plan.actions[key], cached[key], "cached")
    for key, hit in walk.remote.items():
        _warnings(emit, plan.actions[key], hit.result)
        hook(plan.actions[key], hit.result, "remote")
    for key, action in plan.actions.items():
        # below a cached action nothing is visited, yet its warnings still hold
        if key not in report.results and key not in to_run:
            below = store.get_action(key)
            if below is not None:
                _warnings(emit, action, below)
    if cached_only and to_run:
        raise _missing_error(plan, to_run)
    if not to_run:
        return report

    gate = _SourceGate(fetch, emit)
    pending = list(to_run)
    waits = {key: walk.waits(plan, key) for key in to_run}
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
                    if all(d in report.results for d in waits[key]):
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
                    hook(plan.actions[key], report.results[key], "built")
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
