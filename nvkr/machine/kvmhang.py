"""KVM's verdict on this host: once a KVM guest made no progress, boot tests skip KVM until reboot.

Nested KVM that hangs a guest (see :mod:`nvkr.machine.boot`) does so for every guest until the
host's kernel changes: a stall seen by one nvkr process holds for the next. So the verdict is kept
per host boot, not per process: a file per architecture (``kvm-stall-<arch>.json``: the host's
``boot_id``, when, what the console showed) in the user's runtime directory
(``$XDG_RUNTIME_DIR/nvkr`` when that directory exists, else ``<temp dir>/nvkr-<uid>``, made mode
0700). It holds while ``/proc/sys/kernel/random/boot_id`` is the one it names: a rebooted host (a
new kernel, other KVM module parameters) or another machine sharing the directory tries KVM
again. Deleting the file does so at once; ``--accel kvm`` ignores it.

Other verdicts on this host's KVM are kept the same way by name (:func:`note`, :func:`keep`):
``kvm-smm-amd64.json``, whether KVM can run the SMM that OVMF's Secure Boot build needs
(:func:`nvkr.machine.secureboot.kvm_smm_problem`).

The verdict only ever costs speed (TCG where KVM might have worked), so it is read leniently: a
file that cannot be read or parsed, or a directory that is not the user's own (a symlink, another
owner: ``/tmp`` is shared), counts as no verdict, and one that cannot be written leaves the
verdict in this process alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

BOOT_ID: Final = Path("/proc/sys/kernel/random/boot_id")
#: How :meth:`Hang.why` starts: a boot's ``fallback`` that begins so skipped KVM for a verdict.
SKIPPED: Final = "KVM stalled a guest on this host"


@dataclass(frozen=True)
class Hang:
    """A KVM guest of ``arch`` made no progress on this host since it booted.

    Attributes:
        reason: what the stalled console showed (``no console output for 30 s under kvm ...``).
        at: when, as UTC ``YYYY-MM-DDTHH:MM:SSZ``.
        path: the file that keeps it for later processes (None: this process alone).
    """

    reason: str
    at: str
    path: Path | None

    def why(self) -> str:
        """Why a boot skips KVM: ``KVM stalled a guest on this host at ... (...)``."""
        where = f"; delete {self.path} to try KVM again" if self.path is not None else ""
        return f"{SKIPPED} at {self.at} ({self.reason}){where}"


#: Verdicts of this process, by architecture: those it saw (kept or not), or read.
_SEEN: dict[str, Hang] = {}


def directory() -> Path:
    """Where verdicts are kept: ``$XDG_RUNTIME_DIR/nvkr`` (when that directory exists), else
    ``<temp dir>/nvkr-<uid>``."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime) and os.path.isdir(runtime):
        return Path(runtime) / "nvkr"
    return Path(tempfile.gettempdir()) / f"nvkr-{os.getuid()}"


def _boot_id() -> str | None:
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def _own_directory(path: Path, *, make: bool) -> bool:
    """Whether ``path`` is a real directory of this user that no one else can write (made so
    when ``make`` and missing)."""
    if make:
        with contextlib.suppress(OSError):
            path.mkdir(mode=0o700, exist_ok=True)
    try:
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def _file(name: str) -> Path:
    return directory() / f"{name}.json"


def note(name: str) -> dict[str, Any] | None:
    """What an nvkr process kept as ``name`` since this host booted (:func:`keep`), or None
    (nothing kept, from another boot, or unreadable)."""
    boot_id, path = _boot_id(), _file(name)
    if boot_id is None or not _own_directory(path.parent, make=False):
        return None
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("bootId") != boot_id:
        return None
    return doc


def keep(name: str, doc: dict[str, Any]) -> Path | None:
    """Keep ``doc`` as ``name`` for later processes while this host runs (the verdict
    directory, :func:`directory`); the file, or None when it cannot be written."""
    boot_id, path = _boot_id(), _file(name)
    if boot_id is None or not _own_directory(path.parent, make=True):
        return None
    return _write(path, json.dumps({"bootId": boot_id, **doc}) + "\n")


def hang(arch: str) -> Hang | None:
    """The verdict on KVM for ``arch`` guests: seen by this process, or kept by an earlier
    one since this host booted; None: KVM may be tried."""
    if arch in _SEEN:
        return _SEEN[arch]
    doc = note(f"kvm-stall-{arch}")
    if doc is None:
        return None
    reason, at = doc.get("reason"), doc.get("at")
    if not isinstance(reason, str) or not isinstance(at, str):
        return None
    _SEEN[arch] = found = Hang(reason, at, _file(f"kvm-stall-{arch}"))
    return found


def record(arch: str, reason: str) -> Hang:
    """Keep the verdict that KVM hangs ``arch`` guests on this host (in this process, and in
    the runtime directory for later ones while the host runs)."""
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    kept = keep(f"kvm-stall-{arch}", {"arch": arch, "at": at, "reason": reason})
    _SEEN[arch] = found = Hang(reason, at, kept)
    return found


def _write(path: Path, text: str) -> Path | None:
    """``text`` as ``path``, whole or not at all (:func:`nvkr.atomic.write_atomic`); None if it
    failed."""
    from nvkr.atomic import write_atomic

    try:
        write_atomic(path, text.encode())
    except OSError:
        return None
    return path


def forget() -> None:
    """Forget this process's verdicts (the files stay): for tests that start from a new host."""
    _SEEN.clear()
