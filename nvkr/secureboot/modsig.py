"""Kernel module signatures as the kernel's ``scripts/sign-file`` appends them, read and checked.

A signed module is the module's bytes, then a PKCS#7 (CMS) ``SignedData`` in DER, detached and
without signed attributes, then ``struct module_signature`` (``include/linux/module_signature.h``:
``u8 algo, hash, id_type, signer_len, key_id_len, __pad[3]; __be32 sig_len``, id_type 2 for
PKCS#7) and the magic string ``~Module signature appended~\\n``. Without signed attributes the
signature is the signer's RSA PKCS#1 v1.5 signature over the module bytes themselves, which
:func:`verify_module` checks with the owner's certificate; the payload before the signature is
what a build without the key makes (:func:`unsigned_payload`), so a signed module is compared
with a rebuilt one by it.

The DER is read by a small reader (:mod:`.der`) of the few structures involved
(:func:`parse_pkcs7`): every length is checked against what holds it, and anything that is not
sign-file's shape is refused with what was found.
"""

from __future__ import annotations

import lzma
import struct
from dataclasses import dataclass
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding

from nvkr.errors import IntegrityError
from nvkr.secureboot.der import Der, algorithm, oid
from nvkr.secureboot.owner import OwnerCertificate

MAGIC: Final = b"~Module signature appended~\n"
#: ``struct module_signature``: algo, hash, id_type, signer_len, key_id_len, 3 pad, be32 sig_len
_TRAILER = struct.Struct(">BBBBB3xI")
PKEY_ID_PKCS7: Final = 2
#: the xz container's magic: a compressed module (``.ko.xz``)
XZ_MAGIC: Final = b"\xfd7zXZ\x00"

_OID_SIGNED_DATA = "1.2.840.113549.1.7.2"
_OID_DATA = "1.2.840.113549.1.7.1"
_OID_RSA = "1.2.840.113549.1.1.1"
_OID_RSA_SHA = {  # sha*WithRSAEncryption, which some signers put as the signature algorithm
    "1.2.840.113549.1.1.11": "sha256",
    "1.2.840.113549.1.1.12": "sha384",
    "1.2.840.113549.1.1.13": "sha512",
}
_OID_DIGEST = {
    "2.16.840.1.101.3.4.2.1": "sha256",
    "2.16.840.1.101.3.4.2.2": "sha384",
    "2.16.840.1.101.3.4.2.3": "sha512",
}
_HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "sha256": hashes.SHA256,
    "sha384": hashes.SHA384,
    "sha512": hashes.SHA512,
}


@dataclass(frozen=True)
class ModuleSignature:
    """What a module's PKCS#7 signature says: the signer (issuer DER and serial, or the subject
    key identifier), the digest algorithm and the signature bytes."""

    digest: str
    signature: bytes
    issuer_der: bytes | None
    serial: int | None
    key_identifier: bytes | None


def parse_pkcs7(der: bytes, what: str = "module signature") -> ModuleSignature:
    """The one SignerInfo of sign-file's PKCS#7 ``der``.

    Raises:
        IntegrityError: not a detached SignedData with one signer, signed attributes present,
            or an algorithm other than RSA with SHA-256/384/512.
    """
    top = Der(der, what)
    _, info, _ = top.next(0x30)
    ci = Der(info, what)
    if oid(ci.next(0x06)[1]) != _OID_SIGNED_DATA:
        raise IntegrityError(f"{what}: not a PKCS#7 SignedData")
    _, explicit, _ = ci.next(0xA0)
    _, signed_data, _ = Der(explicit, what).next(0x30)
    sd = Der(signed_data, what)
    sd.next(0x02)  # version
    sd.next(0x31)  # digestAlgorithms
    _, encap, _ = sd.next(0x30)
    ec = Der(encap, what)
    if oid(ec.next(0x06)[1]) != _OID_DATA or not ec.done():
        raise IntegrityError(f"{what}: the signed content is not detached data")
    if sd.peek() == 0xA0:
        sd.next(0xA0)  # certificates (sign-file leaves them out; others may not)
    if sd.peek() == 0xA1:
        sd.next(0xA1)  # crls
    _, signer_infos, _ = sd.next(0x31)
    infos = Der(signer_infos, what)
    _, si, _ = infos.next(0x30)
    if not infos.done():
        raise IntegrityError(f"{what}: more than one signer")
    s = Der(si, what)
    s.next(0x02)  # version
    issuer = serial = key_id = None
    if s.peek() == 0x30:
        _, ias, _ = s.next(0x30)
        ias_der = Der(ias, what)
        _, _, issuer = ias_der.next(0x30)
        serial = int.from_bytes(ias_der.next(0x02)[1], "big", signed=True)
    else:
        key_id = s.next(0x80)[1]
    digest = _OID_DIGEST.get(algorithm(s.next(0x30)[1], what))
    if digest is None:
        raise IntegrityError(f"{what}: the digest algorithm is not SHA-256, SHA-384 or SHA-512")
    if s.peek() == 0xA0:
        raise IntegrityError(
            f"{what}: it has signed attributes; the kernel's sign-file signs without them"
        )
    sig_alg = algorithm(s.next(0x30)[1], what)
    if sig_alg != _OID_RSA and _OID_RSA_SHA.get(sig_alg) != digest:
        raise IntegrityError(f"{what}: the signature algorithm {sig_alg} is not RSA PKCS#1 v1.5")
    signature = s.next(0x04)[1]
    return ModuleSignature(digest, signature, issuer, serial, key_id)


