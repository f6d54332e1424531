"""The ``path`` source kind: a directory of the repository that holds the recipe.

Path sources are the project's own files (an agent's Go module, a chart), so they are hashed on
every ``nvkr lock`` and ``nvkr build``: the directory becomes a deterministic tar
(:func:`nvkr.repro.tar_bytes`, epoch 0, ``.git`` and the source's ``exclude`` patterns left out)
whose sha256 is the source digest.
Because the tar normalises mtimes, owners and modes, two checkouts of the same tree give the same
digest whatever their umask or clock. The lockfile's copy of the digest is informational: the
files on disk are the truth, and :func:`ensure` returns their digest as of now.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nvkr.canonical import sha256_bytes
from nvkr.errors import FetchError
from nvkr.fetch.context import FetchContext, check_entry
from nvkr.recipe.sources import PathSource
from nvkr.repro import tar_bytes


def _store_tree(name: str, source: PathSource, ctx: FetchContext, base_dir: Path) -> str:
    root = base_dir / source.path
    if not root.is_dir():
        state = "is not a directory" if root.exists() else "does not exist"
        raise FetchError(
            f"source {name!r}: {root} {state} (path {source.path!r} relative to {base_dir})",
            hint="path sources name a directory relative to the recipe file that declares them",
        )
    data = tar_bytes(root, epoch=0, exclude=source.exclude or ())
    digest = sha256_bytes(data)
    # the usual rebuild finds the tree unchanged: skip the temp file, fsync and rename
    if not ctx.store.has_blob(digest):
        ctx.store.add_bytes(data)
    return digest


def resolve(name: str, source: PathSource, ctx: FetchContext, *, base_dir: Path) -> dict[str, Any]:
    """Hash ``base_dir / source.path`` into the store.

    Returns:
        ``{"kind": "path", "path": <as in the recipe>, "digest": "sha256:<hex>"}``, the digest of
        the directory's deterministic tar (also added to the store).
    Raises:
        FetchError: the directory does not exist.
        RecipeError: it holds something other than files, directories and symlinks.
    """
    return {"kind": "path", "path": source.path, "digest": _store_tree(name, source, ctx, base_dir)}


def ensure(
    name: str, source: PathSource, resolved: dict[str, Any], ctx: FetchContext, *, base_dir: Path
) -> str:
    """Hash the directory again (it may have changed since the lock) and return its
    ``sha256:<hex>``; ``resolved`` may lack a digest. Works offline.

    Raises:
        LockError: ``resolved`` is not a path entry for this path.
        FetchError, RecipeError: as :func:`resolve`.
    """
    check_entry(name, resolved, "path", needs_digest=False, **source.lock_identity())
    return _store_tree(name, source, ctx, base_dir)
