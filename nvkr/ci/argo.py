"""An Argo ``Workflow`` from the fan-out's jobs (:mod:`nvkr.ci.jobs`): one DAG task per unit.

Argo has no pull requests and no matrix limit: each unit is a task of the ``main`` DAG with its
``dependencies``, running the ``unit`` template (the CI image, privileged, on a node whose
``kubernetes.io/arch`` is the unit's runner label) in a checkout of the workflow's ``repo`` at
``revision`` (Argo's git input artifact). A trigger for a pull request (an Argo Events sensor)
passes ``pr-cache=<cache>-pr-<number>`` and ``cache-key-secret`` naming the PR key's Secret;
runs of the default branch keep the defaults, which read and write the main cache only, and
publish. Secrets (key ``key.pem``): ``nvkr-cache-signing-key``, ``nvkr-release-signing-key``;
``nvkr-registry`` (keys ``username``, ``password``) for the registry.
"""

from __future__ import annotations

from typing import Any

from nvkr.ci import CiOptions, dump, header, shell_args
from nvkr.ci.jobs import Job, Limits
from nvkr.ci.script import binfmt_lines, final_lines, unit_lines

LIMITS = Limits(matrix=1 << 30)


def _secret_env(name: str, secret: str, key: str, optional: bool = False) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": secret, "key": key}
    if optional:
        ref["optional"] = True
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


def _env(key_var: str, key_secret: str, optional: bool = False) -> list[dict[str, Any]]:
    return [
        {"name": "NVKR_PIPELINE_CACHE", "value": "{{workflow.parameters.cache}}"},
        {"name": "NVKR_PIPELINE_PR_CACHE", "value": "{{workflow.parameters.pr-cache}}"},
        _secret_env(key_var, key_secret, "key.pem", optional=optional),
        _secret_env("NVKR_REGISTRY_USERNAME", "nvkr-registry", "username", optional=True),
        _secret_env("NVKR_REGISTRY_PASSWORD", "nvkr-registry", "password", optional=True),
    ]


def _template(
    name: str, options: CiOptions, script: str, env: list[dict[str, Any]], args: bool
) -> Any:
    params = [{"name": "args"}] if args else []
    return {
        "name": name,
        "inputs": {
            "parameters": [*params, {"name": "node-arch"}],
            "artifacts": [
                {
                    "name": "source",
                    "path": "/src",
                    "git": {
                        "repo": "{{workflow.parameters.repo}}",
                        "revision": "{{workflow.parameters.revision}}",
                    },
                }
            ],
        },
        "nodeSelector": {"kubernetes.io/arch": "{{inputs.parameters.node-arch}}"},
        "container": {
            "image": options.image,
            "command": ["sh", "-ec"],
            "args": [script],
            "workingDir": "/src",
            "env": env,
            "securityContext": {"privileged": True},
        },
    }


def _task(job: Job, template: str, args: str | None, arch: str) -> dict[str, Any]:
    params = [{"name": "args", "value": args}] if args is not None else []
    task: dict[str, Any] = {
        "name": job.id,
        "template": template,
        "arguments": {"parameters": [*params, {"name": "node-arch", "value": arch}]},
    }
    if job.needs:
        task["dependencies"] = list(job.needs)
    return task


def render(jobs: list[Job], options: CiOptions, command: list[str], title: str) -> str:
    """The Workflow text (header first); ``command`` is the argv recorded in the header."""
    tasks: list[dict[str, Any]] = []
    final_args: list[str] = []
    for job in jobs:
        if job.kind == "final":
            final_args = [shell_args(u.argv[2:], u.id) for u in job.units]
            tasks.append(_task(job, "final", None, options.label("argo", None)))
            continue
        for unit in job.units:  # a matrix of the other platforms is one task per unit here
            sub = Job(unit.id if job.matrix else job.id, [unit], job.needs)
            arch = options.label("argo", unit.arch)
            tasks.append(_task(sub, "unit", shell_args(unit.argv[2:], unit.id), arch))
    # ... so a need on a matrix job is a need on each of its units
    members = {j.id: [u.id for u in j.units] for j in jobs if j.matrix}
    for task in tasks:
        if "dependencies" in task:
            deps: list[str] = []
            for dep in task["dependencies"]:
                deps += members.get(dep, [dep])
            task["dependencies"] = deps
    unit_script = [
        *binfmt_lines(),
        *unit_lines("{{inputs.parameters.args}}", "env://NVKR_PIPELINE_CACHE_KEY", options),
    ]
    final_script = final_lines(final_args, "env://NVKR_PIPELINE_RELEASE_KEY", options)
    doc: dict[str, Any] = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": f"{title}-", "labels": {"app.kubernetes.io/name": "nvkr"}},
        "spec": {
            "entrypoint": "main",
            "arguments": {
                "parameters": [
                    {"name": "repo"},
                    {"name": "revision", "value": options.default_branch},
                    {"name": "cache", "value": options.cache},
                    {"name": "pr-cache", "value": ""},
                    {"name": "cache-key-secret", "value": "nvkr-cache-signing-key"},
                ]
            },
            "templates": [
                {"name": "main", "dag": {"tasks": tasks}},
                _template(
                    "unit",
                    options,
                    "\n".join(unit_script) + "\n",
                    _env("NVKR_PIPELINE_CACHE_KEY", "{{workflow.parameters.cache-key-secret}}"),
                    args=True,
                ),
                _template(
                    "final",
                    options,
                    "\n".join(final_script) + "\n",
                    # a pull request's run neither signs nor publishes: it needs no release key
                    _env("NVKR_PIPELINE_RELEASE_KEY", "nvkr-release-signing-key", optional=True),
                    args=False,
                ),
            ],
        },
    }
    return header(command) + dump(doc)
