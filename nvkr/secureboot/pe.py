"""PE images (PE32 and PE32+) as UEFI firmware loads them: layout, Authenticode digest, checksum
and the attribute certificate table where their signatures are.

The layout (Microsoft's "PE Format"): the MS-DOS header starts with ``MZ`` and holds at 0x3c
``e_lfanew``, the offset of the signature ``PE\\0\\0``; the COFF file header follows (20 bytes:
Machine, NumberOfSections, TimeDateStamp, PointerToSymbolTable, NumberOfSymbols,
SizeOfOptionalHeader, Characteristics), then the optional header, whose Magic is 0x10b (PE32) or
0x20b (PE32+). In both, SizeOfHeaders is at the optional header's offset 60 and CheckSum at 64;
NumberOfRvaAndSizes is at 92 (PE32) or 108 (PE32+) and the data directories (VirtualAddress,
Size: 8 bytes each) follow it. The fifth (index 4) is the Certificate Table, whose VirtualAddress
is, unlike the others', a file offset: the attribute certificate table, at the end of the file.
The section table follows the optional header (40 bytes a section; SizeOfRawData at 16,
PointerToRawData at 20).

The Authenticode digest (Microsoft's "Windows Authenticode Portable Executable Signature
Format", *Calculating the PE Image Hash*) hashes the headers up to SizeOfHeaders but the CheckSum
field and the Certificate Table entry, then each section's raw data in PointerToRawData order
(SUM_OF_BYTES_HASHED counting them), then what follows up to the attribute certificate table
(or the end of an unsigned file). Firmware (EDK2's ``HashPeImage``), shim and osslsigncode agree
on it as long as the sections' raw data lie end to end from SizeOfHeaders and the certificate
table ends the file, which :func:`pe_layout` requires: where they do not, each tool hashes other
bytes (the spec's remainder starts at offset SUM_OF_BYTES_HASHED, osslsigncode's after the
Certificate Table entry, straight to the table), so such an image is refused rather than given a
digest that one of them would not find. This digest is what a signature signs and what firmware
and shim extend TPM PCR 4 with for each image they load.

The attribute certificate table is a list of ``WIN_CERTIFICATE`` entries (dwLength, wRevision,
wCertificateType, then dwLength - 8 bytes), each starting on an 8-byte boundary
(:func:`win_certificates`). osslsigncode signs by padding the unsigned file with zeros to 8
bytes, appending one entry (its dwLength counting the padding of its DER to 8 bytes) and setting
the Certificate Table entry and CheckSum (:func:`pe_checksum`); :func:`attach_table` does the same
with a table taken from a signed image.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Final

from nvkr.errors import IntegrityError

MAGIC_PE32: Final = 0x10B
MAGIC_PE32_PLUS: Final = 0x20B
#: the Certificate Table's index among the data directories
CERTIFICATE_TABLE: Final = 4
WIN_CERT_REVISION_2_0: Final = 0x0200
WIN_CERT_TYPE_PKCS_SIGNED_DATA: Final = 0x0002
#: the digests an Authenticode signature may name (hashlib's names)
DIGESTS: Final = ("sha1", "sha256", "sha384", "sha512")

_COFF = struct.Struct("<HHIIIHH")
_SECTION = struct.Struct("<8sIIII16x")  # Name, VirtualSize, VirtualAddress, SizeOfRawData, Ptr
_WIN_CERTIFICATE = struct.Struct("<IHH")


@dataclass(frozen=True)
class PeLayout:
    """Where the parts of a PE image are that its digest and signatures concern (file offsets).

    ``sections`` are the (PointerToRawData, SizeOfRawData) of the sections with raw data, in
    PointerToRawData order, end to end from ``size_of_headers`` to ``sections_end``;
    ``cert_table`` is the attribute certificate table's (offset, size), (0, 0) when unsigned.
    """

    pe32_plus: bool
    checksum_offset: int
    cert_entry_offset: int
    size_of_headers: int
    sections: tuple[tuple[int, int], ...]
    sections_end: int
    cert_table: tuple[int, int]

    @property
    def signed(self) -> bool:
        return self.cert_table[1] > 0


def _u16(data: bytes, offset: int) -> int:
    return int.from_bytes(data[offset : offset + 2], "little")


def _u32(data: bytes, offset: int) -> int:
    return int.from_bytes(data[offset : offset + 4], "little")


def _sections(
    data: bytes, table: int, count: int, headers: int, what: str
) -> tuple[tuple[tuple[int, int], ...], int]:
    """The (PointerToRawData, SizeOfRawData) of the ``count`` sections in the table at ``table``
    that have raw data, in PointerToRawData order and checked end to end from ``headers``, and
    where the last ends."""
    raw = []
    for i in range(count):
        name, _, _, raw_size, raw_ptr = _SECTION.unpack_from(data, table + i * _SECTION.size)
        if raw_size:
            raw.append((raw_ptr, raw_size, name.rstrip(b"\0").decode("latin-1") or f"#{i}"))
    raw.sort()
    end = headers
    for ptr, raw_size, name in raw:
        if ptr != end:
            kind = "overlaps what precedes it" if ptr < end else f"leaves a gap from {end:#x}"
            raise IntegrityError(
                f"{what}: section {name} (raw data at {ptr:#x}) {kind}: its Authenticode digest "
                "would differ between the spec, firmware and osslsigncode"
            )
        end = ptr + raw_size
    if end > len(data):
        raise IntegrityError(f"{what}: the sections' raw data end at {end:#x}, past the file end")
    return tuple((ptr, raw_size) for ptr, raw_size, _ in raw), end


def pe_layout(data: bytes, what: str = "PE image") -> PeLayout:
    """The layout of ``data``, checked strictly.

    Raises:
        IntegrityError: not a PE32/PE32+ image (no ``MZ``, no ``PE\\0\\0``, another optional
            header magic), fewer than 5 data directories, headers, sections or the certificate
            table past the end of the file, sections that overlap or leave gaps, or a
            certificate table that does not end the file or starts inside the sections.
    """
    size = len(data)
    if size < 0x40 or data[:2] != b"MZ":
        raise IntegrityError(f"{what} is not a PE image: no MS-DOS header ('MZ')")
    pe = _u32(data, 0x3C)
    if pe + 4 + _COFF.size > size or data[pe : pe + 4] != b"PE\0\0":
        raise IntegrityError(f"{what} is not a PE image: no 'PE\\0\\0' signature at {pe:#x}")
    coff = pe + 4
    _, n_sections, _, _, _, opt_size, _ = _COFF.unpack_from(data, coff)
    opt = coff + _COFF.size
    if opt + opt_size > size:
        raise IntegrityError(f"{what}: the optional header ({opt_size} bytes) passes the file end")
    magic = _u16(data, opt) if opt_size >= 2 else None
    if magic not in (MAGIC_PE32, MAGIC_PE32_PLUS):
        found = "none" if magic is None else f"{magic:#x}"
        raise IntegrityError(
            f"{what}: the optional header's magic is {found}, not 0x10b (PE32) or 0x20b (PE32+)"
        )
    plus = magic == MAGIC_PE32_PLUS
    dirs = opt + (112 if plus else 96)
    if dirs > opt + opt_size:
        raise IntegrityError(f"{what}: the optional header ({opt_size} bytes) is truncated")
    n_dirs = _u32(data, dirs - 4)
    if n_dirs <= CERTIFICATE_TABLE:
        raise IntegrityError(
            f"{what}: NumberOfRvaAndSizes is {n_dirs}: no Certificate Table data directory"
        )
    if dirs + 8 * n_dirs > opt + opt_size:
        raise IntegrityError(
            f"{what}: {n_dirs} data directories do not fit the optional header ({opt_size} bytes)"
        )
    headers = _u32(data, opt + 60)
    table = opt + opt_size
    if table + n_sections * _SECTION.size > headers or headers > size:
        raise IntegrityError(
            f"{what}: SizeOfHeaders ({headers:#x}) does not hold the section table "
            f"({n_sections} sections from {table:#x}) or passes the file end ({size:#x})"
        )
    raw, end = _sections(data, table, n_sections, headers, what)
    entry = dirs + 8 * CERTIFICATE_TABLE
    cert_off, cert_size = _u32(data, entry), _u32(data, entry + 4)
    misplaced = cert_off < end or cert_off + cert_size != size or cert_off % 8
    if (cert_size or cert_off) and (not cert_size or misplaced):
        raise IntegrityError(
            f"{what}: the Certificate Table entry ({cert_size} bytes at {cert_off:#x}) is not "
            f"an 8-byte aligned table after the sections (end {end:#x}) that ends the file "
            f"({size:#x} bytes)"
        )
    return PeLayout(
        pe32_plus=plus,
        checksum_offset=opt + 64,
        cert_entry_offset=entry,
        size_of_headers=headers,
        sections=raw,
        sections_end=end,
        cert_table=(cert_off, cert_size),
    )


def authenticode_digest(data: bytes, algorithm: str = "sha256", what: str = "PE image") -> bytes:
    """The Authenticode digest of the PE image ``data`` by ``algorithm`` (a name of
    :data:`DIGESTS`): what its signatures sign and firmware measures into PCR 4.

    It is the same for the image signed and unsigned (when the unsigned file's length is a
    multiple of 8, as signing pads it so).

    Raises:
        IntegrityError: ``data`` is not a PE image :func:`pe_layout` accepts, or ``algorithm``
            is not one Authenticode uses.
    """
    if algorithm not in DIGESTS:
        raise IntegrityError(f"{what}: {algorithm} is not an Authenticode digest algorithm")
    layout = pe_layout(data, what)
    view = memoryview(data)
    h = hashlib.new(algorithm)
    h.update(view[: layout.checksum_offset])
    h.update(view[layout.checksum_offset + 4 : layout.cert_entry_offset])
    h.update(view[layout.cert_entry_offset + 8 : layout.size_of_headers])
    for ptr, raw_size in layout.sections:
        h.update(view[ptr : ptr + raw_size])
    tail_end = layout.cert_table[0] if layout.signed else len(data)
    h.update(view[layout.sections_end : tail_end])
    return h.digest()


@dataclass(frozen=True)
class PeSection:
    """One entry of a PE image's section table: its ``name`` (a long name ``/N`` resolved through
    the COFF string table, as GNU ld writes them into EFI binaries), ``virtual_size`` (the bytes
    the loader maps), ``raw_size`` and ``raw_pointer`` (the bytes in the file)."""

    name: str
    virtual_size: int
    raw_size: int
    raw_pointer: int

    def content(self, data: bytes) -> bytes:
        """The section's bytes as loaded: ``virtual_size`` bytes, the raw data zero-filled past
        ``raw_size`` (what systemd-stub measures and hands on)."""
        raw = data[self.raw_pointer : self.raw_pointer + min(self.raw_size, self.virtual_size)]
        return raw + bytes(self.virtual_size - len(raw))


def _section_name(data: bytes, raw: bytes, coff: int) -> str:
    name = raw.rstrip(b"\0").decode("latin-1")
    if not name.startswith("/") or not name[1:].isdigit():
        return name
    symbols, n_symbols = struct.unpack_from("<II", data, coff + 8)
    start = symbols + 18 * n_symbols + int(name[1:])
    end = data.find(b"\0", start)
    if not symbols or start >= len(data) or end < 0:
        return name
    return data[start:end].decode("latin-1")


def pe_sections(data: bytes, what: str = "PE image") -> list[PeSection]:
    """The section table of the PE image ``data`` (checked by :func:`pe_layout`), in table order.

    Raises:
        IntegrityError: ``data`` is not a PE image :func:`pe_layout` accepts, or a section's
            raw data passes the end of the file.
    """
    pe_layout(data, what)
    coff = _u32(data, 0x3C) + 4
    _, count, _, _, _, opt_size, _ = _COFF.unpack_from(data, coff)
    table = coff + _COFF.size + opt_size
    found = []
    for i in range(count):
        raw_name, vsize, _, raw_size, raw_ptr = _SECTION.unpack_from(
            data, table + i * _SECTION.size
        )
        if raw_ptr + raw_size > len(data):
            raise IntegrityError(f"{what}: section #{i} passes the end of the file")
        found.append(PeSection(_section_name(data, raw_name, coff), vsize, raw_size, raw_ptr))
    return found


def pe_checksum(data: bytes, what: str = "PE image") -> int:
    """The PE CheckSum of ``data`` as osslsigncode (and Windows' ``CheckSumMappedFile``) computes
    it: the 16-bit little-endian words of the file, its CheckSum field taken as zero, added with
    end-around carry, plus the file's length.

    The carries folded back make the sum the words' total modulo 0xFFFF (0xFFFF for a nonzero
    multiple of it); as 2**16 is 1 modulo 0xFFFF, that total is the whole file read as one
    little-endian integer, modulo 0xFFFF, which Python computes at memory speed. An odd last byte
    counts as a word's low byte.
    """
    off = pe_layout(data, what).checksum_offset
    words = b"".join((data[:off], b"\0\0\0\0", data[off + 4 :], b"\0" * (len(data) % 2)))
    n = int.from_bytes(words, "little")
    folded = n % 0xFFFF or (0xFFFF if n else 0)
    return (folded + len(data)) & 0xFFFFFFFF


@dataclass(frozen=True)
class WinCertificate:
    """One entry of the attribute certificate table: its file offset, wRevision,
    wCertificateType and bCertificate (dwLength - 8 bytes, the padding to 8 bytes included when
    dwLength counts it)."""

    offset: int
    revision: int
    type: int
    content: bytes


def win_certificates(data: bytes, what: str = "PE image") -> list[WinCertificate]:
    """The entries of the attribute certificate table of ``data`` (none when unsigned).

    Raises:
        IntegrityError: an entry shorter than its header or passing the table's end.
    """
    layout = pe_layout(data, what)
    start, size = layout.cert_table
    end, pos, entries = start + size, start, []
    while pos < end:
        if pos + _WIN_CERTIFICATE.size > end:
            raise IntegrityError(f"{what}: a WIN_CERTIFICATE header at {pos:#x} passes the table")
        length, revision, cert_type = _WIN_CERTIFICATE.unpack_from(data, pos)
        if length < _WIN_CERTIFICATE.size or pos + length > end:
            raise IntegrityError(
                f"{what}: the WIN_CERTIFICATE at {pos:#x} claims {length} bytes, "
                f"the table has {end - pos} from there"
            )
        entries.append(
            WinCertificate(
                pos, revision, cert_type, data[pos + _WIN_CERTIFICATE.size : pos + length]
            )
        )
        pos += (length + 7) // 8 * 8
    return entries


def attach_table(unsigned: bytes, table: bytes, what: str = "PE image") -> bytes:
    """``unsigned`` with the attribute certificate table ``table`` attached as osslsigncode
    attaches its signature: the file padded with zeros to 8 bytes, ``table`` appended, the
    Certificate Table entry pointing at it and the CheckSum recomputed.

    Raises:
        IntegrityError: ``unsigned`` is not a PE image, already has a certificate table, or
            ``table`` is empty or not a multiple of 8 bytes.
    """
    layout = pe_layout(unsigned, what)
    if layout.signed:
        raise IntegrityError(f"{what} already has an attribute certificate table")
    if not table or len(table) % 8:
        raise IntegrityError(
            f"{what}: an attribute certificate table of {len(table)} bytes (not a multiple of 8)"
        )
    offset = (len(unsigned) + 7) // 8 * 8
    out = bytearray(unsigned)
    out += b"\0" * (offset - len(unsigned))
    out += table
    struct.pack_into("<II", out, layout.cert_entry_offset, offset, len(table))
    struct.pack_into("<I", out, layout.checksum_offset, pe_checksum(bytes(out), what))
    return bytes(out)
