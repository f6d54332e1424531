#!/usr/bin/env python3
"""``nvkr boot-test`` of one Secure Boot node image three ways, in the same run, interleaved:
SeaBIOS and GRUB (amd64's legacy boot path, which the image keeps), ``--secure-boot`` (OVMF's
Secure Boot firmware, shim, the owner-signed UKI) and ``--secure-boot --tpm`` (swtpm too, and the
boot hook's PCR and event log report). Each figure is the whole ``nvkr boot-test`` command
(QEMU start to power-off, the module probe included), wall-clock seconds, and the guest's uptime
at the node agent's readiness line; the ratios are against SeaBIOS. The host's load average is
printed with each run: boots under TCG share the CPUs with everything else. All three run under
the same accelerator (TCG by default: OVMF's Secure Boot build needs SMM, which nested KVM often
lacks).

Usage: .venv/bin/python benchmarks/boot_secure.py IMAGE.qcow2 --mok OWNER.crt [--runs N]
[--accel tcg|kvm|auto] (IMAGE: a node image built with recipes/secureboot/debian-13.yaml, e.g.
the README's default-secureboot leaf's hopper/amd64 image; OWNER.crt its owner's certificate).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = {
    "seabios": [],
    "secure-boot": ["--secure-boot"],
    "secure-boot+tpm": ["--secure-boot", "--tpm"],
}


def boot(image: Path, mok: Path, mode: str, accel: str, work: Path) -> tuple[float, float]:
    """(wall seconds of the command, the guest's uptime at the readiness line)."""
    argv = [sys.executable, "-m", "nvkr", "--store", str(work / "store"), "boot-test", str(image),
            "--timeout", "1800", "--console-log", str(work / "logs"), "--json", *MODES[mode]]  # fmt: skip
    if mode != "seabios":
        argv += ["--mok", str(mok)]
    env = {**os.environ, "NVKR_BOOT_ACCEL": accel}
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"boot-test {mode} failed ({proc.returncode}):\n{proc.stderr}\n{proc.stdout}")
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    (result,) = [e for e in events if e["event"] == "image-result"]
    stamp = re.search(r"\[\s*(\d+\.\d+)\]", result["line"])
    return wall, float(stamp.group(1)) if stamp else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("image", type=Path)
    parser.add_argument("--mok", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--accel", default="tcg", choices=["tcg", "kvm", "auto"])
    args = parser.parse_args()
    walls: dict[str, list[float]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="nvkr-bench-sb-") as tmp:
        for run in range(args.runs):
            for mode in MODES:
                load = os.getloadavg()[0]
                wall, ready = boot(args.image, args.mok, mode, args.accel, Path(tmp))
                walls[mode].append(wall)
                print(f"run {run + 1} {mode:16} {wall:6.1f} s (agent ready at {ready:.1f} s guest "
                      f"uptime; load {load:.2f})", flush=True)  # fmt: skip
    base = statistics.median(walls["seabios"])
    for mode, values in walls.items():
        median = statistics.median(values)
        print(f"{mode:16} median {median:6.1f} s  x{median / base:.2f} of SeaBIOS")


if __name__ == "__main__":
    main()
