"""nvkr.machine.boot against a small image whose GRUB runs for real (SeaBIOS, TCG) and then fails to load
its fake kernel: success, failure line, timeout, QEMU exit, interruption; no QEMU left behind."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from nvkr.errors import BootTestError
from nvkr.machine import boot, qemu
from tests.helpers.disk import (
    KVER,
    LOADING,
    build_image,
    needs_grub,
    needs_qemu,
    needs_tools,
    qemu_running,
)


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    return build_image(tmp_path_factory.mktemp("bootimg"))


def _boot(image: Path, **kw):
    args = {"accel": "tcg", "timeout": 60.0, "grace": 0.0, "fail": r"Kernel panic", **kw}
    return boot.boot_test(image, **args)


def test_qemu_argv_is_a_throwaway_serial_boot(tmp_path):
    argv = qemu.qemu_argv(
        tmp_path / "a,b.qcow2", arch="amd64", accel="tcg", firmware="bios", memory_mib=512,
        smp=1, console=tmp_path / "c.sock", qmp=tmp_path / "q.sock", pidfile=tmp_path / "pid",
        network=False,
    )  # fmt: skip
    assert argv[0] == "qemu-system-x86_64"
    for flag in ("-snapshot", "-no-reboot", "-nodefaults"):
        assert flag in argv
    assert f"file={tmp_path}/a,,b.qcow2,if=virtio,format=qcow2" in argv
    assert argv[argv.index("-accel") + 1] == "tcg" and "-bios" not in argv
    assert argv[argv.index("-nic") + 1] == "none"


def test_an_emulated_arm64_cpu_uses_the_cheap_pointer_authentication(tmp_path):
    """Under TCG the arm64 guest gets ``max`` with pauth-impdef (the kernel's PAC instructions
    cost far less to emulate); under KVM the host's own CPU."""
    kw = dict(
        arch="arm64", firmware="bios", memory_mib=512, smp=1, console=tmp_path / "c.sock",
        qmp=tmp_path / "q.sock", pidfile=tmp_path / "pid", network=False,
    )  # fmt: skip
    tcg = qemu.qemu_argv(tmp_path / "a.qcow2", accel="tcg", **kw)
    assert tcg[0] == "qemu-system-aarch64"
    assert tcg[tcg.index("-cpu") + 1] == "max,pauth-impdef=on"
    kvm = qemu.qemu_argv(tmp_path / "a.qcow2", accel="kvm", **kw)
    assert kvm[kvm.index("-cpu") + 1] == "host"


def test_kvm_is_only_probed_for_amd64():
    assert qemu.kvm_works("arm64") is False


def test_missing_image_and_bad_arch(tmp_path):
    with pytest.raises(BootTestError, match="no image to boot"):
        boot.boot_test(tmp_path / "none.qcow2")
    with pytest.raises(BootTestError, match="amd64 or arm64"):
        boot.boot_test(tmp_path / "none.qcow2", arch="s390x")


def test_missing_qemu_or_firmware_names_the_package(tmp_path, monkeypatch):
    img = tmp_path / "x.qcow2"
    img.write_bytes(b"")
    monkeypatch.setitem(qemu.QEMU, "arm64", ("qemu-system-nonexistent", "qemu-system-arm"))
    with pytest.raises(BootTestError, match="qemu-system-nonexistent is not installed") as e:
        boot.boot_test(img, arch="arm64")
    assert "qemu-system-arm" in (e.value.hint or "")
    monkeypatch.setitem(qemu.QEMU, "arm64", ("sh", "qemu-system-arm"))
    monkeypatch.setattr(qemu, "AAVMF", (str(tmp_path / "none.fd"),))
    with pytest.raises(BootTestError, match="no UEFI firmware for arm64") as e:
        boot.boot_test(img, arch="arm64", accel="tcg")
    assert "qemu-efi-aarch64" in (e.value.hint or "")
    with pytest.raises(BootTestError, match="UEFI only"):
        boot.boot_test(img, arch="arm64", firmware="bios")


@needs_tools
@needs_grub
@needs_qemu
@pytest.mark.slow  # boots the real QEMU
def test_grub_boots_from_the_disk_with_seabios(image, tmp_path):
    log = tmp_path / "boot.log"
    start = time.monotonic()
    # GRUB ignores the ACPI power button: the quiet console cuts the 30 s grace short.
    result = _boot(image, expect=LOADING, log_file=log, grace=30.0)
    assert time.monotonic() - start - result.seconds < 10
    assert result.matched == f"nvkr: loading /boot/vmlinuz-{KVER}"
    assert result.accel == "tcg" and result.firmware == "bios"
    assert any("Booting `nvkr node (6.1.0-test-amd64)'" in line for line in result.lines)
    assert result.lines[-1] == result.matched and 0 < result.seconds < 60
    text = log.read_text()
    assert "$ qemu-system-x86_64" in text and f"console: {result.matched}" in text
    assert qemu_running(image) == []


