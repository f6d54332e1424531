"""The TPM's event log of a measured boot: parsed, and replayed into the PCRs it predicts.

The firmware and the boot loaders (OVMF, shim, systemd-stub, the kernel's EFI stub) extend PCRs
and log each extension; Linux exposes the log as ``/sys/kernel/security/tpm0/
binary_bios_measurements``. Its format is the TCG PC Client Platform Firmware Profile's
crypto-agile log: a first event in the old SHA1 format (``TCG_PCClientPCREvent``: PCR index,
event type, a 20-byte digest, the event's size and bytes) whose data is the ``Spec ID Event03``
structure naming the digest algorithms and their sizes, then ``TCG_PCR_EVENT2`` records (PCR
index, event type, a count of ``(algorithm id, digest)`` pairs, the event's size and bytes).

:func:`parse` reads it (``EventLogError`` on anything it cannot), :func:`replay` computes the
sha256 bank: each PCR starts at zeros (PCR 0 at the locality of a ``StartupLocality``
``EV_NO_ACTION`` event, when there is one) and becomes ``sha256(pcr || digest)`` per event;
``EV_NO_ACTION`` events extend nothing. :func:`describe` says in a few words what an event
measured (a variable's name, an image's file path, an action's text).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Final

from nvkr.errors import BootTestError

SHA256: Final = 0x000B  # TPM_ALG_SHA256
EV_NO_ACTION: Final = 0x3
SPEC_ID: Final = b"Spec ID Event03\0"
STARTUP_LOCALITY: Final = b"StartupLocality\0"
#: More events than any boot logs: a bound on a corrupt count.
MAX_EVENTS: Final = 100_000

#: Event types (TCG PC Client Platform Firmware Profile, section 10.4.1).
EVENT_TYPES: Final = {
    0x0: "EV_PREBOOT_CERT", 0x1: "EV_POST_CODE", 0x2: "EV_UNUSED", 0x3: "EV_NO_ACTION",
    0x4: "EV_SEPARATOR", 0x5: "EV_ACTION", 0x6: "EV_EVENT_TAG", 0x7: "EV_S_CRTM_CONTENTS",
    0x8: "EV_S_CRTM_VERSION", 0x9: "EV_CPU_MICROCODE", 0xA: "EV_PLATFORM_CONFIG_FLAGS",
    0xB: "EV_TABLE_OF_DEVICES", 0xC: "EV_COMPACT_HASH", 0xD: "EV_IPL",
    0xE: "EV_IPL_PARTITION_DATA", 0xF: "EV_NONHOST_CODE", 0x10: "EV_NONHOST_CONFIG",
    0x11: "EV_NONHOST_INFO", 0x12: "EV_OMIT_BOOT_DEVICE_EVENTS",
    0x80000001: "EV_EFI_VARIABLE_DRIVER_CONFIG", 0x80000002: "EV_EFI_VARIABLE_BOOT",
    0x80000003: "EV_EFI_BOOT_SERVICES_APPLICATION", 0x80000004: "EV_EFI_BOOT_SERVICES_DRIVER",
    0x80000005: "EV_EFI_RUNTIME_SERVICES_DRIVER", 0x80000006: "EV_EFI_GPT_EVENT",
    0x80000007: "EV_EFI_ACTION", 0x80000008: "EV_EFI_PLATFORM_FIRMWARE_BLOB",
    0x80000009: "EV_EFI_HANDOFF_TABLES", 0x8000000A: "EV_EFI_PLATFORM_FIRMWARE_BLOB2",
    0x8000000B: "EV_EFI_HANDOFF_TABLES2", 0x8000000C: "EV_EFI_VARIABLE_BOOT2",
    0x80000010: "EV_EFI_HCRTM_EVENT", 0x800000E0: "EV_EFI_VARIABLE_AUTHORITY",
    0x800000E1: "EV_EFI_SPDM_FIRMWARE_BLOB", 0x800000E2: "EV_EFI_SPDM_FIRMWARE_CONFIG",
}  # fmt: skip


class EventLogError(BootTestError):
    """The bytes are not a crypto-agile TCG event log (the message says where it broke)."""


@dataclass(frozen=True)
class Event:
    """One event: its ``pcr``, ``type`` (the number), its ``digests`` by TPM algorithm id and
    its ``data``."""

    pcr: int
    type: int
    digests: dict[int, bytes]
    data: bytes

    @property
    def type_name(self) -> str:
        return EVENT_TYPES.get(self.type, f"0x{self.type:08x}")

    @property
    def sha256(self) -> bytes | None:
        return self.digests.get(SHA256)

    def to_json(self) -> dict[str, object]:
        digest = self.sha256
        return {"pcr": self.pcr, "type": self.type_name,
                "sha256": digest.hex() if digest is not None else None,
                "description": describe(self)}  # fmt: skip


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise EventLogError(
                f"the event log ends at byte {len(self.data)} inside {what} (at byte {self.at}, "
                f"{n} bytes wanted)"
            )
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def u(self, fmt: str, what: str) -> int:
        value: int = struct.unpack("<" + fmt, self.take(struct.calcsize(fmt), what))[0]
        return value


def _spec_id(data: bytes) -> dict[int, int]:
    """The digest sizes by algorithm id that the Spec ID event declares."""
    if not data.startswith(SPEC_ID):
        raise EventLogError(
            "the event log's first event is not the Spec ID Event03: a SHA1-only (TPM 1.2 "
            "format) log, or no event log"
        )
    r = _Reader(data)
    r.take(len(SPEC_ID) + 4 + 4, "the Spec ID event")  # signature, class, version, errata, uintn
    count = r.u("I", "the Spec ID event")
    if not 0 < count <= 64:
        raise EventLogError(f"the Spec ID event declares {count} digest algorithms")
    sizes = {}
    for _ in range(count):
        alg, size = r.u("H", "the Spec ID event"), r.u("H", "the Spec ID event")
        sizes[alg] = size
    return sizes


def parse(data: bytes) -> list[Event]:
    """The events of a crypto-agile TCG event log, the Spec ID event first.

    Raises:
        EventLogError: not such a log, or truncated or corrupt (where it broke).
    """
    r = _Reader(data)
    pcr, kind = r.u("I", "the first event"), r.u("I", "the first event")
    sha1 = r.take(20, "the first event")
    first = Event(pcr, kind, {0x0004: sha1}, r.take(r.u("I", "the first event"), "the first event"))
    if kind != EV_NO_ACTION:
        raise EventLogError(f"the event log's first event is of type {first.type_name}")
    sizes = _spec_id(first.data)
    events = [first]
    while r.at < len(data):
        if len(events) > MAX_EVENTS:
            raise EventLogError(f"the event log holds more than {MAX_EVENTS} events")
        n = len(events)
        what = f"event {n}"
        pcr, kind = r.u("I", what), r.u("I", what)
        if pcr == 0xFFFFFFFF or (pcr == 0 and kind == 0 and not any(data[r.at :])):
            break  # zero padding after the last event (some firmware reserves the log's area)
        digests = {}
        for _ in range(r.u("I", what)):
            alg = r.u("H", what)
            if alg not in sizes:
                raise EventLogError(f"{what} has a digest of algorithm 0x{alg:04x}, which the "
                                    "Spec ID event does not declare")  # fmt: skip
            digests[alg] = r.take(sizes[alg], what)
        events.append(Event(pcr, kind, digests, r.take(r.u("I", what), what)))
    return events


def replay(events: list[Event]) -> dict[int, bytes]:
    """The sha256 bank the events extend, by PCR (only the PCRs some event extends, or whose
    starting locality an event sets).

    Raises:
        EventLogError: an event that extends a PCR has no sha256 digest.
    """
    pcrs: dict[int, bytes] = {}
    for n, e in enumerate(events):
        if e.type == EV_NO_ACTION:
            if e.data.startswith(STARTUP_LOCALITY) and len(e.data) > len(STARTUP_LOCALITY):
                pcrs[e.pcr] = bytes(31) + e.data[len(STARTUP_LOCALITY) : len(STARTUP_LOCALITY) + 1]
            continue
        if e.sha256 is None:
            raise EventLogError(f"event {n} ({e.type_name}, PCR {e.pcr}) has no sha256 digest")
        pcrs[e.pcr] = hashlib.sha256(pcrs.get(e.pcr, bytes(32)) + e.sha256).digest()
    return pcrs


def _text(data: bytes, limit: int = 80) -> str:
    """``data`` as text when it is ASCII or UTF-16LE text (NULs trimmed), else its size."""
    body = data.rstrip(b"\0")
    if body and all(32 <= b < 127 or b in b"\t\n\r" for b in body):
        text = body.decode("ascii")
    elif len(body) > 1 and body[1::2].strip(b"\0") == b"" and all(32 <= b < 127 for b in body[::2]):
        text = body[::2].decode("ascii").rstrip("\0")
    else:
        return f"{len(data)} bytes"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _variable(data: bytes) -> str:
    """A UEFI_VARIABLE_DATA's name (GUID, name length in characters, data length, name)."""
    if len(data) < 32:
        return _text(data)
    chars = struct.unpack_from("<Q", data, 16)[0]
    name = data[32 : 32 + 2 * min(chars, 256)]
    return name.decode("utf-16-le", errors="replace").rstrip("\0") or "(unnamed)"


