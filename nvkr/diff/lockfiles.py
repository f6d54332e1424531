"""``nvkr diff`` of two lockfiles: per common variant the source entries (spec and resolved
identity, as each entry's kind names it), every .deb of an apt closure (added, removed, versions
ordered as Debian orders them) and the tools.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvkr.diff.report import Report, change_key
from nvkr.errors import LockError, UsageError
from nvkr.fetch.api import fetcher_for, known_kind
from nvkr.fetch.table import SOURCE_TABLE, read_entry
from nvkr.lock import _differences


# -- lockfiles --------------------------------------------------------------------------------
def _read_lockfile(path: Path) -> dict[str, Any]:
    """The lock document at ``path``, its entries' shapes checked (``nvkr.lock`` docstring).

    Raises:
        LockError: not JSON, not a lockfile, or an entry missing its name, spec, variants or
            resolved identity (naming the entry).
    """
    from nvkr.lock import read_lock

    doc = read_lock(path)
    if doc is None:  # removed between detect_kind and here
        raise UsageError(f"{path}: no such file")
    for i, entry in enumerate(doc["sources"]):
        ok = (
            isinstance(entry, dict)
            and isinstance(entry.get("name"), str)
            and isinstance(entry.get("spec"), dict)
            and isinstance(entry.get("variants"), list)
            and isinstance(entry.get("resolved"), dict)
        )
        packages = entry.get("resolved", {}).get("packages", []) if ok else []
        if not ok or not (
            isinstance(packages, list)
            and all(isinstance(p, dict) and isinstance(p.get("name"), str) for p in packages)
        ):
            raise LockError(
                f"{path}: sources[{i}] is not a lock entry (name, spec, variants, resolved"
                " with a list of packages for apt)",
                hint="regenerate it with `nvkr lock`",
            )
    if not isinstance(doc.get("tools", {}), dict):
        raise LockError(f"{path}: tools is not a map", hint="regenerate it with `nvkr lock`")
    return doc


def _by_variant(doc: Mapping[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{variant id: {source name: entry}}`` of a lock document."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for entry in doc["sources"]:
        for vid in entry["variants"]:
            out.setdefault(str(vid), {})[entry["name"]] = entry
    return dict(sorted(out.items()))


def _identity(resolved: Mapping[str, Any]) -> tuple[str, ...]:
    """The members of ``resolved`` that identify what was fetched: its kind's
    :attr:`~nvkr.fetch.kind.SourceKind.identity` (of a kind this nvkr does not know, every
    member that identifies an entry of any kind it knows)."""
    kind = known_kind(resolved.get("kind"))
    if kind is not None:
        return kind.identity
    every = (fetcher_for(line.kind).identity for line in SOURCE_TABLE)
    return tuple(dict.fromkeys(k for identity in every for k in identity))


def _debs(resolved: Mapping[str, Any], where: str) -> list[dict[str, Any]] | None:
    """The Debian packages ``resolved`` pins (its kind's :meth:`~nvkr.fetch.kind.SourceKind.debs`
    of the entry read as its type; ``where`` names it), None for a kind that pins none or this
    nvkr does not know."""
    kind = known_kind(resolved.get("kind"))
    return kind.debs(read_entry(resolved, where=where)) if kind is not None else None


def _identities(
    old: Mapping[str, Any], new: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The identity keys of two entries' ``resolved`` (their kinds' :func:`_identity`), less
    those that only repeat the spec on both sides (a url's URL, a wheel's version, a commit: the
    spec's lines say it already)."""
    keys = [
        k
        for k in dict.fromkeys(_identity(old["resolved"]) + _identity(new["resolved"]))
        if not all(e["resolved"].get(k) == e["spec"].get(k) for e in (old, new))
    ]
    ra, rb = old["resolved"], new["resolved"]
    return {k: ra[k] for k in keys if k in ra}, {k: rb[k] for k in keys if k in rb}


