"""Media types, artifact types and annotation keys nvkr writes into OCI manifests.

Builders name what they produce with these constants; :mod:`nvkr.oci.layout` and
:mod:`nvkr.releaseset` put them into manifests and indexes; ``nvkr verify`` and consumers read
them back. OCI names follow image-spec v1.1.0 ("Media Types", "Annotations", manifest.md "Guidance
for an Empty Descriptor"); nvkr's own types are versioned (``.v1``) and change only with a new
version suffix, never in place.
"""

from __future__ import annotations

from typing import Any, Final

# -- OCI image-spec v1.1.0 "Media Types" ------------------------------------------------------
OCI_MANIFEST: Final = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX: Final = "application/vnd.oci.image.index.v1+json"
OCI_LAYOUT_HEADER: Final = "application/vnd.oci.layout.header.v1+json"
OCI_EMPTY: Final = "application/vnd.oci.empty.v1+json"
OCI_IMAGE_CONFIG: Final = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_TAR: Final = "application/vnd.oci.image.layer.v1.tar"
OCI_LAYER_TAR_GZIP: Final = "application/vnd.oci.image.layer.v1.tar+gzip"
OCTET_STREAM: Final = "application/octet-stream"

# -- Docker image manifest v2 schema 2 (distribution/distribution docs/spec/manifest-v2-2.md) ----
# Read, never written: a container image built elsewhere (a base image pulled by digest) may
# still use them, and its closure must reach every blob all the same.
DOCKER_MANIFEST: Final = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST: Final = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG: Final = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER_TAR_GZIP: Final = "application/vnd.docker.image.rootfs.diff.tar.gzip"
#: Schema 1 (signed JWS manifests): deprecated, references blobs differently; refused.
DOCKER_SCHEMA1_TYPES: Final = frozenset(
    {
        "application/vnd.docker.distribution.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v1+prettyjws",
    }
)

#: image-layout.md: the ``oci-layout`` file's only field.
IMAGE_LAYOUT_VERSION: Final = "1.0.0"

#: The empty JSON object ``{}`` (2 bytes) as a blob: manifest.md "Guidance for an Empty Descriptor".
EMPTY_JSON: Final = b"{}"
EMPTY_DIGEST: Final = "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
EMPTY_SIZE: Final = 2
EMPTY_DATA_B64: Final = "e30="


def empty_descriptor() -> dict[str, Any]:
    """A fresh copy of the empty descriptor (config of artifacts, placeholder layer).

    ``{"mediaType": "application/vnd.oci.empty.v1+json", "digest": "sha256:4413...", "size": 2,
    "data": "e30="}``; the ``data`` field embeds the 2 bytes so readers need not fetch them. A new
    dict each call, so a caller's edit never leaks into other manifests.
    """
    return {
        "mediaType": OCI_EMPTY,
        "digest": EMPTY_DIGEST,
        "size": EMPTY_SIZE,
        "data": EMPTY_DATA_B64,
    }


# -- in-toto (attestation spec v1, envelope.md) -------------------------------------------------
IN_TOTO_JSON: Final = "application/vnd.in-toto+json"
#: Annotation naming a statement's predicateType (on an attestation's layer, as buildx writes
#: it, and on the signature of an attestation that is no provenance)
ANN_IN_TOTO_PREDICATE_TYPE: Final = "in-toto.io/predicate-type"

# -- Helm (helm/helm pkg/registry/constants.go) -------------------------------------------------
#: Config blob of a chart manifest: ``json.Marshal`` of the chart's metadata (Chart.yaml).
HELM_CONFIG: Final = "application/vnd.cncf.helm.config.v1+json"
#: The packaged chart (``<name>-<version>.tgz``), the chart manifest's layer.
HELM_CHART_CONTENT: Final = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
#: A chart's ``.prov`` file (signed with GnuPG), an optional second layer.
HELM_PROVENANCE: Final = "application/vnd.cncf.helm.chart.provenance.v1.prov"

