"""The golden plan (tests/golden/plan.json): the default recipe's build digest, one action key per
builder and the default release set's digest, checked in so that a change which alters action
keys (and so invalidates every local store and remote cache) shows in review.

``python -m tests.helpers.golden`` compares ``nvkr plan --json`` of the default recipe with the
file and prints what changed (exit 1 if anything did); ``--write`` rewrites the plan part of the
file; ``--write --build`` also builds the default recipe (``nvkr build --locked`` in a fresh copy
of the repository's recipes, into a fresh store unless ``--store`` names one) and records the
release set's digest. A cold build takes about 20 minutes of CPU.

The plan needs only the lockfile and the path sources (agents/, charts/): it runs in a clean
clone, with an empty store, in under a second.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.helpers import REPO
from tests.helpers.cli import invoke
from tests.helpers.nvkr import make_clone, run_nvkr

GOLDEN = REPO / "tests" / "golden" / "plan.json"
RECIPE = "recipes/default.yaml"
REGENERATE = "python -m tests.helpers.golden --write"
WHY = (
    "a change that alters action keys invalidates every cache (every store and remote cache "
    f"rebuilds): if it is meant, regenerate with `{REGENERATE}` (add `--build` when the release "
    "set's bytes change) and say why in the commit message"
)


def current_plan(store: Path) -> dict[str, Any]:
    """``nvkr plan --json`` of the default recipe, run in the repository with ``store``."""
    result = invoke("plan", RECIPE, "--json", store=store, env={"NVKR_CONFIG": str(store / "none")})
    if result.code != 0:
        raise RuntimeError(f"nvkr plan failed ({result.code}): {result.stderr}")
    plan: dict[str, Any] = json.loads(result.stdout)
    return plan


def summarize(plan: dict[str, Any]) -> dict[str, Any]:
    """The golden part of a plan: its build digest and, per builder, the first action of that
    builder in plan order (the plan's order is deterministic) by ref and key."""
    actions: dict[str, dict[str, str]] = {}
    for action in plan["actions"]:
        actions.setdefault(action["builder"], {"ref": action["ref"], "key": action["key"]})
    return {
        "recipe": plan["recipe"]["path"],
        "buildDigest": plan["buildDigest"],
        "actions": dict(sorted(actions.items())),
    }


def differences(golden: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """One line per changed field of :func:`summarize`'s output (empty when the same)."""
    lines = []
    if golden.get("buildDigest") != current["buildDigest"]:
        lines.append(f"buildDigest: {golden.get('buildDigest')} -> {current['buildDigest']}")
    old, new = golden.get("actions", {}), current["actions"]
    for builder in sorted(set(old) | set(new)):
        a, b = old.get(builder), new.get(builder)
        if a is None:
            lines.append(f"{builder}: new builder in the plan ({b['ref']} {b['key']})")
        elif b is None:
            lines.append(f"{builder}: no longer in the plan (was {a['ref']} {a['key']})")
        elif a != b:
            lines.append(f"{builder}: {a['ref']} {a['key']} -> {b['ref']} {b['key']}")
    return lines


def release_set_digest(store: Path) -> str:
    """Build the default recipe (``--locked``) in a fresh copy of the repository with ``store``
    and return the release set's digest from the build's ``result`` event."""
    with tempfile.TemporaryDirectory(prefix="nvkr-golden-") as tmp:
        clone = make_clone(Path(tmp) / "clone")
        result = run_nvkr("build", "--locked", "--json", cwd=clone, store=store)
        if result.code != 0:
            raise RuntimeError(f"nvkr build failed ({result.code}): {result.stderr}")
        sets = result.json_events()[-1]["releaseSets"]
        digest: str = sets[0]["digest"]
        return digest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.helpers.golden", description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite tests/golden/plan.json")
    parser.add_argument("--build", action="store_true", help="with --write: build for the digest")
    parser.add_argument("--store", type=Path, help="the store --build builds in (default: fresh)")
    args = parser.parse_args(argv)
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    with tempfile.TemporaryDirectory(prefix="nvkr-golden-store-") as tmp:
        current = summarize(current_plan(Path(tmp)))
        changed = differences(golden, current)
        if not args.write:
            print("\n".join(changed) or "the plan matches tests/golden/plan.json")
            return 1 if changed else 0
        digest = golden.get("releaseSetDigest")
        if args.build:
            digest = release_set_digest(args.store or Path(tmp) / "build-store")
    GOLDEN.write_text(json.dumps({**current, "releaseSetDigest": digest}, indent=2) + "\n")
    print("\n".join(changed) or "the plan is unchanged")
    print(f"wrote {GOLDEN.relative_to(REPO)} (release set {digest})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
