"""A TCG event log's sha256 bank replayed and compared with a :class:`~.measure.Prediction`,
event by event and PCR by PCR.

:func:`read_log` is a MINIMAL parser of the crypto-agile log (TCG PC Client PFP 10.2: the
SHA1-format Spec ID event, then ``TCG_PCR_EVENT2`` records: PCRIndex, EventType, a digest count
and (AlgorithmId, digest) pairs, EventSize and the event data), written for this comparison
until ``nvkr/machine/eventlog.py`` lands: it keeps the sha256 digest and the raw event data of
each record and nothing else. :func:`compare` takes any sequence of :class:`LoggedEvent`, so a
fuller parser's records convert to it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from nvkr.errors import IntegrityError
from nvkr.secureboot.measure import EVENT_TYPES, Prediction, replay

#: TPM_ALG_ID and digest size of the banks a log may carry
_DIGEST_SIZES: Final = {0x0004: 20, 0x000B: 32, 0x000C: 48, 0x000D: 64, 0x0012: 32}
_SHA256: Final = 0x000B
EV_NO_ACTION: Final = 0x3
_TYPE_NAMES: Final = {code: name for name, code in EVENT_TYPES.items()}


@dataclass(frozen=True)
class LoggedEvent:
    """One record of an event log: its index in the log, PCR, type code, sha256 digest and data."""

    index: int
    pcr: int
    type: int
    digest: bytes
    data: bytes = b""

    @property
    def type_name(self) -> str:
        return _TYPE_NAMES.get(self.type, f"{self.type:#x}")


def read_log(data: bytes, what: str = "event log") -> list[LoggedEvent]:
    """The records of the crypto-agile TCG event log ``data`` (``binary_bios_measurements``)
    after its Spec ID event, with their sha256 digests (EV_NO_ACTION records included, digest
    of zeros when they carry none).

    Raises:
        IntegrityError: not a crypto-agile log, a record past the end, an unknown algorithm, or
            a record without a sha256 digest.
    """
    if len(data) < 32 or struct.unpack_from("<I", data, 4)[0] != EV_NO_ACTION:
        raise IntegrityError(f"{what} does not start with a Spec ID (EV_NO_ACTION) event")
    size = struct.unpack_from("<I", data, 28)[0]
    if data[32 : 32 + 16] != b"Spec ID Event03\0":
        raise IntegrityError(f"{what} is not a crypto-agile log (no 'Spec ID Event03')")
    off = 32 + size
    events: list[LoggedEvent] = []
    try:
        while off < len(data):
            pcr, kind, count = struct.unpack_from("<III", data, off)
            off += 12
            digests = {}
            for _ in range(count):
                alg = struct.unpack_from("<H", data, off)[0]
                if alg not in _DIGEST_SIZES:
                    raise IntegrityError(f"{what}: record {len(events)} has algorithm {alg:#x}")
                digests[alg] = data[off + 2 : off + 2 + _DIGEST_SIZES[alg]]
                off += 2 + _DIGEST_SIZES[alg]
            length = struct.unpack_from("<I", data, off)[0]
            body = data[off + 4 : off + 4 + length]
            if len(body) != length:
                raise IntegrityError(f"{what}: record {len(events)} passes the end of the log")
            off += 4 + length
            if _SHA256 not in digests:
                raise IntegrityError(f"{what}: record {len(events)} has no sha256 digest")
            events.append(LoggedEvent(len(events), pcr, kind, digests[_SHA256], body))
    except struct.error as e:
        raise IntegrityError(f"{what}: truncated after {len(events)} records") from e
    return events


def replay_log(events: Iterable[LoggedEvent]) -> dict[int, bytes]:
    """The sha256-bank PCR values ``events`` extend (EV_NO_ACTION records extend nothing)."""
    return replay((e.pcr, e.digest) for e in events if e.type != EV_NO_ACTION)


@dataclass(frozen=True)
class PcrComparison:
    """One PCR compared: the predicted and replayed values and, when they differ, where the event
    sequences first part (``problems``)."""

    pcr: int
    predicted: bytes
    logged: bytes
    problems: tuple[str, ...]

    @property
    def matches(self) -> bool:
        return self.predicted == self.logged and not self.problems


def compare(
    prediction: Prediction, events: Sequence[LoggedEvent], pcrs: Iterable[int] | None = None
) -> list[PcrComparison]:
    """``prediction`` against the logged ``events``, for ``pcrs`` (default: those predicted):
    per PCR the logged events (EV_NO_ACTION aside) are paired in order with the predicted ones
    and every pair whose type or digest differs, and every event one side has more, is named.
    """
    chosen = sorted(prediction.values) if pcrs is None else sorted(pcrs)
    logged_values = replay_log(events)
    out = []
    for pcr in chosen:
        want = prediction.pcr_events(pcr)
        got = [e for e in events if e.pcr == pcr and e.type != EV_NO_ACTION]
        problems = []
        for i, (w, g) in enumerate(zip(want, got, strict=False)):
            if w.type != g.type_name or w.digest != g.digest:
                problems.append(
                    f"PCR {pcr} event {i} (log #{g.index}): predicted {w.type} {w.description} "
                    f"{w.digest.hex()}, logged {g.type_name} {g.digest.hex()}"
                )
        problems += [
            f"PCR {pcr}: predicted {w.type} {w.description} not logged" for w in want[len(got) :]
        ]
        problems += [
            f"PCR {pcr}: logged #{g.index} {g.type_name} {g.digest.hex()} not predicted"
            for g in got[len(want) :]
        ]
        out.append(
            PcrComparison(
                pcr,
                prediction.values.get(pcr, bytes(32)),
                logged_values.get(pcr, bytes(32)),
                tuple(problems),
            )
        )
    return out
