"""nvkr.secureboot.measure: PCR predictions checked against the TCG event logs of reference boots.

The fixtures (``tests/fixtures/secureboot-measure``, see its README) come from the Secure Boot
spike's boots under OVMF/AAVMF 2022.11 with swtpm: the event logs as the guests read them, the
OVMF variable store booted (gzip), the disks' first 34 sectors (gzip), and in ``inputs.json``
what the 1-48 MB files give (shim's and the UKIs' Authenticode digests, shim's built-in lists
and SbatLevel, the UKIs' section digests, command lines and assembled-initrd digests). The
derivation from those full files is checked by hand (the spike's files are not in CI).
"""

from __future__ import annotations

import gzip
import json
import struct
import uuid
from pathlib import Path
from typing import Any

import pytest

from nvkr.errors import IntegrityError
from nvkr.secureboot import measure as m
from nvkr.secureboot import measure_inputs as mi
from nvkr.secureboot import measure_log as ml

FIXTURES = Path(__file__).parent.parent / "fixtures" / "secureboot-measure"
INPUTS: dict[str, Any] = json.loads((FIXTURES / "inputs.json").read_text())
PREDICTED = {4, 5, 7, 9, 11, 14}
#: the PCR values the guests read from sysfs (amd64, design b: /work/notes/sb-spike.md)
AMD64_B_SYSFS = {
    4: "97de1b5f44f2becf715e9d6f02f8bd8bfb5d8ba564e0e50ea0598ce24bbf95c5",
    5: "a28542b43ab02875d9e4c71e823c36084ea10f7b97acc5a9b75ff08b155acc89",
    7: "63d2c0cd0e95bab01668c24b8ab3b23a57bf53bb1e5339356bf7b2b07601764c",
    9: "6b989566b2fe2144242568334234503b2d66ce21663299fd904023dacf815404",
    11: "7b9c9fb44bbca1a68c253960f0afebfd29c44dcb7a668b5c432665946be484e3",
    14: "a8e9687f60287404eac397575e0ba062ece66e25a63daf44707ab0d3ad5de674",
}


def _entry(doc: dict[str, str]) -> m.SignatureEntry:
    return m.SignatureEntry(uuid.UUID(doc["owner"]), bytes.fromhex(doc["data"]))


def _variables() -> dict[tuple[uuid.UUID, str], bytes]:
    return mi.read_varstore(gzip.decompress((FIXTURES / "vars-mok.fd.gz").read_bytes()))


def _images(case: dict[str, Any]) -> list[m.BootImage]:
    out = []
    for image in case["images"]:
        auth = image.get("authority")
        authority = None
        if auth is not None:
            make = m.db_authority if auth["variable"] == "db" else m.mok_authority
            authority = make(_entry(auth))
        out.append(
            m.BootImage(image["description"], bytes.fromhex(image["authenticode"]), authority)
        )
    return out


def _uki(doc: dict[str, Any]) -> m.Uki:
    return m.Uki(
        sections=tuple(
            m.UkiSection(s["name"], bytes.fromhex(s["sha256"])) for s in doc["sections"]
        ),
        load_options_digest=m.load_options_digest(doc["cmdline"]),
        initrd_digest=bytes.fromhex(doc["linux_initrd_digest"]),
    )


def _predict(name: str, phase: str = m.AFTER_STUB) -> m.Prediction:
    case = INPUTS["cases"][name]
    shim = INPUTS["shims"][case["arch"]]
    variables = _variables()
    firmware = mi.firmware_keys(variables, _entry(shim["db_entry"]))
    builtins = mi.ShimBuiltins(
        bytes.fromhex(shim["vendor_authorized"]),
        bytes.fromhex(shim["vendor_deauthorized"]),
        shim["sbat_previous"].encode(),
        shim["sbat_latest"].encode(),
    )
    head = gzip.decompress((FIXTURES / case["gpt"]).read_bytes())
    return m.predict(
        firmware,
        mi.shim_state(variables, builtins),
        _images(case),
        _uki(INPUTS["ukis"][case["arch"]]),
        mi.gpt_event_data(head),
        phase=phase,
    )


