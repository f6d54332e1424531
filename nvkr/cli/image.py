"""``nvkr image ls|cat|diff``: the files of a machine image's root file system, read without a
mount (:mod:`nvkr.delivery.machine_image` picks the disk file, :mod:`nvkr.disk.imageread` and
:mod:`nvkr.disk.ext4read` read it, :mod:`nvkr.diff.images` compares two).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click

from nvkr.cli import App
from nvkr.cli.common import RegistryAccess, registry_options
from nvkr.errors import ImagePathError, UsageError

F = TypeVar("F", bound=Callable[..., Any])


def _variant(f: F) -> F:
    return click.option(
        "--variant",
        metavar="AXIS=VALUE,...",
        help="Pick the machine image of this variant (gpu=hopper,arch=amd64) when the release "
        "set holds several of that name.",
    )(f)


@click.group("image")
def command() -> None:
    """Read the files of machine images without mounting them.

    SOURCE is a release set (a dist/<name> directory, or REGISTRY/REPOSITORY:TAG|@sha256:..
    as nvkr release-set show takes it) followed by the machine image's ARTIFACT name (e.g.
    node-image), or a QCOW2 (or raw) disk file, which takes no ARTIFACT."""


def _split(args: tuple[str, ...], what: str) -> tuple[str, str | None, str | None]:
    """``SOURCE [ARTIFACT] [PATH]`` with the ARTIFACT only when SOURCE is no disk file."""
    from pathlib import Path

    from nvkr.errors import UsageError

    source, rest = args[0], list(args[1:])
    disk = Path(source).is_file()
    artifact = None if disk else (rest.pop(0) if rest else None)
    if len(rest) > 1:
        if disk:
            raise UsageError(f"{source} is a disk image file: it takes no ARTIFACT", hint=what)
        raise UsageError(f"too many arguments: {' '.join(args)}", hint=what)
    return source, artifact, (rest[0] if rest else None)


def _artifact_missing(
    source: str, path: str, what: str, verb: str, registry: RegistryAccess
) -> UsageError:
    """The :class:`UsageError` for ``nvkr image VERB SET PATH``: the one argument after a
    release set is its FILE or DIR (``what``), so ARTIFACT is missing; names the machine images
    the set holds (its metadata is read for them)."""
    from nvkr.delivery.machine_image import machine_image_names
    from nvkr.delivery.show import load_release_set

    meta, _ = load_release_set(source, registry=registry)
    names = machine_image_names(meta)
    return UsageError(
        f"{source} is a release set: give ARTIFACT before {what} {path}",
        hint=f"nvkr image {verb} {source} {names[0] if names else 'ARTIFACT'} {path} "
        f"(its machine images: {', '.join(names) or 'none'})",
    )


@contextlib.contextmanager
def _root_fs(
    source: str, artifact: str | None, variant: str | None, registry: RegistryAccess
) -> Iterator[tuple[Any, str]]:
    """``(Ext4Reader, label)`` of the machine image the arguments name."""
    from nvkr.delivery.machine_image import machine_image_file
    from nvkr.disk.imageread import open_root_fs

    with contextlib.ExitStack() as stack:
        disk, label = stack.enter_context(
            machine_image_file(source, artifact, variant, registry=registry)
        )
        yield stack.enter_context(open_root_fs(disk, what=label)), label


def _line(e: Any, long: bool) -> str:
    from nvkr.diff.images import show_path

    path = show_path(e.path)
    if e.target is not None:
        path += " -> " + show_path(e.target)
    if not long:
        return path
    size = "-" if e.size is None else str(e.size)
    return f"{stat.filemode(e.mode)} {e.uid}:{e.gid} {size:>10} {path}"


@command.command("ls")
@click.argument("args", nargs=-1, required=True, metavar="SOURCE [ARTIFACT] [DIR]")
@_variant
@click.option("-l", "--long", "long", is_flag=True, help="Mode, uid:gid and size before each path.")
@click.option("-R", "--recursive", is_flag=True, help="Everything under DIR, not only its entries.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document: the image and entries.")
@registry_options("REF")
@click.pass_obj
def ls(
    app: App,
    args: tuple[str, ...],
    variant: str | None,
    long: bool,
    recursive: bool,
    as_json: bool,
    registry: RegistryAccess,
) -> None:
    """List DIR (default /) of the machine image's root file system: each entry's path (a
    symlink with -> its target), with -l its mode, uid:gid and size in bytes; with -R every path
    under DIR (a file is listed itself, with or without -R). Exit 1 when DIR is not in the image."""
    from nvkr.diff.images import entry_json

    source, artifact, where = _split(args, "nvkr image ls SOURCE [ARTIFACT] [DIR]")
    if where is None and artifact is not None and artifact.startswith("/"):
        raise _artifact_missing(source, artifact, "DIR", "ls", registry)
    where = where or "/"
    with _root_fs(source, artifact, variant, registry) as (fs, label):
        top = fs.lookup(os.fsencode(where), follow=True)
        if top is None:
            raise ImagePathError(f"{where}: no such file or directory in {label}")
        if recursive and stat.S_ISDIR(top.mode):
            entries = [e for e in fs.walk(top) if e.path != top.path]
        elif stat.S_ISDIR(top.mode):
            entries = fs.children(top)
        else:  # a file: itself, a symlink as such
            entries = [fs.lookup(os.fsencode(where)) or top]
    if as_json:
        doc = {
            "image": label,
            "dir": os.fsdecode(top.path),
            "entries": [entry_json(e) for e in entries],
        }
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
        return
    for e in entries:
        click.echo(_line(e, long))


@command.command("cat")
@click.argument("args", nargs=-1, required=True, metavar="SOURCE [ARTIFACT] FILE")
@_variant
@registry_options("REF")
@click.pass_obj
def cat(app: App, args: tuple[str, ...], variant: str | None, registry: RegistryAccess) -> None:
    """Write FILE of the machine image's root file system to standard output, byte for byte
    (symlinks followed inside the image). Exit 1 when FILE is not in the image or is no
    regular file."""
    from nvkr.errors import UsageError

    source, artifact, path = _split(args, "nvkr image cat SOURCE [ARTIFACT] FILE")
    if path is None and artifact is not None:
        raise _artifact_missing(source, artifact, "FILE", "cat", registry)
    if path is None:
        raise UsageError(
            "nvkr image cat needs a FILE", hint="nvkr image cat SOURCE [ARTIFACT] FILE"
        )
    with _root_fs(source, artifact, variant, registry) as (fs, label):
        entry = fs.lookup(os.fsencode(path), follow=True)
        if entry is None:
            raise ImagePathError(f"{path}: no such file in {label}")
        if not stat.S_ISREG(entry.mode):
            raise ImagePathError(
                f"{path}: is a {'directory' if entry.kind == 'dir' else entry.kind} in "
                f"{label}, not a regular file",
                hint=f"nvkr image ls {' '.join(args)}{f' --variant {variant}' if variant else ''}"
                if entry.kind == "dir"
                else None,
            )
        data = fs.read(entry)
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


@command.command("diff")
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@click.option("--artifact", help="The machine image's name in A and B when they are release sets.")
@_variant
@click.option("--variant-a", help="The variant in A only (overrides --variant).")
@click.option("--variant-b", help="The variant in B only (overrides --variant).")
@click.option("--json", "as_json", is_flag=True, help="One JSON document: added, removed, changed.")
@click.option("--exit-code", is_flag=True, help="Exit 1 when the images differ.")
@registry_options("REF")
@click.pass_obj
def diff(
    app: App,
    a: str,
    b: str,
    artifact: str | None,
    variant: str | None,
    variant_a: str | None,
    variant_b: str | None,
    as_json: bool,
    exit_code: bool,
    registry: RegistryAccess,
) -> None:
    """Compare the root file systems of two machine images, A and B (each a release set, with
    --artifact naming the image, or a disk file): the paths added, removed, and changed in type,
    mode, owner, size, content (sha256) or symlink target. The same release set twice with
    --variant-a and --variant-b compares two of its variants."""
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from nvkr.diff.images import diff_trees, entry_json, mode_text, read_tree, show_path

    def side(source: str, own: str | None) -> tuple[str, Any, Any]:
        disk = Path(source).is_file()
        name, v = (None, None) if disk else (artifact, own or variant)
        with _root_fs(source, name, v, registry) as (fs, label):
            return (label, *read_tree(fs))

    # each side from its download or conversion to its last digest in a thread of its own
    with ThreadPoolExecutor(2, thread_name_prefix="nvkr-image-diff") as pool:
        sides = [pool.submit(side, a, variant_a), pool.submit(side, b, variant_b)]
        (la, ea, da), (lb, eb, db) = (f.result() for f in sides)
    labels = [la, lb]
    result = diff_trees(ea, eb, da, db)
    if as_json:
        doc = {
            "a": labels[0],
            "b": labels[1],
            "added": [entry_json(e) for e in result.added],
            "removed": [entry_json(e) for e in result.removed],
            "changed": [
                {"path": os.fsdecode(ea.path), "changes": {k: list(v) for k, v in f.items()}}
                for ea, _, f in result.changed
            ],
        }
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        click.echo(f"A: {labels[0]}")
        click.echo(f"B: {labels[1]}")
        for e in result.added:
            click.echo(f"+ {show_path(e.path)} ({e.kind} {mode_text(e.mode)} {e.uid}:{e.gid})")
        for e in result.removed:
            click.echo(f"- {show_path(e.path)} ({e.kind} {mode_text(e.mode)} {e.uid}:{e.gid})")
        for ea, _, fields in result.changed:
            what = ", ".join(f"{k} {_short(x)} -> {_short(y)}" for k, (x, y) in fields.items())
            click.echo(f"~ {show_path(ea.path)}: {what}")
        n = len(result.added), len(result.removed), len(result.changed)
        click.echo(f"{n[0]} added, {n[1]} removed, {n[2]} changed")
    if exit_code and result:
        sys.exit(1)


def _short(value: Any) -> str:
    """A changed value for the text report: a sha256 as its first 12 hex digits."""
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value[:12]
    return "none" if value is None else str(value)
