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


def _store_is_consistent(store):
    """No temp files left, every blob named by its sha256, every action's outputs present."""
    assert os.listdir(store / "tmp") == []
    for blob in (store / "blobs" / "sha256").iterdir():
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name, f"partial blob {blob}"
    for entry in (store / "actions").glob("*.json"):
        for out in json.loads(entry.read_text())["outputs"]:
            assert (store / "blobs" / "sha256" / out["digest"][7:]).is_file(), (
                f"{entry} names a missing blob"
            )


def test_compile_error_fails_with_the_compiler_output(tmp_path, seed_built):
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
    _store_is_consistent(store)


def test_ctrl_c_mid_build_exits_130_and_the_next_build_completes(tmp_path, seed_built):
    clone = make_clone(tmp_path / "clone")
    # a changed agent source: the agent and what embeds it build again, the rest is cached
    main = clone / "agents" / "node-agent" / "cmd" / "node-agent" / "main.go"
    main.write_text(main.read_text() + "\n// changed by the test\n")
    store = seed_built(tmp_path / "store")
    env = {**os.environ, "NVKR_CACHE": str(store), "NVKR_CONFIG": str(clone / "none.yaml")}
    proc = subprocess.Popen(
        # one arch: the completing build below rebuilds less; the interrupt lands in the Go
        # build either way
        [sys.executable, "-m", "nvkr", "build", "--variant", "arch=amd64"],
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
    _store_is_consistent(store)
    again = run_nvkr("build", "--variant", "arch=amd64", cwd=clone, store=store)
    assert again.code == 0, again.stderr
    assert (clone / "dist" / "nvkr-default-k8s1.36" / "index.json").is_file()
    _store_is_consistent(store)
