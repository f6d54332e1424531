#!/usr/bin/env python3
"""The fan-out's wall time with N runners against one machine, simulated from measured times.

A store that holds a build of RECIPE has each action's run time in its action record
(``run.startedOn``..``finishedOn``); ``nvkr plan --fan-out`` sums them per unit (``estimate``).
This prints, in seconds, per way of cutting (``--by action`` and ``--by variant``):

- one machine, one action at a time: the sum of every action's time;
- one machine with ``--cores`` parallel actions: a list schedule of the plan's DAG (what
  ``nvkr build --jobs CORES`` does, less the contention of the cores it shares);
- N runners: the critical path through the units' ``needs``, each unit costing its estimate plus
  ``--job-overhead`` (a runner's container start, checkout and cache downloads, which this
  machine cannot measure: give your CI's), with as many runners as units can run at once; and
  the most units running at one time on that path, the runners it takes.

By variant, a unit's estimate counts the actions its variant shares with others again (each
variant's runner builds them): the total work grows, the critical path may not.

Usage: .venv/bin/python benchmarks/fanout.py [RECIPE] --store DIR [--cores 2] [--job-overhead 0]
(the store must hold a build of RECIPE; run from the checkout's root)
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import subprocess
import sys
from pathlib import Path


def nvkr_json(*args: str, store: Path) -> dict:
    env = {**os.environ, "NVKR_CACHE": str(store)}
    proc = subprocess.run(
        [sys.executable, "-m", "nvkr", *args], env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        sys.exit(f"nvkr {' '.join(args)} failed:\n{proc.stderr}")
    doc: dict = json.loads(proc.stdout)
    return doc


def action_seconds(plan: dict, store: Path) -> dict[str, float]:
    """Run time of every action of the plan, from the store's records (missing: not built)."""
    from datetime import datetime

    out: dict[str, float] = {}
    for action in plan["actions"]:
        path = store / "actions" / f"{action['key'].split(':', 1)[1]}.json"
        try:
            run = json.loads(path.read_bytes())["run"]
        except (OSError, KeyError, ValueError):
            continue
        start, end = (datetime.fromisoformat(run[k]) for k in ("startedOn", "finishedOn"))
        out[action["key"]] = (end - start).total_seconds()
    return out


def list_schedule(plan: dict, seconds: dict[str, float], cores: int) -> float:
    """Makespan of the plan's DAG on ``cores`` workers, ready actions in plan order."""
    deps = {a["key"]: set(a["deps"]) for a in plan["actions"]}
    order = [a["key"] for a in plan["actions"]]
    done: set[str] = set()
    running: list[tuple[float, str]] = []
    now = 0.0
    pending = list(order)
    while pending or running:
        for key in list(pending):
            if len(running) >= cores:
                break
            if deps[key] <= done:
                pending.remove(key)
                heapq.heappush(running, (now + seconds.get(key, 0.0), key))
        now, key = heapq.heappop(running)
        done.add(key)
    return now


def critical_path(units: list[dict], overhead: float) -> tuple[float, int]:
    """Finish time of the last unit with unlimited runners, and the most units at work at once."""
    finish: dict[str, float] = {}
    spans = []
    for unit in units:  # dependencies first
        start = max((finish[n] for n in unit["needs"]), default=0.0)
        cost = (unit["estimate"] or {}).get("seconds", 0.0) + overhead
        finish[unit["id"]] = start + cost
        spans.append((start, start + cost))
    peak = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans) if spans else 0
    return max(finish.values(), default=0.0), peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe", nargs="?", default="recipes/default.yaml")
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--job-overhead", type=float, default=0.0)
    args = parser.parse_args()
    plan = nvkr_json("plan", args.recipe, "--offline", "--json", store=args.store)
    seconds = action_seconds(plan, args.store)
    timed = sum(1 for a in plan["actions"] if a["key"] in seconds)
    print(f"{args.recipe}: {len(plan['actions'])} actions, {timed} with run times in the store")
    total = sum(seconds.values())
    print(f"  one machine, one action at a time: {total:8.1f} s")
    print(
        f"  one machine, {args.cores} cores:               {list_schedule(plan, seconds, args.cores):8.1f} s"
    )
    for by in ("action", "variant"):
        fan = nvkr_json(
            "plan", args.recipe, "--offline", "--fan-out", "--by", by, "--json", store=args.store
        )
        units = fan["units"]
        path, peak = critical_path(units, args.job_overhead)
        work = sum((u["estimate"] or {}).get("seconds", 0.0) for u in units)
        print(
            f"  by {by:<7} {len(units):3d} units, work {work:8.1f} s, critical path "
            f"{path:8.1f} s with {peak} runners at once (+{args.job_overhead:.0f} s per job)"
        )


if __name__ == "__main__":
    main()
