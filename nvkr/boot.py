"""Boot tests: start a node image in QEMU and watch its serial console for a line.

The image boots by itself (GRUB from the disk, SeaBIOS or UEFI firmware), on a throw-away overlay
(``-snapshot``: the image file is never written). nvkr listens on two Unix sockets in a private
temp dir and QEMU connects to them as a client: the serial console (so not a byte is lost before
nvkr reads) and QMP (to power the guest down). The console is read line by line: the first line
matching ``expect`` ends the test with success, a line matching ``fail``, QEMU exiting or the time
limit ends it with :class:`~nvkr.errors.BootTestError`. QEMU is then stopped (ACPI power-down with
a short grace period, QMP ``quit``, then SIGKILL to its pid) on every path, Ctrl-C included.

QEMU runs through :func:`nvkr.run.run` (in a thread, since it blocks until QEMU exits), with the
pinned environment; its own messages go to ``log_file`` with the console lines.

Acceleration: TCG unless KVM really runs a guest here: ``/dev/kvm`` being there is not enough
(nested or broken KVM accepts ioctls and then hangs), so a 512-byte boot sector that exits QEMU
through ``isa-debug-exit`` must finish under KVM within :data:`KVM_PROBE_SECONDS`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

from nvkr.errors import BootTestError, NvkrError, ToolError
from nvkr.run import FIXED_PATH, pinned_env, run

KVM_PROBE_SECONDS = 3.0
#: Seconds the guest gets to power off after an ACPI power-down request.
POWERDOWN_GRACE = 10.0
#: Seconds of console silence after a power-down request that mean the guest ignores it.
POWERDOWN_IDLE = 1.5
LAST_LINES = 40

QEMU = {
    "amd64": ("qemu-system-x86_64", "qemu-system-x86"),
    "arm64": ("qemu-system-aarch64", "qemu-system-arm"),
}
OVMF = ("/usr/share/ovmf/OVMF.fd", "/usr/share/qemu/OVMF.fd")
AAVMF = ("/usr/share/qemu-efi-aarch64/QEMU_EFI.fd", "/usr/share/AAVMF/AAVMF_CODE.fd")

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|[@-Z\\-_])|[\x00-\x08\x0b-\x1f\x7f]")


@dataclass(frozen=True)
class BootResult:
    """A successful boot test.

    Attributes:
        seconds: from starting QEMU to the matching console line.
        matched: that line (escape sequences removed).
        lines: every console line up to and including it.
        accel: ``"kvm"`` or ``"tcg"``.
        firmware: ``"bios"`` (SeaBIOS) or ``"efi"`` (OVMF / AAVMF).
        followed: the line matching ``then`` after ``matched`` (empty without ``then``).
    """

    seconds: float
    matched: str
    lines: list[str]
    accel: str
    firmware: str = "bios"
    followed: str = ""


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


def _firmware(arch: str, firmware: str) -> list[str]:
    if firmware == "bios":
        return []
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
) -> list[str]:
    """The QEMU command line for a boot test (console and QMP as clients of nvkr's sockets)."""
    binary = QEMU[arch][0]
    machine = (
        ["-machine", "pc"]
        if arch == "amd64"
        else ["-machine", "virt", "-cpu", "max" if accel == "tcg" else "host"]
    )
    return [
        binary, *machine, "-accel", accel, "-m", str(memory_mib), "-smp", str(smp),
        *_firmware(arch, firmware),
        "-nodefaults", "-display", "none", "-no-user-config", "-no-reboot", "-snapshot",
        "-pidfile", str(pidfile),
        "-drive", f"file={_drive_path(image)},if=virtio,format=qcow2",
        "-chardev", f"socket,id=console,path={_drive_path(console)}",
        "-serial", "chardev:console",
        "-chardev", f"socket,id=qmp,path={_drive_path(qmp)}",
        "-mon", "chardev=qmp,mode=control",
        *(["-nic", "user,model=virtio-net-pci"] if network else ["-nic", "none"]),
    ]  # fmt: skip


class _Qemu:
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


def _listener(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.listen(1)
    s.settimeout(0.2)
    return s


def _peer_pid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid: int = struct.unpack("3i", creds)[0]
    return pid


def _accept(listener: socket.socket, qemu: _Qemu, deadline: float) -> socket.socket | None:
    while time.monotonic() < deadline and qemu.alive():
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        return conn
    return None


#: Seconds an incomplete console line that matches must stay unchanged to count (a prompt has
#: no newline; a log line written in two pieces gets its second piece within this time).
SETTLE = 0.5


def _lines(conn: socket.socket, qemu: _Qemu, deadline: float) -> Iterator[tuple[str | None, bool]]:
    """Console lines as (text, complete); an incomplete tail is yielded too (prompts have no
    newline), and again once it grows; ``(None, False)`` every quarter second without output.
    Ends at EOF, QEMU exit or the deadline."""
    conn.settimeout(0.25)
    buf = b""
    while time.monotonic() < deadline:
        try:
            data = conn.recv(65536)
        except TimeoutError:
            if not qemu.alive():
                return
            yield None, False
            continue
        except OSError:
            return
        if not data:
            return
        buf += data
        *complete, buf = buf.split(b"\n")
        for raw in complete:
            yield _ANSI.sub("", raw.decode(errors="replace")).rstrip(), True
        if buf:
            yield _ANSI.sub("", buf.decode(errors="replace")).rstrip(), False


def _watch(
    console: socket.socket,
    qemu: _Qemu,
    *,
    expect: re.Pattern[str],
    fail: re.Pattern[str] | None,
    deadline: float,
    lines: list[str],
    log: TextIO | None,
) -> tuple[str, str]:
    """Read console lines into ``lines`` (and ``log``) until one decides the test: returns
    ``("ok" | "fail", line)``, or ``("exit" | "timeout", "")``."""
    last_partial = ""
    pending: tuple[str, float] | None = None  # an incomplete line that matched, settling
    for text, complete in _lines(console, qemu, deadline):
        if text is None:  # no output for a while: a settled incomplete match counts
            if pending is not None and time.monotonic() - pending[1] >= SETTLE:
                lines.append(pending[0])
                if log is not None:
                    log.write(f"console: {pending[0]}\n")
                return "ok", pending[0]
            continue
        if not complete and text == last_partial:
            continue
        last_partial = "" if complete else text
        verdict = ""
        if fail is not None and fail.search(text):
            verdict = "fail"
        elif expect.search(text):
            verdict = "ok"
        if verdict == "ok" and not complete:
            # wait for the rest of the line (or for it to settle, a prompt)
            pending = (text, time.monotonic())
            continue
        pending = None
        if complete or verdict:
            lines.append(text)
            if log is not None:
                log.write(f"console: {text}\n")
        if verdict:
            return verdict, text
    return ("timeout" if time.monotonic() >= deadline else "exit"), ""


def _tail(lines: list[str]) -> str:
    return "\n".join(lines[-LAST_LINES:])


def boot_test(
    image: Path,
    *,
    arch: str = "amd64",
    expect: str = r"nvkr-node-agent: ready",
    fail: str = r"nvkr-node-agent: not-ready|Kernel panic",
    timeout: float = 300.0,
    memory_mib: int = 1024,
    smp: int = 2,
    log_file: Path | None = None,
    firmware: Literal["auto", "bios", "efi"] = "auto",
    accel: Literal["auto", "kvm", "tcg"] = "auto",
    network: bool = False,
    grace: float = POWERDOWN_GRACE,
    then: str | None = None,
    then_timeout: float = 60.0,
) -> BootResult:
    """Boot ``image`` (QCOW2) in QEMU and wait for a console line matching ``expect``.

    Args:
        arch: ``"amd64"`` (qemu-system-x86_64) or ``"arm64"`` (qemu-system-aarch64, UEFI).
        expect: regular expression (``re.search``) for the line that means "booted".
        fail: regular expression for a line that means "failed"; empty for none.
        timeout: seconds from QEMU's start to the ``expect`` line.
        memory_mib, smp: the guest's memory (MiB) and CPUs.
        log_file: QEMU's argv and messages, and every console line, are appended to it.
        firmware: ``"bios"`` (SeaBIOS, amd64 only), ``"efi"`` (OVMF / AAVMF), ``"auto"``: BIOS
            on amd64, UEFI on arm64.
        accel: ``"auto"`` (KVM when :func:`kvm_works`, else TCG), ``"kvm"`` or ``"tcg"``.
        network: give the guest a virtio NIC on QEMU's user-mode network (none by default).
        grace: seconds the guest gets to power off after success before QEMU is quit (less
            when its console falls silent: the guest ignores the ACPI power button).
        then: a regular expression for a line that must follow the ``expect`` line (e.g. the
            agent's labels after its readiness line), within ``then_timeout`` seconds.
    Returns:
        a :class:`BootResult`.
    Raises:
        BootTestError: a ``fail`` line, QEMU exiting, or the time limit; the message says which
            and ends with the last 40 console lines. Also: QEMU or the firmware not installed
            (the hint names the Debian package).
    """
    if arch not in QEMU:
        raise BootTestError(f"boot tests run amd64 or arm64 images, not {arch!r}")
    if not image.is_file():
        raise BootTestError(f"no image to boot at {image}")
    binary, package = QEMU[arch]
    if shutil.which(binary, path=FIXED_PATH) is None:
        raise BootTestError(f"{binary} is not installed", hint=f"install Debian package {package}")
    fw = firmware if firmware != "auto" else ("bios" if arch == "amd64" else "efi")
    if fw == "bios" and arch != "amd64":
        raise BootTestError(f"{arch} images boot with UEFI only")
    acc = accel if accel != "auto" else ("kvm" if kvm_works(arch) else "tcg")
    expect_re = re.compile(expect)
    fail_re = re.compile(fail) if fail else None

    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="nvkr-boot-") as tmp:
        console_path, qmp_path = Path(tmp) / "console.sock", Path(tmp) / "qmp.sock"
        pidfile = Path(tmp) / "qemu.pid"
        console_l, qmp_l = _listener(console_path), _listener(qmp_path)
        argv = qemu_argv(
            image.resolve(), arch=arch, accel=acc, firmware=fw, memory_mib=memory_mib, smp=smp,
            console=console_path, qmp=qmp_path, pidfile=pidfile, network=network,
        )  # fmt: skip
        qemu = _Qemu(argv, pidfile=pidfile, log_file=log_file, limit=timeout + grace + 60)
        start = time.monotonic()
        deadline = start + timeout
        log = open(log_file, "a", errors="replace") if log_file is not None else None  # noqa: SIM115
        console: socket.socket | None = None
        outcome, matched, followed = "exit", "", ""
        try:
            qemu.thread.start()
            console = _accept(console_l, qemu, deadline)
            if console is not None:
                qemu.pid = _peer_pid(console)
                qemu.qmp = _accept(qmp_l, qemu, deadline)
                outcome, matched = _watch(
                    console, qemu, expect=expect_re, fail=fail_re, deadline=deadline,
                    lines=lines, log=log,
                )  # fmt: skip
                if outcome == "ok" and then is not None:
                    after, followed = _watch(
                        console, qemu, expect=re.compile(then), fail=fail_re,
                        deadline=time.monotonic() + then_timeout, lines=lines, log=log,
                    )  # fmt: skip
                    if after != "ok":
                        outcome, matched = f"then-{after}", followed or matched
            elif time.monotonic() >= deadline:
                outcome = "timeout"
        finally:
            try:
                qemu.stop(grace=grace if outcome == "ok" else 0.0, console=console)
            finally:
                qemu.kill()  # whatever stop() met on its way, no QEMU outlives the test
            for s in (console, console_l, qmp_l):
                if s is not None:
                    s.close()
            if log is not None:
                log.close()
        seconds = round(time.monotonic() - start, 3)
    if outcome == "ok":
        return BootResult(
            seconds=seconds, matched=matched, lines=lines, accel=acc, firmware=fw, followed=followed
        )
    what = f"{arch} image {image} ({fw}, {acc})"
    if outcome.startswith("then-"):
        got = "a failure line" if outcome == "then-fail" else "no such line"
        msg = (
            f"boot test of {what}: after {matched!r} the console printed {got} matching "
            f"{then!r} within {then_timeout:.0f} s"
        )
    elif outcome == "fail":
        msg = f"boot test of {what} failed after {seconds:.0f} s: console printed {matched!r}"
    elif outcome == "timeout":
        msg = f"boot test of {what} timed out after {timeout:.0f} s without a line matching {expect!r}"
    else:
        why = ""
        if qemu.error:
            err = qemu.error[0]
            why = f": {err.message if isinstance(err, NvkrError) else err}"
        msg = f"QEMU exited after {seconds:.0f} s before the {what} printed a line matching {expect!r}{why}"
    raise BootTestError(
        f"{msg}\nlast console lines:\n{_tail(lines)}",
        hint=f"full console in {log_file}" if log_file is not None else None,
    )
