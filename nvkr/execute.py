"""Executing a plan: cached actions are skipped, the rest run in parallel up to ``jobs``.

Only what the roots (the release sets) need is considered: an action whose result is in the
action cache is not run and its own inputs are not even fetched, which is what makes a no-op
rebuild take well under a second. Ready actions run on a thread pool (builders spend their time in
subprocesses). Before a builder runs, the sources it reads are put in the store
(:func:`nvkr.fetch.api.ensure`, once per digest even when several actions want it). A failed action
stops the scheduling of new ones; those already running finish and are cached; the build then
fails with the failed action's log tail. Ctrl-C (or SIGTERM, which the CLI turns into the same
path) cancels what has not started, stops the running tools (:func:`nvkr.run.stop_tools`) and
leaves the store consistent, since every store write is a verified rename.

With a remote cache (``nvkr build --cache-from``, :mod:`nvkr.cache`) the walk asks the local
store, then the caches, then builds: an action missing locally is looked up remotely (in a pool
of :data:`~nvkr.walk.LOOKUP_JOBS`, as the walk reaches it, :mod:`nvkr.walk`), and a hit stops the descent like a local one, so
a fresh runner whose cache holds the node images downloads them and never the root filesystems
beneath. A result whose outputs reference blobs the store lacks (an image index taken from a cache
without the per-arch images its dependencies made, or one whose per-arch image lost a layer
since) is used, and its dependencies are looked at too, so what made the lost blob runs again.
``cached_only`` runs no builder: what is neither in the store nor in a cache is named in the
error.

Every action record the executor writes carries ``run``: ``{"invocationId": <UUID of this
execute() call, i.e. of one nvkr build>, "startedOn", "finishedOn"}`` (RFC 3339 UTC, to the
second, from the build's :class:`BuildClock`, which never goes backwards; the start is taken
before the action's sources are fetched), and the metadata keys its
builder declares as describing the run (``run_metadata``: node-image's ``timings``), which thus
never reach a result a cache shares (:mod:`nvkr.cache.entry`). Nothing hashes records
(action keys come from inputs, a release set from output digests), so the times never reach an
artifact; a cached action keeps the times of the run that built it, and the build record
(:mod:`nvkr.releaseset.record`) reads them from there. Records written before nvkr stored times
have no ``run``.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from nvkr.action import Action, ActionResult, ResolvedSource, ResultWarning
from nvkr.builders.api import ActionContext, get_builder
from nvkr.errors import BuildError, IntegrityError, Interrupted, NvkrError
from nvkr.fetch.api import all_present, ensure, entry_blobs, fetcher_for
from nvkr.fetch.context import FetchContext
from nvkr.monitor import Monitor, estimates, transfer
from nvkr.monitor.events import (
    ActionCached,
    ActionDone,
    ActionFailed,
    ActionProgress,
    ActionsPlanned,
    ActionStarted,
    ActionWarning,
    Event,
    Note,
    SourceFetch,
    Transfer,
)
from nvkr.plan import Plan
from nvkr.provenance import timestamp
from nvkr.run import request_stop, resume, stop_requested, stop_tools, tail
from nvkr.store import Store
from nvkr.walk import RemoteLookup, Walk, closure, needed

Emit = Callable[[Event], None]
#: ``on_result(action, result, how)``: how is ``built``, ``cached`` (the store) or ``remote``.
ResultHook = Callable[[Action, ActionResult, str], None]


class BuildClock:
    """The time of one build, in seconds since 1970: the wall clock read once at the start, then
    advanced by the monotonic clock, so a wall clock stepped back (NTP) mid-build never makes
    an action finish before it started or start before what it needs finished."""

    def __init__(self) -> None:
        self._wall, self._mono = time.time(), time.monotonic()

    def __call__(self) -> float:
        return self._wall + (time.monotonic() - self._mono)


@dataclass
class BuildReport:
    """What a build did: action keys ``built`` (builders ran), ``cached`` (found in the store)
    and ``remote`` (key → the cache it came from), every result, and ``invocation_id``: the UUID
    recorded in the ``run`` of every action this build ran; ``clock`` the times recorded;
    ``actions`` how many the build is made of (the roots' closure, or the targets), which the
    ``actions-planned`` event and the summary count, cached ones below a cached one included."""

    built: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    remote: dict[str, str] = field(default_factory=dict)
    results: dict[str, ActionResult] = field(default_factory=dict)
    invocation_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    actions: int = 0
    clock: Callable[[], float] = field(default_factory=BuildClock, repr=False, compare=False)

    @property
    def up_to_date(self) -> bool:
        return not self.built


class _SourceGate:
    """Fetch each source digest once, even when parallel actions ask for it at the same time;
    a download's bytes go out as ``bytes`` events (``fetched``)."""

    def __init__(self, ctx: FetchContext, emit: Emit) -> None:
        # a fetcher's note (.debs from a snapshot archive) goes to the build's stream
        self.ctx = dataclasses.replace(ctx, note=lambda line: emit(Note(line, level="note")))
        self.emit = emit
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _fetch(self, src: ResolvedSource, fetching: bool, total: int | None = None) -> str:
        """:func:`nvkr.fetch.api.ensure` of ``src``, its download's bytes (``total`` when known)
        reported: as the fetcher counts them (an HTTP download, .debs, a pip download), else
        (a git clone, a registry pull: tools that count for themselves) the bytes of the blobs
        the store gained."""
        if not fetching:
            return ensure(src.name, src.spec, src.entry, self.ctx, base_dir=src.base_dir)
        store = self.ctx.store
        lacking = [d for d in entry_blobs(src.entry) if not store.has_blob(d)]
        last = [0]
        # a per-arch source (an apt source's packages) downloads once per arch, at the same
        # time: each its own transfer, named as its actions are (``node-packages [arm64]``)
        arch = getattr(src.spec, "arch", None)
        what = f"{src.name} [{arch}]" if isinstance(arch, str) and arch else src.name

        def report(done: int) -> None:
            last[0] = done
            self.emit(Transfer("fetched", what, done, total))

        with transfer.reporting(report):
            got = ensure(src.name, src.spec, src.entry, self.ctx, base_dir=src.base_dir)
        if not last[0]:
            gained = [d for d in dict.fromkeys(lacking) if store.has_blob(d)]
            last[0] = sum(store.blob_path(d).stat().st_size for d in gained)
        self.emit(Transfer("fetched", what, last[0], total, finished=True))
        return got

    def ensure(self, action: Action) -> None:
        for src in action.sources.values():
            with self._guard:
                lock = self._locks.setdefault(src.digest, threading.Lock())
            with lock:
                # a source whose own blob is stored may still lack some of its blobs (an apt
                # source's .debs, an OCI image's layers): fetching them is reported too
                kind = fetcher_for(src.entry.kind)
                fetching = not kind.local and not all_present(self.ctx.store, src.entry)
                total: int | None = None
                if fetching:
                    debs, total = kind.to_download(src.entry, self.ctx.store)
                    self.emit(SourceFetch(src, debs, kind.where(src.name, src.entry, debs)))
                got = self._fetch(src, fetching, total)
            if got != src.digest:  # a path source edited since the plan was made
                raise BuildError(
                    f"source {src.name!r}: the store holds {got}, the plan expects {src.digest}",
                    hint="the source changed during the build; run the same command again",
                )


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
    deps: Mapping[str, ActionResult],
    *,
    invocation_id: str | None = None,
    started: float | None = None,
    progress: Callable[[ActionProgress], None] | None = None,
    clock: Callable[[], float] | None = None,
) -> ActionResult:
    """Run one action's builder in a fresh work dir and record its result in the action cache.

    The result (:class:`~nvkr.action.ActionResult`, its record ``{"key", "builder", "name",
    "outputs", "metadata", "hermetic"[, "warnings"][, "log"], "run": {"invocationId",
    "startedOn", "finishedOn"[, the builder's run_metadata keys]}}``) has the builder's outputs,
    metadata and warnings, ``hermetic`` :attr:`Action.hermetic` (whether the key covers
    every tool that can change the outputs: only such a result may be shared beyond this
    store), ``log`` the build log's digest when there is one, and ``run``:
    ``invocation_id`` (default: a new UUID),
    ``started`` (seconds since 1970, default: ``clock()``) and ``clock()`` when the builder
    returned (``clock``: the build's :class:`BuildClock`, default the wall clock), both as
    RFC 3339 UTC (:func:`nvkr.provenance.timestamp`). ``progress`` gets what the builder
    reports through :meth:`~nvkr.builders.api.ActionContext.progress`.

    Raises:
        NvkrError: the builder failed: the same class (so the same code and exit code, e.g. an
            IntegrityError exits 3), its message prefixed with the action, its builder and key,
            and followed by the log's tail.
        BuildError: the builder hit an OSError (disk full, permissions), named likewise.
    """
    builder = get_builder(action.builder)
    clock = clock or time.time
    started = clock() if started is None else started
    with store.workdir(prefix=f"act-{action.key[7:19]}-") as workdir:
        ctx = ActionContext(action, store, workdir, deps)
        if progress is not None:
            ctx.on_progress = progress
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
        # what the builder says describes its run (times) goes with the run, not the metadata
        run_keys = [k for k in getattr(builder, "run_metadata", ()) if k in ctx.metadata]
        run_details = {k: ctx.metadata.pop(k) for k in run_keys}
        log = (
            store.add_file(ctx.log_file, what="build log").digest if ctx.log_file.exists() else None
        )
    result = ActionResult(
        key=action.key,
        builder=action.builder,
        name=action.name,
        outputs=tuple(ctx.outputs),
        metadata=ctx.metadata,
        hermetic=action.hermetic,
        warnings=tuple(ctx.warnings),
        log=log,
        run={
            "invocationId": invocation_id or str(uuid.uuid4()),
            "startedOn": timestamp(started),
            "finishedOn": timestamp(max(started, clock())),  # a clock stepped back mid-action
            **run_details,
        },
    )
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
    monitor: Monitor | None = None,
    invocation_id: str | None = None,
    targets: list[str] | None = None,
    remote: RemoteLookup | None = None,
    cached_only: bool = False,
    on_result: ResultHook | None = None,
) -> BuildReport:
    """Bring every root of ``plan`` into the action cache; return what was built and cached.

    With ``targets`` (action keys, ``nvkr build --action``) exactly those are brought in
    instead: what they depend on must already be cached (locally or remotely), since only
    targets run. ``remote`` is asked for what the store lacks before anything is built (module
    docstring); with ``cached_only`` nothing is built. ``on_result(action, result, how)`` is
    called (from this thread) for every result the build found or made: ``cached`` and
    ``remote`` ones as the walk finds them, ``built`` ones after their ``action-done`` (a cache
    writer pushes them).

    Each action run is recorded with ``invocation_id`` (default: a new UUID; the report's
    ``invocation_id`` either way) and its times (module docstring).

    ``monitor`` gets the events of :mod:`nvkr.monitor.events`: ``actions-planned`` once the
    walk is done, ``action-cached``, ``action-start`` (with the estimate of earlier runs),
    ``action-progress`` (what builders report), ``action-done``, ``action-failed``,
    ``source-fetch`` (from worker threads) and, once the roots are done, ``action-warning`` for
    each warning recorded by an action the roots need, built now or before. Each built action's
    duration is recorded for the next estimate (:mod:`nvkr.monitor.estimates`).

    Raises:
        BuildError: an action failed (after running ones have finished and been cached); a
            dependency of ``targets`` is neither a target nor cached (naming each, before
            anything runs); ``cached_only`` and some action is neither in the store nor in a
            cache (each named).
        Interrupted: Ctrl-C (exit 130) or SIGTERM (exit 143).
    """
    emit: Emit = monitor.emit if monitor is not None else (lambda e: None)
    hook: ResultHook = on_result or (lambda action, result, how: None)
    report = BuildReport()
    if invocation_id is not None:
        report.invocation_id = invocation_id
    walk = needed(plan, store, remote, targets)
    if walk.absent:
        raise BuildError(
            f"the selected actions need {len(walk.absent)} action(s) that are not cached: "
            + ", ".join(f"{plan.actions[k].ref} ({k[:19]})" for k in walk.absent),
            hint="build those first (the fan-out units they belong to come earlier, "
            "`nvkr plan --fan-out`), or select them too",
        )
    report.actions = len(targets) if targets is not None else len(_closure(plan, plan.roots))
    _take_found(plan, walk, report, emit, hook)
    if cached_only and walk.to_run:
        raise _missing_error(plan, walk.to_run)
    if walk.to_run:
        _Run(plan, store, fetch, walk, report, emit, hook, jobs).run()
    _emit_warnings(plan, store, report, emit, targets)
    return report


