"""``nvkr cache prune``: delete the entries of a remote cache that are older than a duration.

An entry's age is what its run record says: ``pushedOn`` (when the writer pushed it), read from
the run referrer's envelope payload (:mod:`nvkr.cache.entry`; not verified: the operator prunes
a repository of their own, and a forged date only keeps or drops a cache entry). An entry whose
run record cannot be read is kept and listed. Deleting one entry goes tag first, so no reader
finds it half gone: the tag (where the registry deletes tags; CNCF distribution 2.8 removes the
tags of a manifest with the manifest), the entry manifest by digest, its referrers by digest,
then the referrers fallback tag's index. Blobs stay: other entries may share them, and the
registry's own garbage collection (``registry garbage-collect``) frees what nothing references.
The registry must allow deletes (distribution: ``storage.delete.enabled: true``).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nvkr.cache.entry import ACTION_RUN, ANN_ATTACHMENT, CACHE_RUN, TAG_PREFIX
from nvkr.errors import IntegrityError, RegistryError
from nvkr.oci.referrers import list_referrers
from nvkr.oci.registry import fallback_tag
from nvkr.provenance import parse_timestamp
from nvkr.sign import envelope_parts

if TYPE_CHECKING:
    from nvkr.oci.registry import RegistryClient

_TAG = re.compile(rf"{TAG_PREFIX}[0-9a-f]{{64}}")


@dataclass
class PruneReport:
    """What a prune did: ``deleted`` and ``kept`` entries (``{"tag", "manifest", "pushedOn",
    "name"}``), ``unknown`` (tags whose run record could not be read: kept), ``dry_run``."""

    deleted: list[dict[str, Any]] = field(default_factory=list)
    kept: list[dict[str, Any]] = field(default_factory=list)
    unknown: list[dict[str, Any]] = field(default_factory=list)
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "deleted": self.deleted,
            "kept": self.kept,
            "unknown": self.unknown,
            "dryRun": self.dry_run,
        }


def _run_doc(client: RegistryClient, repo: str, digest: str) -> tuple[dict[str, Any], list[str]]:
    """The newest run record of entry ``digest`` (its payload, unverified; one manifest has
    several when writers under two salts pushed it) and the digests of every referrer of it.

    Raises:
        ValueError: no run record can be read.
        RegistryError: the registry failed.
    """
    from nvkr.cache.entry import EntryProblem
    from nvkr.cache.remote import referrer_envelope

    referrers = list_referrers(client, repo, digest)
    newest: tuple[float, dict[str, Any]] | None = None
    for r in referrers:
        if (r.get("annotations") or {}).get(ANN_ATTACHMENT) != CACHE_RUN:
            continue
        try:
            envelope, _ = referrer_envelope(client, repo, r, digest)
            payload, payload_type, _ = envelope_parts(envelope)
            doc = json.loads(payload)
            pushed = parse_timestamp(str(doc.get("pushedOn"))).timestamp()
        except (EntryProblem, IntegrityError, ValueError, AttributeError):
            continue
        except RegistryError as e:
            if e.status == 404:
                continue
            raise
        if payload_type != ACTION_RUN or doc.get("manifest") != digest:
            continue
        if newest is None or pushed > newest[0]:
            newest = (pushed, doc)
    if newest is None:
        raise ValueError("no readable run record")
    return newest[1], [str(r["digest"]) for r in referrers]


def prune(
    client: RegistryClient,
    repo: str,
    older_than: int,
    *,
    dry_run: bool = False,
    now: float | None = None,
    on_entry: Callable[[str, dict[str, Any]], None] | None = None,
) -> PruneReport:
    """Delete the entries of ``repo`` pushed more than ``older_than`` seconds before ``now``.

    ``on_entry(state, entry)`` is called per entry: ``deleted`` (or, with ``dry_run``, what
    would be), ``kept``, ``unknown``.

    Raises:
        RegistryError: the registry failed, or refused a delete (the message says which; a
            registry without deletes answers 405: enable ``storage.delete``).
    """
    now = time.time() if now is None else now
    report = PruneReport(dry_run=dry_run)
    say = on_entry or (lambda state, entry: None)
    for tag in sorted(t for t in client.tags(repo) if _TAG.fullmatch(t)):
        digest = client.manifest_digest(repo, tag)
        if digest is None:
            continue
        entry: dict[str, Any] = {"tag": tag, "manifest": digest}
        try:
            doc, referrers = _run_doc(client, repo, digest)
            pushed = parse_timestamp(str(doc.get("pushedOn")))
        except ValueError:
            report.unknown.append(entry)
            say("unknown", entry)
            continue
        entry.update(pushedOn=doc["pushedOn"], name=str(doc.get("name") or ""))
        if now - pushed.timestamp() <= older_than:
            report.kept.append(entry)
            say("kept", entry)
            continue
        if not dry_run:
            _delete_entry(client, repo, tag, digest, referrers)
        report.deleted.append(entry)
        say("deleted", entry)
    return report


def _delete_entry(
    client: RegistryClient, repo: str, tag: str, digest: str, referrers: list[str]
) -> None:
    try:
        client.delete_manifest(repo, tag)
    except RegistryError as e:
        # distribution 2.8 deletes no tag by name (UNSUPPORTED/405); deleting the manifest does
        if e.status not in (400, 405):
            raise
    try:
        client.delete_manifest(repo, digest)
    except RegistryError as e:
        if e.status == 405:
            raise RegistryError(
                e.message,
                hint="the registry does not allow deletes: enable them (distribution: "
                "storage.delete.enabled: true)",
                status=405,
            ) from e
        raise
    for ref in referrers:
        client.delete_manifest(repo, ref)
    index = client.manifest_digest(repo, fallback_tag(digest))
    if index is not None:
        client.delete_manifest(repo, index)
