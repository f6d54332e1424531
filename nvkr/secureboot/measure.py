"""Measured boot, predicted: the TPM 2.0 sha256-bank PCR values a node image's boot produces
under UEFI Secure Boot, for a stated firmware and key set (issue 32, item 4).

The chain modelled is nvkr's: firmware (EDK2's OVMF/AAVMF with Microsoft's keys) starts shim from
the removable path, shim starts the owner-signed UKI (or Debian's systemd-boot, which starts the
UKI through shim's verifier), systemd-stub in the UKI starts the kernel, whose EFI stub loads the
initrd systemd-stub hands it. The events and their digests follow the TCG PC Client Platform
Firmware Profile (2.x, section 10 "Event logging"), EDK2 2022.11 (``Tcg2Dxe``,
``DxeImageVerificationLib``), shim 16.1 (``tpm.c``, ``mok.c``), systemd-stub 257 (systemd-stub(7))
and Linux 6.12's EFI stub (``efi-stub-helper.c``). They were checked event by event against the
TCG event log of a reference boot (OVMF 2022.11-6+deb12u2 and AAVMF, swtpm, Debian 13's shim 16.1,
systemd-stub 257, kernel 6.12): PCRs 4, 5, 7, 9, 11 and 14 replay to the predicted values.

Per PCR, in log order (each event's sha256 digest is what the PCR is extended with):

* 4: EV_EFI_ACTION "Calling EFI Application from Boot Option", EV_SEPARATOR, then an
  EV_EFI_BOOT_SERVICES_APPLICATION per image (shim, systemd-boot, the UKI): its Authenticode
  digest.
* 5: EV_SEPARATOR, EV_EFI_GPT_EVENT (``UEFI_GPT_DATA``: the primary GPT header, the number of used
  entries and those entries), EV_EFI_ACTION "Exit Boot Services Invocation" and "Exit Boot
  Services Returned with Success".
* 7: EV_EFI_VARIABLE_DRIVER_CONFIG for SecureBoot, PK, KEK, db, dbx (``UEFI_VARIABLE_DATA``),
  EV_SEPARATOR, EV_EFI_VARIABLE_AUTHORITY for the db entry that verified shim, shim's SbatLevel,
  then for each image shim verifies the entry that verified it (``MokListRT`` or ``db``; each
  distinct authority once).
* 9: the kernel EFI stub's EV_EVENT_TAG "LOADED_IMAGE::LoadOptions" (the UTF-16 command line
  systemd-stub passes, NUL included) and "Linux initrd" (the initrd systemd-stub assembles: the
  ``.ucode`` and ``.initrd`` sections, then cpio archives of ``.pcrsig``, ``.pcrpkey``, ``.osrel``
  and ``.profile`` under ``/.extra``, each padded to 4 bytes when there are several).
* 11: systemd-stub's EV_IPL pair per UKI section in systemd's order (the section name with its NUL,
  then the section's content), then the systemd-pcrphase words up to the named phase.
* 14: shim's EV_IPL "MokList", "MokListX", "MokListTrusted": the data shim mirrors to the
  ``*RT`` variables (its built-in vendor certificate / dbx first, then the variable's).

The other registers are listed in :attr:`Prediction.unpredictable` with why.
Deriving these inputs from files (a varstore, shim, a UKI, a disk's GPT) is
:mod:`nvkr.secureboot.measure_inputs`; comparing with an event log is
:mod:`nvkr.secureboot.measure_log`.
"""

from __future__ import annotations

import hashlib
import struct
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from nvkr.errors import IntegrityError

#: EFI_GLOBAL_VARIABLE: SecureBoot, PK, KEK
EFI_GLOBAL_VARIABLE: Final = uuid.UUID("8be4df61-93ca-11d2-aa0d-00e098032b8c")
#: EFI_IMAGE_SECURITY_DATABASE_GUID: db, dbx
EFI_IMAGE_SECURITY_DATABASE: Final = uuid.UUID("d719b2cb-3d3a-4596-a3bc-dad00e67656f")
#: SHIM_LOCK_GUID: MokList, MokListRT, SbatLevel, and the owner of shim's vendor certificate
SHIM_LOCK: Final = uuid.UUID("605dab50-e046-4300-abb6-3dd810dd8b23")

