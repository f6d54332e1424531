"""Pulling a release set from a registry into an OCI image layout, verified before it lands.

The consumer's first step, the inverse of :mod:`nvkr.delivery.publish`: ``REGISTRY/REPO@sha256:<hex>`` →
``DIR`` (a layout ``nvkr verify`` and ``nvkr release-set show`` read). By digest only, so what is
pulled is what the digest names. The release set index, its whole closure (every manifest, index,
config and layer, children of nested indexes included) and the signature manifests attached to
the index and its members (the referrers API, else the fallback tag ``sha256-<hex>``,
distribution-spec "Listing Referrers") are downloaded into a temp directory beside ``DIR``, each
hashed on the way (:class:`~nvkr.oci.registry.RegistryClient`). Manifests and indexes are
fetched one after another, in walk order (they name what comes next); the leaf blobs they
reference (configs, layers, QCOW2 machine images) are handed to a pool of ``workers`` threads as
they are found, so a few large blobs download side by side while the walk goes on. Each worker
streams its blob into its own temp file (one read block in memory at a time); the first failure
stops the walk, cancels the downloads that have not started, aborts the running ones at their
next block, and is the one reported. With keys,
:func:`nvkr.verify.verify_release_set` checks the temp layout; only when everything passed is it
written to ``DIR`` atomically (:func:`nvkr.oci.layoutdir.write_layout`). Any failure leaves
``DIR`` as it was and no temp directory behind. What lands in ``DIR`` does not depend on the
order downloads finish in: blobs are files named by digest and ``index.json`` is built from the
walk, not from completions.

Blobs already at hand are not downloaded: before asking the registry for a manifest or a blob,
the pull looks for ``blobs/sha256/<hex>`` in ``DIR`` (an earlier pull's layout) and in the other
directories it is given (the store, for ``nvkr pull``). A copy of the right size is hard-linked
(read-only blobs, as a build's layout links the store's) or copied into the temp layout and
hashed there before it counts; one that hashes to anything else is left alone, logged, and the
blob is downloaded as if it were not there. The report says how many bytes came from the
registry and how many were reused.

The build record ``nvkr publish`` attached to the release set index (a referrer with annotation
``dev.nvkr.attachment: build-record``, :mod:`nvkr.releaseset.record`) is not part of the set: it
is fetched beside it, checked against the set's metadata (and with keys its envelope), and
written next to ``DIR`` as ``DIR.build-record.json`` (with ``DIR.build-record.dsse.json``) after
``DIR`` itself; where several builds of the same set published one, the latest finished wins. A
registry without one leaves no record beside ``DIR`` (one of an earlier pull is removed).
Verification summary attestations attached to the index (:mod:`nvkr.verify.attestations`) are
not pulled: they are no signatures of the set, and ``nvkr verify REF`` reads them in the
registry.

The workers share the one :class:`~nvkr.oci.registry.RegistryClient`, as :mod:`nvkr.delivery.publish`'s
do: its token and credential state sits behind its lock, and what its ``requests.Session`` does
per request is safe across threads here (the headers are only read, the cookie jar locks itself,
urllib3's pools hand each thread its own connection; a pool evicted under another thread's feet,
psf/requests#1871, surfaces as a connection error that the client retries). Each response is
read by the thread that asked for it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from nvkr.atomic import write_atomic
from nvkr.canonical import sha256_bytes
from nvkr.delivery.puller import EventSink, Puller
from nvkr.errors import IntegrityError, UsageError
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import blob_name, image_index, index_bytes, layout_file_bytes
from nvkr.oci.layoutdir import DIR_MODE, FILE_MODE, write_layout
from nvkr.oci.registry import Reference, RegistryClient
from nvkr.releaseset.record import is_build_record, record_paths
from nvkr.releaseset.recordcheck import BuildRecordCheck, check_record_bytes
from nvkr.releaseset.remote import read_remote_metadata
from nvkr.releaseset.signing import ANN_ATTACHMENT, DSSE_ENVELOPE, SIGNATURE
from nvkr.sign import PublicKey, envelope_parts
from nvkr.verify.attestations import is_verification_summary

#: Blob downloads running at once by default: a default release set holds four QCOW2 images.
WORKERS: Final = 4
#: Largest build record (or envelope) layer a pull accepts, in bytes.
_RECORD_LIMIT: Final = 64 << 20


@dataclass
class PullReport:
    """What :func:`pull_release_set` did: ``blobs``/``bytes`` in the layout (bytes), of which
    ``reused_blobs``/``reused_bytes`` came from local copies (checked) and ``downloaded_bytes``
    from the registry, ``signatures`` attached, ``verified`` (checked with keys),
    ``build_record`` the path of the build record written beside the target (None: the
    registry has none), ``seconds`` wall-clock."""

    reference: str
    digest: str
    name: str
    target: str
    blobs: int = 0
    bytes: int = 0
    reused_blobs: int = 0
    reused_bytes: int = 0
    downloaded_bytes: int = 0
    signatures: int = 0
    verified: bool = False
    build_record: str | None = None
    seconds: float = 0.0


def _fetch_attachment(
    client: RegistryClient, repo: str, desc: Mapping[str, Any], subject: str
) -> tuple[str, bytes]:
    """A build record referrer's artifactType and its one layer's bytes (both checked)."""
    what = f"build record {desc['digest']} of {subject}"
    data, _, actual = client.get_manifest(repo, str(desc["digest"]))
    if actual != desc["digest"]:
        raise IntegrityError(f"{what}: the registry served {actual}")
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise IntegrityError(f"{what}: not JSON") from e
    layers = doc.get("layers") if isinstance(doc, dict) else None
    if (doc.get("subject") or {}).get("digest") != subject or not isinstance(layers, list):
        raise IntegrityError(f"{what}: listed as a referrer of {subject} but names another subject")
    if len(layers) != 1 or not isinstance(layers[0], dict):
        raise IntegrityError(f"{what}: {len(layers)} layers, expected 1")
    size = layers[0].get("size")
    if not isinstance(size, int) or size > _RECORD_LIMIT:
        raise IntegrityError(f"{what}: its layer's size {size!r} is not that of a build record")
    buf = io.BytesIO()
    client.get_blob(repo, str(layers[0]["digest"]), buf, size=size)  # hashed on the way
    if buf.tell() != size:
        raise IntegrityError(f"{what}: its layer is {buf.tell()} bytes, expected {size}")
    return str(doc.get("artifactType")), buf.getvalue()


def _build_record(
    client: RegistryClient,
    repo: str,
    referrers: Sequence[Mapping[str, Any]],
    meta: Mapping[str, Any],
    subject: str,
    keys: Sequence[PublicKey],
) -> tuple[bytes, bytes | None] | None:
    """The build record (and its envelope) to write beside the pulled set: every one listed is
    checked against the set (:func:`nvkr.releaseset.recordcheck.check_record_bytes`, with ``keys``);
    the latest finished wins. None when the registry has none.

    Raises:
        IntegrityError: one fails its digests or its checks (naming it).
    """
    if not referrers:
        return None
    records: list[bytes] = []
    envelopes: dict[bytes, bytes] = {}  # payload -> envelope
    for desc in sorted(referrers, key=lambda d: str(d["digest"])):
        artifact_type, data = _fetch_attachment(client, repo, desc, subject)
        if artifact_type == mt.IN_TOTO_JSON:
            records.append(data)
        elif artifact_type == DSSE_ENVELOPE:
            try:
                payload, _, _ = envelope_parts(json.loads(data), f"build record {desc['digest']}")
            except ValueError as e:
                raise IntegrityError(f"build record envelope {desc['digest']}: not JSON") from e
            envelopes[payload] = data
    best: tuple[str, bytes] | None = None
    for data in records:
        check = check_record_bytes(
            data,
            envelopes.get(data),
            meta,
            subject,
            keys,
            check=BuildRecordCheck(path=f"{repo}@{sha256_bytes(data)}"),
            envelope_name=f"of {repo}@{sha256_bytes(data)}",
        )
        if check.problems:
            message, hint = check.problems[0]
            raise IntegrityError(message, hint=hint)
        finished = check.finished_on or ""
        if best is None or (finished, data) > best:
            best = (finished, data)
    return None if best is None else (best[1], envelopes.get(best[1]))


def _write_build_record(target: Path, record: tuple[bytes, bytes | None] | None) -> str | None:
    """Put the pulled build record (and envelope) beside ``target``; remove what an earlier pull
    left there that this one does not replace. Returns the record's path, or None."""
    paths = record_paths(target)
    for path, data in zip(paths, record or (None, None), strict=True):
        if data is None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, data, mode=FILE_MODE)
    return str(paths[0]) if record else None


