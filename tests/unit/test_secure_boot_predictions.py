"""A Secure Boot machine image's PCR predictions in the release set (issue 32, item 4): an in-toto
attestation of the machine image (its own manifest, ``subject`` = the image), not a layer of it;
signed as the provenance is by ``nvkr build --sign``, checked by ``nvkr verify``, pushed as a
referrer of the machine image to a real registry (distribution 2.8) and pulled back, and shown
by ``nvkr release-set show``. The set is assembled from hand-made action records: no build."""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from nvkr import releaseset
from nvkr.builders.node_image.builder import NodeImageBuilder
from nvkr.builders.node_image.secureboot import PREDICTION_TYPE, PREDICTIONS_ROLE
from nvkr.canonical import canonical_json
from nvkr.delivery.publish import publish_layout
from nvkr.errors import BuildError
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import blob_name
from nvkr.oci.referrers import list_referrers
from nvkr.oci.registry import RegistryClient
from nvkr.releaseset.signing import ANN_ATTACHMENT, ANN_KEYID, sign_release_set
from nvkr.releasespec import ReleaseSetSpec
from nvkr.sign import generate_key, load_private_key
from nvkr.store import Store
from tests.helpers.cli import invoke, invoke_output
from tests.helpers.results import results

NAME = "sb-k8s1.36"
EPOCH = 1764547200
KEY = "sha256:" + "7" * 64
VARIANT = {"gpu": "hopper", "kubernetes": "1.36", "arch": "amd64"}
QCOW2 = "node-image-hopper-k8s1.36-amd64.qcow2"
PCRS = {"4": "ab" * 32, "7": "cd" * 32, "11": "ef" * 32}


def _certificate() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "nvkr test owner")])
    now = datetime.datetime(2025, 12, 1, tzinfo=datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))  # fmt: skip
    return cert.public_bytes(serialization.Encoding.DER)


def _statement(disk: bytes, *, pcrs: dict[str, str] = PCRS, **changes: Any) -> bytes:
    statement = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": QCOW2, "digest": {"sha256": hashlib.sha256(disk).hexdigest()}}],
        "predicateType": PREDICTION_TYPE,
        "predicate": {"firmware": {"package": "ovmf", "version": "2025.02-8"},
                      "phase": "after-stub", "pcrs": pcrs},
    }  # fmt: skip
    return canonical_json({**statement, **changes})


def _assemble(root: Path, *, statement: bytes | None = None, attested: bool = True) -> Any:
    """The set's assembly: one Secure Boot machine image whose action output its QCOW2, the
    owner's certificate and its PCR predictions; ``attested``: the spec names them as an
    attestation (what the node-image builder's release fields say for a Secure Boot image)."""
    store = Store(root / "store")
    disk = b"QFI\xfb" + b"\0" * 4092
    der = _certificate()
    pem = (
        b"-----BEGIN CERTIFICATE-----\n" + base64.encodebytes(der) + b"-----END CERTIFICATE-----\n"
    )

    def output(name: str, data: bytes, media_type: str, role: str) -> dict[str, Any]:
        info = store.add_bytes(data)
        return {"name": name, "digest": info.digest, "size": info.size, "mediaType": media_type,
                "role": role}  # fmt: skip

    record = {
        "builder": "node-image",
        "outputs": [
            output(QCOW2, disk, mt.NVKR_QCOW2, "primary"),
            output("secure-boot-owner.der", der, "application/pkix-cert", "secure-boot-certificate"),
            output("secure-boot-owner.pem", pem, "application/x-pem-file", "secure-boot-certificate"),
            output("pcr-predictions.intoto.json", _statement(disk) if statement is None else statement,
                   mt.IN_TOTO_JSON, PREDICTIONS_ROLE),
        ],
        "metadata": {"annotations": {mt.ANN_NVKR_GPU: "hopper"}},
    }  # fmt: skip
    artifact: dict[str, Any] = {
        "name": "node-image", "kind": "machine-image", "actionKey": KEY, "builder": "node-image",
        "builderVersion": "3", "variant": VARIANT,
        "platform": {"os": "linux", "architecture": "amd64"},
        "artifactType": mt.NVKR_MACHINE_IMAGE, "dependencies": [],
    }  # fmt: skip
    if attested:
        artifact["attestations"] = [{"role": PREDICTIONS_ROLE, "predicateType": PREDICTION_TYPE}]
    spec = {
        "name": NAME, "epoch": EPOCH,
        "recipe": {"path": "recipes/sb.yaml", "digest": "sha256:" + "4" * 64},
        "lockfile": {"path": "lockfiles/sb.lock.json", "digest": "sha256:" + "5" * 64},
        "nvkrVersion": "0.1.0", "variants": [VARIANT], "artifacts": [artifact],
        "machineImages": ["node-image"], "clusterRelease": None, "nodePoolReleases": [],
    }  # fmt: skip
    result = releaseset.assemble(ReleaseSetSpec.from_params(spec), results({KEY: record}), store)
    return store, result


