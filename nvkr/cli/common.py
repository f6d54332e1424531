"""What several verbs share: recipe arguments, and recipe → variants → lock → plan."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from nvkr.cli import DEFAULT_RECIPE, App

F = TypeVar("F", bound=Callable[..., Any])


def recipe_argument(f: F) -> F:
    return click.argument(
        "recipe", required=False, default=DEFAULT_RECIPE, type=click.Path(path_type=Path)
    )(f)


def variant_option(f: F) -> F:
    return click.option(
        "--variant",
        "variants",
        multiple=True,
        metavar="AXIS=VALUE,...",
        help="Only these cells, e.g. gpu=hopper,kubernetes=1.36,arch=amd64 (repeatable).",
    )(f)


def fetch_options(f: F) -> F:
    f = click.option("--offline", is_flag=True, help="Use the store only; name what is missing.")(f)
    f = click.option(
        "--mirror",
        "mirrors",
        multiple=True,
        metavar="PREFIX=REPLACEMENT",
        help="Rewrite source URLs starting with PREFIX (repeatable; digests never change).",
    )(f)
    f = click.option(
        "--lockfile",
        type=click.Path(path_type=Path),
        help="Lockfile path (default: lockfiles/<recipe>.lock.json).",
    )(f)
    return f


#: Columns a table may take when its output is no terminal (a CI log, a pipe, a file): rich would
#: assume 80 and cut digests and names to fit; nothing reads such output at a width.
PIPE_WIDTH = 10_000


def make_console(*, stderr: bool = False) -> Any:
    """A rich Console for human output: the terminal's width on a terminal, else
    :data:`PIPE_WIDTH`, so no table cell is cut when stdout is a pipe."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else PIPE_WIDTH
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=width)


def human_size(n: int) -> str:
    """``512 bytes``, ``6.0 MiB``, ``2.5 GiB`` (binary units, one decimal)."""
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def cleanup_line(cleaned: Any) -> str | None:
    """The line saying what :meth:`nvkr.store.Store.lock` removed of dead builds' leftovers
    (a :class:`nvkr.scratch.Cleanup`), or None when there was nothing."""
    if not cleaned:
        return None
    line = (
        f"store: removed {n(len(cleaned.removed), 'leftover')} of dead builds from tmp/ "
        f"({human_size(cleaned.bytes)})"
    )
    if cleaned.unmounted:
        line += f", unmounted {cleaned.unmounted}"
    if cleaned.detached:
        line += f", detached {n(cleaned.detached, 'loop device')}"
    if cleaned.kept:
        line += f"; kept {', '.join(cleaned.kept)}: still mounted below (see --debug)"
    return line


def n(count: int, noun: str) -> str:
    """``1 variant``, ``4 variants``."""
    return f"{count} {noun}" + ("" if count == 1 else "s")


@dataclass
class Session:
    """A loaded recipe with its variants, resolver and (once planned) plan."""

    loaded: Any
    variants: list[Any]
    all_variants: bool
    resolver: Any
    store: Any
    fetch: Any
    lock_path: Path


def open_session(
    app: App,
    recipe: Path,
    variants: tuple[str, ...] = (),
    *,
    mirrors: tuple[str, ...] = (),
    offline: bool = False,
    locked: bool = False,
    lockfile: Path | None = None,
) -> Session:
    """Load ``recipe``, expand the selected variants and read the lockfile.

    Raises:
        RecipeError, UsageError, LockError: as the steps do.
    """
    from nvkr.fetch import FetchContext, Mirrors
    from nvkr.lock import Resolver, default_lock_path, read_lock
    from nvkr.plancheck import check_variant
    from nvkr.recipe import expand, load_recipe, parse_variant_option
    from nvkr.store import Store

    loaded = load_recipe(recipe)
    selections = [parse_variant_option(v) for v in variants] or None
    cells = expand(loaded, selections)
    all_cells = cells if selections is None else expand(loaded, None)
    for cell in cells:  # what needs no source is refused before any is read
        check_variant(cell)
    store = Store(app.store_root)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:  # held until the command ends: gc deletes nothing it reads meanwhile
        ctx.with_resource(store.reading())
    config = (
        app.config if app.config is not None else Path.home() / ".config" / "nvkr" / "config.yaml"
    )
    mirror_table = Mirrors.parse(list(mirrors)).merged(Mirrors.from_config(config))
    fetch = FetchContext(store=store, mirrors=mirror_table, offline=offline)
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


