"""Keys and DSSE envelopes: what signs a release set and what checks its signatures.

Beside the data flow rather than in it: :func:`nvkr.releaseset.signing.sign_release_set` wraps
each provenance statement of a built release set (and a statement naming the release set index)
in a DSSE envelope made here, and ``nvkr verify`` checks those envelopes with
:func:`verify_envelope`. ``nvkr keys generate`` calls :func:`generate_key`.

Keys are ECDSA (NIST P-256, also P-384 and P-521 when read) or Ed25519, kept as PEM files:
the private key as PKCS#8 (optionally encrypted with a passphrase), the public key as
SubjectPublicKeyInfo, the format ``cosign verify --key`` reads. A key id is the lower-case hex
sha256 of the DER SubjectPublicKeyInfo. Signatures follow the DSSE protocol
(secure-systems-lab/dsse protocol.md, envelope.md): the signer signs ``PAE(payloadType,
payload)``; ECDSA signatures are ASN.1 DER over SHA-256 (P-256; SHA-384/512 for the larger
curves), as cosign makes them, and deterministic (RFC 6979), so signing the same bytes twice gives
the same envelope; Ed25519 signatures are the raw 64 bytes.

Key material never reaches a message, a log line or an exception: errors name the file (or
environment variable) and what is wrong with it, never its content.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import logging
import os
import stat
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from nvkr.errors import IntegrityError, UsageError

log = logging.getLogger("nvkr.sign")

#: A private key nvkr signs with.
PrivateKey = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
#: A public key nvkr verifies with.
PublicKey = ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey
KeyKind = Literal["ecdsa-p256", "ed25519"]

#: The key types ``nvkr keys generate`` makes.
KEY_KINDS: Final[tuple[KeyKind, ...]] = ("ecdsa-p256", "ed25519")
#: Where :func:`load_private_key` reads a passphrase from by default.
PASSPHRASE_ENV: Final = "NVKR_KEY_PASSPHRASE"
#: A key reference ``env://NAME`` reads the PEM text from the environment variable NAME (as
#: cosign's ``--key env://NAME`` does) instead of a file.
ENV_PREFIX: Final = "env://"

PRIVATE_KEY_MODE: Final = 0o600
PUBLIC_KEY_MODE: Final = 0o644

# NIST SP 800-57 Part 1 Rev. 5, Table 2: security strength of each curve, in bits.
_EC_SECURITY = {"secp256r1": 128, "secp384r1": 192, "secp521r1": 256}
_EC_HASH: dict[str, type[hashes.HashAlgorithm]] = {
    "secp256r1": hashes.SHA256,
    "secp384r1": hashes.SHA384,
    "secp521r1": hashes.SHA512,
}


# -- keys ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GeneratedKey:
    """What :func:`generate_key` wrote: ``private_path`` (``PREFIX.key``), ``public_path``
    (``PREFIX.pub``), ``keyid`` (64 hex) and ``kind``."""

    private_path: Path
    public_path: Path
    keyid: str
    kind: KeyKind
    encrypted: bool


def generate_key(kind: KeyKind, prefix: Path, passphrase: bytes | None = None) -> GeneratedKey:
    """Make a new key pair and write ``PREFIX.key`` and ``PREFIX.pub``.

    ``PREFIX.key`` is PKCS#8 PEM (``ENCRYPTED PRIVATE KEY`` with the best encryption the
    ``cryptography`` package offers when ``passphrase`` is given), mode 0600 from the moment it
    exists whatever the umask (created 0600 and narrowed by the umask at most, then set to 0600
    exactly); ``PREFIX.pub`` is SubjectPublicKeyInfo PEM, mode 0644. Each file is written under a
    temporary name and linked into place, so neither appears half-written and an existing file is
    never replaced.

    Args:
        kind: ``ecdsa-p256`` (NIST P-256, cosign's default) or ``ed25519``.
        prefix: path without suffix, e.g. ``keys/release`` → ``keys/release.key``/``.pub``.
        passphrase: encrypts the private key when given (non-empty).
    Returns:
        the paths, the key id (sha256 hex of the DER SubjectPublicKeyInfo) and the kind.
    Raises:
        UsageError: an unknown kind, an empty passphrase, either file already exists, or the
            directory is missing or not writable.
    """
    if kind not in KEY_KINDS:
        raise UsageError(f"unknown key type {kind!r}", hint=f"use one of {', '.join(KEY_KINDS)}")
    if passphrase is not None and not passphrase:
        raise UsageError(
            "the passphrase is empty", hint=f"unset {PASSPHRASE_ENV} for an unencrypted key"
        )
    prefix = Path(prefix)
    private_path = prefix.with_name(prefix.name + ".key")
    public_path = prefix.with_name(prefix.name + ".pub")
    for path in (private_path, public_path):
        if path.exists() or path.is_symlink():
            raise UsageError(
                f"{path} already exists; nvkr never overwrites a key",
                hint="choose another --out prefix or remove the old key pair first",
            )
    key: PrivateKey = (
        ec.generate_private_key(ec.SECP256R1())
        if kind == "ecdsa-p256"
        else ed25519.Ed25519PrivateKey.generate()
    )
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase)
        if passphrase
        else serialization.NoEncryption()
    )
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )
    public_pem = public_key_pem(key.public_key())
    _write_new(private_path, private_pem, PRIVATE_KEY_MODE)
    try:
        _write_new(public_path, public_pem, PUBLIC_KEY_MODE)
    except BaseException:
        private_path.unlink(missing_ok=True)  # never leave half a key pair
        raise
    return GeneratedKey(
        private_path=private_path,
        public_path=public_path,
        keyid=key_id(key),
        kind=kind,
        encrypted=passphrase is not None,
    )


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to the new file ``path`` with ``mode``, atomically, never replacing one."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    except OSError as e:
        raise UsageError(f"cannot write a key into {path.parent}: {e.strerror}") from e
    try:
        # mkstemp creates 0600 (narrowed by the umask, never widened); fchmod makes it exact
        # before a single byte is written.
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # fails when path exists: no clobbering, even in a race
        except FileExistsError as e:
            raise UsageError(f"{path} already exists; nvkr never overwrites a key") from e
        except OSError as e:
            raise UsageError(f"cannot write {path}: {e.strerror}") from e
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def public_key_pem(key: PublicKey) -> bytes:
    """``key`` as SubjectPublicKeyInfo PEM (``-----BEGIN PUBLIC KEY-----``)."""
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def key_id(key: PrivateKey | PublicKey) -> str:
    """The key id: lower-case hex sha256 of the DER SubjectPublicKeyInfo (64 characters)."""
    public = key.public_key() if isinstance(key, PrivateKey) else key
    der = public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(der).hexdigest()


def read_key_text(
    ref: str | Path,
    what: str,
    missing_hint: str = "make one with `nvkr keys generate --out PREFIX`",
) -> tuple[bytes, str]:
    """The PEM bytes behind a key reference (a path or ``env://NAME``), and how to name it;
    ``missing_hint``: how to make the key when the file is missing."""
    text = str(ref)
    if text.startswith(ENV_PREFIX):
        name = text[len(ENV_PREFIX) :]
        value = os.environ.get(name)
        if not name or value is None:
            raise UsageError(
                f"{what} {text}: environment variable {name or '(empty name)'} is not set",
                hint="export the PEM text in it, or give a file path",
            )
        return value.encode(), f"environment variable {name}"
    path = Path(text)
    try:
        data = path.read_bytes()
    except FileNotFoundError as e:
        raise UsageError(f"{what} {path} does not exist", hint=missing_hint) from e
    except IsADirectoryError as e:
        raise UsageError(f"{what} {path} is a directory, not a PEM file") from e
    except OSError as e:
        raise UsageError(f"{what} {path} cannot be read: {e.strerror}") from e
    return data, str(path)


def decrypt_pem_key(data: bytes, where: str, passphrase_env: str, what: str) -> object:
    """The private key in PEM ``data`` read from ``where``; an encrypted one decrypted with the
    passphrase in the environment variable ``passphrase_env``.

    Raises:
        UsageError: encrypted with ``passphrase_env`` unset, a wrong passphrase, or malformed
            (names ``where``, never the content).
    """
    encrypted = b"ENCRYPTED" in data
    passphrase: bytes | None = None
    if encrypted:
        value = os.environ.get(passphrase_env)
        if not value:
            raise UsageError(
                f"{where} is encrypted and {passphrase_env} is not set",
                hint=f"export {passphrase_env} with the key's passphrase",
            )
        passphrase = value.encode()
    try:
        return serialization.load_pem_private_key(data, password=passphrase)
    except (ValueError, TypeError, UnsupportedAlgorithm) as e:
        # cryptography's messages never hold key bytes, but say only what is needed anyway.
        reason = f"the passphrase in {passphrase_env} is wrong" if encrypted else "it is malformed"
        raise UsageError(f"cannot read the {what} in {where}: {reason}") from e


def load_private_key(ref: str | Path, passphrase_env: str = PASSPHRASE_ENV) -> PrivateKey:
    """Read a PKCS#8 PEM private key (ECDSA or Ed25519) from a file or ``env://NAME``.

    An encrypted key is decrypted with the passphrase in the environment variable
    ``passphrase_env``. A key file readable by group or others is used, with a warning.

    Returns:
        the private key.
    Raises:
        UsageError: the file or variable is missing or unreadable; it is not a PEM private key
            (e.g. a public key was given); the key is encrypted and ``passphrase_env`` is unset;
            the passphrase is wrong; the key type is not ECDSA (P-256/384/521) or Ed25519. The
            message names the file, never its content.
    """
    data, where = read_key_text(ref, "private key")
    if b"PUBLIC KEY-----" in data and b"PRIVATE KEY-----" not in data:
        raise UsageError(
            f"{where} holds a public key, not a private key",
            hint="sign with the PREFIX.key file; PREFIX.pub is for `nvkr verify --key`",
        )
    if not str(ref).startswith(ENV_PREFIX):
        with contextlib.suppress(OSError):
            if stat.S_IMODE(Path(ref).stat().st_mode) & 0o077:
                log.warning("private key %s is readable by others; chmod 600 it", where)
    if b"PRIVATE KEY-----" not in data:
        raise UsageError(
            f"{where} is not a PEM private key (no '-----BEGIN ... PRIVATE KEY-----' block)",
            hint="nvkr reads PKCS#8 PEM keys as `nvkr keys generate` writes them",
        )
    key = decrypt_pem_key(data, where, passphrase_env, "private key")
    if not isinstance(key, PrivateKey):
        raise UsageError(
            f"{where} holds a {type(key).__name__.removeprefix('_')}, which nvkr cannot sign with",
            hint="use an ECDSA (P-256) or Ed25519 key: `nvkr keys generate`",
        )
    _check_curve(key, where)
    return key


def load_public_key(ref: str | Path) -> PublicKey:
    """Read a SubjectPublicKeyInfo PEM public key (ECDSA or Ed25519) from a file or ``env://NAME``.

    Raises:
        UsageError: the file or variable is missing or unreadable, holds a private key or
            something other than a PEM public key, or a key type nvkr does not verify with.
    """
    data, where = read_key_text(ref, "public key")
    return parse_public_key(data, where)


def parse_public_key(data: bytes, where: str) -> PublicKey:
    """A SubjectPublicKeyInfo PEM public key (ECDSA or Ed25519) from its bytes; ``where`` names
    them in errors (a file, a variable, or a policy key such as ``policy p.yaml keys[0]``).

    Raises:
        UsageError: as :func:`load_public_key`.
    """
    if b"PRIVATE KEY-----" in data:
        raise UsageError(
            f"{where} holds a private key; verify with the public key",
            hint="pass PREFIX.pub to --key, and keep PREFIX.key to yourself",
        )
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm) as e:
        raise UsageError(
            f"{where} is not a PEM public key (SubjectPublicKeyInfo)",
            hint="nvkr reads the PREFIX.pub files `nvkr keys generate` writes (cosign's format)",
        ) from e
    if not isinstance(key, PublicKey):
        raise UsageError(
            f"{where} holds a {type(key).__name__.removeprefix('_')}, which nvkr cannot verify with",
            hint="use an ECDSA (P-256) or Ed25519 key",
        )
    _check_curve(key, where)
    return key


def _check_curve(key: PrivateKey | PublicKey, where: str) -> None:
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey) and (
        key.curve.name not in _EC_SECURITY
    ):
        raise UsageError(
            f"{where} is an ECDSA key on curve {key.curve.name}, which nvkr does not use",
            hint="use NIST P-256, P-384 or P-521",
        )


@dataclass(frozen=True)
class KeyStrength:
    """How strong a key is: ``algorithm`` (``ecdsa-p256``, ``ecdsa-p384``, ``ecdsa-p521``,
    ``ed25519``), ``key_bits`` (the curve size) and ``security_bits`` (NIST SP 800-57 Part 1,
    Table 2: P-256 and Ed25519 give 128, P-384 192, P-521 256)."""

    algorithm: str
    key_bits: int
    security_bits: int


def key_strength(key: PrivateKey | PublicKey) -> KeyStrength:
    """The :class:`KeyStrength` of ``key``; policies compare ``security_bits``.

    Security strength, not key size, is what compares across algorithms: an Ed25519 key (a
    255-bit curve) is as strong as ECDSA P-256, about 128 bits.
    """
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        size = key.curve.key_size
        return KeyStrength(f"ecdsa-p{size}", size, _EC_SECURITY[key.curve.name])
    return KeyStrength("ed25519", 256, 128)


# -- DSSE ----------------------------------------------------------------------------------------
def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE pre-authentication encoding (protocol.md "Signature definition").

    ``"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`` with LEN the byte length in ASCII
    decimal without leading zeros and ``type`` UTF-8. E.g. ``pae("http://example.com/HelloWorld",
    b"hello world") == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"``.
    """
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(t), t, len(payload), payload)


def b64decode_any(text: Any, what: str) -> bytes:
    """Standard or URL-safe base64, padded or not (DSSE envelope.md: verifiers MUST accept both).

    Raises:
        IntegrityError: not a string, or characters outside both alphabets, or a bad length.
    """
    if not isinstance(text, str):
        raise IntegrityError(f"{what}: expected a base64 string, got {type(text).__name__}")
    s = text.strip().replace("-", "+").replace("_", "/")
    s += "=" * (-len(s) % 4)
    try:
        return base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError) as e:
        raise IntegrityError(f"{what}: not valid base64") from e


