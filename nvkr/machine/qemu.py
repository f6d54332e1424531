"""QEMU for boot tests: the command line, the KVM probe, and the QEMU process with its sockets.

:mod:`nvkr.machine.boot` decides what to boot how and reads the console; this module starts QEMU as it
asks. nvkr listens on two Unix sockets (:func:`listen`) and QEMU connects to them as a client:
the serial console and QMP. :class:`QemuProcess` runs QEMU through :func:`nvkr.run.run` (in a
thread, since it blocks until QEMU exits) with the pinned environment, and stops it: ACPI
power-down with a grace period, QMP ``quit``, then SIGKILL to its pid.

:func:`kvm_works` probes KVM with a 512-byte boot sector that exits QEMU through
``isa-debug-exit``: ``/dev/kvm`` being there is not enough (nested or broken KVM accepts ioctls
and then hangs).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from nvkr.errors import BootTestError, ToolError
from nvkr.run import FIXED_PATH, pinned_env, run

KVM_PROBE_SECONDS: Final = 3.0  # seconds for the boot sector under KVM (working KVM: well under 1)
#: Seconds of console silence after a power-down request that mean the guest ignores it.
POWERDOWN_IDLE: Final = 1.5

#: Architecture -> (QEMU binary, the Debian package that has it).
QEMU = {
    "amd64": ("qemu-system-x86_64", "qemu-system-x86"),
    "arm64": ("qemu-system-aarch64", "qemu-system-arm"),
}
OVMF = ("/usr/share/ovmf/OVMF.fd", "/usr/share/qemu/OVMF.fd")
AAVMF = ("/usr/share/qemu-efi-aarch64/QEMU_EFI.fd", "/usr/share/AAVMF/AAVMF_CODE.fd")
#: Architecture -> the Secure Boot firmware's code (Debian's ovmf, qemu-efi-aarch64): OVMF's
#: needs SMM (``-machine q35,smm=on`` and the secure pflash); AAVMF's ``.ms`` build has none.
SECURE_BOOT_CODE = {
    "amd64": "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd",
    "arm64": "/usr/share/AAVMF/AAVMF_CODE.ms.fd",
}


def _host_arch() -> str:
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)


@functools.cache
def kvm_works(arch: str = "amd64") -> bool:
    """Whether KVM runs a guest for ``arch`` on this host (cached per process).

    Only amd64 is probed (a boot sector under SeaBIOS); elsewhere KVM is used only when asked.
    """
    if arch != "amd64" or _host_arch() != "amd64":
        return False
    if (
        not os.access("/dev/kvm", os.R_OK | os.W_OK)
        or shutil.which(QEMU[arch][0], path=FIXED_PATH) is None
    ):
        return False
    # mov al, 1; out 0xf4, al; hlt -> isa-debug-exit ends QEMU with status (1 << 1) | 1 = 3.
    sector = bytes([0xB0, 0x01, 0xE6, 0xF4, 0xF4]).ljust(510, b"\0") + b"\x55\xaa"
    with tempfile.TemporaryDirectory(prefix="nvkr-kvm-") as d:
        img = Path(d) / "probe.img"
        img.write_bytes(sector)
        argv = [
            QEMU[arch][0], "-accel", "kvm", "-machine", "pc", "-nodefaults", "-display", "none",
            "-no-reboot", "-m", "32", "-device", "isa-debug-exit,iobase=0xf4,iosize=0x04",
            "-drive", f"file={_drive_path(img)},format=raw,if=ide,snapshot=on",
        ]  # fmt: skip
        try:
            proc = run(argv, env=pinned_env(), check=False, timeout=KVM_PROBE_SECONDS)
        except ToolError:
            return False
    return proc.returncode == 3


def _drive_path(path: Path) -> str:
    """A file name for QEMU's option syntax (a comma is written as two)."""
    return str(path).replace(",", ",,")


