#!/usr/bin/env python3
"""The default node image (gpu=hopper, arch=amd64): cold build by phase, size, no-op rebuild,
and disk assembly throughput against ``qemu-img convert`` of the same raw image, in one run.

"Warm package store": the store already holds the recipe's locked sources (every .deb, the Go
toolchain wheel, kubectl) — fetched first into a seed store (not timed), then hard-linked into
the fresh store each cold build starts from, so the cold build runs every builder but
downloads nothing.

Phases: ``rootfs`` is the rootfs action (mmdebstrap from the locked .debs); the node-image
action reports its own: ``unpack`` (rootfs tar into the tree), ``staging``, ``filesystem``
(mkfs.ext4 -d), ``times`` (debugfs pass), ``bootloader``, ``disk`` (GPT + placing the file
systems), ``convert`` (qemu-img convert to QCOW2).

Disk assembly throughput: nvkr's disk + convert phases against ``qemu-img convert -f raw -O
qcow2`` of the same raw disk (extracted from the QCOW2 first), both over the raw size.

Usage: .venv/bin/python benchmarks/node_image.py [--runs N]
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
VARIANT = "gpu=hopper,arch=amd64"
RECIPE = "recipes/default.yaml"


def nvkr_build(store: Path, out: Path) -> tuple[float, list[dict[str, object]]]:
    env = {**os.environ, "NVKR_CACHE": str(store)}
    argv = [sys.executable, "-m", "nvkr", "build", RECIPE, "--locked", "--variant", VARIANT]
    argv += ["--out", str(out), "--json"]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"nvkr build failed ({proc.returncode}):\n{proc.stderr}")
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return elapsed, events


def fill_sources(store: Path) -> None:
    """Fetch every locked source of the default recipe into ``store`` (not timed)."""
    sys.path.insert(0, str(ROOT))
    from nvkr.fetch.api import ensure
    from nvkr.fetch.context import FetchContext
    from nvkr.lock import Resolver, read_lock
    from nvkr.recipe.loader import load_recipe
    from nvkr.recipe.matrix import expand
    from nvkr.store import Store

    loaded = load_recipe(ROOT / RECIPE)
    lock_path = ROOT / "lockfiles" / "default.lock.json"
    ctx = FetchContext(store=Store(store))
    resolver = Resolver(
        loaded=loaded, lock_path=lock_path, lock=read_lock(lock_path), ctx=ctx, locked=True
    )
    for variant in expand(loaded, None):
        if f"gpu={variant.gpu},arch={variant.arch}" != VARIANT:
            continue
        for name, source in variant.recipe.sources.items():
            src = resolver.source_for(variant, name)
            ensure(name, source, src.entry, ctx, base_dir=src.base_dir)


def link_blobs(seed: Path, store: Path) -> None:
    (store / "blobs" / "sha256").mkdir(parents=True)
    for blob in (seed / "blobs" / "sha256").iterdir():
        os.link(blob, store / "blobs" / "sha256" / blob.name)


def node_image_result(store: Path, events: list[dict[str, object]]) -> dict[str, object]:
    keys = [e["key"] for e in events if e.get("builder") == "node-image"]
    if not keys:
        sys.exit("the build ran no node-image action")
    path = store / "actions" / f"{str(keys[0]).split(':', 1)[1]}.json"
    result: dict[str, object] = json.loads(path.read_text())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="no-op rebuilds to take the median of")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nvkr-bench-node-", dir=os.environ.get("TMPDIR")) as t:
        base = Path(t)
        seed = base / "seed"
        fill_sources(seed)
        store = base / "store"
        link_blobs(seed, store)
        cold, events = nvkr_build(store, base / "out")
        ms = {
            e.get("builder"): int(e.get("milliseconds", 0))
            for e in events
            if e["event"] == "action-done"
        }  # type: ignore[call-overload]
        result = node_image_result(store, events)
        run = result["run"]  # phase times live with the run, not the image's metadata
        assert isinstance(run, dict)
        timings: dict[str, int] = dict(run["timings"])
        (qcow2,) = [o for o in result["outputs"] if o["role"] == "primary"]  # type: ignore[union-attr,index]
        blob = store / "blobs" / "sha256" / qcow2["digest"].split(":", 1)[1]
        noops = []
        for _ in range(args.runs):
            t_noop, ev = nvkr_build(store, base / "out")
            assert not [e for e in ev if e["event"] == "action-start"], "a no-op ran a builder"
            noops.append(t_noop)
        raw = base / "disk.raw"
        subprocess.run(
            ["qemu-img", "convert", "-f", "qcow2", "-O", "raw", str(blob), str(raw)], check=True
        )
        raw_size = raw.stat().st_size
        allocated = raw.stat().st_blocks * 512
        t0 = time.perf_counter()
        subprocess.run(
            ["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(base / "ref.qcow2")],
            check=True,
        )
        qemu = time.perf_counter() - t0
    nvkr_disk = (timings.get("disk", 0) + timings.get("convert", 0)) / 1000
    mib = 1 << 20
    print(f"recipe / variant                 {RECIPE} {VARIANT} (warm package store)")
    print(f"cold build, total                {cold:8.2f} s   (target <= 180 s on 2 cores)")
    print(f"  rootfs (mmdebstrap)            {ms.get('rootfs', 0) / 1000:8.2f} s")
    print(
        f"  go-binary (agent)              {ms.get('go-binary', 0) / 1000:8.2f} s   (in parallel)"
    )
    print(f"  node-image action              {ms.get('node-image', 0) / 1000:8.2f} s")
    for phase in ("rootfs", "staging", "filesystem", "times", "bootloader", "disk", "convert"):
        label = "unpack" if phase == "rootfs" else phase
        print(f"    {label:<28} {timings.get(phase, 0) / 1000:8.2f} s")
    print(
        f"image size (QCOW2)               {qcow2['size'] / mib:8.1f} MiB   (virtual {raw_size / mib:.0f} MiB, {allocated / mib:.0f} MiB allocated raw)"
    )
    print(
        f"no-op rebuild (median of {args.runs})     {statistics.median(noops):8.2f} s   (target <= 1 s; min {min(noops):.2f}, max {max(noops):.2f})"
    )
    print(
        f"disk assembly (disk + convert)   {nvkr_disk:8.2f} s   {allocated / mib / max(nvkr_disk, 1e-3):8.0f} MiB/s of allocated data"
    )
    print(
        f"qemu-img convert raw -> qcow2    {qemu:8.2f} s   {allocated / mib / max(qemu, 1e-3):8.0f} MiB/s"
    )
    print(f"ratio nvkr / qemu-img convert    {nvkr_disk / max(qemu, 1e-3):8.2f}")


if __name__ == "__main__":
    main()
