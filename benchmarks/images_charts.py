#!/usr/bin/env python3
"""Container image and Helm chart build times for recipes/default.yaml, cold and cached.

One run measures, in the same fresh store:
1. a cold build (everything runs): each container-image, image-index and helm-chart action's own
   time, from `nvkr build --json` events;
2. an image and chart rebuild: the action-cache entries of those actions (and the release set)
   are removed, so they run again on top of cached agent binaries;
3. a fully cached rebuild: no builder runs.

Usage: .venv/bin/python benchmarks/images_charts.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WATCHED = ("container-image", "image-index", "helm-chart")


def build(store: Path, out: Path) -> tuple[float, list[dict[str, object]]]:
    env = {**os.environ, "NVKR_CACHE": str(store)}
    argv = [sys.executable, "-m", "nvkr", "build", "--out", str(out), "--json"]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"nvkr build failed ({proc.returncode}):\n{proc.stderr}")
    return elapsed, [json.loads(line) for line in proc.stdout.splitlines()]


def action_ms(events: list[dict[str, object]]) -> dict[str, int]:
    """Milliseconds per watched action name (builder: name)."""
    return {
        f"{e['builder']}: {e['name']}": int(e["milliseconds"])  # type: ignore[call-overload]
        for e in events
        if e["event"] == "action-done" and e["builder"] in WATCHED
    }


def forget(store: Path, events: list[dict[str, object]]) -> None:
    """Drop the action-cache entries of the watched actions and of the release set."""
    for e in events:
        if e["event"] in ("action-done", "action-cached") and e["builder"] in (
            *WATCHED,
            "release-set",
        ):
            (store / "actions" / f"{str(e['key'])[7:]}.json").unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nvkr-bench-") as tmp:
        store, out = Path(tmp) / "store", Path(tmp) / "out"
        cold_wall, cold_events = build(store, out)
        cold = action_ms(cold_events)
        warm_runs: list[dict[str, int]] = []
        warm_walls: list[float] = []
        for _ in range(args.runs):
            forget(store, cold_events)
            wall, events = build(store, out)
            warm_runs.append(action_ms(events))
            warm_walls.append(wall)
        cached_walls = []
        for _ in range(args.runs):
            wall, events = build(store, out)
            assert not [e for e in events if e["event"] == "action-start"], (
                "a cached build ran a builder"
            )
            cached_walls.append(wall)
    print(f"{'action':<44} {'cold ms':>8} {'rebuild ms (median)':>20}")
    for name in sorted(cold):
        warm = statistics.median(r.get(name, 0) for r in warm_runs)
        print(f"{name:<44} {cold[name]:>8} {warm:>20.0f}")
    print(f"cold full build (wall)                      {cold_wall:8.2f} s")
    print(f"image + chart rebuild, agent cached (wall)  {statistics.median(warm_walls):8.2f} s")
    print(f"fully cached rebuild (wall)                 {statistics.median(cached_walls):8.2f} s")


if __name__ == "__main__":
    main()
