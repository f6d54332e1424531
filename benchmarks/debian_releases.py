#!/usr/bin/env python3
"""The default recipe on Debian 12 against Debian 13, in one run: image size, cold build, boot.

For ``--baseline REF`` (a commit whose default recipe is on Debian 12, such as 6478d0f, checked
out as a git worktree) and for this checkout: the recipe's locked sources are fetched into a
seed store of their own (not timed); then a cold ``nvkr build`` of the whole recipe (both arches,
every variant) into a fresh store holding only them, with each root filesystem action's own time
(``action-done``; the arches' trees build side by side, as in any cold build); the root
filesystem tarball's and each QCOW2's size (the action records' outputs); and ``nvkr boot-test``
of the hopper images of both arches under TCG (so the figures do not depend on whether this host's
KVM works), the time to the node agent's readiness line.

Usage: .venv/bin/python benchmarks/debian_releases.py --baseline REF [--no-boot]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from node_image import link_blobs  # benchmarks/ is the script's sys.path[0]
from rootfs_arches import nvkr, qemu_version, worktree

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


def seed_sources(checkout: Path, seed: Path) -> None:
    """``checkout``'s locked sources into ``seed``, by ``checkout``'s own nvkr modules."""
    code = (
        "import sys; from pathlib import Path; "
        f"sys.path[:0] = [{str(checkout)!r}, {str(BENCH)!r}]; "
        "from rootfs_arches import fill_sources; "
        f"fill_sources(Path({str(seed)!r}), Path({str(checkout)!r}))"
    )
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    subprocess.run([sys.executable, "-c", code], cwd=checkout, env=env, check=True)


def outputs(store: Path, key: str) -> list[dict[str, object]]:
    record = json.loads((store / "actions" / f"{key.split(':', 1)[1]}.json").read_text())
    found: list[dict[str, object]] = record["outputs"]
    return found


def boot(checkout: Path, store: Path, layout: Path, arch: str) -> float:
    env = {**os.environ, "NVKR_CACHE": str(store), "PYTHONPATH": str(checkout)}
    argv = [
        sys.executable, "-m", "nvkr", "boot-test", str(layout), "--variant",
        f"gpu=hopper,arch={arch}", "--accel", "tcg", "--timeout", "900", "--json",
    ]  # fmt: skip
    proc = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"boot-test {arch} in {checkout} failed:\n{proc.stderr}")
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    (result,) = [e for e in events if e["event"] == "image-result"]
    return int(result["milliseconds"]) / 1000


def measure(checkout: Path, base: Path, boots: bool) -> dict[str, float]:
    seed = base / "seed"
    seed_sources(checkout, seed)
    store = base / "store"
    link_blobs(seed, store)
    out: dict[str, float] = {}
    out["cold"], events = nvkr(checkout, store, "--out", str(base / "out"))
    done = [e for e in events if e["event"] == "action-done"]
    for e in done:
        if e["builder"] == "rootfs":
            arch = "amd64" if "amd64" in str(e["name"]) else "arm64"
            out[f"rootfs {arch} s"] = int(str(e["milliseconds"])) / 1000
            (tar,) = outputs(store, str(e["key"]))
            out[f"rootfs {arch} MiB"] = int(str(tar["size"])) / 2**20
        if e["builder"] == "node-image" and "hopper" in str(e["name"]):
            arch = "amd64" if "amd64" in str(e["name"]) else "arm64"
            (qcow2,) = [o for o in outputs(store, str(e["key"])) if o["role"] == "primary"]
            out[f"qcow2 {arch} MiB"] = int(str(qcow2["size"])) / 2**20
    if boots:
        layout = base / "out" / "nvkr-default-k8s1.36"
        for arch in ("amd64", "arm64"):
            out[f"boot {arch} s"] = boot(checkout, store, layout, arch)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", metavar="REF", required=True, help="a Debian 12 commit")
    parser.add_argument("--no-boot", action="store_true", help="no boot-test")
    args = parser.parse_args()
    rows: list[tuple[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(
        prefix="nvkr-bench-debian-", dir=os.environ.get("TMPDIR")
    ) as t:
        base = Path(t)
        with worktree(args.baseline, base / "baseline") as tree:
            rows.append((args.baseline, measure(tree, base / "b", not args.no_boot)))
        rows.append(("this checkout", measure(ROOT, base / "a", not args.no_boot)))
    print(f"host          {platform.machine()}, {os.cpu_count()} cores; qemu-user {qemu_version()}")
    names = list(rows[0][1])
    print(f"{'':18}" + "".join(f"{name:>16}" for name, _ in rows) + f"{'ratio':>10}")
    for key in names:
        before, after = rows[0][1][key], rows[1][1].get(key, float("nan"))
        label = key if key != "cold" else "cold build s"
        print(f"{label:18}{before:16.1f}{after:16.1f}{after / before:10.2f}")


if __name__ == "__main__":
    main()
