#!/usr/bin/env python3
"""DKMS's build of Debian's NVIDIA kernel modules per arch and flavour, inside the rootfs action.

For each ``--arch`` and ``--flavour`` (``proprietary``: nvidia-kernel-dkms, which compiles
NVIDIA's kernel interface around a prebuilt core; ``open``: nvidia-open-kernel-dkms, which
compiles the whole open module source), a recipe of its own in a scratch copy of ``recipes/``:
the OS layer (``--os``, Debian 13 by default, whose vars name the driver's version), Debian's
full kernel and its headers (recipes/kernel/full.yaml) and the driver package with
firmware-nvidia-gsp, one root filesystem artifact. It is locked against Debian's mirror (the
network is needed; ``--seed STORE`` reuses the .debs a store already holds) and built cold into
a fresh store. Reported per build: the whole build's time (downloads included), the rootfs
action's own, and DKMS's own time as the tree's check hook prints it from make.log (``nvkr:
dkms: ...: built in N s``, read from the action's stored build log), with the modules' names. A foreign arch runs under qemu-user
(QEMU_CPU as the rootfs builder sets it): expect it many times slower than native.

``--twice``: each build is made again, cold, in a second copy of the recipe and lockfile with a
store holding only the first store's blobs (no action record), offline, with umask 002 and
another TZ, and the two root filesystems' digests are compared (``"same": true``): the proof
that DKMS's build of NVIDIA's own modules is reproducible, which the test suite makes on a small
module only (tests/integration/test_dkms_rootfs.py; a second NVIDIA build is minutes of CPU).
A difference exits 1.

The recipe lives outside ``recipes/``, so the catalog's rules do not apply: the open flavour on
amd64 and the proprietary one on arm64 can be measured although gpu.open-kernel-modules would
refuse the latter for GH200.

Usage: .venv/bin/python benchmarks/dkms.py [--arch amd64 --arch arm64]
           [--flavour proprietary --flavour open] [--os debian-13] [--seed STORE] [--twice]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from node_image import link_blobs  # benchmarks/ is the script's sys.path[0]

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = {"proprietary": "nvidia-kernel-dkms", "open": "nvidia-open-kernel-dkms"}
RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {{name: bench-dkms-{flavour}}}
extends: [../recipes/os/{os}.yaml, ../recipes/kernel/full.yaml]
epoch: "1764547200"
matrix:
  gpu: [hopper]
  kubernetes: ["none"]
  arch: [amd64, arm64]
sources:
  node-packages:
    apt:
      debian: {{components: [main, contrib, non-free, non-free-firmware]}}
      debian-security: {{components: [main, contrib, non-free, non-free-firmware]}}
    packages:
      {package}: "{{{{ vars.debianNvidiaDriverVersion }}}}"
      firmware-nvidia-gsp: "{{{{ vars.debianNvidiaDriverVersion }}}}"
artifacts:
  dkms-rootfs: {{builder: rootfs, packages: node-packages}}
  # a recipe releases something; only the root filesystem's action is built (--action)
  dkms-image: {{builder: container-image, base: {{rootfs: dkms-rootfs}}}}
releaseSet: {{name: bench-dkms, artifacts: [dkms-image]}}
"""


def nvkr(
    project: Path, store: Path, *args: str, env: dict[str, str] | None = None, umask: int = 0o022
) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "NVKR_CACHE": str(store), "PYTHONPATH": str(ROOT), **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "nvkr", *args],
        cwd=project,
        env=full,
        capture_output=True,
        text=True,
        umask=umask,
    )
    if proc.returncode != 0:
        sys.exit(f"nvkr {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def measure(
    base: Path, os_layer: str, flavour: str, arch: str, seed: Path | None, twice: bool = False
) -> dict:
    project = base / f"{flavour}-{arch}"
    shutil.copytree(ROOT / "recipes", project / "recipes")
    (project / "bench").mkdir()
    rel = "bench/dkms.yaml"
    (project / rel).write_text(
        RECIPE.format(flavour=flavour, os=os_layer, package=PACKAGE[flavour])
    )
    store = base / f"store-{flavour}-{arch}"
    if seed is not None:
        link_blobs(seed, store)
    nvkr(project, store, "lock", rel)
    variant = f"gpu=hopper,arch={arch}"
    t0 = time.perf_counter()
    action = f"rootfs/dkms-rootfs@{variant}"
    proc = nvkr(project, store, "build", rel, "--locked", "--action", action, "--json")
    total = time.perf_counter() - t0
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    (done,) = [e for e in events if e["event"] == "action-done" and e["builder"] == "rootfs"]
    record = json.loads((store / "actions" / f"{done['key'].split(':', 1)[1]}.json").read_text())
    log = (store / "blobs" / "sha256" / record["log"].split(":", 1)[1]).read_text(errors="replace")
    built = re.findall(r"nvkr: dkms: (.*): built in (\d+) s", log)
    again: dict = {}
    if twice:
        again = _again(project, store, rel, action, done["key"], record["outputs"])
    return {
        "flavour": flavour,
        "arch": arch,
        "os": os_layer,
        "build s (downloads included)": round(total, 1),
        "rootfs s": int(done["milliseconds"]) / 1000,
        "dkms": [{"module": what, "s": int(s)} for what, s in built],
        **again,
    }


def _again(project: Path, store: Path, rel: str, action: str, key: str, outputs: list) -> dict:
    """The rootfs action built again in a copy of ``project`` (recipe and lockfile) with a store
    of ``store``'s blobs alone, offline, umask 002, TZ Asia/Kolkata: whether its outputs are
    ``outputs`` byte for byte, and its time."""
    copy, second = project.parent / f"{project.name}-again", store.parent / f"{store.name}-again"
    shutil.copytree(project, copy, ignore=shutil.ignore_patterns("dist"))
    link_blobs(store, second)
    t0 = time.perf_counter()
    proc = nvkr(copy, second, "build", rel, "--locked", "--offline", "--action", action, "--json",
                env={"TZ": "Asia/Kolkata"}, umask=0o002)  # fmt: skip
    seconds = time.perf_counter() - t0
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    (done,) = [e for e in events if e["event"] == "action-done" and e["builder"] == "rootfs"]
    record = json.loads((second / "actions" / f"{key.split(':', 1)[1]}.json").read_text())
    return {
        "second build s": round(seconds, 1),
        "same key": done["key"] == key,
        "same": done["key"] == key and record["outputs"] == outputs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", action="append", choices=["amd64", "arm64"])
    parser.add_argument("--flavour", action="append", choices=sorted(PACKAGE))
    parser.add_argument("--os", default="debian-13", choices=["debian-12", "debian-13"])
    parser.add_argument("--seed", type=Path, help="a store whose blobs (.debs) are linked in")
    parser.add_argument(
        "--twice", action="store_true", help="build each again from a second copy and compare"
    )
    args = parser.parse_args()
    differ = False
    with tempfile.TemporaryDirectory(prefix="nvkr-bench-dkms-") as tmp:
        for arch in args.arch or ["amd64", "arm64"]:
            for flavour in args.flavour or ["proprietary"]:
                row = measure(Path(tmp), args.os, flavour, arch, args.seed, args.twice)
                differ = differ or row.get("same") is False
                print(json.dumps(row), flush=True)
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
