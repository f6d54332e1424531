"""A build as a library call: :func:`build` turns an open session (:mod:`nvkr.session`) into
release sets, reporting to a monitor (:mod:`nvkr.monitor`).

``nvkr build`` parses its options into :class:`BuildOptions` and calls :func:`build`; so does
``verify --rebuild`` (on a fresh store) and any in-process caller::

    from pathlib import Path

    from nvkr.build import BuildOptions, build
    from nvkr.monitor import ListMonitor
    from nvkr.session import open_session
    from nvkr.store import Store

    store = Store(Path("/var/tmp/nvkr-store"))
    session = open_session(Path("recipes/default.yaml"), store=store, locked=True)
    with store.reading():  # as the CLI does: `nvkr store gc` deletes nothing this build reads
        outcome = build(session, BuildOptions(out=Path("dist")), ListMonitor())
    print(outcome.written)  # each release set written: name, path, digest

A library call always takes the full path: the plan memo (:mod:`nvkr.planmemo`) answers only
the CLI's ``nvkr build``.

Steps: refuse what cannot be built or pushed (a partial set pushed, a combination the catalog's
rules forbid, a drifted lock under ``locked``); with the store locked, plan, execute (taking
results from the remote caches of ``cache`` and pushing to its target), write each release set
under ``out`` with its build record (signed with ``sign_key``) and record the build as a gc root;
then push (``push``) and end the event stream with the ``result`` event. Remote cache settings are
resolved and checked by the caller first (:func:`prepare_cache`), before anything is built.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nvkr.errors import UsageError
from nvkr.monitor.events import CacheEvent, Note, Result, StoreNotice, Transfer
from nvkr.oci.access import RegistryAccess
from nvkr.quantities import human_size
from nvkr.quantities import plural as _n

if TYPE_CHECKING:
    from nvkr.cache.push import PushSummary
    from nvkr.cache.settings import CacheSettings
    from nvkr.execute import BuildReport
    from nvkr.monitor import Monitor
    from nvkr.oci.reference import Reference
    from nvkr.plan import Plan
    from nvkr.secureboot.owner import OwnerKey
    from nvkr.secureboot.published import PublishedSignatures
    from nvkr.session import Session
    from nvkr.sign import PrivateKey


def _no_cache() -> CacheSettings:
    from nvkr.cache.settings import CacheSettings

    return CacheSettings()


@dataclass(frozen=True)
class BuildOptions:
    """How to build a session (``nvkr build``'s options, parsed).

    Attributes:
        out: where release sets are written (``out/<name>/``).
        jobs: actions run at once.
        action_refs: build only these actions of the plan (``BUILDER/ARTIFACT@VARIANT``);
            what they need must be cached.
        locked: refuse to build when the recipe or a pin drifted from the lockfile.
        sign_key: sign each release set and its build record with it.
        push: publish each release set there after the build.
        with_sources: with ``push``, each set's source closure too
            (:mod:`nvkr.delivery.withsources`).
        cache: the remote caches, from :func:`prepare_cache`.
        cached_only: run no builder.
        registry: how ``push`` and the caches' registries are reached.
        epoch: the build's epoch (None: :func:`nvkr.repro.source_date_epoch`'s).
    """

    out: Path = Path("dist")
    jobs: int = field(default_factory=lambda: os.cpu_count() or 2)
    action_refs: tuple[str, ...] = ()
    locked: bool = False
    sign_key: PrivateKey | None = None
    #: the owner's Secure Boot key, for the actions that sign modules (never in a key or record)
    secure_boot_key: OwnerKey | None = None
    #: without a key: the signatures of the release set being rebuilt (``verify --rebuild``)
    published_signatures: PublishedSignatures | None = None
    push: Reference | None = None
    with_sources: bool = False
    cache: CacheSettings = field(default_factory=_no_cache)
    cached_only: bool = False
    registry: RegistryAccess = field(default_factory=RegistryAccess)
    epoch: int | None = None


@dataclass
class WrittenSet:
    """A release set the build wrote: its ``name``, layout ``path``, ``digest`` (the release
    set index's), build record path and, once pushed, ``pushed`` (``REGISTRY/REPO:TAG``)."""

    name: str
    path: Path
    digest: str
    build_record: Path
    pushed: str | None = None

    def to_json(self) -> dict[str, str]:
        """The item of the ``result`` event's ``releaseSets``."""
        doc = {
            "name": self.name,
            "path": str(self.path),
            "digest": self.digest,
            "buildRecord": str(self.build_record),
        }
        if self.pushed is not None:
            doc["pushed"] = self.pushed
        return doc


@dataclass(frozen=True)
class BuildOutcome:
    """What :func:`build` did: the ``plan``, the executor's ``report``, the release sets
    ``written`` and the cache writer's ``pushed`` summary (None without a cache target)."""

    plan: Plan
    report: BuildReport
    written: list[WrittenSet]
    pushed: PushSummary | None


def prepare_cache(
    settings: CacheSettings, *, offline: bool, registry: RegistryAccess, monitor: Monitor
) -> CacheSettings:
    """``settings`` as a build uses them: none when ``offline`` (said), the target's push access
    asked now rather than after the build, and the warning for ``trust_unsigned`` emitted.

    Raises:
        RegistryError: the target refuses a push.
    """
    if offline and settings.enabled:
        monitor.emit(Note("--offline: the remote caches are not used", level="note"))
        return _no_cache()
    if settings.target is not None:
        with registry.client(settings.target.registry) as probe:
            probe.check_push(settings.target.repository)
    if settings.sources and settings.trust_unsigned:
        names = ", ".join(f"{r.registry}/{r.repository}" for r in settings.sources)
        monitor.emit(CacheEvent("cache-warning", fields={
            "message": f"--cache-trust-unsigned: entries of {names} are used without a "
            "trusted signature; whoever can push there decides what this build uses"
        }))  # fmt: skip
    return settings


def build(session: Session, options: BuildOptions, monitor: Monitor) -> BuildOutcome:
    """Build ``session`` as ``options`` say, every event to ``monitor`` (the last: ``result``).

    Raises:
        NvkrError: as the steps do (UsageError: a partial build with ``push``, a bad action
            ref; RecipeError: a rule violated; LockError: drift under ``locked``; BuildError,
            IntegrityError, FetchError from execution).
    """
    _check_session(session, options, monitor)
    with session.store.lock() as cleaned:
        from nvkr.scratch import cleanup_line

        if said := cleanup_line(cleaned):
            monitor.emit(Note(said))
        plan = _plan(session, options, monitor)
        targets = None
        if options.action_refs:
            from nvkr.actionrefs import resolve

            targets = resolve(plan, options.action_refs)
        _check_secure_boot_key(plan, session, options, targets)
        from nvkr.secureboot.owner import provide_owner_key
        from nvkr.secureboot.published import provide_published_signatures

        provide_owner_key(options.secure_boot_key)  # for the signing actions of this build
        provide_published_signatures(options.published_signatures)
        try:
            report, pushed = _execute(plan, session, options, monitor, targets)
        finally:
            provide_owner_key(None)
            provide_published_signatures(None)
        written = _write_release_sets(plan, report, session, options, targets)
        from nvkr.store_gc import write_root  # what gc keeps: everything this build used

        write_root(
            session.store,
            invocation_id=report.invocation_id,
            recipe=f"{Path(session.loaded.path).resolve()} "
            f"{' '.join(sorted(v.id for v in plan.variants))}",
            plan=plan,
            release_sets=[w.to_json() for w in written],
        )
    if options.push is not None:
        _push(options, written, session, monitor)
    outcome = BuildOutcome(plan, report, written, pushed)
    monitor.emit(_result(outcome, options.cache, targets))
    return outcome


def _check_session(session: Session, options: BuildOptions, monitor: Monitor) -> None:
    """Refuse what this session cannot build or push, before anything is built; route the
    store's notices to ``monitor``; say what a partial or unlocked build means."""
    if options.push is not None and (options.action_refs or not session.all_variants):
        # A partial set carries the full set's name: pushed, its tag would stand for a release
        # that holds only some variants (or none of the selected actions' release sets).
        what = "selected actions" if options.action_refs else "selected variants"
        raise UsageError(
            f"--push: a build of {what} is not the full release set; it is never pushed",
            hint="build every variant to push the release set (a CI fan-out's final job: "
            "`nvkr build --cached-only --push ...`), or `nvkr publish DIR REGISTRY/REPO:TAG` "
            "a partial set under a tag of your own",
        )
    session.store.notice = lambda digest, reason: monitor.emit(
        StoreNotice("blob-corrupt", digest, reason)
    )
    session.store.tree_notice = lambda digest, reason: monitor.emit(
        StoreNotice("tools-changed", digest, reason)
    )
    from nvkr.catalog.evaluation import check_variants  # an invalid combination never builds

    check_variants(Path(session.loaded.path), session.variants)
    if options.locked:
        session.resolver.check_locked(session.variants, all_variants=session.all_variants)
    if not session.all_variants and not options.action_refs:
        monitor.emit(Note(
            f"building {_n(len(session.variants), 'selected variant')}: each release set in "
            f"{options.out} holds only those (use another --out to keep a full build)",
            level="note",
        ))  # fmt: skip
    from nvkr.session import no_lock_warning

    if (warning := no_lock_warning(session)) is not None:
        monitor.emit(Note(warning, level="warning"))


def _check_secure_boot_key(
    plan: Plan, session: Session, options: BuildOptions, targets: list[str] | None
) -> None:
    """Before anything builds: the owner's Secure Boot key is given when an action that signs
    with it must run (its result is not in the store and no remote cache may hold it), and it
    matches every certificate the build signs with (``targets``' closure, or the whole plan):
    each builder names its own (:meth:`nvkr.builders.api.Builder.owner_certificates`)."""
    from nvkr.action import ResolvedSource
    from nvkr.builders.api import get_builder
    from nvkr.fetch.api import ensure
    from nvkr.secureboot.owner import OWNER_KEY_ENV

    def source_path(src: ResolvedSource) -> Path:
        digest = ensure(src.name, src.spec, src.entry, session.fetch, base_dir=src.base_dir)
        return session.store.checked_path(digest)

    wanted, stack = set(), list(targets if targets is not None else plan.actions)
    while stack:
        if (k := stack.pop()) not in wanted and k in plan.actions:
            wanted.add(k)
            stack.extend(plan.actions[k].deps)
    key = options.secure_boot_key
    for k in sorted(wanted):
        action = plan.actions[k]
        # without a key, a signed result the store or a remote cache holds needs nothing
        if key is None and (options.cache.sources or session.store.get_action(k) is not None):
            continue
        certs = get_builder(action.builder).owner_certificates(action, source_path)
        if not certs:
            continue
        if key is None:
            if options.published_signatures is not None:
                continue  # a rebuild: each signature comes from the release set, checked
            raise UsageError(
                f"{action.ref} signs with the owner's Secure Boot key ({certs[0].subject}), "
                "and no key was given (its result is not in the store)",
                hint=f"pass --secure-boot-key KEY (or set {OWNER_KEY_ENV})",
            )
        for cert in certs:
            key.check_matches(cert)


def _plan(session: Session, options: BuildOptions, monitor: Monitor) -> Plan:
    """The session's plan, and the notes on it: sources the lockfile lacked, the plan's size."""
    from nvkr.session import make_session_plan, unlocked_warning

    plan = make_session_plan(
        session, epoch=options.epoch, note=lambda line: monitor.emit(Note(line))
    )
    if (warning := unlocked_warning(session)) is not None:
        monitor.emit(Note(warning, level="warning"))
    monitor.emit(Note(
        f"nvkr: {session.loaded.path}: {_n(len(plan.variants), 'variant')}, "
        f"{_n(len(plan.actions), 'action')} (build digest {plan.build_digest[:19]})"
    ))  # fmt: skip
    return plan


def _execute(
    plan: Plan,
    session: Session,
    options: BuildOptions,
    monitor: Monitor,
    targets: list[str] | None,
) -> tuple[BuildReport, PushSummary | None]:
    """Execute ``plan`` with the remote caches of ``options.cache`` (a reader for its sources,
    a writer for its target, whose pushes the build waits for): the report, and the writer's
    summary (None without a target)."""
    from nvkr.execute import execute

    settings, registry = options.cache, options.registry

    def event(kind: str, **fields: Any) -> None:  # the cache modules' Emit
        if kind == "cache-bytes":  # an upload's byte bar
            done, size = fields["done"], fields["size"]
            what = f"cache {str(fields['digest'])[:19]}"
            monitor.emit(Transfer("pushed", what, done, size, finished=done >= size))
            return
        monitor.emit(CacheEvent(kind, fields.pop("action", None), fields))

    with contextlib.ExitStack() as stack:
        reader = writer = None
        if settings.sources:
            from nvkr.cache.remote import DOWNLOAD_JOBS, CacheReader
            from nvkr.walk import LOOKUP_JOBS

            # a connection for every lookup and download that may run at once
            client_for = functools.partial(registry.client, pool_size=LOOKUP_JOBS + DOWNLOAD_JOBS)
            reader = stack.enter_context(CacheReader(settings, session.store, client_for, event))
        if settings.target is not None:
            from nvkr.cache.push import CacheWriter

            client = stack.enter_context(registry.client(settings.target.registry))
            writer = CacheWriter(settings, session.store, plan, client, event)
            stack.callback(writer.close)
        report = execute(
            plan,
            session.store,
            session.fetch,
            jobs=options.jobs,
            monitor=monitor,
            remote=reader,
            cached_only=options.cached_only,
            targets=targets,
            on_result=writer.offer if writer is not None else None,
        )
        summary = writer.finish(report) if writer is not None else None
    return report, summary


def _write_release_sets(
    plan: Plan,
    report: BuildReport,
    session: Session,
    options: BuildOptions,
    targets: list[str] | None,
) -> list[WrittenSet]:
    """Materialize (and sign) each release set the build made under ``options.out`` with its
    build record."""
    from nvkr.releaseset import materialize
    from nvkr.releaseset.record import plan_build_record, write_build_record

    written = []
    for name, key in sorted(plan.release_sets.items()):
        if targets is not None and key not in targets:
            continue
        result = report.results[key]
        path = materialize(result, session.store, options.out)
        if options.sign_key is not None:
            from nvkr.releaseset.signing import sign_release_set

            sign_release_set(path, options.sign_key)
        record = plan_build_record(plan, report, name, path, session.store)
        record_path, _ = write_build_record(path, record, options.sign_key)
        digest = str(result.metadata["releaseSetDigest"])
        written.append(WrittenSet(name, path, digest, record_path))
    return written


def _push(
    options: BuildOptions, written: list[WrittenSet], session: Session, monitor: Monitor
) -> None:
    """Publish each written release set to ``options.push`` (``with_sources``: its source
    closure too, the project being the working directory the recipe's paths are relative to);
    each gains ``pushed``."""
    ref, registry = options.push, options.registry
    assert ref is not None
    if ref.tag is not None and len(written) > 1:
        raise UsageError(
            f"--push {ref} names one tag but the build wrote {len(written)} release sets",
            hint="leave the tag out: each release set is tagged with its own name",
        )
    from nvkr.delivery.publish import publish_layout
    from nvkr.delivery.withsources import publish_with_sources

    with registry.client(ref.registry) as client:
        for item in written:
            if options.with_sources:
                pushed, closure, _ = publish_with_sources(
                    item.path, ref, client, session, Path.cwd(),
                    progress=lambda line: monitor.emit(Note(f"  {line}")),
                )  # fmt: skip
                monitor.emit(Note(
                    f"  pushed the sources of {item.name}: {_n(closure.sources, 'source')}, "
                    f"{_n(closure.blobs, 'blob')} ({human_size(closure.bytes)}), "
                    f"{closure.descriptor['digest']}"
                    + (f"; withheld: {', '.join(closure.withheld)}" if closure.withheld else "")
                ))  # fmt: skip
            else:
                pushed = publish_layout(item.path, ref, client)
            item.pushed = f"{ref.registry}/{ref.repository}:{pushed.tag}"
            monitor.emit(Note(f"  pushed {item.name} → {item.pushed}"))


def _result(outcome: BuildOutcome, settings: CacheSettings, targets: list[str] | None) -> Result:
    """The build's ``result`` event: the JSON keys, and what the human summary reads."""
    plan, report, pushed = outcome.plan, outcome.report, outcome.pushed
    written = [w.to_json() for w in outcome.written]
    fields = {
        "upToDate": report.up_to_date,
        "buildDigest": plan.build_digest,
        "actions": report.actions,
        "built": report.built,
        "cached": report.cached,
        "remote": [
            {"key": k, "name": plan.actions[k].name, "cache": c} for k, c in report.remote.items()
        ],
        "releaseSets": written,
    }
    target = settings.target
    summary: Mapping[str, object] = {
        "remote": dict(report.remote),
        "built": len(report.built),
        "actions": report.actions,
        "targets": len(targets) if targets is not None else None,
        "cache": f"{target.registry}/{target.repository}"
        if pushed is not None and target is not None
        else None,
        "states": pushed.states if pushed is not None else {},
        "local": len(pushed.local) if pushed is not None else 0,
        "releaseSets": written,
    }
    return Result("build", fields, summary=dict(summary))
