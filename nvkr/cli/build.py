"""``nvkr build``: plan, execute against the store, and write each release set to ``--out``.

Every event goes to one :class:`~nvkr.monitor.Monitor` (:mod:`nvkr.monitor`): humans get the
live display on a terminal and one line per action on stderr elsewhere; ``--json`` prints one
JSON object per event on stdout (stream version 1: ``actions-planned``, ``action-cached``,
``action-start``, ``action-progress``, ``action-done``, ``action-failed``, ``action-warning``
with ``message`` and ``hint``, ``source-fetch``, ``bytes``; with a remote cache ``cache-hit``,
``cache-miss`` with its ``reason``, ``cache-push`` and ``cache-warning``) and a final ``result``
(``built``: keys a builder ran for; ``cached``: found in the store; ``remote``:
``[{key, name, cache}]`` taken from a cache) or ``error``. The remote cache options (:mod:`nvkr.cache.settings`) are checked, and
``--cache-to``'s push access asked, before anything is built.
Beside each release set ``dist/<name>/`` goes its build record, ``dist/<name>.build-record.json``
(with ``--sign`` also ``.build-record.dsse.json``): the times of the actions, which the set itself
never holds (:mod:`nvkr.releaseset.record`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from nvkr.cli import App
from nvkr.cli.common import (
    RegistryAccess,
    cleanup_line,
    fetch_options,
    make_session_plan,
    open_session,
    recipe_argument,
    registry_options,
    variant_option,
)
from nvkr.cli.common import n as _n
from nvkr.errors import UsageError
from nvkr.monitor.events import CacheEvent, Note, Result, StoreNotice, Transfer

if TYPE_CHECKING:
    from nvkr.monitor import Monitor


@click.command("build")
@recipe_argument
@variant_option
@click.option(
    "--action",
    "action_refs",
    multiple=True,
    metavar="BUILDER/ARTIFACT@VARIANT",
    help="Build only this action of the plan (repeatable; `nvkr plan --json` lists each "
    "action's ref); what it needs must be cached. Writes no release set unless one is selected.",
)
@fetch_options
@click.option(
    "--locked",
    is_flag=True,
    help="Refuse to build when the recipe or any pin drifted from the lockfile.",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=Path("dist"),
    show_default=True,
    help="Where release sets are written.",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=lambda: os.cpu_count() or 2,
    help="Actions run in parallel (default: CPUs).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable events on stdout.")
@click.option(
    "--sign",
    "sign_key",
    metavar="KEY",
    help="Sign each release set with this private key (a PEM file or env://NAME).",
)
@click.option(
    "--push",
    metavar="REGISTRY/REPOSITORY[:TAG]",
    help="Publish each release set there after the build (tag default: the release set name).",
)
@click.option(
    "--cache-from",
    "cache_from",
    multiple=True,
    metavar="REGISTRY/REPO",
    help="Take action results from this remote cache (repeatable, read in order; env "
    "NVKR_CACHE_FROM).",
)
@click.option(
    "--cache-to",
    metavar="REGISTRY/REPO",
    help="Push action results to this remote cache, signed (env NVKR_CACHE_TO).",
)
@click.option(
    "--cache-mode",
    type=click.Choice(["min", "max"]),
    help="min (default): what the release sets reference and slow actions; max: every action "
    "(env NVKR_CACHE_MODE).",
)
@click.option(
    "--cache-salt",
    metavar="TEXT",
    help="Mixed into every cache tag: a new salt disowns every earlier entry (env "
    "NVKR_CACHE_SALT).",
)
@click.option(
    "--cache-sign-key",
    metavar="KEY",
    help="Sign cache entries with this private key, a PEM file or env://NAME (env "
    "NVKR_CACHE_SIGN_KEY).",
)
@click.option(
    "--cache-trust",
    multiple=True,
    metavar="PUB",
    help="Use cache entries signed by this public key (repeatable; env NVKR_CACHE_TRUST).",
)
@click.option(
    "--cache-trust-unsigned",
    is_flag=True,
    help="Also use cache entries no trusted key signed (said on every build).",
)
@click.option(
    "--cached-only",
    is_flag=True,
    help="Run no builder: assemble from the store and the caches, or fail naming what is missing.",
)
@registry_options("With --push, --cache-from, --cache-to")
@click.pass_obj
def command(
    app: App,
    recipe: Path,
    variants: tuple[str, ...],
    action_refs: tuple[str, ...],
    mirrors: tuple[str, ...],
    offline: bool,
    lockfile: Path | None,
    locked: bool,
    out: Path,
    jobs: int,
    as_json: bool,
    sign_key: str | None,
    push: str | None,
    cache_from: tuple[str, ...],
    cache_to: str | None,
    cache_mode: str | None,
    cache_salt: str | None,
    cache_sign_key: str | None,
    cache_trust: tuple[str, ...],
    cache_trust_unsigned: bool,
    cached_only: bool,
    registry: RegistryAccess,
) -> None:
    """Build RECIPE (default recipes/default.yaml) into release sets under --out."""
    from nvkr.monitor import monitoring, open_monitor

    with monitoring(open_monitor("build", as_json=as_json)) as monitor:
        # Bad push references, cache settings and unreadable keys fail before anything builds.
        push_ref = None
        if push is not None:
            from nvkr.oci.registry import Reference

            push_ref = Reference.parse(push)
        signing_key = None
        if sign_key is not None:
            from nvkr.sign import load_private_key

            signing_key = load_private_key(sign_key)
        settings = _cache_settings(
            app, monitor, registry, offline, cache_from, cache_to, cache_mode, cache_salt,
            cache_sign_key, cache_trust, cache_trust_unsigned,
        )  # fmt: skip
        session = open_session(
            app, recipe, variants, mirrors=mirrors, offline=offline, locked=locked,
            lockfile=lockfile,
        )  # fmt: skip
        _check_session(session, monitor, recipe, push, action_refs, locked, out)
        with session.store.lock() as cleaned:
            if said := cleanup_line(cleaned):
                monitor.emit(Note(said))
            plan = make_session_plan(session)
            if session.resolver.resolved_now and session.resolver.lock is not None:
                monitor.emit(Note(
                    f"{session.lock_path} lacks "
                    f"{', '.join(sorted(set(session.resolver.resolved_now)))}; "
                    "resolved now — run `nvkr lock` to pin them", level="warning",
                ))  # fmt: skip
            monitor.emit(Note(
                f"nvkr: {recipe}: {_n(len(plan.variants), 'variant')}, "
                f"{_n(len(plan.actions), 'action')} (build digest {plan.build_digest[:19]})"
            ))  # fmt: skip
            targets = None
            if action_refs:
                from nvkr.actionrefs import resolve

                targets = resolve(plan, action_refs)
            report, pushed = _execute(
                plan, session, settings, registry, jobs, monitor, cached_only, targets
            )
            written = _write_release_sets(plan, report, session, out, signing_key, targets)
            from nvkr.store_gc import write_root  # what gc keeps: everything this build used

            write_root(
                session.store,
                invocation_id=report.invocation_id,
                recipe=f"{Path(recipe).resolve()} {' '.join(sorted(v.id for v in plan.variants))}",
                plan=plan,
                release_sets=written,
            )
        if push_ref is not None:
            _push(push_ref, push, written, registry, monitor)
        monitor.emit(_result(plan, report, written, pushed, settings, targets))


def _cache_settings(
    app: App,
    monitor: Monitor,
    registry: RegistryAccess,
    offline: bool,
    cache_from: tuple[str, ...],
    cache_to: str | None,
    cache_mode: str | None,
    cache_salt: str | None,
    cache_sign_key: str | None,
    cache_trust: tuple[str, ...],
    cache_trust_unsigned: bool,
) -> Any:
    """The remote cache settings (:mod:`nvkr.cache.settings`), checked, with ``--cache-to``'s
    push access asked now, not after the build."""
    from nvkr.cache.settings import CacheSettings, resolve_settings

    settings = resolve_settings(
        cache_from=cache_from,
        cache_to=cache_to,
        mode=cache_mode,
        salt=cache_salt,
        sign_key=cache_sign_key,
        trust=cache_trust,
        trust_unsigned=cache_trust_unsigned,
        config=app.config
        if app.config is not None
        else Path.home() / ".config" / "nvkr" / "config.yaml",
    )
    if offline and settings.enabled:
        monitor.emit(Note("--offline: the remote caches are not used", level="note"))
        settings = CacheSettings()
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


def _check_session(
    session: Any,
    monitor: Monitor,
    recipe: Path,
    push: str | None,
    action_refs: tuple[str, ...],
    locked: bool,
    out: Path,
) -> None:
    """Refuse what this session cannot build or push, before anything is built; route the
    store's notices to ``monitor``; say what a partial or unlocked build means."""
    if push is not None and (action_refs or not session.all_variants):
        # A partial set carries the full set's name: pushed, its tag would stand for a release
        # that holds only some variants (or none of the selected actions' release sets).
        what = "selected actions" if action_refs else "selected variants"
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
    from nvkr.catalog import check_variants  # an invalid combination never builds

    check_variants(recipe, session.variants)
    if locked:
        session.resolver.check_locked(session.variants, all_variants=session.all_variants)
    if not session.all_variants and not action_refs:
        monitor.emit(Note(
            f"building {_n(len(session.variants), 'selected variant')}: each release set in "
            f"{out} holds only those (use another --out to keep a full build)", level="note",
        ))  # fmt: skip
    if session.resolver.lock is None:
        monitor.emit(Note(
            f"no lockfile {session.lock_path}: every source is resolved (fetched and checked) "
            "now; `nvkr lock` pins them first", level="warning",
        ))  # fmt: skip


