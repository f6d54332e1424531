"""OCI descriptors, manifests and indexes as bytes, and reading an OCI image layout back.

The release-set builder (:mod:`nvkr.releaseset`) composes manifests with the pure functions here
and stores their bytes, and takes whole images into a release set with :func:`nvkr.oci.closure.store_closure`;
``nvkr verify``, ``publish`` and the tests read a layout on disk with :class:`LayoutReader`.
Every document is serialised with :func:`nvkr.canonical.canonical_json` (sorted keys, no
whitespace), so the same content always gives the same bytes and the same digest whatever the
machine, locale or Python version. Shapes follow image-spec v1.1.0: descriptor.md,
manifest.md (including "Guidance for Artifacts Usage"), image-index.md and image-layout.md.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nvkr.canonical import DIGEST_RE, canonical_json, sha256_bytes
from nvkr.errors import IntegrityError, UsageError
from nvkr.oci import mediatypes as mt
from nvkr.oci.walk import (
    check_bytes,
    check_data,
    check_descriptor,
    children_of,
    document_label,
    json_document,
    subject_link,
)

_CHUNK = 1 << 20


# -- pure constructors ---------------------------------------------------------------------------
def _check_annotations(annotations: Mapping[str, str]) -> dict[str, str]:
    for k, v in annotations.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(
                f"annotation {k!r}: keys and values must be strings (image-spec annotations.md)"
            )
    return dict(annotations)


def descriptor(
    media_type: str,
    data_or_digest: bytes | str,
    size: int | None = None,
    annotations: Mapping[str, str] | None = None,
    artifact_type: str | None = None,
    platform: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """An OCI content descriptor (image-spec descriptor.md).

    Args:
        media_type: the referenced blob's media type.
        data_or_digest: the blob's bytes (digest and size are computed) or its ``sha256:<hex>``.
        size: the blob's length in bytes; required with a digest, checked against bytes.
        annotations: string → string; omitted when empty.
        artifact_type: the referenced manifest's ``artifactType`` (descriptor.md, v1.1).
        platform: ``{"os": .., "architecture": .., ["variant": ..]}`` (image-index.md), for
            descriptors inside an index.
    Returns:
        ``{"mediaType", "digest", "size"[, "annotations", "artifactType", "platform"]}``; the
        bytes are never embedded (only the empty descriptor carries ``data``).
    Raises:
        ValueError: malformed digest, missing or negative size, size disagreeing with the bytes,
            or a platform without ``os``/``architecture``.
        TypeError: non-string annotations.
    """
    if isinstance(data_or_digest, bytes):
        digest = sha256_bytes(data_or_digest)
        if size is not None and size != len(data_or_digest):
            raise ValueError(
                f"descriptor size {size} disagrees with the {len(data_or_digest)} bytes given"
            )
        size = len(data_or_digest)
    else:
        digest = data_or_digest
        if not DIGEST_RE.match(digest):
            raise ValueError(
                f"malformed digest {digest!r}: expected sha256:<64 hex> or sha512:<128 hex>"
            )
        if size is None:
            raise ValueError(f"descriptor of {digest} needs a size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"descriptor size must be a non-negative integer, got {size!r}")
    desc: dict[str, Any] = {"mediaType": media_type, "digest": digest, "size": size}
    if annotations:
        desc["annotations"] = _check_annotations(annotations)
    if artifact_type:
        desc["artifactType"] = artifact_type
    if platform is not None:
        if not platform.get("os") or not platform.get("architecture"):
            raise ValueError(f"platform {dict(platform)!r} needs 'os' and 'architecture'")
        desc["platform"] = dict(platform)
    return desc


def subject_of(desc: Mapping[str, Any]) -> dict[str, Any]:
    """The ``subject`` form of a manifest descriptor: only mediaType, digest and size (manifest.md)."""
    return {"mediaType": desc["mediaType"], "digest": desc["digest"], "size": desc["size"]}


def artifact_manifest(
    artifact_type: str,
    layers: Sequence[Mapping[str, Any]],
    annotations: Mapping[str, str] | None = None,
    subject: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """An image manifest used as an artifact (manifest.md "Guidance for Artifacts Usage").

    Args:
        artifact_type: the artifact's type, e.g. ``application/vnd.nvkr.binary.v1``; always set.
        layers: descriptors of the payload blobs, in order; when empty, the empty descriptor is
            the single layer (manifest.md: layers SHOULD have at least one entry).
        annotations: manifest annotations; omitted when empty.
        subject: a manifest descriptor this one refers to (a referrer, distribution-spec 1.1).
        config: the config descriptor; default the empty descriptor.
    Returns:
        the manifest as a dict (``schemaVersion`` 2, ``mediaType`` set); serialise it with
        :func:`manifest_bytes`.
    """
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": mt.OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": dict(config) if config is not None else mt.empty_descriptor(),
        "layers": [dict(layer) for layer in layers] or [mt.empty_descriptor()],
    }
    if subject is not None:
        manifest["subject"] = subject_of(subject)
    if annotations:
        manifest["annotations"] = _check_annotations(annotations)
    return manifest


def image_manifest(
    config: Mapping[str, Any],
    layers: Sequence[Mapping[str, Any]],
    annotations: Mapping[str, str] | None = None,
    subject: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """An image manifest with a typed config and no ``artifactType`` (manifest.md).

    The shape Helm pushes a chart in (config ``application/vnd.cncf.helm.config.v1+json``): the
    config's media type says what the artifact is, so ``artifactType`` is left out (manifest.md:
    it MUST be set only when the config is the empty descriptor).

    Args:
        config: the config descriptor; not the empty descriptor (use :func:`artifact_manifest`).
        layers: descriptors of the layers, in order; at least one.
        annotations: manifest annotations; omitted when empty.
        subject: a manifest descriptor this one refers to.
    Returns:
        the manifest as a dict; serialise it with :func:`manifest_bytes`.
    Raises:
        ValueError: the config is the empty descriptor or there is no layer.
    """
    if config.get("mediaType") == mt.OCI_EMPTY:
        raise ValueError("a manifest with the empty config needs an artifactType")
    if not layers:
        raise ValueError("an image manifest needs at least one layer")
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": mt.OCI_MANIFEST,
        "config": dict(config),
        "layers": [dict(layer) for layer in layers],
    }
    if subject is not None:
        manifest["subject"] = subject_of(subject)
    if annotations:
        manifest["annotations"] = _check_annotations(annotations)
    return manifest


def image_index(
    manifests: Sequence[Mapping[str, Any]],
    annotations: Mapping[str, str] | None = None,
    artifact_type: str | None = None,
) -> dict[str, Any]:
    """An image index (image-index.md) over ``manifests`` (descriptors, order kept).

    Returns:
        ``{"schemaVersion": 2, "mediaType": index, "manifests": [...][, "artifactType",
        "annotations"]}``; serialise it with :func:`index_bytes`.
    """
    index: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": mt.OCI_INDEX,
        "manifests": [dict(m) for m in manifests],
    }
    if artifact_type:
        index["artifactType"] = artifact_type
    if annotations:
        index["annotations"] = _check_annotations(annotations)
    return index


def manifest_bytes(manifest: Mapping[str, Any]) -> bytes:
    """Canonical JSON bytes of an image manifest (same content → same bytes → same digest).

    Raises:
        ValueError: ``schemaVersion`` is not 2, ``mediaType`` is not the OCI manifest type, the
            config or layers are missing, or ``artifactType`` is missing while the config is the
            empty descriptor (manifest.md: it MUST then be set).
        TypeError: the manifest holds floats or non-string keys.
    """
    if manifest.get("schemaVersion") != 2 or manifest.get("mediaType") != mt.OCI_MANIFEST:
        raise ValueError("an image manifest needs schemaVersion 2 and mediaType " + mt.OCI_MANIFEST)
    if "config" not in manifest or not manifest.get("layers"):
        raise ValueError("an image manifest needs a config and at least one layer")
    if manifest["config"].get("mediaType") == mt.OCI_EMPTY and not manifest.get("artifactType"):
        raise ValueError("artifactType must be set when the config is the empty descriptor")
    return canonical_json(manifest)


def index_bytes(index: Mapping[str, Any]) -> bytes:
    """Canonical JSON bytes of an image index.

    Raises:
        ValueError: ``schemaVersion`` is not 2 or ``mediaType`` is not the OCI index type.
        TypeError: the index holds floats or non-string keys.
    """
    if index.get("schemaVersion") != 2 or index.get("mediaType") != mt.OCI_INDEX:
        raise ValueError("an image index needs schemaVersion 2 and mediaType " + mt.OCI_INDEX)
    return canonical_json(index)


def layout_file_bytes() -> bytes:
    """The ``oci-layout`` file: ``{"imageLayoutVersion":"1.0.0"}`` (image-layout.md)."""
    return canonical_json({"imageLayoutVersion": mt.IMAGE_LAYOUT_VERSION})


def blob_name(digest: str) -> str:
    """The path of a blob inside a layout: ``blobs/<alg>/<hex>`` (image-layout.md "Blobs")."""
    if not DIGEST_RE.match(digest):
        raise ValueError(f"malformed digest {digest!r}")
    alg, hexpart = digest.split(":", 1)
    return f"blobs/{alg}/{hexpart}"


def rfc3339(epoch: int) -> str:
    """``epoch`` (seconds since 1970-01-01 UTC) as ``YYYY-MM-DDTHH:MM:SSZ``.

    The form of ``org.opencontainers.image.created`` (annotations.md, RFC 3339); computed in UTC,
    so TZ and locale never change it.

    Raises:
        ValueError: ``epoch`` is not a non-negative integer.
    """
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ValueError(f"epoch must be a non-negative integer (seconds), got {epoch!r}")
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- reading a layout ----------------------------------------------------------------------------
@dataclass(frozen=True)
class LayoutBlob:
    """One blob reached from ``index.json``: ``digest`` ``sha256:<hex>``, ``size`` in bytes,
    ``media_type`` as first referenced, ``referrer`` naming the first place that references it."""

    digest: str
    size: int
    media_type: str
    referrer: str


def _hash_file(path: Path, algorithm: str) -> tuple[str, int]:
    h = hashlib.new(algorithm)
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return f"{algorithm}:{h.hexdigest()}", size


class LayoutReader:
    """A read-only view of an OCI image layout directory (image-layout.md).

    On construction it reads ``oci-layout`` (must say ``imageLayoutVersion`` 1.0.0) and
    ``index.json`` (must be an OCI image index); :meth:`walk` then checks the closure.

    Raises:
        IntegrityError: ``path`` is not a layout, or either file is missing or malformed.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            layout = json.loads((self.path / "oci-layout").read_bytes())
        except (OSError, ValueError) as e:
            raise IntegrityError(
                f"{self.path}: no readable oci-layout file ({e})",
                hint="is this the directory of a release set (dist/<name>/)?",
            ) from e
        if (
            not isinstance(layout, dict)
            or layout.get("imageLayoutVersion") != mt.IMAGE_LAYOUT_VERSION
        ):
            raise IntegrityError(
                f"{self.path}/oci-layout: imageLayoutVersion is not {mt.IMAGE_LAYOUT_VERSION!r}"
            )
        try:
            self.index_bytes = (self.path / "index.json").read_bytes()
            index = json.loads(self.index_bytes)
        except (OSError, ValueError) as e:
            raise IntegrityError(f"{self.path}/index.json: missing or not JSON ({e})") from e
        if (
            not isinstance(index, dict)
            or index.get("schemaVersion") != 2
            or not isinstance(index.get("manifests"), list)
        ):
            raise IntegrityError(
                f"{self.path}/index.json: not an OCI image index (schemaVersion 2, manifests)"
            )
        if index.get("mediaType", mt.OCI_INDEX) != mt.OCI_INDEX:
            raise IntegrityError(f"{self.path}/index.json: mediaType is {index.get('mediaType')!r}")
        self.index: dict[str, Any] = index

    def blob_path(self, digest: str) -> Path:
        """Where the blob ``algo:hex`` lives in this layout (it may not exist)."""
        return self.path / blob_name(digest)

    def names(self) -> list[str]:
        """The ``org.opencontainers.image.ref.name`` of every manifest in ``index.json``."""
        return [
            m["annotations"][mt.ANN_REF_NAME]
            for m in self.index["manifests"]
            if isinstance(m.get("annotations"), dict) and mt.ANN_REF_NAME in m["annotations"]
        ]

    def resolve(self, name: str) -> dict[str, Any]:
        """The descriptor in ``index.json`` whose ``ref.name`` annotation is ``name``.

        Raises:
            UsageError: no (or more than one) manifest carries that name.
        """
        found = [
            m
            for m in self.index["manifests"]
            if isinstance(m.get("annotations"), dict)
            and m["annotations"].get(mt.ANN_REF_NAME) == name
        ]
        if len(found) != 1:
            raise UsageError(
                f"{self.path}: {len(found)} manifests named {name!r} in index.json",
                hint=f"names present: {', '.join(self.names()) or '(none)'}",
            )
        return dict(found[0])

    def read_blob(self, desc: Mapping[str, Any], *, referrer: str = "index.json") -> bytes:
        """The bytes of the blob ``desc`` points to, checked against its digest and size.

        Meant for manifests, indexes and configs (read whole into memory).

        Raises:
            IntegrityError: malformed descriptor, missing blob, or a size/digest mismatch; the
                message names the blob and ``referrer``.
        """
        digest, size = check_descriptor(desc, referrer)
        path = self.blob_path(digest)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise IntegrityError(
                f"blob {digest} (referenced by {referrer}) is missing from {self.path}",
                hint="rebuild or pull the release set again",
            ) from e
        check_bytes(data, digest, size, referrer, where=str(path))
        return data

    def read_json(self, desc: Mapping[str, Any], *, referrer: str = "index.json") -> dict[str, Any]:
        """:meth:`read_blob` parsed as a JSON object whose ``mediaType`` (when set) matches ``desc``.

        Raises:
            IntegrityError: as :meth:`read_blob`, or the bytes are not a JSON object of that type.
        """
        return json_document(self.read_blob(desc, referrer=referrer), desc, referrer)

    def walk(self, root: Mapping[str, Any] | None = None, *, deep: bool = True) -> list[LayoutBlob]:
        """Every blob reachable from ``root`` (default: all of ``index.json``), each checked.

        Indexes (OCI, Docker manifest lists) are followed through ``manifests``, image manifests
        (OCI, Docker schema 2) through ``config`` and ``layers``; a ``subject`` is followed when
        its blob is in the layout (it is a back-reference: a referrer pulled without its subject
        is still complete), so the walk reaches what :func:`store_closure` puts in a layout.
        Indexes, manifests and descriptors' embedded ``data`` are always hashed; other blobs are
        hashed when ``deep`` (else only their size is checked, for speed).

        Returns:
            the blobs in the order first reached (depth first, document order), each once.
        Raises:
            IntegrityError: a missing blob, a digest or size mismatch, a malformed descriptor or
                manifest; the message names the blob and its referrer.
        """
        if root is None:
            todo = [
                (m, f"index.json manifests[{i}]") for i, m in enumerate(self.index["manifests"])
            ]
        else:
            todo = [(root, "the root descriptor")]
        seen: dict[str, LayoutBlob] = {}
        out: list[LayoutBlob] = []
        todo.reverse()  # a stack; reversed so the walk follows document order
        while todo:
            desc, referrer = todo.pop()
            digest, size = check_descriptor(desc, referrer)
            if digest in seen:
                if seen[digest].size != size:
                    raise IntegrityError(
                        f"blob {digest}: {referrer} gives size {size}, "
                        f"{seen[digest].referrer} gives {seen[digest].size}"
                    )
                continue
            media_type = str(desc["mediaType"])
            blob = LayoutBlob(digest=digest, size=size, media_type=media_type, referrer=referrer)
            seen[digest] = blob
            out.append(blob)
            if "data" in desc:
                check_data(desc, referrer)
            if media_type in mt.MANIFEST_TYPES:
                doc = self.read_json(desc, referrer=referrer)
                here = document_label(media_type, digest)
                children = children_of(doc, media_type, here)
                subject = subject_link(doc, here)
                if subject is not None and self.blob_path(subject[0]["digest"]).is_file():
                    todo.append(subject)  # below the children: reached after them
                todo.extend(reversed(children))
            else:
                self._check_leaf(digest, size, referrer, deep=deep)
        return out

    def unreferenced(self, blobs: Sequence[LayoutBlob] | None = None) -> list[str]:
        """Digests of files under ``blobs/`` that :meth:`walk` does not reach (sorted)."""
        reached = {b.digest for b in (blobs if blobs is not None else self.walk(deep=False))}
        found = []
        blobs_dir = self.path / "blobs"
        if blobs_dir.is_dir():
            for alg_dir in sorted(blobs_dir.iterdir()):
                for f in sorted(alg_dir.iterdir()):
                    found.append(f"{alg_dir.name}:{f.name}")
        return [d for d in found if d not in reached]

    def _check_leaf(self, digest: str, size: int, referrer: str, *, deep: bool) -> None:
        path = self.blob_path(digest)
        if not path.is_file():
            raise IntegrityError(
                f"blob {digest} (referenced by {referrer}) is missing from {self.path}",
                hint="rebuild or pull the release set again",
            )
        if deep:
            actual, actual_size = _hash_file(path, digest.split(":", 1)[0])
        else:
            actual, actual_size = digest, path.stat().st_size
        if actual_size != size:
            raise IntegrityError(
                f"blob {digest} (referenced by {referrer}) is {actual_size} bytes, expected {size}",
                hint=f"{path} was truncated or replaced; rebuild or pull the release set again",
            )
        if actual != digest:
            raise IntegrityError(
                f"blob {digest} (referenced by {referrer}) is corrupt: its content hashes to {actual}",
                hint=f"{path} was modified; rebuild or pull the release set again",
            )


def require_layout(path: Path) -> None:
    """Refuse a directory that is no OCI image layout at all (neither ``oci-layout`` nor
    ``index.json``): the user named the wrong directory (exit 2). A layout missing one of the
    two is left to the integrity checks (exit 3).

    Raises:
        UsageError: ``path`` holds neither file.
    """
    if not (path / "oci-layout").exists() and not (path / "index.json").exists():
        raise UsageError(
            f"{path} is not a release set: no oci-layout or index.json in it",
            hint="give a release set's layout, e.g. dist/<name>",
        )
