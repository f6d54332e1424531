"""SBOMs: SPDX 2.3 JSON documents of what each released artifact holds.

Between the artifact actions and the release set: the ``sbom`` builder
(:mod:`nvkr.builders.sbom.builder`) runs once per artifact a release set holds, reads the artifact's
outputs from the store and writes one SPDX document (:mod:`.describe` per kind, :mod:`.golang`
for Go modules, :mod:`.archive` for the files of layers and charts, :mod:`.spdx` for the
document itself); :func:`nvkr.releaseset.assemble` attaches it to the artifact as an OCI
referrer (``artifactType`` :data:`SPDX_MEDIA_TYPE`, ``subject`` = the artifact's manifest or
image index).

Why SPDX 2.3 and not CycloneDX 1.6: the issue names SPDX first; in-toto and SLSA tooling (and
``cosign attest --type spdxjson``) take SPDX as a predicate as is; Debian's machine-readable
copyright files give SPDX licence identifiers, which map onto SPDX fields without translation;
and SPDX has first-class files with checksums and a package verification code, which is what a
reproducible build can state exactly.

Shape, abridged (a Go binary; an image adds packages per platform and layer, files per layer)::

    {"spdxVersion": "SPDX-2.3", "dataLicense": "CC0-1.0", "SPDXID": "SPDXRef-DOCUMENT",
     "name": "agent (linux/amd64)",
     "documentNamespace": "https://nvkr.dev/spdx/agent/<sha256 hex of the rest>",
     "creationInfo": {"created": "2025-12-01T00:00:00Z", "creators": ["Tool: nvkr-0.1.0"]},
     "packages": [
       {"SPDXID": "SPDXRef-Package-artifact-agent", "name": "agent",
        "packageFileName": "node-agent", "checksums": [{"algorithm": "SHA256", ...}],
        "filesAnalyzed": true, "packageVerificationCode": {...},
        "primaryPackagePurpose": "APPLICATION", "downloadLocation": "NOASSERTION", ...},
       {"SPDXID": "SPDXRef-Package-go-<24 hex>", "name": "nvkr.dev/node-agent",
        "versionInfo": "(devel)", "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER",
        "referenceType": "purl", "referenceLocator": "pkg:golang/nvkr.dev/node-agent"}], ...},
       {"SPDXID": "SPDXRef-Package-go-<24 hex>", "name": "stdlib", "versionInfo": "go1.27.3",
        ... "pkg:golang/stdlib@1.27.3" ...}],
     "files": [{"SPDXID": "SPDXRef-File-<24 hex>", "fileName": "./node-agent",
                "checksums": [{"algorithm": "SHA1", ...}, {"algorithm": "SHA256", ...}],
                "fileTypes": ["BINARY"], "comment": "built by go1.27.3 from ... (GOARCH=amd64 ...)"}],
     "relationships": [
       {"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES", ...artifact},
       {artifact CONTAINS file}, {file GENERATED_FROM main module}, {file STATIC_LINK stdlib},
       {file STATIC_LINK each dependency}, {main module DEPENDS_ON each dependency}]}

The bytes are canonical JSON and depend only on the artifact's bytes, its name and the epoch.
"""

from typing import Final

from nvkr.sbom.describe import describe_binary, describe_chart, describe_image
from nvkr.sbom.golang import golang_purl, link_go_binary, parse_buildinfo
from nvkr.sbom.spdx import NAMESPACE_BASE, SPDX_VERSION, SpdxDocument, oci_purl

#: IANA media type of SPDX JSON documents: the SBOM's layer media type and ``artifactType``.
SPDX_MEDIA_TYPE: Final = "application/spdx+json"

__all__ = [
    "NAMESPACE_BASE",
    "SPDX_MEDIA_TYPE",
    "SPDX_VERSION",
    "SpdxDocument",
    "describe_binary",
    "describe_chart",
    "describe_image",
    "golang_purl",
    "link_go_binary",
    "oci_purl",
    "parse_buildinfo",
]
