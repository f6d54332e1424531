"""The one subprocess gateway: every external tool nvkr runs goes through :func:`run`.

It logs the exact argv and the environment the tool gets at debug level (``--debug``; secret
values masked, see :func:`env_for_log`), passes a pinned environment (``TZ=UTC``,
``LC_ALL=C.UTF-8``, a fixed ``PATH``, ``HOME`` pointing into the work dir, ``umask 022``) plus
what the caller adds, captures output to a log file when asked, and turns a failed tool into one
readable :class:`~nvkr.errors.ToolError` (exit 127 becomes "tool X not found").

Tools die with nvkr and stop when it stops. Each runs in a process group of its own with stdin
from ``/dev/null`` (so a Ctrl-C or a CI's signal to nvkr's group reaches nvkr alone, which then
stops every tool the same way), and with ``PR_SET_PDEATHSIG`` = SIGKILL: the kernel kills it when
the thread that started it ends, and that thread waits in :func:`run` for as long as the tool
runs, so in effect when nvkr ends, SIGKILL included. :func:`stop_tools` (Ctrl-C, SIGTERM) sends
SIGTERM to each running tool's group, gives them :data:`STOP_GRACE` seconds to clean up, then
SIGKILLs what is left; once a stop is requested (:func:`request_stop`) no new tool starts but
clean-up ones. A SIGKILLed tool cleans nothing up, so tools that mount run in namespaces of their
own (:func:`isolated`), whose mounts the kernel drops when their last process ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import platform
import re
import shlex
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Final

from nvkr.errors import Interrupted, ToolError
from nvkr.redact import redact_text

log = logging.getLogger("nvkr.run")

FIXED_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

#: seconds a stopped tool gets to clean up before SIGKILL (mmdebstrap unmounts its chroot and
#: removes it in about 1.5 s; a CI's grace before its own SIGKILL is usually 10 s or more)
STOP_GRACE: Final = 8.0

_PR_SET_PDEATHSIG: Final = 1  # <linux/prctl.h>
_prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up once, not in the forked child
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def pinned_env(
    extra: Mapping[str, str] | None = None, *, home: Path | None = None
) -> dict[str, str]:
    """The environment every tool gets: nothing inherited but what reproducibility allows.

    Proxy variables are passed through (they choose a route, never the bytes fetched).
    """
    env = {
        "PATH": FIXED_PATH,
        "TZ": "UTC",
        "LC_ALL": "C.UTF-8",
        "LANG": "C.UTF-8",
        "HOME": str(home) if home else "/nonexistent",
    }
    for k in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"):
        if k in os.environ:
            env[k] = os.environ[k]
    if extra:
        env.update(extra)
    return env


#: names of variables whose value is a credential, never logged: NVKR_KEY_PASSPHRASE,
#: NVKR_REGISTRY_PASSWORD, GITHUB_TOKEN, AWS_SECRET_ACCESS_KEY, SPIRE_JOIN_TOKEN...
_SECRET_NAME: Final = re.compile(
    r"PASS|TOKEN|SECRET|CREDENTIAL|AUTH|COOKIE|PRIVATE|(^|_)KEY($|_)|APIKEY", re.IGNORECASE
)
MASK: Final = "***"


#: Debian's name for the machine's architecture (``platform.machine()``)
MACHINE_ARCH: Final = {"x86_64": "amd64", "aarch64": "arm64"}


def host_arch() -> str | None:
    """This host's Debian architecture (``amd64``, ``arm64``), None for another machine."""
    return MACHINE_ARCH.get(platform.machine())


#: what makes :func:`can_run` true for a foreign architecture
CAN_RUN_HINT: Final = (
    "apt-get install qemu-user-static binfmt-support arch-test; mount binfmt_misc "
    "(mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc) and "
    "`update-binfmts --enable qemu-aarch64`, as ./install.sh does (Debian 13: qemu-user-binfmt, "
    "registered by systemd-binfmt)"
)


def can_run(arch: str) -> tuple[bool, str]:
    """Whether this host runs ``arch`` binaries: natively, or through qemu-user's binfmt_misc
    entry (``arch-test``, Debian package arch-test); with what arch-test said when it cannot."""
    if host_arch() == arch:
        return True, ""
    try:
        proc = run(["arch-test", arch], check=False)
    except ToolError as e:  # arch-test itself is missing
        return False, str(e)
    return proc.returncode == 0, proc.stdout.decode(errors="replace").strip()


