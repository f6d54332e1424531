"""A GitLab CI pipeline (``.gitlab-ci.yml``) from the fan-out's jobs (:mod:`nvkr.ci.jobs`).

A matrix job is ``parallel: matrix:`` with one entry per unit (``NVKR_PIPELINE_UNIT``,
``NVKR_PIPELINE_UNIT_ARGS``, ``NVKR_PIPELINE_RUNNER`` for its ``tags``), at most 200 per job
(GitLab's limit) and at most the ``needs`` cap, since GitLab counts every instance a job needs
against it (50 on GitLab.com; ``--max-needs`` for an instance set otherwise); aggregator jobs
sit between a job and more needs than that. ``workflow: rules:`` pick the caches: a merge
request pipeline reads the main cache and writes ``<cache>-pr-<iid>`` signed with the CI/CD
variable ``NVKR_MR_CACHE_SIGNING_KEY``; a default-branch pipeline writes the main cache with
``NVKR_CACHE_SIGNING_KEY`` and signs releases with ``NVKR_RELEASE_SIGNING_KEY`` (both
protected variables, which merge requests never see); other pipelines do not run. Runners
must be privileged Docker executors with the tags the jobs name.
"""

from __future__ import annotations

from typing import Any

from nvkr.ci import CiOptions, dump, header, pr_cache, shell_args
from nvkr.ci.jobs import Job, Limits
from nvkr.ci.script import binfmt_lines, final_lines, unit_lines

MATRIX_LIMIT = 200
#: Top-level keys a job may not be named (GitLab reads them as keywords).
RESERVED = frozenset(
    {"image", "services", "stages", "types", "before_script", "after_script", "variables",
     "cache", "include", "workflow", "default", "pages", "spec"}
)  # fmt: skip


def limits(options: CiOptions) -> Limits:
    return Limits(matrix=options.max_matrix or MATRIX_LIMIT, needs=options.max_needs)


def job_name(job_id: str) -> str:
    """``job_id`` as a GitLab job name (a reserved keyword gets ``-job``)."""
    return f"{job_id}-job" if job_id in RESERVED else job_id


def _unit_job(job: Job, options: CiOptions) -> dict[str, Any]:
    doc: dict[str, Any] = {"stage": "build"}
    if job.matrix:
        doc["parallel"] = {
            "matrix": [
                {
                    "NVKR_PIPELINE_UNIT": u.id,
                    "NVKR_PIPELINE_UNIT_ARGS": shell_args(u.argv[2:], u.id),
                    "NVKR_PIPELINE_RUNNER": options.label("gitlab", u.arch),
                }
                for u in job.units
            ]
        }
        doc["tags"] = ["$NVKR_PIPELINE_RUNNER"]
        args = "$NVKR_PIPELINE_UNIT_ARGS"
    else:
        unit = job.units[0]
        doc["tags"] = [options.label("gitlab", unit.arch)]
        args = shell_args(unit.argv[2:], unit.id)
    doc["needs"] = [job_name(n) for n in job.needs]
    key = '"env://$NVKR_PIPELINE_CACHE_KEY_VAR"'
    doc["script"] = [*binfmt_lines(), "\n".join(unit_lines(args, key, options)) + "\n"]
    return doc


def _final_job(job: Job, options: CiOptions) -> dict[str, Any]:
    argvs = [shell_args(u.argv[2:], u.id) for u in job.units]
    script = final_lines(argvs, "env://NVKR_RELEASE_SIGNING_KEY", options)
    return {
        "stage": "release",
        "tags": [options.label("gitlab", None)],
        "needs": [job_name(n) for n in job.needs],
        "script": ["\n".join(script) + "\n"],
    }


def _aggregate_job(job: Job, options: CiOptions) -> dict[str, Any]:
    return {
        "stage": "build",
        "tags": [options.label("gitlab", None)],
        "needs": [job_name(n) for n in job.needs],
        "script": ["echo 'these jobs are done:' " + " ".join(job.needs)],
    }


def render(jobs: list[Job], options: CiOptions, command: list[str], title: str) -> str:
    """The pipeline text (header first); ``command`` is the argv recorded in the header."""
    mr = '$CI_PIPELINE_SOURCE == "merge_request_event"'
    doc: dict[str, Any] = {
        "workflow": {
            "name": title,
            "rules": [
                {
                    "if": mr,
                    "variables": {
                        "NVKR_PIPELINE_PR_CACHE": pr_cache(options.cache, "$CI_MERGE_REQUEST_IID"),
                        "NVKR_PIPELINE_CACHE_KEY_VAR": "NVKR_MR_CACHE_SIGNING_KEY",
                    },
                },
                {
                    "if": "$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH",
                    "variables": {
                        "NVKR_PIPELINE_PR_CACHE": "",
                        "NVKR_PIPELINE_CACHE_KEY_VAR": "NVKR_CACHE_SIGNING_KEY",
                    },
                },
            ],
        },
        "variables": {"NVKR_PIPELINE_CACHE": options.cache},
        "default": {"image": {"name": options.image}},
        "stages": ["build", "release"],
    }
    for job in jobs:
        render_job = {"final": _final_job, "aggregate": _aggregate_job}.get(job.kind, _unit_job)
        doc[job_name(job.id)] = render_job(job, options)
    return header(command) + dump(doc)
