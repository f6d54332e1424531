"""``nvkr lock``: resolve every source of every variant into the recipe's lockfile.

With ``--update`` it first moves pins to what their upstreams publish (:mod:`nvkr.update`),
locks the edited recipe from memory, and writes the recipe files and the lockfile only when that
lock succeeded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from nvkr.cli import DEFAULT_RECIPE, App
from nvkr.cli.common import echo_note, fetch_options, open_session
from nvkr.quantities import plural as _n
from nvkr.session import Session, bind_sources, check_contents


def _split_args(args: tuple[str, ...]) -> tuple[Path, tuple[str, ...]]:
    """``[RECIPE] [SOURCE]...``: the first argument is the recipe when it looks like a file."""
    if args and (args[0].endswith((".yaml", ".yml")) or "/" in args[0] or Path(args[0]).is_file()):
        return Path(args[0]), args[1:]
    return Path(DEFAULT_RECIPE), args


def _relock(session: Session) -> tuple[dict[str, Any], list[str]]:
    """Resolve every source afresh (a lock run verifies every pin again, it never trusts the old
    lock), then check the rules that read the sources' bytes (:func:`check_contents`), which
    records what they read in the entries; the new document and the names of the sources whose
    entries changed.

    ``--offline`` can ask no upstream (a checksum file, a Release file, PyPI's index), so what
    the old lock pins for an unchanged source is checked against the store instead, exactly as
    ``build --offline`` takes it (every blob present and intact, else OfflineError naming the
    source); a new or changed source is resolved from the store where its pin allows."""
    from nvkr.canonical import canonical_json
    from nvkr.fetch.api import ensure
    from nvkr.fetch.snapshots import keep_lock_times
    from nvkr.lock import Resolver

    old = session.resolver.lock
    offline = session.fetch.offline
    fresh = Resolver(
        loaded=session.loaded,
        lock_path=session.lock_path,
        lock=old if offline else None,
        ctx=session.fetch,
        records_lock_time=True,
    )
    session.resolver = fresh
    if not offline:
        _resolve_all(session, fresh)
    else:
        bind_sources(session)
        checked: set[str] = set()
        for variant in session.variants:
            for name in sorted(variant.recipe.sources):
                src = fresh.source_for(variant, name)
                if src.digest not in checked:
                    ensure(name, src.spec, src.entry, session.fetch, base_dir=src.base_dir)
                    checked.add(src.digest)
    check_contents(
        session, reread=True, note=echo_note
    )  # every source is in the store now: read the bytes
    doc = fresh.document()
    # an apt source that resolved to the same set keeps its lock time (nvkr.fetch.snapshots)
    keep_lock_times(doc["sources"], (old or {}).get("sources", []))

    # an entry changed when anything but the variants using it did (what the rules read too)
    def ident(entry: dict[str, Any]) -> bytes:
        return canonical_json({k: v for k, v in entry.items() if k != "variants"})

    before = {ident(e) for e in (old or {}).get("sources", [])}
    changed = [e["name"] for e in doc["sources"] if ident(e) not in before]
    return doc, changed


def _resolve_all(session: Session, resolver: Any) -> None:
    """Bind every source of every variant, going on past sources that cannot be fetched (an
    unreachable host, an HTTP error) so that one run names them all; then raise one FetchError
    listing each (its variants and its own message; the same message under several specs once).
    A checksum or signature failure still stops at once: that is tampering or a wrong pin, not a
    network to route. A source that failed is not asked again for the next variant sharing its
    spec (one timeout, not one per variant)."""
    from nvkr.errors import FetchError, OfflineError
    from nvkr.lock import _spec, _spec_key

    failed: dict[bytes, tuple[str, FetchError, list[str]]] = {}
    for variant in session.variants:
        for name in sorted(variant.recipe.sources):
            key = _spec_key(name, _spec(variant.recipe.sources[name]))
            if key in failed:
                failed[key][2].append(variant.id)
                continue
            try:
                resolver.source_for(variant, name)
            except OfflineError:
                raise
            except FetchError as e:
                failed[key] = (name, e, [variant.id])
    if not failed:
        return
    # the same failure under several specs (a keyring URL without the arch) is one line
    grouped: dict[tuple[str, str], tuple[FetchError, list[str]]] = {}
    for name, error, ids in failed.values():
        grouped.setdefault((name, error.message), (error, []))[1].extend(ids)
    if len(grouped) == 1:
        ((error, _),) = grouped.values()
        raise error
    everyone = len(session.variants)
    lines = [
        f"source {name!r} ({'all variants' if len(ids) == everyone > 1 else '; '.join(ids)}): "
        + message.removeprefix(f"source {name!r}: ").replace("\n", "\n    ")
        for (name, message), (_, ids) in sorted(grouped.items(), key=lambda kv: kv[0][0])
    ]
    raise FetchError(
        f"{len(grouped)} fetches failed ({_n(len({n for n, _ in grouped}), 'source')}); "
        "nothing was written:\n  - " + "\n  - ".join(lines),
        hint="lock where these upstreams are reachable, or map each to a reachable copy with "
        "--mirror URL=URL (see `nvkr mirror export` for air-gapped sites)",
    )


def _report(session: Session, doc: dict[str, Any], changed: list[str], had_lock: bool) -> None:
    from nvkr.lock import lock_digest

    click.echo(
        f"locked {_n(len(doc['sources']), 'source')} of {_n(len(session.variants), 'variant')} "
        f"into {session.lock_path}"
    )
    click.echo(f"  lockfile digest {lock_digest(doc)}")
    if had_lock:
        click.echo("  changed: " + (", ".join(sorted(set(changed))) if changed else "nothing"))


@click.command("lock")
@click.argument("args", nargs=-1, metavar="[RECIPE] [SOURCE]...")
@fetch_options
@click.option(
    "--update",
    is_flag=True,
    help="Move pins to the newest release their upstream publishes (in the pin's MAJOR.MINOR "
    "line; apt: the newest package), then lock. SOURCE names limit it: a source, an apt "
    "source, or NAME:PACKAGE.",
)
@click.option("--to", "to", metavar="VERSION", help="With --update SOURCE: pin exactly VERSION.")
@click.option("--pre", is_flag=True, help="With --update: pre-releases count too.")
@click.option("--dry-run", is_flag=True, help="With --update: print the changes, write nothing.")
@click.pass_obj
def command(
    app: App,
    args: tuple[str, ...],
    mirrors: tuple[str, ...],
    offline: bool,
    lockfile: Path | None,
    update: bool,
    to: str | None,
    pre: bool,
    dry_run: bool,
) -> None:
    """Resolve and verify every source of RECIPE and write lockfiles/<recipe>.lock.json.

    With --update, first bump the pins of SOURCE (default: every source with a known upstream).
    """
    from nvkr.errors import UsageError
    from nvkr.lock import write_lock

    recipe, sources = _split_args(args)
    if not update:
        used = [f"--{n}" for n, v in (("to", to), ("pre", pre), ("dry-run", dry_run)) if v]
        if sources or used:
            what = ", ".join([*used, *(f"SOURCE {s!r}" for s in sources)])
            raise UsageError(
                f"{what}: only with --update",
                hint="nvkr lock [RECIPE] --update [SOURCE ...] [--to VERSION] [--pre] [--dry-run]",
            )
    session = open_session(app, recipe, (), mirrors=mirrors, offline=offline, lockfile=lockfile)
    had_lock = session.resolver.lock is not None
    if not update:
        from nvkr.catalog.evaluation import check_variants  # an invalid combination is never locked

        check_variants(recipe, session.variants)
        doc, changed = _relock(session)
        write_lock(session.lock_path, doc)
        _report(session, doc, changed, had_lock)
        return
    _update(session, recipe, sources, to=to, pre=pre, dry_run=dry_run, had_lock=had_lock)


def _update(
    session: Session,
    recipe: Path,
    sources: tuple[str, ...],
    *,
    to: str | None,
    pre: bool,
    dry_run: bool,
    had_lock: bool,
) -> None:
    from nvkr.canonical import canonical_json_file
    from nvkr.catalog.evaluation import check_variants
    from nvkr.recipe.matrix import expand
    from nvkr.update import UpdateRequest, plan_update, write_atomically

    request = UpdateRequest(sources=sources, to=to, pre=pre)
    plan = plan_update(session.loaded, session.variants, session.fetch, request)
    for note in plan.notes:
        click.echo(note, err=True)
    if not plan.changes or plan.loaded is None:
        click.echo("already up to date")
        return
    for change in plan.changes:
        click.echo(str(change))
    if dry_run:
        click.echo("dry run: nothing written")
        return
    session.loaded = plan.loaded
    session.variants = expand(plan.loaded, None)
    check_variants(recipe, session.variants)  # the updated recipe must keep the catalog's rules
    doc, changed = _relock(session)
    files = dict(plan.files)
    files[session.lock_path] = canonical_json_file(doc)
    write_atomically(files, plan.originals)
    _report(session, doc, changed, had_lock)