EV_EVENT_TAG: Final = "EV_EVENT_TAG"
EV_IPL: Final = "EV_IPL"
EV_SEPARATOR: Final = "EV_SEPARATOR"
EV_EFI_ACTION: Final = "EV_EFI_ACTION"
EV_EFI_GPT_EVENT: Final = "EV_EFI_GPT_EVENT"
EV_EFI_BOOT_SERVICES_APPLICATION: Final = "EV_EFI_BOOT_SERVICES_APPLICATION"
EV_EFI_VARIABLE_DRIVER_CONFIG: Final = "EV_EFI_VARIABLE_DRIVER_CONFIG"
EV_EFI_VARIABLE_AUTHORITY: Final = "EV_EFI_VARIABLE_AUTHORITY"

#: The event type codes (TCG PC Client PFP, 10.4.1) of the events predicted, by name.
EVENT_TYPES: Final = {
    EV_SEPARATOR: 0x4,
    EV_EVENT_TAG: 0x6,
    EV_IPL: 0xD,
    EV_EFI_VARIABLE_DRIVER_CONFIG: 0x80000001,
    EV_EFI_BOOT_SERVICES_APPLICATION: 0x80000003,
    EV_EFI_GPT_EVENT: 0x80000006,
    EV_EFI_ACTION: 0x80000007,
    EV_EFI_VARIABLE_AUTHORITY: 0x800000E0,
}

#: The UKI sections systemd-stub 257 measures into PCR 11, in its order (``unified_sections``
#: less ``.pcrsig``, which holds signatures of these very PCR values and is never measured).
UKI_MEASURED_SECTIONS: Final = (
    ".linux",
    ".osrel",
    ".cmdline",
    ".initrd",
    ".ucode",
    ".splash",
    ".dtb",
    ".uname",
    ".sbat",
    ".pcrpkey",
)
#: Sections of multi-profile and devicetree-matching UKIs, which this model does not cover.
UKI_UNMODELLED_SECTIONS: Final = (".profile", ".dtbauto", ".hwids")

#: systemd-pcrphase's words in PCR 11 at boot, in order (systemd-pcrphase.service(8)).
PHASE_WORDS: Final = ("enter-initrd", "leave-initrd", "sysinit", "ready")
#: The phase of a prediction when no systemd-pcrphase word is extended: right after systemd-stub,
#: which is also the booted value for an image without libtss2 (systemd then extends nothing).
AFTER_STUB: Final = "after-stub"

_SEPARATOR_DIGEST: Final = hashlib.sha256(bytes(4)).digest()
_ACTION_BOOT_OPTION: Final = "Calling EFI Application from Boot Option"
_ACTION_EBS: Final = "Exit Boot Services Invocation"
_ACTION_EBS_DONE: Final = "Exit Boot Services Returned with Success"


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def variable_data(vendor: uuid.UUID, name: str, data: bytes) -> bytes:
    """``UEFI_VARIABLE_DATA`` (PFP 10.2.6): VariableName (the vendor GUID), the UTF-16 name's
    length in characters and the data's in bytes (UINT64 each), the name without NUL, the data.
    Its sha256 is the digest of EV_EFI_VARIABLE_DRIVER_CONFIG and _AUTHORITY events."""
    uname = name.encode("utf-16-le")
    return vendor.bytes_le + struct.pack("<QQ", len(name), len(data)) + uname + data


@dataclass(frozen=True)
class SignatureEntry:
    """One ``EFI_SIGNATURE_DATA`` of a signature database (db, MokList): its owner GUID and its
    data (an X.509 certificate in DER for the lists that matter here)."""

    owner: uuid.UUID
    data: bytes

    def encode(self) -> bytes:
        return self.owner.bytes_le + self.data


@dataclass(frozen=True)
class Authority:
    """The database entry that verified an image, as EV_EFI_VARIABLE_AUTHORITY names it: the
    variable (``db`` when firmware or shim found it in db, ``MokListRT`` when shim found it in its
    MOK list) and the entry."""

    variable: str
    vendor: uuid.UUID
    entry: SignatureEntry

    def variable_data(self) -> bytes:
        return variable_data(self.vendor, self.variable, self.entry.encode())


