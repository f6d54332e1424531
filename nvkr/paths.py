"""How nvkr names a file the user gave it in what it prints and records."""

from __future__ import annotations

import os
from pathlib import Path


def display_path(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it (stable across clones)."""
    p = Path(os.path.abspath(path))
    try:
        return p.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return p.as_posix()