def env_for_log(env: Mapping[str, str]) -> list[str]:
    """``env`` as ``KEY=VALUE`` lines sorted by name, for the debug log: the value of a variable
    whose name looks like a credential's (:data:`_SECRET_NAME`) is :data:`MASK`, and the user
    info of every URL in the others is stripped (:func:`nvkr.redact.redact_text`)."""
    return [
        f"{k}={MASK if _SECRET_NAME.search(k) else redact_text(v)}" for k, v in sorted(env.items())
    ]


def isolated(argv: Sequence[str]) -> list[str]:
    """``argv`` run in a mount namespace and a PID namespace of its own (when nvkr is root).

    What the tool mounts (mmdebstrap's proc, sys and dev in its chroot) is private to it: never
    seen in nvkr's namespace, and dropped by the kernel with the namespace, when its last process
    ends. util-linux ``unshare --fork`` starts the tool as the PID namespace's init, and
    ``--kill-child`` SIGKILLs it when unshare ends (which gets SIGKILL when nvkr ends); the
    kernel then kills every process of the namespace, so no child of the tool runs on either.
    SIGTERM to the tool's process group still reaches the tool and its children (unshare itself
    waits), so a stopped tool cleans up as it would outside.

    Not root: ``argv`` unchanged (mmdebstrap's unshare mode makes namespaces of its own; other
    tools that mount need root).
    """
    if os.geteuid() != 0:
        return list(argv)
    return [
        "unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child",
        "--", *argv,
    ]  # fmt: skip


def _child_setup(parent: int) -> Callable[[], None]:
    """The forked child's set-up before exec: umask 022 and death with ``parent``'s thread."""

    def setup() -> None:
        os.umask(0o022)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # nvkr died before the prctl: end as it would have made us
            os._exit(128 + signal.SIGKILL)

    return setup


def tail(text: str, lines: int = 20) -> str:
    """The last ``lines`` lines of ``text``."""
    return "\n".join(text.rstrip().splitlines()[-lines:])


# -- running tools and stopping them ------------------------------------------------------------
class _Tools:
    """The tools running now and the first stop request (a signal number), under one lock."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.running: set[subprocess.Popen[bytes]] = set()
        self.stop_signal: int | None = None


_tools = _Tools()


def request_stop(signum: int) -> bool:
    """Record a stop (``signum``: SIGINT or SIGTERM); from now on :func:`run` starts no tool but
    clean-up ones. Returns True for the first request, False when one was made before."""
    with _tools.changed:
        first = _tools.stop_signal is None
        if first:
            _tools.stop_signal = signum
        return first


def stop_requested() -> int | None:
    """The signal number of the first stop request, or None."""
    return _tools.stop_signal


def resume() -> None:
    """Forget a stop request (a library caller goes on after :class:`Interrupted`)."""
    with _tools.changed:
        _tools.stop_signal = None


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    if proc.returncode is None:  # not reaped yet: its pid still names its group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)


def stop_tools(grace: float | None = None) -> None:
    """Stop every running tool: SIGTERM to its process group, SIGKILL to the groups of those
    still running after ``grace`` seconds (default :data:`STOP_GRACE`, read now: a test
    shortens it). Returns once each has ended (its :func:`run` call reaps it). Records a stop
    request (SIGINT) when none was made."""
    grace = STOP_GRACE if grace is None else grace
    request_stop(signal.SIGINT)
    with _tools.changed:
        procs = list(_tools.running)
    for proc in procs:
        _signal_group(proc, signal.SIGTERM)
    with _tools.changed:
        _tools.changed.wait_for(lambda: not (_tools.running & set(procs)), timeout=grace)
        left = list(_tools.running)
    for proc in left:
        _signal_group(proc, signal.SIGKILL)


def kill_tools() -> None:
    """SIGKILL every running tool's process group now (a second Ctrl-C: no more grace)."""
    with _tools.changed:
        procs = list(_tools.running)
    for proc in procs:
        _signal_group(proc, signal.SIGKILL)


def _end(proc: subprocess.Popen[bytes], grace: float | None = None) -> None:
    """Stop one tool (its group) as :func:`stop_tools` does, and reap it."""
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE if grace is None else grace)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)
        proc.wait()