def db_authority(entry: SignatureEntry) -> Authority:
    return Authority("db", EFI_IMAGE_SECURITY_DATABASE, entry)


def mok_authority(entry: SignatureEntry) -> Authority:
    return Authority("MokListRT", SHIM_LOCK, entry)


@dataclass(frozen=True)
class FirmwareKeys:
    """The Secure Boot variables firmware measures into PCR 7 (their data as stored: PK, KEK, db
    and dbx as EFI_SIGNATURE_LIST arrays, SecureBoot one byte) and the db entry that verified
    shim (firmware measures it when it starts shim)."""

    secure_boot: bytes
    pk: bytes
    kek: bytes
    db: bytes
    dbx: bytes
    shim_authority: SignatureEntry


@dataclass(frozen=True)
class ShimState:
    """What shim measures: ``mok_list``, ``mok_list_x`` and ``mok_list_trusted`` as it mirrors
    them (PCR 14; MokList with shim's vendor certificate list first, MokListX with its built-in
    dbx first, MokListTrusted one byte, 1 by default in shim 16.1), and ``sbat_level``, the
    SbatLevel it applies (PCR 7)."""

    mok_list: bytes
    mok_list_x: bytes
    mok_list_trusted: bytes
    sbat_level: bytes


@dataclass(frozen=True)
class BootImage:
    """An EFI application of the chain: what it is, its Authenticode sha256 (what PCR 4 gets) and,
    for the images shim verifies, the :class:`Authority` that verified it (None for shim itself,
    whose authority is :attr:`FirmwareKeys.shim_authority`)."""

    description: str
    authenticode: bytes
    authority: Authority | None = None


@dataclass(frozen=True)
class UkiSection:
    """A UKI section as systemd-stub measures it: its name and the sha256 of its content
    (VirtualSize bytes, what ``ukify inspect`` and ``systemd-measure`` hash)."""

    name: str
    digest: bytes


@dataclass(frozen=True)
class Uki:
    """What the UKI contributes past PCR 4: its sections (PCR 11), the command line systemd-stub
    hands the kernel as LoadOptions and the initrd it assembles (PCR 9, as digests)."""

    sections: tuple[UkiSection, ...]
    load_options_digest: bytes
    initrd_digest: bytes


@dataclass(frozen=True)
class Event:
    """A predicted measurement: the PCR, the event type's name, the sha256 digest the PCR is
    extended with, and what it is."""

    pcr: int
    type: str
    digest: bytes
    description: str

    def to_json(self) -> dict[str, object]:
        return {
            "pcr": self.pcr,
            "type": self.type,
            "digest": self.digest.hex(),
            "description": self.description,
        }


@dataclass(frozen=True)
class Unpredictable:
    """A register the prediction leaves out, and why."""

    pcr: int
    reason: str


#: The registers a build cannot predict, and why (PCR 11's phases past the named one aside).
UNPREDICTABLE: Final = (
    Unpredictable(
        0,
        "the firmware's own code (S-CRTM version, firmware volumes): the firmware "
        "build's, not the image's; predictable only by replaying a boot on that build",
    ),
    Unpredictable(
        1,
        "the platform's configuration: BootOrder/Boot#### variables, SMBIOS, CPU "
        "and memory: they vary with the machine and its NVRAM",
    ),
    Unpredictable(2, "option ROMs and UEFI drivers of plug-in devices: the machine's hardware"),
    Unpredictable(3, "option ROM configuration: the machine's hardware"),
    Unpredictable(6, "the platform manufacturer's events (resume, wake): the firmware's"),
    Unpredictable(
        8,
        "not extended by this chain (GRUB's commands would be): 0 on a boot of the "
        "image as built; anything else came from outside the image",
    ),
    Unpredictable(10, "IMA: the files the running system opens, in the order it opens them"),
    Unpredictable(
        12,
        "systemd-stub's command-line, credential and addon overrides from outside "
        "the UKI: 0 when there are none, which the image cannot enforce",
    ),
    Unpredictable(13, "systemd-stub's system extensions from the ESP: 0 when there are none"),
    Unpredictable(
        15,
        "the machine ID and disk-encryption volume keys (systemd-pcrmachine, "
        "cryptsetup): per machine",
    ),
    Unpredictable(16, "debug register, resettable at any time"),
    Unpredictable(23, "application register, resettable at any time"),
)


