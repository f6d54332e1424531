#!/usr/bin/env python3
"""The default recipe's hopper/amd64 node image built uncompressed, zlib- and zstd-compressed from
the same rootfs, in one run: QCOW2 size (bytes, ratio against uncompressed) and build time (the
node-image action and its convert phase, ratio against uncompressed; a compressed image's
action also hashes the raw disk for its provenance, timed apart).

The store is a hard-linked copy of a store that holds the whole default recipe built (default
``/tmp/bench-default/store``, never written to), so only the node-image action runs: for
``none`` its cached record is removed from the copy first, ``zlib`` and ``zstd`` are new action
keys. Each build runs in its own copy of the repository's recipes with ``compression:`` set.
``--pin-cost`` also times ``qemu-img convert -c -m 1`` (what nvkr runs) against qemu-img's
default 8 coroutines on the same raw disk, and checks the two give the same bytes.

Usage: .venv/bin/python benchmarks/qcow2_compression.py [--store DIR] [--runs N] [--pin-cost]
"""

from __future__ import annotations

import argparse
import hashlib
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
VARIANT = "gpu=hopper,arch=amd64"
KINDS = ("none", "zlib", "zstd")
OPTIONS = "compat=1.1,cluster_size=65536,refcount_bits=16,lazy_refcounts=off,extended_l2=off"


def clone(dest: Path, compression: str) -> Path:
    for part in ("recipes", "lockfiles", "agents", "charts"):
        shutil.copytree(ROOT / part, dest / part)
    recipe = dest / "recipes" / "default.yaml"
    text = recipe.read_text()
    if "    size: 4GiB\n" not in text:
        sys.exit("recipes/default.yaml no longer says `size: 4GiB` for its node image")
    if compression != "none":
        text = text.replace("    size: 4GiB\n", f"    size: 4GiB\n    compression: {compression}\n")
    recipe.write_text(text)
    return dest


