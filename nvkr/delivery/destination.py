"""The writing half of ``nvkr publish`` and ``nvkr copy``: a closure of manifests and blobs put
into one repository in an order that never lets a reader see half of it.

:mod:`nvkr.delivery.publish` reads the closure from an OCI image layout, :mod:`nvkr.delivery.copy`
from another registry; both hand it to a :class:`Destination`, which does what is the same for
both (the numbered steps are publish's and copy's):

1. blobs: ``HEAD`` first, skipped when present, else mounted from a repository of the same
   registry (:meth:`Destination.present_or_mounted`); the caller uploads the rest;
2. manifests without ``subject``, children before parents, each checked with ``HEAD`` first
   (a manifest that references a blob just sent is missing without asking);
3. manifests that carry ``subject`` (provenance, signatures, attachments) and whatever holds
   them, after their subjects (:meth:`Destination.push_manifests`);
4. the referrers of each subject: nothing to do where the registry serves the OCI 1.1 referrers
   API; else the fallback tag ``sha256-<hex>`` (distribution-spec "Referrers Tag Schema") holds
   an image index of them, read, merged and written back (:meth:`Destination.push_referrers`);
5. the root (the release set index), by digest, so that its presence means all of it is there;
6. only then the tag (:meth:`Destination.finish`).

The counters of a :class:`PushReport` are kept by :meth:`Destination.event`, the one place every
step reports through, from whichever worker thread.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from typing import Any

from nvkr.errors import IntegrityError
from nvkr.oci.layout import LayoutBlob
from nvkr.oci.referrers import referrer_descriptor, update_referrers_tag
from nvkr.oci.registry import RegistryClient, fallback_tag

EventSink = Callable[[str, dict[str, Any]], None]


@dataclass
class PushReport:
    """What a push into one repository did. Sizes in bytes, ``seconds`` wall-clock, digests
    ``sha256:<hex>``; ``referrers`` is ``api`` (the registry indexes them), ``fallback-tag`` or
    ``none`` (nothing pushed carries a subject), ``referrers_tags`` the fallback tags written
    or found; ``previous`` what the tag named before (None: no such tag)."""

    reference: str
    repository: str
    tag: str
    digest: str
    name: str | None
    blobs: int = 0
    blobs_uploaded: int = 0
    bytes_uploaded: int = 0
    bytes_sent: int = 0
    blobs_skipped: int = 0
    bytes_skipped: int = 0
    blobs_mounted: int = 0
    manifests: int = 0
    manifests_pushed: int = 0
    manifests_skipped: int = 0
    referrers: str = "none"
    referrers_tags: list[str] = field(default_factory=list)
    previous: str | None = None
    tag_moved: bool = False
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-able camelCase keys (``bytesUploaded``, ...), seconds as ms."""
        out: dict[str, Any] = {}
        for k, v in asdict(self).items():
            parts = k.split("_")
            out[parts[0] + "".join(p.title() for p in parts[1:])] = v
        out["milliseconds"] = round(out.pop("seconds") * 1000)
        return out


@dataclass(frozen=True)
class PushManifest:
    """A manifest or index to push: its descriptor (``blob``), its verbatim bytes and parsed
    document, the digests of every blob it holds (``children``: manifests, config, layers, not
    its subject) and of the manifests among them and its subject that must be there first
    (``deps``)."""

    blob: LayoutBlob
    data: bytes
    doc: dict[str, Any]
    deps: frozenset[str]
    children: frozenset[str]


def manifest_graph(found: Iterable[tuple[LayoutBlob, bytes]]) -> dict[str, PushManifest]:
    """The manifests ``found`` (each descriptor with its checked bytes), by digest, each with
    the digests it references (``children``) and the manifests among ``found`` it must follow
    (``deps``: its children and its subject).

    Raises:
        IntegrityError: a manifest that is not a JSON object.
    """
    docs: dict[str, tuple[LayoutBlob, bytes, dict[str, Any], frozenset[str], set[str]]] = {}
    for blob, data in found:
        doc = json.loads(data)
        if not isinstance(doc, dict):
            raise IntegrityError(f"{blob.referrer}: {blob.digest} is not a JSON object")
        refs = [*(doc.get("manifests") or []), doc.get("config"), *(doc.get("layers") or [])]
        children = frozenset(r["digest"] for r in refs if isinstance(r, dict) and "digest" in r)
        subject = doc.get("subject")
        deps = set(children) | ({subject["digest"]} if isinstance(subject, dict) else set())
        docs[blob.digest] = (blob, data, doc, children, deps)
    return {
        d: PushManifest(blob, data, doc, frozenset(deps & docs.keys() - {d}), children)
        for d, (blob, data, doc, children, deps) in docs.items()
    }


