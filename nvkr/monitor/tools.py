"""Progress read from the output of the long tools builders run, line by line
(:func:`nvkr.run.run`'s ``on_line``), turned into
:meth:`~nvkr.builders.api.ActionContext.progress` reports.

- mmdebstrap (the rootfs builder) prints no progress off a terminal, only its ``I:`` phase lines
  (``I: extracting archives...``); :func:`mmdebstrap_lines` counts them against
  :data:`MMDEBSTRAP_PHASES`, so a CI log says which of the steps a twenty-minute foreign-arch
  root filesystem is in.
- ``qemu-img convert -p`` rewrites ``    (42.00/100%)`` with carriage returns;
  :func:`qemu_img_lines` reports the percentage and keeps those lines out of the build log.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

#: mmdebstrap 1.3's ``I:`` lines that start a phase, in order (hooks and notes in between are
#: not counted)
MMDEBSTRAP_PHASES: Final = (
    "running apt-get update",
    "downloading packages",
    "extracting archives",
    "installing essential packages",
    "installing remaining packages",
    "running special hook",
    "cleaning package lists",
    "creating tarball",
    "done",
)

#: ``(done, total, unit, what)`` as :meth:`nvkr.builders.api.ActionContext.progress` takes it
Report = Callable[[float, float | None, str, str], None]

_QEMU_PROGRESS = re.compile(r"^\s*\((\d+(?:\.\d+)?)/100%\)\s*$")


def mmdebstrap_lines(report: Report) -> Callable[[str], bool]:
    """An ``on_line`` for mmdebstrap: each phase line reports ``k/9 steps``; every line is
    logged."""

    def on_line(line: str) -> bool:
        if line.startswith("I: "):
            text = line[3:].rstrip(". ")
            for k, phase in enumerate(MMDEBSTRAP_PHASES, 1):
                if text.startswith(phase):
                    report(k, len(MMDEBSTRAP_PHASES), "steps", text)
                    break
        return False

    return on_line


def qemu_img_lines(report: Report, what: str = "qemu-img convert") -> Callable[[str], bool]:
    """An ``on_line`` for ``qemu-img convert -p``: its percentage, the meter left out of the
    log."""

    def on_line(line: str) -> bool:
        m = _QEMU_PROGRESS.match(line)
        if m is None:
            return False
        report(float(m[1]), 100, "percent", what)
        return True

    return on_line