def _closure(plan: Plan, roots: list[str]) -> set[str]:
    """``roots`` and every action they need, transitively."""
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        key = stack.pop()
        if key not in seen and key in plan.actions:
            seen.add(key)
            stack.extend(plan.actions[key].deps)
    return seen


def _take_found(plan: Plan, walk: Walk, report: BuildReport, emit: Emit, hook: ResultHook) -> None:
    """Put what the walk found (the store's results, the caches' hits) into ``report``."""
    report.cached = list(walk.cached)
    report.results.update(walk.cached)
    for key, hit in walk.remote.items():
        report.remote[key] = hit.cache
        report.results[key] = hit.result
    emit(
        ActionsPlanned(
            actions=max(report.actions, len(walk.to_run) + len(walk.cached) + len(walk.remote)),
            to_run=len(walk.to_run),
            cached=len(walk.cached),
            remote=len(walk.remote),
        )
    )
    for key in walk.cached:
        emit(ActionCached(plan.actions[key]))
        hook(plan.actions[key], walk.cached[key], "cached")
    for key, hit in walk.remote.items():
        hook(plan.actions[key], hit.result, "remote")


class _Run:
    """Running the actions a walk left to run, ``jobs`` at a time (:func:`execute`)."""

    def __init__(
        self,
        plan: Plan,
        store: Store,
        fetch: FetchContext,
        walk: Walk,
        report: BuildReport,
        emit: Emit,
        hook: ResultHook,
        jobs: int,
    ) -> None:
        self.plan, self.store, self.report, self.emit, self.hook = plan, store, report, emit, hook
        self.jobs = max(1, jobs)
        self.gate = _SourceGate(fetch, emit)
        self.pending = list(walk.to_run)
        self.waits = {key: walk.waits(plan, key) for key in walk.to_run}
        self.running: dict[Future[ActionResult], str] = {}
        self.started: dict[str, float] = {}
        self.failure: BaseException | None = None
        self.failed: Action | None = None
        self.pool = ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="nvkr-action")

    def work(self, action: Action) -> ActionResult:
        started = self.report.clock()
        self.gate.ensure(action)
        deps = {k: self.report.results[k] for k in action.deps}
        return run_action(
            action,
            self.store,
            deps,
            invocation_id=self.report.invocation_id,
            started=started,
            progress=self.emit,
            clock=self.report.clock,
        )

    def start_ready(self) -> None:
        for key in list(self.pending):
            if len(self.running) >= self.jobs:
                break
            if all(d in self.report.results for d in self.waits[key]):
                self.pending.remove(key)
                self.started[key] = time.monotonic()
                action = self.plan.actions[key]
                self.emit(ActionStarted(action, estimates.estimate(self.store.root, key)))
                self.running[self.pool.submit(self.work, action)] = key

    def finished(self, fut: Future[ActionResult]) -> None:
        key = self.running.pop(fut)
        action = self.plan.actions[key]
        try:
            self.report.results[key] = fut.result()
        except BaseException as e:
            self.emit(ActionFailed(action, e))
            if self.failure is None:
                self.failure, self.failed = e, action
            return
        self.report.built.append(key)
        seconds = time.monotonic() - self.started[key]
        self.emit(ActionDone(action, seconds))
        estimates.record(self.store.root, key, seconds)
        self.hook(action, self.report.results[key], "built")

    def run(self) -> None:
        """Run until every action ran or one failed (then the running ones finish first).

        Raises: as :func:`execute`.
        """
        try:
            while self.pending or self.running:
                if self.failure is None:
                    self.start_ready()
                elif not self.running:
                    break
                if not self.running:
                    raise NvkrError("internal: no action is ready but some are pending (cycle?)")
                done, _ = wait(self.running, return_when=FIRST_COMPLETED)
                for fut in done:
                    self.finished(fut)
        except KeyboardInterrupt:
            # Ctrl-C, or SIGTERM turned into one by the CLI: the running tools are stopped
            # (they clean up, then are killed), their actions fail and are dropped, the
            # finished ones stay cached.
            request_stop(signal.SIGINT)  # a no-op after the CLI's signal handler made it
            signum = stop_requested() or signal.SIGINT
            stop_tools()
            self.pool.shutdown(wait=True, cancel_futures=True)
            resume()
            raise Interrupted(
                f"{'terminated' if signum == signal.SIGTERM else 'interrupted'}; "
                f"{len(self.report.built)} finished actions are cached",
                hint="run the same command again to continue",
                signum=signum,
            ) from None
        finally:
            self.pool.shutdown(wait=True, cancel_futures=True)
        if self.failure is not None:
            assert self.failed is not None
            raise _failure_error(self.failure, self.failed)


