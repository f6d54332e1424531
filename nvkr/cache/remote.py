"""Reading a remote cache: an entry looked up, checked, downloaded into the store.

:class:`CacheReader` is the executor's :class:`~nvkr.walk.RemoteLookup`. For an action the
store lacks it asks each ``--cache-from`` repository in order, and takes the first entry that
passes every check, in this order (a failure is a miss with its reason, and the next cache, then
the builder, is tried):

1. the tag ``ac-<hex>`` names an entry manifest (fetched by tag, hashed; 404 is "no entry");
2. among the manifest's referrers (the referrers API, else the ``sha256-<hex>`` fallback tag) a
   signature by a trusted key (``--cache-trust``, and the ``--cache-sign-key``'s own) verifies,
   and its payload names this action key, this tag and this manifest; with
   ``--cache-trust-unsigned`` an entry with no trusted signature passes, but never one whose
   trusted signature fails or names something else;
3. the config (digest-checked) is canonical JSON naming this action key, builder and builder
   version, and the layers are exactly its outputs;
4. every layer the store lacks downloads (:data:`DOWNLOAD_JOBS` at a time, resumable, hashed)
   into the store through its verified writer (:class:`~nvkr.store.BlobWriter`).

Then the local action record is written, with ``remote: {"cache", "manifest", "fetchedOn"}``
saying where it came from and the ``run`` of the entry's run record when that verifies too. A
registry that cannot be reached gives one ``cache-warning`` and all its caches are skipped for
the rest of the build; one that refuses the credentials or fails, likewise for that cache.
Events (``emit(kind, **fields)``, from worker threads, one at a time): ``cache-hit`` (``action``, ``cache``, ``manifest``, ``bytes`` of layers downloaded,
``entryBytes`` of the entry's manifest, config and referrers read, ``signed``),
``cache-miss`` (``action``, ``cache``, ``reason``, ``absent``), ``cache-warning`` (``cache``,
``message``).
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from nvkr.action import ActionOutput
from nvkr.cache import shareable
from nvkr.cache.entry import (
    ACTION_RUN,
    ANN_ATTACHMENT,
    CACHE_RUN,
    CACHE_SIGNATURE,
    CONFIG_LIMIT,
    DSSE_ENVELOPE,
    ENVELOPE_LIMIT,
    SIGNATURE_PAYLOAD,
    EntryProblem,
    check_config,
    check_manifest,
    check_signature_payload,
    entry_tag,
    local_record,
    missing_closure,
)
from nvkr.errors import ChecksumError, DowngradeError, IntegrityError, RegistryError
from nvkr.oci import mediatypes as mt
from nvkr.oci.referrers import list_referrers
from nvkr.provenance import timestamp
from nvkr.sign import PublicKey, check_envelope, envelope_parts, key_id
from nvkr.walk import RemoteHit

if TYPE_CHECKING:
    from nvkr.action import Action
    from nvkr.cache.settings import CacheSettings
    from nvkr.oci.reference import Reference
    from nvkr.oci.registry import RegistryClient
    from nvkr.store import Store

#: Layers downloaded at a time, over all lookups (as ``nvkr pull``'s default).
DOWNLOAD_JOBS: Final = 4
#: Signature referrers of one entry looked at, at most: a repository that lists more is
#: flooding the reader, and the first trusted one is all it needs.
MAX_SIGNATURES: Final = 16

Emit = Callable[..., None]
ClientFactory = Callable[[str], "RegistryClient"]


@dataclass
class _Cache:
    """One ``--cache-from`` repository: ``name`` ``REGISTRY/REPOSITORY``; ``disabled`` the
    reason it is skipped for the rest of the build (None while it answers)."""

    ref: Reference
    client: RegistryClient
    disabled: str | None = None

    @property
    def name(self) -> str:
        return f"{self.ref.registry}/{self.ref.repository}"

    @property
    def repo(self) -> str:
        return self.ref.repository


class _Unusable(Exception):
    """The cache itself failed (unreachable, credentials, a server error): skip it from now;
    ``unreachable``: no answer at all, so every cache on that registry is skipped with it."""

    def __init__(self, message: str, *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


def _unusable(e: RegistryError) -> _Unusable:
    return _Unusable(e.message, unreachable=e.status is None)


def small_blob(
    client: RegistryClient,
    repo: str,
    desc: Mapping[str, Any],
    limit: int,
    count: Callable[[int], None] | None = None,
) -> bytes:
    """A small blob of ``repo`` named by ``desc``, at most ``limit`` bytes, hashed on the way;
    ``count(n)`` is told the bytes read.

    Raises:
        EntryProblem: larger than ``limit``, or the bytes are not the digest's.
        RegistryError: the registry failed (404: it lacks the blob).
    """
    size = desc.get("size")
    if not isinstance(size, int) or size > limit:
        raise EntryProblem(f"blob {desc.get('digest')} is {size} bytes, more than {limit}")
    buf = io.BytesIO()
    try:
        client.get_blob(repo, str(desc["digest"]), buf, size=size)
    except IntegrityError as e:
        raise EntryProblem(e.message) from e
    if count is not None:
        count(buf.tell())
    if buf.tell() != size:
        raise EntryProblem(f"blob {desc['digest']} is {buf.tell()} bytes, not {size}")
    return buf.getvalue()


def referrer_envelope(
    client: RegistryClient,
    repo: str,
    desc: Mapping[str, Any],
    subject: str,
    count: Callable[[int], None] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A referrer manifest of ``subject`` (fetched by digest) whose first layer is a DSSE
    envelope: ``(envelope, the manifest's layers)``; ``count(n)`` is told the bytes read.

    Raises:
        EntryProblem: another subject, no envelope layer, not JSON.
        RegistryError: the registry failed.
    """
    try:
        data, _, _ = client.get_manifest(repo, str(desc["digest"]))
    except IntegrityError as e:
        raise EntryProblem(e.message) from e
    if count is not None:
        count(len(data))
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise EntryProblem(f"referrer {desc['digest']} is not JSON") from e
    subject_desc = doc.get("subject") if isinstance(doc, dict) else None
    if not isinstance(subject_desc, dict) or subject_desc.get("digest") != subject:
        raise EntryProblem(
            f"referrer {desc['digest']} is listed for {subject} but refers elsewhere"
        )
    layers = doc.get("layers")
    if not isinstance(layers, list) or not layers or not isinstance(layers[0], dict):
        raise EntryProblem(f"referrer {desc['digest']} has no layers")
    if layers[0].get("mediaType") != DSSE_ENVELOPE:
        raise EntryProblem(f"referrer {desc['digest']}'s first layer is no DSSE envelope")
    raw = small_blob(client, repo, layers[0], ENVELOPE_LIMIT, count)
    try:
        envelope = json.loads(raw)
    except ValueError as e:
        raise EntryProblem(f"referrer {desc['digest']}'s envelope is not JSON") from e
    return envelope, [x for x in layers if isinstance(x, dict)]


