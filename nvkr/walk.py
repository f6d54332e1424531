"""What a build needs: the walk down from a plan's roots (or an ``nvkr build --action``
selection) through the store, then the remote caches, that :func:`nvkr.execute.execute` does
before it runs anything.

An action whose result is in the store stops the descent; one missing there is looked up in the
remote caches (:class:`RemoteLookup`, :data:`LOOKUP_JOBS` at a time), and a hit stops it too,
unless its outputs reference blobs only its dependencies' results hold and the store lacks (an
incomplete result: those dependencies are needed as well). A result is missing when a blob it
names is gone or corrupt (:meth:`Store.get_action`), so an index whose per-arch image lost a
layer is incomplete, the image is to run, and so on at any depth: a lost output never stops a
build. What neither holds is to run, dependencies first.
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Final, Protocol

from nvkr.action import Action, ActionResult
from nvkr.cache.entry import missing_closure
from nvkr.plan import Plan
from nvkr.store import Store

#: Remote lookups at a time: each is a few small requests (tag, referrers, signature, config)
#: before any download, so a handful in flight hides a registry's latency; more would only
#: burst requests at a registry that may rate-limit a CI fleet.
LOOKUP_JOBS: Final = 8


@dataclass(frozen=True)
class RemoteHit:
    """An action result taken from a remote cache: ``result`` (already in the action cache,
    its outputs in the store), ``cache`` (``REGISTRY/REPOSITORY``) and ``complete``: False when
    its outputs reference blobs the store lacks, so its dependencies are needed as well."""

    result: ActionResult
    cache: str
    complete: bool = True


class RemoteLookup(Protocol):
    """What the executor asks before building an action the store lacks (:mod:`nvkr.cache`).

    ``lookup`` is called from worker threads; it never raises for a bad or missing entry (a
    miss is None) and reports what it did through its own events.
    """

    def lookup(self, action: Action) -> RemoteHit | None: ...


@dataclass
class Walk:
    """What :func:`needed` found: keys ``to_run`` (dependencies first), results ``cached`` in
    the store, ``remote`` hits, ``incomplete``: results whose outputs reference blobs only
    their dependencies' results hold (so whatever reads them waits for those too), and
    ``absent``: dependencies of the targets (``nvkr build --action``) that are not targets and
    were found nowhere (only targets are built)."""

    to_run: list[str]
    cached: dict[str, ActionResult]
    remote: dict[str, RemoteHit]
    incomplete: set[str] = field(default_factory=set)
    absent: list[str] = field(default_factory=list)

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


class _Walker:
    """The state of one :func:`needed` walk (its docstring)."""

    def __init__(
        self, plan: Plan, store: Store, remote: RemoteLookup | None, targets: list[str] | None
    ) -> None:
        self.plan, self.store, self.remote = plan, store, remote
        self.cached: dict[str, ActionResult] = {}
        self.hits: dict[str, RemoteHit] = {}
        self.missing: set[str] = set()
        self.absent: set[str] = set()
        self.incomplete: set[str] = set()
        self.seen: set[str] = set()
        self.selected = set(targets) if targets is not None else None
        self.pending: dict[Future[RemoteHit | None], str] = {}
        self.pool = (
            ThreadPoolExecutor(max_workers=LOOKUP_JOBS, thread_name_prefix="nvkr-lookup")
            if remote is not None
            else None
        )

    def descend(self, key: str) -> None:
        for dep in self.plan.actions[key].deps:
            self.visit(dep)

    def not_found(self, key: str) -> None:
        if self.selected is not None and key not in self.selected:
            self.absent.add(key)
        else:
            self.missing.add(key)
            self.descend(key)

    def visit(self, key: str) -> None:
        if key in self.seen:
            return
        self.seen.add(key)
        result = self.store.get_action(key)
        if result is not None:
            self.cached[key] = result
            # Its consumers read its outputs' closure too, which its dependencies' records own:
            # a result taken from a cache without them, or one whose dependency's output was
            # lost (deleted, found corrupt) since. Those dependencies are looked at as well, and
            # below them, at any depth, whatever lost an output is run again.
            if missing_closure(self.store, result.outputs):
                self.incomplete.add(key)
                self.descend(key)
            return
        if self.pool is None or self.remote is None:
            self.not_found(key)
            return
        self.pending[self.pool.submit(self.remote.lookup, self.plan.actions[key])] = key

    def drain(self) -> None:
        """Wait for the remote lookups, descending below each miss and incomplete hit."""
        while self.pending:
            done, _ = wait(self.pending, return_when=FIRST_COMPLETED)
            for fut in done:
                key = self.pending.pop(fut)
                hit = fut.result()
                if hit is None:
                    self.not_found(key)
                    continue
                self.hits[key] = hit
                if not hit.complete:
                    self.incomplete.add(key)
                    self.descend(key)


def needed(
    plan: Plan,
    store: Store,
    remote: RemoteLookup | None = None,
    targets: list[str] | None = None,
) -> Walk:
    """Walk down from the roots (or ``targets``): the store first, then ``remote``, then the
    action is to run and its dependencies are looked at; with ``targets`` an action outside
    them is never run, and one found nowhere is ``absent``. Remote lookups run
    :data:`LOOKUP_JOBS` at a time."""
    walker = _Walker(plan, store, remote, targets)
    try:
        for root in targets if targets is not None else plan.roots:
            walker.visit(root)
        walker.drain()
    finally:
        if walker.pool is not None:
            walker.pool.shutdown(wait=True, cancel_futures=True)
    return Walk(
        [k for k in plan.actions if k in walker.missing],
        walker.cached,
        walker.hits,
        walker.incomplete,
        [k for k in plan.actions if k in walker.absent],
    )


def closure(plan: Plan, keys: list[str]) -> set[str]:
    """``keys`` and every action they depend on, directly or not."""
    seen: set[str] = set()
    stack = list(keys)
    while stack:
        key = stack.pop()
        if key not in seen:
            seen.add(key)
            stack.extend(plan.actions[key].deps)
    return seen