def nvkr(args: list[str], cwd: Path, store: Path) -> str:
    env = {**os.environ, "NVKR_CACHE": str(store), "NVKR_CONFIG": str(cwd / "none.yaml")}
    proc = subprocess.run([sys.executable, "-m", "nvkr", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    if proc.returncode != 0:
        sys.exit(f"nvkr {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc.stdout


def node_image_key(cwd: Path, store: Path) -> str:
    plan = json.loads(nvkr(["plan", "--json", "--variant", VARIANT], cwd, store))
    (key,) = [a["key"] for a in plan["actions"] if a["builder"] == "node-image"]  # type: ignore[index,union-attr]
    return str(key)


def build(compression: str, base: Path, store: Path) -> dict[str, object]:
    """Build the image with ``compression``; returns its seconds, bytes and phase times."""
    work = clone(base / f"clone-{compression}", compression)
    key = node_image_key(work, store)
    (store / "actions" / f"{key[7:]}.json").unlink(missing_ok=True)
    t0 = time.perf_counter()
    out = nvkr(["build", "--variant", VARIANT, "--json"], work, store)
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    wall = time.perf_counter() - t0
    (done,) = [e for e in events if e.get("event") == "action-done" and e.get("key") == key]
    record = json.loads((store / "actions" / f"{key[7:]}.json").read_text())
    (qcow2,) = [o for o in record["outputs"] if o["role"] == "primary"]
    shutil.rmtree(work)
    return {
        "seconds": int(done["milliseconds"]) / 1000,  # type: ignore[call-overload]
        "wall": wall,
        "convert": record["run"]["timings"]["convert"] / 1000,
        "hash": record["run"]["timings"].get("raw-digest", 0) / 1000,
        "bytes": qcow2["size"],
        "digest": qcow2["digest"],
        "blob": store / "blobs" / "sha256" / qcow2["digest"][7:],
        "raw": (record["metadata"]["disk"].get("qcow2") or {}).get("rawDigest"),
    }


def pin_cost(image: Path, base: Path) -> list[str]:
    """qemu-img convert -c with 1 and with 8 coroutines on the same raw disk: seconds, digest."""
    raw = base / "disk.raw"
    subprocess.run(["qemu-img", "convert", "-f", "qcow2", "-O", "raw", str(image), str(raw)],
                   check=True)  # fmt: skip
    lines = []
    for kind in ("zlib", "zstd"):
        digests = {}
        for m in ("1", "8"):
            out = base / f"pin-{kind}-{m}.qcow2"
            t0 = time.perf_counter()
            subprocess.run(["qemu-img", "convert", "-c", "-m", m, "-f", "raw", "-O", "qcow2",
                            "-o", f"{OPTIONS},compression_type={kind}", str(raw), str(out)],
                           check=True)  # fmt: skip
            seconds = time.perf_counter() - t0
            digests[m] = hashlib.sha256(out.read_bytes()).hexdigest()
            out.unlink()
            lines.append(f"  qemu-img convert -c -m {m} ({kind})   {seconds:8.2f} s")
        same = "same bytes" if digests["1"] == digests["8"] else "DIFFERENT bytes"
        lines.append(f"  -m 1 and -m 8 ({kind}): {same}")
    raw.unlink()
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=Path("/tmp/bench-default/store"),
                        help="a store holding the default recipe built (read only)")  # fmt: skip
    parser.add_argument("--runs", type=int, default=1, help="builds per compression (median)")
    parser.add_argument("--pin-cost", action="store_true", help="time -m 1 against -m 8")
    args = parser.parse_args()
    if not (args.store / "actions").is_dir():
        sys.exit(f"{args.store} is no store (build the default recipe into it first)")
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="nvkr-bench-qcow2-", dir=os.environ.get("TMPDIR")) as t:
        base = Path(t)
        store = base / "store"
        subprocess.run(["cp", "-al", str(args.store), str(store)], check=True)
        runs: dict[str, list[dict[str, object]]] = {k: [] for k in KINDS}
        for _ in range(args.runs):
            for kind in KINDS:  # interleaved: a change in load hits every kind alike
                runs[kind].append(build(kind, base, store))
        extra = pin_cost(runs["none"][0]["blob"], base) if args.pin_cost else []  # type: ignore[arg-type]
    load_after = os.getloadavg()
    med = {k: {f: statistics.median([r[f] for r in v])  # type: ignore[type-var]
               for f in ("seconds", "convert", "hash", "bytes")} for k, v in runs.items()}  # fmt: skip
    mib = 1 << 20
    base_s, base_c, base_b = (med["none"][f] for f in ("seconds", "convert", "bytes"))
    print(f"node image {VARIANT}, recipes/default.yaml, same rootfs; median of {args.runs}")
    print(f"load average before {load[0]:.2f}, after {load_after[0]:.2f} ({os.cpu_count()} cores)")
    print(f"{'compression':<12} {'QCOW2 bytes':>12} {'MiB':>8} {'size':>6} "
          f"{'action s':>9} {'time':>6} {'convert s':>10} {'time':>6} {'raw sha256 s':>13}")  # fmt: skip
    for kind in KINDS:
        m = med[kind]
        print(
            f"{kind:<12} {int(m['bytes']):>12} {m['bytes'] / mib:>8.1f} {m['bytes'] / base_b:>6.3f} "
            f"{m['seconds']:>9.2f} {m['seconds'] / base_s:>6.2f} {m['convert']:>10.2f} "
            f"{m['convert'] / base_c:>6.2f} {m['hash']:>13.2f}"
        )
    raws = {str(r["raw"]) for k in ("zlib", "zstd") for r in runs[k]}
    digests = {k: {str(r["digest"]) for r in v} for k, v in runs.items()}
    print(
        f"one QCOW2 digest per compression over the runs: {all(len(d) == 1 for d in digests.values())}"
    )
    print(f"raw disk of the compressed images: {', '.join(sorted(raws))}")
    for line in extra:
        print(line)


if __name__ == "__main__":
    main()
