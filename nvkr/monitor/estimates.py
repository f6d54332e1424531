"""How long actions took, so the live display can say how long a running one will take.

``<store>/logs/durations/<key hex>.json`` holds ``{"seconds": [...]}``: the wall-clock seconds
of the last :data:`KEEP` runs of that action key in this store, newest last, each file written
atomically (:func:`nvkr.atomic.write_atomic`). An action key reruns when its result left the
store (``nvkr store gc``, ``store verify --repair``) or a build failed before recording it; the
estimate is the median of those runs. Nothing here is ever needed: an unreadable file is no
estimate, and a failure to write one never fails a build.
"""

from __future__ import annotations

import contextlib
import json
import statistics
from pathlib import Path
from typing import Final

#: runs of one action key kept
KEEP: Final = 5


def _path(store_root: Path, key: str) -> Path:
    return store_root / "logs" / "durations" / f"{key.split(':', 1)[-1]}.json"


def estimate(store_root: Path, key: str) -> float | None:
    """The median seconds of the recorded runs of action ``key``, or None."""
    try:
        runs = json.loads(_path(store_root, key).read_text())["seconds"]
        return float(statistics.median(float(s) for s in runs)) if runs else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def record(store_root: Path, key: str, seconds: float) -> None:
    """Add a run of ``seconds`` to action ``key``'s durations (the last :data:`KEEP` kept)."""
    from nvkr.atomic import write_atomic

    path = _path(store_root, key)
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        runs: list[float] = []
        if path.is_file():
            runs = [float(s) for s in json.loads(path.read_text())["seconds"]]
        path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps({"seconds": [*runs, round(seconds, 3)][-KEEP:]}).encode()
        write_atomic(path, data)
