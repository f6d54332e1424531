#!/usr/bin/env python3
"""The remote action cache, measured in one run against a CNCF distribution registry on loopback.

Prints, for one recipe (default recipes/default.yaml):

- a cold build: a fresh store holding only the recipe's locked sources (fetched once beforehand,
  not timed: the comparison is of building, not of the network to Debian's mirror and PyPI);
- the same cold build with ``--cache-to`` (min mode, signed): its overhead over the cold build
  (target <= 10 %). Two cold builds minutes long differ by more than that on a shared machine,
  so the push's own cost is measured too: a no-op build of the cold store with ``--cache-to``
  into an empty repository, less the same no-op build without it;
- a fresh runner with a warm cache: another checkout, an empty store (no sources either) and only
  ``--cache-from``: its time against the cold build's (target <= 10 %), and the bytes it
  downloaded against the release sets' own size (target <= 1.1x).

Each build is the CLI a user runs (``python -m nvkr build --json``), start-up included, one after
the other on this machine; the registry runs on the same machine (loopback: no network latency
or bandwidth limit, so a CI network adds its transfer time to the warm figure).

Usage: .venv/bin/python benchmarks/cache.py [--recipe PATH] [--project DIR]
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
sys.path.insert(0, str(ROOT))

PARTS = ("recipes", "lockfiles", "agents", "charts")


def fill_sources(project: Path, recipe: str, store: Path) -> None:
    """Fetch every locked source of every variant of ``recipe`` into ``store`` (not timed)."""
    from nvkr.fetch.api import ensure
    from nvkr.fetch.context import FetchContext
    from nvkr.lock import Resolver, default_lock_path, read_lock
    from nvkr.recipe.loader import load_recipe
    from nvkr.recipe.matrix import expand
    from nvkr.store import Store

    loaded = load_recipe(project / recipe)
    lock_path = default_lock_path(project / recipe)
    ctx = FetchContext(store=Store(store))
    resolver = Resolver(
        loaded=loaded, lock_path=lock_path, lock=read_lock(lock_path), ctx=ctx, locked=True
    )
    for variant in expand(loaded, None):
        for name, source in variant.recipe.sources.items():
            src = resolver.source_for(variant, name)
            ensure(name, source, src.entry, ctx, base_dir=src.base_dir)


def checkout(project: Path, dest: Path) -> Path:
    """A copy of what a clone of ``project`` holds (its recipes, lockfiles and sources)."""
    for part in PARTS:
        if (project / part).is_dir():
            shutil.copytree(
                project / part, dest / part, ignore=shutil.ignore_patterns("__pycache__")
            )
    return dest


def seeded(seed: Path, store: Path) -> Path:
    (store / "blobs" / "sha256").mkdir(parents=True)
    for blob in (seed / "blobs" / "sha256").iterdir():
        os.link(blob, store / "blobs" / "sha256" / blob.name)
    return store


def nvkr_build(cwd: Path, store: Path, recipe: str, *args: str) -> tuple[float, list[dict]]:
    env = {**os.environ, "NVKR_CACHE": str(store), "NVKR_CONFIG": str(cwd / "no-config.yaml")}
    argv = [sys.executable, "-m", "nvkr", "build", recipe, "--json", "--locked", *args]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"nvkr build {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    events = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    return elapsed, events


def layout_bytes(cwd: Path, result: dict) -> int:
    """Bytes of the release sets' layouts (each blob once)."""
    seen: dict[str, int] = {}
    for item in result["releaseSets"]:
        for blob in (cwd / item["path"] / "blobs" / "sha256").iterdir():
            seen[blob.name] = blob.stat().st_size
    return sum(seen.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/default.yaml")
    parser.add_argument("--project", type=Path, default=ROOT, help="the checkout to build")
    args = parser.parse_args()
    from nvkr.sign import generate_key
    from tests.helpers.registry import run_registry

    project = args.project.resolve()
    with tempfile.TemporaryDirectory(prefix="nvkr-bench-cache-", dir=os.environ.get("TMPDIR")) as t:
        base = Path(t)
        seed = base / "seed"
        fill_sources(project, args.recipe, seed)
        key = generate_key("ed25519", base / "cache")
        with run_registry(base / "registry") as reg:
            cache = f"{reg.host}/bench/cache"
            a = checkout(project, base / "cold")
            cold, ev = nvkr_build(a, seeded(seed, base / "store-cold"), args.recipe)
            built = len(ev[-1]["built"])
            b = checkout(project, base / "push")
            cold_push, ev = nvkr_build(
                b, seeded(seed, base / "store-push"), args.recipe,
                "--cache-to", cache, "--cache-sign-key", str(key.private_path),
            )  # fmt: skip
            pushes = [e for e in ev if e["event"] == "cache-push"]
            uploaded = sum(int(e["bytes"]) for e in pushes)
            c = checkout(project, base / "fresh")
            warm, ev = nvkr_build(
                c, base / "store-fresh", args.recipe,
                "--cache-from", cache, "--cache-trust", str(key.public_path),
            )  # fmt: skip
            result = ev[-1]
            if result["built"]:
                sys.exit(f"the fresh runner built {len(result['built'])} actions")
            hits = [e for e in ev if e["event"] == "cache-hit"]
            downloaded = sum(int(e["bytes"]) + int(e["entryBytes"]) for e in hits)
            set_size = layout_bytes(c, result)
            noop, ev = nvkr_build(a, base / "store-cold", args.recipe)
            same = [r["digest"] for r in result["releaseSets"]] == [
                r["digest"] for r in ev[-1]["releaseSets"]
            ]
            push_only, ev = nvkr_build(
                a, base / "store-cold", args.recipe,
                "--cache-to", f"{reg.host}/bench/push-only", "--cache-sign-key",
                str(key.private_path),
            )  # fmt: skip
            if ev[-1]["built"]:
                sys.exit("the no-op build ran a builder")
    mib = 1 << 20
    print(f"recipe                                   {args.recipe} ({built} actions built cold)")
    print(f"cold build (sources in store, no cache)  {cold:8.2f} s")
    print(
        f"cold build with --cache-to (min)         {cold_push:8.2f} s   overhead "
        f"{(cold_push - cold) / cold * 100:+.1f} % (target <= 10 %); {len(pushes)} entries, "
        f"{uploaded / mib:.1f} MiB uploaded"
    )
    print(
        f"push alone (no-op build + --cache-to)    {push_only - noop:8.2f} s   "
        f"{(push_only - noop) / cold * 100:.1f} % of cold (no-op build alone {noop:.2f} s)"
    )
    print(
        f"fresh runner, warm cache (--cache-from)  {warm:8.2f} s   {warm / cold * 100:.1f} % of "
        f"cold (target <= 10 %)"
    )
    print(
        f"bytes downloaded / release set size      {downloaded / mib:8.1f} / {set_size / mib:.1f} "
        f"MiB = {downloaded / set_size:.3f}x (target <= 1.1x)"
    )
    print(f"same release set digests                 {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
