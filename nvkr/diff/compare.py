"""``nvkr diff``: what changed between two recipes, two lockfiles or two release sets.

A reviewer's view of a change before (recipes, lockfiles) or after (release sets) a build. Each
argument is recognised by :func:`detect_kind`; only two of the same kind compare (a recipe and
its lockfile are not comparable: ``nvkr build --locked`` lists that drift). What is compared:

- recipes (:func:`nvkr.recipe.loader.load_recipe`, :func:`~nvkr.recipe.matrix.expand`): the
  variants by cell id, then per common variant its rendered sources, artifacts and
  ``releaseSet``, field by field (:func:`nvkr.lock._differences`, e.g.
  ``kubelet.url: 'a' -> 'b'``).
- lockfiles: the variants the entries name, per common variant the source entry it uses (spec
  and resolved identity: URL, ref, version, commit, file name, digest, where the spec does not
  already say it), for apt sources every
  .deb of the closure (added, removed, version changes ordered as Debian orders them), and the
  tools.
- release sets (:func:`nvkr.releaseset.read_metadata`, the layout read through
  :class:`~nvkr.oci.layout.LayoutReader`): the set's name, index digest and recipe/lockfile
  digests, the cluster release (Kubernetes version, charts and images by digest), the node-pool
  releases, every artifact per (name, variant) by its manifest or index descriptor (digest, media
  type, size) and its primary blob; for artifacts whose SPDX SBOMs differ, the packages (by purl,
  Debian versions ordered) and the files the SBOMs list; for a primary blob other than a QCOW2
  disk, where the bytes first differ (:func:`nvkr.verify.archive.first_difference`: the tar
  member for a chart; its "release set"/"rebuild" wording becomes A/B). Files inside a QCOW2 machine image are not read: its digest change and
  its SBOM's package (and staged file) changes are what is reported.

Equal changes in several variants are reported once with the list of those variants. The result
is one JSON-able document (``diffVersion`` 1; every key always present)::

    {"diffVersion": 1, "identical": bool,
     "a": {"path": str, "kind": "recipe" | "lockfile" | "release-set"}, "b": {...},
     "commonVariants": [variant id, ...],         # gpu=hopper,kubernetes=1.36,arch=amd64
     "variants": {"added": [id, ...], "removed": [id, ...]},
     "header":    [change, ...],   # the recipe's or the release set's own identity
     "sources":   [change, ...],   # recipes, lockfiles
     "tools":     [change, ...],   # lockfiles
     "packages":  [{"in": source or artifact name, "package": str,
                    "change": "added" | "removed" | "upgraded" | "downgraded" | "changed"
                              | "rebuilt" (same version, other sha256),
                    "old": version | null, "new": version | null, "variants": [id, ...]}, ...],
     "artifacts": [change, ...],
     "files":     [{"in": artifact name, "path": str, "change": "added" | "removed" | "changed",
                    "variants": [id, ...]}, ...],
     "release":   [change, ...]}   # recipe releaseSet; set: clusterRelease, nodePoolReleases...
    change = {"name": str, "change": "added" | "removed" | "changed",
              "differences": ["field.path: old -> new", ...], "variants": [id, ...]}

``variants`` of a change is empty for what is not per variant (tools, headers, a release set's
cluster release). Lists are sorted by name, then package or path, then change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nvkr.diff.lockfiles import diff_lockfiles
from nvkr.diff.releasesets import diff_release_sets
from nvkr.diff.report import Kind, Report
from nvkr.errors import UsageError
from nvkr.lock import _spec


# -- what the arguments are ---------------------------------------------------------------------
def detect_kind(path: Path) -> tuple[Kind, Path]:
    """What ``path`` names, and the path to read it from.

    A directory (or its ``index.json``) is a release set; ``*.yaml``/``*.yml`` a recipe; any
    other file a lockfile (checked when read).

    Raises:
        UsageError: ``path`` does not exist, or is a directory that holds no OCI image layout.
    """
    if path.is_dir():
        if not (path / "oci-layout").exists() and not (path / "index.json").exists():
            raise UsageError(
                f"{path} is a directory but not a release set: no oci-layout or index.json in it",
                hint="give a release set's layout (dist/<name>), a recipe or a lockfile",
            )
        return "release-set", path
    if not path.exists():
        raise UsageError(f"{path}: no such file or directory")
    if path.name == "index.json":
        return "release-set", path.parent
    if path.suffix in (".yaml", ".yml"):
        return "recipe", path
    return "lockfile", path


def diff(a: Path, b: Path) -> dict[str, Any]:
    """The difference from ``a`` to ``b`` (module docstring shape).

    Raises:
        UsageError: a missing argument, arguments of different kinds, a layout holding no
            release set. RecipeError: a recipe does not load. LockError: a lockfile is not valid
            JSON or not an nvkr lockfile. IntegrityError: a release set's blobs fail their
            digests or its metadata is unreadable.
    """
    ka, pa = detect_kind(a)
    kb, pb = detect_kind(b)
    if ka != kb:
        hint = "give two recipes, two lockfiles or two release sets"
        if {ka, kb} == {"recipe", "lockfile"}:
            hint = (
                "`nvkr build RECIPE --locked` lists how a recipe drifted from its lockfile; " + hint
            )
        raise UsageError(f"{a} is a {ka} and {b} is a {kb}: they are not comparable", hint=hint)
    report = Report({"path": str(a), "kind": ka}, {"path": str(b), "kind": kb})
    if ka == "recipe":
        _diff_recipes(report, pa, pb)
    elif ka == "lockfile":
        diff_lockfiles(report, pa, pb)
    else:
        diff_release_sets(report, pa, pb)
    return report.document()


# -- recipes ---------------------------------------------------------------------------------
def _diff_recipes(report: Report, a: Path, b: Path) -> None:
    from nvkr.recipe.loader import load_recipe
    from nvkr.recipe.matrix import expand

    la, lb = load_recipe(a), load_recipe(b)
    header = [
        {"name": x.recipe.metadata.name, "epoch": x.recipe.epoch, "digest": x.digest}
        for x in (la, lb)
    ]
    report.compare("header", {"recipe": header[0]}, {"recipe": header[1]}, None)
    va = {v.id: v for v in expand(la)}
    vb = {v.id: v for v in expand(lb)}
    for ida, idb, vid in report.variants(list(va), list(vb)):
        ra, rb = va[ida].recipe, vb[idb].recipe
        for section, old, new in (
            ("sources", ra.sources, rb.sources),
            ("artifacts", ra.artifacts, rb.artifacts),
            ("release", {"releaseSet": ra.releaseSet}, {"releaseSet": rb.releaseSet}),
        ):
            report.compare(
                section,
                {k: _spec(v) for k, v in old.items()},
                {k: _spec(v) for k, v in new.items()},
                vid,
            )