def _log(name: str) -> list[ml.LoggedEvent]:
    return ml.read_log((FIXTURES / INPUTS["cases"][name]["eventlog"]).read_bytes())


@pytest.mark.parametrize("name", ["amd64-b", "arm64-b", "amd64-a"])
def test_the_prediction_matches_the_reference_boot_event_by_event(name: str) -> None:
    prediction = _predict(name)
    assert set(prediction.values) == PREDICTED
    results = ml.compare(prediction, _log(name))
    assert [r.problems for r in results] == [()] * len(PREDICTED)
    assert all(r.matches for r in results), [r.pcr for r in results if not r.matches]


def test_the_replayed_log_is_what_the_guest_read_and_what_was_predicted() -> None:
    values = ml.replay_log(_log("amd64-b"))
    assert {p: values[p].hex() for p in PREDICTED} == AMD64_B_SYSFS
    assert {p: v.hex() for p, v in _predict("amd64-b").values.items()} == AMD64_B_SYSFS


def test_pcr7_is_the_same_on_arm64_and_differs_with_systemd_boot_between() -> None:
    b, arm, a = (_predict(n).values for n in ("amd64-b", "arm64-b", "amd64-a"))
    assert b[7] == arm[7] != a[7]
    assert b[14] != arm[14]  # shim's built-in dbx differs per architecture
    assert b[11] == a[11] and b[9] == a[9] and b[5] == a[5]


def test_each_pcr_lists_its_events_in_order() -> None:
    p = _predict("amd64-b")
    assert [(e.type, e.description) for e in p.pcr_events(4)] == [
        (m.EV_EFI_ACTION, "Calling EFI Application from Boot Option"),
        (m.EV_SEPARATOR, "separator"),
        (m.EV_EFI_BOOT_SERVICES_APPLICATION, "shim"),
        (m.EV_EFI_BOOT_SERVICES_APPLICATION, "UKI"),
    ]
    assert [e.description for e in p.pcr_events(7)] == [
        "SecureBoot", "PK", "KEK", "db", "dbx", "separator", "db entry that verified shim",
        "SbatLevel", "MokListRT entry that verified UKI",
    ]  # fmt: skip
    assert [e.description for e in p.pcr_events(11)][:4] == [
        ".linux (name)",
        ".linux (content)",
        ".osrel (name)",
        ".osrel (content)",
    ]
    assert [e.description for e in p.pcr_events(14)] == ["MokList", "MokListX", "MokListTrusted"]
    doc = p.to_json()
    assert doc["phase"] == "after-stub" and set(doc["pcrs"]) == {str(n) for n in PREDICTED}  # type: ignore[arg-type]
    assert {u.pcr for u in p.unpredictable} >= {0, 1, 2, 3, 6, 8, 10, 12, 15}
    assert not {u.pcr for u in p.unpredictable} & PREDICTED


def test_a_named_phase_extends_pcr11_with_the_pcrphase_words() -> None:
    after = _predict("amd64-b")
    ready = _predict("amd64-b", phase="ready")
    words = [e.description for e in ready.pcr_events(11)][len(after.pcr_events(11)) :]
    assert words == [f"systemd-pcrphase {w}" for w in m.PHASE_WORDS]
    assert ready.values[11] != after.values[11]
    assert {p: v for p, v in ready.values.items() if p != 11} == {
        p: v for p, v in after.values.items() if p != 11
    }
    # the reference image has no libtss2: nothing was extended past the stub
    results = ml.compare(ready, _log("amd64-b"), [11])
    assert (
        not results[0].matches
        and "systemd-pcrphase enter-initrd not logged" in results[0].problems[0]
    )
    with pytest.raises(IntegrityError, match="unknown boot phase 'booted'"):
        m.phase_words("booted")


