"""The overlay merge: how a file's values land on its bases (README, "Recipes": "Merging").

``extends`` bases, criteria overlays and the files they extend are all merged with one rule set:
mappings merge by key, lists (and scalars) replace, and ``null`` deletes the key. Locations merge
the same way, so after any number of layers each value still points at the file and line that
supplied it, which is what error messages and path sources (relative to their declaring file)
need.
"""

from __future__ import annotations

from typing import Any

from nvkr.recipe.yamlsource import DocPath, Document, LocationMap


def merge(base: Document, over: Document) -> Document:
    """``over`` merged onto ``base``; neither is modified.

    Mappings merge by key, lists and scalars replace, ``null`` deletes the key (also inside new
    mappings, so a layer never leaves a ``null`` behind in a mapping). Lists keep their items as
    written. The location of every value comes from the layer whose value won; a mapping that
    both layers hold takes ``over``'s location.
    """
    locations = dict(base.locations)
    data = _merge(base.data, over.data, (), locations, over.locations)
    return Document(data, locations)


def merge_all(documents: list[Document]) -> Document:
    """All ``documents`` merged in order onto an empty one (nulls dropped even from the first)."""
    result = Document({}, {})
    for document in documents:
        result = merge(result, document)
    return result


def subtree(document: Document, prefix: DocPath, keys: tuple[str, ...]) -> Document:
    """The mapping at ``prefix`` as its own document, keeping only ``keys`` (absent/null skipped).

    Locations are re-rooted: ``prefix + ("sources", "x")`` becomes ``("sources", "x")``. Used to
    turn an inline criteria overlay (``overlays[2].sources``) into a layer for the recipe root.
    """
    node: Any = document.data
    for part in prefix:
        node = node[part]
    data = {k: node[k] for k in keys if isinstance(node, dict) and node.get(k) is not None}
    locations: LocationMap = {}
    for path, location in document.locations.items():
        if path[: len(prefix)] == prefix and len(path) > len(prefix) and path[len(prefix)] in data:
            locations[path[len(prefix) :]] = location
    root = document.locations.get(prefix)
    if root is not None:
        locations[()] = root
    return Document(data, locations)


def _merge(
    base: Any, over: Any, path: DocPath, locations: LocationMap, over_locations: LocationMap
) -> Any:
    if not isinstance(over, dict):
        if isinstance(over, list) or isinstance(base, dict | list):
            _replace(path, locations, over_locations)
        elif path in over_locations:
            # A scalar over a scalar: nothing lives below it, so skip the prefix scans.
            locations[path] = over_locations[path]
        else:
            locations.pop(path, None)
        return over
    if not isinstance(base, dict):
        # A mapping replacing a scalar or list is merged onto nothing, so its nulls vanish too.
        _drop(path, locations)
        base = {}
    if path in over_locations:
        locations[path] = over_locations[path]
    out = dict(base)
    for key, value in over.items():
        child = (*path, key)
        if value is None:
            out.pop(key, None)
            _drop(child, locations)
        else:
            out[key] = _merge(out.get(key), value, child, locations, over_locations)
    return out


def _drop(path: DocPath, locations: LocationMap) -> None:
    for stale in [p for p in locations if p[: len(path)] == path]:
        del locations[stale]


def _replace(path: DocPath, locations: LocationMap, over_locations: LocationMap) -> None:
    _drop(path, locations)
    locations.update((p, loc) for p, loc in over_locations.items() if p[: len(path)] == path)
