"""Authenticode signatures of UEFI PE images, read and checked as Secure Boot firmware and shim
check them, and carried from a signed image onto a rebuilt unsigned one.

Each entry of a PE image's attribute certificate table (:mod:`.pe`) of wRevision 0x0200 and
wCertificateType 0x0002 (``WIN_CERT_TYPE_PKCS_SIGNED_DATA``) holds a PKCS#7 ``ContentInfo`` in
DER whose ``SignedData`` (Microsoft's "Windows Authenticode Portable Executable Signature
Format") has:

- ``contentInfo``: content type ``SPC_INDIRECT_DATA_OBJID`` (1.3.6.1.4.1.311.2.1.4), the content
  ``SpcIndirectDataContent ::= SEQUENCE { data SpcAttributeTypeAndOptionalValue (type
  SPC_PE_IMAGE_DATAOBJ, 1.3.6.1.4.1.311.2.1.15), messageDigest DigestInfo }``, the DigestInfo
  being the image's Authenticode digest (:func:`nvkr.secureboot.pe.authenticode_digest`) and its
  algorithm;
- ``certificates``: the signer's certificate and whatever intermediates the signer added;
- one ``SignerInfo``: the signer as issuer and serial number, its digest algorithm, the
  ``authenticatedAttributes`` (contentType, and messageDigest: the hash of the
  SpcIndirectDataContent's value without its tag and length), the RSA PKCS#1 v1.5 signature over
  the DER of those attributes as a SET OF (tag 0x31 for the [0] IMPLICIT), and
  ``unauthenticatedAttributes``, where ``SPC_NESTED_SIGNATURE`` (1.3.6.1.4.1.311.2.4.1) carries
  further whole ``ContentInfo`` signatures of the same image (``osslsigncode sign -nest``).

An image may so be signed several times: several table entries (Debian's shim 16.1 carries two,
one by Microsoft's UEFI CA 2011 chain and one by its 2023 one) and nested signatures;
:func:`pe_signatures` lists them all. :func:`verify_pe` accepts an image when at least one of
them signs its Authenticode digest and chains to a trusted certificate (the firmware's ``db``, or
the owner's certificate as a MOK): the signer itself, or its issuer, directly or through the
signature's other certificates. As firmware does, it checks no validity period (firmware has no
trusted clock, and Microsoft's 2011 CA has expired) and no key usage; an issuer must not be
marked as no CA.

:func:`attach_signatures` puts a signed image's table onto the same image rebuilt unsigned,
exactly as osslsigncode had attached it, so that a release's signed image is rebuilt without
the key and compared byte for byte.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from nvkr.errors import IntegrityError
from nvkr.secureboot import pe
from nvkr.secureboot.der import Der, algorithm, oid
from nvkr.secureboot.pe import authenticode_digest, pe_checksum

__all__ = [
    "AnchoredSignature",
    "Attribute",
    "PeSignature",
    "PeVerification",
    "attach_signatures",
    "authenticode_digest",
    "pe_checksum",
    "pe_signatures",
    "verify_pe",
]

OID_SIGNED_DATA: Final = "1.2.840.113549.1.7.2"
OID_SPC_INDIRECT_DATA: Final = "1.3.6.1.4.1.311.2.1.4"
OID_SPC_PE_IMAGE_DATA: Final = "1.3.6.1.4.1.311.2.1.15"
OID_SPC_NESTED_SIGNATURE: Final = "1.3.6.1.4.1.311.2.4.1"
OID_CONTENT_TYPE: Final = "1.2.840.113549.1.9.3"
OID_MESSAGE_DIGEST: Final = "1.2.840.113549.1.9.4"
OID_SIGNING_TIME: Final = "1.2.840.113549.1.9.5"
_OID_RSA = "1.2.840.113549.1.1.1"
_OID_RSA_WITH = {  # sha*WithRSAEncryption, which some signers name as the signature algorithm
    "1.2.840.113549.1.1.5": "sha1",
    "1.2.840.113549.1.1.11": "sha256",
    "1.2.840.113549.1.1.12": "sha384",
    "1.2.840.113549.1.1.13": "sha512",
}
_OID_DIGEST = {
    "1.3.14.3.2.26": "sha1",
    "2.16.840.1.101.3.4.2.1": "sha256",
    "2.16.840.1.101.3.4.2.2": "sha384",
    "2.16.840.1.101.3.4.2.3": "sha512",
}
_HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "sha1": hashes.SHA1,
    "sha256": hashes.SHA256,
    "sha384": hashes.SHA384,
    "sha512": hashes.SHA512,
}
#: nested signatures deeper than this are refused (osslsigncode nests one level)
_MAX_NESTING = 4
#: intermediates followed from the signer towards a trusted certificate
_MAX_CHAIN = 8


class Attribute(NamedTuple):
    """A PKCS#9 attribute: its type's OID and the DER of each of its values."""

    oid: str
    values: tuple[bytes, ...]


