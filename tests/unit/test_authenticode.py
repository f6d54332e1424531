"""Authenticode of UEFI PE images (nvkr.secureboot.pe, nvkr.secureboot.authenticode) on real
inputs: a PE32+ EFI image made by the host's ``grub-mkimage -O x86_64-efi`` and a minimal PE32
one made here, signed by the host's ``osslsigncode`` (Debian 12's 2.5 in CI, 2.9 from backports
on some machines: the tests hold for both) with a test CA's leaf, and again nested (``-nest``)
by a leaf under an intermediate of a second CA. Both tools come with install.sh; a missing one
fails these tests, it does not skip them.

The digests are checked against what ``osslsigncode verify`` calculates; verification against
the CA, the leaf, an untrusted CA and after one byte changed; attaching a signed image's table
onto the unsigned image against osslsigncode's own output, byte for byte."""

from __future__ import annotations

import datetime
import re
import shutil
import struct
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from nvkr.errors import IntegrityError
from nvkr.secureboot import pe
from nvkr.secureboot.authenticode import (
    OID_CONTENT_TYPE,
    OID_MESSAGE_DIGEST,
    OID_SIGNING_TIME,
    attach_signatures,
    authenticode_digest,
    pe_checksum,
    pe_signatures,
    verify_pe,
)

#: the signing time given to osslsigncode (-time): 2025-12-01T00:00:00Z
EPOCH = 1764547200


def _tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: install.sh installs it (Debian package {package})")
    return path


