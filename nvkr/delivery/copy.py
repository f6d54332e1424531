"""Copying a release set between registries, whole: ``nvkr copy REF DEST[:TAG]``.

Promotion (a CI registry → production → an air-gapped site) moves a release set as it is: the
same bytes, so the same digests, with every referrer (signatures, provenance, SBOMs, the build
record, attestations, a source closure). The source half reads the closure from the registry
REF names (:class:`_Source`); the writing half is :mod:`nvkr.delivery.destination`'s, as
``nvkr publish``'s is, in the same order:

1. the source walk, before anything is written: the root (REF's digest, else its tag), every
   manifest and index it reaches (nested indexes, manifests, then configs and layers as leaves)
   and, for every manifest reached, its referrers (the referrers API, else the fallback tag
   ``sha256-<hex>``: :func:`~nvkr.oci.referrers.list_referrers`) with their own closures and
   referrers, at any depth (a signature of a provenance manifest; a referrer that is an image
   index of artifact manifests). Every manifest is fetched by digest and hashed
   (:meth:`~nvkr.oci.registry.RegistryClient.get_manifest`), its size checked against its
   descriptor, and a referrer must name the subject it was listed for;
2. blobs: ``HEAD`` at the destination, skipped when present; in the same registry mounted from
   REF's repository; else downloaded (hashed on the way) into an unnamed temp file and uploaded
   from it (``jobs`` at a time; the registry hashes the upload too), so an upload that breaks off
   resumes without downloading again;
3. manifests, verbatim, children before parents, those with a ``subject`` after their subjects;
4. the referrers fallback tags, where the destination has no referrers API (merged with what is
   there);
5. the root by digest, and only then the tag (default: REF's tag, else the root's
   ``org.opencontainers.image.ref.name`` or ``dev.nvkr.release-set`` annotation).

So an interruption leaves the destination tag absent or at the set it named before, and a re-run
completes the copy, uploading nothing that is there. A source that answers other bytes than a
digest names fails the copy before the tag is written (:class:`~nvkr.errors.IntegrityError`,
exit 3).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Any

from nvkr.delivery.destination import (
    Destination,
    EventSink,
    PushReport,
    manifest_graph,
    run_jobs,
)
from nvkr.errors import IntegrityError, UsageError
from nvkr.monitor.transfer import counted
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import LayoutBlob
from nvkr.oci.referrers import list_referrers
from nvkr.oci.registry import Reference, RegistryClient
from nvkr.oci.walk import check_descriptor, children_of, json_document


@dataclass
class CopyReport(PushReport):
    """What :func:`copy_release_set` did (:class:`~nvkr.delivery.destination.PushReport`, of
    the destination): ``source`` the reference read (``REGISTRY/REPO@sha256:<hex>``),
    ``referrer_manifests`` how many of its manifests are referrers (carry a ``subject``: in the
    set or attached to it, at any depth; copied or found there),
    ``bytes_downloaded`` the bytes read from the source for the blobs uploaded."""

    source: str = ""
    referrer_manifests: int = 0
    bytes_downloaded: int = 0


@dataclass(frozen=True)
class _Found:
    """A manifest to fetch: its descriptor, where it was found (for messages) and, for a
    referrer, the subject it was listed for."""

    desc: Mapping[str, Any]
    where: str
    subject: str | None = None


@dataclass
class SourceClosure:
    """What :class:`_Source` found: every manifest (descriptor and checked bytes) and the leaf
    blobs."""

    manifests: list[tuple[LayoutBlob, bytes]]
    leaves: list[LayoutBlob]


class _Source:
    """The source repository ``repo`` of ``client``, walked by :meth:`closure`."""

    def __init__(self, client: RegistryClient, repo: str, jobs: int) -> None:
        self.client, self.repo, self.jobs = client, repo, max(1, jobs)
        self.where = f"{client.registry}/{repo}"

    def root(self, ref: Reference) -> tuple[dict[str, Any], bytes]:
        """The descriptor and bytes of the manifest ``ref`` names (its digest, else its tag).

        Raises:
            UsageError: it is no manifest or index. IntegrityError: a digest mismatch.
            RegistryError: no such manifest (404), refused, unreachable.
        """
        data, media_type, digest = self.client.get_manifest(self.repo, ref.digest or str(ref.tag))
        if media_type not in mt.MANIFEST_TYPES:
            raise UsageError(f"{ref} is a {media_type or 'document of no media type'}, no manifest")
        return {"mediaType": media_type, "digest": digest, "size": len(data)}, data

    def _fetch(self, item: _Found) -> tuple[LayoutBlob, bytes, list[_Found]]:
        """Fetch one manifest (checked) and list what it leads to: its children and referrers."""
        digest, size = check_descriptor(item.desc, item.where)
        media_type = str(item.desc["mediaType"])
        what = f"{self.where}@{digest} ({item.where})"
        data, _, _ = self.client.get_manifest(self.repo, digest)  # hashed: the digest checked
        if len(data) != size:
            raise IntegrityError(
                f"{what}: {len(data)} bytes, its descriptor says {size}",
                hint="the registry serves other bytes than the descriptor names",
            )
        doc = json_document(data, item.desc, item.where)
        subject = doc.get("subject")
        if item.subject is not None and (
            not isinstance(subject, dict) or subject.get("digest") != item.subject
        ):
            raise IntegrityError(
                f"{what}: listed as a referrer of {item.subject}, but its subject is "
                f"{subject.get('digest') if isinstance(subject, dict) else 'missing'}",
                hint=f"the referrers list of {item.subject} in {self.where} is wrong; fix it "
                "before copying",
            )
        here = f"{item.where} -> {digest}"
        leads = [_Found(d, w) for d, w in children_of(doc, media_type, here)]
        leads += [
            _Found(d, f"referrer of {digest}", subject=digest)
            for d in list_referrers(self.client, self.repo, digest)
        ]
        return LayoutBlob(digest, size, media_type, item.where), data, leads

    def _fetch_all(self, level: list[_Found]) -> list[tuple[LayoutBlob, bytes, list[_Found]]]:
        """:meth:`_fetch` of every item of ``level``, ``jobs`` at a time, in ``level``'s order."""
        fetched: dict[int, tuple[LayoutBlob, bytes, list[_Found]]] = {}

        def fetch(i: int) -> None:
            fetched[i] = self._fetch(level[i])  # one key per thread

        run_jobs(self.jobs, fetch, range(len(level)))
        return [fetched[i] for i in range(len(level))]

    def closure(self, root: Mapping[str, Any], where: str) -> SourceClosure:
        """The closure of ``root`` and of every referrer of a manifest in it, recursively,
        fetched a level at a time (``jobs`` manifests at once).

        Raises:
            IntegrityError: a digest or size mismatch, a malformed manifest, a referrer of
                another subject, one digest given two sizes.
            RegistryError: the source failed or is unreachable.
        """
        found = SourceClosure([], [])
        sizes: dict[str, int] = {str(root["digest"]): int(root["size"])}
        level = [_Found(root, where)]
        while level:
            following: list[_Found] = []
            for blob, data, leads in self._fetch_all(level):
                found.manifests.append((blob, data))
                for lead in leads:
                    digest, size = check_descriptor(lead.desc, lead.where)
                    if digest in sizes:
                        if sizes[digest] != size:
                            raise IntegrityError(
                                f"{self.where}@{digest}: {lead.where} gives size {size}, "
                                f"another descriptor {sizes[digest]}"
                            )
                        continue
                    sizes[digest] = size
                    media_type = str(lead.desc["mediaType"])
                    if media_type in mt.MANIFEST_TYPES:
                        following.append(lead)
                    else:
                        found.leaves.append(LayoutBlob(digest, size, media_type, lead.where))
            level = following
        return found


