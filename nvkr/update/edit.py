"""Precise scalar edits of recipe files: one value replaced, every other byte kept.

``nvkr lock --update`` rewrites pins where they are written: the recipe loader's location map
(:mod:`nvkr.recipe.yamlsource`) gives the file, line and column of each scalar and its text, and
an :class:`Edit` replaces exactly that scalar, in the style it was written (plain, ``"double"``
or ``'single'`` quoted) unless the new value needs quotes to read back as itself in YAML 1.1 and
1.2 (:func:`nvkr.yamlemit.scalar`: ``1e3`` or ``yes`` get them). Comments, key order,
indentation and flow mappings stay as they are, which a YAML round-trip cannot promise. Block
scalars (``|``, ``>``), multi-line and escaped scalars are refused: a pin is never written that
way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from nvkr.errors import RecipeError
from nvkr.recipe.yamlsource import Location
from nvkr.yamlemit import scalar


@dataclass(frozen=True)
class Edit:
    """Replace the scalar at ``location`` (whose value is ``old``) with ``new``.

    Attributes:
        location: file, 1-based line and column of the scalar as the loader recorded it.
        field: the value's path in the merged recipe (``vars.kubeletVersion``), for messages.
        old: the value now written there.
        new: the value to write.
    """

    location: Location
    field: str
    old: str
    new: str

    @property
    def key(self) -> tuple[Path, int, int]:
        """Where it applies: (resolved file, line, column)."""
        return (self.location.file.resolve(), self.location.line, self.location.column)

    def __str__(self) -> str:
        return f"{self.location.file}:{self.location.line}: {self.field}"


def _replace_one(line: str, edit: Edit) -> str:
    """``line`` with ``edit``'s scalar replaced (its column is 1-based, in characters)."""
    col = edit.location.column - 1
    rest = line[col:]
    old, new = edit.old, edit.new
    style = rest[:1] if rest[:1] in ('"', "'") else ""
    written = f"{style}{old}{style}"
    # flow=True: the scalar may sit in a flow mapping; quoting a ':' costs nothing in a block one
    replacement = scalar(new, flow=True, style=style)
    if not rest.startswith(written) or "\\" in old or "'" in old or '"' in old:
        raise RecipeError(
            f"{edit}: cannot rewrite {old!r} in place (written as {rest.strip()[:60]!r})",
            hint='write the pin as a one-line string, e.g. kubeletVersion: "1.36.3"; or edit it '
            "by hand and run `nvkr lock`",
        )
    return line[:col] + replacement + rest[len(written) :]


def apply_edits(data: bytes, edits: Iterable[Edit], file: Path) -> bytes:
    """``data`` (the bytes of ``file``) with every edit applied; edits of one line are applied
    right to left so their columns stay valid.

    Raises:
        RecipeError: the file is not UTF-8, a location is past its end, or a scalar is not
            written as its edit expects (see :func:`_replace_one`); two edits of one scalar
            that disagree.
    """
    bom = data.startswith(b"\xef\xbb\xbf")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise RecipeError(f"{file}: not UTF-8 (byte {e.start})") from None
    lines = text.splitlines(keepends=True)
    by_line: dict[int, dict[int, Edit]] = {}
    for edit in edits:
        at = by_line.setdefault(edit.location.line, {})
        prior = at.get(edit.location.column)
        if prior is not None and prior.new != edit.new:
            raise RecipeError(
                f"{edit}: two updates disagree on this value ({prior.new!r} and {edit.new!r})",
                hint="the value is shared by variants whose upstreams differ; give each its own "
                "value in an overlay",
            )
        at[edit.location.column] = edit
    for number, at in by_line.items():
        if not 1 <= number <= len(lines):
            raise RecipeError(f"{file}:{number}: no such line (the file changed while updating?)")
        line = lines[number - 1]
        body = line.rstrip("\r\n")
        ending = line[len(body) :]
        for column in sorted(at, reverse=True):
            body = _replace_one(body, at[column])
        lines[number - 1] = body + ending
    out = "".join(lines).encode()
    return b"\xef\xbb\xbf" + out if bom else out