def test_a_tampered_uki_or_another_mok_is_named_where_it_parts_from_the_log() -> None:
    case = INPUTS["cases"]["amd64-b"]
    images = _images(case)
    good = _predict("amd64-b")
    tampered = m.BootImage("UKI", bytes(32), images[1].authority)
    p = m.predict(
        good_firmware := mi.firmware_keys(
            _variables(), _entry(INPUTS["shims"]["amd64"]["db_entry"])
        ),
        mi.shim_state(_variables(), mi.ShimBuiltins(b"", b"", b"sbat,1\n", b"")),
        [images[0], tampered],
        _uki(INPUTS["ukis"]["amd64"]),
        b"",
    )
    assert good_firmware.secure_boot == b"\x01"
    bad = {r.pcr: r for r in ml.compare(p, _log("amd64-b"))}
    assert {pcr for pcr, r in bad.items() if not r.matches} == {4, 5, 7, 14}
    assert "predicted EV_EFI_BOOT_SERVICES_APPLICATION UKI 0000" in bad[4].problems[0]
    assert p.values[11] == good.values[11]


def test_inputs_that_do_not_make_a_chain_are_refused() -> None:
    p = _predict("amd64-b")
    with pytest.raises(IntegrityError, match="shim and at least the UKI"):
        _chain([m.BootImage("shim", bytes(32))])
    with pytest.raises(IntegrityError, match="no authority given for UKI"):
        _chain([m.BootImage("shim", bytes(32)), m.BootImage("UKI", bytes(32))])
    uki = m.Uki((m.UkiSection(".linux", bytes(32)), m.UkiSection(".profile", bytes(32))), b"", b"")
    with pytest.raises(IntegrityError, match="multi-profile"):
        _chain(_images(INPUTS["cases"]["amd64-b"]), uki)
    assert p.values


def _chain(images: list[m.BootImage], uki: m.Uki | None = None) -> m.Prediction:
    firmware = mi.firmware_keys(_variables(), _entry(INPUTS["shims"]["amd64"]["db_entry"]))
    shim = m.ShimState(b"", b"", b"\x01", b"")
    return m.predict(firmware, shim, images, uki or _uki(INPUTS["ukis"]["amd64"]), b"")


def test_the_variable_store_gives_the_keys_and_refuses_a_foreign_shim_entry() -> None:
    variables = _variables()
    assert len(variables[(m.EFI_IMAGE_SECURITY_DATABASE, "db")]) == 3143
    assert len(variables[(m.SHIM_LOCK, "MokList")]) == 847
    moks = list(mi.signature_entries(variables[(m.SHIM_LOCK, "MokList")]))
    assert [(k, e.owner) for k, e in moks] == [
        (mi.EFI_CERT_X509, uuid.UUID("2605215f-19e8-52ff-995e-5714c7d7aa3e"))
    ]
    with pytest.raises(IntegrityError, match="not in db"):
        mi.firmware_keys(variables, moks[0][1])
    with pytest.raises(IntegrityError, match="not an EDK2 firmware volume"):
        mi.read_varstore(bytes(4096))


