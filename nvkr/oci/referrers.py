"""Referrers of a manifest (distribution-spec v1.1): listed, and kept in the fallback tag.

A manifest whose ``subject`` names another is one of that manifest's *referrers*: signatures,
provenance, build records, cache entries' signatures and run records. A registry with the OCI
1.1 referrers API indexes them itself (``GET /v2/<name>/referrers/<digest>``); CNCF distribution
2.8 has none, and there the client keeps an image index of them under the fallback tag
``sha256-<hex>`` (distribution-spec "Referrers Tag Schema"): :func:`update_referrers_tag` merges
into it, :func:`list_referrers` reads either. ``nvkr publish`` (release sets), ``nvkr pull`` and
the remote action cache (:mod:`nvkr.cache`) share these.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from nvkr.errors import IntegrityError, RegistryError
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import LayoutBlob, image_index, index_bytes
from nvkr.oci.registry import RegistryClient, fallback_tag

#: Attempts at a referrers-tag read-merge-write before giving up on concurrent writers.
MERGE_ATTEMPTS: Final = 5
#: Seconds to wait after writing a referrers tag before reading it back: a concurrent writer
#: that re-read the tag just before our write has sent its own by then, and our check sees it.
SETTLE: Final = 0.05


def referrer_descriptor(blob: LayoutBlob, doc: Mapping[str, Any]) -> dict[str, Any]:
    """The entry a referrers index lists for manifest ``doc`` (distribution-spec "Listing
    Referrers"): mediaType, digest, size, ``artifactType`` (else the config's media type) and the
    manifest's ``annotations``."""
    entry: dict[str, Any] = {"mediaType": blob.media_type, "digest": blob.digest, "size": blob.size}
    config = doc.get("config")
    artifact_type = doc.get("artifactType") or (
        config.get("mediaType") if isinstance(config, dict) else None
    )
    if artifact_type:
        entry["artifactType"] = artifact_type
    if doc.get("annotations"):
        entry["annotations"] = dict(doc["annotations"])
    return entry


def _read_referrers_tag(
    client: RegistryClient, repo: str, tag: str
) -> tuple[str | None, list[dict[str, Any]]]:
    try:
        data, media_type, digest = client.get_manifest(repo, tag)
    except RegistryError as e:
        if e.status == 404:
            return None, []
        raise
    try:
        doc = json.loads(data)
    except ValueError:
        doc = None
    manifests = doc.get("manifests") if isinstance(doc, dict) else None
    if media_type != mt.OCI_INDEX or not isinstance(manifests, list):
        raise RegistryError(
            f"{client.registry}/{repo}:{tag} is not a referrers index ({media_type})",
            hint="the tag sha256-<hex> is reserved for the referrers of that digest "
            "(distribution-spec); delete or rename what is there",
        )
    return digest, [
        m for m in manifests if isinstance(m, dict) and isinstance(m.get("digest"), str)
    ]


def update_referrers_tag(
    client: RegistryClient, repo: str, subject: str, entries: Sequence[Mapping[str, Any]]
) -> bool:
    """Make the referrers fallback tag of ``subject`` list ``entries`` (descriptors), keeping
    whatever others put there (distribution-spec "Pushing Manifests with Subject", fallback).

    Read, merge (by digest, sorted, so concurrent publishers converge on the same bytes), then
    write with ``If-Match: "<digest read>"`` (``If-None-Match: *`` when there was none). CNCF
    distribution 2.8 ignores both headers, so the tag is re-read just before the write and the
    merge starts over when it moved, and read again :data:`SETTLE` seconds after the write: when
    another writer's write landed in between and dropped our entries, they are merged in again
    (up to :data:`MERGE_ATTEMPTS` times). What remains (without a registry that honours
    If-Match) is a writer stalled for longer than :data:`SETTLE` between its re-read and its
    write, which can drop entries of one that already checked; publishing again repairs it.

    Returns:
        whether the tag was written (False: it already listed every entry).
    Raises:
        RegistryError: the tag holds something else than an image index, the registry failed,
            or the merge lost every attempt to concurrent writers.
    """
    tag = fallback_tag(subject)
    wanted = {str(e["digest"]) for e in entries}
    for _ in range(MERGE_ATTEMPTS):
        current, listed = _read_referrers_tag(client, repo, tag)
        have = {m["digest"] for m in listed}
        if wanted <= have:
            return False
        merged = listed + [dict(e) for e in entries if e["digest"] not in have]
        merged.sort(key=lambda m: str(m["digest"]))
        data = index_bytes(image_index(merged))
        if client.manifest_digest(repo, tag) != current:
            continue  # someone wrote since we read: merge again
        try:
            client.push_manifest(
                repo, tag, data, mt.OCI_INDEX, if_match=current, if_none_match=current is None
            )
        except RegistryError as e:
            if e.status == 412:  # a registry that honours If-Match saw another write
                continue
            if e.status == 400 and "DIGEST_INVALID" in e.message:
                continue  # distribution 2.8 says so while another writer stores the tag: merge

            raise
        time.sleep(SETTLE)
        _, after = _read_referrers_tag(client, repo, tag)
        if wanted <= {m["digest"] for m in after}:
            return True
    raise RegistryError(
        f"{client.registry}/{repo}:{tag}: the referrers index kept changing under "
        f"{MERGE_ATTEMPTS} attempts to merge into it",
        hint="another publisher writes it at the same time; publish again",
    )


def list_referrers(client: RegistryClient, repo: str, subject: str) -> list[dict[str, Any]]:
    """The referrers of manifest ``subject`` in ``repo``: the referrers API's index where the
    registry has one, else the fallback tag's (none when neither lists any).

    Returns:
        the index's ``manifests`` entries that are descriptors (a ``digest`` string each).
    Raises:
        IntegrityError: the fallback tag holds something that is not JSON.
        RegistryError: the registry failed or is unreachable.
    """
    # asked once per repository: a registry without the API answers 404 for every subject
    index = client.referrers(repo, subject) if client.has_referrers_api(repo, subject) else None
    if index is None:
        try:
            data, _, _ = client.get_manifest(repo, fallback_tag(subject))
        except RegistryError as e:
            if e.status == 404:
                return []
            raise
        try:
            index = json.loads(data)
        except ValueError as e:
            raise IntegrityError(f"referrers tag {fallback_tag(subject)} is not JSON") from e
    listed = index.get("manifests") if isinstance(index, dict) else None
    return [m for m in listed or [] if isinstance(m, dict) and isinstance(m.get("digest"), str)]