@dataclass(frozen=True)
class PeSignature:
    """One Authenticode signature of a PE image.

    ``where`` names it in messages (``signature 2``, ``signature 1's nested signature 1``);
    ``digest_algorithm`` and ``image_digest`` are the SpcIndirectDataContent's (the image's
    Authenticode digest as signed); ``issuer_der`` and ``serial`` name the signer's certificate
    among ``certificates``; ``signed_attributes`` are the SignerInfo's authenticatedAttributes,
    ``signed_attributes_der`` their DER as the signature covers it (a SET OF), ``content`` the
    SpcIndirectDataContent's value without its tag and length (what messageDigest hashes),
    ``signer_digest`` the SignerInfo's digest algorithm and ``signature`` its encryptedDigest.
    """

    where: str
    nested: bool
    digest_algorithm: str
    image_digest: bytes
    certificates: tuple[x509.Certificate, ...]
    issuer_der: bytes
    serial: int
    signed_attributes: tuple[Attribute, ...]
    signed_attributes_der: bytes
    content: bytes
    signer_digest: str
    signature: bytes

    def attribute(self, oid: str) -> tuple[bytes, ...]:
        """The values of the signed attribute ``oid`` (none when absent)."""
        return tuple(v for a in self.signed_attributes if a.oid == oid for v in a.values)

    def signer_certificate(self) -> x509.Certificate | None:
        """The certificate of ``certificates`` that the SignerInfo names, if there."""
        for cert in self.certificates:
            if _issuer_and_serial(cert) == (self.issuer_der, self.serial):
                return cert
        return None


@dataclass(frozen=True)
class AnchoredSignature:
    """A signature that signs the image's digest and chains to ``anchor``, one of the trusted
    certificates, from its ``signer`` certificate."""

    signature: PeSignature
    signer: x509.Certificate
    anchor: x509.Certificate

    @property
    def signer_subject(self) -> str:
        return self.signer.subject.rfc4514_string()

    @property
    def anchor_subject(self) -> str:
        return self.anchor.subject.rfc4514_string()


@dataclass(frozen=True)
class PeVerification:
    """What :func:`verify_pe` found: the image's Authenticode digest by the first trusted
    signature's algorithm and every signature that verified and chains to a trusted
    certificate (at least one), in table order, nested ones after the one holding them."""

    algorithm: str
    image_digest: bytes
    anchored: tuple[AnchoredSignature, ...]

    @property
    def anchor(self) -> x509.Certificate:
        """The trusted certificate the first trusted signature chains to."""
        return self.anchored[0].anchor

    @property
    def signer_subject(self) -> str:
        return self.anchored[0].signer_subject


def _issuer_and_serial(cert: x509.Certificate) -> tuple[bytes, int]:
    """The issuer Name's DER as the certificate encodes it, and its serial number."""
    tbs = Der(Der(cert.tbs_certificate_bytes, "a certificate").next(0x30)[1], "a certificate")
    if tbs.peek() == 0xA0:
        tbs.next(0xA0)  # version
    tbs.next(0x02)  # serialNumber
    tbs.next(0x30)  # signature
    return tbs.next(0x30)[2], cert.serial_number


