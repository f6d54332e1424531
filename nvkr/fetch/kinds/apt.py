"""The ``apt`` source kind. A closed set of Debian packages and their manifest (:mod:`nvkr.fetch.apt`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nvkr.fetch.entries import AptEntry
from nvkr.fetch.kind import Fetcher, ModuleKind
from nvkr.redact import redact_url

if TYPE_CHECKING:
    from nvkr.store import Store

#: the media type of the package manifest an apt source is stored as
MANIFEST_MEDIA_TYPE = "application/vnd.nvkr.apt-manifest.v1+json"


class AptKind(ModuleKind[AptEntry]):
    kind = "apt"
    update = "nvkr.update.kinds:AptUpdate"
    identity = ("kind", "arch", "digest", "keyrings")

    def fetcher(self) -> Fetcher:
        from nvkr.fetch import apt

        return apt

    def check(self, name: str, source: Any, entry: AptEntry) -> None:
        """The arch, every package the recipe pins at its version, and the .deb list hashing to
        the entry's digest (which action keys see: an edited list would pass a cached rootfs)."""
        from nvkr.fetch.context import check_manifest, check_versions

        super().check(name, source, entry)
        check_versions(name, {p.name: p.version for p in entry.packages}, source.packages)
        check_manifest(name, entry.manifest(), entry.digest)  # a cached rootfs's .debs, edited

    def blobs(self, entry: AptEntry) -> list[str]:
        """The manifest and every .deb."""
        return [entry.digest, *(p.sha256 for p in entry.packages)]

    def debs(self, entry: AptEntry) -> list[dict[str, Any]] | None:
        return [p.to_json() for p in entry.packages]

    def to_download(
        self, entry: AptEntry, store: Store
    ) -> tuple[tuple[int, int] | None, int | None]:
        """The .debs ``store`` lacks and those locked (counts), and the lacking ones' bytes."""
        missing = [p for p in entry.packages if not store.has_blob(p.sha256)]
        return (len(missing), len(entry.packages)), sum(p.size for p in missing)

    def descriptor(self, name: str, entry: AptEntry) -> dict[str, Any]:
        """The package manifest: no ``uri``, the kind and arch as annotations."""
        desc = super().descriptor(name, entry)
        desc["annotations"] = {"kind": "apt", "arch": redact_url(entry.arch)}
        desc["mediaType"] = MANIFEST_MEDIA_TYPE
        return desc

    def descriptors(self, name: str, entry: AptEntry) -> list[dict[str, Any]]:
        """The manifest's, then one per .deb (``uri`` its URL, ``digest.sha256``, ``name``
        ``NAME_VERSION_ARCH``)."""
        out = [self.descriptor(name, entry)]
        for pkg in entry.packages:
            out.append(
                {
                    "name": f"{pkg.name}_{pkg.version}_{pkg.arch}",
                    "uri": redact_url(pkg.url),
                    "digest": {"sha256": pkg.sha256.split(":", 1)[1]},
                }
            )
        return out

    def where(self, name: str, entry: AptEntry, debs: tuple[int, int] | None) -> str:
        """``MISSING of LOCKED .debs (ARCH)``."""
        locked = len(entry.packages)
        missing, locked = debs if debs is not None else (locked, locked)
        return f"{missing} of {locked} .debs ({entry.arch})"

    def mirror_files(self, store: Store, name: str, source: Any, entry: AptEntry) -> dict[str, Any]:
        """The package manifest, every .deb at its repository URL and the keyrings fetched by
        URL and pinned by fingerprint (a path keyring stays a file of the repository or the
        host)."""
        from nvkr.recipe.sources import AptKeyring

        blobs: list[dict[str, Any]] = [{"digest": entry.digest, "urls": [], "role": "manifest"}]
        for p in entry.packages:
            blobs.append(
                {
                    "digest": p.sha256,
                    "size": p.size,
                    "urls": [p.url],
                    "package": f"{p.name} {p.version} ({p.arch})",
                }
            )
        keyrings = entry.keyrings or {}
        for repo_name, repo in sorted(source.apt.items()):
            if isinstance(repo.keyring, AptKeyring) and repo_name in keyrings:
                blobs.append(
                    {"digest": keyrings[repo_name], "urls": [repo.keyring.url], "role": "keyring"}
                )
        return {"upstream": sorted({r.url for r in source.apt.values()}), "blobs": blobs}
