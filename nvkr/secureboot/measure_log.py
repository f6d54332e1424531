"""A TCG event log's sha256 bank replayed and compared with a :class:`~.measure.Prediction`,
event by event and PCR by PCR.

:func:`read_log` takes the records of :func:`nvkr.machine.eventlog.parse` (the boot test's
parser) down to what this comparison needs: the sha256 digest and the data of each.
:func:`compare` takes any sequence of :class:`LoggedEvent`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from nvkr.errors import IntegrityError
from nvkr.machine.eventlog import EventLogError, parse
from nvkr.secureboot.measure import EVENT_TYPES, Prediction, replay

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
    after its Spec ID event (:func:`nvkr.machine.eventlog.parse`), with their sha256 digests
    (EV_NO_ACTION records included, a digest of zeros when they carry none).

    Raises:
        IntegrityError: not a crypto-agile log, truncated, or a record without a sha256 digest.
    """
    try:
        parsed = parse(data)[1:]
    except EventLogError as e:
        raise IntegrityError(f"{what}: {e.message}") from e
    events: list[LoggedEvent] = []
    for n, event in enumerate(parsed):
        digest = event.digests.get(_SHA256)
        if digest is None:
            if event.type != EV_NO_ACTION:
                raise IntegrityError(f"{what}: record {n} has no sha256 digest")
            digest = bytes(32)
        events.append(LoggedEvent(n, event.pcr, event.type, digest, event.data))
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