class _Progress:
    """A temp file as :meth:`RegistryClient.get_blob`'s writer, reporting bytes written."""

    def __init__(self, f: IO[bytes], report: Callable[[int], None]) -> None:
        self._f, self._report, self._done = f, report, 0

    def write(self, data: bytes, /) -> int:
        written = self._f.write(data)
        self._done += written
        self._report(self._done)
        return written


class _Copy(Destination):
    """One copy: the source to read blobs from, and the copy of one blob (the other steps are
    :class:`~nvkr.delivery.destination.Destination`'s)."""

    report: CopyReport

    def __init__(
        self,
        source: _Source,
        client: RegistryClient,
        repo: str,
        report: CopyReport,
        on_event: EventSink | None,
        jobs: int,
    ) -> None:
        super().__init__(client, repo, report, on_event, jobs)
        self.source = source
        same = source.client.registry == client.registry and source.repo != repo
        self.mount_from: tuple[str, ...] = (source.repo,) if same else ()

    def blob(self, blob: LayoutBlob) -> None:
        """Step 2 for ``blob``: there, mounted, or downloaded (hashed) and uploaded.

        Raises:
            IntegrityError: the source's bytes hash to another digest or have another size, or
                the destination computed another digest.
            RegistryError: either registry failed or is unreachable.
        """
        if self.present_or_mounted(blob, self.mount_from):
            return
        with tempfile.TemporaryFile(prefix="nvkr-copy-") as f:
            got = self.source.client.get_blob(
                self.source.repo,
                blob.digest,
                _Progress(f, lambda n: self.progress(blob.digest, blob.size, n, phase="download")),
                size=blob.size,
            )
            if got != blob.size:
                raise IntegrityError(
                    f"{self.source.where}@{blob.digest} ({blob.referrer}): {got} bytes, its "
                    f"descriptor says {blob.size}"
                )
            f.flush()  # the upload reads the file through a descriptor of its own
            with self.lock:
                self.report.bytes_downloaded += got

            def reopen() -> IO[bytes]:  # push_blob closes what it opens: a new descriptor
                return counted(
                    os.fdopen(os.dup(f.fileno()), "rb"),
                    lambda n: self.progress(blob.digest, blob.size, n, phase="upload"),
                )

            sent = self.client.push_blob(self.repo, blob.digest, blob.size, reopen)
        self.event("blob-uploaded", digest=blob.digest, size=blob.size, sent=sent)


