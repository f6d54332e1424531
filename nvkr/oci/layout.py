"""OCI descriptors, manifests and indexes as bytes, and reading an OCI image layout back.

The release-set builder (:mod:`nvkr.releaseset`) composes manifests with the pure functions here
and stores their bytes, and takes whole images into a release set with :func:`store_closure`;
``nvkr verify``, ``publish`` and the tests read a layout on disk with :class:`LayoutReader`.
Every document is serialised with :func:`nvkr.canonical.canonical_json` (sorted keys, no
whitespace), so the same content always gives the same bytes and the same digest whatever the
machine, locale or Python version. Shapes follow image-spec v1.1.0: descriptor.md,
manifest.md (including "Guidance for Artifacts Usage"), image-index.md and image-layout.md.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from nvkr.canonical import DIGEST_RE, canonical_json, sha256_bytes
from nvkr.errors import BuildError, IntegrityError, UsageError
from nvkr.oci import mediatypes as mt

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
        digest, size = _check_descriptor(desc, referrer)
        path = self.blob_path(digest)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise IntegrityError(
                f"blob {digest} (referenced by {referrer}) is missing from {self.path}",
                hint="rebuild or pull the release set again",
            ) from e
        _check_bytes(data, digest, size, referrer, where=str(path))
        return data

    def read_json(self, desc: Mapping[str, Any], *, referrer: str = "index.json") -> dict[str, Any]:
        """:meth:`read_blob` parsed as a JSON object whose ``mediaType`` (when set) matches ``desc``.

        Raises:
            IntegrityError: as :meth:`read_blob`, or the bytes are not a JSON object of that type.
        """
        return _json_document(self.read_blob(desc, referrer=referrer), desc, referrer)

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
            digest, size = _check_descriptor(desc, referrer)
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
                _check_data(desc, referrer)
            if media_type in mt.MANIFEST_TYPES:
                doc = self.read_json(desc, referrer=referrer)
                here = _label(media_type, digest)
                children = _children(doc, media_type, here)
                subject = _subject(doc, here)
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


# -- the closure of a manifest in the store -----------------------------------------------------
class BlobSource(Protocol):
    """Where blobs live by digest: :class:`nvkr.store.Store`, :class:`LayoutReader`, ..."""

    def blob_path(self, digest: str) -> Path: ...


def store_closure(
    store: BlobSource, root: Mapping[str, Any], *, referrer: str = "the root descriptor"
) -> list[dict[str, Any]]:
    """Every blob an index or manifest in ``store`` references, transitively, each checked.

    Indexes (OCI image index, Docker manifest list) are followed through ``manifests``, image
    manifests (OCI, Docker schema 2) through ``config`` and ``layers``, and either through
    ``subject`` (a layout holding the closure then holds what its referrers point at). Any other
    media type is a leaf. Indexes and manifests are read and hashed; leaf blobs (layers, which
    may be gigabytes) must exist at their size: the store verified their digest when they came in.

    Args:
        store: anything with ``blob_path(digest) -> Path``.
        root: the descriptor to start from (``{"mediaType", "digest", "size", ...}``); usually an
            image index or manifest, but a leaf descriptor gives just itself.
        referrer: what ``root`` is, for messages (e.g. ``artifact agent-image``).
    Returns:
        ``[{"mediaType", "digest", "size"}, ...]``, ``root`` first, then depth first in document
        order, each digest once (with the media type it was first reached by).
    Raises:
        IntegrityError: a blob is missing from the store, has another size or (for a manifest or
            index) another digest; a malformed descriptor or document; one digest given two sizes.
            The message names the blob, its media type and the chain of documents leading to it.
        BuildError: a Docker schema 1 manifest (nvkr does not take those into a release set).
    """
    seen: dict[str, tuple[int, str]] = {}
    out: list[dict[str, Any]] = []
    todo: list[tuple[Any, str]] = [(root, referrer)]
    while todo:
        desc, where = todo.pop()
        digest, size = _check_descriptor(desc, where)
        if digest in seen:
            if seen[digest][0] != size:
                raise IntegrityError(
                    f"blob {digest}: {where} gives size {size}, {seen[digest][1]} gives "
                    f"{seen[digest][0]}"
                )
            continue
        seen[digest] = (size, where)
        media_type = str(desc["mediaType"])
        out.append({"mediaType": media_type, "digest": digest, "size": size})
        if "data" in desc:
            _check_data(desc, where)
        if media_type in mt.DOCKER_SCHEMA1_TYPES:
            raise BuildError(
                f"{where}: {digest} is a Docker schema 1 manifest ({media_type})",
                hint="convert the image first, e.g. skopeo copy --format oci",
            )
        path = _store_path(store, digest, media_type, where)
        try:
            actual = path.stat().st_size
        except OSError as e:
            raise IntegrityError(
                f"blob {digest} ({media_type}, referenced by {where}) is not in the store "
                f"({path.parent})",
                hint="the cache entry is stale; run the build again to re-create it",
            ) from e
        if actual != size:
            raise IntegrityError(
                f"blob {digest} ({media_type}, referenced by {where}) is {actual} bytes in the "
                f"store, expected {size}",
                hint=f"{path} was truncated or replaced; delete it and build again",
            )
        if media_type not in mt.MANIFEST_TYPES:
            continue
        data = path.read_bytes()
        _check_bytes(data, digest, size, where, where=str(path))
        doc = _json_document(data, desc, where)
        here = f"{where} -> {_label(media_type, digest)}"
        subject = _subject(doc, here)
        if subject is not None:
            todo.append(subject)
        todo.extend(reversed(_children(doc, media_type, here)))
    return out


def _store_path(store: BlobSource, digest: str, media_type: str, where: str) -> Path:
    try:
        return store.blob_path(digest)
    except ValueError as e:  # a store keyed by sha256 only, asked for a sha512 blob
        raise IntegrityError(
            f"blob {digest} ({media_type}, referenced by {where}) cannot be in the store: {e}"
        ) from e


def _check_descriptor(desc: Mapping[str, Any], referrer: str) -> tuple[str, int]:
    if not isinstance(desc, Mapping):
        raise IntegrityError(
            f"{referrer}: a descriptor must be a JSON object, got {type(desc).__name__}"
        )
    digest, size, media_type = desc.get("digest"), desc.get("size"), desc.get("mediaType")
    if not isinstance(digest, str) or not DIGEST_RE.match(digest):
        raise IntegrityError(f"{referrer}: malformed digest {digest!r}")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise IntegrityError(f"{referrer}: descriptor of {digest} has a bad size {size!r}")
    if not isinstance(media_type, str) or not media_type:
        raise IntegrityError(f"{referrer}: descriptor of {digest} has no mediaType")
    return digest, size


def _check_bytes(data: bytes, digest: str, size: int, referrer: str, *, where: str) -> None:
    if len(data) != size:
        raise IntegrityError(
            f"blob {digest} (referenced by {referrer}) is {len(data)} bytes, expected {size}",
            hint=f"{where} was truncated or replaced",
        )
    alg = digest.split(":", 1)[0]
    actual = f"{alg}:{hashlib.new(alg, data).hexdigest()}"
    if actual != digest:
        raise IntegrityError(
            f"blob {digest} (referenced by {referrer}) is corrupt: its content hashes to {actual}",
            hint=f"{where} was modified",
        )


def _check_data(desc: Mapping[str, Any], referrer: str) -> None:
    try:
        data = base64.b64decode(str(desc["data"]), validate=True)
    except (binascii.Error, ValueError) as e:
        raise IntegrityError(
            f"{referrer}: descriptor of {desc['digest']} has bad base64 data"
        ) from e
    _check_bytes(
        data, str(desc["digest"]), int(desc["size"]), f"{referrer} (embedded data)", where="data"
    )


def _json_document(data: bytes, desc: Mapping[str, Any], referrer: str) -> dict[str, Any]:
    """``data`` (the checked bytes of ``desc``) as a JSON object whose own ``mediaType``, when
    set, is the descriptor's (image-spec manifest.md/image-index.md: they MUST match)."""
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise IntegrityError(
            f"blob {desc['digest']} (referenced by {referrer}) is not JSON: {e}"
        ) from e
    if not isinstance(doc, dict):
        raise IntegrityError(
            f"blob {desc['digest']} (referenced by {referrer}) is not a JSON object"
        )
    if (
        desc.get("mediaType") in mt.MANIFEST_TYPES
        and doc.get("mediaType", desc["mediaType"]) != desc["mediaType"]
    ):
        raise IntegrityError(
            f"blob {desc['digest']} (referenced by {referrer}) says mediaType "
            f"{doc.get('mediaType')!r}, its descriptor says {desc['mediaType']!r}"
        )
    return doc


