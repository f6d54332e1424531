"""swtpm as the TPM 2.0 of a boot test: one fresh TPM per QEMU run, gone afterwards.

:func:`running_swtpm` starts ``swtpm socket --tpm2`` with its state in a directory of the
boot's own (a new, empty TPM: no endorsement certificates, nothing persisted from an earlier
boot) and its control channel on a Unix socket QEMU connects to (``-chardev socket`` +
``-tpmdev emulator``, :func:`nvkr.machine.qemu.qemu_argv`'s ``tpm_socket``). swtpm runs through
:func:`nvkr.run.run` in a thread, like QEMU (so it dies with nvkr and a stop request reaches
it); it ends by itself when QEMU closes the socket, and is sent SIGTERM, then SIGKILL, when the
context ends while it still runs (QEMU never connected, or the boot failed). The caller removes
the state directory (it is in the boot's temp dir).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from nvkr.errors import BootTestError
from nvkr.run import FIXED_PATH, pinned_env, run

SWTPM: Final = "swtpm"
#: Seconds swtpm gets to create its socket, and to end after SIGTERM.
START_SECONDS: Final = 10.0


def swtpm_argv(state: Path, socket_path: Path, pidfile: Path) -> list[str]:
    """swtpm's command line: a TPM 2.0 with its state in ``state``, controlled over
    ``socket_path`` (QEMU's ``-tpmdev emulator``), its pid written to ``pidfile``."""
    return [
        SWTPM, "socket", "--tpm2", "--tpmstate", f"dir={state}",
        "--ctrl", f"type=unixio,path={socket_path}", "--pid", f"file={pidfile}",
    ]  # fmt: skip


@contextlib.contextmanager
def running_swtpm(directory: Path, *, log_file: Path | None, limit: float) -> Iterator[Path]:
    """A running swtpm whose state is in ``directory/tpm``; yields the socket QEMU connects
    to. ``limit``: seconds after which it is stopped in any case (the boot's timeout and more).

    Raises:
        BootTestError: swtpm is not installed, or did not create its socket in time.
    """
    if shutil.which(SWTPM, path=FIXED_PATH) is None:
        raise BootTestError("swtpm is not installed", hint="install Debian package swtpm")
    state, sock, pidfile = directory / "tpm", directory / "swtpm.sock", directory / "swtpm.pid"
    state.mkdir(mode=0o700)
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            run(swtpm_argv(state, sock, pidfile), env=pinned_env(), log_file=log_file,
                timeout=limit, check=False)  # fmt: skip
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    thread = threading.Thread(target=serve, name="nvkr-swtpm", daemon=True)
    thread.start()
    try:
        until = time.monotonic() + START_SECONDS
        while not sock.exists() and thread.is_alive() and time.monotonic() < until:
            time.sleep(0.02)
        if not sock.exists():
            why = f": {errors[0]}" if errors else ""
            raise BootTestError(
                f"swtpm did not start (no socket {sock} within {START_SECONDS:.0f} s){why}",
                hint=f"its messages are in {log_file}" if log_file else None,
            )
        yield sock
    finally:
        _stop(thread, pidfile)


def _stop(thread: threading.Thread, pidfile: Path) -> None:
    """SIGTERM, then SIGKILL, to swtpm when its thread still runs; wait for the thread."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not thread.is_alive():
            return
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pidfile.read_text().strip()), sig)
        thread.join(START_SECONDS / 2)