def check_contents(session: Session, *, reread: bool = False) -> None:
    """Check the session's variants against the compatibility rules that read the locked
    sources' bytes (check ``ovsdb-schema``): from what the lock entries record, else (or with
    ``reread``, as ``nvkr lock`` does) from the store's blobs, recording what was read in the
    entries (the sources it reads are bound on the way, :meth:`nvkr.lock.Resolver.bound_entry`).

    Raises:
        RecipeError: a violation (as :func:`nvkr.catalog.check_variants`).
    """
    from nvkr.catalog import check_variants, find_rules

    if find_rules(Path(session.loaded.path)) is None:
        return
    from nvkr.catalog.schemas import SourceSchemas

    read = SourceSchemas(session.resolver.bound_entry, session.store, reread=reread)
    check_variants(Path(session.loaded.path), session.variants, schemas=read)
    for (rule, why), variants in read.unchecked.items():  # validate said it is checked here
        click.echo(f"note: rule {rule} did not apply to {'; '.join(variants)}: {why}", err=True)


def make_session_plan(session: Session) -> Any:
    """Plan the session's variants; the epoch falls back to the newest git commit time."""
    from nvkr.lock import lock_digest
    from nvkr.plan import make_plan, project_root, recorded_path
    from nvkr.repro import source_date_epoch

    bind_sources(session)
    check_contents(session)
    doc = session.resolver.document()
    commit_times = [
        e["resolved"]["commitTime"] for e in doc["sources"] if "commitTime" in e["resolved"]
    ]
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
    )


def registry_password(username: str | None, password_stdin: bool, command: str) -> str | None:
    """The password of ``-u``/``--password-stdin`` (stdin, else ``NVKR_REGISTRY_PASSWORD``);
    ``command`` is the command's path for the hint (``nvkr release-set show``).

    Raises:
        UsageError: ``--password-stdin`` without ``--username``, or a user without a password.
    """
    from nvkr.errors import UsageError

    if password_stdin and not username:
        raise UsageError("--password-stdin needs --username")
    password = sys.stdin.read().rstrip("\r\n") if password_stdin else None
    if username and password is None:
        password = os.environ.get("NVKR_REGISTRY_PASSWORD") or None
        if password is None:
            raise UsageError(
                "--username needs --password-stdin (or NVKR_REGISTRY_PASSWORD)",
                hint=f'pipe the password in: echo "$PASSWORD" | {command} ... --password-stdin',
            )
    return password


@dataclass(frozen=True)
class RegistryAccess:
    """How a verb reaches the registry its argument names: ``--insecure`` and the credentials of
    ``-u``/``--password-stdin`` (None: the client's own defaults, NVKR_REGISTRY_* or the Docker
    config)."""

    insecure: bool = False
    username: str | None = None
    password: str | None = None

    def client(self, registry: str, **options: Any) -> Any:
        """A :class:`~nvkr.oci.registry.RegistryClient` for ``registry`` (``host[:port]``) with
        these settings; ``options`` go to it as they are (``chunk_size``, ``pool_size``)."""
        from nvkr.oci.registry import RegistryClient

        return RegistryClient(
            registry,
            insecure=self.insecure,
            username=self.username,
            password=self.password,
            **options,
        )


def registry_options(scope: str = "", insecure_note: str = "") -> Callable[[F], F]:
    """``--insecure``, ``-u/--username`` and ``--password-stdin`` for a verb that talks to a
    registry, as one ``registry:`` :class:`RegistryAccess` argument of the command. The password
    is read (and the pair checked) before the command body runs.

    Args:
        scope: when the options apply, prefixed to their help (``REF``: only with a registry
            reference; ``With --push``).
        insecure_note: more words for ``--insecure``'s help.
    Raises (when the command runs):
        UsageError: see :func:`registry_password`.
    """

    def say(text: str) -> str:
        return f"{scope}: {text}" if scope else text[0].upper() + text[1:]

    def decorate(f: F) -> F:
        @functools.wraps(f)
        def command(
            *args: Any, insecure: bool, username: str | None, password_stdin: bool, **kwargs: Any
        ) -> Any:
            # "nvkr release-set show", whatever name the program was started under
            verbs = click.get_current_context().command_path.split()[1:]
            password = registry_password(username, password_stdin, " ".join(["nvkr", *verbs]))
            access = RegistryAccess(insecure=insecure, username=username, password=password)
            return f(*args, registry=access, **kwargs)

        note = f"; {insecure_note}" if insecure_note else ""
        options = [
            click.option(
                "--insecure",
                is_flag=True,
                help=say(
                    f"plain HTTP to this registry (127.0.0.1 and localhost always are){note}."
                ),
            ),
            click.option(
                "--username",
                "-u",
                help=say("user name (else NVKR_REGISTRY_USERNAME, the Docker config)."),
            ),
            click.option(
                "--password-stdin", is_flag=True, help=say("read the password from standard input.")
            ),
        ]
        for option in reversed(options):
            command = option(command)
        return command  # type: ignore[return-value]

    return decorate
