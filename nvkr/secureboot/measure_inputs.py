"""The inputs of :func:`nvkr.secureboot.measure.predict`, derived from the files a build has: an
EDK2 variable store (OVMF_VARS/AAVMF_VARS with the Microsoft keys and the owner's MOK), shim,
the signed UKI, and the head of the node image's disk (its GPT).

The variable store is read directly (EDK2's ``VariableFormat.h``): a firmware volume header
(``_FVH`` at offset 40, HeaderLength at 48), the authenticated variable store header (GUID,
Size, Format, State: 28 bytes), then variables, each 4-byte aligned: StartId 0x55AA, State,
Attributes, MonotonicCount, TimeStamp, PubKeyIndex, NameSize, DataSize, VendorGuid (60 bytes),
the UTF-16 name and the data. A variable counts when its State is VAR_ADDED (0x3f), or
VAR_ADDED & VAR_IN_DELETED_TRANSITION (0x3e) when no added copy follows.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from cryptography import x509

from nvkr.disk.gpt import read_gpt
from nvkr.errors import IntegrityError
from nvkr.secureboot.authenticode import verify_pe
from nvkr.secureboot.measure import (
    EFI_GLOBAL_VARIABLE,
    EFI_IMAGE_SECURITY_DATABASE,
    SHIM_LOCK,
    Authority,
    FirmwareKeys,
    ShimState,
    SignatureEntry,
    Uki,
    UkiSection,
    db_authority,
    load_options_digest,
    mok_authority,
    sha256,
)
from nvkr.secureboot.pe import PeSection, pe_sections

#: EFI_CERT_X509_GUID: an EFI_SIGNATURE_LIST of X.509 certificates
EFI_CERT_X509: Final = uuid.UUID("a5c059a1-94e4-4aa7-87b5-ab155c2bf072")
#: EDK2's authenticated variable store signature
_AUTH_VARSTORE: Final = uuid.UUID("aaf32c78-947b-439a-a180-2e144ec37792")
_VAR_HEADER = struct.Struct("<HBxIQ16xIII16s")
_VAR_ADDED: Final = 0x3F
_VAR_ADDED_IN_DELETION: Final = 0x3E
_ESL_HEADER = struct.Struct("<16sIII")
_SECURE_BOOT_ENABLE: Final = uuid.UUID("f0a30bc7-af08-4556-99c4-001009c93a44")


def read_varstore(data: bytes, what: str = "variable store") -> dict[tuple[uuid.UUID, str], bytes]:
    """The live variables of the EDK2 authenticated variable store ``data`` (an OVMF/AAVMF VARS
    file), by (vendor GUID, name).

    Raises:
        IntegrityError: no firmware volume, not an authenticated variable store, or a variable
            that passes the store's end.
    """
    if len(data) < 64 or data[40:44] != b"_FVH":
        raise IntegrityError(f"{what} is not an EDK2 firmware volume (no '_FVH' at offset 40)")
    start = int.from_bytes(data[48:50], "little")
    if uuid.UUID(bytes_le=data[start : start + 16]) != _AUTH_VARSTORE:
        raise IntegrityError(f"{what} is not an authenticated variable store (EDK2 2011 or later)")
    end = start + int.from_bytes(data[start + 16 : start + 20], "little")
    off, found = start + 28, {}
    pending: dict[tuple[uuid.UUID, str], bytes] = {}
    while off + _VAR_HEADER.size <= min(end, len(data)):
        start_id, state, _, _, _, name_size, data_size, guid = _VAR_HEADER.unpack_from(data, off)
        if start_id != 0x55AA:
            break
        body = off + _VAR_HEADER.size
        if body + name_size + data_size > end:
            raise IntegrityError(f"{what}: the variable at {off:#x} passes the store's end")
        name = data[body : body + name_size].decode("utf-16-le").rstrip("\0")
        key = (uuid.UUID(bytes_le=guid), name)
        value = data[body + name_size : body + name_size + data_size]
        if state == _VAR_ADDED:
            found[key] = value
        elif state == _VAR_ADDED_IN_DELETION:
            pending[key] = value
        off = (body + name_size + data_size + 3) & ~3
    return {**pending, **found}


def signature_entries(
    lists: bytes, what: str = "signature database"
) -> Iterator[tuple[uuid.UUID, SignatureEntry]]:
    """The (signature type, entry) of each EFI_SIGNATURE_DATA in the EFI_SIGNATURE_LIST array
    ``lists`` (db, KEK, MokList).

    Raises:
        IntegrityError: a list whose sizes do not fit.
    """
    off = 0
    while off < len(lists):
        if off + _ESL_HEADER.size > len(lists):
            raise IntegrityError(f"{what}: a truncated EFI_SIGNATURE_LIST at {off}")
        kind, list_size, header_size, size = _ESL_HEADER.unpack_from(lists, off)
        first = off + _ESL_HEADER.size + header_size
        if list_size < _ESL_HEADER.size or off + list_size > len(lists) or size < 16:
            raise IntegrityError(f"{what}: the EFI_SIGNATURE_LIST at {off} has bad sizes")
        if (off + list_size - first) % size:
            raise IntegrityError(f"{what}: the EFI_SIGNATURE_LIST at {off} holds partial entries")
        for at in range(first, off + list_size, size):
            entry = lists[at : at + size]
            yield (
                uuid.UUID(bytes_le=kind),
                SignatureEntry(uuid.UUID(bytes_le=entry[:16]), entry[16:]),
            )
        off += list_size


#: The owner of the MokList entry nvkr enrolls the owner's certificate under (an EFI_SIGNATURE_DATA's
#: SignatureOwner: any GUID works; shim measures it with the certificate). ``nvkr boot-test
#: --mok`` enrolls under it, and the predictions assume it.
OWNER_GUID: Final = uuid.uuid5(uuid.NAMESPACE_URL, "https://nvkr.dev/owner-key")


def x509_signature_list(owner: uuid.UUID, der: bytes) -> bytes:
    """One EFI_SIGNATURE_LIST with the certificate ``der`` owned by ``owner``."""
    entry = owner.bytes_le + der
    return (
        _ESL_HEADER.pack(EFI_CERT_X509.bytes_le, _ESL_HEADER.size + len(entry), 0, len(entry))
        + entry
    )


def _certificates(lists: bytes, what: str) -> list[tuple[SignatureEntry, x509.Certificate]]:
    out = []
    for kind, entry in signature_entries(lists, what):
        if kind == EFI_CERT_X509:
            out.append((entry, x509.load_der_x509_certificate(entry.data)))
    return out


def verifying_entry(
    image: bytes, lists: bytes, what: str = "image", where: str = "db"
) -> SignatureEntry | None:
    """The X.509 entry of the signature lists ``lists`` (db, MokList) that the first of
    ``image``'s signatures they trust chains to, None when none does (EDK2 and shim try an
    image's signatures in order and a database's certificates in order)."""
    certs = _certificates(lists, where)
    if not certs:
        return None
    try:
        verification = verify_pe(image, [c for _, c in certs], what)
    except IntegrityError:
        return None
    anchor = verification.anchored[0].anchor
    return next(e for e, c in certs if c == anchor)


def shim_db_entry(variables: dict[tuple[uuid.UUID, str], bytes], shim: bytes) -> SignatureEntry:
    """The db entry (of a store's ``variables``) that verifies ``shim``: what firmware measures
    as its authority when it starts shim.

    Raises:
        IntegrityError: no db, or no db certificate verifies shim (firmware would refuse it).
    """
    db = variables.get((EFI_IMAGE_SECURITY_DATABASE, "db"), b"")
    entry = verifying_entry(shim, db, "shim", "db")
    if entry is None:
        raise IntegrityError("no certificate in db verifies shim: firmware would refuse it")
    return entry


def firmware_keys(
    variables: dict[tuple[uuid.UUID, str], bytes], shim_authority: SignatureEntry
) -> FirmwareKeys:
    """The PCR 7 inputs firmware measures, from a variable store's ``variables``
    (:func:`read_varstore`) and the db entry that verifies shim (:func:`shim_db_entry`):
    SecureBoot is 1 when PK is enrolled and SecureBootEnable (OVMF's switch) is not 0, as EDK2
    sets it at boot (it is volatile and not in the store).

    Raises:
        IntegrityError: PK, KEK, db or dbx missing, or ``shim_authority`` not in db.
    """
    names = {
        "PK": EFI_GLOBAL_VARIABLE,
        "KEK": EFI_GLOBAL_VARIABLE,
        "db": EFI_IMAGE_SECURITY_DATABASE,
        "dbx": EFI_IMAGE_SECURITY_DATABASE,
    }
    missing = [n for n, g in names.items() if (g, n) not in variables]
    if missing:
        raise IntegrityError(f"the variable store has no {', '.join(missing)}: Secure Boot is off")
    enable = variables.get((_SECURE_BOOT_ENABLE, "SecureBootEnable"), b"\x01")
    db = variables[(EFI_IMAGE_SECURITY_DATABASE, "db")]
    if shim_authority not in (e for _, e in signature_entries(db, "db")):
        raise IntegrityError("the entry said to verify shim is not in db")
    return FirmwareKeys(
        secure_boot=b"\x01" if enable != b"\x00" else b"\x00",
        pk=variables[(EFI_GLOBAL_VARIABLE, "PK")],
        kek=variables[(EFI_GLOBAL_VARIABLE, "KEK")],
        db=db,
        dbx=variables[(EFI_IMAGE_SECURITY_DATABASE, "dbx")],
        shim_authority=shim_authority,
    )


def _section(sections: list[PeSection], name: str, what: str) -> PeSection:
    found = [s for s in sections if s.name == name]
    if len(found) != 1:
        raise IntegrityError(f"{what} has {len(found)} {name} sections, not one")
    return found[0]


@dataclass(frozen=True)
class ShimBuiltins:
    """What shim carries built in: its vendor certificate list and dbx (``.vendor_cert``:
    ``cert_table`` of authorized size, deauthorized size, their offsets), and its SbatLevel
    policies (``.sbatlevel``: version, then the offsets of the previous and latest policies,
    NUL-terminated)."""

    vendor_authorized: bytes
    vendor_deauthorized: bytes
    sbat_previous: bytes
    sbat_latest: bytes

    def vendor_list(self) -> bytes:
        """The vendor certificate as shim mirrors it into MokListRT: one EFI_SIGNATURE_LIST
        owned by SHIM_LOCK_GUID when it is a DER certificate, else already a list."""
        if self.vendor_authorized[:2] == b"\x30\x82":
            return x509_signature_list(SHIM_LOCK, self.vendor_authorized)
        return self.vendor_authorized


def shim_builtins(shim: bytes, what: str = "shim") -> ShimBuiltins:
    """The built-in lists and SbatLevel policies of ``shim``.

    Raises:
        IntegrityError: not a PE image, or no single ``.vendor_cert``/``.sbatlevel`` section, or
            offsets past them.
    """
    sections = pe_sections(shim, what)
    table = _section(sections, ".vendor_cert", what).content(shim)
    a_size, d_size, a_off, d_off = struct.unpack_from("<IIII", table, 0)
    if a_off + a_size > len(table) or d_off + d_size > len(table):
        raise IntegrityError(f"{what}: .vendor_cert's lists pass the section's end")
    level = _section(sections, ".sbatlevel", what).content(shim)
    _, previous, latest = struct.unpack_from("<III", level, 0)

    def policy(offset: int) -> bytes:
        text = level[4 + offset :]
        end = text.find(b"\0")
        if end < 0:
            raise IntegrityError(f"{what}: a .sbatlevel policy has no NUL terminator")
        return text[:end]

    return ShimBuiltins(
        table[a_off : a_off + a_size],
        table[d_off : d_off + d_size],
        policy(previous),
        policy(latest),
    )


def shim_state(variables: dict[tuple[uuid.UUID, str], bytes], builtins: ShimBuiltins) -> ShimState:
    """What shim (with ``builtins``, :func:`shim_builtins`) measures on a first boot from a variable store with ``variables``:
    MokList = its vendor list then the store's MokList, MokListX = its built-in dbx then the
    store's MokListX, MokListTrusted = the store's or 1 (shim 16.1's default), SbatLevel = the
    store's, else shim's previous policy (its default, which it writes on that boot).
    """
    var = variables.get
    return ShimState(
        mok_list=builtins.vendor_list() + var((SHIM_LOCK, "MokList"), b""),
        mok_list_x=builtins.vendor_deauthorized + var((SHIM_LOCK, "MokListX"), b""),
        mok_list_trusted=var((SHIM_LOCK, "MokListTrusted"), b"\x01"),
        sbat_level=var((SHIM_LOCK, "SbatLevel"), builtins.sbat_previous),
    )


def image_authority(
    image: bytes, firmware: FirmwareKeys, shim: ShimState, what: str = "image"
) -> Authority:
    """The entry shim finds ``image`` verified by: db first, then its MokListRT (shim's
    ``check_allowlist`` order).

    Raises:
        IntegrityError: neither verifies ``image`` (shim would refuse it).
    """
    entry = verifying_entry(image, firmware.db, what, "db")
    if entry is not None:
        return db_authority(entry)
    entry = verifying_entry(image, shim.mok_list, what, "MokListRT")
    if entry is None:
        raise IntegrityError(f"neither db nor MokList verifies {what}: shim would refuse it")
    return mok_authority(entry)


def _pad4(data: bytes) -> bytes:
    return data + bytes(-len(data) % 4)


def _cpio_header(ino: int, mode: int, size: int, name: bytes) -> bytes:
    fields = (ino, mode, 0, 0, 1, 0, size, 0, 0, 0, 0, len(name) + 1, 0)
    return _pad4(b"070701" + b"".join(b"%08x" % f for f in fields) + name + b"\0")


#: systemd's literal trailer record: nlink 1, name size written "0000000B" in upper case (its
#: other words are written in lower case), padded with NULs to 4 bytes.
_CPIO_TRAILER: Final = (
    b"070701"
    + b"00000000" * 4
    + b"00000001"
    + b"00000000" * 6
    + b"0000000B"
    + b"00000000"
    + b"TRAILER!!!\0\0\0\0"
)


def stub_cpio(filename: str, content: bytes) -> bytes:
    """systemd-stub's ``pack_cpio_literal`` archive of ``content`` as ``/.extra/<filename>``:
    the ``.extra`` directory (inode 1, 0555), the file (inode 2, 0444), the trailer (newc, mtime
    and owners 0)."""
    name = b".extra/" + filename.encode("ascii")
    return (
        _cpio_header(1, 0o040555, 0, b".extra")
        + _pad4(_cpio_header(2, 0o100444, len(content), name) + content)
        + _CPIO_TRAILER
    )


#: The initrd parts systemd-stub 257 assembles from the UKI, in its order: the section and, for
#: sections handed on as files, the name under /.extra.
_INITRD_PARTS: Final = (
    (".ucode", None),
    (".initrd", None),
    (".pcrsig", "tpm2-pcr-signature.json"),
    (".pcrpkey", "tpm2-pcr-public-key.pem"),
    (".osrel", "os-release"),
    (".profile", "profile"),
)


def stub_initrd_digest(contents: dict[str, bytes]) -> bytes:
    """The sha256 of the initrd systemd-stub hands the kernel from a UKI whose sections have
    ``contents`` (by name), which the kernel stub measures as "Linux initrd": the parts of
    :data:`_INITRD_PARTS` that are there, each padded to 4 bytes when there are several (an ESP
    without credentials, system or configuration extensions next to the UKI is assumed).

    Raises:
        IntegrityError: the UKI gives no initrd at all (the kernel then measures none).
    """
    parts = []
    for name, filename in _INITRD_PARTS:
        if name in contents:
            data = contents[name]
            parts.append(data if filename is None else stub_cpio(filename, data))
    if not parts:
        raise IntegrityError("the UKI has no .initrd (nor other initrd part): nothing to predict")
    if len(parts) == 1:
        return sha256(parts[0])
    return sha256(b"".join(_pad4(p) for p in parts))


def uki_inputs(uki: bytes, what: str = "UKI") -> Uki:
    """The PCR 9 and 11 inputs of the (signed or unsigned) UKI ``uki``: its sections' digests,
    the LoadOptions digest of its ``.cmdline`` and the initrd digest.

    Raises:
        IntegrityError: not a PE image, no ``.cmdline`` (the kernel would measure what the boot
            loader passed), or no initrd.
    """
    sections = pe_sections(uki, what)
    contents = {s.name: s.content(uki) for s in sections}
    if ".cmdline" not in contents:
        raise IntegrityError(f"{what} has no .cmdline: its command line would come from outside")
    cmdline = contents[".cmdline"].decode("utf-8").rstrip("\0")
    if cmdline != cmdline.strip():
        raise IntegrityError(
            f"{what}'s .cmdline has leading or trailing white space, which systemd-stub strips "
            "before passing it: not modelled"
        )
    return Uki(
        sections=tuple(UkiSection(s.name, sha256(contents[s.name])) for s in sections),
        load_options_digest=load_options_digest(cmdline),
        initrd_digest=stub_initrd_digest(contents),
    )


def gpt_event_data(head: bytes, what: str = "the disk") -> bytes:
    """``UEFI_GPT_DATA`` (PFP 10.2.5) of the disk whose first bytes are ``head`` (at least
    :data:`nvkr.disk.gpt.GPT_HEAD_SECTORS` sectors): the primary GPT header (HeaderSize bytes),
    the number of used entries (UINT64) and those entries (SizeOfPartitionEntry bytes each), in
    table order, as EDK2's ``Tcg2MeasureGptTable`` measures it.

    Raises:
        DiskError: no GPT, or a CRC that does not match.
    """
    used = read_gpt(head, what=what)
    header = head[512:1024]
    size = int.from_bytes(header[12:16], "little")
    entries_lba, _, entry_size = struct.unpack_from("<QII", header, 72)
    base = entries_lba * 512
    entries = b"".join(
        head[base + (e.number - 1) * entry_size : base + e.number * entry_size] for e in used
    )
    return header[:size] + struct.pack("<Q", len(used)) + entries
