"""A GitHub Actions workflow from the fan-out's jobs (:mod:`nvkr.ci.jobs`).

One workflow job per job; a matrix job lists its units under ``strategy.matrix.include``
(``unit``, ``runner``, ``args``: at most 256 per matrix, GitHub's limit). Values reach the
steps through ``env:`` only, never as ``${{ }}`` inside a ``run:`` script. Secrets come from
GitHub environments: ``nvkr-cache`` (deployment branches: the default branch only) holds
``NVKR_CACHE_SIGNING_KEY``, the main cache's signing key; ``nvkr-cache-pr`` holds the PR key
under the same name; ``nvkr-release`` (default branch only) ``NVKR_RELEASE_SIGNING_KEY``.
Registry credentials are the secrets ``NVKR_REGISTRY_USERNAME``/``NVKR_REGISTRY_PASSWORD``.
"""

from __future__ import annotations

from typing import Any

from nvkr.ci import CHECKOUT, CiOptions, dump, header, pr_cache, shell_args
from nvkr.ci.jobs import Job, Limits
from nvkr.ci.script import binfmt_lines, final_lines, unit_lines

LIMITS = Limits(matrix=256)
_IS_PR = "github.event_name == 'pull_request'"


def _unit_env(matrix: bool) -> dict[str, str]:
    env = {
        "NVKR_PIPELINE_CACHE_KEY": "${{ secrets.NVKR_CACHE_SIGNING_KEY }}",
        "NVKR_REGISTRY_USERNAME": "${{ secrets.NVKR_REGISTRY_USERNAME }}",
        "NVKR_REGISTRY_PASSWORD": "${{ secrets.NVKR_REGISTRY_PASSWORD }}",
    }
    if matrix:
        env["NVKR_PIPELINE_UNIT_ARGS"] = "${{ matrix.args }}"
    return env


def _container(options: CiOptions) -> dict[str, str]:
    return {"image": options.image, "options": "--privileged"}


def _unit_job(job: Job, options: CiOptions) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    if job.matrix:
        doc["name"] = "${{ matrix.unit }}"
        doc["strategy"] = {
            "fail-fast": False,
            "matrix": {
                "include": [
                    {
                        "unit": u.id,
                        "runner": options.label("github", u.arch),
                        "args": shell_args(u.argv[2:], u.id),
                    }
                    for u in job.units
                ]
            },
        }
        doc["runs-on"] = "${{ matrix.runner }}"
        args = "$NVKR_PIPELINE_UNIT_ARGS"
    else:
        unit = job.units[0]
        doc["runs-on"] = options.label("github", unit.arch)
        args = shell_args(unit.argv[2:], unit.id)
    if job.needs:
        doc["needs"] = list(job.needs)
    doc["container"] = _container(options)
    doc["environment"] = f"${{{{ {_IS_PR} && 'nvkr-cache-pr' || 'nvkr-cache' }}}}"
    doc["env"] = _unit_env(job.matrix)
    script = [*binfmt_lines(), *unit_lines(args, "env://NVKR_PIPELINE_CACHE_KEY", options)]
    doc["steps"] = [{"uses": CHECKOUT}, {"name": "nvkr build", "run": "\n".join(script) + "\n"}]
    return doc


def _final_job(job: Job, options: CiOptions) -> dict[str, Any]:
    doc: dict[str, Any] = {"runs-on": options.label("github", None)}
    if job.needs:
        doc["needs"] = list(job.needs)
    doc["container"] = _container(options)
    doc["environment"] = f"${{{{ {_IS_PR} && 'nvkr-cache-pr' || 'nvkr-release' }}}}"
    doc["env"] = {
        "NVKR_PIPELINE_RELEASE_KEY": "${{ secrets.NVKR_RELEASE_SIGNING_KEY }}",
        "NVKR_REGISTRY_USERNAME": "${{ secrets.NVKR_REGISTRY_USERNAME }}",
        "NVKR_REGISTRY_PASSWORD": "${{ secrets.NVKR_REGISTRY_PASSWORD }}",
    }
    argvs = [shell_args(u.argv[2:], u.id) for u in job.units]
    script = final_lines(argvs, "env://NVKR_PIPELINE_RELEASE_KEY", options)
    doc["steps"] = [
        {"uses": CHECKOUT},
        {"name": "assemble, sign and publish", "run": "\n".join(script) + "\n"},
    ]
    return doc


def render(jobs: list[Job], options: CiOptions, command: list[str], title: str) -> str:
    """The workflow text (header first); ``command`` is the argv recorded in the header."""
    doc: dict[str, Any] = {
        "name": title,
        "on": {
            "push": {"branches": [options.default_branch]},
            "pull_request": {},
            "workflow_dispatch": {},
        },
        "permissions": {"contents": "read"},
        "concurrency": {
            "group": "${{ github.workflow }}-${{ github.ref }}",
            "cancel-in-progress": "${{ github.event_name == 'pull_request' }}",
        },
        "env": {
            "NVKR_PIPELINE_CACHE": options.cache,
            "NVKR_PIPELINE_PR_CACHE": (
                f"${{{{ {_IS_PR} && format('{pr_cache(options.cache, '{0}')}', "
                f"github.event.pull_request.number) || '' }}}}"
            ),
        },
        "jobs": {},
    }
    for job in jobs:
        if job.kind == "final":
            doc["jobs"][job.id] = _final_job(job, options)
        else:
            doc["jobs"][job.id] = _unit_job(job, options)
    return header(command) + dump(doc)
