"""An SPDX 2.3 document, built up element by element and written as canonical JSON.

The describers of :mod:`nvkr.sbom.describe` add packages, files and relationships to a
:class:`SpdxDocument`; :meth:`SpdxDocument.to_bytes` then sorts everything, derives what follows
from the elements (``filesAnalyzed``, ``packageVerificationCode``) and writes the document. Field
names and rules follow the SPDX 2.3 specification: clause 6 (document creation information),
7 (packages), 8 (files), 11 (relationships) and Annex F (external repository identifiers, purl).

Every byte is a function of the elements and the epoch: ``creationInfo.created`` is the epoch in
RFC 3339, never the wall clock; ``documentNamespace`` ends in the sha256 of the document's own
canonical JSON without it (unique per content, the same on every rebuild); lists are sorted and
duplicates removed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

from nvkr.canonical import canonical_json

SPDX_VERSION: Final = "SPDX-2.3"
#: Clause 6.2: every SPDX document's own data licence.
DATA_LICENSE: Final = "CC0-1.0"
DOCUMENT_ID: Final = "SPDXRef-DOCUMENT"
NOASSERTION: Final = "NOASSERTION"
#: documentNamespace is NAMESPACE_BASE + <artifact> + "/" + <sha256 hex of the document>.
NAMESPACE_BASE: Final = "https://nvkr.dev/spdx/"

# Clause 3.2 / 7.2: an SPDX identifier is "SPDXRef-" followed by letters, digits, '.' and '-'.
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9.-]+")


def spdx_id(kind: str, key: str) -> str:
    """``SPDXRef-<kind>-<key>`` with every run of other characters in ``key`` made one ``-``."""
    return f"SPDXRef-{kind}-{_ID_UNSAFE.sub('-', key).strip('-') or 'x'}"


def hashed_id(kind: str, *parts: str) -> str:
    """``SPDXRef-<kind>-<24 hex>``: an identifier from the sha256 of ``parts`` (for paths and
    module versions, whose text may hold characters an identifier cannot)."""
    h = hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()
    return f"SPDXRef-{kind}-{h[:24]}"


@dataclass(frozen=True)
class FileDigest:
    """The checksums of a file's bytes as lower-case hex (``sha1`` 40, ``sha256`` 64 characters),
    its ``size`` in bytes and whether it starts with the ELF magic."""

    sha1: str
    sha256: str
    size: int
    elf: bool = False


def checksums(*, sha1: str | None = None, sha256: str | None = None) -> list[dict[str, str]]:
    """SPDX checksums (clause 7.10, 8.4) for the hex digests given, SHA1 first."""
    out = []
    if sha1:
        out.append({"algorithm": "SHA1", "checksumValue": sha1})
    if sha256:
        out.append({"algorithm": "SHA256", "checksumValue": sha256})
    return out


def purl_ref(purl: str) -> dict[str, str]:
    """A package's external reference to its purl (Annex F, category PACKAGE-MANAGER)."""
    return {
        "referenceCategory": "PACKAGE-MANAGER",
        "referenceType": "purl",
        "referenceLocator": purl,
    }


def oci_purl(name: str, digest: str, qualifiers: Mapping[str, str] | None = None) -> str:
    """``pkg:oci/<name>@sha256%3A<hex>[?k=v&...]`` (purl-spec type ``oci``).

    ``name`` is lower-cased (the spec's rule for oci names); the version is the digest with its
    ':' percent-encoded as in the spec's examples; qualifiers are sorted by key.
    """
    purl = f"pkg:oci/{quote(name.lower(), safe='')}@{quote(digest, safe='')}"
    if qualifiers:
        purl += "?" + "&".join(f"{k}={quote(v, safe='/:')}" for k, v in sorted(qualifiers.items()))
    return purl