def _label(media_type: str, digest: str) -> str:
    return f"{'index' if media_type in mt.INDEX_TYPES else 'manifest'} {digest}"


def _subject(doc: Mapping[str, Any], here: str) -> tuple[Mapping[str, Any], str] | None:
    subject = doc.get("subject")
    if subject is None:
        return None
    referrer = f"{here} subject"
    _check_descriptor(subject, referrer)
    return subject, referrer


def _children(doc: Mapping[str, Any], media_type: str, here: str) -> list[tuple[Any, str]]:
    """The descriptors a manifest or index references, each with where it was found.

    Only called for :data:`~nvkr.oci.mediatypes.MANIFEST_TYPES`: indexes (OCI image index,
    Docker manifest list) list ``manifests``; image manifests (OCI, Docker schema 2) a ``config``
    and ``layers``. Both are ``schemaVersion`` 2.
    """
    if doc.get("schemaVersion") != 2:
        raise IntegrityError(f"{here}: schemaVersion is {doc.get('schemaVersion')!r}, expected 2")
    if media_type in mt.INDEX_TYPES:
        manifests = doc.get("manifests")
        if not isinstance(manifests, list):
            raise IntegrityError(f"{here}: 'manifests' is not a list")
        return [(m, f"{here} manifests[{i}]") for i, m in enumerate(manifests)]
    config, layers = doc.get("config"), doc.get("layers")
    if not isinstance(layers, list):
        raise IntegrityError(f"{here}: 'layers' is not a list")
    return [(config, f"{here} config"), *((m, f"{here} layers[{i}]") for i, m in enumerate(layers))]


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
