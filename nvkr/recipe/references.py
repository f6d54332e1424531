"""Cross-references of a rendered variant recipe: names that must exist, names that must be valid.

Run by matrix expansion after templates are rendered and the variant validated, since a
criteria overlay may add the source an artifact names and a template may build the release set
name. Schema validation cannot see these (a name is only a string to it); failing here keeps a
dangling name from becoming a planner crash or an empty release set.
"""

from __future__ import annotations

import re

from nvkr.errors import RecipeError, RecipeReferenceError
from nvkr.recipe.models import Recipe
from nvkr.recipe.validation import describe_value
from nvkr.recipe.yamlsource import DocPath, LocationMap, where

# The release set name becomes a directory (dist/<name>/) and an OCI tag (at most 128 chars).
RELEASE_SET_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}$")


def check_references(recipe: Recipe, locations: LocationMap) -> None:
    """Every source and artifact name used by ``recipe`` must exist.

    Checked: every name an artifact uses (``Artifact.references()``: sources such as ``source``,
    ``toolchain``, ``base``; artifacts such as image ``files``); ``releaseSet.artifacts``,
    ``machineImages``, ``clusterRelease.charts``/``images``, ``nodePoolReleases[].machineImage``
    and ``nodePoolReleases[].artifacts`` (artifacts).

    Raises:
        RecipeReferenceError: one ``FILE:LINE: field.path: no source named 'x'`` line per
            dangling name; the hint lists the names that exist.
    """
    lines: list[str] = []
    missing_sources = missing_artifacts = False
    for name, artifact in recipe.artifacts.items():
        for field_path, kind, value in artifact.references():
            path: DocPath = ("artifacts", name, *field_path)
            if kind == "source" and value not in recipe.sources:
                default = (
                    ""
                    if field_path[0] in artifact.model_fields_set
                    else f" (the default {field_path[0]})"
                )
                other = " ('{v}' is an artifact)" if value in recipe.artifacts else ""
                lines.append(
                    f"{where(locations, path)}: no source named '{value}'{default}"
                    + other.format(v=value)
                )
                missing_sources = True
            elif kind == "artifact" and value not in recipe.artifacts:
                lines.append(
                    f"{where(locations, path)}: no artifact named '{value}'"
                    + _as_source(recipe, value)
                )
                missing_artifacts = True
    for path, value in _artifact_uses(recipe):
        if value not in recipe.artifacts:
            lines.append(
                f"{where(locations, path)}: no artifact named '{value}'" + _as_source(recipe, value)
            )
            missing_artifacts = True
    if not lines:
        return
    hints = []
    if missing_sources:
        hints.append(f"sources: {_names(recipe.sources)}")
    if missing_artifacts:
        hints.append(f"artifacts: {_names(recipe.artifacts)}")
    raise RecipeReferenceError("\n".join(lines), hint="existing " + "; ".join(hints))


def _as_source(recipe: Recipe, value: str) -> str:
    """Where a field wants an artifact and names a source (an image file written as the name of
    a url source): how to name it as one."""
    if value not in recipe.sources:
        return ""
    return f" ('{value}' is a source: name it as one where the field takes one, e.g. {{source: {value}}})"


def check_artifact_fields(recipe: Recipe, locations: LocationMap) -> None:
    """What each artifact's fields get wrong together (``ArtifactModel.recipe_problems``, e.g. a
    cgo build without a tools tree), once its names are known to exist.

    Raises:
        RecipeError: one ``FILE:LINE: artifacts.NAME.FIELD: ...`` line per problem; the hint
            is the problems' (each different one once, in order).
    """
    lines: list[str] = []
    hints: list[str] = []
    for name, artifact in recipe.artifacts.items():
        for field_path, message, hint in artifact.recipe_problems(recipe.artifacts):
            lines.append(f"{where(locations, ('artifacts', name, *field_path))}: {message}")
            if hint not in hints:
                hints.append(hint)
    if lines:
        raise RecipeError("\n".join(lines), hint="\n".join(hints))


def check_release_set_name(recipe: Recipe, locations: LocationMap) -> None:
    """The rendered ``releaseSet.name`` must be usable as a directory and an OCI tag.

    Raises:
        RecipeError: not lower-case ``[a-z0-9][a-z0-9._-]*`` of at most 128 characters (the
            message shows the rendered value and its template).
    """
    name = recipe.releaseSet.name
    if RELEASE_SET_NAME_RE.match(name):
        return
    path = ("releaseSet", "name")
    shown = describe_value(name, locations.get(path))
    raise RecipeError(
        f"{where(locations, path)}: invalid release set name {shown}: expected lower-case a-z, 0-9, "
        "'.', '_', '-', starting with a letter or digit, at most 128 characters",
        hint="template values such as {{ gpu }} can be lower-cased with {{ gpu | lower }}",
    )


def _artifact_uses(recipe: Recipe) -> list[tuple[DocPath, str]]:
    """``(document path, artifact name)`` for every artifact the release set names."""
    release = recipe.releaseSet
    uses: list[tuple[DocPath, str]] = []
    for index, name in enumerate(release.artifacts or []):
        uses.append((("releaseSet", "artifacts", index), name))
    for index, name in enumerate(release.machineImages):
        uses.append((("releaseSet", "machineImages", index), name))
    if release.clusterRelease is not None:
        for index, name in enumerate(release.clusterRelease.charts):
            uses.append((("releaseSet", "clusterRelease", "charts", index), name))
        for index, name in enumerate(release.clusterRelease.images):
            uses.append((("releaseSet", "clusterRelease", "images", index), name))
    for pool_index, pool in enumerate(release.nodePoolReleases):
        if pool.machineImage is not None:
            uses.append(
                (("releaseSet", "nodePoolReleases", pool_index, "machineImage"), pool.machineImage)
            )
        for index, name in enumerate(pool.artifacts):
            uses.append((("releaseSet", "nodePoolReleases", pool_index, "artifacts", index), name))
    return uses


def _names(names: object) -> str:
    listed = sorted(names) if isinstance(names, dict) else []
    return ", ".join(listed) if listed else "(none)"
