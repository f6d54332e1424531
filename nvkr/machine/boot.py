"""Boot tests: start a node image in QEMU and watch its serial console for a line.

The image boots by itself (GRUB from the disk, SeaBIOS or UEFI firmware), on a throw-away overlay
(``-snapshot``: the image file is never written; ``snapshot=False`` boots a QCOW2 overlay the
caller made and reads afterwards), with ``drives`` (a NoCloud seed) attached read-only, started by :mod:`nvkr.machine.qemu` with its serial
console and QMP connected to Unix sockets nvkr listens on in a private temp dir (so not a byte is
lost before nvkr reads). The console is read line by line: the first line matching ``expect``
ends the test with success, a line matching ``fail``, QEMU exiting or the time limit ends it with
:class:`~nvkr.errors.BootTestError`. QEMU is then stopped (ACPI power-down with a short grace
period, QMP ``quit``, then SIGKILL to its pid) on every path, Ctrl-C included; its own messages
go to ``log_file`` with the console lines.

Acceleration (``accel``, default ``$NVKR_BOOT_ACCEL``, else ``auto``): ``tcg`` never uses KVM;
``kvm`` always does; ``auto`` uses KVM when it really runs a guest here. ``/dev/kvm`` being there
is not enough (nested or broken KVM accepts ioctls and then hangs), so a 512-byte boot sector that
exits QEMU through ``isa-debug-exit`` must finish under KVM within
:data:`~nvkr.machine.qemu.KVM_PROBE_SECONDS`. Even that is not enough: nested KVM can run the boot sector
and then hang the guest, before SeaBIOS prints a byte or after GRUB hands over to the Linux
kernel. So a KVM boot **makes no progress** when its console prints no byte for
:data:`KVM_STALL_SECONDS` before the guest's kernel printed its first line (:data:`KERNEL_LINE`;
QEMU not connecting within that time counts as no byte). Under ``auto`` that boot is stopped and
the image booted again under TCG with the whole ``timeout`` (TCG is many times slower than KVM;
the KVM attempt cost at most the firmware's time plus :data:`KVM_STALL_SECONDS`), and KVM is not
tried again on this host until it reboots (:mod:`nvkr.machine.kvmhang`: the verdict outlives the
process, so a CI job of several boots pays the stall once); under ``kvm`` it is a
:class:`~nvkr.errors.BootTestError`. Once the kernel has spoken KVM runs the guest, and only
``timeout`` limits the boot. TCG has no stall limit (a slow guest is not a hung one).

Each attempt is reported through ``event`` (typed events of :mod:`nvkr.monitor.events`:
:class:`~nvkr.monitor.events.BootStart`, :class:`~nvkr.monitor.events.BootStall`; default: the
``nvkr.boot`` logger) and written, whole, to ``log_file``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, TextIO, get_args

from nvkr.errors import BootTestError, NvkrError, UsageError
from nvkr.machine import kvmhang
from nvkr.machine.qemu import QEMU, QemuProcess, accept, kvm_works, listen, peer_pid, qemu_argv
from nvkr.monitor.events import BootStall, BootStart
from nvkr.run import FIXED_PATH

log = logging.getLogger("nvkr.boot")

Accel = Literal["auto", "kvm", "tcg"]
ACCELS: Final[tuple[Accel, ...]] = get_args(Accel)
#: The environment variable that gives ``accel`` when the caller does not (CLI, builder, tests).
ACCEL_ENV: Final = "NVKR_BOOT_ACCEL"
#: Where a boot test reports its attempts: ``event(BootStart(...))``, ``event(BootStall(...))``
#: (see :func:`boot_test`).
BootEvent = Callable[[BootStart | BootStall], None]

#: Seconds without a console byte under KVM, before the guest's kernel printed its first line,
#: that mean KVM hangs the guest: a KVM guest's kernel speaks within a few seconds of its boot
#: loader's last line; nested KVM was seen silent after GRUB's ``loading`` line for 300 s, and
#: silent from the start (no SeaBIOS, no GRUB) for 120 s where TCG printed GRUB's menu in 3 s.
KVM_STALL_SECONDS: Final = 30.0
#: The Linux kernel's console lines: printk's time stamp (Debian's kernels), else its banner.
KERNEL_LINE: Final = re.compile(r"^\[\s*\d+\.\d+\] |\bLinux version \d")
#: Seconds the guest gets to power off after an ACPI power-down request.
POWERDOWN_GRACE: Final = 10.0
#: Where console logs are kept, under the store root (``<store>/logs/boot-test``).
CONSOLE_LOGS: Final = Path("logs") / "boot-test"
LAST_LINES: Final = 40  # console lines a failure message ends with
SHOWN_LINE: Final = 300  # characters a failure message shows of one console line

#: Escape sequences and control characters, removed from console lines: the string sequences
#: (OSC, DCS, SOS, PM, APC: ``ESC ]``, ``ESC P``, ``ESC X``, ``ESC ^``, ``ESC _``, up to BEL or
#: ``ESC \``, such as systemd 257's palette reset ``ESC ] 104 BEL``), CSI, and ESC + one byte
#: (SeaBIOS's terminal reset ``ESC c``).
_ANSI = re.compile(
    r"\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)"
    r"|\x1b(?:\[[0-?]*[ -/]*[@-~]|[@-~])|[\x00-\x08\x0b-\x1f\x7f]"
)


def console_text(raw: bytes) -> str:
    """A console line as text, without escape sequences, control characters and trailing
    blanks."""
    return _ANSI.sub("", raw.decode(errors="replace")).rstrip()


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
        fallback: why ``accel="auto"`` booted under TCG although KVM answered the probe (KVM
            made no progress in this boot, or in an earlier one on this host since it booted:
            :meth:`nvkr.machine.kvmhang.Hang.why`); else empty.
    """

    seconds: float
    matched: str
    lines: list[str]
    accel: str
    firmware: str = "bios"
    followed: str = ""
    fallback: str = ""


