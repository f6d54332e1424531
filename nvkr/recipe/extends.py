"""``extends``: a file and the files it names, merged into one document.

Each file lists its bases relative to itself; they are loaded (recursively) and applied in order,
then the file's own values on top (:func:`nvkr.recipe.merge.merge`). Recipe bases and
the files a criteria overlay extends are loaded the same way; only the keys they may hold differ.
A file reached twice through different bases is read once; a file reached again through its own
chain is a cycle.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from nvkr.errors import RecipeError, RecipeReferenceError
from nvkr.recipe.yamlsource import DocPath, Document, LocationMap, read_yaml, where


@dataclass
class FileReader:
    """Reads each YAML file once and remembers the order files were first read in.

    Attributes:
        files: every file read, in order, as reached (``recipes/base.yaml``), without repeats.
        overrides: bytes to read instead of a file's, by resolved path (edits not yet written).
    """

    files: list[Path] = field(default_factory=list)
    overrides: dict[Path, bytes] = field(default_factory=dict)
    _cache: dict[Path, Document] = field(default_factory=dict)

    def read(self, path: Path) -> Document:
        """The document of ``path`` (see :func:`~nvkr.recipe.yamlsource.read_yaml` for errors)."""
        key = path.resolve()
        cached = self._cache.get(key)
        if cached is None:
            cached = read_yaml(path, self.overrides.get(key))
            self._cache[key] = cached
            self.files.append(path)
        return cached


def load_layers(
    path: Path,
    reader: FileReader,
    allowed_keys: tuple[str, ...] | None = None,
    _chain: tuple[tuple[Path, Path], ...] = (),
) -> list[Document]:
    """``path`` and its ``extends`` bases, recursively, as layers in the order they apply.

    The layers are the files as written (their nulls intact): merging them in order with
    :func:`~nvkr.recipe.merge.merge_all` gives ``merge(merge(base1, base2, ...), this file)``,
    and a ``null`` in a later sibling base (or an overlay file) still deletes an earlier value.
    Pre-merging each file onto its own bases would drop such nulls before they met their target.

    Args:
        path: the file, as reached (relative paths stay relative in messages).
        reader: shared across one load, so each file is read once and ``reader.files`` lists all.
        allowed_keys: top-level keys this file (and its bases) may hold besides ``extends``;
            None allows any (the merged recipe is validated as a whole later).
    Returns:
        The layers, bases first. Only the last (``path`` itself) keeps its ``extends`` key.
    Raises:
        RecipeReferenceError: an ``extends`` file is missing (naming the referencing
            ``FILE:LINE``) or the chain returns to a file already on it (naming the chain).
        RecipeError: a malformed ``extends`` value, a key outside ``allowed_keys``, or any YAML
            error of a file read.
    """
    chain = (*_chain, (path.resolve(), path))
    own = reader.read(path)
    if allowed_keys is not None:
        for key in own.data:
            if key != "extends" and key not in allowed_keys:
                raise RecipeError(
                    f"{where(own.locations, (key,))}: unknown key '{key}' in an overlay file "
                    f"(allowed: extends, {', '.join(allowed_keys)})"
                )
    layers: list[Document] = []
    for index, entry in enumerate(_extends_entries(own)):
        target = resolve_extends(path, entry, own.locations, ("extends", index), chain)
        base_layers = load_layers(target, reader, allowed_keys, chain)
        base_layers[-1] = without_extends(base_layers[-1])
        layers.extend(base_layers)
    layers.append(own)
    return layers


def resolve_extends(
    declared_in: Path,
    entry: str,
    locations: LocationMap,
    entry_path: DocPath,
    chain: tuple[tuple[Path, Path], ...] = (),
) -> Path:
    """The file an ``extends`` entry names, relative to the file that declares it.

    Args:
        declared_in: the declaring file.
        entry: the entry as written.
        locations, entry_path: where the entry was written, for messages.
        chain: ``(resolved, as reached)`` of the files being loaded, outermost first.
    Raises:
        RecipeReferenceError: ``FILE:LINE: extends[0]: extends file 'x.yaml' not found (looked
            for DIR/x.yaml)``; or the target is already on ``chain`` (the message names the chain).
    """
    target = Path(os.path.normpath(declared_in.parent / entry))
    if any(seen == target.resolve() for seen, _ in chain):
        names = " -> ".join(str(shown) for _, shown in chain) + f" -> {target}"
        raise RecipeReferenceError(
            f"{where(locations, entry_path)}: extends cycle: {names}",
            hint="a file cannot extend itself, directly or through its bases",
        )
    if not target.is_file():
        raise RecipeReferenceError(
            f"{where(locations, entry_path)}: extends file '{entry}' not found (looked for {target})",
            hint="extends paths are relative to the file that lists them",
        )
    return target


def _extends_entries(document: Document) -> list[str]:
    entries = document.data.get("extends")
    if entries is None:
        return []
    if not isinstance(entries, list) or not all(isinstance(e, str) and e for e in entries):
        raise RecipeError(
            f"{where(document.locations, ('extends',))}: expected a list of file names (relative to this file)"
        )
    return entries


def without_extends(document: Document) -> Document:
    """``document`` without its ``extends`` key (a base's own bases are already merged in)."""
    if "extends" not in document.data:
        return document
    data = {k: v for k, v in document.data.items() if k != "extends"}
    locations = {p: loc for p, loc in document.locations.items() if p[:1] != ("extends",)}
    return Document(data, locations)