def diff_lockfiles(report: Report, a: Path, b: Path) -> None:
    da, db = _read_lockfile(a), _read_lockfile(b)
    report.compare("header", {"recipe": da.get("recipe")}, {"recipe": db.get("recipe")}, None)
    ea, eb = _by_variant(da), _by_variant(db)
    for ida, idb, vid in report.variants(list(ea), list(eb)):
        old, new = ea[ida], eb[idb]
        for name in sorted({*old, *new}):
            if name not in old or name not in new:
                report.change("sources", name, "added" if name in new else "removed", [], vid)
                continue
            sa, sb = old[name], new[name]
            if change_key([sa["spec"], sa["resolved"]]) == change_key([sb["spec"], sb["resolved"]]):
                continue
            ra, rb = sa["resolved"], sb["resolved"]
            ia, ib = _identities(sa, sb)
            lines = _differences(sa["spec"], sb["spec"], name)
            lines += _differences(ia, ib, f"{name}.resolved")
            report.change("sources", name, "changed", lines, vid)
            debs_a = _debs(ra, f"{a}: lock entry for source {name!r}")
            debs_b = _debs(rb, f"{b}: lock entry for source {name!r}")
            if debs_a is not None and debs_b is not None:
                package_changes(report, name, _by_name(debs_a), _by_name(debs_b), vid)
    report.compare("tools", da.get("tools") or {}, db.get("tools") or {}, None)


@dataclass(frozen=True)
class Package:
    version: str | None
    sha256: str | None
    debian: bool


def _by_name(packages: Iterable[Mapping[str, Any]]) -> dict[str, Package]:
    """The .debs of an apt lock entry by name (``name:arch`` where a name repeats)."""
    items = list(packages)
    names = Counter(p["name"] for p in items)
    return {
        (p["name"] if names[p["name"]] == 1 else f"{p['name']}:{p.get('arch')}"): Package(
            optional_str(p.get("version")), optional_str(p.get("sha256")), True
        )
        for p in items
    }


def optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def package_changes(
    report: Report,
    where: str,
    old: Mapping[str, Package],
    new: Mapping[str, Package],
    variant: str | None,
) -> None:
    """Record the packages added, removed, up- or downgraded, or rebuilt from ``old`` to ``new``."""
    for name in sorted({*old, *new}):
        pa, pb = old.get(name), new.get(name)
        if pa == pb:
            continue
        if pa is None or pb is None:
            change = "added" if pa is None else "removed"
        elif pa.version != pb.version:
            change = version_change(pa.version, pb.version, debian=pa.debian and pb.debian)
        elif pa.sha256 != pb.sha256:
            change = "rebuilt"
        else:
            continue
        report.record(
            "packages",
            {
                "in": where,
                "package": name,
                "change": change,
                "old": pa.version if pa else None,
                "new": pb.version if pb else None,
            },
            variant,
        )


def version_change(old: str | None, new: str | None, *, debian: bool) -> str:
    """``upgraded``, ``downgraded`` or (not ordered, or not comparable) ``changed``.

    Debian versions are ordered by :func:`debian_order` (Debian Policy 5.6.12); other
    ecosystems' versions are only said to have changed.
    """
    if not debian or old is None or new is None:
        return "changed"
    order = debian_order(old, new)
    if order is None or order == 0:
        return "changed"
    return "upgraded" if order > 0 else "downgraded"


def debian_order(old: str, new: str) -> int | None:
    """Positive when ``new`` is a later Debian version than ``old`` (dpkg's ordering, Debian
    Policy 5.6.12, through :func:`nvkr.catalog.versions.parse_debian`), negative when earlier, 0 when
    they are equal versions written differently; None when either does not parse."""
    from nvkr.catalog.versions import VersionError, parse_debian

    try:
        va, vb = parse_debian(old), parse_debian(new)
    except VersionError:
        return None
    return 1 if vb > va else -1 if vb < va else 0