def package(
    spdxid: str,
    name: str,
    *,
    version: str | None = None,
    purl: str | None = None,
    sha256: str | None = None,
    purpose: str | None = None,
    file_name: str | None = None,
    comment: str | None = None,
    download: str = NOASSERTION,
) -> dict[str, Any]:
    """A package element (clause 7) with the fields nvkr knows; unknown ones stay absent, which
    the specification reads as NOASSERTION (licences, copyright)."""
    pkg: dict[str, Any] = {"SPDXID": spdxid, "name": name, "downloadLocation": download}
    if version:
        pkg["versionInfo"] = version
    if file_name:
        pkg["packageFileName"] = file_name
    if sha256:
        pkg["checksums"] = checksums(sha256=sha256)
    if purl:
        pkg["externalRefs"] = [purl_ref(purl)]
    if purpose:
        pkg["primaryPackagePurpose"] = purpose
    if comment:
        pkg["comment"] = comment
    return pkg


class SpdxDocument:
    """An SPDX 2.3 document being built for one artifact.

    ``name`` is the document's name (e.g. ``agent (linux/amd64)``), ``artifact`` the artifact
    name that goes into ``documentNamespace``. Adding an element twice with the same content is
    a no-op (a layer shared by two platforms, a module linked into two binaries); with other
    content it raises ValueError, since one identifier must mean one thing.
    """

    def __init__(self, name: str, artifact: str) -> None:
        self.name = name
        self.artifact = artifact
        self._packages: dict[str, dict[str, Any]] = {}
        self._files: dict[str, dict[str, Any]] = {}
        self._file_sha1: dict[str, str] = {}
        self._contains: dict[str, set[str]] = {}
        self._relationships: set[tuple[str, str, str]] = set()
        self._external: dict[str, dict[str, Any]] = {}

    def _put(self, table: dict[str, dict[str, Any]], element: dict[str, Any]) -> str:
        sid = str(element["SPDXID"])
        old = table.get(sid)
        if old is not None and old != element:
            raise ValueError(f"SPDX element {sid} added twice with different content")
        table[sid] = element
        return sid

    def add_package(self, element: dict[str, Any]) -> str:
        """Add a package made by :func:`package`; returns its SPDXID."""
        return self._put(self._packages, element)

    def add_file(
        self,
        spdxid: str,
        file_name: str,
        digest: FileDigest,
        *,
        comment: str | None = None,
        annotations: Iterable[str] = (),
    ) -> str:
        """Add a file (clause 8): ``file_name`` relative to its package root, ``./``-prefixed;
        SHA1 (mandatory in 2.3) and SHA256 checksums; ``BINARY`` for ELF files.
        ``annotations``: texts of annotations on the file (clause 12, type ``OTHER``, by the
        document's first creator at its creation time), for what clause 8 has no field for
        (a file's mode: ``mode: 0644``)."""
        element: dict[str, Any] = {
            "SPDXID": spdxid,
            "fileName": file_name,
            "checksums": checksums(sha1=digest.sha1, sha256=digest.sha256),
        }
        if digest.elf:
            element["fileTypes"] = ["BINARY"]
        if comment:
            element["comment"] = comment
        notes = sorted(set(annotations))
        if notes:
            element["annotations"] = notes  # completed by to_json, which knows annotator, date
        self._file_sha1[spdxid] = digest.sha1
        return self._put(self._files, element)

    def add_external_document(self, name: str, namespace: str, sha1: str) -> str:
        """Refer to another SPDX document (clause 6.6) by its namespace and the SHA1 of its
        bytes; returns ``DocumentRef-<name>``, to be used as ``DocumentRef-<name>:SPDXRef-..``
        in relationships."""
        ref = "DocumentRef-" + (_ID_UNSAFE.sub("-", name).strip("-") or "x")
        entry = {
            "externalDocumentId": ref,
            "spdxDocument": namespace,
            "checksum": {"algorithm": "SHA1", "checksumValue": sha1},
        }
        if self._external.get(ref, entry) != entry:
            raise ValueError(f"external document {ref} added twice with different content")
        self._external[ref] = entry
        return ref

    def contains_file(self, package_id: str, file_id: str) -> None:
        """``package CONTAINS file``: the file counts in the package's verification code."""
        self._contains.setdefault(package_id, set()).add(file_id)
        self.relate(package_id, "CONTAINS", file_id)

    def relate(self, element: str, relationship: str, related: str) -> None:
        """A relationship (clause 11), e.g. ``relate(binary, "STATIC_LINK", module)``."""
        self._relationships.add((element, relationship, related))

    def describes(self, element: str) -> None:
        """``SPDXRef-DOCUMENT DESCRIBES element`` (the field documentDescribes is deprecated)."""
        self.relate(DOCUMENT_ID, "DESCRIBES", element)

    def to_json(self, *, created: str, creators: Iterable[str]) -> dict[str, Any]:
        """The document as a JSON value (see the module doc for what is derived and sorted).

        Args:
            created: ``YYYY-MM-DDTHH:MM:SSZ`` (the epoch; clause 6.9).
            creators: e.g. ``["Tool: nvkr-0.1.0"]`` (clause 6.8).
        Raises:
            ValueError: a relationship names an element the document lacks.
        """
        known = {DOCUMENT_ID, *self._packages, *self._files}

        def ok(element: str) -> bool:
            ref, sep, _ = element.partition(":")
            return element in known or (bool(sep) and ref in self._external)

        for a, kind, b in sorted(self._relationships):
            if not ok(a) or not ok(b):
                raise ValueError(
                    f"relationship {a} {kind} {b} names an element not in the document"
                )
        packages = []
        for sid, pkg in sorted(self._packages.items()):
            pkg = dict(pkg)
            files = self._contains.get(sid)
            # Clause 7.8: filesAnalyzed defaults to true, which then requires a verification code.
            pkg["filesAnalyzed"] = bool(files)
            if files:
                pkg["packageVerificationCode"] = {
                    "packageVerificationCodeValue": verification_code(
                        self._file_sha1[f] for f in files
                    )
                }
            packages.append(pkg)
        doc: dict[str, Any] = {
            "spdxVersion": SPDX_VERSION,
            "dataLicense": DATA_LICENSE,
            "SPDXID": DOCUMENT_ID,
            "name": self.name,
            "creationInfo": {"created": created, "creators": sorted(set(creators))},
            **(
                {"externalDocumentRefs": [e for _, e in sorted(self._external.items())]}
                if self._external
                else {}
            ),
            "packages": packages,
            "files": [_annotated(f, created, creators) for _, f in sorted(self._files.items())],
            "relationships": [
                {"spdxElementId": a, "relationshipType": kind, "relatedSpdxElement": b}
                for a, kind, b in sorted(self._relationships)
            ],
        }
        # Unique per content, stable across rebuilds: the digest of everything else.
        content = hashlib.sha256(canonical_json(doc)).hexdigest()
        doc["documentNamespace"] = f"{NAMESPACE_BASE}{quote(self.artifact, safe='')}/{content}"
        return doc

    def to_bytes(self, *, created: str, creators: Iterable[str]) -> bytes:
        """:meth:`to_json` as canonical JSON bytes (UTF-8, sorted keys, no whitespace)."""
        return canonical_json(self.to_json(created=created, creators=creators))


def _annotated(element: dict[str, Any], created: str, creators: Iterable[str]) -> dict[str, Any]:
    """``element`` with its annotation texts made clause 12 annotations."""
    if "annotations" not in element:
        return element
    annotator = sorted(set(creators))[0]
    return {
        **element,
        "annotations": [
            {
                "annotationDate": created,
                "annotationType": "OTHER",
                "annotator": annotator,
                "comment": text,
            }
            for text in element["annotations"]
        ],
    }


def verification_code(sha1s: Iterable[str]) -> str:
    """Clause 7.9: SHA1 of the concatenated, sorted SHA1 hex digests of a package's files."""
    return hashlib.sha1("".join(sorted(sha1s)).encode("ascii"), usedforsecurity=False).hexdigest()
