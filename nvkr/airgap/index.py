"""The index of an air-gap export (``DIR/index.json``, shape in :mod:`nvkr.airgap`): its
version, its name, and :func:`read_index`, which import and serve read it through.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nvkr.errors import IntegrityError, UsageError

MIRROR_VERSION = 1
INDEX = "index.json"
READ_CHUNK = 1 << 20  # bytes per read when hashing or sending a blob


# -- import ------------------------------------------------------------------------------------
def read_index(directory: Path) -> dict[str, Any]:
    """``DIR/index.json`` of an export, checked for shape.

    Raises:
        UsageError: there is none (not an export, or an export that did not finish).
        IntegrityError: it is not valid JSON or not a mirror index of this version.
    """
    path = directory / INDEX
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        raise UsageError(
            f"{directory} is not an nvkr mirror export: it has no {INDEX}",
            hint="give the DIR of `nvkr mirror export`; an interrupted export writes no index: run it again",
        ) from None
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise IntegrityError(f"{path}: not valid JSON: {e}") from e
    ok = (
        isinstance(doc, dict)
        and doc.get("nvkrMirror") == MIRROR_VERSION
        and isinstance(doc.get("sources"), list)
        and all(
            isinstance(s, dict)
            and isinstance(s.get("blobs"), list)
            and all(
                isinstance(b, dict)
                and isinstance(b.get("digest"), str)
                and b["digest"].startswith("sha256:")
                and len(b["digest"]) == 71
                and isinstance(b.get("size"), int)
                for b in s["blobs"]
            )
            for s in doc["sources"]
        )
    )
    if not ok:
        raise IntegrityError(f"{path}: not an nvkr mirror index (nvkrMirror {MIRROR_VERSION})")
    result: dict[str, Any] = doc
    return result
