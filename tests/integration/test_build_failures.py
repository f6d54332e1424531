"""End to end failures with the real Go builder: a compile error and a Ctrl-C mid-build."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys

import pytest

from tests.helpers.nvkr import make_clone, run_nvkr

pytestmark = pytest.mark.slow


#: A recipe made for the interrupted build: the default recipe's agent and its image alone (the
#: release set names only the image, so the plan holds nothing else: no node image to rebuild
#: around the changed agent). Its pins are the default recipe's: builds name the default lockfile.
AGENT_ONLY = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: agent-only}
extends: [default.yaml]
releaseSet:
  name: agent-only
  artifacts: [agent-image]
  machineImages: []
  clusterRelease: null
  nodePoolReleases: []
"""


AGENT_ONLY_ARGS = ("--lockfile", "lockfiles/default.lock.json", "--variant", "arch=amd64")


def _store_is_consistent(store, seeded_from):
    """No temp files left, every blob named by its sha256, every action's outputs present. The
    blobs the store shares with ``seeded_from`` (the same inode: hard-linked by ``seed_built``,
    checked when that store wrote them) are not hashed again: the rest, what the test's builds
    wrote, are."""
    assert os.listdir(store / "tmp") == []
    for blob in (store / "blobs" / "sha256").iterdir():
        seeded = seeded_from / "blobs" / "sha256" / blob.name
        if seeded.exists() and os.path.samefile(seeded, blob):
            continue
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name, f"partial blob {blob}"
    for entry in (store / "actions").glob("*.json"):
        for out in json.loads(entry.read_text())["outputs"]:
            assert (store / "blobs" / "sha256" / out["digest"][7:]).is_file(), (
                f"{entry} names a missing blob"
            )


def test_compile_error_fails_with_the_compiler_output(tmp_path, seed_built, default_build):
    clone = make_clone(tmp_path / "clone")
    main = clone / "agents" / "node-agent" / "cmd" / "node-agent" / "main.go"
    main.write_text(main.read_text() + "\nfunc broken() { undefinedThing() }\n")
    # every other action is cached: only the agent (its source changed) builds, and fails
    store = seed_built(tmp_path / "store")
    res = run_nvkr("build", "--variant", "arch=amd64", cwd=clone, store=store)
    assert res.code == 1
    assert "error[NVKR-E-BUILD]" in res.stderr and "agent [amd64]" in res.stderr
    assert "undefined: undefinedThing" in res.stderr, "the log tail names the compiler error"
    assert "Traceback" not in res.stderr
    assert not (clone / "dist").exists()
    _store_is_consistent(store, default_build.store)


def test_ctrl_c_mid_build_exits_130_and_the_next_build_completes(
    tmp_path, seed_built, default_build
):
    clone = make_clone(tmp_path / "clone")
    (clone / "recipes" / "agent-only.yaml").write_text(AGENT_ONLY)
    # a changed agent source: the agent and what embeds it build again, the rest is cached
    main = clone / "agents" / "node-agent" / "cmd" / "node-agent" / "main.go"
    main.write_text(main.read_text() + "\n// changed by the test\n")
    store = seed_built(tmp_path / "store")
    env = {**os.environ, "NVKR_CACHE": str(store), "NVKR_CONFIG": str(clone / "none.yaml")}
    proc = subprocess.Popen(
        # one arch of the agent alone: the completing build below rebuilds only what it needs
        [sys.executable, "-m", "nvkr", "build", "recipes/agent-only.yaml", *AGENT_ONLY_ARGS],
        cwd=clone,
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # its own process group, like a shell job: Ctrl-C reaches go too
    )
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "building agent" in line:
            break
    os.killpg(proc.pid, signal.SIGINT)
    rest = proc.stderr.read()
    code = proc.wait(timeout=300)
    assert code == 130, "".join(seen) + rest
    assert "NVKR-E-INTERRUPTED" in rest and "Traceback" not in rest
    assert not (clone / "dist").exists()
    _store_is_consistent(store, default_build.store)
    again = run_nvkr("build", "recipes/agent-only.yaml", *AGENT_ONLY_ARGS, cwd=clone, store=store)
    assert again.code == 0, again.stderr
    assert (clone / "dist" / "agent-only" / "index.json").is_file()
    _store_is_consistent(store, default_build.store)