def _tag(ref: Reference, dest: Reference, annotations: Mapping[str, Any]) -> str:
    """The destination tag: DEST's, else REF's, else the root's ref.name or release set name
    (``annotations``: the root's).

    Raises:
        UsageError: none of them, or a tag that is not valid.
    """
    named = annotations.get(mt.ANN_REF_NAME) or annotations.get(mt.ANN_NVKR_RELEASE_SET)
    tag = dest.tag or ref.tag or (str(named) if named else None)
    if not tag:
        raise UsageError(
            f"{dest}: no tag to write: {ref} names none and its manifest has no "
            f"{mt.ANN_REF_NAME} annotation",
            hint=f"give the tag: {dest.registry}/{dest.repository}:TAG",
        )
    Reference.parse(f"{dest.registry}/{dest.repository}:{tag}")  # a default tag is checked too
    return tag


def check_references(ref: Reference, dest: Reference) -> None:
    """Refuse what no copy can do, before anything is sent: a REF with neither tag nor digest.

    Raises:
        UsageError: naming the reference (exit 2).
    """
    if ref.tag is None and ref.digest is None:
        raise UsageError(
            f"reference {ref} names no tag and no digest: nvkr copy does not guess 'latest'",
            hint=f"name what to copy: {ref}:TAG or {ref}@sha256:<hex>",
        )