def _sign_bytes(key: PrivateKey, data: bytes) -> bytes:
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key.sign(data)
    algorithm = _EC_HASH[key.curve.name]()
    return key.sign(data, ec.ECDSA(algorithm, deterministic_signing=True))


def _verify_bytes(key: PublicKey, signature: bytes, data: bytes) -> bool:
    try:
        if isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(signature, data)
        else:
            key.verify(signature, data, ec.ECDSA(_EC_HASH[key.curve.name]()))
    except (InvalidSignature, ValueError):
        return False
    return True


def sign_envelope(payload: bytes, payload_type: str, key: PrivateKey) -> dict[str, Any]:
    """A DSSE envelope over ``payload`` signed by ``key`` (envelope.md).

    Returns:
        ``{"payload": <std base64>, "payloadType": payload_type, "signatures": [{"keyid":
        <64 hex>, "sig": <std base64>}]}``; the signature is over :func:`pae` of the exact
        payload bytes (ECDSA: DER, SHA-256 for P-256, RFC 6979 deterministic; Ed25519: raw).
    """
    signature = _sign_bytes(key, pae(payload_type, payload))
    return {
        "payload": base64.b64encode(payload).decode(),
        "payloadType": payload_type,
        "signatures": [{"keyid": key_id(key), "sig": base64.b64encode(signature).decode()}],
    }


