"""Publishing a release set: its OCI image layout pushed to a registry, the tag written last.

The last arrow of the data flow (docs/architecture.md, "The data flow"): ``dist/<name>/`` → OCI
registry. The closure of the release set index (every blob
:meth:`~nvkr.oci.layout.LayoutReader.walk` reaches), with the attachments ``index.json`` lists
beside it (the signatures of ``nvkr build --sign``: manifests whose ``subject`` is in the set), goes
up in an order that never lets a reader see a half-published set (steps 1-6 are
:mod:`nvkr.delivery.destination`'s, which ``nvkr copy`` shares):

1. blobs (configs, layers, payloads): ``HEAD`` first, skipped when present, else mounted from a
   ``mount_from`` repository of the same registry, else uploaded (in parallel, ``jobs`` at a time);
2. manifests without ``subject`` (image manifests, artifact manifests, the metadata manifest,
   then the image indexes over them), children before parents, each checked with ``HEAD`` first;
3. manifests that carry ``subject`` (provenance, attachments) and whatever depends on them;
4. the referrers of each subject: nothing to do where the registry serves the OCI 1.1 referrers
   API; else the fallback tag ``sha256-<hex>`` (distribution-spec "Referrers Tag Schema") holds an
   image index of them, read, merged and written back (:func:`update_referrers_tag`);
5. the release set index, by digest;
6. only then the tag (default: the release set's name, ``org.opencontainers.image.ref.name``);
7. the build record beside the layout (``dist/<name>.build-record.json`` and its DSSE envelope,
   :mod:`nvkr.releaseset.record`), when there is one: checked against the set first, then pushed
   as referrers of the release set index (artifact manifests, annotation
   ``dev.nvkr.attachment: build-record``), the referrers API or fallback tag as above.

The build record is not part of the release set: the set is complete and tagged before it goes
up, and a record that fails (a registry error, or a record of another build) fails the publish
afterwards, saying the set is published; publishing again pushes only what is missing.

So an interruption at any moment leaves the tag absent or at the previous complete set, and a
re-run completes the set: everything is content-addressed and checked before it is sent again. A
re-publish of an unchanged set uploads 0 blob bytes. Leaf blobs are not hashed here (their sizes
are checked): the registry hashes every upload and refuses one whose digest differs
(:class:`~nvkr.errors.IntegrityError`); manifests and indexes are hashed while the layout is read.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nvkr.delivery.destination import (
    Destination,
    EventSink,
    PushManifest,
    PushReport,
    manifest_graph,
    run_jobs,
)
from nvkr.errors import IntegrityError, RegistryError, UsageError
from nvkr.monitor.transfer import counted
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import LayoutBlob, LayoutReader
from nvkr.oci.referrers import referrer_descriptor, update_referrers_tag
from nvkr.oci.registry import Reference, RegistryClient, fallback_tag


@dataclass
class PublishReport(PushReport):
    """What :func:`publish_layout` did (:class:`~nvkr.delivery.destination.PushReport`);
    ``referrers_tags`` include the build record's; ``build_record`` the digests of the build
    record manifests pushed or found (empty: no record beside the layout)."""

    build_record: list[str] = field(default_factory=list)


def _root(reader: LayoutReader, name: str | None) -> dict[str, Any]:
    """The ``index.json`` entry to publish: ``name``'s, else the only one with a ref.name (a
    signed release set lists its signatures beside it, without one), else the only entry."""
    if name is not None:
        return reader.resolve(name)
    manifests = reader.index["manifests"]
    named = [m for m in manifests if mt.ANN_REF_NAME in (m.get("annotations") or {})]
    if len(named) == 1:
        return dict(named[0])
    if len(manifests) != 1:
        raise UsageError(
            f"{reader.path}/index.json names {len(named)} of its {len(manifests)} manifests",
            hint=f"say which with --name ({', '.join(reader.names()) or 'none is named'})",
        )
    return dict(manifests[0])


def _attachments(reader: LayoutReader, root: Mapping[str, Any], closure: set[str]) -> list[Any]:
    """The other ``index.json`` entries that are referrers of something in ``closure``
    (signatures ``nvkr build --sign`` puts beside the release set, outside its index)."""
    found = []
    for entry in reader.index["manifests"]:
        if entry.get("digest") == root["digest"] or entry.get("mediaType") not in (
            mt.IMAGE_MANIFEST_TYPES | mt.INDEX_TYPES
        ):
            continue
        subject = reader.read_json(entry, referrer="index.json").get("subject")
        if isinstance(subject, dict) and subject.get("digest") in closure:
            found.append(entry)
    return found


class _Publish(Destination):
    """One publish: the layout read and the upload of a blob from it (the rest of the steps of
    :func:`publish_layout` are :class:`~nvkr.delivery.destination.Destination`'s)."""

    report: PublishReport

    def __init__(
        self,
        client: RegistryClient,
        repo: str,
        reader: LayoutReader,
        report: PublishReport,
        on_event: EventSink | None,
        jobs: int,
    ) -> None:
        super().__init__(client, repo, report, on_event, jobs)
        self.reader = reader

    def blob(self, blob: LayoutBlob, mount_from: Sequence[str]) -> None:
        if self.present_or_mounted(blob, mount_from):
            return
        path = self.reader.blob_path(blob.digest)
        sent = self.client.push_blob(
            self.repo,
            blob.digest,
            blob.size,
            lambda: counted(
                open(path, "rb"),  # noqa: SIM115
                lambda done: self.progress(blob.digest, blob.size, done),
            ),
        )
        self.event("blob-uploaded", digest=blob.digest, size=blob.size, sent=sent)


def publish_layout(
    layout_dir: Path,
    ref: Reference | str,
    client: RegistryClient,
    *,
    name: str | None = None,
    mount_from: Sequence[str] = (),
    jobs: int = 4,
    on_event: EventSink | None = None,
) -> PublishReport:
    """Push the release set (or any image or index) named in ``layout_dir``'s ``index.json`` to
    ``ref``'s repository, in the order of the module docstring, and tag it last.

    Args:
        layout_dir: an OCI image layout (``dist/<name>/``).
        ref: ``REGISTRY/REPOSITORY[:TAG][@sha256:<hex>]`` on ``client``'s registry; the tag
            defaults to the set's ``org.opencontainers.image.ref.name``; a digest must be the set's.
        client: the registry's client (credentials, ``insecure``, chunk size).
        name: which ``ref.name`` of ``index.json`` (default: its only manifest).
        mount_from: repositories of the same registry to mount missing blobs from.
        jobs: blob transfers (and manifest pushes of one level) at a time.
        on_event: called as ``on_event(kind, fields)`` (from worker threads, one at a time):
            ``start``, ``blob-skipped``/``blob-mounted``/``blob-uploaded`` (``digest``, ``size``
            in bytes), ``manifest-skipped``/``manifest-pushed``, ``referrers-tag`` (``tag``,
            ``subject``, ``written``), ``tagged`` (``tag``, ``digest``, ``previous``),
            ``build-record`` (``subject``, ``digests`` of its manifests), and while a blob goes
            up ``blob-progress`` (``digest``, ``size``, ``done``: bytes read so far).
    Returns:
        a :class:`PublishReport`.
    Raises:
        UsageError: a bad reference or tag, another registry than the client's, a digest that is
            not the set's, a layout naming several manifests without ``name``.
        IntegrityError: the layout is damaged (missing blob, size or manifest digest mismatch),
            or the registry computed or answered another digest than sent (exit 3).
        RegistryError: the registry refused (credentials, errors) or stayed unreachable; the
            tag is then untouched (unless only the build record failed: step 7).
    """
    started = time.monotonic()
    ref = Reference.parse(ref) if isinstance(ref, str) else ref
    if ref.registry != client.registry:
        raise UsageError(f"reference {ref} is not on {client.registry}, the client's registry")
    reader = LayoutReader(Path(layout_dir))
    root, set_name, tag = _target(reader, layout_dir, ref, name)
    root_data = reader.read_blob(root)
    meta: dict[str, Any] | None = None
    if json.loads(root_data).get("artifactType") == mt.NVKR_RELEASE_SET:
        from nvkr.releaseset import read_metadata  # only then: it imports the whole assembler

        meta = read_metadata(reader.path, set_name)  # a release set: its metadata must check out
    blobs = reader.walk(root, deep=False)
    closure = {b.digest for b in blobs}
    for attachment in _attachments(reader, root, closure):
        for b in reader.walk(attachment, deep=False):
            if b.digest not in closure:
                closure.add(b.digest)
                blobs.append(b)
    manifests, leaves = _graph(reader, blobs)
    report = PublishReport(
        reference=f"{ref.registry}/{ref.repository}:{tag}@{root['digest']}",
        repository=ref.repository,
        tag=tag,
        digest=root["digest"],
        name=set_name,
        blobs=len(leaves),
        manifests=len(manifests),
    )
    run = _Publish(client, ref.repository, reader, report, on_event, jobs)
    run.event(
        "start",
        reference=report.reference,
        name=set_name,
        blobs=len(leaves),
        bytes=sum(b.size for b in leaves),
    )
    # 1. blobs
    run_jobs(run.jobs, lambda b: run.blob(b, mount_from), leaves)
    # 2.-3. manifests, those about a subject (and what holds them) after the rest
    others = [d for d in manifests if d != root["digest"]]
    missing = run.push_manifests(manifests, others)
    # 4. referrers
    run.push_referrers(manifests, others)
    # 5.-6. the release set index, by digest, then the tag, last
    run.finish(manifests[root["digest"]], missing, tag)
    # 7. the build record, after the set (module docstring)
    if meta is not None and set_name:
        _publish_build_record(run, Path(layout_dir), root, str(set_name), meta)
    report.seconds = time.monotonic() - started
    return report


def _graph(
    reader: LayoutReader, blobs: Sequence[LayoutBlob]
) -> tuple[dict[str, PushManifest], list[LayoutBlob]]:
    """The manifests among ``blobs`` (read from the layout, by digest, with what they
    reference) and the leaf blobs."""
    manifests = manifest_graph(
        (b, reader.read_blob(_desc(b), referrer=b.referrer))
        for b in blobs
        if b.media_type in mt.MANIFEST_TYPES
    )
    return manifests, [b for b in blobs if b.digest not in manifests]


def publish_referrer(
    layout_dir: Path,
    ref: Reference,
    client: RegistryClient,
    *,
    jobs: int = 4,
    on_event: EventSink | None = None,
) -> PublishReport:
    """Push the one manifest of ``layout_dir``'s ``index.json``, a referrer (it names a
    ``subject`` the repository holds), with its closure: steps 1-4 of the module docstring,
    itself among the late manifests, and no tag (a release set's source closure,
    :mod:`nvkr.delivery.withsources`).

    Raises:
        IntegrityError, RegistryError: as :func:`publish_layout`.
    """
    started = time.monotonic()
    reader = LayoutReader(Path(layout_dir))
    root = _root(reader, None)
    blobs = reader.walk(root, deep=False)
    manifests, leaves = _graph(reader, blobs)
    report = PublishReport(
        reference=f"{ref.registry}/{ref.repository}@{root['digest']}",
        repository=ref.repository,
        tag="",
        digest=root["digest"],
        name=None,
        blobs=len(leaves),
        manifests=len(manifests),
    )
    run = _Publish(client, ref.repository, reader, report, on_event, jobs)
    run.event("start", reference=report.reference, name=None, blobs=len(leaves),
              bytes=sum(b.size for b in leaves), what="the source closure ")  # fmt: skip
    run_jobs(run.jobs, lambda b: run.blob(b, ()), leaves)
    run.push_manifests(manifests, list(manifests))
    run.push_referrers(manifests, list(manifests))
    report.seconds = time.monotonic() - started
    return report


def _target(
    reader: LayoutReader, layout_dir: Path, ref: Reference, name: str | None
) -> tuple[dict[str, Any], str | None, str]:
    """``(root descriptor, its ref.name, the tag to push)`` of the layout's manifest ``name``.

    Raises:
        UsageError: no tag (neither in ``ref`` nor the manifest's ref.name), a bad tag, a
            digest in ``ref`` that is not the root's. IntegrityError: the root is no manifest.
    """
    root = _root(reader, name)
    set_name = (root.get("annotations") or {}).get(mt.ANN_REF_NAME)
    tag = ref.tag or set_name
    if not tag:
        raise UsageError(
            f"{layout_dir}: the manifest has no org.opencontainers.image.ref.name to tag it with",
            hint="give the tag: REGISTRY/REPOSITORY:TAG",
        )
    Reference.parse(f"{ref.registry}/{ref.repository}:{tag}")  # the default tag is checked too
    if ref.digest and ref.digest != root["digest"]:
        raise UsageError(f"{ref} names {ref.digest}, but {layout_dir} holds {root['digest']}")
    if root.get("mediaType") not in mt.MANIFEST_TYPES:
        raise IntegrityError(f"{layout_dir}/index.json: {root['digest']} is no manifest or index")
    return root, set_name, tag


def _desc(blob: LayoutBlob) -> dict[str, Any]:
    return {"mediaType": blob.media_type, "digest": blob.digest, "size": blob.size}


def _publish_build_record(
    run: _Publish,
    layout_dir: Path,
    root: Mapping[str, Any],
    set_name: str,
    meta: Mapping[str, Any],
) -> None:
    """Push the build record beside ``layout_dir`` (if any) as referrers of ``root``.

    Raises:
        IntegrityError: the record does not belong to this set (or is malformed).
        RegistryError: the registry refused. Either way the set itself is published and tagged,
            which the message says.
    """
    from nvkr.releaseset.record import build_record_attachments
    from nvkr.releaseset.recordcheck import check_build_record

    attachments = build_record_attachments(layout_dir, root, set_name)
    if not attachments:
        return
    client, repo, subject = run.client, run.repo, str(root["digest"])
    where = f"{run.report.reference} is published and tagged, but its build record is not"
    check = check_build_record(layout_dir, meta, subject)
    if check.problems:
        message, hint = check.problems[0]
        raise IntegrityError(f"{where}: {message}", hint=hint)
    entries = []
    pushed = False  # anything sent: a re-publish finds the record there already
    try:
        for att in attachments:
            for digest, data in sorted(att.blobs.items()):
                if not client.blob_exists(repo, digest):
                    client.push_blob(repo, digest, len(data), functools.partial(io.BytesIO, data))
                    pushed = True
            blob = LayoutBlob(
                "sha256:" + hashlib.sha256(att.manifest).hexdigest(),
                len(att.manifest),
                mt.OCI_MANIFEST,
                str(check.path),
            )
            if client.manifest_digest(repo, blob.digest) != blob.digest:
                client.push_manifest(repo, blob.digest, att.manifest, mt.OCI_MANIFEST)
                pushed = True
            entries.append(referrer_descriptor(blob, json.loads(att.manifest)))
        if not client.has_referrers_api(repo, subject):
            pushed = update_referrers_tag(client, repo, subject, entries) or pushed
            tag = fallback_tag(subject)
            if tag not in run.report.referrers_tags:
                run.report.referrers_tags = sorted([*run.report.referrers_tags, tag])
            run.report.referrers = "fallback-tag"
        elif run.report.referrers == "none":
            run.report.referrers = "api"
    except RegistryError as e:
        raise RegistryError(
            f"{where}: {e.message}",
            hint=e.hint or "publish again: only the build record is left to push",
            status=e.status,
        ) from e
    run.report.build_record = [str(e["digest"]) for e in entries]
    run.event("build-record", subject=subject, digests=run.report.build_record, pushed=pushed)
