"""Machine images as SPDX: the disk, every Debian package in it, every staged binary.

The ``node-image`` builder records in its result metadata the packages of its rootfs (name,
version, architecture, the .deb's sha256 and URL, and the licence short names its
``/usr/share/doc/<package>/copyright`` file declares in machine-readable DEP-5 form) and the
files it staged (path, sha1, sha256, size). :func:`describe_machine_image` turns them into:

- the root package (the QCOW2, ``primaryPackagePurpose: OPERATING_SYSTEM``) ``CONTAINS`` one
  package per .deb (``pkg:deb/debian/NAME@VERSION?arch=ARCH`` purl, the .deb's SHA256,
  ``downloadLocation`` its URL, ``licenseDeclared`` when every licence named maps to an SPDX
  identifier, else NOASSERTION with the names in ``licenseComments``);
- and ``CONTAINS`` one file per file nvkr staged into the image (``./usr/bin/node-agent``,
  ``./etc/nvkr/manifest.json``, the rendered units and configuration, the recipe's ``files``):
  SHA1 and SHA256, and its mode in an annotation (``mode: 0755``; SPDX 2.3's file has no field
  for it, clause 12 annotations carry what the other clauses lack).

Debian's licence short names (DEP-5 §"License specification") are not SPDX identifiers; the
table :data:`DEBIAN_TO_SPDX` maps the common ones.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from nvkr.action import ActionResult
from nvkr.errors import IntegrityError
from nvkr.jsondoc import json_list, json_objects
from nvkr.sbom.golang import build_comment, link_go_binary
from nvkr.sbom.spdx import FileDigest, SpdxDocument, hashed_id, package, spdx_id
from nvkr.store import Store

DEBIAN_TO_SPDX: dict[str, str] = {
    "GPL-1": "GPL-1.0-only",
    "GPL-1+": "GPL-1.0-or-later",
    "GPL-2": "GPL-2.0-only",
    "GPL-2+": "GPL-2.0-or-later",
    "GPL-3": "GPL-3.0-only",
    "GPL-3+": "GPL-3.0-or-later",
    "LGPL-2": "LGPL-2.0-only",
    "LGPL-2+": "LGPL-2.0-or-later",
    "LGPL-2.1": "LGPL-2.1-only",
    "LGPL-2.1+": "LGPL-2.1-or-later",
    "LGPL-3": "LGPL-3.0-only",
    "LGPL-3+": "LGPL-3.0-or-later",
    "AGPL-3": "AGPL-3.0-only",
    "AGPL-3+": "AGPL-3.0-or-later",
    "Apache-2.0": "Apache-2.0",
    "Apache-2": "Apache-2.0",
    "Artistic": "Artistic-1.0-Perl",
    "Artistic-2.0": "Artistic-2.0",
    "BSD-2-clause": "BSD-2-Clause",
    "BSD-3-clause": "BSD-3-Clause",
    "BSD-4-clause": "BSD-4-Clause",
    "Go": "BSD-3-Clause",
    "CC-BY-SA-4.0": "CC-BY-SA-4.0",
    "CC-BY-4.0": "CC-BY-4.0",
    "MIT-0": "MIT-0",
    "Unlicense": "Unlicense",
    "WTFPL": "WTFPL",
    "0BSD": "0BSD",
    "OFL-1.1": "OFL-1.1",
    "ISC": "ISC",
    "MIT": "MIT",
    "Expat": "MIT",
    "MPL-1.1": "MPL-1.1",
    "MPL-2.0": "MPL-2.0",
    "Zlib": "Zlib",
    "zlib": "Zlib",
    "public-domain": "LicenseRef-public-domain",
    "CC0-1.0": "CC0-1.0",
    "OpenSSL": "OpenSSL",
    "PSF-2": "PSF-2.0",
    "curl": "curl",
    "X11": "X11",
    "FSFAP": "FSFAP",
    "FSFUL": "FSFUL",
    "FSFULLR": "FSFULLR",
    "GFDL-1.2+": "GFDL-1.2-or-later",
    "GFDL-1.3+": "GFDL-1.3-or-later",
    "BSL-1.0": "BSL-1.0",
    "Unicode-DFS-2016": "Unicode-DFS-2016",
}
_FOLDED = {k.casefold(): v for k, v in DEBIAN_TO_SPDX.items()}
_LICENSE_LINE = re.compile(r"^License:[ \t]*(\S[^\n]*)$", re.M)
_SPLIT = re.compile(r"\s+(?:or|and|,)\s+|\s*[|&,]\s*", re.I)


def copyright_licenses(text: str) -> list[str]:
    """The distinct licence short names of a DEP-5 ``copyright`` file (sorted), or ``[]`` when
    the file is not machine-readable (no ``Format:`` header)."""
    if not re.search(r"^Format:\s*\S", text, re.M):
        return []
    names: set[str] = set()
    for m in _LICENSE_LINE.finditer(text):
        for part in _SPLIT.split(m.group(1).strip()):
            part = part.strip().strip("()")
            if part and " " not in part:
                names.add(part)
    return sorted(names)


def tree_licenses(tree: Path, packages: Iterable[str]) -> dict[str, list[str]]:
    """``{package: [licence short names]}`` from ``tree/usr/share/doc/<package>/copyright``
    (packages without a readable machine-readable file are left out)."""
    out: dict[str, list[str]] = {}
    for name in packages:
        path = tree / "usr/share/doc" / name / "copyright"
        try:
            if path.is_symlink() or not path.is_file():
                continue
            names = copyright_licenses(path.read_text(errors="replace"))
        except OSError:
            continue
        if names:
            out[name] = names
    return out


def spdx_license(names: list[str]) -> str | None:
    """An SPDX licence expression (``A AND B``) when every Debian name maps (case-insensitively),
    else None."""
    mapped = [_FOLDED.get(n.casefold()) for n in names]
    if not names or any(m is None for m in mapped):
        return None
    return " AND ".join(sorted({m for m in mapped if m}))


def deb_purl(name: str, version: str, arch: str) -> str:
    """``pkg:deb/debian/NAME@VERSION?arch=ARCH`` (purl spec, type ``deb``)."""
    return f"pkg:deb/debian/{quote(name, safe='')}@{quote(version, safe='')}?arch={arch}"


def deb_package(pkg: Mapping[str, Any]) -> dict[str, Any]:
    """The SPDX package of one locked .deb (``{"name", "version", "arch", "sha256", "url"}``):
    its purl, the .deb's SHA256 and file name, ``downloadLocation`` its URL."""
    name, version, arch = str(pkg["name"]), str(pkg["version"]), str(pkg["arch"])
    return package(
        hashed_id("Package-deb", name, version, arch),
        name,
        version=version,
        purl=deb_purl(name, version, arch),
        sha256=str(pkg["sha256"]).removeprefix("sha256:"),
        file_name=str(pkg.get("url", "")).rsplit("/", 1)[-1] or None,
        purpose="LIBRARY" if name.startswith("lib") else "APPLICATION",
        download=str(pkg.get("url") or "NOASSERTION"),
    )