@dataclass(frozen=True)
class VerifiedEnvelope:
    """An envelope that passed :func:`check_envelope`: its ``payload`` bytes, ``payload_type``
    and the ``keyids`` (64 hex) of the given keys that verified a signature."""

    payload: bytes
    payload_type: str
    keyids: tuple[str, ...]


def envelope_parts(envelope: Any, what: str = "DSSE envelope") -> tuple[bytes, str, list[Any]]:
    """``(payload bytes, payloadType, signatures)`` of an envelope, its shape checked.

    Raises:
        IntegrityError: not a JSON object with a base64 ``payload``, a string ``payloadType``
            and a non-empty list of ``signatures`` each with a string ``sig``.
    """
    if not isinstance(envelope, Mapping):
        raise IntegrityError(f"{what}: not a JSON object")
    payload_type = envelope.get("payloadType")
    if not isinstance(payload_type, str) or not payload_type:
        raise IntegrityError(f"{what}: payloadType is missing or not a string")
    payload = b64decode_any(envelope.get("payload"), f"{what} payload")
    signatures = envelope.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise IntegrityError(f"{what}: no signatures")
    for i, s in enumerate(signatures):
        if not isinstance(s, Mapping) or not isinstance(s.get("sig"), str):
            raise IntegrityError(f"{what}: signatures[{i}] has no sig string")
        if not isinstance(s.get("keyid", ""), str):
            raise IntegrityError(f"{what}: signatures[{i}].keyid is not a string")
    return payload, payload_type, signatures