@dataclass(frozen=True)
class SplitModule:
    """A module's bytes cut at its appended signature: ``payload`` and the PKCS#7 DER (None for
    an unsigned module)."""

    payload: bytes
    pkcs7: bytes | None


def split_module(data: bytes, what: str = "module") -> SplitModule:
    """``data`` (an uncompressed module) cut at sign-file's trailer.

    Raises:
        IntegrityError: the trailer is there but malformed (not PKCS#7, a length past the start).
    """
    if not data.endswith(MAGIC):
        return SplitModule(data, None)
    end = len(data) - len(MAGIC)
    if end < _TRAILER.size:
        raise IntegrityError(f"{what}: a signature trailer with no room for its header")
    algo, hash_, id_type, signer_len, key_id_len, sig_len = _TRAILER.unpack_from(
        data, end - _TRAILER.size
    )
    end -= _TRAILER.size
    if id_type != PKEY_ID_PKCS7 or algo or hash_ or signer_len or key_id_len:
        raise IntegrityError(f"{what}: the appended signature is not PKCS#7 (id_type {id_type})")
    if sig_len > end:
        raise IntegrityError(f"{what}: the signature claims {sig_len} bytes, the module has {end}")
    return SplitModule(data[: end - sig_len], data[end - sig_len : end])


def decompress(data: bytes, what: str = "module") -> bytes:
    """A module's ELF bytes: ``data`` itself, or its xz content (``.ko.xz``)."""
    if not data.startswith(XZ_MAGIC):
        return data
    try:
        return lzma.decompress(data, format=lzma.FORMAT_XZ)
    except lzma.LZMAError as e:
        raise IntegrityError(f"{what}: not a valid xz stream: {e}") from e


def unsigned_payload(data: bytes, what: str = "module") -> bytes:
    """The module as built before signing: decompressed, its appended signature cut off."""
    return split_module(decompress(data, what), what).payload


def verify_module(data: bytes, cert: OwnerCertificate, what: str = "module") -> ModuleSignature:
    """Check that ``data`` (a module, xz-compressed or not) carries a signature by ``cert``.

    Raises:
        IntegrityError: unsigned, malformed, signed by another certificate, or a signature that
            does not verify over the module's bytes (one byte changed, say). Names ``what``.
    """
    split = split_module(decompress(data, what), what)
    if split.pkcs7 is None:
        raise IntegrityError(f"{what} is not signed")
    sig = parse_pkcs7(split.pkcs7, f"{what}'s signature")
    c = cert.cert
    by_serial = sig.issuer_der is not None and (
        sig.issuer_der == c.issuer.public_bytes() and sig.serial == c.serial_number
    )
    by_key_id = False
    if sig.key_identifier is not None:
        try:
            ski = c.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
        except x509.ExtensionNotFound:
            ski = x509.SubjectKeyIdentifier.from_public_key(c.public_key()).digest
        by_key_id = sig.key_identifier == ski
    if not (by_serial or by_key_id):
        raise IntegrityError(
            f"{what} is signed by another key than the certificate {cert.where} ({cert.subject})"
        )
    try:
        cert.public_key.verify(
            sig.signature, split.payload, padding.PKCS1v15(), _HASHES[sig.digest]()
        )
    except InvalidSignature:
        raise IntegrityError(
            f"{what}: the signature by {cert.subject} does not verify over the module's bytes "
            "(the module was changed after it was signed)"
        ) from None
    return sig