def _build(root: Path, **kwargs: Any) -> Path:
    store, result = _assemble(root, **kwargs)
    return releaseset.materialize(result, store, root / "dist")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory.mktemp("sb"))


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return generate_key("ecdsa-p256", tmp_path_factory.mktemp("key") / "release")


@pytest.fixture
def signed(built: Path, key: Any, tmp_path: Path) -> Path:
    layout = tmp_path / NAME
    shutil.copytree(built, layout)
    for p in layout.rglob("*"):  # the copy's blobs are the layout's own, not the store's
        p.chmod(0o755 if p.is_dir() else 0o644)
    sign_release_set(layout, load_private_key(key.private_path))
    return layout


def _json(layout: Path, digest: str) -> Any:
    return json.loads((layout / blob_name(digest)).read_bytes())


def _parts(layout: Path) -> dict[str, Any]:
    """The set's machine image, provenance and predictions (descriptor and manifest each)."""
    top = json.loads((layout / "index.json").read_bytes())
    index = _json(layout, top["manifests"][0]["digest"])
    found: dict[str, Any] = {}
    for m in index["manifests"][1:]:
        doc = _json(layout, m["digest"])
        if doc.get("artifactType") == mt.NVKR_MACHINE_IMAGE:
            found["image"] = (m, doc)
        elif (doc.get("annotations") or {}).get(ANN_ATTACHMENT) == PREDICTIONS_ROLE:
            found["predictions"] = (m, doc)
        elif doc.get("artifactType") == mt.IN_TOTO_JSON:
            found["provenance"] = (m, doc)
    return found


# -- assembly --------------------------------------------------------------------------------------
def test_the_predictions_are_an_attestation_of_the_machine_image_not_a_layer(built: Path) -> None:
    parts = _parts(built)
    image_desc, image = parts["image"]
    titles = [la["annotations"][mt.ANN_TITLE] for la in image["layers"]]
    assert titles == [QCOW2, "secure-boot-owner.der", "secure-boot-owner.pem"]

    desc, manifest = parts["predictions"]
    assert desc["annotations"] == {
        mt.ANN_NVKR_ARTIFACT: "node-image",
        ANN_ATTACHMENT: "pcr-predictions",
    }
    assert manifest["artifactType"] == mt.IN_TOTO_JSON
    assert manifest["subject"] == {k: image_desc[k] for k in ("mediaType", "digest", "size")}
    assert manifest["annotations"] == {
        mt.ANN_NVKR_ARTIFACT: "node-image",
        ANN_ATTACHMENT: "pcr-predictions",
        mt.ANN_CREATED: "2025-12-01T00:00:00Z",
    }
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == mt.IN_TOTO_JSON
    assert layer["annotations"] == {
        mt.ANN_TITLE: "pcr-predictions.intoto.json",
        mt.ANN_IN_TOTO_PREDICATE_TYPE: PREDICTION_TYPE,
    }
    qcow2 = (built / blob_name(image["layers"][0]["digest"])).read_bytes()
    assert (built / blob_name(layer["digest"])).read_bytes() == _statement(qcow2), "exact bytes"

    meta = json.loads(invoke("release-set", "show", str(built), "--json").stdout)["metadata"]
    (art,) = meta["artifacts"]
    assert art["attestations"] == [
        {"role": "pcr-predictions", "predicateType": PREDICTION_TYPE, "mediaType": mt.OCI_MANIFEST,
         "digest": desc["digest"], "size": desc["size"]}
    ]  # fmt: skip
    assert art["provenance"]["digest"] == parts["provenance"][0]["digest"]


