"""``nvkr boot-test`` with fake QEMUs (tests/helpers/fake_qemu.py): the start line, the stall warning and
the TCG retry, ``--accel`` and ``$NVKR_BOOT_ACCEL``, the console log (``--console-log``, by default
under the store) named on failure, and ``--json`` events (stream version 1) that carry the accelerator and the
log and end with ``result`` or ``error``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from nvkr.machine import kvmhang, qemu
from tests.helpers.cli import invoke
from tests.helpers.fake_qemu import STALL, accels, fake_qemu

FIRMWARE = [
    ("say", "SeaBIOS (version 1.16.2-debian-1.16.2-1)\r\n"),
    ("say", "nvkr: loading /boot/vmlinuz-6.1.0-test-amd64\r\n"),
]
BOOTS = [
    *FIRMWARE,
    ("say", "[    0.000000] Linux version 6.1.0-test-amd64\r\n"),
    ("say", "[    4.2] node-agent[9]: nvkr-node-agent: ready gpus=0 generation=none\r\n"),
]
HANGS_UNDER_KVM = {"kvm": FIRMWARE, "tcg": BOOTS}


def _fake(monkeypatch: pytest.MonkeyPatch, directory: Path, script: dict[str, Any]) -> Path:
    binary = fake_qemu(directory, script)
    monkeypatch.setitem(qemu.QEMU, "amd64", (str(binary), "qemu-system-x86"))
    return binary


def test_a_start_line_then_a_warning_and_the_tcg_retry(image, tmp_path, kvm_host, monkeypatch):
    fake = _fake(monkeypatch, tmp_path / "q", HANGS_UNDER_KVM)
    logs = tmp_path / "logs"
    code, out, err = invoke(
        "boot-test", str(image), "--no-labels", "--timeout", "20", "--console-log", str(logs)
    )
    assert code == 0, err
    assert out == ""  # every line is the event stream's, on stderr
    assert accels(fake) == ["kvm", "tcg"]
    (log,) = logs.iterdir()
    starts = re.findall(r"^boot-test: booting (.*)$", err, re.M)
    assert starts == [
        f"{image} (amd64) under kvm, timeout 20 s, console log {log}",
        f"{image} (amd64) under tcg, timeout 20 s, console log {log} (KVM made no progress)",
    ]
    assert (
        f"warning: boot-test: {image}: no console output for {STALL:.0f} s under kvm after "
        "'nvkr: loading /boot/vmlinuz-6.1.0-test-amd64', before any line of the guest's kernel; "
        "booting it again under tcg" in err
    )
    assert re.search(
        r"^ok .*: .*nvkr-node-agent: ready .*\(\d+\.\d s, tcg after a KVM stall\)$", err, re.M
    )
    text = log.read_text()
    assert "attempt 1" in text and "attempt 2" in text and "nvkr-node-agent: ready" in text

    # a later run on this host skips KVM for the kept verdict, and says so, not "after a stall"
    kvmhang.forget()
    code, _, err = invoke(
        "boot-test", str(image), "--no-labels", "--timeout", "20", "--console-log", str(logs)
    )
    assert code == 0, err
    assert accels(fake) == ["kvm", "tcg", "tcg"]
    assert re.search(
        r"under tcg, .*\(KVM stalled a guest on this host at .* to try KVM again\)$", err, re.M
    )
    assert re.search(
        r"^ok .*: .*\(\d+\.\d s, tcg: KVM stalled an earlier guest on this host\)$", err, re.M
    )


def test_accel_option_and_nvkr_boot_accel(image, tmp_path, kvm_host, monkeypatch):
    fake = _fake(monkeypatch, tmp_path / "q", {"kvm": BOOTS, "tcg": BOOTS})
    base = ["boot-test", str(image), "--no-labels", "--console-log", str(tmp_path / "logs")]
    assert invoke(*base, "--accel", "tcg")[0] == 0
    assert invoke(*base, env={"NVKR_BOOT_ACCEL": "tcg"})[0] == 0
    assert invoke(*base, "--accel", "kvm", env={"NVKR_BOOT_ACCEL": "tcg"})[0] == 0
    assert invoke(*base)[0] == 0  # auto: KVM answers
    assert accels(fake) == ["tcg", "tcg", "kvm", "kvm"]
    code, _, err = invoke(*base, env={"NVKR_BOOT_ACCEL": "fast"})
    assert code == 2 and "NVKR_BOOT_ACCEL" in err and "'fast'" in err
    assert len(accels(fake)) == 4


def test_a_kvm_stall_under_accel_kvm_fails_naming_the_console_log(
    image, tmp_path, kvm_host, monkeypatch
):
    fake = _fake(monkeypatch, tmp_path / "q", HANGS_UNDER_KVM)
    logs = tmp_path / "logs"
    code, _, err = invoke(
        "boot-test", str(image), "--no-labels", "--accel", "kvm", "--console-log", str(logs)
    )
    assert code == 1
    assert accels(fake) == ["kvm"]
    (log,) = logs.iterdir()
    assert f"(bios, kvm) made no progress: no console output for {STALL:.0f} s under kvm" in err
    assert f"full console in {log}" in err
    assert "console: nvkr: loading /boot/vmlinuz-6.1.0-test-amd64" in log.read_text()


def test_json_events_carry_the_accelerator_and_the_log(image, tmp_path, kvm_host, monkeypatch):
    _fake(monkeypatch, tmp_path / "q", HANGS_UNDER_KVM)
    store = tmp_path / "store"
    code, out, err = invoke("--store", str(store), "boot-test", str(image), "--no-labels", "--json")
    assert code == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert all(e["v"] == 1 and re.fullmatch(r"\d{4}-.*T.*\.\d{3}Z", e["ts"]) for e in events)
    *images, result = events
    assert [(e["event"], e["accel"]) for e in images] == [
        ("boot-start", "kvm"),
        ("boot-stall", "kvm"),
        ("boot-start", "tcg"),
        ("image-result", "tcg"),
    ]
    assert result == {**result, "event": "result", "images": 1, "exitCode": 0}
    (log,) = (store / "logs" / "boot-test").iterdir()  # the default: under the store
    assert all(e["log"] == str(log) and e["image"] == str(image) for e in images)
    assert images[0]["timeoutMilliseconds"] == 300_000 and "timeout" not in images[0]
    assert images[1]["retry"] == "tcg" and images[1]["milliseconds"] == round(STALL * 1000)
    assert images[-1]["ok"] is True and f"{STALL:.0f} s under kvm" in images[-1]["fallback"]
    assert isinstance(images[-1]["milliseconds"], int) and "seconds" not in images[-1]


def test_a_failure_in_json_names_the_accelerator_and_the_log(
    image, tmp_path, kvm_host, monkeypatch
):
    _fake(monkeypatch, tmp_path / "q", {"tcg": [*FIRMWARE, ("exit", 1)]})
    logs = tmp_path / "logs"
    code, out, _ = invoke(
        "boot-test",
        str(image),
        "--no-labels",
        "--json",
        "--accel",
        "tcg",
        "--console-log",
        str(logs),
    )
    assert code == 1
    *_, result, error = [json.loads(line) for line in out.splitlines()]
    (log,) = logs.iterdir()
    assert result["event"] == "image-result" and result["ok"] is False
    assert result["accel"] == "tcg" and result["log"] == str(log)
    assert "QEMU exited" in result["error"] and result["code"] == "NVKR-E-BOOT"
    assert error["event"] == "error" and error["exitCode"] == 1
    assert "1 of 1 machine images failed" in error["message"]