def _attributes(content: bytes, what: str) -> tuple[Attribute, ...]:
    """The Attributes in the content of a SET OF Attribute ([0] or [1] IMPLICIT)."""
    out, attrs = [], Der(content, what)
    while not attrs.done():
        a = Der(attrs.next(0x30)[1], what)
        type_oid = oid(a.next(0x06)[1])
        values = Der(a.next(0x31)[1], what)
        a.end("an attribute")
        found = []
        while not values.done():
            found.append(values.next()[2])
        out.append(Attribute(type_oid, tuple(found)))
    return tuple(out)


def _certificates(content: bytes, what: str) -> tuple[x509.Certificate, ...]:
    certs, der = [], Der(content, what)
    while not der.done():
        tlv = der.next(0x30)[2]  # not the [0]..[3] CHOICEs of other certificate formats
        try:
            certs.append(x509.load_der_x509_certificate(tlv))
        except ValueError as e:
            raise IntegrityError(f"{what}: an embedded certificate does not parse: {e}") from e
    return tuple(certs)


def _parse_signed_data(der: bytes, where: str, depth: int, what: str) -> list[PeSignature]:
    """The signature in the ContentInfo ``der`` followed by those nested in it."""
    image, what = what, f"{what}: {where}"
    top = Der(der, what)
    ci = Der(top.next(0x30)[1], what)
    if oid(ci.next(0x06)[1]) != OID_SIGNED_DATA:
        raise IntegrityError(f"{what} is not a PKCS#7 SignedData")
    sd = Der(Der(ci.next(0xA0)[1], what).next(0x30)[1], what)
    sd.next(0x02)  # version
    sd.next(0x31)  # digestAlgorithms
    encap = Der(sd.next(0x30)[1], what)
    if oid(encap.next(0x06)[1]) != OID_SPC_INDIRECT_DATA:
        raise IntegrityError(f"{what}: the signed content is not SpcIndirectDataContent")
    content = Der(encap.next(0xA0)[1], what).next(0x30)[1]
    encap.end("the signed content")
    spc = Der(content, what)
    data = Der(spc.next(0x30)[1], what)
    if oid(data.next(0x06)[1]) != OID_SPC_PE_IMAGE_DATA:
        raise IntegrityError(f"{what}: the signed content is not a PE image's (SpcPeImageData)")
    digest_info = Der(spc.next(0x30)[1], what)
    spc.end("SpcIndirectDataContent")
    image_alg = _digest(algorithm(digest_info.next(0x30)[1], what), "image digest", what)
    image_digest = digest_info.next(0x04)[1]
    if len(image_digest) != hashlib.new(image_alg).digest_size:
        raise IntegrityError(
            f"{what}: an image digest of {len(image_digest)} bytes for {image_alg}"
        )
    certs: tuple[x509.Certificate, ...] = ()
    if sd.peek() == 0xA0:
        certs = _certificates(sd.next(0xA0)[1], what)
    if sd.peek() == 0xA1:
        sd.next(0xA1)  # crls
    infos = Der(sd.next(0x31)[1], what)
    sd.end("SignedData")
    si = Der(infos.next(0x30)[1], what)
    if not infos.done():
        raise IntegrityError(f"{what}: more than one SignerInfo (Authenticode has one)")
    si.next(0x02)  # version
    ias = Der(si.next(0x30)[1], what)
    issuer = ias.next(0x30)[2]
    serial = int.from_bytes(ias.next(0x02)[1], "big", signed=True)
    signer_digest = _digest(algorithm(si.next(0x30)[1], what), "signer's digest", what)
    if si.peek() != 0xA0:
        raise IntegrityError(f"{what}: no authenticatedAttributes (Authenticode requires them)")
    _, attrs_content, attrs_tlv = si.next(0xA0)
    sig_alg = algorithm(si.next(0x30)[1], what)
    if sig_alg != _OID_RSA and _OID_RSA_WITH.get(sig_alg) != signer_digest:
        raise IntegrityError(f"{what}: the signature algorithm {sig_alg} is not RSA PKCS#1 v1.5")
    signature = si.next(0x04)[1]
    unsigned = _attributes(si.next(0xA1)[1], what) if si.peek() == 0xA1 else ()
    si.end("SignerInfo")
    found = [
        PeSignature(
            where=where,
            nested=depth > 0,
            digest_algorithm=image_alg,
            image_digest=image_digest,
            certificates=certs,
            issuer_der=issuer,
            serial=serial,
            signed_attributes=_attributes(attrs_content, what),
            signed_attributes_der=b"\x31" + attrs_tlv[1:],
            content=content,
            signer_digest=signer_digest,
            signature=signature,
        )
    ]
    nested = [v for a in unsigned if a.oid == OID_SPC_NESTED_SIGNATURE for v in a.values]
    if nested and depth >= _MAX_NESTING:
        raise IntegrityError(f"{what}: signatures nested more than {_MAX_NESTING} deep")
    for i, value in enumerate(nested, 1):
        found += _parse_signed_data(value, f"{where}'s nested signature {i}", depth + 1, image)
    return found