def _signature_entry(desc: Mapping[str, Any], doc: Mapping[str, Any]) -> dict[str, Any]:
    """The ``index.json`` entry of a signature manifest, as :func:`sign_release_set` writes it."""
    labels = {k: v for k, v in (doc.get("annotations") or {}).items() if k != mt.ANN_CREATED}
    return {
        "mediaType": desc["mediaType"],
        "digest": desc["digest"],
        "size": desc["size"],
        "annotations": {ANN_ATTACHMENT: SIGNATURE, **labels},
        "artifactType": DSSE_ENVELOPE,
    }


def _check_target(target: Path) -> None:
    """Refuse a target that is not a directory a pull may replace: a file, or a non-empty
    directory that is not an OCI image layout (a pull must never delete someone's files).

    Raises:
        UsageError: naming ``target`` and what is there.
    """
    if not target.exists() and not target.is_symlink():
        return
    if not target.is_dir():
        raise UsageError(
            f"{target} exists and is not a directory", hint="give a new directory, or remove it"
        )
    if any(target.iterdir()) and not (target / "oci-layout").is_file():
        raise UsageError(
            f"{target} is a non-empty directory that is not an OCI image layout: nvkr pull "
            "replaces its target and will not delete these files",
            hint="give a new or empty directory, or an earlier pull's directory",
        )