def _attachments(referrers: Sequence[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
    found = [
        r
        for r in referrers
        if r.get("artifactType") in (DSSE_ENVELOPE, ACTION_RUN)
        and (r.get("annotations") or {}).get(ANN_ATTACHMENT) == kind
    ]
    return sorted(found, key=lambda r: str(r["digest"]))


def envelope_keyids(envelope: Any) -> list[str]:
    """The key ids an envelope's signatures claim (the field is only a hint)."""
    sigs = envelope.get("signatures") if isinstance(envelope, dict) else None
    return [str(s.get("keyid")) for s in sigs or [] if isinstance(s, dict) and s.get("keyid")]


class CacheReader:
    """The ``--cache-from`` repositories of one build (module docstring).

    Args:
        settings: the checked cache settings (sources, salt, trust).
        store: where blobs and records land.
        client_for: ``client_for(registry)`` → a registry client (credentials as everywhere).
        emit: ``emit(kind, **fields)`` for the events of the module docstring.
    """

    def __init__(
        self, settings: CacheSettings, store: Store, client_for: ClientFactory, emit: Emit
    ) -> None:
        self.settings = settings
        self.store = store
        self._emit_raw = emit
        self._lock = threading.Lock()
        clients: dict[str, RegistryClient] = {}
        self.caches = []
        for ref in settings.sources:
            if ref.registry not in clients:
                clients[ref.registry] = client_for(ref.registry)
            self.caches.append(_Cache(ref, clients[ref.registry]))
        self._clients = list(clients.values())
        self._trusted: dict[str, PublicKey] = {key_id(k): k for k in settings.trust}
        self._downloads = ThreadPoolExecutor(DOWNLOAD_JOBS, thread_name_prefix="nvkr-cache-get")
        self._inflight: dict[str, Future[None]] = {}
        self._tally = threading.local()  # this lookup's entry bytes (manifests, config, ...)
        self.bytes_downloaded = 0

    def close(self) -> None:
        self._downloads.shutdown(wait=True, cancel_futures=True)
        for client in self._clients:
            client.close()

    def __enter__(self) -> CacheReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _emit(self, kind: str, **fields: Any) -> None:
        with self._lock:
            self._emit_raw(kind, **fields)

    def _disable(self, cache: _Cache, problem: _Unusable) -> None:
        """Skip ``cache`` from now on, with one warning; when its registry does not answer at
        all, every cache on that registry goes with it (still one warning)."""
        reason = str(problem)
        with self._lock:
            if cache.disabled is not None:
                return
            gone = [cache]
            if problem.unreachable:
                gone += [
                    c
                    for c in self.caches
                    if c is not cache
                    and c.disabled is None
                    and c.ref.registry == cache.ref.registry
                ]
            for c in gone:
                c.disabled = reason
        names = ", ".join(c.name for c in gone)
        self._emit(
            "cache-warning",
            cache=cache.name,
            caches=[c.name for c in gone],
            message=f"cache {names} {'is' if len(gone) == 1 else 'are'} skipped for the rest of "
            f"this build: {reason}",
        )

    # -- the executor's question ---------------------------------------------------------------
    def lookup(self, action: Action) -> RemoteHit | None:
        """The result of ``action`` from the first cache whose entry passes every check, in
        the store and the action cache by then; None when none does (module docstring)."""
        if not shareable(action):
            return None
        for cache in self.caches:
            if cache.disabled is not None:
                continue
            try:
                hit = self._lookup_in(cache, action)
            except _Unusable as e:
                self._disable(cache, e)
                continue
            except EntryProblem as e:
                self._emit("cache-miss", action=action, cache=cache.name, reason=str(e))
                continue
            if hit is not None:
                return hit
            self._emit(
                "cache-miss", action=action, cache=cache.name, reason="no entry", absent=True
            )
        return None

    def _count(self, n: int) -> None:
        self._tally.n = getattr(self._tally, "n", 0) + n

    def _lookup_in(self, cache: _Cache, action: Action) -> RemoteHit | None:
        self._tally.n = 0
        tag = entry_tag(action.key, self.settings.salt)
        try:
            data, media_type, digest = self._registry(
                cache, lambda: cache.client.get_manifest(cache.repo, tag), None
            )
        except _Absent:
            return None
        self._count(len(data))
        config_desc, layers = check_manifest(data, media_type)
        manifest = {"mediaType": mt.OCI_MANIFEST, "digest": digest, "size": len(data)}
        referrers = self._registry(
            cache, lambda: list_referrers(cache.client, cache.repo, digest), "its referrers"
        )
        signed = self._check_signature(cache, action, tag, manifest, referrers)
        config_bytes = self._registry(
            cache,
            lambda: small_blob(cache.client, cache.repo, config_desc, CONFIG_LIMIT, self._count),
            "its config blob",
        )
        config = check_config(config_bytes, action, data, layers)
        outputs = [  # checked by check_config
            ActionOutput.from_json(o, f"its config's outputs[{i}]")
            for i, o in enumerate(config["outputs"])
        ]
        got = self._download(cache, outputs)
        record = local_record(
            action,
            config,
            {"cache": cache.name, "manifest": digest, "fetchedOn": timestamp(time.time())},
            self._run_record(cache, action, digest, referrers),
        )
        self.store.put_action(action.key, record)
        complete = not missing_closure(self.store, record.outputs)
        self._emit(
            "cache-hit",
            action=action,
            cache=cache.name,
            manifest=digest,
            bytes=got,
            entryBytes=getattr(self._tally, "n", 0),
            signed=signed,
        )
        return RemoteHit(record, cache.name, complete)

    def _registry(self, cache: _Cache, call: Callable[[], Any], what: Any) -> Any:
        """``call()`` with the registry's failures sorted: 404 → a miss (``what`` it lacks; None:
        the entry is absent), a digest the bytes do not match → a miss, anything else (no
        answer, credentials, server errors, a downgrade) → the cache is unusable."""
        try:
            return call()
        except DowngradeError as e:
            raise _Unusable(e.message) from e
        except IntegrityError as e:
            raise EntryProblem(e.message) from e
        except RegistryError as e:
            if e.status == 404:
                if what is None:
                    raise _Absent from e
                raise EntryProblem(f"the registry lacks {what}") from e
            raise _unusable(e) from e

    # -- trust ---------------------------------------------------------------------------------
    def _check_signature(
        self,
        cache: _Cache,
        action: Action,
        tag: str,
        manifest: Mapping[str, Any],
        referrers: Sequence[Mapping[str, Any]],
    ) -> bool:
        """True when a trusted key signed this entry; False when none did and unsigned entries
        are allowed.

        Raises:
            EntryProblem: no trusted signature (and unsigned entries are not allowed), or a
                trusted signature that does not verify or names another action, tag or manifest.
        """
        claimed: list[str] = []
        for desc in _attachments(referrers, CACHE_SIGNATURE)[:MAX_SIGNATURES]:
            try:
                envelope, _ = self._registry(
                    cache,
                    lambda d=desc: referrer_envelope(  # type: ignore[misc]
                        cache.client, cache.repo, d, manifest["digest"], self._count
                    ),
                    f"signature {desc['digest']}",
                )
            except EntryProblem:
                continue  # a broken referrer is no signature; the next one may be
            keyids = envelope_keyids(envelope)
            claimed += keyids
            trusted = [self._trusted[k] for k in keyids if k in self._trusted]
            if not trusted:
                continue
            try:
                verified = check_envelope(envelope, trusted, what="its signature")
            except IntegrityError as e:
                raise EntryProblem(e.message) from e
            if verified.payload_type != SIGNATURE_PAYLOAD:
                raise EntryProblem(f"its signature has payloadType {verified.payload_type!r}")
            check_signature_payload(verified.payload, action.key, tag, manifest)
            return True
        if self.settings.trust_unsigned:
            return False
        if claimed:
            raise EntryProblem(
                "it is signed only by keys this build does not trust (key id "
                + ", ".join(sorted(set(claimed)))
                + ")"
            )
        raise EntryProblem("it is not signed (pass --cache-trust-unsigned to use such entries)")

    def _run_record(
        self, cache: _Cache, action: Action, digest: str, referrers: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any] | None:
        """The ``run`` of the entry's run record, when one verifies (by a trusted key, or at all
        with ``--cache-trust-unsigned``) and names this action and manifest; else None: the
        entry is still used, its record only carries no times."""
        for desc in _attachments(referrers, CACHE_RUN)[:MAX_SIGNATURES]:
            try:
                envelope, _ = self._registry(
                    cache,
                    lambda d=desc: referrer_envelope(  # type: ignore[misc]
                        cache.client, cache.repo, d, digest, self._count
                    ),
                    "its run record",
                )
                trusted = [
                    self._trusted[k] for k in envelope_keyids(envelope) if k in self._trusted
                ]
                if trusted:
                    payload_type, payload = self._verified(envelope, trusted)
                elif self.settings.trust_unsigned:
                    payload, payload_type, _ = envelope_parts(envelope)
                else:
                    continue
                doc = json.loads(payload)
            except (EntryProblem, IntegrityError, ValueError):
                continue
            if payload_type != ACTION_RUN or not isinstance(doc, dict):
                continue
            if doc.get("actionKey") != action.key or doc.get("manifest") != digest:
                continue
            run = doc.get("run")
            if isinstance(run, dict) and all(
                isinstance(run.get(k), str) for k in ("invocationId", "startedOn", "finishedOn")
            ):
                return dict(run)
        return None

    @staticmethod
    def _verified(envelope: Any, keys: Sequence[PublicKey]) -> tuple[str, bytes]:
        verified = check_envelope(envelope, keys)
        return verified.payload_type, verified.payload

    # -- downloads -----------------------------------------------------------------------------
    def _download(self, cache: _Cache, outputs: Sequence[ActionOutput]) -> int:
        """Put every output the store lacks into it; bytes downloaded.

        Raises:
            EntryProblem: a layer's bytes are not its digest (or size), or the registry lacks it.
            _Unusable: the registry failed.
        """
        sizes = {o.digest: o.size for o in outputs}
        names = {o.digest: o.name for o in outputs}
        wanted = [d for d in sizes if not self.store.has_blob(d)]
        futures: list[tuple[str, Future[int]]] = []
        for digest in wanted:
            futures.append((digest, self._downloads.submit(self._fetch, cache, digest, sizes)))
        total, problem = 0, None
        for digest, fut in futures:
            try:
                total += fut.result()
            except (IntegrityError, ChecksumError) as e:
                if isinstance(e, DowngradeError):
                    raise _Unusable(e.message) from e
                problem = problem or EntryProblem(
                    f"its layer {names[digest]} ({digest[:19]}…): {e.message}"
                )
            except RegistryError as e:
                if e.status != 404:
                    raise _unusable(e) from e
                problem = problem or EntryProblem(
                    f"the registry lacks its layer {names[digest]} ({digest[:19]}…)"
                )
        if problem is not None:
            raise problem
        return total

    def _fetch(self, cache: _Cache, digest: str, sizes: Mapping[str, int]) -> int:
        """Download blob ``digest`` into the store, once even when several lookups want it (a
        second waits for the first, and downloads only if the first failed)."""
        with self._lock:
            running = self._inflight.get(digest)
            mine: Future[None] | None = None
            if running is None:
                mine = Future()
                self._inflight[digest] = mine
        if running is not None:
            with contextlib.suppress(BaseException):  # its failure is its own lookup's miss
                running.result()
            if self.store.has_blob(digest):
                return 0
        try:
            size = sizes[digest]
            with self.store.writer(
                expected={"sha256": digest},
                expected_size=size,
                what=f"cache blob {digest}",
                url=f"{cache.name}",
            ) as writer:
                got = cache.client.get_blob(cache.repo, digest, writer, size=size)
                writer.commit()
            with self._lock:
                self.bytes_downloaded += got
            if mine is not None:
                mine.set_result(None)
            return got
        except BaseException as e:
            if mine is not None:
                mine.set_exception(e)
            raise
        finally:
            if mine is not None:
                with self._lock:
                    self._inflight.pop(digest, None)


class _Absent(Exception):
    """The tag is not there: no entry for this action in this cache."""
