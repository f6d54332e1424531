"""Run a GitHub Actions workflow here, as a runner fleet would, for the fan-out's execution test.

Jobs run in ``needs`` order (each matrix entry as its own job); every job gets a fresh ``git
clone`` of the source repository (its ``actions/checkout`` step), an empty ``HOME`` (so an empty
nvkr store, ``~/.cache/nvkr``, and no config) and nothing else from the other jobs: whatever a
job needs from an earlier one has to come through the registry the workflow names. ``env:``
values (workflow, then job, then step) are evaluated as GitHub evaluates ``${{ }}``
(:mod:`tests.helpers.ghexpr`) over the ``github``, ``secrets``, ``matrix`` and ``env`` contexts; ``run:``
steps run with ``bash -e`` in the clone. What this does not reproduce: ``runs-on`` (every job
runs on this machine), ``container:`` (the host's tools instead of the pinned image),
``environment:`` protection rules (the secrets given are the ones the event would see).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers import ghexpr

CHECKOUT = "actions/checkout@"


@dataclass
class JobRun:
    """One job instance that ran: its id (``job (unit)`` for a matrix entry), its clone, the
    output of its steps and its wall time in seconds."""

    id: str
    clone: Path
    output: str = ""
    seconds: float = 0.0
    steps: list[str] = field(default_factory=list)


def _order(jobs: dict[str, Any]) -> list[str]:
    done: list[str] = []
    while len(done) < len(jobs):
        ready = [j for j in jobs if j not in done and set(jobs[j].get("needs") or []) <= set(done)]
        if not ready:
            raise AssertionError(f"jobs whose needs never complete: {set(jobs) - set(done)}")
        done.append(ready[0])
    return done


def _text(value: Any) -> str:
    return ghexpr._to_str(value)


def run_workflow(
    workflow: dict[str, Any],
    source: Path,
    work: Path,
    *,
    event: str,
    secrets: dict[str, str],
    path: str,
    event_payload: dict[str, Any] | None = None,
    only: list[str] | None = None,
) -> list[JobRun]:
    """Run ``workflow`` (parsed YAML) on the repository ``source`` under ``work``.

    Args:
        event: ``push`` or ``pull_request`` (``github.event_name``).
        secrets: the ``secrets`` context.
        path: ``PATH`` for the steps (where ``nvkr`` is).
        event_payload: ``github.event``.
        only: run just these job ids (their needs are assumed done).
    Raises:
        AssertionError: a step failed (its output in the message), an unknown ``uses:``.
    """
    github = {
        "event_name": event,
        "event": event_payload or {},
        "ref": "refs/pull/7/merge" if event == "pull_request" else "refs/heads/main",
        "workflow": workflow.get("name", ""),
        "repository": "example/nvkr",
    }
    runs: list[JobRun] = []
    jobs = workflow["jobs"]
    for job_id in _order(jobs):
        if only is not None and job_id not in only:
            continue
        job = jobs[job_id]
        entries = (job.get("strategy") or {}).get("matrix", {}).get("include") or [None]
        for entry in entries:
            name = job_id if entry is None else f"{job_id} ({entry['unit']})"
            contexts = {"github": github, "secrets": secrets, "matrix": entry or {}, "vars": {}}
            runs.append(_run_job(name, job, workflow, contexts, source, work, path))
    return runs


def _env(scopes: list[dict[str, Any]], contexts: dict[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for scope in scopes:
        for key, value in scope.items():
            env[key] = _text(ghexpr.render(str(value), {**contexts, "env": env}))
    return env


def _run_job(
    name: str,
    job: dict[str, Any],
    workflow: dict[str, Any],
    contexts: dict[str, Any],
    source: Path,
    work: Path,
    path: str,
) -> JobRun:
    slug = "".join(c if c.isalnum() else "-" for c in name)
    base = work / slug
    clone, home = base / "workspace", base / "home"
    home.mkdir(parents=True)
    run = JobRun(name, clone)
    started = time.monotonic()
    for step in job["steps"]:
        if "uses" in step:
            if not str(step["uses"]).startswith(CHECKOUT):
                raise AssertionError(f"{name}: cannot run {step['uses']!r} here")
            subprocess.run(
                ["git", "clone", "-q", str(source), str(clone)], check=True, capture_output=True
            )
            run.steps.append("checkout")
            continue
        env = _env(
            [workflow.get("env") or {}, job.get("env") or {}, step.get("env") or {}], contexts
        )
        env.update(
            HOME=str(home),
            PATH=path,
            CI="true",
            GITHUB_ACTIONS="true",
            GITHUB_EVENT_NAME=contexts["github"]["event_name"],
            GITHUB_REF=contexts["github"]["ref"],
            GITHUB_WORKSPACE=str(clone),
            LANG="C.UTF-8",
        )
        proc = subprocess.run(
            ["bash", "-e", "-c", step["run"]],
            cwd=clone,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        run.output += proc.stdout + proc.stderr
        run.steps.append(step.get("name", "run"))
        if proc.returncode != 0:
            raise AssertionError(f"job {name}, step {step.get('name')!r} failed:\n{run.output}")
    run.seconds = time.monotonic() - started
    return run


def venv_path() -> str:
    """``PATH`` with this interpreter's ``bin`` (where the ``nvkr`` script is) first."""
    return os.pathsep.join(
        [str(Path(sys.executable).parent), "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
    )
