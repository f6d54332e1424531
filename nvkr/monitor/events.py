"""The typed events of nvkr's one event stream: what the executor, the builders and the consumer
verbs (publish, pull, boot-test) report while they work, and how each reads as JSON.

Producers build these immutable records (NamedTuples) and hand them to a :class:`~nvkr.monitor.Monitor`; the
renderers (:mod:`nvkr.monitor.jsonl`, :mod:`nvkr.monitor.plain`, :mod:`nvkr.monitor.live`) decide
what a human or a machine sees. :meth:`Event.to_json` gives the object ``--json`` prints (without
the envelope keys ``v``, ``ts`` and ``event`` that :mod:`nvkr.monitor.jsonl` adds), in the one key
style of the stream: camelCase, durations in ``milliseconds``, sizes in bytes, digests
``sha256:<hex>``. Nothing here imports more than the standard library, so emitting costs a verb's
start-up nothing.
"""

from __future__ import annotations

import re
from typing import Any, Final, NamedTuple

#: The version of the ``--json`` event stream, the ``v`` of every event. 1: every event has
#: ``v`` and ``ts``; keys are camelCase with durations in ``milliseconds`` in every verb (pull
#: said ``build_record`` and ``seconds`` before); the stream ends with ``result`` or ``error``.
STREAM_VERSION: Final = 1

_WORD = re.compile(r"_([a-z0-9])")


def camel(name: str) -> str:
    """``build_record`` → ``buildRecord`` (keys already camelCase are kept)."""
    return _WORD.sub(lambda m: m[1].upper(), name)


