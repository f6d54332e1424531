"""The owner's Secure Boot key and certificate: what signs the modules (and, later, the boot
loaders) of a node image that boots under Secure Boot with the owner's key enrolled as a MOK.

The certificate is public: a recipe names it as a source (pinned by sha256 in the lockfile like
any other), so its digest enters the key of every action that signs with it. The private key is
a build secret, like ``nvkr build --sign``'s: it comes from ``--secure-boot-key`` or
:data:`OWNER_KEY_ENV` (a file path or ``env://NAME``), is checked against the certificate before
anything builds, and never enters an action key, the store, a log or a message. While a signing
action runs it is written, unencrypted, to a file of mode 0600 in the action's private work dir
(the kernel's ``sign-file`` reads keys from files) and removed when the action ends.

Only RSA keys (PKCS#1 v1.5 signatures, 2048 bits or more) are accepted: those signatures are a
function of the key and the signed bytes alone, so the key holder gets the same signed module
from every build. :func:`signing_key_problem` says why the others are refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa
from cryptography.x509.oid import SignatureAlgorithmOID

from nvkr.errors import UsageError
from nvkr.sign import PASSPHRASE_ENV, decrypt_pem_key, read_key_text

#: Where ``nvkr build`` reads the owner's Secure Boot private key from when
#: ``--secure-boot-key`` is not given: a file path or ``env://NAME``.
OWNER_KEY_ENV: Final = "NVKR_SECURE_BOOT_KEY"
#: The smallest RSA modulus accepted (shim and the kernel take 2048 and up; NIST retires less).
MIN_RSA_BITS: Final = 2048
#: RSASSA-PSS as a public key algorithm (RFC 4055): a key restricted to PSS signatures.
_RSASSA_PSS: Final = SignatureAlgorithmOID.RSASSA_PSS


def signing_key_problem(key: object) -> str | None:
    """Why ``key`` (a public or private key) cannot sign Secure Boot artifacts reproducibly, or
    None when it can (RSA of at least :data:`MIN_RSA_BITS` bits)."""
    if isinstance(key, rsa.RSAPublicKey | rsa.RSAPrivateKey):
        if key.key_size < MIN_RSA_BITS:
            return (
                f"an RSA key of {key.key_size} bits is too short: use {MIN_RSA_BITS} bits or more"
            )
        return None
    if isinstance(key, ec.EllipticCurvePublicKey | ec.EllipticCurvePrivateKey):
        return (
            "an ECDSA key makes randomized signatures: OpenSSL (which the kernel's sign-file and "
            "osslsigncode sign with) draws a new nonce for every signature, so no two builds "
            "would give the same signed module or boot loader"
        )
    eddsa = (
        ed25519.Ed25519PublicKey,
        ed25519.Ed25519PrivateKey,
        ed448.Ed448PublicKey,
        ed448.Ed448PrivateKey,
    )
    if isinstance(key, eddsa):
        return (
            "an EdDSA key: UEFI firmware, shim (Authenticode) and the kernel's module signature "
            "check accept RSA signatures, not EdDSA ones"
        )
    if isinstance(key, dsa.DSAPublicKey | dsa.DSAPrivateKey):
        return "a DSA key makes randomized signatures, and neither UEFI nor the kernel takes them"
    return (
        f"a {type(key).__name__.lstrip('_')} is not an RSA key: Secure Boot signatures here are RSA"
    )


_HINT = (
    "make an RSA key and certificate, e.g. `openssl req -new -x509 -newkey rsa:3072 -nodes "
    "-sha256 -days 3650 -subj '/CN=Node image owner/' -keyout owner.key -out owner.crt`"
)
#: How to make the owner's key and certificate (a hint of errors elsewhere).
OWNER_KEY_HINT: Final = _HINT


@dataclass(frozen=True)
class OwnerCertificate:
    """The owner's X.509 certificate (``der``), read from ``where``."""

    der: bytes
    where: str
    cert: x509.Certificate = field(repr=False, compare=False)

    @property
    def digest(self) -> str:
        """``sha256:<hex>`` of the DER certificate (what action keys and reports name)."""
        return "sha256:" + hashlib.sha256(self.der).hexdigest()

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def subject(self) -> str:
        return self.cert.subject.rfc4514_string()

    @property
    def public_key(self) -> rsa.RSAPublicKey:
        key = self.cert.public_key()
        assert isinstance(key, rsa.RSAPublicKey)  # parse_certificate checked
        return key


