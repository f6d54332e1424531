#!/usr/bin/env python3
"""``nvkr image`` on a built release set: how long reading a machine image without a mount takes.

Prints, in seconds (the median of N runs each) and with the number of paths: ``image ls DIR``
(the GPT, the root partition to a sparse raw file, one directory), ``image ls / -R --json`` (the
whole tree walked: one debugfs run per level), ``image cat`` of one file, and ``image diff`` of
two variants of the set (both trees walked and every same-sized file pair hashed). The default
node image has about 11,500 paths; say the machine's load beside the figures.

Usage: .venv/bin/python benchmarks/image_read.py LAYOUT [--artifact node-image]
       [--a gpu=hopper,arch=amd64] [--b gpu=blackwell,arch=amd64] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def nvkr(*args: str) -> tuple[float, str]:
    argv = [sys.executable, "-m", "nvkr", *args]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"nvkr {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return elapsed, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("layout", type=Path)
    parser.add_argument("--artifact", default="node-image")
    parser.add_argument("--a", default="gpu=hopper,arch=amd64", help="variant of image A")
    parser.add_argument("--b", default="gpu=blackwell,arch=amd64", help="variant of image B")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    layout, art = str(args.layout), args.artifact
    cases = {
        "ls /etc": ["image", "ls", layout, art, "/etc", "--variant", args.a],
        "ls / -R --json": ["image", "ls", layout, art, "/", "-R", "--json", "--variant", args.a],
        "cat /etc/nvkr/manifest.json": [
            "image", "cat", layout, art, "/etc/nvkr/manifest.json", "--variant", args.a,
        ],
        "diff A B --json": [
            "image", "diff", layout, layout, "--artifact", art, "--variant-a", args.a,
            "--variant-b", args.b, "--json",
        ],
    }  # fmt: skip
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    for name, argv in cases.items():
        times, out = [], ""
        for _ in range(args.runs):
            elapsed, out = nvkr(*argv)
            times.append(elapsed)
        extra = ""
        if name.startswith("ls / -R"):
            extra = f", {len(json.loads(out)['entries'])} paths"
        if name.startswith("diff"):
            doc = json.loads(out)
            extra = (
                f", {len(doc['added'])} added, {len(doc['removed'])} removed, "
                f"{len(doc['changed'])} changed"
            )
        print(f"{name}: {statistics.median(times):.2f} s (median of {args.runs}){extra}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