def _digest(algorithm_oid: str, role: str, what: str) -> str:
    name = _OID_DIGEST.get(algorithm_oid)
    if name is None:
        raise IntegrityError(f"{what}: the {role} algorithm {algorithm_oid} is not SHA-1 or SHA-2")
    return name


def pe_signatures(data: bytes, what: str = "PE image") -> list[PeSignature]:
    """Every Authenticode signature of the PE image ``data``: each PKCS#7 entry of its attribute
    certificate table, each followed by the signatures nested in it (none when unsigned).

    Raises:
        IntegrityError: not a PE image, an entry of another revision or type than
            WIN_CERT_REVISION_2_0 / WIN_CERT_TYPE_PKCS_SIGNED_DATA, or a signature that is not
            Authenticode's shape (each message names the entry and the byte).
    """
    found: list[PeSignature] = []
    for i, entry in enumerate(pe.win_certificates(data, what), 1):
        if (
            entry.revision != pe.WIN_CERT_REVISION_2_0
            or entry.type != pe.WIN_CERT_TYPE_PKCS_SIGNED_DATA
        ):
            raise IntegrityError(
                f"{what}: the WIN_CERTIFICATE at {entry.offset:#x} has revision "
                f"{entry.revision:#06x} and type {entry.type:#06x}, not PKCS#7 SignedData "
                "(0x0200, 0x0002)"
            )
        der = Der(entry.content, f"{what}: signature {i}")
        tlv = der.next(0x30)[2]
        if entry.content[len(tlv) :].strip(b"\0"):
            raise IntegrityError(f"{what}: signature {i} is followed by bytes other than padding")
        found += _parse_signed_data(tlv, f"signature {i}", 0, what)
    return found


def _signature_problem(sig: PeSignature, signer: x509.Certificate | None) -> str | None:
    """Why ``sig`` does not verify by itself (its digest of the image aside), or None."""
    if signer is None:
        return "its signer's certificate is not among the certificates it carries"
    types = sig.attribute(OID_CONTENT_TYPE)
    if len(types) != 1 or oid(Der(types[0], sig.where).next(0x06)[1]) != OID_SPC_INDIRECT_DATA:
        return "its contentType attribute is not one SpcIndirectDataContent"
    digests = sig.attribute(OID_MESSAGE_DIGEST)
    if len(digests) != 1:
        return f"it has {len(digests)} messageDigest attributes, not one"
    expected = hashlib.new(sig.signer_digest, sig.content).digest()
    if Der(digests[0], sig.where).next(0x04)[1] != expected:
        return "its messageDigest attribute is not the digest of its SpcIndirectDataContent"
    key = signer.public_key()
    if not isinstance(key, rsa.RSAPublicKey):
        return f"its signer's key is a {type(key).__name__}, not RSA"
    try:
        key.verify(
            sig.signature,
            sig.signed_attributes_der,
            padding.PKCS1v15(),
            _HASHES[sig.signer_digest](),
        )
    except InvalidSignature:
        return "its RSA signature does not verify over its signed attributes"
    return None