def parse_certificate(data: bytes, where: str) -> OwnerCertificate:
    """The owner's certificate from PEM or DER ``data`` read from ``where`` (a file, a source).

    Raises:
        UsageError: not an X.509 certificate, or its key cannot sign reproducibly (names
            ``where`` and why: :func:`signing_key_problem`).
    """
    try:
        if b"-----BEGIN" in data:
            if b"-----BEGIN CERTIFICATE-----" not in data:
                raise ValueError("no CERTIFICATE block")
            cert = x509.load_pem_x509_certificate(data)
        else:
            cert = x509.load_der_x509_certificate(data)
    except ValueError as e:
        raise UsageError(
            f"{where} is not an X.509 certificate (PEM or DER): {e}",
            hint="give the owner's certificate, e.g. the owner.crt that `openssl req -x509` wrote",
        ) from e
    if cert.public_key_algorithm_oid == _RSASSA_PSS:
        raise UsageError(
            f"{where}: the certificate's key is an RSASSA-PSS key: PSS draws a random salt for "
            "every signature, so no two builds would give the same signed bytes",
            hint=_HINT,
        )
    try:
        problem = signing_key_problem(cert.public_key())
    except UnsupportedAlgorithm as e:
        raise UsageError(f"{where}: the certificate's key type is not supported: {e}") from e
    if problem is not None:
        raise UsageError(f"{where}: the certificate's key cannot be used: {problem}", hint=_HINT)
    return OwnerCertificate(cert.public_bytes(serialization.Encoding.DER), where, cert)


@dataclass(frozen=True)
class OwnerKey:
    """The owner's RSA private key, read from ``where`` (never shown: ``repr`` names the place)."""

    where: str
    key: rsa.RSAPrivateKey = field(repr=False, compare=False)

    def matches(self, cert: OwnerCertificate) -> bool:
        """Whether ``cert`` certifies this key (the same public key)."""
        return self.key.public_key().public_numbers() == cert.public_key.public_numbers()

    def check_matches(self, cert: OwnerCertificate) -> None:
        """Raises UsageError naming both when ``cert`` is not this key's certificate."""
        if not self.matches(cert):
            raise UsageError(
                f"the Secure Boot key {self.where} does not match the certificate {cert.where} "
                f"({cert.subject}, {cert.digest}): a signature made with it would not verify",
                hint="give the private key of that certificate, or put this key's certificate "
                "in the source the signing artifacts (signed-uki, signed-modules) name",
            )

    @contextlib.contextmanager
    def pem_file(self, directory: Path) -> Iterator[Path]:
        """The key as an unencrypted PKCS#8 PEM file of mode 0600 in ``directory`` (a private
        work dir), for tools that read keys from files; removed on exit, whatever happens."""
        path = directory / "owner-key.pem"
        data = self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            yield path
        finally:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def load_owner_key(ref: str | Path) -> OwnerKey:
    """The owner's private key from a PEM file or ``env://NAME`` (encrypted keys are decrypted
    with the passphrase in ``NVKR_KEY_PASSPHRASE``).

    Raises:
        UsageError: missing, unreadable, not a private key, a wrong passphrase, or a key type
            that cannot sign reproducibly (names the file or variable, never the content).
    """
    # not `nvkr keys generate`: its keys (ECDSA, Ed25519) cannot sign reproducibly here
    data, where = read_key_text(ref, "Secure Boot key", missing_hint=_HINT)
    if b"PRIVATE KEY-----" not in data:
        raise UsageError(
            f"{where} is not a PEM private key (no '-----BEGIN ... PRIVATE KEY-----' block)",
            hint="give the owner's RSA private key (PKCS#8 or PKCS#1 PEM)",
        )
    key = decrypt_pem_key(data, where, PASSPHRASE_ENV, "Secure Boot key")
    problem = signing_key_problem(key)
    if problem is not None:
        raise UsageError(f"the Secure Boot key {where} cannot be used: {problem}", hint=_HINT)
    assert isinstance(key, rsa.RSAPrivateKey)
    return OwnerKey(where, key)


#: The owner key given to this process (``nvkr build --secure-boot-key``), for the signing
#: actions that run in it; never written anywhere.
_GIVEN: list[OwnerKey] = []


def provide_owner_key(key: OwnerKey | None) -> None:
    """Make ``key`` the owner key of this process's signing actions (None: forget it)."""
    _GIVEN.clear()
    if key is not None:
        _GIVEN.append(key)


def has_owner_key() -> bool:
    """Whether this process was given an owner key (:func:`provide_owner_key`)."""
    return bool(_GIVEN)


def owner_key_for(cert: OwnerCertificate, action: str) -> OwnerKey:
    """The given owner key, checked against ``cert``, for ``action`` (its name, for messages).

    Raises:
        UsageError: no key was given, or it is not ``cert``'s.
    """
    if not _GIVEN:
        raise UsageError(
            f"{action} signs with the owner key of {cert.where} ({cert.subject}, {cert.digest}), "
            "and no Secure Boot key was given",
            hint=f"pass --secure-boot-key KEY (or set {OWNER_KEY_ENV}); a store or remote cache "
            "that holds the signed result needs no key",
        )
    key = _GIVEN[0]
    key.check_matches(cert)
    return key
