"""Writing a remote cache (``nvkr build --cache-to``): entries pushed in an order readers trust.

For each action result the mode wants (:meth:`CacheWriter.wanted`) the entry of
:mod:`nvkr.cache.entry` goes up in this order, so a reader never finds a tag on anything
incomplete:

1. every blob (the outputs, the config, the envelopes, the log): ``HEAD`` first, else mounted
   from a ``--cache-from`` repository of the same registry (a pull request's cache holds little
   that the main one lacks), else uploaded, :data:`BLOB_JOBS` at a time over all entries;
2. the entry manifest, by digest;
3. its signature referrer and its run referrer (by digest), then the referrers fallback tag
   ``sha256-<hex>`` where the registry has no referrers API (:mod:`nvkr.oci.referrers`);
4. last the tag ``ac-<hex>``: the commit record.

Two writers of one key: the first tag wins. When the tag is there already and names the same
manifest, this writer only adds its own signature if the entry lacks one by its key (a reader
that trusts this writer's key then finds one); when it names another manifest, the action is not
reproducible: a ``cache-warning`` names it and the first entry stays. A push that fails (the
registry went away mid-build) gives one warning and no more pushes; the build itself goes on.
Results whose key does not cover every tool that can change their bytes stay local (a note).

``min`` (the default) pushes the release-set actions, every action one of their outputs is (the
artifacts, their images and SBOMs: what the release sets reference) and every action whose
recorded run took longer than :data:`SLOW_ACTION`; ``max`` pushes every action. An action is
pushed whether it was built now, found in the store or taken from another cache, so a no-op build
with ``--cache-to`` pushes what the cache lacks. Events (``emit(kind, **fields)``, one at a
time): ``cache-push`` (``action``, ``cache``, ``tag``, ``manifest``, ``state``: ``pushed``,
``present``, ``signed`` or ``conflict``; ``bytes`` uploaded), ``cache-warning`` (``message``).
"""

from __future__ import annotations

import functools
import io
import json
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import nvkr
from nvkr.cache import NOT_HERMETIC, shareable
from nvkr.cache.entry import (
    ACTION_RUN,
    ANN_ATTACHMENT,
    ANN_KEYID,
    CACHE_RUN,
    CACHE_SIGNATURE,
    DSSE_ENVELOPE,
    LOG_MEDIA_TYPE,
    SIGNATURE_PAYLOAD,
    Entry,
    make_entry,
    signature_payload,
)
from nvkr.canonical import canonical_json
from nvkr.errors import IntegrityError, RegistryError
from nvkr.monitor.transfer import counted
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import LayoutBlob, artifact_manifest, descriptor, manifest_bytes
from nvkr.oci.referrers import list_referrers, referrer_descriptor, update_referrers_tag
from nvkr.provenance import parse_timestamp, timestamp
from nvkr.sign import key_id, sign_envelope

if TYPE_CHECKING:
    from nvkr.action import Action, ActionResult
    from nvkr.cache.settings import CacheSettings
    from nvkr.execute import BuildReport
    from nvkr.oci.registry import RegistryClient
    from nvkr.plan import Plan
    from nvkr.store import Store

#: Seconds of recorded run time above which ``min`` pushes an action the release sets do not
#: reference: fetching an entry costs a few requests and its bytes (a 330 MiB root filesystem
#: tar is a few seconds on a CI network), so an action slower than this is cheaper to download
#: than to rebuild, while the many quick ones (a chart, a package tar) cost the registry storage
#: for little gain.
SLOW_ACTION: Final = 20
#: Entries pushed at a time, and blob uploads at a time over all of them.
ENTRY_JOBS: Final = 2
BLOB_JOBS: Final = 4

Emit = Callable[..., None]


@dataclass
class PushSummary:
    """What a writer did: entries by state (``pushed``, ``present``, ``signed``, ``conflict``),
    ``local`` (not shareable), ``bytes_uploaded``, ``failed`` (the warning, when pushing
    stopped)."""

    states: dict[str, int] = field(default_factory=dict)
    local: list[str] = field(default_factory=list)
    bytes_uploaded: int = 0
    failed: str | None = None


