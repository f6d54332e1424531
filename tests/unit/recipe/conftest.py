"""The recipe tests' ``write`` fixture: small recipe trees in tmp_path with exact line numbers
(the shared recipes and constants live in :mod:`tests.helpers.recipes`)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.helpers.recipes import WriteFile


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