def test_a_spec_without_attestations_keeps_the_predictions_a_layer(tmp_path: Path) -> None:
    """The spec decides (a release-set action's key covers it): without the release field, the
    set is what it was before, so no set's digest moves but a Secure Boot one's."""
    layout = _build(tmp_path, attested=False)
    parts = _parts(layout)
    assert "predictions" not in parts
    titles = [la["annotations"][mt.ANN_TITLE] for la in parts["image"][1]["layers"]]
    assert "pcr-predictions.intoto.json" in titles


def test_the_node_image_builder_names_the_attestation_for_a_secure_boot_image_only() -> None:
    builder = NodeImageBuilder()
    plain = SimpleNamespace(params={"deps": {"rootfs": KEY}})
    secure = SimpleNamespace(params={"deps": {"rootfs": KEY, "signedUki": KEY}})
    assert builder.release_fields(plain) == {}  # type: ignore[arg-type]
    assert builder.release_fields(secure) == {  # type: ignore[arg-type]
        "attestations": [{"role": "pcr-predictions", "predicateType": PREDICTION_TYPE}]
    }


@pytest.mark.parametrize(
    ("statement", "needle"),
    [
        (b"not json", "is no valid in-toto statement: not JSON"),
        (canonical_json({"_type": "https://in-toto.io/Statement/v1"}), "$.subject must be"),
        (
            _statement(b"another disk"),
            "is about sha256:" + hashlib.sha256(b"another disk").hexdigest(),
        ),
        (
            _statement(b"QFI\xfb" + b"\0" * 4092, predicateType="https://example.org/other"),
            "has predicateType 'https://example.org/other', expected " + PREDICTION_TYPE,
        ),
    ],
)
def test_assembly_refuses_predictions_that_are_not_a_statement_about_the_image(
    tmp_path: Path, statement: bytes, needle: str
) -> None:
    with pytest.raises(BuildError) as e:
        _assemble(tmp_path, statement=statement)
    assert "artifact node-image" in e.value.message and "pcr-predictions" in e.value.message
    assert needle in e.value.message


# -- signing and verify --------------------------------------------------------------------------
def test_signing_signs_the_predictions_and_verify_checks_them(signed: Path, key: Any) -> None:
    parts = _parts(signed)
    image_digest = parts["image"][0]["digest"]
    top = json.loads((signed / "index.json").read_bytes())
    sigs = [
        m
        for m in top["manifests"][1:]
        if _json(signed, m["digest"])["subject"]["digest"] == image_digest
    ]
    assert len(sigs) == 2, "the provenance's and the predictions'"
    (pred_sig,) = [m for m in sigs if mt.ANN_IN_TOTO_PREDICATE_TYPE in m["annotations"]]
    assert pred_sig["annotations"][mt.ANN_IN_TOTO_PREDICATE_TYPE] == PREDICTION_TYPE
    envelope = _json(signed, _json(signed, pred_sig["digest"])["layers"][0]["digest"])
    statement = _json(signed, parts["predictions"][1]["layers"][0]["digest"])
    assert envelope["payloadType"] == mt.IN_TOTO_JSON
    assert json.loads(base64.b64decode(envelope["payload"])) == statement

    code, text = invoke_output("verify", str(signed), "--key", str(key.public_path), "--json")
    assert code == 0, text
    (art,) = json.loads(text)["artifacts"]
    (att,) = art["attestations"]
    assert att["role"] == "pcr-predictions" and att["predicateType"] == PREDICTION_TYPE
    assert att["digest"] == parts["predictions"][0]["digest"]
    assert [s["digest"] for s in att["signatures"]] == [pred_sig["digest"]]
    assert att["signatures"][0]["verifiedBy"] == [att["signatures"][0]["keyids"][0]]
    assert len(art["signatures"]) == 1 and art["signatures"][0]["verifiedBy"]
    human = invoke("verify", str(signed), "--key", str(key.public_path), env={"COLUMNS": "200"})
    assert human.code == 0 and "pcr-predictions signed, verified by key" in human.stdout