@dataclass(frozen=True)
class Prediction:
    """Per PCR its predicted value and the ordered events that make it (sha256 bank), the phase
    PCR 11 is predicted for, and the registers left out with why."""

    events: tuple[Event, ...]
    phase: str
    unpredictable: tuple[Unpredictable, ...] = UNPREDICTABLE
    values: dict[int, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.values:
            self.values.update(replay((e.pcr, e.digest) for e in self.events))

    def pcr_events(self, pcr: int) -> list[Event]:
        return [e for e in self.events if e.pcr == pcr]

    def to_json(self) -> dict[str, object]:
        return {
            "bank": "sha256",
            "phase": self.phase,
            "pcrs": {str(p): v.hex() for p, v in sorted(self.values.items())},
            "events": [e.to_json() for e in self.events],
            "unpredictable": [{"pcr": u.pcr, "reason": u.reason} for u in self.unpredictable],
        }


def replay(events: Iterable[tuple[int, bytes]]) -> dict[int, bytes]:
    """The sha256-bank values of the PCRs that ``events`` ((pcr, digest) pairs, in order) extend,
    each starting from 32 zero bytes: PCR := sha256(PCR || digest)."""
    values: dict[int, bytes] = {}
    for pcr, digest in events:
        values[pcr] = sha256(values.get(pcr, bytes(32)) + digest)
    return values


def phase_words(phase: str) -> tuple[str, ...]:
    """The systemd-pcrphase words extended into PCR 11 by the time ``phase`` is reached:
    none for :data:`AFTER_STUB`, else :data:`PHASE_WORDS` up to and including ``phase``.

    Raises:
        IntegrityError: ``phase`` is neither.
    """
    if phase == AFTER_STUB:
        return ()
    if phase not in PHASE_WORDS:
        known = ", ".join((AFTER_STUB, *PHASE_WORDS))
        raise IntegrityError(f"unknown boot phase {phase!r}: one of {known}")
    return PHASE_WORDS[: PHASE_WORDS.index(phase) + 1]


def load_options_digest(cmdline: str) -> bytes:
    """The kernel stub's "LOADED_IMAGE::LoadOptions" digest for the command line systemd-stub
    passes: its UTF-16LE encoding with the terminating NUL."""
    return sha256(cmdline.encode("utf-16-le") + b"\0\0")


def _pcr7(firmware: FirmwareKeys) -> list[Event]:
    variables = (
        (EFI_GLOBAL_VARIABLE, "SecureBoot", firmware.secure_boot),
        (EFI_GLOBAL_VARIABLE, "PK", firmware.pk),
        (EFI_GLOBAL_VARIABLE, "KEK", firmware.kek),
        (EFI_IMAGE_SECURITY_DATABASE, "db", firmware.db),
        (EFI_IMAGE_SECURITY_DATABASE, "dbx", firmware.dbx),
    )
    return [
        Event(7, EV_EFI_VARIABLE_DRIVER_CONFIG, sha256(variable_data(g, n, d)), n)
        for g, n, d in variables
    ]


def _uki_sections(uki: Uki) -> list[Event]:
    names = [s.name for s in uki.sections]
    odd = [n for n in names if n in UKI_UNMODELLED_SECTIONS]
    if odd:
        raise IntegrityError(
            f"the UKI has {', '.join(odd)}: multi-profile and devicetree-matching UKIs are not "
            "modelled (systemd-stub picks their sections at boot)"
        )
    if len(set(names)) != len(names):
        raise IntegrityError(f"the UKI names a section twice: {names}")
    by_name = {s.name: s for s in uki.sections}
    events = []
    for name in UKI_MEASURED_SECTIONS:
        if name in by_name:
            events.append(Event(11, EV_IPL, sha256(name.encode() + b"\0"), f"{name} (name)"))
            events.append(Event(11, EV_IPL, by_name[name].digest, f"{name} (content)"))
    if ".linux" not in by_name:
        raise IntegrityError("the UKI has no .linux section: systemd-stub refuses it")
    return events


def predict(
    firmware: FirmwareKeys,
    shim: ShimState,
    images: Sequence[BootImage],
    uki: Uki,
    gpt_event: bytes,
    *,
    phase: str = AFTER_STUB,
) -> Prediction:
    """The PCR values and events of a boot of ``images`` (shim first, the UKI last, systemd-boot
    between them in design (a)) under ``firmware``'s keys with ``shim``'s state, from a disk whose
    GPT makes ``gpt_event`` (:func:`nvkr.secureboot.measure_inputs.gpt_event_data`), with PCR 11
    at ``phase`` (:func:`phase_words`).

    Events are in the order of the reference boot's log; the order across registers does not
    change a value.

    Raises:
        IntegrityError: fewer than two images, an image but shim without an authority, an
            unknown phase, or a UKI this model does not cover.
    """
    if len(images) < 2:
        raise IntegrityError("a boot chain is shim and at least the UKI")
    first, rest = images[0], images[1:]
    missing = [i.description for i in rest if i.authority is None]
    if missing:
        raise IntegrityError(f"no authority given for {', '.join(missing)} (shim verifies them)")
    words = phase_words(phase)
    ev: list[Event] = _pcr7(firmware)
    ev.append(Event(7, EV_SEPARATOR, _SEPARATOR_DIGEST, "separator"))
    ev.append(Event(4, EV_EFI_ACTION, sha256(_ACTION_BOOT_OPTION.encode()), _ACTION_BOOT_OPTION))
    ev.append(Event(4, EV_SEPARATOR, _SEPARATOR_DIGEST, "separator"))
    ev.append(Event(5, EV_SEPARATOR, _SEPARATOR_DIGEST, "separator"))
    shim_auth = db_authority(firmware.shim_authority)
    ev.append(
        Event(
            7,
            EV_EFI_VARIABLE_AUTHORITY,
            sha256(shim_auth.variable_data()),
            f"db entry that verified {first.description}",
        )
    )
    ev.append(Event(5, EV_EFI_GPT_EVENT, sha256(gpt_event), "GPT (UEFI_GPT_DATA)"))
    ev.append(Event(4, EV_EFI_BOOT_SERVICES_APPLICATION, first.authenticode, first.description))
    ev.append(Event(14, EV_IPL, sha256(shim.mok_list), "MokList"))
    ev.append(Event(14, EV_IPL, sha256(shim.mok_list_x), "MokListX"))
    sbat = variable_data(SHIM_LOCK, "SbatLevel", shim.sbat_level)
    ev.append(Event(7, EV_EFI_VARIABLE_AUTHORITY, sha256(sbat), "SbatLevel"))
    ev.append(Event(14, EV_IPL, sha256(shim.mok_list_trusted), "MokListTrusted"))
    seen = {shim_auth}
    for image in rest:
        assert image.authority is not None
        if image.authority not in seen:
            seen.add(image.authority)
            digest = sha256(image.authority.variable_data())
            ev.append(
                Event(
                    7,
                    EV_EFI_VARIABLE_AUTHORITY,
                    digest,
                    f"{image.authority.variable} entry that verified {image.description}",
                )
            )
        ev.append(Event(4, EV_EFI_BOOT_SERVICES_APPLICATION, image.authenticode, image.description))
    ev.extend(_uki_sections(uki))
    ev.append(Event(9, EV_EVENT_TAG, uki.load_options_digest, "LOADED_IMAGE::LoadOptions"))
    ev.append(Event(9, EV_EVENT_TAG, uki.initrd_digest, "Linux initrd"))
    ev.append(Event(5, EV_EFI_ACTION, sha256(_ACTION_EBS.encode()), _ACTION_EBS))
    ev.append(Event(5, EV_EFI_ACTION, sha256(_ACTION_EBS_DONE.encode()), _ACTION_EBS_DONE))
    ev.extend(Event(11, EV_IPL, sha256(w.encode()), f"systemd-pcrphase {w}") for w in words)
    return Prediction(tuple(ev), phase)
