"""The ``oci`` source kind. An OCI image or index by digest with its whole closure (:mod:`nvkr.fetch.oci`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nvkr.fetch.entries import OciEntry
from nvkr.fetch.kind import Fetcher, ModuleKind
from nvkr.redact import redact_url

if TYPE_CHECKING:
    from nvkr.store import Store


class OciKind(ModuleKind[OciEntry]):
    kind = "oci"
    identity = ("kind", "ref", "digest")

    def fetcher(self) -> Fetcher:
        from nvkr.fetch import oci

        return oci

    def blobs(self, entry: OciEntry) -> list[str]:
        """The pinned manifest or index and every blob of its closure (the lock lists it with
        the pinned one: a blob may repeat)."""
        return [entry.digest, *entry.blobs]

    def descriptor(self, name: str, entry: OciEntry) -> dict[str, Any]:
        """``uri`` ``oci://REF@DIGEST`` and the pinned document's ``mediaType``."""
        desc = super().descriptor(name, entry)
        desc["uri"] = f"oci://{redact_url(entry.ref)}@{redact_url(entry.digest)}"
        desc["mediaType"] = redact_url(entry.mediaType)
        return desc

    def mirror_files(self, store: Store, name: str, source: Any, entry: OciEntry) -> dict[str, Any]:
        """Every blob of the closure, documents with their media type, at the registry's
        ``/v2/`` URLs (none for an image layout)."""
        return {
            "upstream": f"{source.oci}@{entry.digest}",
            "blobs": _closure(store, source, entry),
        }

    def mirror_roots(self, url: str) -> list[str]:
        """The registry's ``/v2/`` (its API version check) beside a blob's URL."""
        return [url.split("/v2/", 1)[0] + "/v2/"] if "/v2/" in url else []


def _closure(store: Store, source: Any, entry: OciEntry) -> list[dict[str, Any]]:
    """Every blob of an oci source's closure, documents with their media type, walked in the
    store from the pinned digest (as :mod:`nvkr.fetch.oci` pulled it).

    Raises:
        IntegrityError: a document is not readable JSON, or the closure has other blobs than
            the lock entry lists.
    """
    import json
    from urllib.parse import urlsplit

    from nvkr.errors import IntegrityError
    from nvkr.fetch.oci import LAYOUT_PREFIX
    from nvkr.oci import mediatypes as mt
    from nvkr.oci.session import LOOPBACK

    ref: str = source.oci
    base = None
    if not ref.startswith(LAYOUT_PREFIX):
        registry, _, repository = ref.partition("/")
        host = urlsplit("//" + registry).hostname or registry
        scheme = "http" if source.insecure or host in LOOPBACK else "https"
        base = f"{scheme}://{registry}/v2/{repository}"
    out: dict[str, dict[str, Any]] = {}
    todo: list[tuple[str, str | None]] = [(entry.digest, entry.mediaType)]
    while todo:
        digest, media_type = todo.pop()
        if digest in out:
            continue
        item: dict[str, Any] = {"digest": digest, "urls": []}
        is_doc = media_type is None or media_type in mt.MANIFEST_TYPES
        if is_doc:
            try:
                doc = json.loads(store.read_blob(digest))
            except (OSError, ValueError) as e:
                raise IntegrityError(
                    f"oci source {ref}: store blob {digest} is not a readable JSON document: {e}"
                ) from e
            media_type = media_type or (doc.get("mediaType") if isinstance(doc, dict) else None)
            item["mediaType"] = media_type or mt.OCI_MANIFEST
            children = []
            if isinstance(doc, dict):
                children = list(doc.get("manifests") or []) + list(doc.get("layers") or [])
                if isinstance(doc.get("config"), dict):
                    children.append(doc["config"])
            for child in children:
                if isinstance(child, dict) and isinstance(child.get("digest"), str):
                    # a descriptor without a media type is a leaf, as nvkr.fetch.oci walks it
                    todo.append((child["digest"], str(child.get("mediaType") or "")))
        if base is not None:
            item["urls"] = [f"{base}/{'manifests' if is_doc else 'blobs'}/{digest}"]
        out[digest] = item
    listed = set(entry.blobs)
    if listed and listed != set(out):
        raise IntegrityError(
            f"oci source {ref}: the closure of {entry.digest} in the store has other blobs "
            "than the lock entry lists",
            hint="run `nvkr lock` again",
        )
    return [out[d] for d in sorted(out)]
