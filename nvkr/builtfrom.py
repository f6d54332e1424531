"""What a release set was built from, checked against a project before it stands for the set.

``nvkr verify --rebuild`` (:mod:`nvkr.verify.rebuild`) and ``nvkr publish --with-sources``
(:mod:`nvkr.delivery.withsources`) both take a project directory for a release set: the set's
metadata names its recipe and lockfile by path and digest, and a project whose files have other
digests is refused before anything is built, signed or pushed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from nvkr.errors import UsageError


def check_built_from(name: str, project: Path, found: Mapping[str, tuple[str, str, str]]) -> None:
    """Refuse a project whose recipe or lockfile is not the one release set ``name`` was built
    from: a rebuild (or a source closure) of other inputs says nothing of the set.

    Args:
        found: ``what`` → ``(path in the project, digest the set names, digest found)``.
    Raises:
        UsageError: a digest differs (exit 2), naming both.
    """
    for what, (path, wanted, have) in found.items():
        if have != wanted:
            raise UsageError(
                f"release set {name} was built from {what} {path} at {wanted}, but "
                f"{project / path} is at {have}",
                hint="give the checkout it was built from (--project DIR; a registry REF "
                "published --with-sources needs none: its own project is used)",
            )