@needs_tools
@needs_grub
@needs_qemu
@pytest.mark.slow  # boots the real QEMU
@pytest.mark.skipif(not Path(qemu.OVMF[0]).is_file(), reason="ovmf missing")
def test_grub_boots_from_the_esp_with_ovmf(image):
    result = _boot(image, expect=LOADING, firmware="efi")
    assert result.firmware == "efi" and result.matched.startswith("nvkr: loading")
    assert qemu_running(image) == []


@needs_tools
@needs_grub
@needs_qemu
@pytest.mark.slow  # boots the real QEMU
def test_a_fail_line_ends_the_test(image):
    with pytest.raises(
        BootTestError, match=r"failed after \d+ s: console printed 'nvkr: loading"
    ) as e:
        _boot(image, expect="never printed", fail="nvkr: loading")
    assert "last console lines:\n" in e.value.message and "Booting `nvkr node" in e.value.message
    assert qemu_running(image) == []


@needs_tools
@needs_grub
@needs_qemu
@pytest.mark.slow  # boots the real QEMU
def test_timeout(image):
    with pytest.raises(BootTestError, match="timed out after 1 s without a line matching 'never'"):
        _boot(image, expect="never", fail="", timeout=1.0)
    assert qemu_running(image) == []


@needs_qemu
@pytest.mark.slow  # boots the real QEMU
def test_qemu_exiting_is_reported(tmp_path):
    bad = tmp_path / "not-a.qcow2"
    bad.write_bytes(b"garbage" * 100)
    log = tmp_path / "qemu.log"
    with pytest.raises(BootTestError, match=r"QEMU exited after .* before the amd64 image") as e:
        _boot(bad, expect="x", log_file=log)
    assert "qemu-system-x86_64 exited with 1" in e.value.message
    assert e.value.hint == f"full console in {log}"


@needs_tools
@needs_grub
@needs_qemu
@pytest.mark.slow  # boots the real QEMU
def test_interrupt_leaves_no_qemu(image, monkeypatch):
    real = boot._lines

    def interrupted(*args, **kwargs):
        for item in real(*args, **kwargs):
            yield item
            raise KeyboardInterrupt

    monkeypatch.setattr(boot, "_lines", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _boot(image, expect="never")
    assert qemu_running(image) == []


@needs_tools
@needs_grub
@needs_qemu
@pytest.mark.slow  # boots the real QEMU
def test_qemu_is_killed_even_when_stopping_fails(image, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
        yield  # a generator, like the real one

    def broken_stop(self, **kwargs):
        raise RuntimeError("stop failed")

    monkeypatch.setattr(boot, "_lines", interrupted)
    monkeypatch.setattr(qemu.QemuProcess, "stop", broken_stop)
    with pytest.raises(RuntimeError, match="stop failed"):
        _boot(image, expect="never")
    assert qemu_running(image) == []


def test_a_line_written_in_two_pieces_is_matched_whole(tmp_path, monkeypatch):
    """journald writes the readiness line to the console in pieces: the match waits for the
    rest of the line instead of returning the first piece."""
    import socket as socket_mod

    a, b = socket_mod.socketpair()

    class AliveQemu:
        def alive(self) -> bool:
            return True

    def feed() -> None:
        a.sendall(b"boot...\n[ 8.8] node-agent[222]: nvkr-node-agent: ready")
        time.sleep(0.3)
        a.sendall(b" gpus=0 product=none generation=none\nmore\n")

    import threading

    t = threading.Thread(target=feed)
    t.start()
    lines: list[str] = []
    verdict, line = boot._watch(
        b, AliveQemu(), expect=re.compile(r"nvkr-node-agent: ready"), fail=None,  # type: ignore[arg-type]
        deadline=time.monotonic() + 5, lines=lines, log=None,
    )  # fmt: skip
    t.join()
    a.close()
    b.close()
    assert verdict == "ok" and line.endswith("generation=none"), line
    # a prompt without a newline still counts once it has settled
    a, b = socket_mod.socketpair()
    a.sendall(b"gpu-node login: ")
    verdict, line = boot._watch(
        b, AliveQemu(), expect=re.compile(r"login:"), fail=None,  # type: ignore[arg-type]
        deadline=time.monotonic() + 5, lines=[], log=None,
    )  # fmt: skip
    a.close()
    b.close()
    assert (verdict, line) == ("ok", "gpu-node login:")
