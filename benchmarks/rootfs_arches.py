#!/usr/bin/env python3
"""The default recipe's arm64 and amd64 root filesystems on this host, and its cold build, in one
run: for this checkout and, with ``--baseline REF``, for that commit too (a git worktree).

Each rootfs action is built alone (``nvkr build --action rootfs/rootfs@...``, one at a time, so
neither shares the cores) in a fresh store holding only the recipe's locked sources (fetched
first into a seed store, not timed); the time is the action's own (``action-done``). The ratio
is arm64 over amd64: the emulation tax of a foreign tree (qemu-user for the arm64 tree's
maintainer scripts and mkinitramfs on an amd64 host). The cold build is ``nvkr build`` of the
whole recipe (both arches, every variant) into another fresh store with the sources.

Usage: .venv/bin/python benchmarks/rootfs_arches.py [--baseline REF] [--no-cold]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from node_image import link_blobs  # benchmarks/ is the script's sys.path[0]

ROOT = Path(__file__).resolve().parent.parent
RECIPE = "recipes/default.yaml"


def fill_sources(store: Path, root: Path = ROOT) -> None:
    """Every locked source of ``root``'s default recipe, all variants, into ``store`` (not
    timed), with the nvkr modules first on ``sys.path`` (``root``'s when run in a process of
    its own with ``PYTHONPATH=root``)."""
    sys.path.insert(0, str(root))
    from nvkr.fetch.api import ensure
    from nvkr.fetch.context import FetchContext
    from nvkr.lock import Resolver, read_lock
    from nvkr.recipe.loader import load_recipe
    from nvkr.recipe.matrix import expand
    from nvkr.store import Store

    loaded = load_recipe(root / RECIPE)
    lock_path = root / "lockfiles" / "default.lock.json"
    ctx = FetchContext(store=Store(store))
    resolver = Resolver(
        loaded=loaded, lock_path=lock_path, lock=read_lock(lock_path), ctx=ctx, locked=True
    )
    for variant in expand(loaded, None):
        for name, source in variant.recipe.sources.items():
            src = resolver.source_for(variant, name)
            ensure(name, source, src.entry, ctx, base_dir=src.base_dir)


@contextlib.contextmanager
def worktree(ref: str, dest: Path) -> Iterator[Path]:
    """This repository's commit ``ref`` checked out at ``dest`` (a git worktree) while the block
    runs; removed after."""
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(dest), ref],
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        yield dest
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(dest)])


def fresh_store(seed: Path, store: Path) -> Path:
    link_blobs(seed, store)  # node_image.py's: hard links of the seed's blobs
    return store


def nvkr(checkout: Path, store: Path, *args: str) -> tuple[float, list[dict[str, object]]]:
    """``nvkr build RECIPE ARGS --json`` from ``checkout``'s own modules; (seconds, events)."""
    env = {**os.environ, "NVKR_CACHE": str(store), "PYTHONPATH": str(checkout)}
    argv = [sys.executable, "-m", "nvkr", "build", RECIPE, "--locked", *args, "--json"]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"nvkr build {' '.join(args)} in {checkout} failed:\n{proc.stderr}")
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return elapsed, events


def measure(checkout: Path, seed: Path, base: Path, cold: bool) -> dict[str, float]:
    out: dict[str, float] = {}
    for arch in ("amd64", "arm64"):
        store = fresh_store(seed, base / f"store-{arch}")
        _, events = nvkr(
            checkout, store, "--action", f"rootfs/rootfs@gpu=hopper,arch={arch}",
            "--out", str(base / f"out-{arch}"),
        )  # fmt: skip
        (done,) = [e for e in events if e["event"] == "action-done" and e["builder"] == "rootfs"]
        out[arch] = int(str(done["milliseconds"])) / 1000
    if cold:
        store = fresh_store(seed, base / "store-cold")
        out["cold"], _ = nvkr(checkout, store, "--out", str(base / "out-cold"))
    return out


def qemu_version() -> str:
    try:
        proc = subprocess.run(["qemu-aarch64-static", "--version"], capture_output=True, text=True)
    except OSError:
        return "not installed"
    return proc.stdout.splitlines()[0] if proc.stdout else "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", metavar="REF", help="also measure this commit")
    parser.add_argument("--no-cold", action="store_true", help="the root filesystems only")
    args = parser.parse_args()
    rows: list[tuple[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(
        prefix="nvkr-bench-rootfs-", dir=os.environ.get("TMPDIR")
    ) as t:
        base = Path(t)
        seed = base / "seed"
        fill_sources(seed)
        if args.baseline:
            with worktree(args.baseline, base / "baseline") as tree:
                rows.append((args.baseline, measure(tree, seed, base / "b", not args.no_cold)))
        rows.append(("this checkout", measure(ROOT, seed, base / "a", not args.no_cold)))
    print(f"host                  {platform.machine()}, {os.cpu_count()} cores")
    print(f"qemu-user             {qemu_version()}")
    for name, r in rows:
        print(f"{name}")
        print(f"  rootfs amd64        {r['amd64']:8.1f} s   (native)")
        print(f"  rootfs arm64        {r['arm64']:8.1f} s   (foreign: qemu-user)")
        print(f"  ratio arm64/amd64   {r['arm64'] / r['amd64']:8.2f}")
        if "cold" in r:
            print(f"  cold build          {r['cold']:8.1f} s   (whole recipe, sources in store)")
    if len(rows) == 2 and "cold" in rows[0][1]:
        print(f"cold build after/before {rows[1][1]['cold'] / rows[0][1]['cold']:8.2f}")


if __name__ == "__main__":
    main()
