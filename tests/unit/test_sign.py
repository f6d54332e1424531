"""Keys and DSSE envelopes (nvkr.sign), and their interop with securesystemslib and in-toto.

The DSSE test vector comes from the spec (protocol.md); envelopes nvkr signs are verified by
securesystemslib's and in-toto's own DSSE code, envelopes they sign by nvkr's; statements are
parsed by in-toto-attestation's Statement v1 and SLSA provenance v1 bindings.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from nvkr.errors import IntegrityError, UsageError
from nvkr.provenance import BUILD_TYPE, BUILDER_ID, slsa_statement, statement_bytes
from nvkr.sign import (
    KEY_KINDS,
    PASSPHRASE_ENV,
    b64decode_any,
    check_envelope,
    generate_key,
    key_id,
    key_strength,
    load_private_key,
    load_public_key,
    pae,
    sign_envelope,
    verify_envelope,
)

IN_TOTO = "application/vnd.in-toto+json"


def statement() -> bytes:
    return statement_bytes(
        slsa_statement(
            [{"name": "node-agent", "digest": {"sha256": "a" * 64}}],
            build_type=BUILD_TYPE,
            external_parameters={"recipe": {"path": "recipes/default.yaml"}},
            internal_parameters={"epoch": 1764547200},
            resolved_dependencies=[
                {"name": "go", "uri": "https://example.org/go.whl", "digest": {"sha256": "b" * 64}}
            ],
            builder_id=BUILDER_ID,
            builder_version={"nvkr": "0.1.0"},
            invocation_id="sha256:" + "c" * 64,
        )
    )


@dataclass
class Pair:
    kind: str
    private: Any
    public: Any
    prefix: Path


@pytest.fixture(params=KEY_KINDS)
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Pair:
    made = generate_key(request.param, tmp_path / request.param)
    return Pair(
        request.param,
        load_private_key(made.private_path),
        load_public_key(made.public_path),
        tmp_path / request.param,
    )


# -- DSSE -----------------------------------------------------------------------------------------
def test_pae_matches_the_spec_test_vector() -> None:
    assert (
        pae("http://example.com/HelloWorld", b"hello world")
        == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )
    # lengths are of the UTF-8 bytes, decimal, no leading zeros; the empty payload is "0"
    assert pae("t\u00e9", b"") == b"DSSEv1 3 t\xc3\xa9 0 "


def test_sign_and_verify_both_key_types(pair: Pair) -> None:
    payload = statement()
    envelope = sign_envelope(payload, IN_TOTO, pair.private)
    assert set(envelope) == {"payload", "payloadType", "signatures"}
    assert base64.b64decode(envelope["payload"]) == payload
    assert envelope["payloadType"] == IN_TOTO
    (sig,) = envelope["signatures"]
    assert sig["keyid"] == key_id(pair.public) and len(sig["keyid"]) == 64
    raw = base64.b64decode(sig["sig"])
    if pair.kind == "ed25519":
        assert len(raw) == 64
    else:
        assert raw[0] == 0x30, "ECDSA signatures are ASN.1 DER, as cosign makes them"
    assert verify_envelope(envelope, [pair.public]) == payload
    # deterministic (Ed25519; ECDSA with RFC 6979): signing again gives the same envelope
    assert sign_envelope(payload, IN_TOTO, pair.private) == envelope


def test_verifier_accepts_url_safe_and_unpadded_base64(pair: Pair) -> None:
    payload = b"\xfb\xff\xfe" * 7 + b"?>" + statement()  # bytes whose base64 has + and /
    envelope = sign_envelope(payload, IN_TOTO, pair.private)
    url = copy.deepcopy(envelope)
    url["payload"] = base64.urlsafe_b64encode(payload).decode().rstrip("=")
    sig = base64.b64decode(envelope["signatures"][0]["sig"])
    url["signatures"][0]["sig"] = base64.urlsafe_b64encode(sig).decode().rstrip("=")
    assert "-" in url["payload"] or "_" in url["payload"]
    assert verify_envelope(url, [pair.public]) == payload
    with pytest.raises(IntegrityError, match="not valid base64"):
        b64decode_any("not*base64", "payload")


@pytest.mark.parametrize("tamper", ["swapped", "truncated", "payload", "type", "garbage"])
def test_tampered_envelopes_fail_with_exit_3(pair: Pair, tamper: str) -> None:
    envelope = sign_envelope(statement(), IN_TOTO, pair.private)
    bad = copy.deepcopy(envelope)
    sig = bad["signatures"][0]
    if tamper == "swapped":  # the signature of another payload by the same key
        sig["sig"] = sign_envelope(b"{}", IN_TOTO, pair.private)["signatures"][0]["sig"]
    elif tamper == "truncated":
        sig["sig"] = base64.b64encode(base64.b64decode(sig["sig"])[:-4]).decode()
    elif tamper == "payload":
        bad["payload"] = base64.b64encode(
            statement().replace(b"node-agent", b"evil-agent")
        ).decode()
    elif tamper == "type":
        bad["payloadType"] = "application/json"
    else:
        sig["sig"] = base64.b64encode(b"\x00" * 64).decode()
    with pytest.raises(IntegrityError) as info:
        verify_envelope(bad, [pair.public])
    assert info.value.exit_code == 3
    assert key_id(pair.public) in info.value.message


def test_wrong_key_and_no_key_fail(pair: Pair, tmp_path: Path) -> None:
    envelope = sign_envelope(statement(), IN_TOTO, pair.private)
    other = load_public_key(generate_key("ed25519", tmp_path / "other").public_path)
    with pytest.raises(IntegrityError, match="not signed by any given key") as info:
        verify_envelope(envelope, [other])
    assert info.value.exit_code == 3 and key_id(other) in info.value.message
    with pytest.raises(IntegrityError, match="not signed by any given key"):
        verify_envelope(envelope, [])
    # a signature without keyid (cosign leaves it empty) is tried with every key
    anonymous = copy.deepcopy(envelope)
    anonymous["signatures"][0]["keyid"] = ""
    assert check_envelope(anonymous, [other, pair.public]).keyids == (key_id(pair.public),)


@pytest.mark.parametrize(
    "envelope",
    [[], {"payloadType": IN_TOTO}, {"payload": "e30=", "payloadType": IN_TOTO, "signatures": []}],
)
def test_malformed_envelopes_are_integrity_errors(envelope: Any, pair: Pair) -> None:
    with pytest.raises(IntegrityError):
        verify_envelope(envelope, [pair.public])


# -- keys -----------------------------------------------------------------------------------------
@pytest.fixture
def umask() -> Iterator[Any]:
    old = os.umask(0o022)
    try:
        yield os.umask
    finally:
        os.umask(old)


@pytest.mark.parametrize("mask", [0o000, 0o022, 0o077, 0o277])
def test_key_files_have_fixed_modes_whatever_the_umask(
    tmp_path: Path, umask: Any, mask: int
) -> None:
    umask(mask)
    made = generate_key("ecdsa-p256", tmp_path / "release")
    assert made.private_path == tmp_path / "release.key"
    assert made.public_path == tmp_path / "release.pub"
    assert stat.S_IMODE(made.private_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(made.public_path.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["release.key", "release.pub"]
    assert made.private_path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert made.public_path.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    assert made.keyid == key_id(load_public_key(made.public_path))


def test_generate_never_overwrites(tmp_path: Path) -> None:
    made = generate_key("ed25519", tmp_path / "k")
    before = made.private_path.read_bytes()
    with pytest.raises(UsageError, match="already exists"):
        generate_key("ed25519", tmp_path / "k")
    assert made.private_path.read_bytes() == before
    with pytest.raises(UsageError, match="unknown key type"):
        generate_key("rsa", tmp_path / "r")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="cannot write"):
        generate_key("ed25519", tmp_path / "missing-dir" / "k")


def test_encrypted_key_needs_the_passphrase(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = generate_key("ecdsa-p256", tmp_path / "enc", b"correct horse")
    assert made.encrypted
    assert made.private_path.read_bytes().startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)
    with pytest.raises(UsageError, match=f"encrypted and {PASSPHRASE_ENV} is not set"):
        load_private_key(made.private_path)
    monkeypatch.setenv(PASSPHRASE_ENV, "wrong")
    with pytest.raises(UsageError, match=r"passphrase .* is wrong") as info:
        load_private_key(made.private_path)
    assert "correct horse" not in info.value.render()
    monkeypatch.setenv(PASSPHRASE_ENV, "correct horse")
    assert key_id(load_private_key(made.private_path)) == made.keyid


def _pem_body(path: Path) -> str:
    return "".join(path.read_text().splitlines()[1:-1])


@pytest.mark.parametrize(
    "case", ["missing", "directory", "garbage", "public-as-private", "private-as-public", "rsa"]
)
def test_bad_key_files_give_clear_errors_without_key_material(tmp_path: Path, case: str) -> None:
    made = generate_key("ecdsa-p256", tmp_path / "k")
    target = tmp_path / "bad.pem"
    loader: Any = load_private_key
    if case == "missing":
        target = tmp_path / "nope.key"
    elif case == "directory":
        target = tmp_path
    elif case == "garbage":
        target.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    elif case == "public-as-private":
        target = made.public_path
    elif case == "private-as-public":
        target, loader = made.private_path, load_public_key
    else:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        target.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    with pytest.raises(UsageError) as info:
        loader(target)
    text = info.value.render()
    assert str(target) in text
    assert _pem_body(made.private_path)[:40] not in text
    assert info.value.exit_code == 2


def test_keys_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = generate_key("ed25519", tmp_path / "k")
    monkeypatch.setenv("SIGNING_KEY", made.private_path.read_text())
    monkeypatch.setenv("VERIFY_KEY", made.public_path.read_text())
    assert key_id(load_private_key("env://SIGNING_KEY")) == made.keyid
    assert key_id(load_public_key("env://VERIFY_KEY")) == made.keyid
    monkeypatch.delenv("VERIFY_KEY")
    with pytest.raises(UsageError, match="VERIFY_KEY is not set"):
        load_public_key("env://VERIFY_KEY")


def test_key_strength() -> None:
    p256 = key_strength(ec.generate_private_key(ec.SECP256R1()).public_key())
    assert (p256.algorithm, p256.key_bits, p256.security_bits) == ("ecdsa-p256", 256, 128)
    assert key_strength(ec.generate_private_key(ec.SECP384R1())).security_bits == 192
    assert key_strength(ec.generate_private_key(ec.SECP521R1())).security_bits == 256
    ed = key_strength(ed25519.Ed25519PrivateKey.generate())
    assert (ed.algorithm, ed.security_bits) == ("ed25519", 128)


# -- interop: securesystemslib, in-toto, in-toto-attestation --------------------------------------
def _sslib_key(public: Any) -> Any:
    from securesystemslib.signer import SSlibKey

    return SSlibKey.from_crypto(public, keyid=key_id(public))


def test_securesystemslib_verifies_nvkr_envelopes(pair: Pair) -> None:
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError

    envelope = sign_envelope(statement(), IN_TOTO, pair.private)
    parsed = Envelope.from_dict(copy.deepcopy(envelope))
    assert parsed.pae() == pae(IN_TOTO, statement())
    accepted = parsed.verify([_sslib_key(pair.public)], 1)
    assert list(accepted) == [key_id(pair.public)]
    tampered = copy.deepcopy(envelope)
    tampered["payload"] = base64.b64encode(b'{"_type":"x"}').decode()
    with pytest.raises(VerificationError):
        Envelope.from_dict(tampered).verify([_sslib_key(pair.public)], 1)


def test_nvkr_verifies_securesystemslib_envelopes(pair: Pair) -> None:
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import CryptoSigner

    signer = CryptoSigner(pair.private, _sslib_key(pair.public))
    envelope = Envelope(statement(), IN_TOTO, {})
    envelope.sign(signer)
    assert verify_envelope(envelope.to_dict(), [pair.public]) == statement()


def test_in_toto_verifies_the_envelope_and_attestation_parses_the_statement(pair: Pair) -> None:
    from google.protobuf import json_format
    from in_toto.models.metadata import Envelope as InTotoEnvelope
    from in_toto.models.metadata import Metadata
    from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
    from in_toto_attestation.v1 import statement_pb2
    from in_toto_attestation.v1.statement import Statement

    envelope = sign_envelope(statement(), IN_TOTO, pair.private)
    metadata = Metadata.from_dict(copy.deepcopy(envelope))
    assert isinstance(metadata, InTotoEnvelope)
    key = _sslib_key(pair.public).to_dict()
    key["keyid"] = key_id(pair.public)
    metadata.verify_signature(key)  # raises SignatureVerificationError on failure

    doc = json.loads(metadata.payload)
    pb = json_format.ParseDict(doc, statement_pb2.Statement())  # unknown fields rejected
    Statement.copy_from_pb(pb).validate()
    assert pb.predicate_type == "https://slsa.dev/provenance/v1"
    provenance = json_format.ParseDict(doc["predicate"], provenance_pb2.Provenance())
    assert provenance.run_details.builder.id == BUILDER_ID
    assert provenance.build_definition.build_type == BUILD_TYPE
    assert [d.name for d in provenance.build_definition.resolved_dependencies] == ["go"]


def test_a_public_key_given_to_sign_with_is_refused_without_a_permission_warning(tmp_path, caplog):
    prefix = tmp_path / "k"
    generate_key("ed25519", prefix)
    pub = prefix.with_suffix(".pub")
    pub.chmod(0o644)  # as public keys are
    with pytest.raises(UsageError, match="holds a public key, not a private key"):
        load_private_key(pub)
    assert "readable by others" not in caplog.text  # was: a chmod 600 hint for a public key
