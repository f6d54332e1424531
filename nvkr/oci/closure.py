"""The closure of a manifest in the store (:func:`store_closure`): every document and blob an
OCI manifest or index reaches (children, layers, config, a referrer's subject), each read from
the store and checked against its descriptor's digest and size, as a release set or a cache
entry is assembled from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from nvkr.errors import BuildError, IntegrityError
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
        digest, size = check_descriptor(desc, where)
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
            check_data(desc, where)
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
        check_bytes(data, digest, size, where, where=str(path))
        doc = json_document(data, desc, where)
        here = f"{where} -> {document_label(media_type, digest)}"
        subject = subject_link(doc, here)
        if subject is not None:
            todo.append(subject)
        todo.extend(reversed(children_of(doc, media_type, here)))
    return out


def _store_path(store: BlobSource, digest: str, media_type: str, where: str) -> Path:
    try:
        return store.blob_path(digest)
    except ValueError as e:  # a store keyed by sha256 only, asked for a sha512 blob
        raise IntegrityError(
            f"blob {digest} ({media_type}, referenced by {where}) cannot be in the store: {e}"
        ) from e