def _pump(proc: subprocess.Popen[bytes], sink: IO[bytes], on_line: Callable[[str], bool]) -> None:
    """Copy ``proc``'s output to ``sink`` line by line (``\n`` or ``\r`` ends one), calling
    ``on_line`` for each; a line it returns True for is not logged. An exception of
    ``on_line`` (a display's bug) never stops the copying."""
    assert proc.stdout is not None
    pending = b""
    while chunk := os.read(proc.stdout.fileno(), 65536):
        pending += chunk
        *lines, pending = pending.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        for raw in lines:
            skip = False
            with contextlib.suppress(Exception):
                skip = bool(on_line(raw.decode(errors="replace")))
            if not skip:
                sink.write(raw + b"\n")
        sink.flush()
    if pending:
        sink.write(pending)
        sink.flush()


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    log_file: Path | None = None,
    check: bool = True,
    input: bytes | None = None,
    timeout: float | None = None,
    isolate: bool = False,
    cleanup: bool = False,
    on_line: Callable[[str], bool] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` with a pinned environment and wait for it.

    Args:
        argv: the command; ``argv[0]`` is looked up on the fixed PATH unless it is a path.
        env: the complete environment (use :func:`pinned_env`); defaults to ``pinned_env()``.
        log_file: when given, stdout and stderr are appended to it (and ``.stdout`` is empty);
            otherwise both are captured in the result.
        timeout: seconds before the tool is stopped (SIGTERM, then SIGKILL).
        isolate: run it in namespaces of its own (:func:`isolated`): for tools that mount.
        cleanup: a clean-up step (``umount``, ``losetup --detach``): it runs after a stop too.
        on_line: with ``log_file``: called with each line of output as it comes (a line ends at
            a newline or a carriage return, as a tool's progress meter writes); a line it
            returns True for is left out of the log (a meter's hundred updates). A tool's
            progress is read this way (:func:`_pump`).
    Returns:
        the completed process (stdout/stderr as bytes when captured).
    Raises:
        ToolError: the tool is not installed (exit 127 or ENOENT), ``cwd`` does not exist, the
            timeout passed, or it exited non-zero with ``check``; the message holds the command
            and the tail of its output.
        Interrupted: a stop was requested before the tool started or while it ran (and it did
            not succeed).
        KeyboardInterrupt: raised in this thread while the tool ran; the tool is stopped first.
    """
    args = [os.fspath(a) for a in argv]
    real = isolated(args) if isolate else args
    env = dict(env) if env is not None else pinned_env()
    if log.isEnabledFor(logging.DEBUG):
        lines = "".join(f"\n  {line}" for line in env_for_log(env))
        log.debug("run: %s (cwd=%s), environment:%s", shlex.join(real), cwd, lines)
    with contextlib.ExitStack() as stack:
        out: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        if log_file is not None:
            lf: IO[bytes] = stack.enter_context(open(log_file, "ab"))
            lf.write(f"$ {shlex.join(args)}\n".encode())
            lf.flush()
            out = {"stdout": lf, "stderr": subprocess.STDOUT}
            if on_line is not None:
                out = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
        with _tools.changed:  # a stop request and a start never cross
            if _tools.stop_signal is not None and not cleanup:
                raise Interrupted(f"stopping: {Path(args[0]).name} not started")
            try:
                proc = subprocess.Popen(
                    real,
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                    process_group=0,
                    preexec_fn=_child_setup(os.getpid()),
                    **out,
                )
            except FileNotFoundError as e:
                if cwd is not None and not Path(cwd).is_dir():
                    raise ToolError(
                        f"{shlex.join(args)}: working directory {cwd} does not exist"
                    ) from e
                raise ToolError(
                    f"tool {real[0]!r} not found", hint="run the README's install command"
                ) from e
            _tools.running.add(proc)
        pump = None
        if on_line is not None and log_file is not None:
            pump = threading.Thread(
                target=_pump, args=(proc, lf, on_line), name="nvkr-tool-output", daemon=True
            )
            pump.start()
        try:
            if pump is not None:
                proc.wait(timeout=timeout)
                pump.join()
                stdout, stderr = b"", b""
            else:
                stdout, stderr = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            _end(proc)
            raise ToolError(f"{shlex.join(args)} timed out after {timeout} s") from e
        except BaseException:  # KeyboardInterrupt, or a SIGTERM turned into one: stop it too
            _end(proc)
            raise
        finally:
            with _tools.changed:
                _tools.running.discard(proc)
                _tools.changed.notify_all()
    if proc.returncode != 0 and stop_requested() is not None and not cleanup:
        raise Interrupted(f"stopping: {Path(args[0]).name} ended with {proc.returncode}")
    if proc.returncode == 127:
        raise ToolError(
            f"tool {args[0]!r} not found (exit 127)", hint="run the README's install command"
        )
    if check and proc.returncode != 0:
        if log_file is not None:
            output = log_file.read_text(errors="replace")
        else:
            output = (stdout or b"").decode(errors="replace") + (stderr or b"").decode(
                errors="replace"
            )
        raise ToolError(
            f"{Path(args[0]).name} exited with {proc.returncode}: {shlex.join(args)}\n{tail(output)}"
        )
    return subprocess.CompletedProcess(real, proc.returncode, stdout or b"", stderr or b"")
