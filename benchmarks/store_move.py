#!/usr/bin/env python3
"""An action's output put into the store two ways, in the same run, interleaved: copied through a
BlobWriter (:meth:`nvkr.store.Store.add_file`, before) and moved (:func:`nvkr.store_move.
move_file`: hashed as read, renamed). Before each measurement the output is written afresh in
the store's ``tmp/`` (a copy of FILE: a node image's QCOW2 or a rootfs tar, as a builder leaves
it) and the page cache is flushed (``sync``), so each way starts from a file just written, as in
a build. Prints per way the median of ``--runs``: wall and CPU seconds (this process and the
kernel's work on its behalf) and the bytes it wrote (``/proc/self/io``), with the ratios against
the copy; both must give the same digest.

Usage: .venv/bin/python benchmarks/store_move.py FILE [--runs N] [--store DIR]
(``--store``: where the scratch store goes, default a temporary directory; give one on the disk
your builds use.)
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nvkr.store import Store  # noqa: E402
from nvkr.store_move import move_file  # noqa: E402


def _written() -> int:
    """Bytes this process caused to be written to storage (``/proc/self/io``)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    return 0


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path, help="an output to store (a QCOW2, a tar)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--store", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nvkr-bench-move-", dir=args.store) as tmp:
        times: dict[str, list[tuple[float, float, int]]] = {"copy": [], "move": []}
        digests = set()
        ways = {
            "copy": lambda s, p: s.add_file(p, what="output"),
            "move": lambda s, p: move_file(s, p, what="output"),
        }
        for run in range(args.runs):
            for name, put in ways.items():
                store = Store(Path(tmp) / f"store-{name}-{run}")
                work = store.tmp_dir / "act-bench"
                work.mkdir(parents=True)
                out = work / args.file.name
                shutil.copyfile(args.file, out)
                subprocess.run(["sync"], check=True)
                w, c, b = time.perf_counter(), _cpu(), _written()
                digests.add(put(store, out).digest)
                subprocess.run(["sync"], check=True)  # what it wrote, on disk
                times[name].append((time.perf_counter() - w, _cpu() - c, _written() - b))
                shutil.rmtree(store.root, ignore_errors=True)
        size = args.file.stat().st_size
        print(f"{args.file.name}: {size / 2**20:.0f} MiB; load average {os.getloadavg()[0]:.1f}")
        if len(digests) != 1:
            sys.exit(f"the two ways disagree: {sorted(digests)}")
        base = [statistics.median(t[i] for t in times["copy"]) for i in (0, 1, 2)]
        for name, runs in times.items():
            wall, cpu, wrote = (statistics.median(t[i] for t in runs) for i in (0, 1, 2))
            print(f"  {name:<5} {wall:6.2f} s wall x{wall / base[0]:.2f}   "
                  f"{cpu:6.2f} s CPU x{cpu / base[1]:.2f}   "
                  f"{wrote / 2**20:7.0f} MiB written x{wrote / max(base[2], 1):.2f}")  # fmt: skip
        print(f"  digest {digests.pop()}")


if __name__ == "__main__":
    main()