def _firmware(arch: str, firmware: str, uefi_vars: Path | None = None) -> list[str]:
    if firmware == "bios":
        return []
    if firmware == "secure-boot":
        if uefi_vars is None:
            raise BootTestError("a Secure Boot boot needs its variable store")
        code = Path(SECURE_BOOT_CODE[arch])
        if not code.is_file():
            package = "ovmf" if arch == "amd64" else "qemu-efi-aarch64"
            raise BootTestError(f"no Secure Boot firmware for {arch} at {code}",
                                hint=f"install Debian package {package}")  # fmt: skip
        return [
            "-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={_drive_path(code)}",
            "-drive", f"if=pflash,format=raw,unit=1,file={_drive_path(uefi_vars)}",
        ]  # fmt: skip
    candidates, package = (OVMF, "ovmf") if arch == "amd64" else (AAVMF, "qemu-efi-aarch64")
    for path in candidates:
        if Path(path).is_file():
            if path.endswith("_CODE.fd"):
                return [
                    "-drive",
                    f"if=pflash,format=raw,readonly=on,file={_drive_path(Path(path))}",
                ]
            return ["-bios", path]
    raise BootTestError(
        f"no UEFI firmware for {arch} (looked for {', '.join(candidates)})",
        hint=f"install Debian package {package}",
    )


#: The emulated arm64 CPU: QEMU's ``max`` with pointer authentication's IMPLEMENTATION DEFINED
#: algorithm instead of the architected QARMA5 one. Debian's arm64 kernel signs and checks return
#: addresses in every function (PAC), and QARMA5 is costly to emulate: the default recipe's
#: hopper/arm64 image reached the agent's readiness line in 203 s with it, against
#: 410 s with plain ``max``, booted side by side on the same host. The guest sees the same
#: features; only the (opaque) signature values differ.
TCG_ARM64_CPU = "max,pauth-impdef=on"


def qemu_argv(
    image: Path,
    *,
    arch: str,
    accel: str,
    firmware: str,
    memory_mib: int,
    smp: int,
    console: Path,
    qmp: Path,
    pidfile: Path,
    network: bool,
    drives: Sequence[Path] = (),
    snapshot: bool = True,
    uefi_vars: Path | None = None,
    tpm_socket: Path | None = None,
) -> list[str]:
    """The QEMU command line for a boot test (console and QMP as clients of nvkr's sockets).

    ``drives``: raw images attached read-only after the image (virtio, so ``/dev/vdb``...: a
    NoCloud seed); ``snapshot``: False writes the guest's changes into ``image`` (a QCOW2
    overlay the caller made), True (``-snapshot``) throws them away. ``firmware``
    ``"secure-boot"``: :data:`SECURE_BOOT_CODE` with ``uefi_vars`` (a copy the firmware may
    write) as its variable store; on amd64 the q35 machine with SMM and the pflash only SMM
    code may write (what makes OVMF's Secure Boot variables tamper-proof to the guest's OS).
    ``tpm_socket``: swtpm's control socket (:mod:`nvkr.machine.swtpm`), offered as a TIS TPM
    (``tpm-tis`` on amd64, ``tpm-tis-device`` on arm64's virt machine)."""
    binary = QEMU[arch][0]
    if arch == "amd64" and firmware == "secure-boot":
        machine = ["-machine", "q35,smm=on",
                   "-global", "driver=cfi.pflash01,property=secure,value=on"]  # fmt: skip
    elif arch == "amd64":
        machine = ["-machine", "pc"]
    else:
        machine = ["-machine", "virt", "-cpu", TCG_ARM64_CPU if accel == "tcg" else "host"]
    tpm = []
    if tpm_socket is not None:
        tpm = [
            "-chardev", f"socket,id=tpm,path={_drive_path(tpm_socket)}",
            "-tpmdev", "emulator,id=tpm0,chardev=tpm",
            "-device", ("tpm-tis" if arch == "amd64" else "tpm-tis-device") + ",tpmdev=tpm0",
        ]  # fmt: skip
    return [
        binary, *machine, "-accel", accel, "-m", str(memory_mib), "-smp", str(smp),
        *_firmware(arch, firmware, uefi_vars),
        "-nodefaults", "-display", "none", "-no-user-config", "-no-reboot",
        *(["-snapshot"] if snapshot else []),
        "-pidfile", str(pidfile),
        "-drive", f"file={_drive_path(image)},if=virtio,format=qcow2",
        *[arg for d in drives
          for arg in ("-drive", f"file={_drive_path(d)},if=virtio,format=raw,readonly=on")],
        *tpm,
        "-chardev", f"socket,id=console,path={_drive_path(console)}",
        "-serial", "chardev:console",
        "-chardev", f"socket,id=qmp,path={_drive_path(qmp)}",
        "-mon", "chardev=qmp,mode=control",
        *(["-nic", "user,model=virtio-net-pci"] if network else ["-nic", "none"]),
    ]  # fmt: skip


