"""The generated GitHub workflow, run by the test runner (:mod:`tests.helpers.gharun`) with one shared
store standing in for the remote action cache: ``nvkr`` on the jobs' PATH is a wrapper that
drops the cache options and points every job at the same store, and checks ``--cached-only``
by building with ``--json`` and failing when any builder ran.

What this covers without the remote cache (issue 14 items 1-3, another branch): the jobs' order
and needs, the matrix entries, every job's env and shell, that each unit finds what it needs
built by the jobs it needs, that the final assembly builds nothing, signs with the secret's key,
publishes to a real registry, and gives the release set of a single-machine build. The test
with the real cache, each runner on its own store, is tests/integration/test_ci_fanout_run.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from nvkr.oci.registry import RegistryClient
from tests.helpers.fanout import write_fan_project
from tests.helpers.gharun import run_workflow, venv_path
from tests.helpers.nvkr import run_nvkr

pytestmark = pytest.mark.slow  # a dozen nvkr builds, ~20-50 s

SET = "fan-k8s1.36"
IMAGE = "registry.example/nvkr/nvkr-ci@sha256:" + "0" * 64

WRAPPER = """\
#!{python}
import json, os, subprocess, sys
VALUED = {{"--cache-from", "--cache-to", "--cache-mode", "--cache-sign-key", "--cache-trust"}}
args, cached_only, i = [], False, 1
while i < len(sys.argv):
    if sys.argv[i] in VALUED:
        i += 2
        continue
    if sys.argv[i] == "--cached-only":
        cached_only = True
    else:
        args.append(sys.argv[i])
    i += 1
with open({log!r}, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
env = {{**os.environ, "NVKR_CACHE": {store!r}}}
if not cached_only:
    sys.exit(subprocess.run([sys.executable, "-m", "nvkr", *args], env=env).returncode)
proc = subprocess.run([sys.executable, "-m", "nvkr", *args, "--json"], env=env, capture_output=True, text=True)
sys.stderr.write(proc.stderr)
if proc.returncode != 0:
    sys.exit(proc.returncode)
result = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{{")][-1]
if result["built"]:
    sys.exit("--cached-only: builders ran for " + ", ".join(result["built"]))
"""


@pytest.fixture
def project(tmp_path):
    source = write_fan_project(tmp_path / "source")
    store = tmp_path / "lock-store"
    locked = run_nvkr("lock", "recipes/fan.yaml", cwd=source, store=store)
    assert locked.code == 0, locked.stderr
    return source


def _git(repo, *args):
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
        cwd=repo, check=True, capture_output=True,
    )  # fmt: skip


@pytest.mark.parametrize("by", ["action", "variant"])
def test_the_workflow_runs_in_needs_order_and_the_final_job_builds_nothing(
    project,
    registry,
    tmp_path,
    by,
):
    releases = f"{registry.host}/fan/releases-{by}"
    out = ".github/workflows/fan.yml"
    generated = run_nvkr(
        "ci", "generate", "github", "recipes/fan.yaml", "--by", by, "--cache",
        f"{registry.host}/fan/cache", "--push", releases, "--image", IMAGE, "--out", out,
        cwd=project, store=tmp_path / "lock-store",
    )  # fmt: skip
    assert generated.code == 0, generated.stderr
    key = tmp_path / "release"
    assert (
        run_nvkr(
            "keys",
            "generate",
            "--type",
            "ed25519",
            "--out",
            str(key),
            cwd=project,
            store=tmp_path / "k",
        ).code
        == 0
    )
    _git(project, "init", "-q", "-b", "main")
    _git(project, "add", "-A")
    _git(project, "commit", "-q", "-m", "fan")
    bin_dir, log, shared = tmp_path / "bin", tmp_path / "argv.jsonl", tmp_path / "shared-store"
    bin_dir.mkdir()
    (bin_dir / "nvkr").write_text(
        WRAPPER.format(python=sys.executable, log=str(log), store=str(shared))
    )
    (bin_dir / "nvkr").chmod(0o755)
    workflow = yaml.safe_load((project / out).read_text())
    runs = run_workflow(
        workflow,
        project,
        tmp_path / "runners",
        event="push",
        secrets={"NVKR_RELEASE_SIGNING_KEY": (tmp_path / "release.key").read_text()},
        path=f"{bin_dir}:{venv_path()}",
    )
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == len(runs) and runs[-1].id == "final"
    for argv in calls[:-1]:  # the units write the main cache on a push
        assert argv[argv.index("--cache-to") + 1] == f"{registry.host}/fan/cache"
    final = calls[-1]
    assert "--cached-only" in final and final[final.index("--push") + 1] == releases
    assert final[final.index("--sign") + 1] == "env://NVKR_PIPELINE_RELEASE_KEY"

    single = tmp_path / "single"
    built = run_nvkr(
        "build", "recipes/fan.yaml", "--locked", "--sign", str(tmp_path / "release.key"),
        "--out", str(single), cwd=project, store=tmp_path / "single-store",
    )  # fmt: skip
    assert built.code == 0, built.stderr
    dist = runs[-1].clone / "dist" / SET
    assert (dist / "index.json").read_bytes() == (single / SET / "index.json").read_bytes()
    index = json.loads((dist / "index.json").read_bytes())["manifests"][0]["digest"]
    assert RegistryClient(registry.host).manifest_digest(releases.split("/", 1)[1], SET) == index
