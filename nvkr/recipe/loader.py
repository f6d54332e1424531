"""Load a recipe file: read, apply ``extends``, validate, prepare overlays, compute its digest.

The entry point of the data flow (docs/architecture.md, "The data flow": ``recipes/*.yaml`` ──load,
extends, overlays──▶ Recipe). The result, a :class:`LoadedRecipe`, is what matrix expansion
(:func:`nvkr.recipe.matrix.expand`), the lockfile (its ``digest`` is the recipe checksum) and path
sources (``source_dirs``) build on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nvkr.canonical import digest_json
from nvkr.errors import RecipeError
from nvkr.recipe.extends import FileReader, load_layers
from nvkr.recipe.merge import merge_all
from nvkr.recipe.models import Recipe
from nvkr.recipe.overlays import OverlayLayer, build_layers, check_criteria
from nvkr.recipe.validation import reject_floats, validate
from nvkr.recipe.versionfields import canonical_document
from nvkr.recipe.yamlsource import EMPTY, Document, LocationMap, locate, where
from nvkr.redact import redact_urls

#: ``kind`` of a partial recipe file that leaf recipes ``extends`` (recipes/gpu/*.yaml, ...).
LAYER_KIND = "RecipeLayer"


@dataclass(frozen=True)
class LoadedRecipe:
    """A recipe merged with its bases and validated; overlays prepared but not applied.

    Attributes:
        path: the recipe file as given.
        recipe: the merged, validated recipe (templates not rendered, overlays not applied).
        digest: ``sha256:<hex>`` of the canonical JSON of the merged raw document; when criteria
            overlays extend files, of ``{"recipe": <merged document>, "overlayFiles": [[<each
            file an overlay applies, as written>, ...], ...]}``. Comments, formatting, key order and how values are split
            across files do not change it, nor the spelling of an exact Kubernetes release
            (``v1.36.4`` is ``1.36.4``, :mod:`nvkr.recipe.versionfields`); any value change does.
        files: every file read, in the order first read (the recipe first), without repeats.
        locations: ``{path tuple: Location}`` of the merged document.
        source_dirs: per source name, the directory of the file that declared its winning value
            (``path`` sources are relative to it).
        document: the merged raw document (data + locations) that ``recipe`` validated.
        overlays: one prepared layer per entry of ``recipe.overlays``.
    """

    path: Path
    recipe: Recipe
    digest: str
    files: tuple[Path, ...]
    locations: LocationMap
    source_dirs: dict[str, Path]
    document: Document = field(default=EMPTY, repr=False, compare=False)
    overlays: tuple[OverlayLayer, ...] = field(default=(), repr=False, compare=False)


def load_recipe(path: Path, overrides: Mapping[Path, bytes] | None = None) -> LoadedRecipe:
    """Read the recipe at ``path`` and everything it extends; validate the merged result.

    ``extends`` entries are relative to the declaring file and applied in order as bases:
    ``merge(merge(base1, base2, ...), this file)`` with maps merged by key, lists replaced and
    ``null`` deleting the key. Base files may be partial; the merged document must be a whole
    :class:`~nvkr.recipe.models.Recipe`. Files named by criteria overlays are read too (for the
    digest and to fail early) but only applied per variant by :func:`nvkr.recipe.matrix.expand`.

    ``overrides`` maps resolved file paths to bytes read instead of the files' (a recipe edit
    checked before it is written); locations still name the files.

    Raises:
        RecipeError: unreadable file, YAML syntax error, duplicate key, schema errors (one
            ``FILE:LINE: field.path: ...`` line each, with a quoting hint for ``1.30``/``no``),
            matrix or overlay criteria errors (see :func:`nvkr.recipe.overlays.check_criteria`).
        RecipeReferenceError: a missing ``extends`` file (naming the referencing line) or an
            ``extends`` cycle (naming the chain).
        UnknownBuilderError: an artifact names a builder nvkr does not have.
    """
    reader = FileReader(overrides={Path(k).resolve(): v for k, v in (overrides or {}).items()})
    files = load_layers(path, reader)
    own = files[-1]
    if isinstance(own.data, Mapping) and own.data.get("kind") == LAYER_KIND:
        raise RecipeError(
            f"{where(own.locations, ('kind',))}: {LAYER_KIND} is a recipe layer, a "
            "part other recipes extend; it cannot be built or locked on its own",
            hint="use a leaf recipe that extends it (nvkr recipes list shows them)",
        )
    document = merge_all(files)
    recipe = validate(Recipe, document.data, document.locations)
    check_criteria(recipe, document.locations)
    layers = build_layers(recipe, document, reader)
    # Overlay values are free-form until applied; a float there would break the digest.
    reject_floats(document.data, (), document.locations)
    return LoadedRecipe(
        path=path,
        recipe=recipe,
        digest=_digest(document, layers),
        files=tuple(reader.files),
        locations=document.locations,
        source_dirs=declaring_dirs(recipe.sources, document.locations),
        document=document,
        overlays=layers,
    )


def declaring_dirs(source_names: Iterable[str], locations: LocationMap) -> dict[str, Path]:
    """Per source name, the directory of the file that wrote its ``path`` (else the source).

    Raises nothing: every source of a loaded document has a location.
    """
    dirs: dict[str, Path] = {}
    for name in source_names:
        location = locations.get(("sources", name, "path")) or locate(locations, ("sources", name))
        if location is not None:
            dirs[name] = location.file.parent
    return dirs


def _digest(document: Document, layers: tuple[OverlayLayer, ...]) -> str:
    # One version, one digest: `v1.36.4` and `1.36.4` are the same recipe (versionfields). One
    # recipe whatever its credentials: every URL's user info is stripped first (nvkr.redact),
    # so a rotated password is no drift, moves no key, and the published digest (lockfile,
    # provenance) gives no offline test of a guessed one.
    overlay_files: list[list[Mapping[str, Any]]] = [
        [redact_urls(canonical_document(f.data)) for f in layer.files] for layer in layers
    ]
    data = redact_urls(canonical_document(document.data))
    if not any(overlay_files):
        return digest_json(data)
    return digest_json({"recipe": data, "overlayFiles": overlay_files})
