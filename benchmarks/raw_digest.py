#!/usr/bin/env python3
"""The node-image builder's raw-disk digest (the QCOW2's ``rawDigest``) two ways, in the same
run, interleaved: every byte read and hashed (before) and :func:`nvkr.disk.raw.sha256_sparse`
(the holes hashed as zeros without reading them). Before each measurement a QCOW2 node image is
converted to the sparse raw disk it holds (``qemu-img convert``), so each way hashes a disk just
written, as the builder does (read again later, every byte costs about a quarter as much: the
first read of the holes of a file just written is what costs); both must give the same digest.
Prints wall and CPU seconds per way (the median of ``--runs``) and the ratios against reading
every byte.

Usage: .venv/bin/python benchmarks/raw_digest.py IMAGE.qcow2 [--runs N]
(IMAGE: e.g. a machine image of ``dist/nvkr-default-k8s1.36``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nvkr.canonical import hash_stream  # noqa: E402
from nvkr.disk import raw  # noqa: E402


def whole(path: Path) -> str:
    with open(path, "rb") as f:
        return hash_stream(f)[0]["sha256"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("image", type=Path, help="a QCOW2 node image")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nvkr-bench-raw-") as tmp:
        disk = Path(tmp) / "disk.raw"
        times: dict[str, list[tuple[float, float]]] = {"every byte": [], "sparse": []}
        digests = set()
        for _ in range(args.runs):
            for name, fn in (("every byte", whole), ("sparse", raw.sha256_sparse)):
                disk.unlink(missing_ok=True)
                subprocess.run(["qemu-img", "convert", "-f", "qcow2", "-O", "raw",
                                str(args.image), str(disk)], check=True)  # fmt: skip
                w, c = time.perf_counter(), time.process_time()
                digests.add(fn(disk))
                times[name].append((time.perf_counter() - w, time.process_time() - c))
        st = os.stat(disk)
        print(f"raw disk: {st.st_size / 2**30:.1f} GiB, {st.st_blocks * 512 / 2**20:.0f} MiB "
              f"allocated; load average {os.getloadavg()[0]:.1f}")  # fmt: skip
        if len(digests) != 1:
            sys.exit(f"the two ways disagree: {sorted(digests)}")
        base = [statistics.median(t[i] for t in times["every byte"]) for i in (0, 1)]
        for name, runs in times.items():
            wall = statistics.median(t[0] for t in runs)
            cpu = statistics.median(t[1] for t in runs)
            print(f"  {name:<11} {wall:6.2f} s wall x{wall / base[0]:.2f}   "
                  f"{cpu:6.2f} s CPU x{cpu / base[1]:.2f}")  # fmt: skip
        print(f"  digest {digests.pop()}")


if __name__ == "__main__":
    main()
