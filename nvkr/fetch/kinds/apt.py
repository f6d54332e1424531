"""The ``apt`` source kind. A closed set of Debian packages and their manifest (:mod:`nvkr.fetch.apt`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nvkr.fetch.kind import Fetcher, ModuleKind
from nvkr.redact import redact_url

if TYPE_CHECKING:
    from nvkr.store import Store

#: the media type of the package manifest an apt source is stored as
MANIFEST_MEDIA_TYPE = "application/vnd.nvkr.apt-manifest.v1+json"


class AptKind(ModuleKind):
    kind = "apt"
    update = "nvkr.update.kinds:AptUpdate"
    identity = ("kind", "arch", "digest", "keyrings")

    def fetcher(self) -> Fetcher:
        from nvkr.fetch import apt

        return apt

    def blobs(self, entry: Mapping[str, Any]) -> list[str]:
        """The manifest and every .deb."""
        return [str(entry["digest"]), *(p["sha256"] for p in entry.get("packages") or [])]

    def debs(self, entry: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        packages: list[dict[str, Any]] = entry.get("packages") or []
        return packages

    def to_download(
        self, entry: Mapping[str, Any], store: Store
    ) -> tuple[tuple[int, int] | None, int | None]:
        """The .debs ``store`` lacks and those locked (counts), and the lacking ones' bytes
        (when every one of them has a size)."""
        from nvkr.fetch.debs import missing_debs

        packages = entry.get("packages")
        if not isinstance(packages, list):
            return super().to_download(entry, store)
        missing = missing_debs(packages, store)
        sizes = [p.get("size") for p in missing]
        known = [n for n in sizes if isinstance(n, int)]
        return (len(missing), len(packages)), sum(known) if len(known) == len(sizes) else None

    def descriptor(self, name: str, entry: Mapping[str, Any]) -> dict[str, Any]:
        """The package manifest: no ``uri``, the kind and arch as annotations."""
        desc = super().descriptor(name, entry)
        desc["annotations"] = {"kind": "apt", "arch": redact_url(entry["arch"])}
        desc["mediaType"] = MANIFEST_MEDIA_TYPE
        return desc

    def descriptors(self, name: str, entry: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The manifest's, then one per .deb (``uri`` its URL, ``digest.sha256``, ``name``
        ``NAME_VERSION_ARCH``)."""
        out = [self.descriptor(name, entry)]
        for pkg in entry.get("packages") or []:
            out.append(
                {
                    "name": f"{pkg['name']}_{pkg['version']}_{pkg['arch']}",
                    "uri": redact_url(pkg["url"]),
                    "digest": {"sha256": str(pkg["sha256"]).split(":", 1)[1]},
                }
            )
        return out

    def where(self, name: str, entry: Mapping[str, Any], debs: tuple[int, int] | None) -> str:
        """``MISSING of LOCKED .debs (ARCH)``."""
        locked = len(entry.get("packages") or [])
        missing, locked = debs if debs is not None else (locked, locked)
        return f"{missing} of {locked} .debs ({entry.get('arch')})"

    def mirror_files(
        self, store: Store, name: str, source: Any, entry: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The package manifest, every .deb at its repository URL and the keyrings fetched by
        URL and pinned by fingerprint (a path keyring stays a file of the repository or the
        host)."""
        from nvkr.recipe.sources import AptKeyring

        blobs: list[dict[str, Any]] = [{"digest": entry["digest"], "urls": [], "role": "manifest"}]
        for p in entry["packages"]:
            blobs.append(
                {
                    "digest": p["sha256"],
                    "size": p["size"],
                    "urls": [p["url"]],
                    "package": f"{p['name']} {p['version']} ({p['arch']})",
                }
            )
        keyrings = entry.get("keyrings") or {}
        for repo_name, repo in sorted(source.apt.items()):
            if isinstance(repo.keyring, AptKeyring) and repo_name in keyrings:
                blobs.append(
                    {"digest": keyrings[repo_name], "urls": [repo.keyring.url], "role": "keyring"}
                )
        return {"upstream": sorted({r.url for r in source.apt.values()}), "blobs": blobs}
