"""The measured boot's evidence, read in the guest and checked on the host.

:func:`boothook` is a cloud-init boot hook (``#cloud-boothook``: it runs in cloud-init's first
network stage, before the node agent is usually ready, not in the final stage) that writes to
``/dev/console``, one line each, all starting with :data:`PREFIX`:

- ``secureboot <byte>``: the ``SecureBoot`` EFI variable's value (``01``: enforcing);
- ``lockdown <the kernel's /sys/kernel/security/lockdown>`` (``none [integrity] confidentiality``);
- ``pcr <N> <hex>`` for the sha256 PCRs 0-15 (``/sys/class/tpm/tpm0/pcr-sha256/N``);
- ``eventlog sha256=<hex> size=<bytes>`` and the event log
  (``/sys/kernel/security/tpm0/binary_bios_measurements``) as ``eventlog-b64 <64 base64
  characters>`` lines;
- ``no-tpm`` when the guest has no TPM (after waiting up to 60 s for its driver), then
- ``end``.

The image needs no TPM tools: ``od``, ``sha256sum`` and ``base64`` (coreutils). :func:`parse`
reads the report from the console lines; :func:`check` decodes the event log (its sha256 must
be the one the guest printed: the serial console did not garble it), replays it
(:mod:`nvkr.machine.eventlog`) and compares each PCR the log extends with the one the guest
read: a mismatch fails the boot test. PCRs the log does not extend (10: IMA's, 15: systemd's
machine-id, 8, 12, 13) are reported, not compared.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from nvkr.errors import BootTestError
from nvkr.machine.eventlog import Event, replay
from nvkr.machine.eventlog import parse as parse_log

PREFIX: Final = "nvkr-tpm:"
#: The report's last line.
END: Final = rf"{PREFIX} end\b"
PCRS: Final = range(16)
_LINE = re.compile(re.escape(PREFIX) + r" (\S+) ?(.*)$")
EFI_GLOBAL: Final = "8be4df61-93ca-11d2-aa0d-00e098032b8c"


def boothook() -> bytes:
    """The ``#cloud-boothook`` part that prints the report (module docstring)."""
    pcrs = " ".join(str(n) for n in PCRS)
    return f"""#cloud-boothook
#!/bin/sh
# nvkr boot-test --tpm: the guest's Secure Boot state, PCRs and TPM event log, on the console.
exec >/dev/console 2>&1
p={PREFIX}
sb=$(od -An -tx1 /sys/firmware/efi/efivars/SecureBoot-{EFI_GLOBAL} 2>/dev/null | awk '{{print $NF}}')
echo "$p secureboot ${{sb:-missing}}"
echo "$p lockdown $(cat /sys/kernel/security/lockdown 2>/dev/null || echo missing)"
log=/sys/kernel/security/tpm0/binary_bios_measurements
n=0
while [ ! -e "$log" ] && [ $n -lt 60 ]; do sleep 1; n=$((n + 1)); done
if [ -e "$log" ]; then
    for i in {pcrs}; do
        echo "$p pcr $i $(cat /sys/class/tpm/tpm0/pcr-sha256/$i 2>/dev/null || echo missing)"
    done
    echo "$p eventlog sha256=$(sha256sum < $log | cut -d' ' -f1) size=$(wc -c < $log)"
    base64 -w 64 < $log | while read -r line; do echo "$p eventlog-b64 $line"; done
else
    echo "$p no-tpm"
fi
echo "$p end"
""".encode()


@dataclass(frozen=True)
class Report:
    """The probe's report: ``secureboot`` (the variable's byte, hex), ``lockdown``, ``pcrs`` (by
    index, lower-case hex), the event log's ``sha256`` and ``size`` as the guest gave them,
    its base64 ``b64``, whether the guest had a TPM, and whether the report ``ended``."""

    secureboot: str
    lockdown: str
    pcrs: dict[int, str]
    sha256: str
    size: int
    b64: str
    tpm: bool
    ended: bool