def check_envelope(
    envelope: Any, public_keys: Sequence[PublicKey], what: str = "DSSE envelope"
) -> VerifiedEnvelope:
    """Check a DSSE envelope's signatures against ``public_keys`` (protocol.md "Verification").

    A signature whose ``keyid`` names one of the keys must verify with that key; one with an
    empty or unknown ``keyid`` (the field is only a hint) is tried with every key and is
    ignored when none verifies it (another party's signature). At least one signature must
    verify.

    Raises:
        IntegrityError: the envelope is malformed; a signature by a given key fails (swapped,
            truncated or altered signature, or altered payload); or no signature verifies with
            any given key (the wrong key, or no key given). The message names ``what`` and the
            key ids, never key material.
    """
    payload, payload_type, signatures = envelope_parts(envelope, what)
    by_id = {key_id(k): k for k in public_keys}
    message = pae(payload_type, payload)
    verified: list[str] = []
    for i, s in enumerate(signatures):
        keyid = s.get("keyid", "")
        sig = b64decode_any(s["sig"], f"{what} signatures[{i}].sig")
        if keyid in by_id:
            if not _verify_bytes(by_id[keyid], sig, message):
                raise IntegrityError(
                    f"{what}: signature by key {keyid} does not verify",
                    hint="the signature or the payload was altered (or swapped with another)",
                )
            verified.append(keyid)
            continue
        for kid, key in by_id.items():
            if _verify_bytes(key, sig, message):
                verified.append(kid)
                break
    if not verified:
        found = sorted({str(s.get("keyid") or "(none)") for s in signatures})
        given = sorted(by_id) or ["(none)"]
        raise IntegrityError(
            f"{what}: not signed by any given key (signed by key id {', '.join(found)}; "
            f"given {', '.join(given)})",
            hint="pass the public key of the key that signed it with --key",
        )
    return VerifiedEnvelope(payload, payload_type, tuple(dict.fromkeys(verified)))


def verify_envelope(envelope: Any, public_keys: Sequence[PublicKey]) -> bytes:
    """The payload bytes of a DSSE envelope whose signature verifies (:func:`check_envelope`).

    Accepts standard and URL-safe base64 for ``payload`` and ``sig``.

    Raises:
        IntegrityError: as :func:`check_envelope`.
    """
    return check_envelope(envelope, public_keys).payload