def levels(nodes: Iterable[str], deps: Mapping[str, frozenset[str]]) -> list[list[str]]:
    """``nodes`` in dependency levels: each level only needs earlier ones (or nodes not listed).

    Raises:
        IntegrityError: the nodes depend on each other in a cycle.
    """
    todo = set(nodes)
    out: list[list[str]] = []
    while todo:
        ready = sorted(d for d in todo if not (deps[d] & todo))
        if not ready:
            raise IntegrityError(f"manifests reference each other in a cycle: {sorted(todo)}")
        out.append(ready)
        todo -= set(ready)
    return out


def run_jobs(jobs: int, fn: Callable[[Any], None], items: Sequence[Any]) -> None:
    """``fn(item)`` for every item, ``jobs`` at a time; the first exception (or Ctrl-C) cancels
    what has not started and is raised once the running calls have returned."""
    if len(items) <= 1 or jobs <= 1:
        for item in items:
            fn(item)
        return
    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        futures = [pool.submit(fn, item) for item in items]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for f in done:
            exc = f.exception()
            if exc is not None:
                raise exc
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class Destination:
    """The repository ``repo`` of ``client`` being written, the report's counters and the
    steps of the module docstring that do not depend on where the closure comes from.

    Args:
        client: the destination registry's client.
        repo: the repository written.
        report: counted by :meth:`event`.
        on_event: called as ``on_event(kind, fields)``, one call at a time.
        jobs: transfers (and manifest pushes of one level) at a time.
    """

    def __init__(
        self,
        client: RegistryClient,
        repo: str,
        report: PushReport,
        on_event: EventSink | None,
        jobs: int,
    ) -> None:
        self.client, self.repo, self.report = client, repo, report
        self.jobs = max(1, jobs)
        self.lock = threading.Lock()
        self._on_event = on_event
        self.sent: set[str] = set()  # blobs uploaded or mounted by this run

    def event(self, kind: str, **fields: Any) -> None:
        """Count ``kind`` in the report (``blob-skipped``, ``blob-mounted``, ``blob-uploaded``
        with ``digest``, ``size`` and ``sent`` bytes, ``manifest-pushed``,
        ``manifest-skipped``) and pass it on."""
        with self.lock:  # one event at a time, whichever worker thread reports it
            if kind == "blob-skipped":
                self.report.blobs_skipped += 1
                self.report.bytes_skipped += fields["size"]
            elif kind == "blob-mounted":
                self.report.blobs_mounted += 1
                self.sent.add(fields["digest"])
            elif kind == "blob-uploaded":
                self.sent.add(fields["digest"])
                self.report.blobs_uploaded += 1
                self.report.bytes_uploaded += fields["size"]
                self.report.bytes_sent += fields["sent"]
            elif kind == "manifest-pushed":
                self.report.manifests_pushed += 1
            elif kind == "manifest-skipped":
                self.report.manifests_skipped += 1
            if self._on_event is not None:
                self._on_event(kind, fields)

    def progress(self, digest: str, size: int, done: int, **fields: Any) -> None:
        """A ``blob-progress`` event, passed on without counting (a byte bar)."""
        if self._on_event is not None:
            self._on_event("blob-progress", {"digest": digest, "size": size, "done": done,
                                             **fields})  # fmt: skip

    def present_or_mounted(self, blob: LayoutBlob, mount_from: Sequence[str]) -> bool:
        """Step 1 up to the upload: whether blob ``blob`` is in the repository now, because it
        was there (``HEAD``) or was mounted from one of ``mount_from`` (same registry).

        Raises:
            RegistryError: the registry failed or is unreachable.
        """
        if self.client.blob_exists(self.repo, blob.digest):
            self.event("blob-skipped", digest=blob.digest, size=blob.size)
            return True
        for source in mount_from:
            if source != self.repo and self.client.mount_blob(self.repo, blob.digest, source):
                self.event("blob-mounted", digest=blob.digest, size=blob.size, source=source)
                return True
        return False

    def exists(self, m: PushManifest) -> bool:
        """Whether the repository holds manifest ``m`` (``HEAD`` by digest)."""
        return self.client.manifest_digest(self.repo, m.blob.digest) == m.blob.digest

    def push(self, m: PushManifest) -> None:
        """``PUT`` manifest ``m`` by its digest, its bytes as they are."""
        self.client.push_manifest(self.repo, m.blob.digest, m.data, m.blob.media_type)
        self.event(
            "manifest-pushed",
            digest=m.blob.digest,
            size=m.blob.size,
            mediaType=m.blob.media_type,
            artifactType=m.doc.get("artifactType"),
        )

    def push_manifests(self, manifests: Mapping[str, PushManifest], others: list[str]) -> set[str]:
        """Steps 2-3: push the manifests ``others`` the repository lacks, children first, those
        about a subject (and what holds them) after the rest; returns the digests found missing.

        Raises:
            IntegrityError: manifests in a cycle, or the registry answered another digest.
            RegistryError: the registry refused or is unreachable.
        """
        # a registry holds a manifest only with everything it references, so one that references
        # a blob just sent is missing too: it is pushed without asking first
        missing = {d for d in others if manifests[d].children & self.sent}
        while more := {d for d in others if manifests[d].children & missing} - missing:
            missing |= more

        def check(d: str) -> None:
            if self.exists(manifests[d]):
                self.event("manifest-skipped", digest=d, size=manifests[d].blob.size)
            else:
                with self.lock:
                    missing.add(d)

        run_jobs(self.jobs, check, [d for d in others if d not in missing])
        missing_in_order = [d for d in others if d in missing]
        deps = {d: m.deps for d, m in manifests.items()}
        late = {d for d in others if "subject" in manifests[d].doc}
        while more := {d for d in others if deps[d] & late} - late:
            late |= more  # whatever references a late manifest is late too
        for phase in (
            [d for d in missing_in_order if d not in late],
            [d for d in missing_in_order if d in late],
        ):
            for level in levels(phase, deps):
                run_jobs(self.jobs, lambda d: self.push(manifests[d]), level)
        return missing

    def push_referrers(self, manifests: Mapping[str, PushManifest], others: list[str]) -> None:
        """Step 4: where the registry has no referrers API, write the fallback tag of each
        subject the manifests ``others`` refer to (``report.referrers`` says which).

        Raises:
            RegistryError: the registry failed, a fallback tag holds something else than an
                image index, or concurrent writers kept moving it.
        """
        subjects: dict[str, list[dict[str, Any]]] = {}
        for d in others:
            subject = manifests[d].doc.get("subject")
            if isinstance(subject, dict) and isinstance(subject.get("digest"), str):
                entry = referrer_descriptor(manifests[d].blob, manifests[d].doc)
                subjects.setdefault(subject["digest"], []).append(entry)
        if not subjects:
            return
        if self.client.has_referrers_api(self.repo, next(iter(subjects))):
            self.report.referrers = "api"
            return
        self.report.referrers = "fallback-tag"

        def referrers(subject: str) -> None:
            written = update_referrers_tag(self.client, self.repo, subject, subjects[subject])
            with self.lock:
                self.report.referrers_tags.append(fallback_tag(subject))
            self.event("referrers-tag", tag=fallback_tag(subject), subject=subject, written=written)

        run_jobs(self.jobs, referrers, sorted(subjects))
        self.report.referrers_tags.sort()

    def finish(self, root: PushManifest, missing: set[str], tag: str) -> None:
        """Steps 5-6: the root by digest (unless it is there and nothing under it was sent or
        missing), then ``tag``, last, at the root (``report.previous``, ``tag_moved``).

        Raises:
            IntegrityError: the registry answered another digest.
            RegistryError: the registry refused or is unreachable; the tag is then untouched.
        """
        if not root.children & (self.sent | missing) and self.exists(root):
            self.event("manifest-skipped", digest=root.blob.digest, size=root.blob.size)
        else:
            self.push(root)
        self.report.previous = self.client.manifest_digest(self.repo, tag)
        if self.report.previous != root.blob.digest:
            self.client.push_manifest(self.repo, tag, root.data, root.blob.media_type)
            self.report.tag_moved = True
        self.event("tagged", tag=tag, digest=root.blob.digest, previous=self.report.previous)
