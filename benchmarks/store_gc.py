#!/usr/bin/env python3
"""The store after three changed rebuilds, before and after ``nvkr store gc``, in one run.

Copies the project (recipes, lockfiles, agents, charts) into a temp dir, builds the recipe, then
three times changes the node agent's source (a comment line in its main package, so the agent,
its image and chart, and every node image staging it build again) and rebuilds; prints the
store's size after the first build, after the fourth, and after ``nvkr store gc`` (whose
default keeps the newest build), with the ratio to one build (target: within 10 %), and the
time gc took. ``--seed-store DIR`` starts from a copy (hard links) of a store that already holds
the recipe's sources and root filesystems, so only what the agent changes is built.

Usage: .venv/bin/python benchmarks/store_gc.py [--recipe recipes/default.yaml] [--seed-store DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def nvkr(store: Path, cwd: Path, *args: str) -> tuple[float, str]:
    env = {**os.environ, "NVKR_CACHE": str(store)}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "nvkr", *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        sys.exit(f"nvkr {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return time.perf_counter() - t0, proc.stdout


def blob_bytes(store: Path) -> int:
    return sum(p.stat().st_size for p in (store / "blobs" / "sha256").iterdir())


def gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/default.yaml")
    parser.add_argument("--seed-store", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nvkr-gc-bench-") as tmp:
        base = Path(tmp)
        clone = base / "clone"
        for part in ("recipes", "lockfiles", "agents", "charts"):
            shutil.copytree(ROOT / part, clone / part)
        store = base / "store"
        if args.seed_store is not None:
            subprocess.run(["cp", "-al", str(args.seed_store), str(store)], check=True)
            shutil.rmtree(store / "roots", ignore_errors=True)
        main_go = next((clone / "agents").rglob("main.go"))
        original = main_go.read_text()
        sizes = []
        for n in range(4):
            main_go.write_text(original + (f"\n// benchmark generation {n}\n" if n else ""))
            seconds, out = nvkr(store, clone, "build", args.recipe, "--json")
            result = json.loads(out.strip().splitlines()[-1])
            sizes.append(blob_bytes(store))
            print(f"build {n}: {len(result['built'])} actions built in {seconds:.1f} s; "
                  f"store blobs {gib(sizes[-1])}")  # fmt: skip
        one = sizes[0]
        gc_seconds, out = nvkr(store, clone, "store", "gc", "--json")
        after = blob_bytes(store)
        swept = json.loads(out)
        print(f"one build: {gib(one)}; after three changed rebuilds: {gib(sizes[-1])} "
              f"({sizes[-1] / one:.2f}x)")  # fmt: skip
        print(f"after nvkr store gc ({gc_seconds:.2f} s, {swept['blobsRemoved']} blobs, "
              f"{gib(swept['bytesRemoved'])} removed): {gib(after)} ({after / one:.2f}x one "
              f"build; target <= 1.10x)")  # fmt: skip
        seconds, out = nvkr(store, clone, "build", args.recipe, "--json")
        assert json.loads(out.strip().splitlines()[-1])["upToDate"], "gc broke the no-op"
        print(f"no-op rebuild after gc: {seconds:.2f} s")


if __name__ == "__main__":
    main()
