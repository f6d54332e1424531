"""The builder table is the one list of builders: each line agrees with its builder, the
recipe's artifact union is the table's models, and the light modules import without cycles."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nvkr.builders.api import Builder, ReleaseKind, get_builder
from nvkr.builders.table import BUILDER_TABLE
from nvkr.recipe import models


@pytest.mark.parametrize("line", BUILDER_TABLE, ids=lambda line: line.name)
def test_each_line_agrees_with_its_builder(line) -> None:
    builder = get_builder(line.name)
    assert Builder in type(builder).__mro__  # subclasses the protocol: its defaults hold
    assert builder.name == line.name
    assert builder.artifact_model is line.artifact
    assert isinstance(builder.release_kind, ReleaseKind)
    if line.artifact is not None:
        assert line.artifact.model_fields["builder"].annotation.__args__ == (line.name,)


def test_the_recipe_names_the_builders_of_the_lines_with_a_model() -> None:
    with_model = [line for line in BUILDER_TABLE if line.artifact is not None]
    assert tuple(line.artifact for line in with_model) == models.ARTIFACT_MODELS
    assert tuple(sorted(line.name for line in with_model)) == models.BUILDERS


@pytest.mark.parametrize(
    "module",
    [
        "nvkr.builders.table",
        "nvkr.fetch.table",
        "nvkr.recipe.sources",
        "nvkr.recipe.base",
        "nvkr.recipe.imagefiles",
        *(line.artifact.__module__ for line in BUILDER_TABLE if line.artifact is not None),
        "nvkr.recipe.models",
        "nvkr.action",
    ],
)
def test_a_light_module_imports_first_without_a_cycle(module: str) -> None:
    # a fresh interpreter: the first import of a module is where a cycle would fail
    probe = f"import {module}; import nvkr.recipe.models as m; print(len(m.ARTIFACT_MODELS))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(len(models.ARTIFACT_MODELS))


def test_builders_do_not_import_the_planner() -> None:
    probe = (
        "import sys\n"
        "from nvkr.builders.table import BUILDER_TABLE\n"
        "from nvkr.builders.api import get_builder\n"
        "for line in BUILDER_TABLE: get_builder(line.name)\n"
        "print('nvkr.plan' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
