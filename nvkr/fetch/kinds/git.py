"""The ``git`` source kind. A commit's tree as a deterministic tar (:mod:`nvkr.fetch.git`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nvkr.fetch.entries import GitEntry
from nvkr.fetch.kind import Fetcher, ModuleKind
from nvkr.redact import redact_url

if TYPE_CHECKING:
    from nvkr.store import Store


class GitKind(ModuleKind[GitEntry]):
    kind = "git"
    identity = ("kind", "url", "commit", "digest")

    def fetcher(self) -> Fetcher:
        from nvkr.fetch import git

        return git

    def descriptor(self, name: str, entry: GitEntry) -> dict[str, Any]:
        """``uri`` ``git+URL@COMMIT`` and ``digest.gitCommit``."""
        desc = super().descriptor(name, entry)
        url, commit = redact_url(entry.url), entry.commit
        desc["uri"] = f"git+{url}@{commit}"
        desc["digest"]["gitCommit"] = commit
        return desc

    def mirror_files(self, store: Store, name: str, source: Any, entry: GitEntry) -> dict[str, Any]:
        """The tree's tar, served at no URL (a mirror is no git server)."""
        upstream = f"{entry.url}@{entry.commit}"
        return {"upstream": upstream, "blobs": [{"digest": entry.digest, "urls": []}]}

    def commit_time(self, entry: GitEntry) -> int | None:
        """The commit's committer time."""
        return entry.commitTime
