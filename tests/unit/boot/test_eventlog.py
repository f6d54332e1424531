"""nvkr.machine.eventlog on a real TCG event log: the one a Debian 13 node image logged when it
booted under OVMF's Secure Boot (shim 16.1, an owner-signed UKI as shim's second stage, swtpm;
the spike of issue 32). ``ovmf-shim-uki.pcrs.json`` holds the sha256 PCRs the guest read from
sysfs at that boot: the replay must reach each PCR the log extends."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
import yaml

from nvkr.machine import eventlog
from nvkr.machine.eventlog import EventLogError, describe, parse, replay

FIXTURES = Path(__file__).parents[2] / "fixtures" / "tpm"
LOG = FIXTURES / "ovmf-shim-uki.eventlog"
GUEST = json.loads((FIXTURES / "ovmf-shim-uki.pcrs.json").read_text())


def _events() -> list[eventlog.Event]:
    return parse(LOG.read_bytes())


def test_the_fixture_is_the_log_the_guest_printed():
    assert hashlib.sha256(LOG.read_bytes()).hexdigest() == GUEST["eventlogSha256"]


def test_the_replay_reaches_every_pcr_the_guest_read():
    pcrs = replay(_events())
    assert sorted(pcrs) == [0, 1, 2, 3, 4, 5, 6, 7, 9, 11, 14]
    for n, value in pcrs.items():
        assert value.hex() == GUEST["sha256"][str(n)], f"PCR {n}"
    # what the log does not extend: IMA's PCR 10 (its own log), and zeros
    assert GUEST["sha256"]["10"] != "0" * 64
    assert all(GUEST["sha256"][str(n)] == "0" * 64 for n in (8, 12, 13, 15))


def test_events_are_named_and_described():
    events = _events()
    assert len(events) == 48
    assert (events[0].type_name, describe(events[0])) == ("EV_NO_ACTION", "Spec ID Event03")
    shown = [(e.pcr, e.type_name, describe(e)) for e in events]
    assert (7, "EV_EFI_VARIABLE_DRIVER_CONFIG", "variable SecureBoot") in shown
    assert (7, "EV_EFI_VARIABLE_AUTHORITY", "variable MokListRT") in shown
    apps = [(d, e.sha256.hex()) for e, (_, t, d) in zip(events, shown, strict=True)
            if t == "EV_EFI_BOOT_SERVICES_APPLICATION"]  # fmt: skip
    # shim, then the UKI shim starts: their Authenticode sha256 (the spike's note)
    assert apps == [
        ("\\EFI\\BOOT\\BOOTX64.EFI",
         "f4166948f7adafa71e45c7ca5d30d97f78f382ecf1e3c8e4767b1ec1770cd52f"),
        ("\\EFI\\BOOT\\grubx64.efi",
         "a6468c058a8f5257b395c1e6843fc65793e941af4ed49556b268ef04d2abc931"),
    ]  # fmt: skip
    ipl = [d for _, t, d in shown if t == "EV_IPL"]
    assert ipl[:4] == ["MokList", "MokListX", "MokListTrusted", ".linux"]
    assert (9, "EV_EVENT_TAG", "Linux initrd") in shown
    assert shown[-1] == (5, "EV_EFI_ACTION", "Exit Boot Services Returned with Success")
    as_json = events[25].to_json()
    assert as_json == {"pcr": 4, "type": "EV_EFI_BOOT_SERVICES_APPLICATION",
                       "sha256": apps[0][1], "description": "\\EFI\\BOOT\\BOOTX64.EFI"}  # fmt: skip


def test_a_truncated_or_foreign_log_is_refused_saying_where():
    data = LOG.read_bytes()
    with pytest.raises(EventLogError, match=r"ends at byte 20000 inside event \d+"):
        parse(data[:20000])
    with pytest.raises(EventLogError, match="Spec ID Event03"):
        parse(struct.pack("<II", 0, 3) + bytes(20) + struct.pack("<I", 4) + b"abcd")
    with pytest.raises(EventLogError, match="first event is of type EV_SEPARATOR"):
        parse(struct.pack("<II", 0, 4) + data[8:])


def test_a_changed_digest_changes_the_replay():
    data = bytearray(LOG.read_bytes())
    shim = bytes.fromhex("f4166948f7adafa71e45c7ca5d30d97f78f382ecf1e3c8e4767b1ec1770cd52f")
    at = data.index(shim)
    data[at] ^= 1
    pcrs = replay(parse(bytes(data)))
    assert pcrs[4].hex() != GUEST["sha256"]["4"]
    assert pcrs[7].hex() == GUEST["sha256"]["7"]


def test_a_startup_locality_event_sets_the_pcrs_first_value():
    spec = parse(LOG.read_bytes())[0]
    locality = eventlog.Event(0, eventlog.EV_NO_ACTION, {}, b"StartupLocality\0\x03")
    digest = bytes(32)
    extend = eventlog.Event(0, 1, {eventlog.SHA256: digest}, b"")
    got = replay([spec, locality, extend])
    assert got[0] == hashlib.sha256(bytes(31) + b"\x03" + digest).digest()


@pytest.mark.skipif(shutil.which("tpm2_eventlog") is None, reason="tpm2-tools (install.sh)")
def test_the_parser_agrees_with_tpm2_eventlog():
    out = subprocess.run(["tpm2_eventlog", str(LOG)], capture_output=True, check=True).stdout
    theirs = yaml.safe_load(out)
    ours = _events()
    assert len(theirs["events"]) == len(ours)
    for t, e in zip(theirs["events"], ours, strict=True):
        assert (t["PCRIndex"], t["EventType"]) == (e.pcr, e.type_name)
        sha256 = [d["Digest"] for d in t.get("Digests", ()) if d["AlgorithmId"] == "sha256"]
        assert sha256 == ([e.sha256.hex()] if e.type_name != "EV_NO_ACTION" else [])
    banks = {n: f"{v:064x}" if isinstance(v, int) else str(v)
             for n, v in theirs["pcrs"]["sha256"].items()}  # fmt: skip
    assert banks == {n: v.hex() for n, v in replay(ours).items()}