def parse(lines: Sequence[str]) -> Report:
    """The probe's report in the console ``lines`` (the last one when the probe ran twice)."""
    fields: dict[str, Any] = {"secureboot": "", "lockdown": "", "pcrs": {}, "sha256": "",
                              "size": -1, "b64": [], "tpm": True, "ended": False}  # fmt: skip
    for line in lines:
        m = _LINE.search(line)
        if m is None:
            continue
        kind, rest = m.group(1), m.group(2).strip()
        if kind in ("secureboot", "lockdown"):
            if fields["ended"]:  # a second run of the probe: start again
                fields.update(pcrs={}, b64=[], ended=False, tpm=True)
            fields[kind] = rest
        elif kind == "pcr" and len(parts := rest.split()) == 2 and parts[0].isdigit():
            fields["pcrs"][int(parts[0])] = parts[1].lower()
        elif kind == "eventlog":
            kv = dict(item.split("=", 1) for item in rest.split() if "=" in item)
            fields["sha256"] = kv.get("sha256", "")
            fields["size"] = int(kv["size"]) if kv.get("size", "").isdigit() else -1
        elif kind == "eventlog-b64":
            fields["b64"].append(rest)
        elif kind == "no-tpm":
            fields["tpm"] = False
        elif kind == "end":
            fields["ended"] = True
    fields["b64"] = "".join(fields["b64"])
    return Report(**fields)


@dataclass(frozen=True)
class Measurements:
    """A measured boot, checked: the guest's ``pcrs`` (sha256 bank, hex by index), its
    ``eventlog`` bytes and their ``events``, the PCRs the replay matched (``replayed``), and
    the guest's ``secureboot`` byte and ``lockdown`` line."""

    pcrs: dict[int, str]
    eventlog: bytes
    events: list[Event]
    replayed: list[int]
    secureboot: str
    lockdown: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.eventlog).hexdigest()

    @property
    def lockdown_mode(self) -> str:
        """The lockdown mode in force: the bracketed word of ``lockdown`` (``integrity``)."""
        m = re.search(r"\[(\w+)\]", self.lockdown)
        return m.group(1) if m else ""

    def to_json(self, eventlog_file: str | None = None) -> dict[str, Any]:
        log: dict[str, Any] = {"sha256": self.sha256, "size": len(self.eventlog)}
        if eventlog_file is not None:
            log["file"] = eventlog_file
        log["events"] = [e.to_json() for e in self.events]
        return {"pcrs": {str(n): v for n, v in sorted(self.pcrs.items())},
                "replayed": self.replayed, "eventLog": log}  # fmt: skip


def check(report: Report, *, where: str = "the guest") -> Measurements:
    """The report's event log decoded, parsed and replayed against its PCRs.

    Raises:
        BootTestError: no report or no TPM, an event log garbled on its way (its sha256), one
            that does not parse, or a PCR the replay does not reach (each one named).
    """
    if not report.ended:
        raise BootTestError(f"{where} printed no complete TPM report ({PREFIX} ... end)")
    if not report.tpm:
        raise BootTestError(f"{where} has no TPM: no event log in /sys/kernel/security/tpm0",
                            hint="the kernel lacks a TPM driver (tpm_tis) for QEMU's device")  # fmt: skip
    try:
        data = base64.b64decode(report.b64, validate=True)
    except binascii.Error as e:
        raise BootTestError(f"the TPM event log {where} printed is not base64: {e}") from e
    digest = hashlib.sha256(data).hexdigest()
    if digest != report.sha256 or len(data) != report.size:
        raise BootTestError(
            f"the TPM event log came over the console garbled: {len(data)} bytes of sha256 "
            f"{digest}, where {where} read {report.size} bytes of sha256 {report.sha256}",
            hint="kernel messages may have cut into its lines; boot again",
        )
    events = parse_log(data)
    replayed = replay(events)
    wrong = [f"PCR {n}: replay {v.hex()}, {where} read {report.pcrs.get(n, 'nothing')}"
             for n, v in sorted(replayed.items()) if report.pcrs.get(n) != v.hex()]  # fmt: skip
    if wrong:
        raise BootTestError(
            f"the TPM event log does not replay to the PCRs {where} read: " + "; ".join(wrong),
            hint="something extended these PCRs without logging it, or the log was changed",
        )
    return Measurements(dict(report.pcrs), data, events, sorted(replayed), report.secureboot,
                        report.lockdown)  # fmt: skip
