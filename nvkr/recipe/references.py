"""Cross-references of a rendered variant recipe: names that must exist, names that must be valid.

Run by matrix expansion after templates are rendered and the variant validated, since a
criteria overlay may add the source an artifact names and a template may build the release set
name. Schema validation cannot see these (a name is only a string to it); failing here keeps a
dangling name from becoming a planner crash or an empty release set.
"""

from __future__ import annotations

import re

from nvkr.builders.go_binary.artifact import GoBinaryArtifact
from nvkr.builders.rootfs.artifact import RootfsArtifact
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
                lines.append(f"{where(locations, path)}: no source named '{value}'{default}")
                missing_sources = True
            elif kind == "artifact" and value not in recipe.artifacts:
                lines.append(f"{where(locations, path)}: no artifact named '{value}'")
                missing_artifacts = True
    for path, value in _artifact_uses(recipe):
        if value not in recipe.artifacts:
            lines.append(f"{where(locations, path)}: no artifact named '{value}'")
            missing_artifacts = True
    if not lines:
        return
    hints = []
    if missing_sources:
        hints.append(f"sources: {_names(recipe.sources)}")
    if missing_artifacts:
        hints.append(f"artifacts: {_names(recipe.artifacts)}")
    raise RecipeReferenceError("\n".join(lines), hint="existing " + "; ".join(hints))


def check_tools_trees(recipe: Recipe, locations: LocationMap) -> None:
    """A cgo build names the tools tree its C compiler comes from, and only a cgo build does.

    The host's gcc and libc headers are in no action key, lock, provenance or SBOM: another
    machine's compiler would give another binary under the same key. So ``cgo: true`` needs
    ``toolsTree`` (a rootfs artifact of locked Debian packages); a ``toolsTree`` without cgo
    would be dropped unused. (That the tree is a rootfs artifact with a compiler for the
    variant's arch is checked at plan time, where its locked packages are known.)

    Raises:
        RecipeError: one ``FILE:LINE: artifacts.NAME.cgo: ...`` line per artifact; the hint
            shows the fix.
    """
    lines: list[str] = []
    for name, artifact in recipe.artifacts.items():
        if not isinstance(artifact, GoBinaryArtifact):
            continue
        if artifact.cgo and artifact.toolsTree is None:
            lines.append(
                f"{where(locations, ('artifacts', name, 'cgo'))}: cgo: true needs a toolsTree, a "
                "rootfs artifact whose locked gcc and libc6-dev compile the C code (the host's "
                "C compiler and headers are in no action key, lock or provenance)"
            )
        elif artifact.toolsTree is not None and not artifact.cgo:
            lines.append(
                f"{where(locations, ('artifacts', name, 'toolsTree'))}: toolsTree "
                f"'{artifact.toolsTree}' is set but cgo is false, so the tree would be unused"
            )
    if not lines:
        return
    trees = sorted(n for n, a in recipe.artifacts.items() if isinstance(a, RootfsArtifact))
    tree = trees[0] if trees else "build-tools"
    raise RecipeError(
        "\n".join(lines),
        hint=f"give the cgo artifact `toolsTree: {tree}` and define {tree} as a rootfs of "
        "locked packages, e.g. sources: {build-tools-packages: {apt: {debian: {url: "
        '"http://deb.debian.org/debian", suite: bookworm}}, arch: amd64, packages: {gcc: '
        '"4:12.2.0-3", libc6-dev: "2.36-9+deb12u14"}}} (add gcc-aarch64-linux-gnu and '
        f"libc6-dev-arm64-cross for arm64 targets) and artifacts: {{{tree}: {{builder: rootfs, "
        "packages: build-tools-packages}}; or set cgo: false (a static binary, CGO_ENABLED=0)",
    )


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
