#!/usr/bin/env python3
"""``nvkr boot-test`` of one node image with and without ``--user-data``, in the same run.

Without user-data cloud-init finds no datasource (ds-identify disables it) and the boot ends at
the node agent's readiness line and labels; with user-data (write_files, runcmd, an expected file
in ``/run``) it also waits for the probe's report after ``cloud-final.service``. Each figure is
the whole ``nvkr boot-test`` command (QEMU start to power-off), wall-clock seconds, plus the
guest's uptime at the agent's readiness line (its kernel time stamp). The host's load average is
printed with each run: boots under TCG share the CPUs with everything else.

Usage: .venv/bin/python benchmarks/boot_user_data.py IMAGE.qcow2 [--runs N] [--accel tcg|kvm|auto]
(IMAGE: the default recipe's hopper/amd64 node image, e.g. from ``nvkr build --variant
gpu=hopper,arch=amd64``; it must hold cloud-init).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
USER_DATA = """#cloud-config
write_files:
  - path: /etc/nvkr-test/hello.conf
    permissions: '0640'
    content: |
      hello from user-data
runcmd:
  - mkdir -p /run/cluster-api
  - echo success > /run/cluster-api/bootstrap-success.complete
"""


def boot(image: Path, accel: str, work: Path, user_data: Path | None) -> tuple[float, float]:
    """(wall seconds of the command, the guest's uptime at the readiness line: its kernel
    time stamp, seconds)."""
    argv = [sys.executable, "-m", "nvkr", "--store", str(work / "store"), "boot-test",
            str(image), "--timeout", "1800", "--console-log", str(work / "logs"), "--json"]  # fmt: skip
    if user_data is not None:
        argv += ["--user-data", str(user_data)]
        argv += ["--expect-file", "/run/cluster-api/bootstrap-success.complete"]
    env = {**os.environ, "NVKR_BOOT_ACCEL": accel}
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"boot-test failed ({proc.returncode}):\n{proc.stderr}\n{proc.stdout}")
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    (result,) = [e for e in events if e["event"] == "image-result"]
    stamp = re.search(r"\[\s*(\d+\.\d+)\]", result["line"])
    return wall, float(stamp.group(1)) if stamp else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("image", type=Path)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--accel", default="tcg")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nvkr-bench-boot-") as tmp:
        work = Path(tmp)
        ud = work / "user-data.yaml"
        ud.write_text(USER_DATA)
        print(
            f"image {args.image} ({args.image.stat().st_size / 2**20:.0f} MiB), accel {args.accel}"
        )
        for n in range(args.runs):
            for label, data in (("without user-data", None), ("with user-data", ud)):
                load = os.getloadavg()[0]
                wall, ready = boot(args.image, args.accel, work, data)
                print(f"run {n + 1} {label:18} {wall:7.1f} s (agent ready at uptime {ready:6.1f} s, "
                      f"load {load:.2f} at start)")  # fmt: skip


if __name__ == "__main__":
    main()
