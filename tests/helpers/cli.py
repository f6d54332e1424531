"""The one in-process runner of the CLI: :func:`invoke` calls ``nvkr.cli.main`` (the console
script's entry point, so errors render and map to exit codes exactly as for a user) under click's
``CliRunner`` isolation, and returns a :class:`~tests.helpers.nvkr.Result` (code, stdout,
stderr). ``store=`` adds ``--store``; ``input=`` is stdin; ``env=`` sets (or, with ``None``
values, unsets) variables for the call only; ``cwd=`` is the working directory for the call. The
CLI's log handler is installed as for a user (pytest's own handlers are set aside for the call), so
a verb's warnings through :mod:`logging` reach the result's stderr. The ``nvkr`` fixture hands it
to a test.

Tests that need a separate process (signals, start-up cost, umask) use
:func:`tests.helpers.nvkr.run_nvkr` instead."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.helpers.nvkr import Result


@contextlib.contextmanager
def _own_logging() -> Iterator[None]:
    """The root logger without handlers for the call (the CLI's ``logging.basicConfig`` then
    installs its own, on the call's stderr, as in a process of its own), restored afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    for handler in handlers:
        root.removeHandler(handler)
    try:
        yield
    finally:
        for handler in root.handlers[:]:
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)


def invoke(
    *args: object,
    store: Path | None = None,
    input: str | None = None,
    env: Mapping[str, str | None] | None = None,
    cwd: Path | None = None,
) -> Result:
    """Run ``nvkr ARGS`` in this process and return what it left (never raises SystemExit)."""
    from nvkr.cli import main

    argv = [str(a) for a in args]
    if store is not None:
        argv = ["--store", str(store), *argv]
    where = contextlib.chdir(cwd) if cwd is not None else contextlib.nullcontext()
    with where, _own_logging(), CliRunner().isolation(input=input, env=env) as (out, err, _):
        try:
            main(argv)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        return Result(code, out.getvalue().decode(), err.getvalue().decode())


def invoke_output(*args: object, **kwargs: object) -> tuple[int, str]:
    """:func:`invoke`'s (exit code, stdout then stderr), for tests that read a message wherever
    the verb writes it."""
    result = invoke(*args, **kwargs)  # type: ignore[arg-type]
    return result.code, result.output


@pytest.fixture
def nvkr() -> Callable[..., Result]:
    """:func:`invoke`."""
    return invoke