def _forge(layout: Path, old: str, new: bytes) -> None:
    """Put ``new`` in the layout in place of blob ``old``, re-digesting every document that
    references it up to ``index.json`` (a consistent forgery, which only signatures catch)."""
    mapping: dict[str, str] = {}

    def put(data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        (layout / blob_name(digest)).write_bytes(data)
        return digest

    def swap(value: Any) -> Any:
        if isinstance(value, dict):
            out = {k: swap(v) for k, v in value.items()}
            if out.get("digest") != value.get("digest"):
                out["size"] = (layout / blob_name(out["digest"])).stat().st_size
            return out
        if isinstance(value, list):
            return [swap(v) for v in value]
        while value in mapping:  # a document re-digested twice: its latest
            value = mapping[value]
        return value

    mapping[old] = put(new)
    changed = True
    while changed:
        changed = False
        for path in sorted((layout / "blobs" / "sha256").iterdir()):
            digest = "sha256:" + path.name
            data = path.read_bytes()
            if (
                digest in mapping
                or not data.startswith(b"{")
                or not any(k.encode() in data for k in mapping)
            ):
                continue
            mapping[digest] = put(canonical_json(swap(json.loads(data))))
            changed = True
    (layout / "index.json").write_bytes(
        canonical_json(swap(json.loads((layout / "index.json").read_bytes())))
    )


def test_a_replaced_predictions_statement_fails_verify_naming_the_artifact(
    signed: Path, key: Any
) -> None:
    parts = _parts(signed)
    layer = parts["predictions"][1]["layers"][0]
    qcow2 = (signed / blob_name(parts["image"][1]["layers"][0]["digest"])).read_bytes()
    _forge(signed, layer["digest"], _statement(qcow2, pcrs={**PCRS, "7": "00" * 32}))
    done = invoke("verify", str(signed), "--key", str(key.public_path), "--json")
    assert done.code == 3, done.output
    messages = [p["message"] for p in json.loads(done.stdout)["problems"]]
    assert any(
        "of artifact node-image" in m
        and "the signed statement is neither the artifact's provenance" in m
        and "nor its pcr-predictions" in m
        for m in messages
    ), messages
    assert any(
        m.startswith("the pcr-predictions ") and "is not signed, and --key" in m for m in messages
    )


def test_a_tampered_predictions_signature_fails_verify_naming_the_artifact(
    signed: Path, key: Any
) -> None:
    top = json.loads((signed / "index.json").read_bytes())
    (sig,) = [m for m in top["manifests"][1:] if mt.ANN_IN_TOTO_PREDICATE_TYPE in m["annotations"]]
    envelope_digest = _json(signed, sig["digest"])["layers"][0]["digest"]
    envelope = _json(signed, envelope_digest)
    raw = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
    raw[len(raw) // 2] ^= 1
    envelope["signatures"][0]["sig"] = base64.b64encode(bytes(raw)).decode()
    _forge(signed, envelope_digest, canonical_json(envelope))
    code, text = invoke_output("verify", str(signed), "--key", str(key.public_path))
    assert code == 3, text
    assert "the pcr-predictions of artifact node-image" in text and "does not verify" in text


def test_an_unsigned_predictions_statement_fails_verify_with_a_key(signed: Path, key: Any) -> None:
    top = json.loads((signed / "index.json").read_bytes())
    top["manifests"] = [
        m
        for m in top["manifests"]
        if mt.ANN_IN_TOTO_PREDICATE_TYPE not in (m.get("annotations") or {})
    ]
    (signed / "index.json").write_bytes(canonical_json(top))
    code, text = invoke_output("verify", str(signed), "--key", str(key.public_path))
    assert code == 3, text
    assert "the pcr-predictions" in text and "of artifact node-image" in text
    assert "is not signed, and --key" in text
    assert invoke_output("verify", str(signed))[0] == 0, "unsigned is fine without --key"


def test_a_rebuild_attestation_names_the_predictions_among_its_inputs(
    signed: Path, key: Any, tmp_path: Path
) -> None:
    """``verify --attest``'s VSA lists the statements the run checked: the predictions too."""
    from nvkr.verify import verify_release_set
    from nvkr.verify.attest import Attester
    from nvkr.verify.attestations import LayoutAttestations

    report = verify_release_set(signed, keys=[])
    assert report.ok, report.problems
    out = tmp_path / "vsa.json"
    Attester(load_private_key(key.private_path), LayoutAttestations(signed), out).attest(
        report, signed
    )
    statement = json.loads(base64.b64decode(json.loads(out.read_bytes())["payload"]))
    inputs = {i["name"]: i for i in statement["predicate"]["inputAttestations"]}
    assert sorted(inputs) == ["pcr-predictions of node-image", "provenance of node-image"]
    layer = _parts(signed)["predictions"][1]["layers"][0]
    assert inputs["pcr-predictions of node-image"]["digest"] == {"sha256": layer["digest"][7:]}


# -- release-set show ------------------------------------------------------------------------------
def _secure_boot(text: str) -> Any:
    (image,) = json.loads(text)["machineImages"]
    return image["secureBoot"]


def test_release_set_show_reads_the_predictions_from_the_attestation(built: Path) -> None:
    code, text = invoke_output("release-set", "show", str(built), "--json")
    assert code == 0, text
    shown = _secure_boot(text)
    # the certificate, as `boot-test --mok` and `mokutil --import` take it: the set's DER bytes
    certificate = shown.pop("certificate")
    der = x509.load_pem_x509_certificate(certificate["pem"].encode()).public_bytes(
        serialization.Encoding.DER
    )
    assert certificate["sha256"] == "sha256:" + hashlib.sha256(der).hexdigest()
    blob = built / "blobs" / "sha256" / certificate["sha256"][7:]
    assert blob.read_bytes() == der, "the set's own DER certificate"
    assert shown == {
        "owner": "CN=nvkr test owner",
        "firmware": "ovmf 2025.02-8",
        "phase": "after-stub",
        "pcrs": PCRS,
    }
    human = invoke("release-set", "show", str(built), env={"COLUMNS": "200"})
    assert human.code == 0, human.output
    assert "secure boot node-image" in human.stdout and "CN=nvkr test owner" in human.stdout
    assert "4=abababababab" in human.stdout


def test_release_set_show_still_reads_predictions_held_as_a_layer(tmp_path: Path) -> None:
    """A set assembled before the predictions were an attestation holds them as a layer."""
    layout = _build(tmp_path, attested=False)
    code, text = invoke_output("release-set", "show", str(layout), "--json")
    assert code == 0, text
    assert _secure_boot(text)["pcrs"] == PCRS


# -- publish and pull ------------------------------------------------------------------------------
def test_publish_makes_the_predictions_and_their_signature_referrers_of_the_machine_image(
    registry: Any, signed: Path, key: Any, tmp_path: Path
) -> None:
    repo = "sb/set"
    client = RegistryClient(registry.host)
    report = publish_layout(signed, f"{registry.host}/{repo}", client)
    parts = _parts(signed)
    image = parts["image"][0]["digest"]
    referrers = {r["digest"]: r for r in list_referrers(client, repo, image)}
    predictions = referrers[parts["predictions"][0]["digest"]]
    assert predictions["artifactType"] == mt.IN_TOTO_JSON
    assert predictions["annotations"][ANN_ATTACHMENT] == "pcr-predictions"
    assert parts["provenance"][0]["digest"] in referrers
    signatures = [
        r
        for r in referrers.values()
        if r["artifactType"] == "application/vnd.dsse.envelope.v1+json"
    ]
    assert len(signatures) == 2 and all(ANN_KEYID in s["annotations"] for s in signatures)
    assert [s["annotations"].get(mt.ANN_IN_TOTO_PREDICATE_TYPE) for s in signatures].count(
        PREDICTION_TYPE
    ) == 1
    data, _, _ = client.get_manifest(repo, predictions["digest"])
    assert data == (signed / blob_name(predictions["digest"])).read_bytes()

    ref = f"{registry.host}/{repo}@{report.digest}"
    code, text = invoke_output("release-set", "show", ref, "--json", "--insecure")
    assert code == 0, text
    assert (
        _secure_boot(text)["pcrs"] == PCRS and _secure_boot(text)["owner"] == "CN=nvkr test owner"
    )

    out = tmp_path / "pulled"
    code, text = invoke_output("pull", ref, str(out), "--insecure", "--key", str(key.public_path))
    assert code == 0, text
    assert (out / "index.json").read_bytes() == (signed / "index.json").read_bytes()
    assert (out / blob_name(predictions["digest"])).is_file()
    code, text = invoke_output("verify", str(out), "--key", str(key.public_path), "--json")
    assert code == 0, text
    (art,) = json.loads(text)["artifacts"]
    assert art["attestations"][0]["signatures"][0]["verifiedBy"]
