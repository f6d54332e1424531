"""What an ELF file needs to start: its machine and its program interpreter.

The go-binary builder records a binary's ``linkage`` from it: ``dynamic`` when the file names
an interpreter (``PT_INTERP``, e.g. ``/lib64/ld-linux-x86-64.so.2``, which loads libc before
``main``), else ``static``; the container-image builder warns when a dynamic one goes on
``scratch``, where there is no interpreter to start it, and, when the binary imports ``dlopen``
(read from its dynamic symbol table), does not tell it to link statically. Read from the ELF header and program
headers (System V ABI, "ELF Header" and "Program Header"), 32- and 64-bit, either byte order.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from nvkr.errors import BuildError

#: e_machine values of the architectures nvkr builds for (the rest are shown as numbers).
MACHINES = {0x3E: "amd64", 0xB7: "arm64", 0x03: "386", 0x28: "arm"}
PT_INTERP = 3
_MAX_INTERP = 4096  # bytes: a path, never more


SHT_DYNSYM = 11
#: The libc functions that load a shared library at run time (glibc: libc.so.6 or libdl).
_LOADERS = frozenset({b"dlopen", b"dlmopen"})
_MAX_DYNSYM = 64 << 20  # bytes of symbols and names read, at most


@dataclass(frozen=True)
class ElfInfo:
    """``machine`` (``amd64``, ``arm64``, or ``em-<number>``), ``interpreter`` (the
    ``PT_INTERP`` path, None for a static binary) and ``loads_libraries`` (the binary imports
    ``dlopen``: it loads shared libraries at run time, e.g. NVIDIA's NVML, which a static binary
    cannot do)."""

    machine: str
    interpreter: str | None
    loads_libraries: bool = False

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
        order, is64, header, phoff, phentsize, phnum = _headers(f, path)
        (machine,) = struct.unpack_from(order + "H", header, 2)
        interpreter = None
        span = _interp_span(f, path, order, is64, phoff, phentsize, phnum)
        if span is not None:
            f.seek(span[0])
            raw = f.read(min(span[1], _MAX_INTERP))
            interpreter = raw.split(b"\0", 1)[0].decode(errors="replace")
        loads = bool(interpreter) and _imports_a_loader(f, header, order, is64)
    return ElfInfo(MACHINES.get(machine, f"em-{machine}"), interpreter or None, loads)


def _headers(f: BinaryIO, path: Path) -> tuple[str, bool, bytes, int, int, int]:
    """(byte order, 64-bit, the header after e_ident, e_phoff, e_phentsize, e_phnum)."""
    ident = f.read(16)
    if len(ident) < 16 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2):
        raise BuildError(f"{path.name} is not an ELF file")
    is64 = ident[4] == 2
    order = "<" if ident[5] == 1 else ">"
    header = f.read(48 if is64 else 36)
    if len(header) < (48 if is64 else 36):
        raise BuildError(f"{path.name}: truncated ELF header")
    if is64:
        (phoff,) = struct.unpack_from(order + "Q", header, 16)
        phentsize, phnum = struct.unpack_from(order + "HH", header, 38)
    else:
        (phoff,) = struct.unpack_from(order + "I", header, 12)
        phentsize, phnum = struct.unpack_from(order + "HH", header, 26)
    return order, is64, header, phoff, phentsize, phnum


def _interp_span(
    f: BinaryIO, path: Path, order: str, is64: bool, phoff: int, phentsize: int, phnum: int
) -> tuple[int, int] | None:
    """(file offset, size) of the ``PT_INTERP`` segment's path, None for a static file."""
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
        return offset, size
    return None


def set_interpreter(path: Path, interpreter: str) -> None:
    """Rewrites the ``PT_INTERP`` path of the dynamic ELF file at ``path`` in place, padded with
    NULs: the new path must fit the old one's segment (the segment does not move).

    Raises:
        BuildError: not a dynamic ELF file, or the new path is longer than the segment.
    """
    with open(path, "r+b") as f:
        order, is64, _, phoff, phentsize, phnum = _headers(f, path)
        span = _interp_span(f, path, order, is64, phoff, phentsize, phnum)
        new = interpreter.encode()
        if span is None:
            raise BuildError(f"{path.name} is static: it has no interpreter to set")
        if len(new) + 1 > span[1]:
            raise BuildError(
                f"{path.name}: interpreter {interpreter!r} is longer than its PT_INTERP "
                f"segment ({span[1] - 1} bytes)"
            )
        f.seek(span[0])
        f.write(new.ljust(span[1], b"\0"))


def _imports_a_loader(f: BinaryIO, header: bytes, order: str, is64: bool) -> bool:
    """Whether the dynamic symbol table (``SHT_DYNSYM``) names ``dlopen`` undefined, i.e.
    imported from libc. A file without section headers, or with ones that point outside it,
    says no."""
    word = order + ("Q" if is64 else "I")
    (shoff,) = struct.unpack_from(word, header, 24 if is64 else 16)
    shentsize, shnum = struct.unpack_from(order + "HH", header, 42 if is64 else 30)
    if not shoff or shentsize < (64 if is64 else 40):
        return False

    def section(i: int) -> tuple[int, int, int, int] | None:
        """(type, offset, size, link) of section ``i``."""
        f.seek(shoff + i * shentsize)
        raw = f.read(shentsize)
        if len(raw) < shentsize:
            return None
        (sh_type,) = struct.unpack_from(order + "I", raw, 4)
        if is64:
            offset, size = struct.unpack_from(order + "QQ", raw, 24)
            (link,) = struct.unpack_from(order + "I", raw, 40)
        else:
            offset, size, link = struct.unpack_from(order + "III", raw, 16)
        return sh_type, offset, size, link

    for i in range(min(shnum, 4096)):
        sec = section(i)
        if sec is None or sec[0] != SHT_DYNSYM:
            continue
        strtab = section(sec[3])
        if strtab is None:
            return False
        f.seek(strtab[1])
        names = f.read(min(strtab[2], _MAX_DYNSYM))
        f.seek(sec[1])
        symbols = f.read(min(sec[2], _MAX_DYNSYM))
        size = 24 if is64 else 16
        for at in range(0, len(symbols) - size + 1, size):
            (name,) = struct.unpack_from(order + "I", symbols, at)
            (shndx,) = struct.unpack_from(order + "H", symbols, at + (6 if is64 else 14))
            end = names.find(b"\0", name)
            if shndx == 0 and names[name : end if end >= 0 else None] in _LOADERS:
                return True
        return False
    return False