def _image_path(data: bytes) -> str:
    """The file path nodes of a UEFI_IMAGE_LOAD_EVENT's device path, joined; else its size."""
    if len(data) < 32:
        return _text(data)
    length = struct.unpack_from("<Q", data, 24)[0]
    path, at, end = [], 32, min(len(data), 32 + length)
    while at + 4 <= end:
        kind, sub, size = data[at], data[at + 1], struct.unpack_from("<H", data, at + 2)[0]
        if size < 4:
            break
        if (kind, sub) == (4, 4):  # media device path, file path
            path.append(data[at + 4 : at + size].decode("utf-16-le", errors="replace").rstrip("\0"))
        at += size
    if path:
        return "".join(path)
    image_length = struct.unpack_from("<Q", data, 8)[0]
    return f"image of {image_length} bytes"


def _tagged(data: bytes) -> str:
    """A TCG_PCClientTaggedEvent's data (id, size, data): Linux's stub tags its text."""
    if len(data) < 8:
        return _text(data)
    size = struct.unpack_from("<I", data, 4)[0]
    return _text(data[8 : 8 + size])


def describe(event: Event) -> str:
    """A few words on what ``event`` measured."""
    name, data = event.type_name, event.data
    if name.startswith("EV_EFI_VARIABLE"):
        return f"variable {_variable(data)}"
    if name in ("EV_EFI_BOOT_SERVICES_APPLICATION", "EV_EFI_BOOT_SERVICES_DRIVER",
                "EV_EFI_RUNTIME_SERVICES_DRIVER"):  # fmt: skip
        return _image_path(data)
    if name == "EV_SEPARATOR":
        return "separator" + ("" if data in (bytes(4), b"") else " (error)")
    if name == "EV_EFI_GPT_EVENT":
        return "GPT partition table"
    if name == "EV_EVENT_TAG":
        return _tagged(data)
    if name == "EV_NO_ACTION":
        return _text(data.split(b"\0", 1)[0]) if data[:1].isalpha() else f"{len(data)} bytes"
    if name in ("EV_EFI_PLATFORM_FIRMWARE_BLOB", "EV_EFI_HANDOFF_TABLES") and len(data) >= 16:
        base, length = struct.unpack_from("<QQ", data)
        return f"{length} bytes at 0x{base:x}"
    return _text(data)
