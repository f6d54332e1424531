"""The ``nvkr`` command line: a click group with one module per verb.

Errors are handled once, here: an :class:`~nvkr.errors.NvkrError` prints ``error[CODE]: ...`` and
its hint on stderr and exits with its exit code (2 usage or invalid recipe, 3 integrity, 1 build,
130 interrupted, 143 terminated by SIGTERM); ``--debug`` (or ``NVKR_DEBUG=1``) adds the traceback
before that line and changes no exit code.

Start-up is part of every command's time (``nvkr publish`` of a small set is compared with
``skopeo copy``, a Go binary): the group imports a verb's module only when that verb runs
(:class:`LazyGroup`), and verb modules import their heavy dependencies inside the command.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path

import click

import nvkr
from nvkr.errors import NvkrError, UsageError
from nvkr.redact import RedactingFormatter, redact_text

DEFAULT_RECIPE = "recipes/default.yaml"


@dataclass
class App:
    """Global options, shared by every verb through ``ctx.obj``."""

    debug: bool
    store_root: Path | None
    config: Path | None


#: Verb → the module (under nvkr.cli) whose ``command`` it is, in the order ``--help`` lists them.
VERBS: dict[str, str] = {
    "validate": "validate",
    "plan": "plan",
    "lock": "lock",
    "build": "build",
    "boot-test": "boot_test",
    "publish": "publish",
    "pull": "pull",
    "copy": "copy",
    "verify": "verify",
    "keys": "keys",
    "release-set": "release_set",
    "image": "image",
    "mirror": "mirror",
    "store": "store",
    "cache": "cache",
    "diff": "diff",
    "recipes": "recipes",
    "ci": "ci",
    "schema": "schema",
}


def _after_verb_debug(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        ctx.find_object(App).debug = True  # type: ignore[union-attr]
        logging.getLogger().setLevel(logging.DEBUG)
        logging.getLogger("urllib3").setLevel(logging.DEBUG)


def _after_verb_path(ctx: click.Context, param: click.Parameter, value: Path | None) -> None:
    if value is not None:
        setattr(ctx.find_object(App), str(param.name), value)


def _global_options() -> list[click.Parameter]:
    """The group's global options, once more for a verb's own option list: ``nvkr build
    --store DIR`` means ``nvkr --store DIR build`` (users put options after the verb; CI
    templates add them at the end). They set the same :class:`App` fields, so the last one
    given wins. No environment variable here: the group's options already read them."""
    return [
        click.Option(
            ["--debug"],
            is_flag=True,
            expose_value=False,
            allow_from_autoenv=False,
            callback=_after_verb_debug,
            help="Show tracebacks and the argv and environment of every tool run (also before the verb).",
        ),
        click.Option(
            ["--store", "store_root"],
            type=click.Path(path_type=Path),
            expose_value=False,
            allow_from_autoenv=False,
            callback=_after_verb_path,
            help="Store directory (also before the verb; env NVKR_CACHE).",
        ),
        click.Option(
            ["--config"],
            type=click.Path(path_type=Path),
            expose_value=False,
            allow_from_autoenv=False,
            callback=_after_verb_path,
            help="Config file (also before the verb; env NVKR_CONFIG).",
        ),
    ]


def _add_global_options(command: click.Command) -> None:
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _add_global_options(sub)
        return
    have = {opt for p in command.params for opt in getattr(p, "opts", [])}
    command.params.extend(p for p in _global_options() if not have & set(p.opts))