def _failure_error(failure: BaseException, failed: Action) -> BaseException:
    """What the build raises for the first action that failed with ``failure``."""
    if isinstance(failure, NvkrError):
        return failure
    if isinstance(failure, OSError):  # fetching its sources: the disk, the permissions
        where = f" ({failure.filename})" if failure.filename else ""
        error: NvkrError = BuildError(
            f"{_failed(failed)}: {failure.strerror or failure}{where}",
            hint="free space in the store's file system, or check its permissions",
        )
    else:  # anything else is a bug in nvkr (a builder's own exception), reported as one
        error = NvkrError(
            f"internal error in {_failed(failed)}: {failure!r}",
            hint="run again with --debug for a traceback, and report it",
        )
    error.__cause__ = failure
    return error


def _warnings(store: Store, key: str) -> tuple[ResultWarning, ...]:
    """The warnings of the action record of ``key`` as stored, without checking its blobs (a
    no-op rebuild reads every record of the plan this way); none when there is no record or
    it is not one."""
    try:
        return ActionResult.from_json(
            json.loads(store.action_path(key).read_bytes()), f"action record {key}"
        ).warnings
    except (OSError, ValueError, IntegrityError):
        return ()


def _emit_warnings(
    plan: Plan, store: Store, report: BuildReport, emit: Emit, targets: list[str] | None
) -> None:
    """``action-warning`` for every warning in the records of the actions the roots (or the
    ``targets``) need, in plan order: those below a cached action were never looked at, so
    their records are read from the action cache (a no-op rebuild warns as the first build
    did)."""
    needed = closure(plan, targets if targets is not None else plan.roots)
    for key, action in plan.actions.items():
        if key not in needed:
            continue
        result = report.results.get(key)
        for warning in result.warnings if result is not None else _warnings(store, key):
            emit(ActionWarning(action, warning.message, warning.hint))
