"""``nvkr ci check``: committed pipelines against what their recorded command writes now.

Each generated file names the ``nvkr ci generate`` command that wrote it in its header
(:func:`nvkr.ci.header`); the check parses that command with the same options, generates in
memory and compares byte for byte. A file that differs gets a unified diff on stdout; any
difference fails the check (``NVKR-E-DRIFT``, exit 1), unless ``--write`` asks to rewrite it. Files without nvkr's header are not
nvkr's and are left alone. Paths in the commands are relative to the checkout's root: run the
check there, as CI does.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path

import click

from nvkr.ci import recorded_command
from nvkr.errors import DriftError, UsageError

SUFFIXES = (".yml", ".yaml")


def generated_files(paths: list[Path]) -> list[tuple[Path, list[str]]]:
    """``(file, recorded argv)`` for every file under ``paths`` with nvkr's header, sorted.

    Raises:
        UsageError: a path that does not exist.
    """
    found: list[tuple[Path, list[str]]] = []
    for path in paths:
        if not path.exists():
            raise UsageError(f"{path}: no such file or directory")
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            if file.suffix not in SUFFIXES:
                continue
            command = recorded_command(file.read_text(errors="replace"))
            if command is not None:
                found.append((file, command))
    return found


def check_pipelines(
    regenerate: Callable[[list[str]], str], paths: list[Path], *, write: bool = False
) -> None:
    """Check every generated file under ``paths``; print a diff per drifted file (``write``:
    rewrite it with what its command writes now, atomically). ``regenerate`` is what a recorded
    command (``["nvkr", "ci", "generate", ...]``) writes now, parsed as the CLI parses it
    (:func:`nvkr.cli.ci.regenerate`).

    Raises:
        DriftError: a file differs (naming each) and ``write`` is false, or no generated file
            was found.
    """
    files = generated_files(paths)
    if not files:
        raise DriftError(
            "no generated pipeline under " + ", ".join(str(p) for p in paths),
            hint="nvkr ci generate ... --out FILE writes one",
        )
    drifted = []
    for file, command in files:
        want = regenerate(command)
        have = file.read_text()
        if want != have:
            drifted.append(str(file))
            if write:
                from nvkr.atomic import write_atomic

                write_atomic(file, want.encode())
                click.echo(f"nvkr: rewrote {file}", err=True)
                continue
            diff = difflib.unified_diff(
                have.splitlines(keepends=True),
                want.splitlines(keepends=True),
                fromfile=f"{file} (committed)",
                tofile=f"{file} (generated now)",
            )
            click.echo("".join(diff), nl=False)
    if drifted and not write:
        raise DriftError(
            f"{len(drifted)} of {len(files)} generated pipelines differ from what their "
            "command writes now: " + ", ".join(drifted),
            hint="run the command in each file's header again and commit the result",
        )
    click.echo(
        f"nvkr: {len(files) - len(drifted)} generated pipelines were up to date"
        + (f", {len(drifted)} rewritten" if drifted else ""),
        err=True,
    )