class LazyGroup(click.Group):
    """A group that imports a verb's module only when that verb runs (or ``--help`` lists them),
    so ``nvkr publish`` does not pay for the imports of ``build``, ``verify``... (click's
    "Lazily Loading Subcommands" pattern). Commands added with ``add_command`` still work."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(VERBS) + [c for c in super().list_commands(ctx) if c not in VERBS]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in VERBS:
            return super().get_command(ctx, cmd_name)
        module = importlib.import_module(f"nvkr.cli.{VERBS[cmd_name]}")
        command: click.Command = module.command
        if command.name != cmd_name:
            raise AssertionError(f"nvkr.cli.{VERBS[cmd_name]} defines {command.name!r}")
        _add_global_options(command)
        self.add_command(command)
        return command


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "NVKR"},
)
@click.version_option(nvkr.__version__, "--version", prog_name="nvkr")
@click.option(
    "--debug",
    is_flag=True,
    envvar="NVKR_DEBUG",
    help="Show tracebacks and the argv and environment of every tool run.",
)
@click.option(
    "--store",
    "store_root",
    type=click.Path(path_type=Path),
    envvar="NVKR_CACHE",
    help="Store directory (env NVKR_CACHE; default ~/.cache/nvkr).",
)
@click.option(
    "--config",
    type=click.Path(path_type=Path),
    envvar="NVKR_CONFIG",
    help="Config file: mirrors, snapshot archives, cache settings (env NVKR_CONFIG; default ~/.config/nvkr/config.yaml).",
)
@click.pass_context
def cli(ctx: click.Context, debug: bool, store_root: Path | None, config: Path | None) -> None:
    """nvkr: reproducible artifact builds for GPU Kubernetes infrastructure."""
    handler = logging.StreamHandler()
    handler.setFormatter(RedactingFormatter("%(name)s: %(message)s"))  # credentials never leave
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, handlers=[handler])
    if not debug:  # urllib3 warns of each retry; nvkr's own error names the failure once
        logging.getLogger("urllib3").setLevel(logging.ERROR)
    ctx.obj = App(debug=debug, store_root=store_root, config=config)


def file_system_error(e: OSError) -> UsageError:
    """An OSError that reached the top as a usage error naming the path(s) and the reason."""
    paths = " -> ".join(str(p) for p in (e.filename, e.filename2) if p is not None)
    reason = e.strerror or type(e).__name__
    return UsageError(
        f"{paths}: {reason}" if paths else reason,
        hint="check the path: a missing parent directory, a file where a directory is "
        "expected (or the other way), permissions, free space",
    )


def debug_requested(argv: list[str]) -> bool:
    """Whether ``--debug`` (before or after the verb, up to a ``--``) or ``$NVKR_DEBUG`` asks
    for tracebacks: the same switch the ``--debug`` options read, known here before click has
    parsed anything (an error may come first). ``NVKR_DEBUG`` is a boolean as click reads one
    (1, true, yes, on; 0, false, no, off, empty); another value turns nothing on here and is
    refused by click."""
    options = argv[: argv.index("--")] if "--" in argv else argv
    if "--debug" in options:
        return True
    value = os.environ.get("NVKR_DEBUG")
    if value is None:
        return False
    try:
        return bool(click.BOOL.convert(value, None, None))
    except click.BadParameter:
        return False


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt so that both take the
    same path (stop the tools, keep what finished), and exit 143 instead of 130."""


def _on_stop_signal(signum: int, frame: object) -> None:
    """SIGINT and SIGTERM: the first raises in the main thread; a second one while nvkr is
    stopping kills the running tools at once (no more grace) and raises again."""
    from nvkr.run import kill_tools, request_stop

    if not request_stop(signum):
        kill_tools()
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _stopped(e: BaseException) -> int:
    """Stop what is still running after a Ctrl-C or SIGTERM reached the top; print the error
    line and return the exit code (130, or 143 for SIGTERM)."""
    from nvkr.run import stop_tools

    cause = e.__cause__ if isinstance(e, click.exceptions.Abort) else e
    terminated = isinstance(cause, Terminated)
    stop_tools()
    click.echo(
        f"error[NVKR-E-INTERRUPTED]: {'terminated' if terminated else 'interrupted'}", err=True
    )
    return 128 + (signal.SIGTERM if terminated else signal.SIGINT)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the CLI and map errors to exit codes.

    SIGTERM (a CI system cancelling the job) is handled like Ctrl-C: running tools are stopped
    and clean up, finished actions stay cached, and the exit code is 143 (130 for Ctrl-C).
    """
    if threading.current_thread() is not threading.main_thread():  # signal.signal needs it
        _main(argv)
        return
    previous = {s: signal.signal(s, _on_stop_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        _main(argv)
    finally:  # an in-process caller (a test) gets its own handlers back
        for s, handler in previous.items():
            signal.signal(s, handler)


def _print_traceback() -> None:
    """``--debug``'s traceback, the user info of every URL in it stripped (:mod:`nvkr.redact`)."""
    sys.stderr.write(redact_text(traceback.format_exc()))


def _main(argv: list[str] | None) -> None:
    debug = debug_requested(argv if argv is not None else sys.argv[1:])
    try:
        cli.main(args=argv, prog_name="nvkr", standalone_mode=False)
    except NvkrError as e:
        if debug:
            _print_traceback()
        click.echo(e.render(), err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Abort as e:
        sys.exit(_stopped(e))
    except click.UsageError as e:
        command = e.ctx.command_path if e.ctx is not None else "nvkr"
        click.echo(redact_text(f"error[NVKR-E-USAGE]: {e.format_message()}"), err=True)
        click.echo(f"  hint: see `{command} --help`", err=True)
        sys.exit(2)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except KeyboardInterrupt as e:
        sys.exit(_stopped(e))
    except OSError as e:
        # A path the user named (an output directory whose parent is missing, a file where a
        # directory is expected), or the machine (a full disk): never nvkr's own logic.
        if debug:
            _print_traceback()
        click.echo(file_system_error(e).render(), err=True)
        sys.exit(UsageError.exit_code)
    except Exception as e:
        if debug:
            _print_traceback()
        click.echo(redact_text(f"error[NVKR-E-INTERNAL]: {type(e).__name__}: {e}"), err=True)
        click.echo("  hint: run again with --debug for a traceback, and report it", err=True)
        sys.exit(1)
