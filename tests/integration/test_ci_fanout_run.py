"""The fan-out for real (issue 14 item 6): the GitHub workflow ``nvkr ci generate`` writes, run
job by job in ``needs`` order, each job in a fresh clone with an empty store and its own HOME,
sharing nothing but a loopback CNCF distribution registry (:mod:`tests.helpers.gharun`); the final job's
release set is byte-identical to a single-machine build of the same commit, and is published.
A pull request's jobs then read the main cache and write only their own repository.

The recipe is the small fan recipe (:mod:`tests.helpers.fanout`: 2 GPU generations x 2 arches of two
images, their indexes, a chart; ~20 actions, path sources only), not the default one: the
mechanism is the same, and its CI cost is seconds per job instead of a default build per runner.

This needs the remote action cache (``--cache-from``, ``--cache-to``, ``--cached-only``: issue 14
items 1-3, built on the branch beside this one). Without those options the test fails, saying so;
it never skips.
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

pytestmark = pytest.mark.slow

CACHE_FLAGS = ("--cache-from", "--cache-to", "--cache-mode", "--cache-sign-key", "--cache-trust")
SET = "fan-k8s1.36"
IMAGE = "registry.example/nvkr/nvkr-ci@sha256:" + "0" * 64  # steps run on this host, not in it


def _require_the_remote_cache() -> None:
    help_text = subprocess.run(
        [sys.executable, "-m", "nvkr", "build", "--help"], capture_output=True, text=True
    ).stdout
    missing = [flag for flag in (*CACHE_FLAGS, "--cached-only") if flag not in help_text]
    if missing:
        pytest.fail(
            "the fan-out runs its jobs against the remote action cache (issue 14 items 1-3), "
            f"and this nvkr build has no {', '.join(missing)}: merge the cache branch first",
            pytrace=False,
        )


def _git(repo, *args):
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
        cwd=repo, check=True, capture_output=True,
    )  # fmt: skip


def _keys(project, tmp_path):
    """Key pairs: the public halves committed in ci/keys/, the private ones as the secrets."""
    (project / "ci" / "keys").mkdir(parents=True)
    pems = {}
    for name, kind in (("cache", "ecdsa-p256"), ("cache-pr", "ecdsa-p256"), ("release", "ed25519")):
        prefix = tmp_path / "keys" / name
        prefix.parent.mkdir(exist_ok=True)
        res = run_nvkr(
            "keys",
            "generate",
            "--type",
            kind,
            "--out",
            str(prefix),
            cwd=project,
            store=tmp_path / "k",
        )
        assert res.code == 0, res.stderr
        if name != "release":
            (project / "ci" / "keys" / f"nvkr-{name}.pub").write_bytes(
                prefix.with_suffix(".pub").read_bytes()
            )
        pems[name] = prefix.with_suffix(".key")
    return pems


def test_the_generated_workflow_runs_across_fresh_runners(registry, tmp_path):
    _require_the_remote_cache()
    source = write_fan_project(tmp_path / "source")
    locked = run_nvkr("lock", "recipes/fan.yaml", cwd=source, store=tmp_path / "lock-store")
    assert locked.code == 0, locked.stderr
    keys = _keys(source, tmp_path)
    cache, releases = f"{registry.host}/fan/cache", f"{registry.host}/fan/releases"
    workflow_path = source / ".github" / "workflows" / "fan.yml"
    generated = run_nvkr(
        "ci", "generate", "github", "recipes/fan.yaml", "--by", "action", "--cache", cache,
        "--push", releases, "--image", IMAGE, "--out", ".github/workflows/fan.yml",
        cwd=source, store=tmp_path / "lock-store",
    )  # fmt: skip
    assert generated.code == 0, generated.stderr
    _git(source, "init", "-q", "-b", "main")
    _git(source, "add", "-A")
    _git(source, "commit", "-q", "-m", "fan")
    workflow = yaml.safe_load(workflow_path.read_text())

    runs = run_workflow(
        workflow,
        source,
        tmp_path / "runners",
        event="push",
        secrets={
            "NVKR_CACHE_SIGNING_KEY": keys["cache"].read_text(),
            "NVKR_RELEASE_SIGNING_KEY": keys["release"].read_text(),
        },
        path=venv_path(),
    )
    assert runs[-1].id == "final"
    assert len(runs) == sum(
        len((j.get("strategy") or {}).get("matrix", {}).get("include") or [None])
        for j in workflow["jobs"].values()
    )
    final = runs[-1].clone / "dist" / SET

    # the same commit, built on one machine, signed with the same (deterministic) key
    single = tmp_path / "single"
    _git(tmp_path, "clone", "-q", str(source), str(single))
    built = run_nvkr(
        "build", "recipes/fan.yaml", "--locked", "--sign", str(keys["release"]),
        cwd=single, store=tmp_path / "single-store",
    )  # fmt: skip
    assert built.code == 0, built.stderr
    alone = single / "dist" / SET
    assert (final / "index.json").read_bytes() == (alone / "index.json").read_bytes()
    blobs = lambda d: {p.name: p.read_bytes() for p in (d / "blobs" / "sha256").iterdir()}  # noqa: E731
    assert blobs(final) == blobs(alone)

    client = RegistryClient(registry.host)
    index = json.loads((final / "index.json").read_bytes())["manifests"][0]["digest"]
    assert client.manifest_digest("fan/releases", SET) == index, "the final job published it"
    main_tags = sorted(client.tags("fan/cache"))
    assert main_tags, "the unit jobs wrote the main cache"

    # A pull request that changes the image's files: its first jobs rebuild what changed and
    # write only the PR's repository; the main cache is as it was.
    (source / "files" / "tool.conf").write_text("greeting = bonjour\n")
    _git(source, "commit", "-q", "-am", "pr")
    first_wave = [j for j, job in workflow["jobs"].items() if not job.get("needs")]
    run_workflow(
        workflow,
        source,
        tmp_path / "pr-runners",
        event="pull_request",
        event_payload={"pull_request": {"number": 7}},
        secrets={"NVKR_CACHE_SIGNING_KEY": keys["cache-pr"].read_text()},
        path=venv_path(),
        only=first_wave,
    )
    assert sorted(client.tags("fan/cache")) == main_tags, "a pull request never writes main"
    assert client.tags("fan/cache-pr-7"), "it writes its own repository"
