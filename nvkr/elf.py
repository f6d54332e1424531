"""What an ELF file needs to start: its machine and its program interpreter.

The go-binary builder records a binary's ``linkage`` from it: ``dynamic`` when the file names
an interpreter (``PT_INTERP``, e.g. ``/lib64/ld-linux-x86-64.so.2``, which loads libc before
``main``), else ``static``; the container-image builder warns when a dynamic one goes on
``scratch``, where there is no interpreter to start it. Read from the ELF header and program
headers (System V ABI, "ELF Header" and "Program Header"), 32- and 64-bit, either byte order.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from nvkr.errors import BuildError

#: e_machine values of the architectures nvkr builds for (the rest are shown as numbers).
MACHINES = {0x3E: "amd64", 0xB7: "arm64", 0x03: "386", 0x28: "arm"}
PT_INTERP = 3
_MAX_INTERP = 4096  # bytes: a path, never more


@dataclass(frozen=True)
class ElfInfo:
    """``machine`` (``amd64``, ``arm64``, or ``em-<number>``) and ``interpreter`` (the
    ``PT_INTERP`` path, None for a static binary)."""

    machine: str
    interpreter: str | None

    @property
    def linkage(self) -> str:
        """``dynamic`` (started by an ELF interpreter and libc) or ``static``."""
        return "dynamic" if self.interpreter else "static"


def read_elf(path: Path) -> ElfInfo:
    """The machine and interpreter of the ELF file at ``path``.

    Raises:
        BuildError: not an ELF file, or its headers point outside the file.
    """
    with open(path, "rb") as f:
        ident = f.read(16)
        if len(ident) < 16 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2):
            raise BuildError(f"{path.name} is not an ELF file")
        is64 = ident[4] == 2
        order = "<" if ident[5] == 1 else ">"
        header = f.read(48 if is64 else 36)
        if len(header) < (48 if is64 else 36):
            raise BuildError(f"{path.name}: truncated ELF header")
        (machine,) = struct.unpack_from(order + "H", header, 2)
        if is64:
            (phoff,) = struct.unpack_from(order + "Q", header, 16)
            phentsize, phnum = struct.unpack_from(order + "HH", header, 38)
        else:
            (phoff,) = struct.unpack_from(order + "I", header, 12)
            phentsize, phnum = struct.unpack_from(order + "HH", header, 26)
        interpreter = None
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            entry = f.read(phentsize)
            if len(entry) < (56 if is64 else 32):
                raise BuildError(f"{path.name}: program header {i} lies outside the file")
            (p_type,) = struct.unpack_from(order + "I", entry, 0)
            if p_type != PT_INTERP:
                continue
            word = order + ("Q" if is64 else "I")
            (offset,) = struct.unpack_from(word, entry, 8 if is64 else 4)
            (size,) = struct.unpack_from(word, entry, 32 if is64 else 16)
            f.seek(offset)
            raw = f.read(min(size, _MAX_INTERP))
            interpreter = raw.split(b"\0", 1)[0].decode(errors="replace")
            break
    return ElfInfo(MACHINES.get(machine, f"em-{machine}"), interpreter or None)
