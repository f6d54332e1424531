"""``nvkr diff``: what changed between two recipes, two lockfiles or two release sets.

A reviewer's view of a change before (recipes, lockfiles) or after (release sets) a build. Each
argument is recognised by :func:`detect_kind`; only two of the same kind compare (a recipe and
its lockfile are not comparable: ``nvkr build --locked`` lists that drift). What is compared:

- recipes (:func:`nvkr.recipe.load_recipe`, :func:`~nvkr.recipe.expand`): the variants by cell
  id, then per common variant its rendered sources, artifacts and ``releaseSet``, field by field
  (:func:`nvkr.lock._differences`, e.g. ``kubelet.url: 'a' -> 'b'``).
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

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import unquote

from nvkr.errors import IntegrityError, LockError, UsageError
from nvkr.lock import _differences, _spec

DIFF_VERSION: Final = 1
Kind = Literal["recipe", "lockfile", "release-set"]
SECTIONS: Final = ("header", "sources", "tools", "packages", "artifacts", "files", "release")

#: Primary blobs larger than this (bytes) are not searched for their first difference.
FIRST_DIFFERENCE_MAX: Final = 64 << 20
_AXES: Final = ("gpu", "kubernetes", "arch")
#: Keys of a lock entry's ``resolved`` that identify what was fetched (sizes and per-blob
#: lists follow from them).
_IDENTITY: Final = (
    "kind",
    "url",
    "ref",
    "version",
    "commit",
    "filename",
    "member",
    "arch",
    "digest",
    "keyrings",
)


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
    report = _Report({"path": str(a), "kind": ka}, {"path": str(b), "kind": kb})
    if ka == "recipe":
        _diff_recipes(report, pa, pb)
    elif ka == "lockfile":
        _diff_lockfiles(report, pa, pb)
    else:
        _diff_release_sets(report, pa, pb)
    return report.document()


def _key(value: Any) -> str:
    """Equal JSON values give equal keys (whatever their maps' order; floats too)."""
    return json.dumps(value, sort_keys=True, default=str)


def _axes(variant_id: str) -> dict[str, str] | None:
    """``{"gpu": "hopper", ...}`` of a ``gpu=hopper,kubernetes=1.36,arch=amd64`` id, else None."""
    parts = [p.partition("=") for p in variant_id.split(",")]
    if not all(sep and k and v for k, sep, v in parts):
        return None
    return {k: v for k, _, v in parts}


def _id_without(axes: dict[str, str], axis: str) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(axes.items()) if k != axis)


