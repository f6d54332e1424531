"""A build session as a library call: a recipe loaded, its variants expanded, its lockfile read
(:func:`open_session`), its sources bound and its plan made (:func:`make_session_plan`).

Every verb that plans or locks starts here (the CLI's wrapper, :func:`nvkr.cli.common.open_session`,
only adds the store's read hold for the command's life), and so does an in-process caller:
:func:`nvkr.build.build` builds a session, ``verify --rebuild`` opens one on a fresh store. No
click, no printing: notes a step has for the user go to the ``note`` callable it is given.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nvkr.fetch.context import FetchContext
    from nvkr.lock import Resolver
    from nvkr.plan import Plan
    from nvkr.recipe.loader import LoadedRecipe
    from nvkr.recipe.matrix import Variant
    from nvkr.store import Store


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


@dataclass
class Session:
    """A loaded recipe with its selected variants (``all_variants``: the selection is the whole
    matrix), the resolver binding their sources to the lockfile at ``lock_path``, the store and
    the fetch context (mirrors, offline) sources are read through."""

    loaded: LoadedRecipe
    variants: list[Variant]
    all_variants: bool
    resolver: Resolver
    store: Store
    fetch: FetchContext
    lock_path: Path


def open_session(
    recipe: Path,
    variants: tuple[str, ...] = (),
    *,
    store: Store,
    config: Path | None = None,
    mirrors: tuple[str, ...] = (),
    offline: bool = False,
    locked: bool = False,
    lockfile: Path | None = None,
) -> Session:
    """Load ``recipe``, expand the selected ``variants`` (``AXIS=VALUE,...`` each; none: the
    whole matrix) and read the lockfile (``lockfile``, else the recipe's default one).

    Args:
        store: the store sources are read from and fetched into.
        config: the nvkr config file whose mirrors apply after ``mirrors`` (None:
            ``$NVKR_CONFIG``, else ``~/.config/nvkr/config.yaml``).
        mirrors: ``PREFIX=REPLACEMENT`` URL rewrites.
        offline: fetch nothing; what the store lacks is an error naming it.
        locked: refuse any source the lockfile does not pin.
    Raises:
        RecipeError, UsageError, LockError: as the steps do.
    """
    from nvkr.fetch.context import FetchContext
    from nvkr.fetch.mirrors import Mirrors
    from nvkr.fetch.snapshots import SnapshotArchives
    from nvkr.lock import Resolver, default_lock_path, read_lock
    from nvkr.plancheck import check_variant
    from nvkr.recipe.loader import load_recipe
    from nvkr.recipe.matrix import expand, parse_variant_option

    loaded = load_recipe(recipe)
    selections = [parse_variant_option(v) for v in variants] or None
    cells = expand(loaded, selections)
    all_cells = cells if selections is None else expand(loaded, None)
    for cell in cells:  # what needs no source is refused before any is read
        check_variant(cell)
    from nvkr.fetch.mirrors import default_config_path

    config = config if config is not None else default_config_path()
    mirror_table = Mirrors.parse(list(mirrors)).merged(Mirrors.from_config(config))
    fetch = FetchContext(
        store=store,
        mirrors=mirror_table,
        offline=offline,
        snapshots=SnapshotArchives.from_config(config),
    )
    lock_path = lockfile or default_lock_path(recipe)
    resolver = Resolver(
        loaded=loaded, lock_path=lock_path, lock=read_lock(lock_path), ctx=fetch, locked=locked
    )
    return Session(
        loaded=loaded,
        variants=cells,
        all_variants=len(cells) == len(all_cells),
        resolver=resolver,
        store=store,
        fetch=fetch,
        lock_path=lock_path,
    )


def bind_sources(session: Session) -> None:
    """Bind every source of every selected variant to its lock entry (resolving what is new).

    Raises:
        FetchError: a source could not be resolved; without a lockfile the hint says so first
            (every source is then resolved from its upstream, which a leaf of the catalog, shipped
            without one, needs the network for).
    """
    from nvkr.errors import FetchError

    for variant in session.variants:
        for name in sorted(variant.recipe.sources):
            try:
                session.resolver.source_for(variant, name)
            except FetchError as e:
                if session.resolver.lock is None:
                    e.hint = (
                        f"there is no lockfile at {session.lock_path}, so every source is "
                        f"resolved from its upstream now: `nvkr lock {session.loaded.path}` "
                        "where they are reachable writes it" + (f"; {e.hint}" if e.hint else "")
                    )
                raise


def check_contents(
    session: Session, *, reread: bool = False, note: Callable[[str], None] = _to_stderr
) -> None:
    """Check the session's variants against the compatibility rules that read the locked
    sources' bytes (check ``ovsdb-schema``): from what the lock entries record, else (or with
    ``reread``, as ``nvkr lock`` does) from the store's blobs, recording what was read in the
    entries (the sources it reads are bound on the way, :meth:`nvkr.lock.Resolver.bound_entry`).
    A rule that did not apply to a variant is said through ``note``.

    Raises:
        RecipeError: a violation (as :func:`nvkr.catalog.evaluation.check_variants`).
    """
    from nvkr.catalog.evaluation import check_variants
    from nvkr.catalog.loading import find_rules

    if find_rules(Path(session.loaded.path)) is None:
        return
    from nvkr.catalog.schemas import SourceSchemas

    read = SourceSchemas(session.resolver.bound_entry, session.store, reread=reread)
    check_variants(Path(session.loaded.path), session.variants, schemas=read)
    for (rule, why), variants in read.unchecked.items():  # validate said it is checked here
        note(f"note: rule {rule} did not apply to {'; '.join(variants)}: {why}")


def make_session_plan(
    session: Session, *, epoch: int | None = None, note: Callable[[str], None] = _to_stderr
) -> Plan:
    """Bind the session's sources, check what the compatibility rules read from them
    (:func:`check_contents`, notes through ``note``) and plan its variants.

    Args:
        epoch: the build's epoch (``verify --rebuild``: the release set's); None: as
            :func:`nvkr.repro.source_date_epoch` says (``$SOURCE_DATE_EPOCH``, the recipe's, the
            newest git commit time).
    """
    from nvkr.fetch.api import fetcher_for
    from nvkr.lock import lock_digest
    from nvkr.plan import make_plan, project_root, recorded_path
    from nvkr.repro import source_date_epoch

    bind_sources(session)
    check_contents(session, note=note)
    doc = session.resolver.document()
    if epoch is None:
        made = (fetcher_for(e.kind).commit_time(e) for e in session.resolver.resolved())
        commit_times = [time for time in made if time is not None]
        epoch = source_date_epoch(
            session.loaded.recipe.epoch, fallback=max(commit_times) if commit_times else None
        )
    # The lockfile on disk is what provenance names, unless this build had to resolve sources the
    # lock lacks; then the in-memory lock it actually used is named (its digest, the same path).
    used = (
        session.resolver.lock
        if session.resolver.lock is not None and not session.resolver.resolved_now
        else doc
    )
    root = project_root(session.loaded.path)
    lockfile = {"path": recorded_path(session.lock_path, root), "digest": lock_digest(used)}
    return make_plan(
        session.loaded,
        session.variants,
        session.resolver.source_for,
        epoch=epoch,
        lockfile=lockfile,
        debs_for=session.resolver.locked_debs,
    )


def no_lock_warning(session: Session) -> str | None:
    """The warning for a session without a lockfile (every source is resolved now), or None;
    said before the plan is made (resolving is the slow part)."""
    if session.resolver.lock is not None:
        return None
    return (
        f"no lockfile {session.lock_path}: every source is resolved (fetched and checked) now; "
        "`nvkr lock` pins them first"
    )


def unlocked_warning(session: Session) -> str | None:
    """After the plan: the warning naming the sources the lockfile lacked or pinned otherwise
    (a source changed in the recipe), resolved now, or None."""
    resolver = session.resolver
    if not resolver.resolved_now or resolver.lock is None:
        return None
    names = sorted(set(resolver.resolved_now))
    return (
        f"{session.lock_path} lacks {', '.join(names)}; resolved now — run `nvkr lock` to pin "
        + ("it" if len(names) == 1 else "them")
    )