def _issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    """Whether ``issuer`` (not marked as no CA) signed ``cert``."""
    try:
        if not issuer.extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
            return False
    except x509.ExtensionNotFound:
        pass
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _anchor(
    signer: x509.Certificate,
    pool: Sequence[x509.Certificate],
    trusted: Sequence[x509.Certificate],
) -> x509.Certificate | None:
    """The trusted certificate that is ``signer`` or issued the chain from it through ``pool``."""
    cert, seen = signer, [signer]
    for _ in range(_MAX_CHAIN):
        for t in trusted:
            if cert == t or _issued_by(cert, t):
                return t
        up = next((c for c in pool if c not in seen and _issued_by(cert, c)), None)
        if up is None:
            return None
        cert = up
        seen.append(up)
    return None


def _names(certs: Sequence[x509.Certificate]) -> str:
    return ", ".join(repr(c.subject.rfc4514_string()) for c in certs) or "none given"


def verify_pe(
    data: bytes, trusted: Sequence[x509.Certificate], what: str = "PE image"
) -> PeVerification:
    """Check that the PE image ``data`` carries an Authenticode signature of its digest by a
    certificate that is one of ``trusted`` or chains to one of them.

    Every signature (those nested included) is tried; those that pass are reported.

    Raises:
        IntegrityError: ``data`` is unsigned or malformed, or no signature passes; the message
            says for each why: its image digest is not the image's (the image was changed after
            it was signed), its signature does not verify, or its signer (named) chains to none
            of the trusted certificates (named).
    """
    signatures = pe_signatures(data, what)
    if not signatures:
        raise IntegrityError(f"{what} is not signed: it has no attribute certificate table")
    digests: dict[str, bytes] = {}
    anchored, problems = [], []
    for sig in signatures:
        alg = sig.digest_algorithm
        if alg not in digests:
            digests[alg] = authenticode_digest(data, alg, what)
        if sig.image_digest != digests[alg]:
            problems.append(
                f"{sig.where}'s image digest {alg}:{sig.image_digest.hex()} is not the image's "
                f"Authenticode digest {alg}:{digests[alg].hex()} (the image was changed after "
                "it was signed)"
            )
            continue
        signer = sig.signer_certificate()
        problem = _signature_problem(sig, signer)
        if problem is not None or signer is None:
            problems.append(f"{sig.where}: {problem}")
            continue
        anchor = _anchor(signer, sig.certificates, trusted)
        if anchor is None:
            problems.append(
                f"{sig.where} is by {signer.subject.rfc4514_string()!r} (issued by "
                f"{signer.issuer.rfc4514_string()!r}), which chains to none of the trusted "
                f"certificates ({_names(trusted)})"
            )
            continue
        anchored.append(AnchoredSignature(sig, signer, anchor))
    if not anchored:
        raise IntegrityError(f"{what}: no trusted signature: " + "; ".join(problems))
    first = anchored[0].signature
    return PeVerification(first.digest_algorithm, first.image_digest, tuple(anchored))


def attach_signatures(unsigned: bytes, signed: bytes, what: str = "PE image") -> bytes:
    """``unsigned`` with the signatures of ``signed`` attached as osslsigncode attached them:
    ``signed`` itself when ``unsigned`` is the image it signed
    (:func:`nvkr.secureboot.pe.attach_table`).

    Raises:
        IntegrityError: either is not a PE image, ``unsigned`` has signatures or ``signed``
            none, or the images differ but for signatures: their Authenticode digests (by each
            algorithm a signature uses) differ, or a signature signs neither.
    """
    layout = pe.pe_layout(signed, f"{what} (signed)")
    if not layout.signed:
        raise IntegrityError(f"{what} (signed) has no signatures to attach")
    signatures = pe_signatures(signed, f"{what} (signed)")
    offset, size = layout.cert_table
    out = pe.attach_table(unsigned, signed[offset : offset + size], what)
    for alg in sorted({"sha256", *(s.digest_algorithm for s in signatures)}):
        ours, theirs = authenticode_digest(out, alg, what), authenticode_digest(signed, alg, what)
        if ours != theirs:
            raise IntegrityError(
                f"{what}: the signed image's Authenticode digest {alg}:{theirs.hex()} is not "
                f"the unsigned image's {alg}:{ours.hex()}: they differ but for signatures"
            )
    for sig in signatures:
        if sig.image_digest != authenticode_digest(out, sig.digest_algorithm, what):
            raise IntegrityError(f"{what} (signed): {sig.where} signs another image's digest")
    return out
