"""``nvkr diff A B``: what changed between two recipes, lockfiles or release sets.

:func:`nvkr.diff.compare.diff` computes the difference; this module prints it: a text report grouped by
section (or ``identical``), or with ``--json`` the document itself (shape in :mod:`nvkr.diff.compare`).
The exit status is 0 whether or not anything differs, as for a report; ``--exit-code`` makes it
1 when something differs (as ``git diff --exit-code``). Bad arguments exit 2 (missing file, a
recipe that does not load, not a lockfile, two kinds that do not compare, a layout without a
release set), a damaged release set 3.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from nvkr.cli import App

#: Files listed per artifact and variant group in the text report (``--json`` lists all).
MAX_FILES = 50

_SIGN = {"added": "+", "removed": "-"}
_TITLES = (
    ("sources", "sources"),
    ("packages", "packages"),
    ("tools", "tools"),
    ("artifacts", "artifacts"),
    ("files", "files"),
    ("release", "release"),
)


@click.command("diff")
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the difference as one JSON object.")
@click.option(
    "--exit-code", "exit_code", is_flag=True, help="Exit 1 when A and B differ (else 0 always)."
)
@click.pass_obj
def command(app: App, a: Path, b: Path, as_json: bool, exit_code: bool) -> None:
    """Show what changed from A to B: two recipes (.yaml), two lockfiles (.lock.json) or two
    release sets (dist/<name>, or its index.json)."""
    from nvkr.diff.compare import diff

    doc = diff(a, b)
    if as_json:
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        click.echo("\n".join(render_text(doc)))
    if exit_code and not doc["identical"]:
        sys.exit(1)


def describe_variants(ids: Sequence[str], universe: Sequence[str]) -> str:
    """A short name for the variant ids ``ids`` among ``universe``: ``all variants``, one
    ``axis=value`` when it selects exactly them, else the ids joined by ``; ``."""
    if not ids:
        return ""
    chosen = set(ids)
    if len(universe) > 1 and chosen == set(universe):
        return "all variants"
    cells = {u: dict(part.split("=", 1) for part in u.split(",") if "=" in part) for u in universe}
    if len(ids) > 1:
        for axis in ("gpu", "kubernetes", "arch"):
            values = {cells[i].get(axis) for i in ids if i in cells}
            if len(values) == 1 and None not in values:
                value = values.pop()
                if chosen == {u for u, c in cells.items() if c.get(axis) == value}:
                    return f"{axis}={value}"
    return "; ".join(ids)


def _suffix(record: Mapping[str, Any], universe: Sequence[str]) -> str:
    text = describe_variants(record["variants"], universe)
    return f" ({text})" if text else ""


def _version(record: Mapping[str, Any]) -> str:
    if record["change"] == "added":
        return f"+ {record['package']} {record['new']}"
    if record["change"] == "removed":
        return f"- {record['package']} {record['old']}"
    note = {
        "upgraded": " (upgrade)",
        "downgraded": " (downgrade)",
        "rebuilt": " (same version, other sha256)",
    }.get(record["change"], "")
    return f"~ {record['package']} {record['old']} -> {record['new']}{note}"


def _grouped(records: list[dict[str, Any]]) -> dict[tuple[str, tuple[str, ...]], list[Any]]:
    groups: dict[tuple[str, tuple[str, ...]], list[Any]] = {}
    for r in records:
        groups.setdefault((r["in"], tuple(r["variants"])), []).append(r)
    return groups


def render_text(doc: Mapping[str, Any]) -> list[str]:
    """The report's lines: ``identical``, or a ``--- A``/``+++ B`` heading and one block per
    section that has changes (``+`` added, ``-`` removed, ``~`` changed)."""
    if doc["identical"]:
        return ["identical"]
    universe = doc["commonVariants"]
    lines = [f"--- {doc['a']['path']} ({doc['a']['kind']})"]
    lines.append(f"+++ {doc['b']['path']} ({doc['b']['kind']})")
    for record in doc["header"]:
        lines.append(f"{record['name']}:")
        lines += [f"  {d}" for d in record["differences"]] or [f"  {record['change']}"]
    variants = doc["variants"]
    if variants["added"] or variants["removed"]:
        lines.append("variants:")
        lines += [f"  - {v}" for v in variants["removed"]]
        lines += [f"  + {v}" for v in variants["added"]]
    for section, title in _TITLES:
        records = doc[section]
        if not records:
            continue
        lines.append(f"{title}:")
        if section in ("packages", "files"):
            for (where, ids), items in _grouped(records).items():
                lines.append(f"  {where}{_suffix({'variants': list(ids)}, universe)}:")
                if section == "packages":
                    lines += [f"    {_version(r)}" for r in items]
                    continue
                lines += [
                    f"    {_SIGN.get(r['change'], '~')} {r['path']}" for r in items[:MAX_FILES]
                ]
                if len(items) > MAX_FILES:
                    lines.append(f"    ... {len(items) - MAX_FILES} more (--json lists all)")
            continue
        for r in records:
            sign = _SIGN.get(r["change"], "~")
            colon = ":" if r["differences"] else ""
            lines.append(f"  {sign} {r['name']}{_suffix(r, universe)}{colon}")
            lines += [f"      {d}" for d in r["differences"]]
    return lines