#: Seconds an incomplete console line that matches must stay unchanged to count (a prompt has
#: no newline; a log line written in two pieces gets its second piece within this time).
SETTLE = 0.5


def _lines(
    conn: socket.socket, qemu: QemuProcess, deadline: float
) -> Iterator[tuple[str | None, bool]]:
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
            yield console_text(raw), True
        if buf:
            yield console_text(buf), False


def _watch(
    console: socket.socket,
    qemu: QemuProcess,
    *,
    expect: re.Pattern[str],
    fail: re.Pattern[str] | None,
    deadline: float,
    lines: list[str],
    log: TextIO | None,
    stall: float | None = None,
) -> tuple[str, str]:
    """Read console lines into ``lines`` (and ``log``) until one decides the test: returns
    ``("ok" | "fail", line)``, ``("exit" | "timeout", "")``, or with ``stall`` (seconds)
    ``("stall", last text)`` when no byte came for that long before a :data:`KERNEL_LINE`.
    An incomplete last line is kept in ``lines`` and ``log`` too."""
    last_partial = ""
    # an incomplete line that matched, settling: (verdict, text, since)
    pending: tuple[str, str, float] | None = None
    last_byte = time.monotonic()
    last_text = ""
    outcome = ""
    for text, complete in _lines(console, qemu, deadline):
        now = time.monotonic()
        if text is None:  # no output for a while: a settled incomplete match counts
            if pending is not None and now - pending[2] >= SETTLE:
                _keep(pending[1], lines, log)
                return pending[0], pending[1]
            if stall is not None and now - last_byte >= stall:
                outcome = "stall"
                break
            continue
        last_byte = now  # new bytes, if only escape sequences
        if stall is not None and KERNEL_LINE.search(text):
            stall = None  # the kernel runs: KVM works, only the deadline limits the boot now
        last_text = text or last_text
        if not complete and text == last_partial:
            continue
        last_partial = "" if complete else text
        verdict = _verdict(text, expect, fail)
        if verdict and not complete:
            # wait for the rest of the line (or for it to settle: a prompt, shim's box)
            pending = (verdict, text, time.monotonic())
            continue
        pending = None
        if complete or verdict:
            _keep(text, lines, log)
        if verdict:
            return verdict, text
    if pending is not None and outcome != "stall":  # the console ended on a matching line
        _keep(pending[1], lines, log)
        return pending[0], pending[1]
    if last_partial:
        _keep(last_partial, lines, log)
    if outcome == "stall":
        return outcome, last_text
    return ("timeout" if time.monotonic() >= deadline else "exit"), ""