# -- nvkr's own artifact types -------------------------------------------------------------------
#: A single executable (a Go binary, ...) as an OCI artifact; its layer is ``OCTET_STREAM``.
NVKR_BINARY: Final = "application/vnd.nvkr.binary.v1"
#: A bootable disk image (node image) as an OCI artifact; its first layer is the disk.
NVKR_MACHINE_IMAGE: Final = "application/vnd.nvkr.machine-image.v1"
#: A QCOW2 (version 3) disk image, the machine image's layer.
NVKR_QCOW2: Final = "application/vnd.nvkr.disk.qcow2"
#: artifactType of the release set index and of its metadata manifest.
NVKR_RELEASE_SET: Final = "application/vnd.nvkr.release-set.v1+json"
#: Config blob of the metadata manifest: the release set's table of contents (``schemaVersion`` 1).
NVKR_RELEASE_SET_METADATA: Final = "application/vnd.nvkr.release-set.metadata.v1+json"
#: artifactType of a release set's source closure (``nvkr publish --with-sources``): an image
#: index whose ``subject`` is the release set index, over manifests of its sources' blobs.
NVKR_SOURCE_CLOSURE: Final = "application/vnd.nvkr.source-closure.v1"
#: Config blob of each source closure manifest: the ``nvkr mirror export`` index (index.json).
NVKR_MIRROR_INDEX: Final = "application/vnd.nvkr.mirror.index.v1+json"
#: The recipe files and lockfile a release set was built from, as a deterministic tar.
NVKR_PROJECT_TAR: Final = "application/vnd.nvkr.project.v1.tar"
#: ``go version -m`` output of a Go binary, as JSON, attached as a second layer.
NVKR_GO_BUILDINFO: Final = "application/vnd.nvkr.go-buildinfo.v1+json"

# -- annotation keys: image-spec "Pre-Defined Annotation Keys" -------------------------------
ANN_TITLE: Final = "org.opencontainers.image.title"
ANN_CREATED: Final = "org.opencontainers.image.created"
ANN_VERSION: Final = "org.opencontainers.image.version"
ANN_REF_NAME: Final = "org.opencontainers.image.ref.name"
ANN_DESCRIPTION: Final = "org.opencontainers.image.description"
ANN_URL: Final = "org.opencontainers.image.url"
ANN_SOURCE: Final = "org.opencontainers.image.source"
ANN_AUTHORS: Final = "org.opencontainers.image.authors"

# -- nvkr's annotation keys (reverse domain of nvkr.dev) ---------------------------------------
ANN_NVKR_ARTIFACT: Final = "dev.nvkr.artifact"
ANN_NVKR_VARIANT: Final = "dev.nvkr.variant"
ANN_NVKR_GPU: Final = "dev.nvkr.gpu"
ANN_NVKR_KUBERNETES: Final = "dev.nvkr.kubernetes"
ANN_NVKR_ARCH: Final = "dev.nvkr.arch"
ANN_NVKR_DISK_FORMAT: Final = "dev.nvkr.disk-format"
#: zlib or zstd on a machine image whose QCOW2 has compressed clusters (absent: uncompressed)
ANN_NVKR_DISK_COMPRESSION: Final = "dev.nvkr.disk-compression"
ANN_NVKR_RELEASE_SET: Final = "dev.nvkr.release-set"
#: What an attachment is: ``signature``, ``build-record``, ``verification-summary``, or the role
#: of an artifact's attestation (``pcr-predictions``)
ANN_NVKR_ATTACHMENT: Final = "dev.nvkr.attachment"

#: Indexes: JSON documents whose ``manifests`` list further manifests (or indexes).
INDEX_TYPES: Final = frozenset({OCI_INDEX, DOCKER_MANIFEST_LIST})
#: Image manifests: JSON documents that reference a ``config`` and ``layers``.
IMAGE_MANIFEST_TYPES: Final = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})
#: Media types whose blobs are JSON documents that reference further blobs.
MANIFEST_TYPES: Final = INDEX_TYPES | IMAGE_MANIFEST_TYPES