def pull_release_set(
    ref: Reference | str,
    target: Path,
    client: RegistryClient,
    *,
    keys: Sequence[PublicKey] = (),
    on_event: EventSink | None = None,
    workers: int = WORKERS,
    reuse: Sequence[Path] = (),
) -> PullReport:
    """Download the release set ``ref`` names into the OCI image layout ``target``.

    Args:
        ref: ``REGISTRY/REPOSITORY[:TAG]@sha256:<hex>`` on ``client``'s registry (by digest).
        target: the layout directory to write; an existing one is replaced only on success.
        client: the registry's client.
        keys: public keys; when given, the pulled layout must pass
            :func:`nvkr.verify.verify_release_set` with them (signatures required).
        on_event: ``on_event(kind, fields)``: ``blob`` (``digest``, ``size`` in bytes,
            ``reused``: from a local copy; in the order downloads finish), ``blob-progress``
            while one downloads (``digest``, ``size``, ``done``: bytes so far), ``signature``
            (``digest``, ``subject``), ``verified``.
            Called from worker threads too, one call at a time.
        workers: leaf blobs downloaded at once (threads sharing ``client``; keep it within the
            client's ``pool_size``, or the extra connections are not reused); 1 downloads each
            one where the walk finds it. The layout written is the same whatever the number.
        reuse: more directories holding ``blobs/sha256/<hex>`` (a store's root) whose copies
            are used, once hashed, instead of downloading; ``target`` (an earlier pull's
            layout) is always looked in first.
    Returns:
        a :class:`PullReport`.
    Raises:
        ValueError: ``workers`` below 1.
        UsageError: no digest in ``ref``, or another registry than the client's.
        IntegrityError: a digest or size mismatch, a missing blob, not a release set, or the
            verification failed (exit 3).
        RegistryError: refused credentials, no such manifest, unreachable.
        In every case ``target`` is as it was and no temp directory is left.
    """
    started = time.monotonic()
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    ref = Reference.parse(ref) if isinstance(ref, str) else ref
    if ref.digest is None:
        raise UsageError(
            f"reference {ref} names no digest: nvkr pull fetches by digest only",
            hint=f"pull by digest: {ref}@sha256:<hex> (nvkr publish prints it; "
            f"`nvkr release-set show {ref}` too)",
        )
    if ref.registry != client.registry:
        raise UsageError(f"reference {ref} is not on {client.registry}, the client's registry")
    target = Path(target)
    _check_target(target)
    meta, top = read_remote_metadata(client, ref)
    name = str(meta.get("name") or "")
    if not name:
        raise IntegrityError(f"{ref}: the release set metadata has no name")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.pull-", dir=target.parent))
    try:
        os.chmod(tmp, DIR_MODE)
        with Puller(client, ref.repository, tmp, on_event, workers, (target, *reuse)) as run:
            index = run.closure(top, f"release set {top['digest']}")
            subjects = [top["digest"]] + [
                str(m["digest"]) for m in index.get("manifests") or [] if isinstance(m, dict)
            ]
            # the index first, as signing does
            position = {d: i - 1 for i, d in enumerate(subjects)}
            signatures: list[tuple[int, dict[str, Any]]] = []
            records: list[dict[str, Any]] = []
            seen: set[str] = set()
            for subject in dict.fromkeys(subjects):
                for desc in run.referrers(subject):
                    if is_build_record(desc):  # beside the set, not in it (module docstring)
                        if subject == top["digest"] and desc["digest"] not in seen:
                            seen.add(desc["digest"])
                            records.append(desc)
                        continue
                    if is_verification_summary(desc):  # an attestation about the set, no
                        continue  # signature of it: `nvkr verify REF` reads them there
                    if desc.get("artifactType") != DSSE_ENVELOPE or desc["digest"] in seen:
                        continue
                    if desc.get("mediaType") not in mt.IMAGE_MANIFEST_TYPES:
                        continue
                    seen.add(desc["digest"])
                    doc = run.closure(desc, f"signature {desc['digest']} of {subject}")
                    found = doc.get("subject")
                    if not isinstance(found, dict) or found.get("digest") != subject:
                        raise IntegrityError(
                            f"signature {desc['digest']} is listed as a referrer of {subject} "
                            "but names another subject"
                        )
                    signatures.append((position[subject], _signature_entry(desc, doc)))
                    run.event("signature", digest=desc["digest"], subject=subject)
            run.wait()  # every blob downloaded and checked, or the first failure
            record = _build_record(client, ref.repository, records, meta, top["digest"], keys)
        signatures.sort(key=lambda s: (s[0], s[1]["digest"]))
        root = {**top, "artifactType": mt.NVKR_RELEASE_SET, "annotations": {mt.ANN_REF_NAME: name}}
        data = index_bytes(image_index([root, *(s for _, s in signatures)]))
        (tmp / "index.json").write_bytes(data)
        (tmp / "oci-layout").write_bytes(layout_file_bytes())
        report = PullReport(
            reference=f"{ref.registry}/{ref.repository}@{top['digest']}",
            digest=top["digest"],
            name=name,
            target=str(target),
            blobs=len(run.have),
            bytes=sum(run.have.values()),
            reused_blobs=len(run.reused),
            reused_bytes=sum(run.reused.values()),
            downloaded_bytes=sum(run.have.values()) - sum(run.reused.values()),
            signatures=len(signatures),
        )
        if keys:
            from nvkr.verify import verify_release_set

            result = verify_release_set(tmp, keys=keys)
            if result.problems:
                first = result.problems[0]
                more = len(result.problems) - 1
                raise IntegrityError(
                    f"{report.reference}: {first.message}"
                    + (f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""),
                    hint=first.hint or f"nothing was written to {target}",
                )
            report.verified = True
            run.event("verified")
        # forced: an earlier pull's DIR may hold a damaged blob of the right size (the one
        # just downloaded again), which write_layout's size check would keep
        write_layout(
            target, data, sorted(run.have.items()), lambda d: tmp / blob_name(d), force=True
        )
        report.build_record = _write_build_record(target, record)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report.seconds = time.monotonic() - started
    return report
