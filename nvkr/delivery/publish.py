"""Publishing a release set: its OCI image layout pushed to a registry, the tag written last.

The last arrow of the data flow (docs/architecture.md, "The data flow"): ``dist/<name>/`` → OCI
registry. The closure of the release set index (every blob
:meth:`~nvkr.oci.layout.LayoutReader.walk` reaches), with the attachments ``index.json`` lists
beside it (the signatures of ``nvkr build --sign``: manifests whose ``subject`` is in the set), goes
up in an order that never lets a reader see a half-published set:

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
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nvkr.errors import IntegrityError, RegistryError, UsageError
from nvkr.monitor.transfer import counted
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import LayoutBlob, LayoutReader
from nvkr.oci.referrers import referrer_descriptor, update_referrers_tag
from nvkr.oci.registry import Reference, RegistryClient, fallback_tag

EventSink = Callable[[str, dict[str, Any]], None]


@dataclass
class PublishReport:
    """What :func:`publish_layout` did. Sizes in bytes, ``seconds`` wall-clock, digests
    ``sha256:<hex>``; ``referrers`` is ``api`` (the registry indexes them), ``fallback-tag`` or
    ``none`` (nothing published carries a subject), ``referrers_tags`` the fallback tags
    written or found (the build record's included); ``build_record`` the digests of the build
    record manifests pushed or found (empty: no record beside the layout)."""

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
    build_record: list[str] = field(default_factory=list)
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
class _Manifest:
    blob: LayoutBlob
    data: bytes
    doc: dict[str, Any]
    deps: frozenset[str]  # digests of manifests in the set it references (children, subject)
    children: frozenset[str]  # digests of every blob it holds (not its subject)


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


def _levels(nodes: Iterable[str], deps: Mapping[str, frozenset[str]]) -> list[list[str]]:
    """``nodes`` in dependency levels: each level only needs earlier ones (or nodes not listed)."""
    todo = set(nodes)
    levels: list[list[str]] = []
    while todo:
        ready = sorted(d for d in todo if not (deps[d] & todo))
        if not ready:
            raise IntegrityError(f"manifests reference each other in a cycle: {sorted(todo)}")
        levels.append(ready)
        todo -= set(ready)
    return levels


def _run(jobs: int, fn: Callable[[Any], None], items: Sequence[Any]) -> None:
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


class _Publish:
    """One publish: the layout read, the counters, and the steps of :func:`publish_layout`."""

    def __init__(
        self,
        client: RegistryClient,
        repo: str,
        reader: LayoutReader,
        report: PublishReport,
        on_event: EventSink | None,
        jobs: int,
    ) -> None:
        self.client, self.repo, self.reader, self.report = client, repo, reader, report
        self.jobs = max(1, jobs)
        self._lock = threading.Lock()
        self._on_event = on_event
        self.sent: set[str] = set()  # blobs uploaded or mounted by this publish

    def event(self, kind: str, **fields: Any) -> None:
        with self._lock:  # one event at a time, whichever worker thread reports it
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

    def blob(self, blob: LayoutBlob, mount_from: Sequence[str]) -> None:
        if self.client.blob_exists(self.repo, blob.digest):
            self.event("blob-skipped", digest=blob.digest, size=blob.size)
            return
        for source in mount_from:
            if source != self.repo and self.client.mount_blob(self.repo, blob.digest, source):
                self.event("blob-mounted", digest=blob.digest, size=blob.size, source=source)
                return
        path = self.reader.blob_path(blob.digest)

        def progress(done: int) -> None:
            if self._on_event is not None:  # not counted: only passed on (a byte bar)
                self._on_event("blob-progress", {"digest": blob.digest, "size": blob.size,
                                                 "done": done})  # fmt: skip

        sent = self.client.push_blob(
            self.repo,
            blob.digest,
            blob.size,
            lambda: counted(open(path, "rb"), progress),  # noqa: SIM115
        )
        self.event("blob-uploaded", digest=blob.digest, size=blob.size, sent=sent)

    def exists(self, m: _Manifest) -> bool:
        return self.client.manifest_digest(self.repo, m.blob.digest) == m.blob.digest

    def push(self, m: _Manifest) -> None:
        self.client.push_manifest(self.repo, m.blob.digest, m.data, m.blob.media_type)
        self.event(
            "manifest-pushed",
            digest=m.blob.digest,
            size=m.blob.size,
            mediaType=m.blob.media_type,
            artifactType=m.doc.get("artifactType"),
        )


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
    manifests = _manifests(reader, blobs)
    leaves = [b for b in blobs if b.digest not in manifests]
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
    _run(run.jobs, lambda b: run.blob(b, mount_from), leaves)
    # 2.-3. manifests, those about a subject (and what holds them) after the rest
    others = [d for d in manifests if d != root["digest"]]
    missing = _push_manifests(run, manifests, others)
    # 4. referrers
    _push_referrers(run, manifests, others)
    # 5. the release set index, by digest
    root_manifest = manifests[root["digest"]]
    if not root_manifest.children & (run.sent | missing) and run.exists(root_manifest):
        run.event("manifest-skipped", digest=root["digest"], size=root_manifest.blob.size)
    else:
        run.push(root_manifest)
    # 6. the tag, last
    report.previous = client.manifest_digest(ref.repository, tag)
    if report.previous != root["digest"]:
        client.push_manifest(ref.repository, tag, root_data, root_manifest.blob.media_type)
        report.tag_moved = True
    run.event("tagged", tag=tag, digest=root["digest"], previous=report.previous)
    # 7. the build record, after the set (module docstring)
    if meta is not None and set_name:
        _publish_build_record(run, Path(layout_dir), root, str(set_name), meta)
    report.seconds = time.monotonic() - started
    return report


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
    manifests = _manifests(reader, blobs)
    leaves = [b for b in blobs if b.digest not in manifests]
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
    _run(run.jobs, lambda b: run.blob(b, ()), leaves)
    _push_manifests(run, manifests, list(manifests))
    _push_referrers(run, manifests, list(manifests))
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


def _manifests(reader: LayoutReader, blobs: Sequence[LayoutBlob]) -> dict[str, _Manifest]:
    """The manifests and indexes among ``blobs``, by digest, each with the digests it
    references (``children``) and the manifests among them and its subject it must follow
    (``deps``)."""
    manifests: dict[str, _Manifest] = {}
    for b in blobs:
        if b.media_type in mt.MANIFEST_TYPES:
            desc = {"mediaType": b.media_type, "digest": b.digest, "size": b.size}
            data = reader.read_blob(desc, referrer=b.referrer)
            doc = json.loads(data)
            refs = [*(doc.get("manifests") or []), doc.get("config"), *(doc.get("layers") or [])]
            children = frozenset(r["digest"] for r in refs if isinstance(r, dict))
            subject = doc.get("subject")
            found = children | ({subject["digest"]} if isinstance(subject, dict) else set())
            manifests[b.digest] = _Manifest(b, data, doc, frozenset(found), children)
    for d, m in list(manifests.items()):
        manifests[d] = _Manifest(
            m.blob, m.data, m.doc, frozenset(m.deps & manifests.keys() - {d}), m.children
        )
    return manifests


def _push_manifests(run: _Publish, manifests: dict[str, _Manifest], others: list[str]) -> set[str]:
    """Steps 2-3: push the manifests ``others`` the registry lacks, children first, those about
    a subject (and what holds them) after the rest; returns the digests found missing."""
    # a registry holds a manifest only with everything it references, so one that references
    # a blob just sent is missing too: it is pushed without asking first
    missing = {d for d in others if manifests[d].children & run.sent}
    while more := {d for d in others if manifests[d].children & missing} - missing:
        missing |= more

    def check(d: str) -> None:
        if run.exists(manifests[d]):
            run.event("manifest-skipped", digest=d, size=manifests[d].blob.size)
        else:
            with run._lock:
                missing.add(d)

    _run(run.jobs, check, [d for d in others if d not in missing])
    missing_in_order = [d for d in others if d in missing]
    deps = {d: m.deps for d, m in manifests.items()}
    late = {d for d in others if "subject" in manifests[d].doc}
    grew = True
    while grew:  # whatever references a late manifest is late too
        more = {d for d in others if deps[d] & late} - late
        late |= more
        grew = bool(more)
    for phase in (
        [d for d in missing_in_order if d not in late],
        [d for d in missing_in_order if d in late],
    ):
        for level in _levels(phase, deps):
            _run(run.jobs, lambda d: run.push(manifests[d]), level)
    return missing


def _push_referrers(run: _Publish, manifests: dict[str, _Manifest], others: list[str]) -> None:
    """Step 4: where the registry has no referrers API, write the fallback tag of each subject
    the manifests ``others`` refer to (``report.referrers`` says which)."""
    client, report, repo = run.client, run.report, run.repo
    subjects: dict[str, list[dict[str, Any]]] = {}
    for d in others:
        subject = manifests[d].doc.get("subject")
        if isinstance(subject, dict) and isinstance(subject.get("digest"), str):
            entry = referrer_descriptor(manifests[d].blob, manifests[d].doc)
            subjects.setdefault(subject["digest"], []).append(entry)
    if subjects:
        if client.has_referrers_api(repo, next(iter(subjects))):
            report.referrers = "api"
        else:
            report.referrers = "fallback-tag"

            def referrers(subject: str) -> None:
                written = update_referrers_tag(client, repo, subject, subjects[subject])
                with run._lock:
                    report.referrers_tags.append(fallback_tag(subject))
                run.event(
                    "referrers-tag", tag=fallback_tag(subject), subject=subject, written=written
                )

            _run(run.jobs, referrers, sorted(subjects))
            report.referrers_tags.sort()


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
