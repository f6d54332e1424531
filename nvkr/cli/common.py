"""What several verbs share: recipe arguments, and recipe → variants → lock → plan."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from nvkr.cli import DEFAULT_RECIPE, App
from nvkr.oci.access import RegistryAccess as RegistryAccess  # the verbs' registry options

if TYPE_CHECKING:
    from nvkr.cache.settings import CacheSettings
    from nvkr.session import Session

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


def echo_note(line: str) -> None:
    """A note of a library step (:mod:`nvkr.session`'s ``note``) on the command's stderr."""
    click.echo(line, err=True)


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
    """:func:`nvkr.session.open_session` on the store and config of ``app``, the store held for
    reading until the command ends (gc deletes nothing it reads meanwhile).

    Raises:
        RecipeError, UsageError, LockError: as the steps do.
    """
    from nvkr.session import open_session as open_library_session
    from nvkr.store import Store

    session = open_library_session(
        recipe, variants, store=Store(app.store_root), config=app.config, mirrors=mirrors,
        offline=offline, locked=locked, lockfile=lockfile,
    )  # fmt: skip
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.with_resource(session.store.reading())
    return session


@dataclass(frozen=True)
class CacheArgs:
    """The remote cache options as given (``--cache-from`` ... ``--cache-trust-unsigned``)."""

    cache_from: tuple[str, ...]
    cache_to: str | None
    cache_mode: str | None
    cache_salt: str | None
    cache_sign_key: str | None
    cache_trust: tuple[str, ...]
    cache_trust_unsigned: bool

    @property
    def given(self) -> bool:
        """Whether any remote cache option was given on the command line."""
        return any(getattr(self, name) for name in self.__dataclass_fields__)

    def settings(self, config: Path | None) -> CacheSettings:
        """The settings these options, the environment and ``config`` (None: the user's config
        file, :func:`nvkr.fetch.mirrors.default_config_path`) give
        (:func:`nvkr.cache.settings.resolve_settings`).

        Raises:
            UsageError: as resolve_settings does.
        """
        from nvkr.cache.settings import resolve_settings
        from nvkr.fetch.mirrors import default_config_path

        return resolve_settings(
            cache_from=self.cache_from, cache_to=self.cache_to, mode=self.cache_mode,
            salt=self.cache_salt, sign_key=self.cache_sign_key, trust=self.cache_trust,
            trust_unsigned=self.cache_trust_unsigned,
            config=config if config is not None else default_config_path(),
        )  # fmt: skip


def cache_options(f: F) -> F:
    """The remote cache options of ``nvkr build``, as one ``cache:`` :class:`CacheArgs`
    argument of the command."""

    @functools.wraps(f)
    def command(*args: Any, **kwargs: Any) -> Any:
        fields = {name: kwargs.pop(name) for name in CacheArgs.__dataclass_fields__}
        return f(*args, cache=CacheArgs(**fields), **kwargs)

    options = [
        click.option(
            "--cache-from",
            "cache_from",
            multiple=True,
            metavar="REGISTRY/REPO",
            help="Take action results from this remote cache (repeatable, read in order; env "
            "NVKR_CACHE_FROM).",
        ),
        click.option(
            "--cache-to",
            metavar="REGISTRY/REPO",
            help="Push action results to this remote cache, signed (env NVKR_CACHE_TO).",
        ),
        click.option(
            "--cache-mode",
            type=click.Choice(["min", "max"]),
            help="min (default): what the release sets reference and slow actions; max: every action "
            "(env NVKR_CACHE_MODE).",
        ),
        click.option(
            "--cache-salt",
            metavar="TEXT",
            help="Mixed into every cache tag: a new salt disowns every earlier entry (env "
            "NVKR_CACHE_SALT).",
        ),
        click.option(
            "--cache-sign-key",
            metavar="KEY",
            help="Sign cache entries with this private key, a PEM file or env://NAME (env "
            "NVKR_CACHE_SIGN_KEY).",
        ),
        click.option(
            "--cache-trust",
            multiple=True,
            metavar="PUB",
            help="Use cache entries signed by this public key (repeatable; env NVKR_CACHE_TRUST).",
        ),
        click.option(
            "--cache-trust-unsigned",
            is_flag=True,
            help="Also use cache entries no trusted key signed (said on every build).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command  # type: ignore[return-value]


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
