#!/usr/bin/env python3
"""Start-up: ``nvkr --version``, every verb's ``--help`` and the no-op build of the default
recipe, for this checkout and a baseline revision, measured in one run.

The no-op is measured twice: as a user gets it (``no-op build``: after the first no-op, this
checkout answers it from the plan memo, :mod:`nvkr.planmemo`) and with the memo turned off
(``no-op build, full path``: ``NVKR_PLAN_MEMO=off``, the plan made and walked; the baseline
either way). The targets: the no-op at most 0.25 s, ``--version`` and every ``--help`` at most
0.1 s.

Both trees are byte-compiled first (``compileall``: the figures are for compiled modules, as an
installed nvkr runs) and run with the same interpreter, the same store and the same working
directory (this checkout's recipes and lockfiles: the no-op is the same plan for both, since the
action keys do not depend on nvkr's own code outside the builders' versions). The store must
hold a build of the recipe (``--store DIR``; without it one is built first, which takes
minutes). Each figure is the median of ``--runs`` runs, alternating the two trees so that a
machine's drift hits both.

Usage: .venv/bin/python benchmarks/startup.py [--baseline REV] [--store DIR] [--runs N]

Measured (2 shared cores, load average about 3.5, ``--runs 5``, baseline 7730121, the default
recipe's store built): no-op build 0.792 s before, 0.149 s now (from the plan memo; 0.760 s by
the full path); ``--version`` 0.088 s / 0.092 s; the verbs' ``--help`` 0.074 to 0.113 s now,
0.079 to 0.138 s before (the load's noise: neither tree imports more than click and nvkr.cli
before a verb's small module). Before ``-P``, the baseline ran this checkout's modules.
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

#: the no-op the issue names; the verbs' --help from nvkr.cli.VERBS
NOOP = ("build", "--locked", "--json")


def _run(
    tree: Path, argv: tuple[str, ...], store: Path, out: Path, extra: dict[str, str] | None = None
) -> float:
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "NVKR_CACHE": str(store),
        "NVKR_CONFIG": str(out / "no-config.yaml"),
        **(extra or {}),
    }
    args = [a if a != "@OUT" else str(out) for a in argv]
    t0 = time.perf_counter()
    proc = subprocess.run(
        # -P: the working directory (this checkout) must not come before the tree's PYTHONPATH
        [sys.executable, "-P", "-m", "nvkr", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        check=False,
    )
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{tree}: nvkr {' '.join(args)} exited {proc.returncode}:\n{proc.stderr.decode()}")
    return elapsed


def _baseline_tree(rev: str, dest: Path) -> Path:
    """``rev``'s nvkr/ and builders/ under ``dest`` (``git archive``), byte-compiled."""
    archive = subprocess.run(
        ["git", "archive", rev, "nvkr", "builders"], cwd=ROOT, capture_output=True, check=True
    )
    dest.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def main() -> None:
    from nvkr.cli import VERBS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="7730121", help="revision to compare with")
    parser.add_argument("--store", type=Path, help="a store holding a build of the recipe")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nvkr-startup-") as tmp:
        base = Path(tmp)
        trees = {"baseline": _baseline_tree(args.baseline, base / "baseline"), "now": ROOT}
        for tree in trees.values():
            subprocess.run(
                [sys.executable, "-m", "compileall", "-q", str(tree / "nvkr")], check=True
            )
        store = args.store or base / "store"
        out = base / "out"
        out.mkdir()
        if args.store is None:
            print("building the default recipe once (minutes)...", flush=True)
            _run(ROOT, ("build", "--locked", "--out", "@OUT"), store, out)
        noop = (*NOOP, "--out", "@OUT")
        cases = {
            "--version": ("--version",),
            **{f"{verb} --help": (verb, "--help") for verb in VERBS},
            "no-op build, full path": noop,
            "no-op build": noop,
        }
        full = {"NVKR_PLAN_MEMO": "off"}
        envs = {"no-op build, full path": full}
        times: dict[str, dict[str, list[float]]] = {c: {t: [] for t in trees} for c in cases}
        for tree in trees.values():  # warm the page cache; the first no-op writes dist, the
            _run(tree, noop, store, out)  # second (this checkout's) its plan memo
            _run(tree, noop, store, out)
        for _ in range(args.runs):
            for case, argv in cases.items():
                for name, tree in trees.items():
                    times[case][name].append(_run(tree, argv, store, out, envs.get(case)))
        print(f"baseline {args.baseline}, median of {args.runs} runs, compiled modules")
        print(f"{'':24} {'baseline':>9} {'now':>9} {'now/baseline':>13}")
        for case in cases:
            b, n = (statistics.median(times[case][t]) for t in ("baseline", "now"))
            print(f"{case:24} {b:8.3f}s {n:8.3f}s {n / b:12.2f}x")
        worst = max((statistics.median(times[c]["now"]), c) for c in cases if "no-op" not in c)
        print(f"slowest --help/--version now: {worst[1]} {worst[0]:.3f} s (target 0.1 s)")
        before, after = (statistics.median(times["no-op build"][t]) for t in ("baseline", "now"))
        print(f"no-op build: {before:.3f} s before, {after:.3f} s now (target 0.25 s)")


if __name__ == "__main__":
    main()
