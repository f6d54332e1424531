"""The document ``nvkr diff`` builds (:class:`Report`): changes gathered per section and
variant, equal changes of several variants merged into one (shape in :mod:`nvkr.diff.compare`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, Literal

from nvkr.lock import _differences

DIFF_VERSION: Final = 1
Kind = Literal["recipe", "lockfile", "release-set"]
SECTIONS: Final = ("header", "sources", "tools", "packages", "artifacts", "files", "release")
AXES: Final = ("gpu", "kubernetes", "arch")


def change_key(value: Any) -> str:
    """Equal JSON values give equal keys (whatever their maps' order; floats too)."""
    return json.dumps(value, sort_keys=True, default=str)


def _axes(variant_id: str) -> dict[str, str] | None:
    """``{"gpu": "hopper", ...}`` of a ``gpu=hopper,kubernetes=1.36,arch=amd64`` id, else None."""
    parts = [p.partition("=") for p in variant_id.split(",")]
    if not all(sep and k and v for k, sep, v in parts):
        return None
    return {k: v for k, _, v in parts}


def _id_without(axes: dict[str, str], axis: str) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(axes.items()) if k != axis)


# -- the report ------------------------------------------------------------------------------
class Report:
    """Collects changes; equal records of different variants become one with their variants."""

    def __init__(self, a: dict[str, str], b: dict[str, str]) -> None:
        self.a, self.b = a, b
        self.common: list[str] = []
        self.added: list[str] = []
        self.removed: list[str] = []
        self._records: dict[str, dict[str, tuple[dict[str, Any], list[str]]]] = {
            s: {} for s in SECTIONS
        }

    def variants(self, old: list[str], new: list[str]) -> list[tuple[str, str, str]]:
        """Record the variants of both sides; return the pairs to compare as ``(id in A, id in
        B, label)``, in ``old``'s order.

        Equal ids pair up. When the sides differ on one axis only, each side holding a single
        value of it (two leaves of one GPU generation for Kubernetes 1.35 and 1.36), the
        variants equal on every other axis pair up too, labelled ``kubernetes=1.35->1.36``.
        """
        pairs = [(v, v, v) for v in old if v in new]
        rest_a = [v for v in old if v not in new]
        rest_b = [v for v in new if v not in old]
        pa, pb = [_axes(v) for v in rest_a], [_axes(v) for v in rest_b]
        if rest_a and rest_b and all(pa) and all(pb):
            keys = set(pa[0])  # type: ignore[arg-type]
            if all(set(x) == keys for x in (*pa, *pb)):  # type: ignore[arg-type]
                moved = [
                    k
                    for k in sorted(keys)
                    if len({x[k] for x in pa}) == 1  # type: ignore[index]
                    and len({x[k] for x in pb}) == 1  # type: ignore[index]
                    and pa[0][k] != pb[0][k]  # type: ignore[index]
                ]
                if len(moved) == 1:
                    axis = moved[0]
                    others = {
                        _id_without(x, axis): v  # type: ignore[arg-type]
                        for x, v in zip(pb, rest_b, strict=True)
                    }
                    for x, v in zip(pa, rest_a, strict=True):
                        match = others.get(_id_without(x, axis))  # type: ignore[arg-type]
                        if match is not None:
                            label = v.replace(
                                f"{axis}={x[axis]}",  # type: ignore[index]
                                f"{axis}={x[axis]}->{_axes(match)[axis]}",  # type: ignore[index]
                            )
                            pairs.append((v, match, label))
        paired_a = {a for a, _, _ in pairs}
        paired_b = {b for _, b, _ in pairs}
        self.common = [label for _, _, label in pairs]
        self.removed = [v for v in old if v not in paired_a]
        self.added = [v for v in new if v not in paired_b]
        return pairs

    def record(self, section: str, record: dict[str, Any], variant: str | None) -> None:
        slot = self._records[section].setdefault(change_key(record), (record, []))
        if variant is not None and variant not in slot[1]:
            slot[1].append(variant)

    def change(
        self, section: str, name: str, change: str, lines: list[str], variant: str | None
    ) -> None:
        self.record(section, {"name": name, "change": change, "differences": lines}, variant)

    def compare(
        self,
        section: str,
        old: Mapping[str, Any],
        new: Mapping[str, Any],
        variant: str | None,
        *,
        prefix: bool = True,
    ) -> None:
        """Record the added, removed and changed entries of two maps."""
        for name in sorted({*old, *new}):
            if name not in old:
                self.change(section, name, "added", [], variant)
            elif name not in new:
                self.change(section, name, "removed", [], variant)
            elif change_key(old[name]) != change_key(new[name]):
                lines = _differences(old[name], new[name], name if prefix else "")
                self.change(section, name, "changed", lines, variant)

    def document(self) -> dict[str, Any]:
        order = {v: i for i, v in enumerate(self.common)}
        doc: dict[str, Any] = {
            "diffVersion": DIFF_VERSION,
            "a": self.a,
            "b": self.b,
            "commonVariants": self.common,
            "variants": {"added": self.added, "removed": self.removed},
        }
        for section, records in self._records.items():
            items = []
            for record, variants in records.values():
                ids = sorted(variants, key=lambda v: (order.get(v, len(order)), v))
                items.append({**record, "variants": ids})
            items.sort(
                key=lambda r: (
                    r.get("name", r.get("in", "")),
                    r.get("package", r.get("path", "")),
                    r["change"],
                    r["variants"],
                )
            )
            doc[section] = items
        doc["identical"] = not (self.added or self.removed or any(doc[s] for s in SECTIONS))
        return doc