class QemuProcess:
    """A QEMU process run by :func:`nvkr.run.run` in a thread, and how to end it."""

    def __init__(self, argv: list[str], *, pidfile: Path, log_file: Path | None, limit: float):
        self.pidfile = pidfile
        self.error: list[BaseException] = []
        self.pid: int | None = None
        self.qmp: socket.socket | None = None
        self.thread = threading.Thread(
            target=self._run, args=(argv, log_file, limit), name="nvkr-qemu", daemon=True
        )

    def _run(self, argv: list[str], log_file: Path | None, limit: float) -> None:
        try:
            run(argv, env=pinned_env(), log_file=log_file, timeout=limit)
        except BaseException as e:  # the main thread reports it
            self.error.append(e)

    def alive(self) -> bool:
        return self.thread.is_alive()

    def find_pid(self) -> int | None:
        """QEMU's pid: from the console connection, else from its ``-pidfile``."""
        if self.pid is None:
            with contextlib.suppress(OSError, ValueError):
                self.pid = int(self.pidfile.read_text().strip())
        return self.pid

    def _qmp(self, command: str) -> None:
        assert self.qmp is not None
        with contextlib.suppress(OSError):
            self.qmp.settimeout(2.0)
            self.qmp.sendall(b'{"execute": "qmp_capabilities"}\n')
            self.qmp.sendall(b'{"execute": "%s"}\n' % command.encode())

    def _await_powerdown(self, grace: float, console: socket.socket | None) -> None:
        """Wait up to ``grace`` seconds for QEMU to exit after a power-down request, giving up
        early when the console stays quiet for :data:`POWERDOWN_IDLE` seconds: a guest without
        an ACPI power-button handler (no logind, no acpid) never reacts."""
        until = time.monotonic() + grace
        idle_since = time.monotonic()
        while self.alive() and time.monotonic() < until:
            if console is None:
                self.thread.join(min(0.25, max(0.0, until - time.monotonic())))
                continue
            try:
                console.settimeout(0.25)
                if console.recv(65536):
                    idle_since = time.monotonic()
                else:
                    console = None  # EOF: QEMU is going away
            except TimeoutError:
                if time.monotonic() - idle_since > POWERDOWN_IDLE:
                    return
            except OSError:
                console = None

    def kill(self) -> None:
        """SIGKILL QEMU if it is still running, and wait for its thread."""
        if self.alive() and (pid := self.find_pid()) is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self.thread.join(5.0)

    def stop(self, *, grace: float, console: socket.socket | None = None) -> None:
        """Power down (up to ``grace`` seconds, see :meth:`_await_powerdown`), then QMP quit,
        then SIGKILL; wait for the thread."""
        if grace > 0 and self.alive() and self.qmp is not None:
            self._qmp("system_powerdown")
            self._await_powerdown(grace, console)
        for command, wait in (("quit", 3.0), (None, 5.0)):
            if not self.alive():
                break
            if command is not None:
                if self.qmp is None:
                    continue
                self._qmp(command)
            else:
                # Before it connected, QEMU may not have written its pid file yet: wait for it.
                until = time.monotonic() + wait
                while self.alive() and self.find_pid() is None and time.monotonic() < until:
                    time.sleep(0.05)
                if (pid := self.find_pid()) is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            self.thread.join(wait)
        if self.qmp is not None:
            with contextlib.suppress(OSError):
                self.qmp.close()


def listen(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.listen(1)
    s.settimeout(0.2)
    return s


def peer_pid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid: int = struct.unpack("3i", creds)[0]
    return pid


def accept(listener: socket.socket, qemu: QemuProcess, deadline: float) -> socket.socket | None:
    while time.monotonic() < deadline and qemu.alive():
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        return conn
    return None
