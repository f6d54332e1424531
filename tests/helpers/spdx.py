"""SPDX 2.3 documents checked as strictly as the SPDX tools check them: :func:`check_spdx` runs
the official JSON Schema (tests/fixtures/spdx/, :data:`SCHEMA_PATH`) and then what the
specification requires beyond it. Used by the SBOM unit tests and the default build's test."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import jsonschema

from nvkr.canonical import canonical_json
from tests.helpers import REPO

SCHEMA_PATH = REPO / "tests" / "fixtures" / "spdx" / "spdx-schema.json"
# The patterns SPDX 2.3.1's schema adds to 2.3's (clause 3.2 identifiers, ISO 8601 UTC dates).
SPDX_ID_RE = re.compile(r"^SPDXRef-[a-zA-Z0-9.-]+$")
DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
HEX_LEN = {"SHA1": 40, "SHA256": 64}


def check_spdx(doc: dict[str, Any], validator: jsonschema.Draft201909Validator) -> None:
    """The official schema, then what SPDX 2.3 requires beyond it: identifier syntax, unique
    identifiers, relationships between known elements, a DESCRIBES, SHA1 on every file, hex
    checksums, and each verification code recomputed from the files a package CONTAINS."""
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:10])
    assert doc["spdxVersion"] == "SPDX-2.3" and doc["dataLicense"] == "CC0-1.0"
    assert DATE_RE.match(doc["creationInfo"]["created"])
    ids = [e["SPDXID"] for e in doc["packages"] + doc["files"]]
    assert len(ids) == len(set(ids)), "SPDXIDs are unique"
    assert all(SPDX_ID_RE.match(i) for i in [*ids, doc["SPDXID"]])
    known = {*ids, doc["SPDXID"]}
    external = {e["externalDocumentId"] for e in doc.get("externalDocumentRefs", [])}
    assert all(re.fullmatch(r"DocumentRef-[A-Za-z0-9.+-]+", e) for e in external)
    for r in doc["relationships"]:
        for end in (r["spdxElementId"], r["relatedSpdxElement"]):
            assert end in known or end.partition(":")[0] in external, r
    assert any(r["relationshipType"] == "DESCRIBES" for r in doc["relationships"])
    sha1 = {}
    for f in doc["files"]:
        algos = {c["algorithm"]: c["checksumValue"] for c in f["checksums"]}
        assert "SHA1" in algos, f"{f['fileName']}: SPDX 2.3 files need a SHA1"
        sha1[f["SPDXID"]] = algos["SHA1"]
    for element in doc["packages"] + doc["files"]:
        for c in element.get("checksums", []):
            assert re.fullmatch(f"[0-9a-f]{{{HEX_LEN[c['algorithm']]}}}", c["checksumValue"])
    for pkg in doc["packages"]:
        files = [
            r["relatedSpdxElement"]
            for r in doc["relationships"]
            if r["spdxElementId"] == pkg["SPDXID"]
            and r["relationshipType"] == "CONTAINS"
            and r["relatedSpdxElement"] in sha1
        ]
        assert pkg["filesAnalyzed"] is bool(files)
        if files:
            code = hashlib.sha1("".join(sorted(sha1[f] for f in files)).encode()).hexdigest()
            assert pkg["packageVerificationCode"]["packageVerificationCodeValue"] == code
    # canonical JSON, and the namespace is the digest of the rest
    rest = {k: v for k, v in doc.items() if k != "documentNamespace"}
    assert doc["documentNamespace"].endswith("/" + hashlib.sha256(canonical_json(rest)).hexdigest())
