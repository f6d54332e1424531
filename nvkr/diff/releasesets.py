"""``nvkr diff`` of two release sets: identity, cluster release, node pools, artifacts by
descriptor and primary blob, and for artifacts whose SPDX SBOMs differ their package and file
changes (QCOW2 contents only through their SBOM).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote

from nvkr.diff.lockfiles import Package, optional_str, package_changes
from nvkr.diff.report import AXES, Report
from nvkr.errors import IntegrityError, UsageError
from nvkr.jsondoc import load_json_object
from nvkr.lock import _differences

#: Primary blobs larger than this (bytes) are not searched for their first difference.
FIRST_DIFFERENCE_MAX: Final = 64 << 20


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
    return ",".join(f"{axis}={variant.get(axis)}" for axis in AXES)


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


def diff_release_sets(report: Report, a: Path, b: Path) -> None:
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

    packages: dict[str, Package]
    files: dict[str, tuple[str, ...]]
    #: ``mode: 0644`` annotations by fileName (machine images' staged files; an SBOM made before
    #: they were written has none, and then no mode change is seen)
    modes: dict[str, tuple[str, ...]]


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
        report: Report,
        name: str,
        da: Mapping[str, Any],
        db: Mapping[str, Any],
        variant: str | None,
    ) -> None:
        """Record the package and file changes between the SBOMs ``da`` and ``db``."""
        if da.get("digest") == db.get("digest"):
            return
        ia, ib = self._inventory(self.a, da), self._inventory(self.b, db)
        package_changes(report, name, ia.packages, ib.packages, variant)
        for path in sorted({*ia.files, *ib.files}):
            fa, fb = ia.files.get(path), ib.files.get(path)
            ma, mb = ia.modes.get(path), ib.modes.get(path)
            if fa == fb and (ma is None or mb is None or ma == mb):
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
    is in several layers or platforms); and the ``mode: NNNN`` annotations of a machine image's
    staged files by ``fileName``.

    Raises:
        IntegrityError: the manifest or its SPDX layer fails its digest or is not SPDX JSON.
    """
    from nvkr.sbom import SPDX_MEDIA_TYPE

    what = f"SBOM {desc.get('digest')} in {side.path}"
    manifest = side.reader.read_json(desc, referrer="release set metadata")
    layers = [x for x in _objects(manifest.get("layers")) if x.get("mediaType") == SPDX_MEDIA_TYPE]
    if len(layers) != 1:
        raise IntegrityError(f"{what}: expected one {SPDX_MEDIA_TYPE} layer, found {len(layers)}")
    data = side.reader.read_blob(layers[0], referrer=what)
    doc = load_json_object(data, f"{what}: the SPDX document", error=IntegrityError)
    found: list[tuple[str, str, Package]] = []
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
        version = optional_str(pkg.get("versionInfo")) or version
        found.append(
            (str(pkg.get("name")), key, Package(version, sha, purl.startswith("pkg:deb/")))
        )
    names = Counter(n for n, _, _ in found)
    packages = {(n if names[n] == 1 else k): p for n, k, p in found}
    files: dict[str, list[str]] = {}
    modes: dict[str, list[str]] = {}
    for f in _objects(doc.get("files")):
        name = str(f.get("fileName"))
        files.setdefault(name, []).append(_sha256(f) or "")
        modes.setdefault(name, []).extend(
            str(a.get("comment"))
            for a in _objects(f.get("annotations"))
            if str(a.get("comment", "")).startswith("mode: ")
        )
    return _Inventory(
        packages,
        {k: tuple(sorted(v)) for k, v in files.items()},
        {k: tuple(sorted(v)) for k, v in modes.items() if v},
    )


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
