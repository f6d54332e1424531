"""The ``url`` source kind. A file fetched over http(s) or file, pinned by its digest (:mod:`nvkr.fetch.http`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nvkr.fetch.entries import UrlEntry
from nvkr.fetch.kind import Fetcher, ModuleKind
from nvkr.redact import redact_url

if TYPE_CHECKING:
    from nvkr.store import Store


class UrlKind(ModuleKind[UrlEntry]):
    kind = "url"
    update = "nvkr.update.kinds:UrlUpdate"
    identity = ("kind", "url", "digest")

    def fetcher(self) -> Fetcher:
        from nvkr.fetch import http

        return http

    def descriptor(self, name: str, entry: UrlEntry) -> dict[str, Any]:
        """``uri`` the URL, and ``digest.sha512`` when one was pinned."""
        desc = super().descriptor(name, entry)
        desc["uri"] = redact_url(entry.url)
        if entry.sha512 is not None:
            desc["digest"]["sha512"] = entry.sha512.split(":", 1)[1]
        return desc

    def mirror_files(self, store: Store, name: str, source: Any, entry: UrlEntry) -> dict[str, Any]:
        """The file at its URL, and the checksum file the recipe names rebuilt from the lock."""
        out: dict[str, Any] = {
            "upstream": entry.url,
            "blobs": [{"digest": entry.digest, "size": entry.size, "urls": [entry.url]}],
        }
        checksum = _checksum_file(source, entry)
        if checksum is not None:
            out["checksum"] = checksum
        return out


def _checksum_file(source: Any, entry: UrlEntry) -> dict[str, str] | None:
    """The ``checksumUrl`` of a url source rebuilt from the lock: ``HASH  NAME\\n``."""
    from nvkr.canonical import hex_of
    from nvkr.fetch.checksums import algorithm_for
    from nvkr.fetch.http import url_filename

    url = getattr(source, "checksumUrl", None)
    if not url:
        return None
    algo = algorithm_for(url, getattr(source, "checksumAlgorithm", None))
    algo = algo or ("sha512" if entry.sha512 is not None else "sha256")
    pinned = {"sha256": entry.sha256 or entry.digest, "sha512": entry.sha512}.get(algo)
    if not pinned:
        return None
    name = getattr(source, "filename", None) or url_filename(entry.url)
    return {"url": url, "algorithm": algo, "text": f"{hex_of(pinned)}  {name}\n"}
