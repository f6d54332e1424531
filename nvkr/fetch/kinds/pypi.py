"""The ``pypi`` source kind. A wheel, or one file in it, fetched with pip (:mod:`nvkr.fetch.pypi`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nvkr.fetch.entries import PypiEntry
from nvkr.fetch.kind import Fetcher, ModuleKind
from nvkr.redact import redact_url

if TYPE_CHECKING:
    from nvkr.store import Store


class PypiKind(ModuleKind[PypiEntry]):
    kind = "pypi"
    update = "nvkr.update.kinds:PypiUpdate"
    identity = ("kind", "url", "version", "filename", "member", "digest")

    def fetcher(self) -> Fetcher:
        from nvkr.fetch import pypi

        return pypi

    def descriptor(self, name: str, entry: PypiEntry) -> dict[str, Any]:
        """``uri`` the wheel's URL (else ``pkg:pypi/NAME@VERSION``), the wheel's file name (and
        the member used) as annotations."""
        desc = super().descriptor(name, entry)
        url = redact_url(entry.url) if entry.url else None
        desc["uri"] = url or f"pkg:pypi/{redact_url(entry.name)}@{redact_url(entry.version)}"
        desc["annotations"] = {"filename": redact_url(entry.filename)}
        if entry.member is not None:
            desc["annotations"]["member"] = redact_url(entry.member)
        return desc

    def version(self, entry: PypiEntry) -> str | None:
        return entry.version

    def mirror_files(
        self, store: Store, name: str, source: Any, entry: PypiEntry
    ) -> dict[str, Any]:
        """The wheel at the URL pip got it from; a member is no file of the index: served at
        no URL."""
        blob: dict[str, Any] = {"digest": entry.digest, "urls": []}
        if entry.member:
            blob["role"] = "member"  # the wheel's member, not the wheel: nothing to serve
        elif entry.url:
            blob["urls"] = [entry.url]
        upstream = f"{entry.name}=={entry.version} {entry.filename}"
        return {"upstream": upstream, "blobs": [blob]}