@dataclass(frozen=True)
class Pki:
    """PEM files and certificates: ``ca`` issued ``leaf``; ``ca2`` issued ``inter2``, which
    issued ``leaf2``; ``other`` issued nothing here."""

    dir: Path
    certs: dict[str, x509.Certificate]

    def pem(self, name: str) -> Path:
        return self.dir / f"{name}.pem"

    def key(self, name: str) -> Path:
        return self.dir / f"{name}.key"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    now = datetime.datetime(2025, 11, 1, tzinfo=datetime.UTC)
    keys: dict[str, rsa.RSAPrivateKey] = {}
    certs: dict[str, x509.Certificate] = {}

    def make(name: str, cn: str, issuer: str | None, ca: bool) -> None:
        key = keys[name] = rsa.generate_private_key(65537, 2048)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(certs[issuer].subject if issuer else subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False
            )
        cert = certs[name] = builder.sign(keys[issuer or name], hashes.SHA256())
        (d / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (d / f"{name}.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )

    make("ca", "nvkr test CA", None, True)
    make("leaf", "nvkr test signer", "ca", False)
    make("ca2", "nvkr test CA 2", None, True)
    make("inter2", "nvkr test intermediate 2", "ca2", True)
    make("leaf2", "nvkr test signer 2", "inter2", False)
    make("other", "nvkr other CA", None, True)
    return Pki(d, certs)


def _pe32(tail: bytes = b"after the sections", gap: int = 0) -> bytes:
    """A minimal PE32 EFI application (i386, subsystem 10): headers, .text and .data of 0x200
    bytes each (``gap`` bytes apart), then ``tail`` (unaligned by default)."""
    dirs = 16
    opt = bytearray(96 + 8 * dirs)
    struct.pack_into("<HBBIII", opt, 0, 0x10B, 14, 0, 0x200, 0x200, 0)
    struct.pack_into("<IIIIII", opt, 16, 0x1000, 0x1000, 0x2000, 0x400000, 0x1000, 0x200)
    struct.pack_into("<II", opt, 56, 0x3000, 0x200)  # SizeOfImage, SizeOfHeaders
    struct.pack_into("<H", opt, 68, 10)  # Subsystem: EFI application
    struct.pack_into("<I", opt, 92, dirs)
    sections = b"".join(
        struct.pack("<8sIIIIIIHHI", name, 0x200, rva, 0x200, raw, 0, 0, 0, 0, flags)
        for name, rva, raw, flags in (
            (b".text", 0x1000, 0x200, 0x60000020),
            (b".data", 0x2000, 0x400 + gap, 0xC0000040),
        )
    )
    dos = b"MZ" + bytes(0x3A) + struct.pack("<I", 0x40)
    coff = struct.pack("<HHIIIHH", 0x14C, 2, 0, 0, 0, len(opt), 0x0102)
    headers = (dos + b"PE\0\0" + coff + opt + sections).ljust(0x200, b"\0")
    text = (b"\xc3" + bytes(range(1, 256))) * 2
    return headers + text + bytes(gap) + b"data" * 0x80 + tail


@dataclass(frozen=True)
class Signed:
    """An unsigned image, osslsigncode's signature of it by ``leaf`` and that signed again,
    nested, by ``leaf2`` (its intermediate added)."""

    unsigned: bytes
    signed: bytes
    nested: bytes
    signed_path: Path
    nested_path: Path


def _sign(pki: Pki, src: Path, out: Path, leaf: str, *extra: str) -> bytes:
    subprocess.run(
        [_tool("osslsigncode", "osslsigncode"), "sign", *extra, "-certs", pki.pem(leaf),
         "-key", pki.key(leaf), "-time", str(EPOCH), "-h", "sha256", "-in", src, "-out", out],
        check=True, capture_output=True,
    )  # fmt: skip
    return out.read_bytes()


def _signed(pki: Pki, d: Path, unsigned: bytes) -> Signed:
    (d / "unsigned.efi").write_bytes(unsigned)
    signed = _sign(pki, d / "unsigned.efi", d / "signed.efi", "leaf")
    nest = ("-nest", "-ac", str(pki.pem("inter2")))
    nested = _sign(pki, d / "signed.efi", d / "nested.efi", "leaf2", *nest)
    return Signed(unsigned, signed, nested, d / "signed.efi", d / "nested.efi")


def _grub(d: Path, target: str) -> bytes:
    out = d / f"grub-{target}.efi"
    subprocess.run(
        [_tool("grub-mkimage", "grub-common"), "-O", target, "-p", "/boot/grub", "-o", out,
         "normal"],
        check=True, capture_output=True,
    )  # fmt: skip
    return out.read_bytes()


@pytest.fixture(scope="module")
def grub(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Signed:
    """GRUB as a PE32+ image (x86_64-efi), signed and nested-signed."""
    if not Path("/usr/lib/grub/x86_64-efi/moddep.lst").exists():
        pytest.fail("GRUB's x86_64-efi modules are not installed: install.sh installs them "
                    "(Debian package grub-efi-amd64-bin)")  # fmt: skip
    d = tmp_path_factory.mktemp("grub")
    return _signed(pki, d, _grub(d, "x86_64-efi"))


@pytest.fixture(scope="module")
def pe32(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Signed:
    """The minimal PE32 image of :func:`_pe32` (its length not a multiple of 8), signed."""
    return _signed(pki, tmp_path_factory.mktemp("pe32"), _pe32())


@pytest.fixture(params=["grub", "pe32"])
def image(request: pytest.FixtureRequest) -> Signed:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


def _osslsigncode_digests(path: Path) -> list[str]:
    """The digests ``osslsigncode verify`` calculates for the image at ``path``, one for each
    signature it finds (its verdict on the chain aside: the test CAs are not in its store)."""
    osslsigncode = _tool("osslsigncode", "osslsigncode")
    r = subprocess.run([osslsigncode, "verify", "-in", path], capture_output=True, text=True)
    return [d.lower() for d in re.findall(r"Calculated message digest\s*:\s*([0-9A-F]+)", r.stdout)]


def test_digest_is_osslsigncodes(image: Signed, grub: Signed) -> None:
    """The digest of the signed images (and the unsigned, once padded to 8 bytes as signing
    pads it) is the one osslsigncode calculates, for the primary and the nested signature."""
    assert pe.pe_layout(image.unsigned).pe32_plus == (image is grub)
    digest = authenticode_digest(image.signed).hex()
    assert _osslsigncode_digests(image.signed_path) == [digest]
    assert _osslsigncode_digests(image.nested_path) == [digest, digest]
    assert authenticode_digest(image.nested).hex() == digest
    padded = image.unsigned + bytes(-len(image.unsigned) % 8)
    assert authenticode_digest(padded).hex() == digest
    # the PE32's length is no multiple of 8: unsigned, its last bytes are hashed without padding
    assert (authenticode_digest(image.unsigned).hex() == digest) == (image is grub)
    assert authenticode_digest(image.signed, "sha512") != authenticode_digest(image.signed)


def test_checksum_is_osslsigncodes(image: Signed) -> None:
    """osslsigncode writes the PE CheckSum :func:`pe_checksum` computes."""
    layout = pe.pe_layout(image.signed)
    for data in (image.signed, image.nested):
        stored = int.from_bytes(data[layout.checksum_offset :][:4], "little")
        assert stored == pe_checksum(data) != 0


def test_signatures_read(pki: Pki, grub: Signed) -> None:
    sigs = pe_signatures(grub.nested, "grub")
    assert [(s.where, s.nested) for s in sigs] == [
        ("signature 1", False),
        ("signature 1's nested signature 1", True),
    ]
    primary, nested = sigs
    digest = authenticode_digest(grub.signed)
    for s in sigs:
        assert (s.digest_algorithm, s.image_digest, s.signer_digest) == ("sha256", digest, "sha256")
        oids = [a.oid for a in s.signed_attributes]
        assert OID_CONTENT_TYPE in oids and OID_MESSAGE_DIGEST in oids
        # -time sets signingTime (UTCTime 2025-12-01 00:00:00)
        assert s.attribute(OID_SIGNING_TIME) == (b"\x17\x0d251201000000Z",)
    assert primary.signer_certificate() == pki.certs["leaf"]
    assert nested.signer_certificate() == pki.certs["leaf2"]
    assert pki.certs["inter2"] in nested.certificates
    assert primary.serial == pki.certs["leaf"].serial_number
    assert pe_signatures(grub.unsigned) == []
    assert [s.where for s in pe_signatures(grub.signed)] == ["signature 1"]


def test_verify_by_ca_and_by_leaf(pki: Pki, image: Signed) -> None:
    digest = authenticode_digest(image.signed)
    for trusted in ("ca", "leaf"):
        v = verify_pe(image.signed, [pki.certs["other"], pki.certs[trusted]], "grubx64.efi")
        assert v.anchor == pki.certs[trusted]
        assert v.signer_subject == "CN=nvkr test signer"
        assert (v.algorithm, v.image_digest) == ("sha256", digest)
        assert len(v.anchored) == 1


def test_verify_nested(pki: Pki, grub: Signed) -> None:
    """A nested signature anchors alone (through the intermediate it carries), and both do when
    both CAs are trusted, as Microsoft's 2011 and 2023 CAs both anchor Debian's shim."""
    v = verify_pe(grub.nested, [pki.certs["ca2"]])
    assert [(a.signature.where, a.signer_subject, a.anchor_subject) for a in v.anchored] == [
        ("signature 1's nested signature 1", "CN=nvkr test signer 2", "CN=nvkr test CA 2")
    ]
    v = verify_pe(grub.nested, [pki.certs["ca2"], pki.certs["ca"]])
    assert [a.anchor for a in v.anchored] == [pki.certs["ca"], pki.certs["ca2"]]
    # the intermediate itself may be the trusted one; the leaf's issuer must be among them
    assert verify_pe(grub.nested, [pki.certs["inter2"]]).anchor == pki.certs["inter2"]


def test_untrusted_signer_refused(pki: Pki, grub: Signed) -> None:
    with pytest.raises(IntegrityError) as e:
        verify_pe(grub.signed, [pki.certs["other"], pki.certs["ca2"]], "grubx64.efi")
    assert str(e.value) == (
        "grubx64.efi: no trusted signature: signature 1 is by 'CN=nvkr test signer' (issued by "
        "'CN=nvkr test CA'), which chains to none of the trusted certificates "
        "('CN=nvkr other CA', 'CN=nvkr test CA 2')"
    )
    with pytest.raises(IntegrityError, match="none given"):
        verify_pe(grub.signed, [])


def test_unsigned_refused(pki: Pki, grub: Signed) -> None:
    with pytest.raises(IntegrityError, match=r"grubx64\.efi is not signed"):
        verify_pe(grub.unsigned, [pki.certs["ca"]], "grubx64.efi")


def test_changed_byte_refused(pki: Pki, image: Signed) -> None:
    """One byte of a section changed: the digest no longer matches, for both signatures."""
    layout = pe.pe_layout(image.nested)
    at = layout.sections[0][0] + 7
    data = bytearray(image.nested)
    data[at] ^= 1
    trusted = [pki.certs["ca"], pki.certs["ca2"]]
    with pytest.raises(IntegrityError) as e:
        verify_pe(bytes(data), trusted, "image")
    message = str(e.value)
    assert message.count("(the image was changed after it was signed)") == 2
    digest = authenticode_digest(image.nested).hex()
    assert f"signature 1's image digest sha256:{digest} is not the image's" in message
    # the bytes excluded from the digest may change: the CheckSum
    data = bytearray(image.nested)
    data[layout.checksum_offset] ^= 1
    assert len(verify_pe(bytes(data), trusted).anchored) == 2


def test_changed_signature_refused(pki: Pki, grub: Signed) -> None:
    """The RSA signature's last byte or the signed attributes' messageDigest changed."""
    (entry,) = pe.win_certificates(grub.signed)
    sig = pe_signatures(grub.signed)[0]
    der_end = entry.offset + 8 + len(entry.content.rstrip(b"\0"))
    cases = {
        der_end - 1: "its RSA signature does not verify",
        grub.signed.index(sig.attribute(OID_MESSAGE_DIGEST)[0]) + 5: "its messageDigest",
    }
    for at, message in cases.items():
        data = bytearray(grub.signed)
        data[at] ^= 1
        with pytest.raises(IntegrityError, match=message):
            verify_pe(bytes(data), [pki.certs["ca"]])


def test_attach_is_osslsigncodes(image: Signed) -> None:
    """The unsigned image with a signed one's table attached is osslsigncode's output itself
    (the padding of the PE32's odd length, the Certificate Table entry and the CheckSum)."""
    assert attach_signatures(image.unsigned, image.signed) == image.signed
    assert attach_signatures(image.unsigned, image.nested) == image.nested


def test_attach_refuses_another_image(image: Signed) -> None:
    changed = bytearray(image.unsigned)
    changed[pe.pe_layout(image.unsigned).sections[-1][0]] ^= 1
    with pytest.raises(IntegrityError, match="they differ but for signatures"):
        attach_signatures(bytes(changed), image.signed, "uki.efi")
    with pytest.raises(IntegrityError, match=r"uki\.efi already has an attribute certificate"):
        attach_signatures(image.signed, image.signed, "uki.efi")
    with pytest.raises(IntegrityError, match=r"uki\.efi \(signed\) has no signatures"):
        attach_signatures(image.unsigned, image.unsigned, "uki.efi")


def _patch(offset: Callable[[pe.PeLayout, bytes], int], value: bytes) -> Callable[[bytes], bytes]:
    def patch(data: bytes) -> bytes:
        at = offset(pe.pe_layout(data), data)
        return data[:at] + value + data[at + len(value) :]

    return patch


def _opt(layout: pe.PeLayout, data: bytes) -> int:
    return layout.checksum_offset - 64


def _too_long(data: bytes) -> bytes:
    at, size = pe.pe_layout(data).cert_table
    return data[:at] + struct.pack("<I", size + 8) + data[at + 4 :]


MALFORMED: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "no MZ": (lambda d: b"ZM" + d[2:], "is not a PE image: no MS-DOS header"),
    "e_lfanew past the end": (
        lambda d: d[:0x3C] + struct.pack("<I", len(d)) + d[0x40:],
        r"no 'PE\\0\\0' signature",
    ),
    "ROM magic": (_patch(_opt, b"\x07\x01"), "magic is 0x107, not 0x10b"),
    "4 data directories": (
        _patch(lambda lay, d: lay.cert_entry_offset - 4 * 8 - 4, b"\x04\0\0\0"),
        "NumberOfRvaAndSizes is 4: no Certificate Table",
    ),
    "SizeOfHeaders past the end": (
        _patch(lambda lay, d: lay.checksum_offset - 4, struct.pack("<I", 1 << 30)),
        r"SizeOfHeaders \(0x40000000\) does not hold",
    ),
    "truncated": (lambda d: d[: pe.pe_layout(d).sections_end - 1], "past the file end"),
    "table not at the end": (lambda d: d + bytes(8), "Certificate Table entry"),
    "table past the end": (
        _patch(lambda lay, d: lay.cert_entry_offset + 4, struct.pack("<I", 1 << 20)),
        "Certificate Table entry",
    ),
    "table inside the sections": (
        _patch(lambda lay, d: lay.cert_entry_offset, struct.pack("<I", 0x200)),
        "Certificate Table entry",
    ),
    "WIN_CERTIFICATE revision 1": (
        _patch(lambda lay, d: lay.cert_table[0] + 4, b"\x00\x01"),
        "has revision 0x0100 and type 0x0002, not PKCS#7",
    ),
    "WIN_CERTIFICATE too long": (
        _too_long,
        r"the WIN_CERTIFICATE at 0x[0-9a-f]+ claims (\d+) bytes, the table has \d+ from there",
    ),
    "not SignedData": (
        lambda d: d.replace(bytes.fromhex("06092a864886f70d010702"), bytes.fromhex("06092a864886f70d010701"), 1),
        "signature 1 is not a PKCS#7 SignedData",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_refused(pe32: Signed, case: str) -> None:
    mutate, message = MALFORMED[case]
    with pytest.raises(IntegrityError, match=message):
        pe_signatures(mutate(pe32.signed), "image")


def test_gap_between_sections_refused() -> None:
    """Sections not end to end: the spec's digest, osslsigncode's and firmware's would differ."""
    with pytest.raises(IntegrityError, match=r"section .data \(raw data at 0x600\) leaves a gap"):
        authenticode_digest(_pe32(gap=0x200), what="image")


def test_malformed_nested_signature_named(pe32: Signed) -> None:
    oid_signed_data = bytes.fromhex("06092a864886f70d010702")
    at = pe32.nested.index(oid_signed_data, pe32.nested.index(oid_signed_data) + 1)
    data = pe32.nested[: at + 10] + b"\x01" + pe32.nested[at + 11 :]
    with pytest.raises(
        IntegrityError,
        match=r"^image: signature 1's nested signature 1 is not a PKCS#7 SignedData$",
    ):
        pe_signatures(data, "image")