def camel_keys(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` with every key in camelCase and ``seconds`` as rounded ``milliseconds``."""
    out: dict[str, Any] = {}
    for k, v in fields.items():
        if k == "seconds" and isinstance(v, int | float):
            out["milliseconds"] = round(v * 1000)
        else:
            out[camel(k)] = v
    return out


def _action_fields(action: Any) -> dict[str, Any]:
    """The keys every action event carries: ``key`` (action key), ``name``, ``builder``."""
    return {"key": action.key, "name": action.name, "builder": action.builder}


class ActionsPlanned(NamedTuple):
    """The executor's walk is done: ``actions`` in the plan's closure of the roots (or targets),
    ``to_run`` of them to build, ``cached`` in the store and ``remote`` taken from caches where
    the walk stopped (what a cached action needs is among ``actions``, not counted again). What a
    display's done/total counts; the ``result`` event's ``actions`` and the summary say the same
    number."""

    actions: int
    to_run: int
    cached: int
    remote: int = 0

    def to_json(self) -> dict[str, Any]:
        return camel_keys(
            {"actions": self.actions, "to_run": self.to_run, "cached": self.cached,
             "remote": self.remote}
        )  # fmt: skip


class ActionCached(NamedTuple):
    """``action`` (a :class:`~nvkr.plan.Action`) is in the store: it does not run."""

    action: Any

    def to_json(self) -> dict[str, Any]:
        return _action_fields(self.action)


class ActionStarted(NamedTuple):
    """``action`` starts (its sources are fetched first). ``estimate``: seconds earlier runs of
    the same action key (or ref) took (:mod:`nvkr.monitor.estimates`), None when none ran."""

    action: Any
    estimate: float | None = None

    def to_json(self) -> dict[str, Any]:
        out = _action_fields(self.action)
        if self.estimate is not None:
            out["estimateMilliseconds"] = round(self.estimate * 1000)
        return out


class ActionProgress(NamedTuple):
    """A running builder's progress: ``done`` of ``total`` ``unit`` (``steps``, ``bytes``,
    ``percent``; ``total`` None when unknown) and ``what`` it is doing now (one line)."""

    action: Any
    done: float
    total: float | None
    unit: str
    what: str = ""

    def to_json(self) -> dict[str, Any]:
        return {**_action_fields(self.action), "done": self.done, "total": self.total,
                "unit": self.unit, "what": self.what}  # fmt: skip


class ActionDone(NamedTuple):
    """``action`` was built, in ``seconds`` (wall-clock, its source fetches included)."""

    action: Any
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {**_action_fields(self.action), "milliseconds": round(self.seconds * 1000)}


class ActionFailed(NamedTuple):
    """``action`` failed with ``error`` (the exception; its text is the JSON ``error``)."""

    action: Any
    error: BaseException

    def to_json(self) -> dict[str, Any]:
        return {**_action_fields(self.action), "error": str(self.error)}


class ActionWarning(NamedTuple):
    """A warning an action's builder recorded (shown on every build that needs it)."""

    action: Any
    message: str
    hint: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = {**_action_fields(self.action), "message": self.message}
        if self.hint:
            out["hint"] = self.hint
        return out


class SourceFetch(NamedTuple):
    """``source`` (a :class:`~nvkr.builders.api.ResolvedSource`) is about to be downloaded;
    ``debs``: an apt source's .debs the store lacks and its locked ones (counts); ``where``:
    what the fetch line names it by (its kind's :meth:`~nvkr.fetch.kind.SourceKind.where`: a
    URL, the .debs counted), not in the JSON stream."""

    source: Any
    debs: tuple[int, int] | None = None
    where: str = ""

    def to_json(self) -> dict[str, Any]:
        out = {"source": self.source.name, "digest": self.source.digest}
        if self.debs is not None:
            out["debsMissing"], out["debsLocked"] = self.debs
        return out


class StoreNotice(NamedTuple):
    """The store found a blob corrupt (``blob-corrupt``) or an unpacked tool tree changed
    (``tools-changed``) and will fetch or unpack it again."""

    notice: str  # blob-corrupt | tools-changed
    digest: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "reason": self.reason}


class Transfer(NamedTuple):
    """Bytes moving: ``direction`` ``fetched`` (a source download), ``pushed`` (publish, the
    cache push) or ``pulled``; ``done`` of ``total`` bytes (None: unknown) of ``what`` (a
    source name, with ``[ARCH]`` for a per-arch source such as an apt source's packages, which
    download for each arch at the same time; a reference). ``finished`` on the last report of a
    transfer."""

    direction: str
    what: str
    done: int
    total: int | None
    finished: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"direction": self.direction, "what": self.what, "done": self.done,
                "total": self.total, "finished": self.finished}  # fmt: skip

    @property
    def under_way(self) -> str:
        """The transfer's verb while it runs: ``fetching`` (``pushing``, ``pulling``)."""
        return UNDER_WAY.get(self.direction, self.direction)


#: A transfer's verb while it runs (its event's ``direction`` is the verb when it ends).
UNDER_WAY: Final = {"fetched": "fetching", "pushed": "pushing", "pulled": "pulling"}


class CacheEvent(NamedTuple):
    """What the remote cache did (:mod:`nvkr.cache`): ``cache-hit``, ``cache-miss``,
    ``cache-push``, ``cache-warning`` with their fields as the cache modules report them."""

    name: str
    action: Any = None
    fields: dict[str, Any] = {}  # never mutated

    def to_json(self) -> dict[str, Any]:
        out = _action_fields(self.action) if self.action is not None else {}
        out.update(self.fields)
        return out


class Step(NamedTuple):
    """A step of a consumer verb (``publish``: ``blob-uploaded``, ``tagged``...; ``pull``:
    ``blob``): its ``name`` and fields, JSON keys in camelCase."""

    verb: str
    name: str
    fields: dict[str, Any] = {}  # never mutated

    def to_json(self) -> dict[str, Any]:
        return camel_keys(self.fields)


class Note(NamedTuple):
    """A line for humans only (``note:``/``warning:``/an informational line); the JSON stream
    leaves it out, as it always did."""

    message: str
    level: str = "info"  # info | note | warning
    hint: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {}


class BootStart(NamedTuple):
    """An attempt of a boot test starts (:func:`nvkr.machine.boot.boot_test`): ``image`` (its
    path, or the label ``nvkr boot-test`` gives a release set's image), ``accel`` ``kvm`` or
    ``tcg``, ``timeout`` in seconds, ``log`` the console log (None: none), ``attempt`` 1 or 2,
    ``why`` TCG after a KVM stall (else empty); ``shown``: how a human line names the image
    (default ``image (arch)``)."""

    image: str
    arch: str
    firmware: str
    accel: str
    timeout: float
    log: str | None
    attempt: int
    why: str = ""
    digest: str | None = None
    shown: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"image": self.image, "digest": self.digest, "arch": self.arch,
                "firmware": self.firmware, "accel": self.accel,
                "timeoutMilliseconds": round(self.timeout * 1000), "log": self.log,
                "attempt": self.attempt, "why": self.why}  # fmt: skip


class BootStall(NamedTuple):
    """A KVM guest made no progress: its console was silent ``seconds`` ``after`` its last
    text (maybe empty) before the guest's kernel spoke; ``reason`` says so in a sentence,
    ``retry`` is ``tcg`` when it is booted again under TCG (None: the boot test fails)."""

    image: str
    accel: str
    seconds: float
    after: str
    reason: str
    retry: str | None
    log: str | None
    digest: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"image": self.image, "digest": self.digest, "accel": self.accel,
                "milliseconds": round(self.seconds * 1000), "after": self.after,
                "reason": self.reason, "retry": self.retry, "log": self.log}  # fmt: skip


class BootImageResult(NamedTuple):
    """One image of ``nvkr boot-test`` booted (``ok``) or failed. Booted: the matching console
    ``line``, ``seconds`` from QEMU's start to it, ``accel``, ``fallback`` (why TCG after
    KVM answered, else empty), ``firmware``, the agent's ``labels``. Failed: the error's
    ``code``, ``error`` (its message) and ``hint``; ``accel`` of the last attempt (None when
    none started). ``log``: the console log. ``checks``: with ``--user-data``, what it asked
    for as ``{"check", "ok", "detail"}`` (:class:`nvkr.machine.cloudinit.Check`). With
    ``--secure-boot``: ``secure_boot`` (:meth:`nvkr.machine.measured.SecureBootResult.
    secure_boot_json`), ``total_seconds`` (the whole boot, to the TPM report), and with
    ``--tpm`` ``tpm`` (:meth:`nvkr.machine.tpmprobe.Measurements.to_json`)."""

    image: str
    digest: str | None
    ok: bool
    accel: str | None
    log: str
    line: str = ""
    seconds: float = 0.0
    fallback: str = ""
    firmware: str = ""
    labels: dict[str, str] = {}  # never mutated
    code: str = ""
    error: str = ""
    hint: str | None = None
    checks: list[dict[str, Any]] = []  # never mutated
    secure_boot: dict[str, Any] = {}  # never mutated
    tpm: dict[str, Any] = {}  # never mutated
    total_seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"image": self.image, "digest": self.digest, "ok": self.ok,
                               "accel": self.accel, "log": self.log}  # fmt: skip
        if self.ok:
            out.update(line=self.line, milliseconds=round(self.seconds * 1000),
                       fallback=self.fallback, firmware=self.firmware,
                       labels=self.labels)  # fmt: skip
        else:
            out.update(code=self.code, error=self.error)
            if self.hint:
                out["hint"] = self.hint
        if self.checks:
            out["checks"] = self.checks
        if self.secure_boot:
            out["secureBoot"] = self.secure_boot
            out["totalMilliseconds"] = round(self.total_seconds * 1000)
        if self.tpm:
            out["tpm"] = self.tpm
        return out


class Result(NamedTuple):
    """The verb's outcome, the last event of a stream that succeeded; ``exit_code`` 0.
    ``fields`` are the JSON result's keys, ``summary`` what the human summary line reads
    (:func:`nvkr.monitor.lines.result_lines`; never printed as JSON)."""

    verb: str
    fields: dict[str, Any] = {}  # never mutated
    exit_code: int = 0
    summary: dict[str, Any] = {}  # never mutated

    def to_json(self) -> dict[str, Any]:
        return {**camel_keys(self.fields), "exitCode": self.exit_code}


class Error(NamedTuple):
    """The verb failed: the last event of its stream. ``code`` is the error's stable reference
    (``NVKR-E-CHECKSUM``), ``exit_code`` what nvkr exits with."""

    code: str
    message: str
    exit_code: int
    hint: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message,
                               "exitCode": self.exit_code}  # fmt: skip
        if self.hint:
            out["hint"] = self.hint
        return out


#: Every event of the stream (each a NamedTuple: immutable, and cheap to define, which keeps
#: this module out of a verb's start-up time, unlike ~15 frozen dataclasses).
Event = (
    ActionsPlanned | ActionCached | ActionStarted | ActionProgress | ActionDone | ActionFailed
    | ActionWarning | SourceFetch | StoreNotice | Transfer | CacheEvent | Step | BootStart
    | BootStall | BootImageResult | Note | Result | Error
)  # fmt: skip


#: each event class's ``event`` name in the JSON stream
KINDS: dict[type, str] = {
    ActionsPlanned: "actions-planned",
    ActionCached: "action-cached",
    ActionStarted: "action-start",
    ActionProgress: "action-progress",
    ActionDone: "action-done",
    ActionFailed: "action-failed",
    ActionWarning: "action-warning",
    SourceFetch: "source-fetch",
    StoreNotice: "store-notice",
    Transfer: "bytes",
    CacheEvent: "cache",
    Step: "step",
    BootStart: "boot-start",
    BootStall: "boot-stall",
    BootImageResult: "image-result",
    Note: "note",
    Result: "result",
    Error: "error",
}


def event_name(event: Event) -> str:
    """The ``event`` value of ``event`` in the JSON stream: its kind, or for the events that
    carry one, their own name (a cache event's ``cache-hit``, a store notice's
    ``blob-corrupt``, a step's ``blob-uploaded``)."""
    if isinstance(event, CacheEvent | Step):
        return event.name
    if isinstance(event, StoreNotice):
        return event.notice
    return KINDS[type(event)]