def run_seconds(record: ActionResult) -> int | None:
    """The recorded run time of an action result in seconds (None: no times recorded)."""
    run = record.run
    if run is None:
        return None
    try:
        start = parse_timestamp(str(run["startedOn"]))
        end = parse_timestamp(str(run["finishedOn"]))
    except (KeyError, ValueError):
        return None
    return int((end - start).total_seconds())


class CacheWriter:
    """The ``--cache-to`` repository of one build (module docstring).

    Args:
        settings: checked settings; ``target`` and ``sign_key`` are set.
        store: where the outputs are read from.
        plan: the build's plan (its roots are the release-set actions).
        client: a client for the target's registry (push access checked by the caller).
        emit: ``emit(kind, **fields)`` for the events of the module docstring.

    The ``--cache-from`` repositories on the target's registry are where blobs are mounted from.
    """

    def __init__(
        self,
        settings: CacheSettings,
        store: Store,
        plan: Plan,
        client: RegistryClient,
        emit: Emit,
    ) -> None:
        assert settings.target is not None and settings.sign_key is not None
        self.settings = settings
        self.store = store
        self.plan = plan
        self.client = client
        self.repo = settings.target.repository
        self.name = f"{settings.target.registry}/{settings.target.repository}"
        self.mount_from = [
            r.repository
            for r in settings.sources
            if r.registry == settings.target.registry and r.repository != self.repo
        ]
        self.key = settings.sign_key
        self.keyid = key_id(settings.sign_key)
        self.summary = PushSummary()
        self._emit_raw = emit
        self._lock = threading.Lock()
        self._offered: set[str] = set()
        self._entries = ThreadPoolExecutor(ENTRY_JOBS, thread_name_prefix="nvkr-cache-entry")
        self._blobs = ThreadPoolExecutor(BLOB_JOBS, thread_name_prefix="nvkr-cache-put")
        self._futures: list[Future[None]] = []
        self._blob_jobs: dict[str, Future[int]] = {}

    def _emit(self, kind: str, **fields: Any) -> None:
        with self._lock:
            self._emit_raw(kind, **fields)

    # -- what is pushed ------------------------------------------------------------------------
    def wanted(self, key: str, result: ActionResult, referenced: set[str]) -> bool:
        """Whether the mode pushes ``result`` of action ``key``: ``max`` every action; ``min``
        the roots, an action one of whose outputs is in ``referenced`` (the release sets'
        blobs), and one whose run took longer than :data:`SLOW_ACTION`."""
        if self.settings.mode == "max" or key in self.plan.roots:
            return True
        if any(o.digest in referenced for o in result.outputs):
            return True
        seconds = run_seconds(result)
        return seconds is not None and seconds > SLOW_ACTION

    def offer(self, action: Action, result: ActionResult, how: str) -> None:
        """Push ``result`` now when the mode wants it whatever the release sets hold (the
        executor's ``on_result`` hook); :meth:`finish` decides the rest. Never raises."""
        if self.wanted(action.key, result, set()):
            self._submit(action, result)

    def finish(self, report: BuildReport) -> PushSummary:
        """Push every other result of the plan the mode wants, now that the release sets are
        known (those the walk did not visit are read from the action cache), and wait for all
        pushes."""
        referenced: set[str] = set()
        for root in self.plan.roots:
            root_record = report.results.get(root) or self.store.get_action(root)
            if root_record is not None:
                referenced |= {o.digest for o in root_record.outputs}
        for key, action in self.plan.actions.items():
            if key in self._offered:
                continue
            record = report.results.get(key) or self.store.get_action(key)
            if record is not None and self.wanted(key, record, referenced):
                self._submit(action, record)
        for fut in list(self._futures):
            fut.result()
        self._entries.shutdown(wait=True)
        self._blobs.shutdown(wait=True)
        return self.summary

    def close(self) -> None:
        self._entries.shutdown(wait=True, cancel_futures=True)
        self._blobs.shutdown(wait=True, cancel_futures=True)

    def _submit(self, action: Action, result: ActionResult) -> None:
        with self._lock:
            if action.key in self._offered or self.summary.failed is not None:
                return
            self._offered.add(action.key)
        if not shareable(action):
            with self._lock:
                self.summary.local.append(action.key)
            self._emit(
                "cache-warning",
                action=action,
                cache=self.name,
                level="note",
                message=f"not shared: {NOT_HERMETIC}",
            )
            return
        self._futures.append(self._entries.submit(self._push_guarded, action, result))

    # -- one entry -----------------------------------------------------------------------------
    def _push_guarded(self, action: Action, result: ActionResult) -> None:
        if self.summary.failed is not None:
            return
        try:
            self._push(action, result)
        except (ValueError, TypeError) as e:  # a record this nvkr cannot make an entry of
            self._emit("cache-warning", action=action, cache=self.name, message=f"not pushed: {e}")
        except (RegistryError, IntegrityError, OSError) as e:
            message = getattr(e, "message", None) or str(e)
            with self._lock:
                first = self.summary.failed is None
                if first:
                    self.summary.failed = message
            if first:
                self._emit(
                    "cache-warning",
                    action=action,
                    cache=self.name,
                    message=f"pushing to cache {self.name} failed, no more entries are pushed "
                    f"this build: {message}",
                )

    def _count(self, state: str, sent: int) -> None:
        with self._lock:
            self.summary.states[state] = self.summary.states.get(state, 0) + 1
            self.summary.bytes_uploaded += sent

    def _push(self, action: Action, result: ActionResult) -> None:
        entry = make_entry(action, result, self.settings.salt)
        existing = self.client.manifest_digest(self.repo, entry.tag)
        if existing is not None:
            state = self._settle(action, entry, existing)
            self._count(state, 0)
            return
        sent = 0
        blobs: dict[str, tuple[int, Callable[[], Any]]] = {}
        for out in entry.outputs:
            try:
                path = self.store.checked_path(out.digest)
            except IntegrityError as e:  # corrupt here (deleted): this entry only is not pushed
                raise ValueError(e.message) from e
            blobs[out.digest] = (out.size, functools.partial(open, path, "rb"))
        add = functools.partial(self._bytes, blobs)
        add(entry.config)
        sig_manifest = self._signature_manifest(entry, add)
        run_manifest = self._run_manifest(action, entry, result, add)
        sent += self._put_blobs(blobs)
        self.client.push_manifest(self.repo, entry.digest, entry.manifest, mt.OCI_MANIFEST)
        self._put_referrers(entry, [sig_manifest, run_manifest])
        # the tag last; someone may have tagged meanwhile (the first tag wins)
        existing = self.client.manifest_digest(self.repo, entry.tag)
        if existing is not None:
            self._count(self._settle(action, entry, existing), sent)
            return
        try:
            self.client.push_manifest(
                self.repo, entry.tag, entry.manifest, mt.OCI_MANIFEST, if_none_match=True
            )
        except RegistryError as e:
            if e.status != 412:  # 412: a registry that honours If-None-Match saw a first tag
                raise
            existing = self.client.manifest_digest(self.repo, entry.tag) or ""
            self._count(self._settle(action, entry, existing), sent)
            return
        self._count("pushed", sent)
        self._emit(
            "cache-push",
            action=action,
            cache=self.name,
            tag=entry.tag,
            manifest=entry.digest,
            state="pushed",
            bytes=sent,
        )

    def _settle(self, action: Action, entry: Entry, existing: str) -> str:
        """The tag is there: the same manifest (add our signature if it lacks one), or another
        one (not reproducible: warn, keep the first)."""
        if existing != entry.digest:
            self._emit(
                "cache-warning",
                action=action,
                cache=self.name,
                message=(
                    f"action {action.name!r} ({action.builder}, key {action.key}) is not "
                    f"reproducible: {self.name}:{entry.tag} holds manifest {existing}, this "
                    f"build made {entry.digest}; the first entry stays"
                ),
            )
            state = "conflict"
        else:
            signed = any(
                (r.get("annotations") or {}).get(ANN_KEYID) == self.keyid
                and (r.get("annotations") or {}).get(ANN_ATTACHMENT) == CACHE_SIGNATURE
                for r in list_referrers(self.client, self.repo, entry.digest)
            )
            state = "present"
            if not signed:
                blobs: dict[str, tuple[int, Callable[[], Any]]] = {}
                sig = self._signature_manifest(entry, functools.partial(self._bytes, blobs))
                sent = self._put_blobs(blobs)
                with self._lock:
                    self.summary.bytes_uploaded += sent
                self._put_referrers(entry, [sig])
                state = "signed"
        self._emit(
            "cache-push",
            action=action,
            cache=self.name,
            tag=entry.tag,
            manifest=entry.digest,
            state=state,
            bytes=0,
        )
        return state

    @staticmethod
    def _bytes(blobs: dict[str, tuple[int, Callable[[], Any]]], data: bytes) -> dict[str, Any]:
        desc = descriptor(mt.OCTET_STREAM, data)
        blobs[desc["digest"]] = (len(data), functools.partial(io.BytesIO, data))
        return desc

    def _signature_manifest(self, entry: Entry, add: Callable[[bytes], Any]) -> bytes:
        payload = signature_payload(entry.key, entry.tag, entry.manifest_descriptor)
        envelope = canonical_json(sign_envelope(payload, SIGNATURE_PAYLOAD, self.key))
        return self._referrer(
            entry, DSSE_ENVELOPE, [(DSSE_ENVELOPE, envelope)], CACHE_SIGNATURE, add
        )

    def _run_manifest(
        self, action: Action, entry: Entry, result: ActionResult, add: Callable[[bytes], Any]
    ) -> bytes:
        doc: dict[str, Any] = {
            "actionKey": entry.key,
            "name": action.name,
            "manifest": entry.digest,
            "run": dict(result.run or {}),
            "pushedOn": timestamp(time.time()),
            "nvkrVersion": nvkr.__version__,
        }
        layers: list[tuple[str, bytes]] = []
        log = result.log
        log_bytes = None
        if log is not None and self.store.has_blob(log):
            log_bytes = self.store.read_blob(log)
            doc["log"] = {"digest": log, "size": len(log_bytes)}
        payload = canonical_json(doc)
        layers.append((DSSE_ENVELOPE, canonical_json(sign_envelope(payload, ACTION_RUN, self.key))))
        if log_bytes is not None:
            layers.append((LOG_MEDIA_TYPE, log_bytes))
        return self._referrer(entry, ACTION_RUN, layers, CACHE_RUN, add)

    def _referrer(
        self,
        entry: Entry,
        artifact_type: str,
        layers: list[tuple[str, bytes]],
        kind: str,
        add: Callable[[bytes], Any],
    ) -> bytes:
        descs = []
        for media_type, data in layers:
            add(data)
            descs.append(descriptor(media_type, data))
        add(mt.EMPTY_JSON)
        annotations = {ANN_ATTACHMENT: kind}
        if kind == CACHE_SIGNATURE:
            annotations[ANN_KEYID] = self.keyid
        return manifest_bytes(
            artifact_manifest(artifact_type, descs, annotations, subject=entry.manifest_descriptor)
        )

    def _put_blobs(self, blobs: Mapping[str, tuple[int, Callable[[], Any]]]) -> int:
        """Upload what the repository lacks (once per digest over all entries; an entry that
        shares a blob another one is sending waits for it); bytes this call sent."""
        futures, mine = [], []
        for digest, (size, opener) in blobs.items():
            with self._lock:
                fut = self._blob_jobs.get(digest)
                if fut is None:
                    fut = self._blobs.submit(self._put_blob, digest, size, opener)
                    self._blob_jobs[digest] = fut
                    mine.append(fut)
            futures.append(fut)
        for fut in futures:
            fut.result()
        return sum(f.result() for f in mine)

    def _put_blob(self, digest: str, size: int, opener: Callable[[], Any]) -> int:
        if self.client.blob_exists(self.repo, digest):
            return 0
        for source in self.mount_from:
            if self.client.mount_blob(self.repo, digest, source):
                return 0

        def progress(done: int) -> None:
            self._emit("cache-bytes", digest=digest, size=size, done=done)

        return self.client.push_blob(self.repo, digest, size, lambda: counted(opener(), progress))

    def _put_referrers(self, entry: Entry, manifests: list[bytes]) -> None:
        entries = []
        for data in manifests:
            digest = descriptor(mt.OCI_MANIFEST, data)["digest"]
            self.client.push_manifest(self.repo, digest, data, mt.OCI_MANIFEST)
            blob = LayoutBlob(digest, len(data), mt.OCI_MANIFEST, "cache entry")
            entries.append(referrer_descriptor(blob, json.loads(data)))
        if not self.client.has_referrers_api(self.repo, entry.digest):
            update_referrers_tag(self.client, self.repo, entry.digest, entries)