def _keep(text: str, lines: list[str], log: TextIO | None) -> None:
    """A console line kept: in ``lines`` and, when there is one, the console log."""
    lines.append(text)
    if log is not None:
        log.write(f"console: {text}\n")


def _verdict(text: str, expect: re.Pattern[str], fail: re.Pattern[str] | None) -> str:
    """``"fail"`` when ``text`` matches ``fail``, else ``"ok"`` when it matches ``expect``, else
    ``""``."""
    if fail is not None and fail.search(text):
        return "fail"
    if expect.search(text):
        return "ok"
    return ""


def _tail(lines: list[str]) -> str:
    """The console's last lines, as text: a line holding what no terminal shows (control or
    replacement characters: firmware frames, shim's box) is cut to its words, and each line to
    :data:`SHOWN_LINE` characters (the console log keeps every byte)."""
    return "\n".join(_shown(line) for line in lines[-LAST_LINES:])


def _words(line: str) -> str:
    """``line``'s printable words, one blank apart (frame characters, escapes and padding gone)."""
    return " ".join(re.sub(r"[^\x20-\x7e]", " ", line).split())


def _shown(line: str) -> str:
    if re.search(r"[^\x20-\x7e\t]", line):
        line = _words(line)
    if len(line) <= SHOWN_LINE:
        return line
    more = f" ... ({len(line)} characters)"
    return line[: SHOWN_LINE - len(more)] + more


def accel_from_env() -> Accel:
    """``$NVKR_BOOT_ACCEL`` (:data:`ACCEL_ENV`), or ``"auto"`` when it is unset or empty.

    Raises:
        UsageError: it holds anything but ``auto``, ``kvm`` or ``tcg``.
    """
    value = os.environ.get(ACCEL_ENV, "").strip()
    if not value:
        return "auto"
    if value not in ACCELS:
        raise UsageError(
            f"{ACCEL_ENV}={value!r} names no accelerator: expected auto, kvm or tcg",
            hint=f"unset {ACCEL_ENV} for auto (KVM when it runs a guest here, else TCG)",
        )
    return value


def _log_event(event: BootStart | BootStall) -> None:
    """The default ``event``: the ``nvkr.boot`` logger (a stall as a warning)."""
    from nvkr.monitor.lines import boot_line

    (log.warning if isinstance(event, BootStall) else log.info)("%s", boot_line(event))


def new_console_log(directory: Path, name: str) -> Path:
    """A new, empty file for one boot test's console in ``directory`` (made if missing):
    ``<UTC time>-<name>.log``, ``-2``... when taken; ``name`` is cut to safe characters.
    :data:`CONSOLE_LOGS` under the store is where the CLI and the node-image builder keep them.

    Raises:
        UsageError: the directory cannot be made or written.
    """
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:100]
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for n in range(1, 1000):
            path = directory / (f"{stamp}-{safe}.log" if n == 1 else f"{stamp}-{safe}-{n}.log")
            with contextlib.suppress(FileExistsError):
                path.open("x").close()
                return path
    except OSError as e:
        raise UsageError(f"cannot write a console log in {directory}: {e.strerror}") from e
    raise UsageError(f"{directory} holds 999 console logs of {safe!r} from {stamp}")


def _no_progress(after: str, seconds: float) -> str:
    """What a stalled KVM boot showed: ``no console output for 30 s under kvm after '...'``."""
    if not after:
        return f"no console output at all for {seconds:.0f} s under kvm"
    return (
        f"no console output for {seconds:.0f} s under kvm after {after!r}, before any line of "
        "the guest's kernel"
    )


@dataclass
class _Attempt:
    """One QEMU run of a boot test: ``outcome`` is ``ok``, ``fail``, ``exit``, ``timeout``,
    ``stall`` (``matched`` is then the last text) or ``then-<outcome of the then line>``."""

    outcome: str
    matched: str
    followed: str
    lines: list[str]
    seconds: float
    errors: list[BaseException]
    then: str | None = None  # the pattern a ``then-`` outcome waited for


