"""The ``pypi`` source kind. A wheel, or one file in it, fetched with pip (:mod:`nvkr.fetch.pypi`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nvkr.fetch.kind import Fetcher, ModuleKind
from nvkr.redact import redact_urls

if TYPE_CHECKING:
    from nvkr.store import Store


class PypiKind(ModuleKind):
    kind = "pypi"
    update = "nvkr.update.kinds:PypiUpdate"
    identity = ("kind", "url", "version", "filename", "member", "digest")

    def fetcher(self) -> Fetcher:
        from nvkr.fetch import pypi

        return pypi

    def descriptor(self, name: str, entry: Mapping[str, Any]) -> dict[str, Any]:
        """``uri`` the wheel's URL (else ``pkg:pypi/NAME@VERSION``), the wheel's file name (and
        the member used) as annotations."""
        desc = super().descriptor(name, entry)
        e = redact_urls(entry)
        desc["uri"] = e.get("url") or f"pkg:pypi/{e['name']}@{e['version']}"
        desc["annotations"] = {"filename": e["filename"]}
        if "member" in e:
            desc["annotations"]["member"] = e["member"]
        return desc

    def version(self, entry: Mapping[str, Any]) -> str | None:
        return str(entry["version"])

    def mirror_files(
        self, store: Store, name: str, source: Any, entry: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The wheel at the URL pip got it from; a member is no file of the index: served at
        no URL."""
        blob: dict[str, Any] = {"digest": entry["digest"], "urls": []}
        if entry.get("member"):
            blob["role"] = "member"  # the wheel's member, not the wheel: nothing to serve
        elif entry.get("url"):
            blob["urls"] = [entry["url"]]
        upstream = f"{entry.get('name')}=={entry.get('version')} {entry.get('filename')}"
        return {"upstream": upstream, "blobs": [blob]}