def _write_release_sets(
    plan: Any,
    report: Any,
    session: Any,
    out: Path,
    signing_key: Any,
    targets: list[str] | None,
) -> list[dict[str, Any]]:
    """Materialize (and sign) each release set the build made under ``out`` with its build
    record; ``[{name, path, digest, buildRecord}]``."""
    from nvkr.releaseset import materialize
    from nvkr.releaseset.record import plan_build_record, write_build_record

    written = []
    for name, key in sorted(plan.release_sets.items()):
        if targets is not None and key not in targets:
            continue
        result = report.results[key]
        path = materialize(result, session.store, out)
        if signing_key is not None:
            from nvkr.releaseset.signing import sign_release_set

            sign_release_set(path, signing_key)
        record = plan_build_record(plan, report, name, path, session.store)
        record_path, _ = write_build_record(path, record, signing_key)
        written.append(
            {
                "name": name,
                "path": str(path),
                "digest": result["metadata"]["releaseSetDigest"],
                "buildRecord": str(record_path),
            }
        )
    return written


def _push(
    push_ref: Any,
    push: str | None,
    written: list[dict[str, Any]],
    registry: RegistryAccess,
    monitor: Monitor,
) -> None:
    """``--push``: publish each written release set; its item gains ``pushed``."""
    if push_ref.tag is not None and len(written) > 1:
        raise UsageError(
            f"--push {push} names one tag but the build wrote {len(written)} release sets",
            hint="leave the tag out: each release set is tagged with its own name",
        )
    from nvkr.delivery.publish import publish_layout

    with registry.client(push_ref.registry) as client:
        for item in written:
            pushed = publish_layout(Path(item["path"]), push_ref, client)
            item["pushed"] = f"{push_ref.registry}/{push_ref.repository}:{pushed.tag}"
            monitor.emit(Note(f"  pushed {item['name']} → {item['pushed']}"))