def add_build_tools(doc: SpdxDocument, element: str, packages: Iterable[Mapping[str, Any]]) -> None:
    """Each locked .deb in ``packages`` (see :func:`deb_package`) ``BUILD_TOOL_OF`` ``element``:
    a cgo binary's C compiler, binutils and C library from its tools tree."""
    for pkg in packages:
        doc.relate(doc.add_package(deb_package(pkg)), "BUILD_TOOL_OF", element)


def _stream_digest(store: Store, digest: str, what: str) -> FileDigest:
    sha1, sha256, size = hashlib.sha1(usedforsecurity=False), hashlib.sha256(), 0
    try:
        with open(store.blob_path(digest), "rb") as f:
            while chunk := f.read(1 << 20):
                sha1.update(chunk)
                sha256.update(chunk)
                size += len(chunk)
    except OSError as e:
        raise IntegrityError(f"{what}: blob {digest} is not in the store {store.root}") from e
    if "sha256:" + sha256.hexdigest() != digest:
        raise IntegrityError(f"{what}: store blob {digest} is corrupt")
    return FileDigest(sha1.hexdigest(), sha256.hexdigest(), size, elf=False)


def describe_machine_image(
    doc: SpdxDocument,
    store: Store,
    result: ActionResult,
    label: str,
    binaries: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """A machine image (module doc).

    Args:
        result: the node-image action's result: one ``primary`` output (the QCOW2), metadata
            ``packages`` (``{"name", "version", "arch", "sha256", "url"[, "licenses"]}``) and
            ``staged`` (``{"path", "sha1", "sha256", "size"[, "mode", "elf"]}``).
        binaries: ``{"sha256:<hex>": Go build info}`` of the Go binaries the image stages; a
            staged file with that digest gets the binary's modules (``STATIC_LINK``).
    Returns:
        the QCOW2's ``sha256:<hex>``.
    Raises:
        BuildError: no single primary output. IntegrityError: its blob is missing or corrupt.
    """
    what = f"artifact {label}"
    primary = result.output("primary", what)
    digest = primary.digest
    fd = _stream_digest(store, digest, f"{what} output {primary.name!r}")
    meta = result.metadata
    root = doc.add_package(
        package(
            spdx_id("Package-artifact", label),
            label,
            file_name=primary.name,
            sha256=fd.sha256,
            purpose="OPERATING_SYSTEM",
            comment=f"QCOW2 disk image, architecture {meta.get('arch', '?')}",
        )
    )
    doc.describes(root)
    for pkg in json_objects(meta.get("packages")):
        element = deb_package(pkg)
        names = [str(n) for n in json_list(pkg.get("licenses"))]
        expression = spdx_license(names)
        if expression:
            element["licenseDeclared"] = expression
        elif names:
            element["licenseDeclared"] = "NOASSERTION"
            element["licenseComments"] = "Debian copyright file names: " + ", ".join(names)
        doc.relate(root, "CONTAINS", doc.add_package(element))
    staged: list[Mapping[str, Any]] = json_objects(meta.get("staged"))  # the builder's shape
    for f in staged:
        path = str(f["path"])
        info = (binaries or {}).get("sha256:" + str(f["sha256"]))
        file_id = doc.add_file(
            hashed_id("File", str(f["sha256"]), path),
            "." + path,
            FileDigest(str(f["sha1"]), str(f["sha256"]), int(f["size"]), elf=bool(f.get("elf"))),
            comment=build_comment(info) if info else None,
            annotations=[f"mode: {f['mode']}"] if f.get("mode") else [],
        )
        doc.contains_file(root, file_id)
        if info:
            link_go_binary(doc, file_id, info)
    return digest