def _pe64(sections: list[tuple[str, bytes, int]]) -> bytes:
    """A minimal PE32+ image with ``sections`` (name, raw data, VirtualSize); names over 8
    characters go to a COFF string table after the sections, as GNU ld writes them."""
    dirs = 16
    opt = bytearray(112 + 8 * dirs)
    struct.pack_into("<H", opt, 0, 0x20B)
    struct.pack_into("<II", opt, 56, 0x100000, 0x400)  # SizeOfImage, SizeOfHeaders
    struct.pack_into("<I", opt, 108, dirs)
    strings, table, raw, ptr = b"", b"", b"", 0x400
    for i, (name, data, vsize) in enumerate(sections):
        data = data.ljust(-(-len(data) // 0x200) * 0x200, b"\0")
        field = name.encode()
        if len(field) > 8:
            field = b"/%d" % (4 + len(strings))
            strings += name.encode() + b"\0"
        table += struct.pack(
            "<8sIIIIIIHHI", field, vsize, 0x1000 * (i + 1), len(data), ptr, 0, 0, 0, 0, 0
        )
        raw, ptr = raw + data, ptr + len(data)
    symtab = ptr if strings else 0
    dos = b"MZ" + bytes(0x3A) + struct.pack("<I", 0x40)
    coff = struct.pack("<HHIIIHH", 0x8664, len(sections), 0, symtab, 0, len(opt), 0x22)
    tail = struct.pack("<I", 4 + len(strings)) + strings if strings else b""
    return (dos + b"PE\0\0" + coff + opt + table).ljust(0x400, b"\0") + raw + tail


def test_a_uki_gives_its_section_digests_command_line_and_assembled_initrd() -> None:
    osrel, initrd = b"ID=debian\n", b"\x07" * 1001
    uki = _pe64([
        (".text", b"\xc3", 1), (".osrel", osrel, len(osrel)), (".cmdline", b"ro quiet", 8),
        (".linux", b"K" * 600, 600), (".initrd", initrd, len(initrd)),
    ])  # fmt: skip
    got = mi.uki_inputs(uki)
    assert [s.name for s in got.sections] == [".text", ".osrel", ".cmdline", ".linux", ".initrd"]
    assert got.sections[1].digest == m.sha256(osrel)  # VirtualSize bytes, not the padded raw data
    assert got.load_options_digest == m.sha256("ro quiet\0".encode("utf-16-le"))
    cpio = mi.stub_cpio("os-release", osrel)
    assert cpio.startswith(b"070701000000010000416d") and cpio.endswith(b"TRAILER!!!\0\0\0\0")
    assert b".extra/os-release\0" in cpio and len(cpio) % 4 == 0
    assert got.initrd_digest == m.sha256(initrd + b"\0\0\0" + cpio)
    assert mi.stub_initrd_digest({".initrd": initrd}) == m.sha256(initrd)  # alone: verbatim
    events = _chain(_images(INPUTS["cases"]["amd64-b"]), got)
    assert [e.description for e in events.pcr_events(11)] == [
        ".linux (name)", ".linux (content)", ".osrel (name)", ".osrel (content)",
        ".cmdline (name)", ".cmdline (content)", ".initrd (name)", ".initrd (content)",
    ]  # fmt: skip
    with pytest.raises(IntegrityError, match=r"no \.cmdline"):
        mi.uki_inputs(_pe64([(".linux", b"K", 1), (".initrd", b"I", 1)]))


def test_shim_builtins_are_read_from_its_long_named_sections() -> None:
    vendor = bytes.fromhex(INPUTS["shims"]["amd64"]["vendor_authorized"])
    dbx = b"\x26" * 76
    table = struct.pack("<IIII", len(vendor), len(dbx), 16, 16 + len(vendor)) + vendor + dbx
    level = struct.pack("<III", 0, 8, 18) + b"sbat,1,1\n\0sbat,1,2\n\0"
    shim = _pe64(
        [
            (".text", b"\xc3", 1),
            (".vendor_cert", table, len(table)),
            (".sbatlevel", level, len(level)),
        ]
    )
    got = mi.shim_builtins(shim)
    assert (got.vendor_authorized, got.vendor_deauthorized) == (vendor, dbx)
    assert (got.sbat_previous, got.sbat_latest) == (b"sbat,1,1\n", b"sbat,1,2\n")
    state = mi.shim_state({}, got)
    assert state.mok_list == mi.x509_signature_list(m.SHIM_LOCK, vendor)
    assert (state.mok_list_x, state.mok_list_trusted, state.sbat_level) == (
        dbx,
        b"\x01",
        b"sbat,1,1\n",
    )


def test_a_truncated_or_foreign_log_is_refused() -> None:
    data = (FIXTURES / INPUTS["cases"]["amd64-b"]["eventlog"]).read_bytes()
    with pytest.raises(IntegrityError, match=r"ends at byte \d+ inside event"):
        ml.read_log(data[:-10])
    with pytest.raises(IntegrityError, match="first event is of type"):
        ml.read_log(bytes(64))
    events = ml.read_log(data)
    assert len(events) == 47 and events[-1].data == b"Exit Boot Services Returned with Success"
