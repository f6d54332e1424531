"""Fake and wrapped QEMUs for the boot-test tests: a hang injected under ``-accel kvm``.

:func:`fake_qemu` writes an executable that takes QEMU's command line as :func:`nvkr.machine.qemu.qemu_argv`
makes it, writes its ``-pidfile``, connects to the console and QMP sockets and plays a scripted
console for the accelerator it was given (``-accel kvm`` or ``-accel tcg``): ``("say", TEXT)``
sends TEXT, ``("sleep", SECONDS)`` waits, ``("exit", STATUS)`` exits. After the script it stays
silent until QMP ``quit`` (or a signal). Every run appends its argv as one JSON line to
``calls.jsonl`` beside it.

:func:`hanging_kvm_qemu` writes a wrapper around the real ``qemu-system-x86_64``: given ``-accel
kvm`` it runs the real QEMU under TCG with ``-S`` (the CPU never starts, so the console stays
silent, as on a host whose nested KVM hangs the guest), otherwise the real QEMU unchanged. It
needs no ``/dev/kvm``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import toolguard

#: seconds without console progress before the boot tests give a KVM guest up (their
#: ``kvm_host`` sets nvkr.machine.boot.KVM_STALL_SECONDS to it): a whole number, as the messages
#: print it; a fake says its firmware's lines at once, so a second is a wide margin
STALL = 1.0

_FAKE = r"""#!{python}
import json, os, signal, socket, sys, threading, time
argv = sys.argv[1:]
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "calls.jsonl"), "a") as f:
    f.write(json.dumps(argv) + "\n")
def opt(name):
    return argv[argv.index(name) + 1]
def socket_path(ident):
    for i, a in enumerate(argv):
        if a == "-chardev" and argv[i + 1].startswith("socket,id=" + ident + ","):
            return argv[i + 1].split("path=", 1)[1].replace(",,", ",")
    raise SystemExit("no chardev " + ident)
with open(opt("-pidfile"), "w") as f:
    f.write(str(os.getpid()))
console = socket.socket(socket.AF_UNIX)
console.connect(socket_path("console"))
qmp = socket.socket(socket.AF_UNIX)
qmp.connect(socket_path("qmp"))
def serve_qmp():
    data = b""
    while True:
        chunk = qmp.recv(4096)
        if not chunk:
            return
        data += chunk
        if b'"quit"' in data or b"system_powerdown" in data:
            os._exit(0)
threading.Thread(target=serve_qmp, daemon=True).start()
SCRIPT = {script}
for kind, value in SCRIPT.get(opt("-accel"), []):
    if kind == "say":
        console.sendall(value.encode())
    elif kind == "sleep":
        time.sleep(value)
    elif kind == "exit":
        sys.stderr.write("fake qemu: exiting with %d\n" % value)
        os._exit(value)
while True:
    time.sleep(1)
"""

_WRAPPER = r"""#!/bin/sh
# -accel kvm: the real QEMU under TCG, stopped before its first instruction (-S): a hung guest.
real=/usr/bin/qemu-system-x86_64
case " $* " in
  *" -accel kvm "*)
    echo "$*" >> "$(dirname "$0")/kvm-calls"
    for a in "$@"; do
      if [ "$a" = kvm ]; then a=tcg; fi
      set -- "$@" "$a"
      shift
    done
    exec "$real" -S "$@" ;;
  *) exec "$real" "$@" ;;
esac
"""


def new_kvm_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A host on which no KVM guest stalled yet: this process's verdicts forgotten, later ones
    kept in a runtime directory under ``tmp_path`` (returned), not the machine's."""
    from nvkr.machine import kvmhang

    runtime = tmp_path / "run-user"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.setattr(kvmhang, "_SEEN", {})
    return runtime / "nvkr"


def fake_qemu(directory: Path, script: dict[str, list[tuple[str, Any]]]) -> Path:
    """An executable fake ``qemu-system-x86_64`` in ``directory`` playing ``script`` (module
    docstring); returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "qemu-system-x86_64"
    path.write_text(_FAKE.format(python=sys.executable, script=repr(script)))
    path.chmod(0o755)
    return path


def calls(fake: Path) -> list[list[str]]:
    """The argv of every run of the fake ``fake``, oldest first."""
    log = fake.parent / "calls.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def accels(fake: Path) -> list[str]:
    """The ``-accel`` value of every run of ``fake``."""
    return [argv[argv.index("-accel") + 1] for argv in calls(fake)]


def hanging_kvm_qemu(directory: Path) -> Path:
    """A wrapper around the real ``qemu-system-x86_64`` whose ``-accel kvm`` hangs (module
    docstring); its KVM runs are listed, one per line, in ``kvm-calls`` beside it. It starts the
    real QEMU, so only a slow test may use it (:func:`tests.helpers.toolguard.require_slow`)."""
    toolguard.require_slow("qemu-system-x86_64")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "qemu-system-x86_64"
    path.write_text(_WRAPPER)
    path.chmod(0o755)
    return path
