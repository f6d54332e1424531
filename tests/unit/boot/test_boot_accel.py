"""nvkr.machine.boot's accelerator choice: a KVM guest that makes no progress on its console is given up
after :data:`nvkr.machine.boot.KVM_STALL_SECONDS` and booted again under TCG (``accel="auto"``), or fails
naming KVM (``"kvm"``); ``"tcg"`` never runs KVM; ``$NVKR_BOOT_ACCEL`` is the default.

Fake QEMUs (tests/helpers/fake_qemu.py) play scripted consoles, fast; the last test injects the hang into
the real QEMU (``-S`` under ``-accel kvm``) and sees the TCG retry reach GRUB's line."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from nvkr.errors import BootTestError, UsageError
from nvkr.machine import boot, kvmhang, qemu
from nvkr.monitor.events import BootStall, BootStart, event_name
from tests.helpers.disk import LOADING, build_image, needs_grub, needs_qemu, needs_tools
from tests.helpers.fake_qemu import STALL, accels, fake_qemu, hanging_kvm_qemu

FIRMWARE = [
    ("say", "\x1bc\x1b[?7l\x1b[2J\x1b[0mSeaBIOS (version 1.16.2-debian-1.16.2-1)\r\n"),
    ("say", "Booting from Hard Disk...\r\n"),
    ("say", "nvkr: loading /boot/vmlinuz-6.1.0-test-amd64\r\n"),
]
KERNEL = [("say", "[    0.000000] Linux version 6.1.0-test-amd64 (gcc 12)\r\n")]
READY = [("say", "[    4.2] node-agent[9]: nvkr-node-agent: ready gpus=0 generation=none\r\n")]


def _use(monkeypatch: pytest.MonkeyPatch, binary: Path) -> Path:
    """Boot tests of amd64 images run ``binary`` as QEMU."""
    monkeypatch.setitem(qemu.QEMU, "amd64", (str(binary), "qemu-system-x86"))
    return binary


def _boot(image: Path, events: list[BootStart | BootStall] | None = None, **kw: Any):
    args: dict[str, Any] = {"timeout": 20.0, "grace": 0.0, "expect": "nvkr-node-agent: ready"}
    args.update(kw)
    if events is not None:
        args["event"] = events.append
    return boot.boot_test(image, **args)


@pytest.mark.slow  # seconds: out of the fast tier (pyproject's markers)
def test_a_kvm_guest_silent_after_the_firmware_is_booted_again_under_tcg(
    image, tmp_path, kvm_host, monkeypatch
):
    # TCG needs 2 s to the ready line: more than the 3 s timeout leaves after the KVM attempt
    # (STALL and its detection), so the retry must get the whole timeout again
    fake = _use(
        monkeypatch,
        fake_qemu(
            tmp_path / "q", {"kvm": FIRMWARE, "tcg": [*FIRMWARE, ("sleep", 2.0), *KERNEL, *READY]}
        ),
    )
    events: list[BootStart | BootStall] = []
    log = tmp_path / "console.log"
    start = time.monotonic()
    result = _boot(image, events, accel="auto", timeout=3.0, log_file=log)
    assert time.monotonic() - start < 3.0 + STALL + 2.0
    assert accels(fake) == ["kvm", "tcg"]
    assert result.accel == "tcg" and "nvkr-node-agent: ready" in result.matched
    assert f"no console output for {STALL:.0f} s under kvm" in result.fallback
    assert [event_name(e) for e in events] == ["boot-start", "boot-stall", "boot-start"]
    starts = [e for e in events if isinstance(e, BootStart)]
    assert [e.accel for e in starts] == ["kvm", "tcg"] and [e.attempt for e in starts] == [1, 2]
    assert all(e.log == str(log) and e.timeout == 3.0 for e in starts)
    assert starts[0].to_json()["timeoutMilliseconds"] == 3000
    stall = events[1]
    assert isinstance(stall, BootStall)
    assert stall.after == "nvkr: loading /boot/vmlinuz-6.1.0-test-amd64"
    assert stall.retry == "tcg" and stall.seconds == STALL
    assert stall.to_json()["milliseconds"] == round(STALL * 1000)
    text = log.read_text()
    assert text.count("console: nvkr: loading /boot/vmlinuz") == 2
    assert "under tcg" in text and "console: [    0.000000] Linux version" in text


def test_kvm_only_a_stall_fails_naming_kvm_and_the_log(image, tmp_path, kvm_host, monkeypatch):
    partial = ("say", "Probing EDD (edd=off to disable)... ok")  # no newline: kept all the same
    fake = _use(monkeypatch, fake_qemu(tmp_path / "q", {"kvm": [*FIRMWARE, partial]}))
    log = tmp_path / "console.log"
    with pytest.raises(BootTestError) as e:
        _boot(image, accel="kvm", log_file=log)
    assert accels(fake) == ["kvm"]
    msg = e.value.message
    assert "\nSeaBIOS (version 1.16.2" in msg, "escape sequences (ESC c too) are removed"
    assert f"(bios, kvm) made no progress: no console output for {STALL:.0f} s under kvm" in msg
    assert "after 'Probing EDD (edd=off to disable)... ok'" in msg
    assert msg.endswith(
        "nvkr: loading /boot/vmlinuz-6.1.0-test-amd64\nProbing EDD (edd=off to disable)... ok"
    )
    assert f"full console in {log}" in (e.value.hint or "")
    assert "--accel tcg" in (e.value.hint or "")
    assert "console: Probing EDD (edd=off to disable)... ok" in log.read_text()


def test_no_console_output_at_all_counts_as_a_stall(image, tmp_path, kvm_host, monkeypatch):
    _use(monkeypatch, fake_qemu(tmp_path / "q", {"kvm": []}))
    with pytest.raises(
        BootTestError, match=f"no console output at all for {STALL:.0f} s under kvm"
    ) as e:
        _boot(image, accel="kvm")
    assert e.value.message.endswith("last console lines:\n(none)")


@pytest.mark.slow  # seconds: out of the fast tier (pyproject's markers)
def test_a_kvm_guest_whose_kernel_has_spoken_is_not_cut_short(
    image, tmp_path, kvm_host, monkeypatch
):
    script = {"kvm": [*FIRMWARE, *KERNEL, ("sleep", STALL + 1.5), *READY]}
    fake = _use(monkeypatch, fake_qemu(tmp_path / "q", script))
    result = _boot(image, accel="auto")
    assert result.accel == "kvm" and result.fallback == ""
    assert accels(fake) == ["kvm"]


@pytest.mark.slow  # seconds: out of the fast tier (pyproject's markers)
def test_tcg_never_runs_kvm_and_is_never_cut_short(image, tmp_path, kvm_host, monkeypatch):
    script = {"kvm": [*FIRMWARE, *KERNEL, *READY], "tcg": [("sleep", STALL + 1.5), *READY]}
    fake = _use(monkeypatch, fake_qemu(tmp_path / "q", script))
    assert _boot(image, accel="tcg").accel == "tcg"
    assert accels(fake) == ["tcg"]


def test_after_a_stall_the_process_boots_under_tcg_at_once(image, tmp_path, kvm_host, monkeypatch):
    script = {"kvm": FIRMWARE, "tcg": [*FIRMWARE, *KERNEL, *READY]}
    fake = _use(monkeypatch, fake_qemu(tmp_path / "q", script))
    assert _boot(image, accel="auto").accel == "tcg"
    events: list[BootStart | BootStall] = []
    second = _boot(image, events, accel="auto")
    assert accels(fake) == ["kvm", "tcg", "tcg"]
    assert second.accel == "tcg" and "stalled" in second.fallback
    (start,) = events
    assert isinstance(start, BootStart) and "stalled" in start.why


@pytest.mark.slow  # seconds: out of the fast tier (pyproject's markers)
def test_a_stall_holds_for_later_processes_until_the_host_reboots(
    image, tmp_path, kvm_host, monkeypatch
):
    script = {"kvm": FIRMWARE, "tcg": [*FIRMWARE, *KERNEL, *READY]}
    fake = _use(monkeypatch, fake_qemu(tmp_path / "q", script))
    boot_id = tmp_path / "boot_id"
    boot_id.write_text("4a5b0f7e-0000-4000-8000-000000000001\n")
    monkeypatch.setattr(kvmhang, "BOOT_ID", boot_id)
    assert _boot(image, accel="auto").accel == "tcg"
    kept = kvmhang.directory() / "kvm-stall-amd64.json"
    doc = json.loads(kept.read_text())
    assert doc["bootId"] == "4a5b0f7e-0000-4000-8000-000000000001" and doc["arch"] == "amd64"
    assert doc["reason"].startswith(f"no console output for {STALL:.0f} s under kvm")
    assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700

    kvmhang.forget()  # a later nvkr process on the same host: no KVM attempt, and it says why
    events: list[BootStart | BootStall] = []
    later = _boot(image, events, accel="auto")
    assert accels(fake) == ["kvm", "tcg", "tcg"]
    assert later.fallback.startswith(f"KVM stalled a guest on this host at {doc['at']}")
    assert f"delete {kept} to try KVM again" in later.fallback
    assert [e.why for e in events if isinstance(e, BootStart)] == [later.fallback]
    with pytest.raises(BootTestError, match="made no progress"):
        _boot(image, accel="kvm")  # --accel kvm ignores the verdict: it tries KVM, and fails
    assert accels(fake)[-1] == "kvm"

    kvmhang.forget()  # the host rebooted: another boot_id, KVM is tried again
    boot_id.write_text("4a5b0f7e-0000-4000-8000-000000000002\n")
    assert _boot(image, accel="auto").accel == "tcg"
    assert accels(fake)[-2:] == ["kvm", "tcg"]


@pytest.mark.parametrize("where", ["symlink", "group-writable", "other-owner", "garbled"])
def test_a_verdict_not_kept_by_this_user_alone_is_no_verdict(
    image, tmp_path, kvm_host, monkeypatch, where
):
    """``/tmp`` is shared: a verdict directory that is a symlink, writable by others or owned by
    another user (and a file that is not a verdict) is ignored, and a stall is then kept in the
    process alone."""
    script = {"kvm": FIRMWARE, "tcg": [*FIRMWARE, *KERNEL, *READY]}
    fake = _use(monkeypatch, fake_qemu(tmp_path / "q", script))
    verdicts = kvmhang.directory()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    doc = {
        "bootId": kvmhang.BOOT_ID.read_text().strip(),
        "at": "2026-12-05T00:00:00Z",
        "reason": "x",
    }
    if where == "symlink":
        verdicts.symlink_to(elsewhere)
    else:
        verdicts.mkdir(mode=0o700)
    target = elsewhere if where == "symlink" else verdicts
    (target / "kvm-stall-amd64.json").write_text("{" if where == "garbled" else json.dumps(doc))
    if where == "group-writable":
        verdicts.chmod(0o770)
    if where == "other-owner":
        if os.getuid() != 0:
            pytest.skip("giving a directory to another user takes root")
        os.chown(verdicts, 65534, 65534)
    result = _boot(image, accel="auto")
    assert accels(fake) == ["kvm", "tcg"], "KVM was tried: the planted verdict is none"
    if where == "garbled":  # the directory is the user's: the stall replaces the garbled file
        assert json.loads((verdicts / "kvm-stall-amd64.json").read_text())["reason"] != "x"
        return
    assert result.fallback.startswith(f"no console output for {STALL:.0f} s under kvm")
    hang = kvmhang.hang("amd64")
    assert hang is not None and hang.path is None and "delete" not in hang.why()
    assert (target / "kvm-stall-amd64.json").read_text() == json.dumps(doc), "left as it was"
    assert _boot(image, accel="auto").accel == "tcg" and accels(fake)[-1] == "tcg"


def test_the_accelerator_defaults_to_nvkr_boot_accel(image, tmp_path, kvm_host, monkeypatch):
    script = {"kvm": [*FIRMWARE, *KERNEL, *READY], "tcg": [*FIRMWARE, *KERNEL, *READY]}
    fake = _use(monkeypatch, fake_qemu(tmp_path / "q", script))
    monkeypatch.setenv("NVKR_BOOT_ACCEL", "tcg")
    assert _boot(image).accel == "tcg"
    monkeypatch.setenv("NVKR_BOOT_ACCEL", "kvm")
    assert _boot(image).accel == "kvm"
    monkeypatch.delenv("NVKR_BOOT_ACCEL")
    assert _boot(image).accel == "kvm"  # auto, and KVM answers
    assert accels(fake) == ["tcg", "kvm", "kvm"]
    monkeypatch.setenv("NVKR_BOOT_ACCEL", "fast")
    with pytest.raises(UsageError, match=r"NVKR_BOOT_ACCEL='fast'.*auto, kvm or tcg"):
        _boot(image)


@needs_tools
@needs_grub
@needs_qemu
@pytest.mark.slow  # boots the real QEMU
def test_real_qemu_hung_under_kvm_is_booted_again_under_tcg(kvm_host, tmp_path, monkeypatch):
    """The real QEMU, stopped before its first instruction when given ``-accel kvm``: the
    console stays silent, the boot test gives KVM up and GRUB prints its line under TCG."""
    wrapper = _use(monkeypatch, hanging_kvm_qemu(tmp_path / "q"))
    image = build_image(tmp_path / "img")
    events: list[BootStart | BootStall] = []
    log = tmp_path / "console.log"
    result = _boot(image, events, accel="auto", expect=LOADING, fail="Kernel panic", log_file=log)
    assert len((wrapper.parent / "kvm-calls").read_text().splitlines()) == 1
    assert result.accel == "tcg" and result.matched.startswith("nvkr: loading /boot/vmlinuz")
    assert [(event_name(e), e.accel) for e in events] == [
        ("boot-start", "kvm"),
        ("boot-stall", "kvm"),
        ("boot-start", "tcg"),
    ]
    assert isinstance(events[1], BootStall) and events[1].after == ""
    assert "console: nvkr: loading /boot/vmlinuz" in log.read_text()


def test_verdicts_go_to_the_runtime_directory_only_when_it_exists(tmp_path, monkeypatch):
    import tempfile

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setattr(kvmhang, "_SEEN", {})
    fallback = temp / f"nvkr-{os.getuid()}"
    for runtime in (str(tmp_path / "run"), "run/user/0", ""):  # missing, relative, empty
        monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)
        assert kvmhang.directory() == fallback
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    assert kvmhang.record("amd64", "silent").path == fallback / "kvm-stall-amd64.json"
    assert not (tmp_path / "run").exists(), "a missing runtime directory is not made"
    (tmp_path / "run").mkdir(mode=0o700)
    assert kvmhang.directory() == tmp_path / "run" / "nvkr"
