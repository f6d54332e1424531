"""Durations and sizes as users write them on the command line (``30d``, ``1w2d``, ``20GiB``),
and sizes and counts as nvkr writes them (``6.0 MiB``, ``4 variants``).

``nvkr store gc --older-than/--max-size`` and ``nvkr cache prune --older-than`` read them here,
so one spelling works everywhere; the human lines of every verb (:mod:`nvkr.monitor.lines`, the
store's cleanup line) write them with :func:`human_size` and :func:`plural`.
"""

from __future__ import annotations

import re

from nvkr.errors import UsageError

_DURATION = re.compile(r"([0-9]+)([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B|B)?", re.IGNORECASE)
_SIZE_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}


def parse_duration(text: str, option: str = "--older-than") -> int:
    """``"30d"``, ``"12h"``, ``"1w2d"``, ``"90m"``, ``"45s"`` -> seconds.

    Raises:
        UsageError: anything else (names ``option``, the value and the form expected).
    """
    parts = _DURATION.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise UsageError(
            f"{option} {text!r} is not a duration",
            hint="write a number and a unit (s, m, h, d, w), or several: 30d, 12h, 90m, 1w2d",
        )
    return sum(int(n) * _UNITS[u] for n, u in parts)


def parse_size(text: str, option: str = "--max-size") -> int:
    """``"10GiB"``, ``"500MB"``, ``"2.5 GiB"``, ``"1024"`` (bytes) -> bytes.

    Raises:
        UsageError: anything else.
    """
    m = _SIZE.fullmatch(text.strip())
    if not m:
        raise UsageError(
            f"{option} {text!r} is not a size",
            hint="e.g. 20GiB, 500MiB, 10GB (or a number of bytes)",
        )
    return int(float(m.group(1)) * _SIZE_UNITS[(m.group(2) or "B").lower()])


def human_size(n: int) -> str:
    """``512 bytes``, ``6.0 MiB``, ``2.5 GiB`` (binary units, one decimal)."""
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def plural(count: int, noun: str) -> str:
    """``1 variant``, ``4 variants``."""
    return f"{count} {noun}" + ("" if count == 1 else "s")
