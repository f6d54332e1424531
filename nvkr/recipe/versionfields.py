"""Recipe fields that hold an exact Kubernetes release, checked and spelled one way.

``releaseSet.clusterRelease.kubernetes`` (the cluster version) and a node image's
``kubernetesVersion`` leave the recipe: into the release set metadata, the machine images'
``dev.nvkr.kubernetes`` annotation, the files a node image writes and Cluster API exports
(``version: v<X.Y.Z>``). Kubernetes patch releases are SemVer 2.0.0; nvkr writes them ``X.Y.Z``
without a leading ``v`` (SPECS.md), so ``v1.36.4`` and ``1.36.4`` are one version and give one
release set. The models pass each such field through :func:`exact_release` (a value holding a
template is checked once rendered, when the variant is validated again); the loader hashes the
raw document through :func:`canonical_document`, so the recipe digest (lockfile checksum,
recorded in every release set) does not see the spelling either. Anything else (``vv1.36.4``,
``1.36``, ``1.36.4.1``, ``latest``) is refused at its line, whether or not compatibility rules
apply to the recipe.

Version ``vars`` (``kubeletVersion``...) are template inputs, not part of any output: their text
is what URLs are rendered from, so it is checked (:mod:`nvkr.catalog.facts`) but never rewritten.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator

from nvkr.recipe.templates import is_template

#: Paths (inside a recipe, a layer or a criteria overlay) of the exact-release fields; ``*`` is
#: any artifact name (only the node-image builder has a ``kubernetesVersion``).
RELEASE_FIELDS: tuple[tuple[str, ...], ...] = (
    ("releaseSet", "clusterRelease", "kubernetes"),
    ("artifacts", "*", "kubernetesVersion"),
)


def exact_release(text: str) -> str:
    """``text`` as an exact Kubernetes release ``X.Y.Z[-PRE][+BUILD]`` without a leading ``v``;
    a template is returned as it is (checked after rendering).

    Raises:
        ValueError: not a SemVer version (pydantic reports it at the field's line).
    """
    if is_template(text):
        return text
    from nvkr.catalog.versions import VersionError, parse_release_line, parse_upstream

    try:
        return str(parse_upstream(text))
    except VersionError:
        pass
    expected = "expected MAJOR.MINOR.PATCH (SemVer), e.g. 1.36.4"
    try:
        line = parse_release_line(text)
    except VersionError:
        raise ValueError(f"{text!r} is not an exact Kubernetes release: {expected}") from None
    raise ValueError(
        f"{text!r} is a release line, not an exact Kubernetes release: expected "
        f"MAJOR.MINOR.PATCH, e.g. {line}.0"
    )


#: An exact Kubernetes release, stored as ``X.Y.Z`` (the type of the fields above).
ExactRelease = Annotated[str, AfterValidator(exact_release)]


def canonical_document(data: Any) -> Any:
    """``data`` (a raw recipe, layer or criteria overlay, or a recipe's ``overlays`` entries)
    with every exact-release field (:data:`RELEASE_FIELDS`) that parses written canonically;
    anything else is left for validation to report. ``data`` is not modified."""
    if not isinstance(data, Mapping):
        return data
    out = dict(data)
    for path in RELEASE_FIELDS:
        out = _rewrite(out, path)
    overlays = out.get("overlays")
    if isinstance(overlays, list):
        out["overlays"] = [canonical_document(o) for o in overlays]
    return out


def _rewrite(node: Any, path: tuple[str, ...]) -> Any:
    if not path:
        if isinstance(node, str) and not is_template(node):
            try:
                return exact_release(node)
            except ValueError:
                return node
        return node
    if not isinstance(node, Mapping):
        return node
    head, rest = path[0], path[1:]
    keys = list(node) if head == "*" else [head] if head in node else []
    if not keys:
        return node
    out = dict(node)
    for key in keys:
        out[key] = _rewrite(node[key], rest)
    return out