# -- the report ------------------------------------------------------------------------------
class _Report:
    """Collects changes; equal records of different variants become one with their variants."""

    def __init__(self, a: dict[str, str], b: dict[str, str]) -> None:
        self.a, self.b = a, b
        self.common: list[str] = []
        self.added: list[str] = []
        self.removed: list[str] = []
        self._records: dict[str, dict[str, tuple[dict[str, Any], list[str]]]] = {
            s: {} for s in SECTIONS
        }

    def variants(self, old: list[str], new: list[str]) -> list[tuple[str, str, str]]:
        """Record the variants of both sides; return the pairs to compare as ``(id in A, id in
        B, label)``, in ``old``'s order.

        Equal ids pair up. When the sides differ on one axis only, each side holding a single
        value of it (two leaves of one GPU generation for Kubernetes 1.35 and 1.36), the
        variants equal on every other axis pair up too, labelled ``kubernetes=1.35->1.36``.
        """
        pairs = [(v, v, v) for v in old if v in new]
        rest_a = [v for v in old if v not in new]
        rest_b = [v for v in new if v not in old]
        pa, pb = [_axes(v) for v in rest_a], [_axes(v) for v in rest_b]
        if rest_a and rest_b and all(pa) and all(pb):
            keys = set(pa[0])  # type: ignore[arg-type]
            if all(set(x) == keys for x in (*pa, *pb)):  # type: ignore[arg-type]
                moved = [
                    k
                    for k in sorted(keys)
                    if len({x[k] for x in pa}) == 1  # type: ignore[index]
                    and len({x[k] for x in pb}) == 1  # type: ignore[index]
                    and pa[0][k] != pb[0][k]  # type: ignore[index]
                ]
                if len(moved) == 1:
                    axis = moved[0]
                    others = {
                        _id_without(x, axis): v  # type: ignore[arg-type]
                        for x, v in zip(pb, rest_b, strict=True)
                    }
                    for x, v in zip(pa, rest_a, strict=True):
                        match = others.get(_id_without(x, axis))  # type: ignore[arg-type]
                        if match is not None:
                            label = v.replace(
                                f"{axis}={x[axis]}",  # type: ignore[index]
                                f"{axis}={x[axis]}->{_axes(match)[axis]}",  # type: ignore[index]
                            )
                            pairs.append((v, match, label))
        paired_a = {a for a, _, _ in pairs}
        paired_b = {b for _, b, _ in pairs}
        self.common = [label for _, _, label in pairs]
        self.removed = [v for v in old if v not in paired_a]
        self.added = [v for v in new if v not in paired_b]
        return pairs

    def record(self, section: str, record: dict[str, Any], variant: str | None) -> None:
        slot = self._records[section].setdefault(_key(record), (record, []))
        if variant is not None and variant not in slot[1]:
            slot[1].append(variant)

    def change(
        self, section: str, name: str, change: str, lines: list[str], variant: str | None
    ) -> None:
        self.record(section, {"name": name, "change": change, "differences": lines}, variant)

    def compare(
        self,
        section: str,
        old: Mapping[str, Any],
        new: Mapping[str, Any],
        variant: str | None,
        *,
        prefix: bool = True,
    ) -> None:
        """Record the added, removed and changed entries of two maps."""
        for name in sorted({*old, *new}):
            if name not in old:
                self.change(section, name, "added", [], variant)
            elif name not in new:
                self.change(section, name, "removed", [], variant)
            elif _key(old[name]) != _key(new[name]):
                lines = _differences(old[name], new[name], name if prefix else "")
                self.change(section, name, "changed", lines, variant)

    def document(self) -> dict[str, Any]:
        order = {v: i for i, v in enumerate(self.common)}
        doc: dict[str, Any] = {
            "diffVersion": DIFF_VERSION,
            "a": self.a,
            "b": self.b,
            "commonVariants": self.common,
            "variants": {"added": self.added, "removed": self.removed},
        }
        for section, records in self._records.items():
            items = []
            for record, variants in records.values():
                ids = sorted(variants, key=lambda v: (order.get(v, len(order)), v))
                items.append({**record, "variants": ids})
            items.sort(
                key=lambda r: (
                    r.get("name", r.get("in", "")),
                    r.get("package", r.get("path", "")),
                    r["change"],
                    r["variants"],
                )
            )
            doc[section] = items
        doc["identical"] = not (self.added or self.removed or any(doc[s] for s in SECTIONS))
        return doc


# -- recipes ---------------------------------------------------------------------------------
def _diff_recipes(report: _Report, a: Path, b: Path) -> None:
    from nvkr.recipe import expand, load_recipe

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


# -- lockfiles --------------------------------------------------------------------------------
def _read_lockfile(path: Path) -> dict[str, Any]:
    """The lock document at ``path``, its entries' shapes checked (``nvkr.lock`` docstring).

    Raises:
        LockError: not JSON, not a lockfile, or an entry missing its name, spec, variants or
            resolved identity (naming the entry).
    """
    from nvkr.lock import read_lock

    doc = read_lock(path)
    if doc is None:  # removed between detect_kind and here
        raise UsageError(f"{path}: no such file")
    for i, entry in enumerate(doc["sources"]):
        ok = (
            isinstance(entry, dict)
            and isinstance(entry.get("name"), str)
            and isinstance(entry.get("spec"), dict)
            and isinstance(entry.get("variants"), list)
            and isinstance(entry.get("resolved"), dict)
        )
        packages = entry.get("resolved", {}).get("packages", []) if ok else []
        if not ok or not (
            isinstance(packages, list)
            and all(isinstance(p, dict) and isinstance(p.get("name"), str) for p in packages)
        ):
            raise LockError(
                f"{path}: sources[{i}] is not a lock entry (name, spec, variants, resolved"
                " with a list of packages for apt)",
                hint="regenerate it with `nvkr lock`",
            )
    if not isinstance(doc.get("tools", {}), dict):
        raise LockError(f"{path}: tools is not a map", hint="regenerate it with `nvkr lock`")
    return doc