def _result(
    plan: Any,
    report: Any,
    written: list[dict[str, Any]],
    pushed: Any,
    settings: Any,
    targets: list[str] | None,
) -> Result:
    """The build's ``result`` event: the JSON keys, and what the human summary reads."""
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
    summary = {
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
    return Result("build", fields, summary=summary)


def _execute(
    plan: Any,
    session: Any,
    settings: Any,
    registry: RegistryAccess,
    jobs: int,
    monitor: Monitor,
    cached_only: bool,
    targets: list[str] | None,
) -> tuple[Any, Any]:
    """Execute ``plan`` with the remote caches of ``settings`` (a reader for ``--cache-from``,
    a writer for ``--cache-to``, whose pushes the build waits for): the report, and the
    writer's :class:`~nvkr.cache.push.PushSummary` (None without ``--cache-to``)."""
    import contextlib

    from nvkr.execute import execute

    def event(kind: str, **fields: Any) -> None:  # the cache modules' events
        if kind == "cache-bytes":  # an upload's byte bar
            done, size = fields["done"], fields["size"]
            what = f"cache {str(fields['digest'])[:19]}"
            monitor.emit(Transfer("pushed", what, done, size, finished=done >= size))
            return
        monitor.emit(CacheEvent(kind, fields.pop("action", None), fields))

    with contextlib.ExitStack() as stack:
        reader = writer = None
        if settings.sources:
            import functools

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
            jobs=jobs,
            monitor=monitor,
            remote=reader,
            cached_only=cached_only,
            targets=targets,
            on_result=writer.offer if writer is not None else None,
        )
        summary = writer.finish(report) if writer is not None else None
    return report, summary
