"""The one in-process runner of the CLI: :func:`invoke` calls ``nvkr.cli.main`` (the console
script's entry point, so errors render and map to exit codes exactly as for a user) under click's
``CliRunner`` isolation, and returns a :class:`~tests.helpers.nvkr.Result` (code, stdout,
stderr). ``store=`` adds ``--store``; ``input=`` is stdin; ``env=`` sets (or, with ``None``
values, unsets) variables for the call only. The ``nvkr`` fixture hands it to a test.

Tests that need a separate process (signals, start-up cost, umask) use
:func:`tests.helpers.nvkr.run_nvkr` instead."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.helpers.nvkr import Result


def invoke(
    *args: object,
    store: Path | None = None,
    input: str | None = None,
    env: Mapping[str, str | None] | None = None,
) -> Result:
    """Run ``nvkr ARGS`` in this process and return what it left (never raises SystemExit)."""
    from nvkr.cli import main

    argv = [str(a) for a in args]
    if store is not None:
        argv = ["--store", str(store), *argv]
    with CliRunner().isolation(input=input, env=env) as (out, err, _):
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