def copy_release_set(
    ref: Reference | str,
    dest: Reference | str,
    source: RegistryClient,
    client: RegistryClient,
    *,
    jobs: int = 4,
    on_event: EventSink | None = None,
) -> CopyReport:
    """Copy the release set (or any manifest or index) ``ref`` names, with every referrer at
    any depth, to ``dest``'s repository, in the order of the module docstring, the tag last.

    Args:
        ref: ``REGISTRY/REPOSITORY:TAG`` or ``...@sha256:<hex>`` on ``source``'s registry.
        dest: ``REGISTRY/REPOSITORY[:TAG][@sha256:<hex>]`` on ``client``'s registry; a digest
            must be the source's; the tag defaults to ``ref``'s, else the root's
            ``org.opencontainers.image.ref.name`` (or ``dev.nvkr.release-set``) annotation.
        source: the client of ``ref``'s registry (may be ``client`` itself).
        client: the client of ``dest``'s registry.
        jobs: manifests fetched, blobs copied and manifests pushed at a time.
        on_event: called as ``on_event(kind, fields)`` (from worker threads, one at a time):
            ``start`` (``reference``, ``destination``, ``blobs``, ``bytes``, ``manifests``,
            ``referrers``), then as :func:`~nvkr.delivery.publish.publish_layout`'s
            (``blob-skipped``/``blob-mounted``/``blob-uploaded``, ``manifest-skipped``/
            ``manifest-pushed``, ``referrers-tag``, ``tagged``), and ``blob-progress``
            (``digest``, ``size``, ``done``, ``phase``: ``download`` or ``upload``).
    Returns:
        a :class:`CopyReport`.
    Raises:
        UsageError: a reference on another registry than its client's, a REF with neither tag
            nor digest, a digest in ``dest`` that is not the source's, no tag to write (exit 2).
        IntegrityError: the source served other bytes than a digest names, a size mismatch, a
            malformed manifest or referrer list, or the destination answered another digest
            (exit 3). The destination tag is then untouched.
        RegistryError: either registry refused or stayed unreachable; the tag is then untouched.
    """
    started = time.monotonic()
    ref = Reference.parse(ref) if isinstance(ref, str) else ref
    dest = Reference.parse(dest) if isinstance(dest, str) else dest
    check_references(ref, dest)
    for r, c in ((ref, source), (dest, client)):
        if r.registry != c.registry:
            raise UsageError(f"reference {r} is not on {c.registry}, the client's registry")
    reader = _Source(source, ref.repository, jobs)
    root, data = reader.root(ref)
    if dest.digest and dest.digest != root["digest"]:
        raise UsageError(
            f"{dest} names {dest.digest}, but {ref} is {root['digest']}",
            hint=f"leave the digest out of the destination, or copy {ref.registry}/"
            f"{ref.repository}@{dest.digest}",
        )
    doc = json_document(data, root, str(ref))
    annotations = doc["annotations"] if isinstance(doc.get("annotations"), dict) else {}
    tag = _tag(ref, dest, annotations)
    found = reader.closure(root, str(ref))
    manifests = manifest_graph(found.manifests)
    referrers = sum(1 for m in manifests.values() if "subject" in m.doc)
    report = CopyReport(
        reference=f"{dest.registry}/{dest.repository}:{tag}@{root['digest']}",
        repository=dest.repository,
        tag=tag,
        digest=str(root["digest"]),
        name=annotations.get(mt.ANN_NVKR_RELEASE_SET),
        blobs=len(found.leaves),
        manifests=len(manifests),
        source=f"{ref.registry}/{ref.repository}@{root['digest']}",
        referrer_manifests=referrers,
    )
    run = _Copy(reader, client, dest.repository, report, on_event, jobs)
    run.event(
        "start",
        reference=report.source,
        destination=report.reference,
        name=report.name,
        blobs=len(found.leaves),
        bytes=sum(b.size for b in found.leaves),
        manifests=len(manifests),
        referrers=referrers,
    )
    run_jobs(run.jobs, run.blob, found.leaves)
    others = [d for d in manifests if d != root["digest"]]
    missing = run.push_manifests(manifests, others)
    run.push_referrers(manifests, others)
    run.finish(manifests[str(root["digest"])], missing, tag)
    report.seconds = time.monotonic() - started
    return report