def _by_variant(doc: Mapping[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{variant id: {source name: entry}}`` of a lock document."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for entry in doc["sources"]:
        for vid in entry["variants"]:
            out.setdefault(str(vid), {})[entry["name"]] = entry
    return dict(sorted(out.items()))


def _identities(
    old: Mapping[str, Any], new: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The identity keys of two entries' ``resolved``, less those that only repeat the spec on
    both sides (a url's URL, a wheel's version, a commit: the spec's lines say it already)."""
    keys = [
        k
        for k in _IDENTITY
        if not all(e["resolved"].get(k) == e["spec"].get(k) for e in (old, new))
    ]
    ra, rb = old["resolved"], new["resolved"]
    return {k: ra[k] for k in keys if k in ra}, {k: rb[k] for k in keys if k in rb}


def _diff_lockfiles(report: _Report, a: Path, b: Path) -> None:
    da, db = _read_lockfile(a), _read_lockfile(b)
    report.compare("header", {"recipe": da.get("recipe")}, {"recipe": db.get("recipe")}, None)
    ea, eb = _by_variant(da), _by_variant(db)
    for ida, idb, vid in report.variants(list(ea), list(eb)):
        old, new = ea[ida], eb[idb]
        for name in sorted({*old, *new}):
            if name not in old or name not in new:
                report.change("sources", name, "added" if name in new else "removed", [], vid)
                continue
            sa, sb = old[name], new[name]
            if _key([sa["spec"], sa["resolved"]]) == _key([sb["spec"], sb["resolved"]]):
                continue
            ra, rb = sa["resolved"], sb["resolved"]
            ia, ib = _identities(sa, sb)
            lines = _differences(sa["spec"], sb["spec"], name)
            lines += _differences(ia, ib, f"{name}.resolved")
            report.change("sources", name, "changed", lines, vid)
            if ra.get("kind") == rb.get("kind") == "apt":
                _package_changes(
                    report, name, _debs(ra.get("packages", [])), _debs(rb.get("packages", [])), vid
                )
    report.compare("tools", da.get("tools") or {}, db.get("tools") or {}, None)


@dataclass(frozen=True)
class _Package:
    version: str | None
    sha256: str | None
    debian: bool


def _debs(packages: Iterable[Mapping[str, Any]]) -> dict[str, _Package]:
    """The .debs of an apt lock entry by name (``name:arch`` where a name repeats)."""
    items = list(packages)
    names = Counter(p["name"] for p in items)
    return {
        (p["name"] if names[p["name"]] == 1 else f"{p['name']}:{p.get('arch')}"): _Package(
            _str(p.get("version")), _str(p.get("sha256")), True
        )
        for p in items
    }


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _package_changes(
    report: _Report,
    where: str,
    old: Mapping[str, _Package],
    new: Mapping[str, _Package],
    variant: str | None,
) -> None:
    """Record the packages added, removed, up- or downgraded, or rebuilt from ``old`` to ``new``."""
    for name in sorted({*old, *new}):
        pa, pb = old.get(name), new.get(name)
        if pa == pb:
            continue
        if pa is None or pb is None:
            change = "added" if pa is None else "removed"
        elif pa.version != pb.version:
            change = version_change(pa.version, pb.version, debian=pa.debian and pb.debian)
        elif pa.sha256 != pb.sha256:
            change = "rebuilt"
        else:
            continue
        report.record(
            "packages",
            {
                "in": where,
                "package": name,
                "change": change,
                "old": pa.version if pa else None,
                "new": pb.version if pb else None,
            },
            variant,
        )


def version_change(old: str | None, new: str | None, *, debian: bool) -> str:
    """``upgraded``, ``downgraded`` or (not ordered, or not comparable) ``changed``.

    Debian versions are ordered by :func:`debian_order` (Debian Policy 5.6.12); other
    ecosystems' versions are only said to have changed.
    """
    if not debian or old is None or new is None:
        return "changed"
    order = debian_order(old, new)
    if order is None or order == 0:
        return "changed"
    return "upgraded" if order > 0 else "downgraded"


def debian_order(old: str, new: str) -> int | None:
    """Positive when ``new`` is a later Debian version than ``old`` (dpkg's ordering, Debian
    Policy 5.6.12, through :func:`nvkr.catalog.versions.parse_debian`), negative when earlier, 0 when
    they are equal versions written differently; None when either does not parse."""
    from nvkr.catalog.versions import VersionError, parse_debian

    try:
        va, vb = parse_debian(old), parse_debian(new)
    except VersionError:
        return None
    return 1 if vb > va else -1 if vb < va else 0


# -- release sets ----------------------------------------------------------------------------
@dataclass
class _ReleaseSet:
    path: Path
    reader: Any  # LayoutReader
    meta: dict[str, Any]
    digest: str


def _read_release_set(path: Path) -> _ReleaseSet:
    """The release set in the layout ``path``.

    Raises:
        UsageError: the layout holds no release set (no ``index.json`` entry with a ref.name).
        IntegrityError: the layout, a blob or the metadata is damaged (read_metadata).
    """
    from nvkr.oci import mediatypes as mt
    from nvkr.oci.layout import LayoutReader
    from nvkr.releaseset import read_metadata
    from nvkr.releaseset.signing import release_set_entry

    reader = LayoutReader(path)
    if not any(
        isinstance(m, dict) and mt.ANN_REF_NAME in (m.get("annotations") or {})
        for m in reader.index["manifests"]
    ):
        raise UsageError(
            f"{path} is an OCI image layout but holds no release set (no index.json entry "
            f"with {mt.ANN_REF_NAME})",
            hint="give a release set written by `nvkr build` (dist/<name>)",
        )
    meta = read_metadata(path)
    return _ReleaseSet(path, reader, meta, str(release_set_entry(reader)["digest"]))


def _vid(variant: Any) -> str:
    if not isinstance(variant, Mapping):
        return "(no variant)"
    return ",".join(f"{axis}={variant.get(axis)}" for axis in _AXES)


def _platform_text(p: Mapping[str, Any]) -> str:
    return "/".join(str(p[k]) for k in ("os", "architecture", "variant") if p.get(k))


def _artifact_view(art: Mapping[str, Any]) -> dict[str, Any]:
    """What is compared of one metadata ``artifacts`` entry (action keys are not: they change
    with any input while the bytes may not)."""
    desc = art.get("index") or art.get("manifest") or {}
    view: dict[str, Any] = {
        "kind": art.get("kind"),
        "builder": art.get("builder"),
        "mediaType": desc.get("mediaType"),
        "digest": desc.get("digest"),
        "size": desc.get("size"),
        "sbom": "sbom" in art,
    }
    for key in ("artifactType", "primary", "chart"):
        if key in art:
            view[key] = art[key]
    if art.get("platforms"):
        view["platforms"] = ", ".join(_platform_text(p) for p in art["platforms"])
    if art.get("platform"):
        view["platform"] = _platform_text(art["platform"])
    return view


def _cluster_view(cluster: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if cluster is None:
        return None
    view = {k: v for k, v in cluster.items() if k not in ("charts", "images")}
    view["charts"] = {}
    for c in cluster.get("charts") or []:
        text = f"{c.get('chart')} {c.get('version')} {c.get('digest')}"
        view["charts"][c["name"]] = ", ".join(filter(None, [view["charts"].get(c["name"]), text]))
    view["images"] = {}
    for i in cluster.get("images") or []:
        view["images"][i["name"]] = ", ".join(
            filter(None, [view["images"].get(i["name"]), str(i.get("digest"))])
        )
    return view


def _pools_view(pools: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    view: dict[str, Any] = {}
    for pool in pools:
        name = str(pool.get("name"))
        if name in view:
            name = f"{name} ({_vid(pool.get('variant'))})"
        view[name] = {k: _vid(v) if k == "variant" else v for k, v in pool.items() if k != "name"}
    return view


def _diff_release_sets(report: _Report, a: Path, b: Path) -> None:
    sa, sb = _read_release_set(a), _read_release_set(b)
    ma, mb = sa.meta, sb.meta
    header = [
        {
            "name": s.meta.get("name"),
            "digest": s.digest,
            "epoch": s.meta.get("epoch"),
            "nvkrVersion": s.meta.get("nvkrVersion"),
            "recipe": s.meta.get("recipe"),
            "lockfile": s.meta.get("lockfile"),
        }
        for s in (sa, sb)
    ]
    report.compare(
        "header", {"release set": header[0]}, {"release set": header[1]}, None, prefix=False
    )
    pairs = report.variants(
        [_vid(v) for v in ma.get("variants", [])], [_vid(v) for v in mb.get("variants", [])]
    )
    label_of = {(a, b): label for a, b, label in pairs}
    report.compare(
        "release",
        {
            "clusterRelease": _cluster_view(ma.get("clusterRelease")),
            "nodePoolReleases": _pools_view(ma.get("nodePoolReleases") or []),
            "machineImages": ma.get("machineImages") or [],
        },
        {
            "clusterRelease": _cluster_view(mb.get("clusterRelease")),
            "nodePoolReleases": _pools_view(mb.get("nodePoolReleases") or []),
            "machineImages": mb.get("machineImages") or [],
        },
        None,
    )
    arts_a = {(str(x["name"]), _vid(x.get("variant"))): x for x in ma.get("artifacts", [])}
    arts_b = {(str(x["name"]), _vid(x.get("variant"))): x for x in mb.get("artifacts", [])}
    details = _Details(sa, sb)
    # artifacts of paired variants (or of no variant), keyed by (name, variant in A, in B)
    keys = {(n, a, b) for (n, a) in arts_a for (a2, b) in label_of if a2 == a}
    keys |= {(n, a, b) for (n, b) in arts_b for (a, b2) in label_of if b2 == b}
    keys |= {(n, v, v) for (n, v) in {*arts_a, *arts_b} if v == "(no variant)"}
    for name, ida, idb in sorted(keys):
        xa, xb = arts_a.get((name, ida)), arts_b.get((name, idb))
        vid = label_of.get((ida, idb), ida)
        variant = None if vid == "(no variant)" else vid
        if xa is None or xb is None:
            report.change("artifacts", name, "added" if xa is None else "removed", [], variant)
            continue
        lines = _differences(_artifact_view(xa), _artifact_view(xb))
        if not lines:
            continue
        lines += details.content(xa, xb)
        report.change("artifacts", name, "changed", lines, variant)
        if "sbom" in xa and "sbom" in xb:
            details.sbom(report, name, xa["sbom"], xb["sbom"], variant)


_RELABEL: Final = (
    ("only in the release set", "only in A"),
    ("only in the rebuild", "only in B"),
    ("(release set)", "(A)"),
    ("(rebuild)", "(B)"),
    ("the release set's", "A's"),
    ("the rebuild's", "B's"),
)


@dataclass
class _Inventory:
    """What an SPDX SBOM lists: packages by purl without version, files by name."""

    packages: dict[str, _Package]
    files: dict[str, tuple[str, ...]]


class _Details:
    """Content-level comparisons of two artifacts' blobs, each pair computed once."""

    def __init__(self, a: _ReleaseSet, b: _ReleaseSet) -> None:
        self.a, self.b = a, b
        self._inventories: dict[tuple[str, str], _Inventory] = {}
        self._firsts: dict[tuple[str, str], list[str]] = {}

    def content(self, xa: Mapping[str, Any], xb: Mapping[str, Any]) -> list[str]:
        """``["content: <where the primary blobs first differ>"]``, or [] for QCOW2 disks, big
        or unchanged blobs and blobs absent from the layouts."""
        from nvkr.oci import mediatypes as mt
        from nvkr.verify.archive import first_difference

        pa, pb = xa.get("primary"), xb.get("primary")
        if not isinstance(pa, Mapping) or not isinstance(pb, Mapping):
            return []
        if pa.get("digest") == pb.get("digest") or mt.NVKR_QCOW2 in (
            pa.get("mediaType"),
            pb.get("mediaType"),
        ):
            return []
        if max(int(pa.get("size") or 0), int(pb.get("size") or 0)) > FIRST_DIFFERENCE_MAX:
            return []
        key = (str(pa["digest"]), str(pb["digest"]))
        if key not in self._firsts:
            fa, fb = self.a.reader.blob_path(key[0]), self.b.reader.blob_path(key[1])
            lines = []
            if fa.is_file() and fb.is_file():
                # the sentence names the two sides as verify --rebuild sees them
                text = first_difference(fa, fb)
                for old, new in _RELABEL:
                    text = text.replace(old, new)
                lines.append(f"content: {text}")
            self._firsts[key] = lines
        return self._firsts[key]

    def sbom(
        self,
        report: _Report,
        name: str,
        da: Mapping[str, Any],
        db: Mapping[str, Any],
        variant: str | None,
    ) -> None:
        """Record the package and file changes between the SBOMs ``da`` and ``db``."""
        if da.get("digest") == db.get("digest"):
            return
        ia, ib = self._inventory(self.a, da), self._inventory(self.b, db)
        _package_changes(report, name, ia.packages, ib.packages, variant)
        for path in sorted({*ia.files, *ib.files}):
            fa, fb = ia.files.get(path), ib.files.get(path)
            if fa == fb:
                continue
            change = "added" if fa is None else "removed" if fb is None else "changed"
            report.record("files", {"in": name, "path": path, "change": change}, variant)

    def _inventory(self, side: _ReleaseSet, desc: Mapping[str, Any]) -> _Inventory:
        key = (str(side.path), str(desc.get("digest")))
        if key not in self._inventories:
            self._inventories[key] = _read_inventory(side, desc)
        return self._inventories[key]


def _read_inventory(side: _ReleaseSet, desc: Mapping[str, Any]) -> _Inventory:
    """The packages and files of the SBOM manifest ``desc`` in ``side``'s layout.

    Packages with a purl other than ``pkg:oci`` (images, platforms and layers are digests, which
    the artifact's digest already covers) are keyed by their name (the purl without its version
    when two share a name); files by ``fileName``, valued by their SHA256 (several when the name
    is in several layers or platforms).

    Raises:
        IntegrityError: the manifest or its SPDX layer fails its digest or is not SPDX JSON.
    """
    from nvkr.sbom import SPDX_MEDIA_TYPE

    what = f"SBOM {desc.get('digest')} in {side.path}"
    manifest = side.reader.read_json(desc, referrer="release set metadata")
    layers = [x for x in _objects(manifest.get("layers")) if x.get("mediaType") == SPDX_MEDIA_TYPE]
    if len(layers) != 1:
        raise IntegrityError(f"{what}: expected one {SPDX_MEDIA_TYPE} layer, found {len(layers)}")
    try:
        doc = json.loads(side.reader.read_blob(layers[0], referrer=what))
    except ValueError as e:
        raise IntegrityError(f"{what}: the SPDX document is not JSON ({e})") from e
    if not isinstance(doc, dict):
        raise IntegrityError(f"{what}: the SPDX document is not a JSON object")
    found: list[tuple[str, str, _Package]] = []
    for pkg in _objects(doc.get("packages")):
        purl = next(
            (
                str(r.get("referenceLocator"))
                for r in _objects(pkg.get("externalRefs"))
                if r.get("referenceType") == "purl"
            ),
            None,
        )
        if purl is None or purl.startswith("pkg:oci/"):
            continue
        key, version = _split_purl(purl)
        sha = _sha256(pkg)
        version = _str(pkg.get("versionInfo")) or version
        found.append(
            (str(pkg.get("name")), key, _Package(version, sha, purl.startswith("pkg:deb/")))
        )
    names = Counter(n for n, _, _ in found)
    packages = {(n if names[n] == 1 else k): p for n, k, p in found}
    files: dict[str, list[str]] = {}
    for f in _objects(doc.get("files")):
        files.setdefault(str(f.get("fileName")), []).append(_sha256(f) or "")
    return _Inventory(packages, {k: tuple(sorted(v)) for k, v in files.items()})


def _objects(value: Any) -> list[dict[str, Any]]:
    """The JSON objects of a list (anything else in an SPDX document is skipped)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _sha256(element: Mapping[str, Any]) -> str | None:
    """The SHA256 ``checksumValue`` of an SPDX package or file."""
    return next(
        (
            str(c.get("checksumValue"))
            for c in _objects(element.get("checksums"))
            if c.get("algorithm") == "SHA256"
        ),
        None,
    )


def _split_purl(purl: str) -> tuple[str, str | None]:
    """``pkg:deb/debian/curl@7.88.1-10?arch=amd64`` → (``pkg:deb/debian/curl?arch=amd64``,
    ``7.88.1-10``) (purl-spec: the version follows the last ``@`` of the path)."""
    rest, _, qualifiers = purl.partition("#")[0].partition("?")
    head, at, version = rest.rpartition("@")
    if not at or "/" in version:
        head, version = rest, ""
    key = head + (f"?{qualifiers}" if qualifiers else "")
    return key, unquote(version) or None