def _attempt(
    image: Path,
    *,
    arch: str,
    accel: str,
    firmware: str,
    memory_mib: int,
    smp: int,
    network: bool,
    timeout: float,
    grace: float,
    expect: re.Pattern[str],
    fail: re.Pattern[str] | None,
    then: str | None,
    then_timeout: float,
    log_file: Path | None,
    stall: float | None,
    header: str,
    drives: Sequence[Path] = (),
    snapshot: bool = True,
    wait_for: Sequence[str] = (),
    uefi_vars: Path | None = None,
    tpm: bool = False,
) -> _Attempt:
    """Run QEMU once under ``accel`` and watch its console (``stall``: see :func:`_watch`; QEMU
    not connecting within it counts too); ``header`` starts this attempt in ``log_file``.
    ``uefi_vars`` is copied for the firmware to write; ``tpm`` runs a fresh swtpm."""
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="nvkr-boot-") as tmp, contextlib.ExitStack() as tpms:
        console_path, qmp_path = Path(tmp) / "console.sock", Path(tmp) / "qmp.sock"
        pidfile = Path(tmp) / "qemu.pid"
        vars_copy = Path(tmp) / "vars.fd" if uefi_vars is not None else None
        if uefi_vars is not None and vars_copy is not None:
            shutil.copyfile(uefi_vars, vars_copy)
        tpm_socket = None
        if tpm:
            from nvkr.machine.swtpm import running_swtpm

            tpm_socket = tpms.enter_context(
                running_swtpm(Path(tmp), log_file=log_file, limit=timeout + grace + 90)
            )
        console_l, qmp_l = listen(console_path), listen(qmp_path)
        argv = qemu_argv(
            image.resolve(), arch=arch, accel=accel, firmware=firmware, memory_mib=memory_mib,
            smp=smp, console=console_path, qmp=qmp_path, pidfile=pidfile, network=network,
            drives=[d.resolve() for d in drives], snapshot=snapshot, uefi_vars=vars_copy,
            tpm_socket=tpm_socket,
        )  # fmt: skip
        qemu = QemuProcess(argv, pidfile=pidfile, log_file=log_file, limit=timeout + grace + 60)
        # line-buffered: the log can be followed while the guest boots
        log = open(log_file, "a", buffering=1, errors="replace") if log_file else None  # noqa: SIM115
        if log is not None:
            log.write(header + "\n")
        start = time.monotonic()
        deadline = start + timeout
        console: socket.socket | None = None
        outcome, matched, followed = "exit", "", ""
        try:
            qemu.thread.start()
            accept_until = deadline if stall is None else min(deadline, start + stall)
            console = accept(console_l, qemu, accept_until)
            if console is not None:
                qemu.pid = peer_pid(console)
                qemu.qmp = accept(qmp_l, qemu, deadline)
                outcome, matched = _watch(
                    console, qemu, expect=expect, fail=fail, deadline=deadline, lines=lines,
                    log=log, stall=stall,
                )  # fmt: skip
                if outcome == "ok" and then is not None:
                    after, followed = _watch(
                        console, qemu, expect=re.compile(then), fail=fail,
                        deadline=time.monotonic() + then_timeout, lines=lines, log=log,
                    )  # fmt: skip
                    if after != "ok":
                        outcome, matched = f"then-{after}", followed or matched
                for pattern in wait_for if outcome == "ok" else ():
                    # a line that may come before or after the others (a probe's report)
                    if any(re.search(pattern, line) for line in lines):
                        continue
                    after, seen = _watch(
                        console, qemu, expect=re.compile(pattern), fail=fail,
                        deadline=time.monotonic() + then_timeout, lines=lines, log=log,
                    )  # fmt: skip
                    if after != "ok":
                        outcome, matched, then = f"then-{after}", seen or matched, pattern
                        break
            elif time.monotonic() >= deadline:
                outcome = "timeout"
            elif qemu.alive():
                outcome = "stall"  # QEMU has not connected to the console within ``stall``
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
    return _Attempt(outcome, matched, followed, lines, seconds, qemu.error, then)


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
    firmware: Literal["auto", "bios", "efi", "secure-boot"] = "auto",
    accel: Accel | None = None,
    network: bool = False,
    grace: float = POWERDOWN_GRACE,
    then: str | None = None,
    then_timeout: float = 60.0,
    event: BootEvent | None = None,
    drives: Sequence[Path] = (),
    snapshot: bool = True,
    wait_for: Sequence[str] = (),
    uefi_vars: Path | None = None,
    tpm: bool = False,
) -> BootResult:
    """Boot ``image`` (QCOW2) in QEMU and wait for a console line matching ``expect``.

    Args:
        arch: ``"amd64"`` (qemu-system-x86_64) or ``"arm64"`` (qemu-system-aarch64, UEFI).
        expect: regular expression (``re.search``) for the line that means "booted".
        fail: regular expression for a line that means "failed"; empty for none.
        timeout: seconds from QEMU's start to the ``expect`` line, per attempt (a TCG retry
            after a KVM stall gets the whole of it again).
        memory_mib, smp: the guest's memory (MiB) and CPUs.
        log_file: every attempt's header line, QEMU's argv and messages, and every console
            line (escape sequences removed, an incomplete last one too) are appended to it.
        firmware: ``"bios"`` (SeaBIOS, amd64 only), ``"efi"`` (OVMF / AAVMF), ``"auto"``: BIOS
            on amd64, UEFI on arm64; ``"secure-boot"``: the Secure Boot firmware with
            ``uefi_vars`` (:mod:`nvkr.machine.secureboot`; on amd64 it needs SMM, which nested
            KVM may lack: ``auto`` then boots under TCG, ``fallback`` says why).
        accel: ``"auto"`` (KVM when :func:`kvm_works`, then TCG if KVM makes no progress),
            ``"kvm"`` (a stall fails) or ``"tcg"``; ``None``: :func:`accel_from_env`.
        network: give the guest a virtio NIC on QEMU's user-mode network (none by default).
        grace: seconds the guest gets to power off after success before QEMU is quit (less
            when its console falls silent: the guest ignores the ACPI power button).
        then: a regular expression for a line that must follow the ``expect`` line (e.g. the
            agent's labels after its readiness line), within ``then_timeout`` seconds.
        drives: raw images attached read-only after the image (a NoCloud seed).
        snapshot: False: the guest writes into ``image`` (a QCOW2 overlay made for the test,
            read after the boot); True: ``-snapshot``, the image is never changed.
        wait_for: regular expressions of lines that must also appear, before or after the
            ``expect`` line, each within ``then_timeout`` seconds of the last one seen.
        uefi_vars: the variable store of ``"secure-boot"`` (each attempt boots a copy).
        tpm: give the guest a TPM 2.0 (a new swtpm per attempt, :mod:`nvkr.machine.swtpm`).
        event: called with a :class:`~nvkr.monitor.events.BootStart` before each attempt
            (``image`` the path, ``timeout`` in seconds, ``log`` ``log_file`` or None,
            ``attempt`` 1 or 2, ``why`` TCG after a stall, else empty) and a
            :class:`~nvkr.monitor.events.BootStall` when KVM made no progress (``seconds`` of
            silence, ``after`` the last console text, ``retry`` ``"tcg"``, or None under
            ``"kvm"``). Default: the ``nvkr.boot`` logger.
    Returns:
        a :class:`BootResult`.
    Raises:
        BootTestError: a ``fail`` line, QEMU exiting, the time limit, or a stall under
            ``"kvm"``; the message says which and ends with the last 40 console lines, the hint
            names ``log_file``. Also: QEMU or the firmware not installed (the hint names the
            Debian package).
        UsageError: ``$NVKR_BOOT_ACCEL`` holds no accelerator (``accel`` None).
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
    mode = accel if accel is not None else accel_from_env()
    emit = event or _log_event
    fallback = ""
    earlier = kvmhang.hang(arch) if mode == "auto" else None
    if earlier is not None:
        acc, fallback = "tcg", earlier.why()
    elif mode == "auto":
        acc = "kvm" if kvm_works(arch) else "tcg"
    else:
        acc = mode
    if fw == "secure-boot" and acc == "kvm":
        from nvkr.machine.secureboot import kvm_smm_problem

        if (smm := kvm_smm_problem(arch)) is not None:
            if mode == "kvm":
                raise BootTestError(smm, hint="--accel tcg (or auto) boots it under TCG")
            acc, fallback = "tcg", smm
    logged = str(log_file) if log_file is not None else None

    def attempt(number: int, why: str) -> _Attempt:
        emit(BootStart(str(image), arch, fw, acc, timeout, logged, number, why))
        header = (
            f"boot-test: attempt {number}: {arch} image {image} under {acc} ({fw}), timeout "
            f"{timeout:.0f} s" + (f" ({why})" if why else "")
        )
        return _attempt(
            image, arch=arch, accel=acc, firmware=fw, memory_mib=memory_mib, smp=smp,
            network=network, timeout=timeout, grace=grace, expect=re.compile(expect),
            fail=re.compile(fail) if fail else None, then=then, then_timeout=then_timeout,
            log_file=log_file, stall=KVM_STALL_SECONDS if acc == "kvm" else None,
            header=header, drives=drives, snapshot=snapshot, wait_for=wait_for,
            uefi_vars=uefi_vars, tpm=tpm,
        )  # fmt: skip

    result = attempt(1, fallback)
    if result.outcome == "stall":
        reason = _no_progress(result.matched, KVM_STALL_SECONDS)
        retry = "tcg" if mode == "auto" else None
        emit(BootStall(str(image), acc, KVM_STALL_SECONDS, result.matched, reason, retry, logged))
        if retry is not None:
            kvmhang.record(arch, reason)
            fallback = f"{reason}; booted again under tcg"
            acc = "tcg"
            result = attempt(2, "KVM made no progress")
    if result.outcome == "ok":
        return BootResult(
            seconds=result.seconds, matched=result.matched, lines=result.lines, accel=acc,
            firmware=fw, followed=result.followed, fallback=fallback,
        )  # fmt: skip
    raise _failure(
        result, what=f"{arch} image {image} ({fw}, {acc})", expect=expect,
        then=result.then or then,
        then_timeout=then_timeout, timeout=timeout, log_file=log_file,
    )  # fmt: skip


def _failure(
    result: _Attempt,
    *,
    what: str,
    expect: str,
    then: str | None,
    then_timeout: float,
    timeout: float,
    log_file: Path | None,
) -> BootTestError:
    """The error for a failed attempt: what ended it, the last console lines, the log."""
    outcome, matched, seconds = result.outcome, result.matched, result.seconds
    advice = ""
    if outcome.startswith("then-"):
        got = "a failure line" if outcome == "then-fail" else "no such line"
        msg = (
            f"boot test of {what}: after {matched!r} the console printed {got} matching "
            f"{then!r} within {then_timeout:.0f} s"
        )
    elif outcome == "fail":
        # shim's box: CP437 frame characters (not text) around words padded with blanks
        shown_line = _words(matched)[:SHOWN_LINE]
        msg = f"boot test of {what} failed after {seconds:.0f} s: console printed {shown_line!r}"
    elif outcome == "timeout":
        msg = f"boot test of {what} timed out after {timeout:.0f} s without a line matching {expect!r}"
    elif outcome == "stall":
        msg = f"boot test of {what} made no progress: {_no_progress(matched, KVM_STALL_SECONDS)}"
        advice = (
            "nested KVM can pass the probe yet hang the guest (before its firmware speaks, or "
            f"after its boot loader): --accel tcg (or {ACCEL_ENV}=tcg) never uses KVM, --accel "
            "auto boots again under TCG"
        )
    else:
        why = ""
        if result.errors:
            err = result.errors[0]
            why = f": {err.message if isinstance(err, NvkrError) else err}"
        msg = f"QEMU exited after {seconds:.0f} s before the {what} printed a line matching {expect!r}{why}"
    hint = "; ".join(
        part for part in (advice, f"full console in {log_file}" if log_file else "") if part
    )
    shown = _tail(result.lines) or "(none)"
    return BootTestError(f"{msg}\nlast console lines:\n{shown}", hint=hint or None)
