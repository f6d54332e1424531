"""Rebuild attestations: ``nvkr verify --rebuild --attest KEY`` writes a SLSA VSA v1 in a DSSE
envelope beside a layout or as a referrer of a REF, ``nvkr verify --policy`` counts the PASSED
ones by distinct trusted keys, ``nvkr release-set show`` lists them.

The rebuilt set is tests.helpers.recipes' scratch-tool recipe (one scratch image, about a second
to build), rebuilt offline from its build's store; the registry is CNCF distribution
(tests.helpers.registry, no referrers API: the fallback tag). The policy tests that need
hand-made attestations (another digest, an untrusted key, a malformed predicate) use the sample
release set (tests.helpers.sample_set) and sign them with nvkr's own DSSE code.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from nvkr.canonical import canonical_json
from nvkr.oci import mediatypes as mt
from nvkr.sign import generate_key, key_id, load_private_key, load_public_key, sign_envelope
from nvkr.verify import verify_release_set
from nvkr.verify.attest import Attester
from nvkr.verify.attestations import LayoutAttestations, file_name, vsa_dir
from nvkr.verify.vsa import VSA_PREDICATE, vsa_statement
from tests.helpers import REPO
from tests.helpers.recipes import SCRATCH_TOOL, write_scratch_tool_recipe
from tests.helpers.sample_set import build

SCHEMA = json.loads((REPO / "tests/fixtures/slsa/verification_summary_v1.schema.json").read_text())
T0 = 1_800_000_000  # 2027-01-15T08:00:00Z


@dataclass
class Keys:
    """Three key pairs: k1 and k2 trusted by the policies here, k3 by none."""

    root: Path

    def key(self, name: str) -> Path:
        return self.root / f"{name}.key"

    def pub(self, name: str) -> Path:
        return self.root / f"{name}.pub"


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    root = tmp_path / "keys"
    root.mkdir()
    for name, kind in (("k1", "ecdsa-p256"), ("k2", "ed25519"), ("k3", "ecdsa-p256")):
        generate_key(kind, root / name)  # type: ignore[arg-type]
    return Keys(root)


def write_policy(keys: Keys, minimum: int, names: tuple[str, ...] = ("k1", "k2")) -> Path:
    """A policy beside the keys, naming them relative to itself."""
    path = keys.root / f"policy-{minimum}-{'-'.join(names)}.yaml"
    path.write_text(
        f"attestations:\n  minimum: {minimum}\n  keys: [{', '.join(n + '.pub' for n in names)}]\n"
    )
    return path


def envelope_statement(data: bytes) -> dict[str, Any]:
    envelope = json.loads(data)
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    statement: dict[str, Any] = json.loads(base64.b64decode(envelope["payload"]))
    return statement


# -- the scratch-tool project -----------------------------------------------------------------
@dataclass
class Project:
    proj: Path
    store: Path
    layout: Path

    @property
    def digest(self) -> str:
        return str(json.loads((self.layout / "index.json").read_text())["manifests"][0]["digest"])


@pytest.fixture
def project(tmp_path: Path, http_dir: Any) -> Project:
    from tests.helpers.cli import invoke

    (http_dir.root / "tool").write_bytes(SCRATCH_TOOL)
    proj, store = tmp_path / "proj", tmp_path / "store"
    write_scratch_tool_recipe(proj, "tool", http_dir.url)
    for step in (("lock", "recipes/tool.yaml"), ("build", "recipes/tool.yaml", "--locked")):
        res = invoke(*step, cwd=proj, store=store)
        assert res.code == 0, res.stderr
    return Project(proj, store, proj / "dist" / "tool")


def rebuild(nvkr: Any, p: Project, target: object, *extra: object, offline: bool = True) -> Any:
    flags = ("--offline",) if offline else ()
    return nvkr("verify", target, "--rebuild", *flags, "--project", p.proj,
                "--seed-store", p.store, *extra, "--json")  # fmt: skip


def test_two_rebuilders_attest_and_satisfy_a_minimum_2_policy_one_does_not(
    project: Project, keys: Keys, nvkr: Any, tmp_path: Path
) -> None:
    p = project
    out = tmp_path / "k1.vsa.json"
    res = rebuild(nvkr, p, p.layout, "--attest", keys.key("k1"), "--attest-out", out)
    assert res.code == 0, res.output
    written = json.loads(res.stdout)["attestation"]
    assert written["result"] == "PASSED" and written["levels"] == ["NVKR_REBUILD_IDENTICAL"]
    assert Path(written["where"]).parent == vsa_dir(p.layout) == p.layout.with_name("tool.vsa")
    assert Path(written["where"]).read_bytes() == out.read_bytes()

    two = write_policy(keys, 2)
    res = nvkr("verify", p.layout, "--policy", two)
    assert res.code == 3, res.output
    assert "policy attestations: 1 PASSED rebuild attestation(s) by distinct trusted keys" in (
        res.stderr
    )
    assert "the policy requires 2" in res.stderr
    assert nvkr("verify", p.layout, "--policy", write_policy(keys, 1)).code == 0

    res = rebuild(nvkr, p, p.layout, "--attest", keys.key("k2"), "--policy", two)
    assert res.code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["policy"]["attestations"]["counted"] == 2
    assert sorted(a["keyid"][:8] for a in doc["attestations"] if a["counted"]) == sorted(
        json.loads(Path(a).read_text())["signatures"][0]["keyid"][:8]
        for a in (written["where"], doc["attestation"]["where"])
    )
    res = nvkr("verify", p.layout, "--policy", two)  # text output lists both
    assert res.code == 0, res.output
    assert "attestations: 2 counted of 2 found" in res.stdout


def test_the_vsa_validates_against_the_published_fields_and_its_dsse_verifies(
    project: Project, keys: Keys, nvkr: Any, tmp_path: Path
) -> None:
    """The VSA: an in-toto Statement v1 (in-toto-attestation's own validation), the SLSA VSA
    v1 predicate's published fields (tests/fixtures/slsa's schema), subjects the set's index
    and artifacts; the envelope verifies with the public key through in-toto's own DSSE code."""
    from google.protobuf import json_format
    from in_toto.models.metadata import Envelope as InTotoEnvelope
    from in_toto.models.metadata import Metadata
    from in_toto_attestation.v1 import statement_pb2
    from in_toto_attestation.v1.statement import Statement
    from securesystemslib.signer import CryptoSigner

    p = project
    out = tmp_path / "vsa.json"
    res = rebuild(nvkr, p, p.layout, "--attest", keys.key("k1"), "--attest-out", out)
    assert res.code == 0, res.output
    statement = envelope_statement(out.read_bytes())
    jsonschema.Draft202012Validator(SCHEMA).validate(statement)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == VSA_PREDICATE == "https://slsa.dev/verification_summary/v1"
    pb = json_format.ParseDict(statement, statement_pb2.Statement())  # unknown fields rejected
    Statement.copy_from_pb(pb).validate()

    predicate = statement["predicate"]
    assert predicate["verifier"] == {
        "id": "https://nvkr.dev/verifiers/nvkr",
        "version": {"nvkr": __import__("nvkr").__version__},
    }
    assert predicate["verificationResult"] == "PASSED"
    assert predicate["verifiedLevels"] == ["NVKR_REBUILD_IDENTICAL"]
    assert predicate["slsaVersion"] == "1.0"
    assert predicate["resourceUri"] == p.layout.resolve().as_uri()
    assert predicate["policy"] == {"uri": "https://nvkr.dev/policies/rebuild/v1"}
    assert time.time() - 600 < _epoch(predicate["timeVerified"]) <= time.time() + 1
    [prov] = predicate["inputAttestations"]  # the image's provenance statement, by its bytes
    blob = Path(prov["uri"].removeprefix("file://"))
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == prov["digest"]["sha256"]
    subjects = [(s["name"], "sha256:" + s["digest"]["sha256"]) for s in statement["subject"]]
    assert subjects[0] == ("tool", p.digest)
    assert [n for n, _ in subjects[1:]] == ["image (gpu=hopper,kubernetes=1.36,arch=amd64)"]

    metadata = Metadata.from_dict(copy.deepcopy(json.loads(out.read_bytes())))
    assert isinstance(metadata, InTotoEnvelope)
    public = load_public_key(keys.pub("k1"))
    sslib_key = CryptoSigner(load_private_key(keys.key("k1"))).public_key.to_dict()
    sslib_key["keyid"] = key_id(public)
    metadata.verify_signature(sslib_key)  # raises on a bad signature

    # the same rebuild with the policy file: the VSA names it by URI and digest
    policy = write_policy(keys, 1, ("k1",))
    res = rebuild(nvkr, p, p.layout, "--attest", keys.key("k1"), "--attest-out", out,
                  "--policy", policy)  # fmt: skip
    assert res.code == 0, res.output
    named = envelope_statement(out.read_bytes())["predicate"]["policy"]
    assert named == {
        "uri": policy.as_uri(),
        "digest": {"sha256": hashlib.sha256(policy.read_bytes()).hexdigest()},
    }


def _epoch(text: str) -> float:
    from nvkr.provenance import parse_timestamp

    return parse_timestamp(text).timestamp()


def test_a_failed_rebuild_attests_failed_and_exits_3(
    tmp_path: Path, keys: Keys, nvkr: Any, http_dir: Any
) -> None:
    """A path source's tree changed after the set was built (its digest in the lock is
    informational: the recipe and lockfile are the set's still): a rebuild from the project no
    longer gives the set, and says so in a signed FAILED VSA, which a policy never counts."""
    from tests.helpers.cli import invoke
    from tests.helpers.recipes import write_closure_project

    proj, store = write_closure_project(tmp_path, http_dir)
    for step in (("lock", "recipes/closure.yaml"), ("build", "recipes/closure.yaml", "--locked")):
        assert invoke(*step, cwd=proj, store=store).code == 0
    layout = proj / "dist" / "closure"
    digest = str(json.loads((layout / "index.json").read_text())["manifests"][0]["digest"])
    (proj / "conf" / "app.conf").write_text("key = another value\n")
    res = nvkr("verify", layout, "--rebuild", "--offline", "--project", proj, "--seed-store",
               store, "--attest", keys.key("k1"), "--json")  # fmt: skip
    assert res.code == 3, res.output
    assert "artifact image (image) is not reproducible" in res.stderr
    doc = json.loads(res.stdout)
    assert doc["attestation"]["result"] == "FAILED" and doc["attestation"]["levels"] == ["FAILED"]
    statement = envelope_statement(Path(doc["attestation"]["where"]).read_bytes())
    jsonschema.Draft202012Validator(SCHEMA).validate(statement)
    assert statement["predicate"]["verificationResult"] == "FAILED"
    assert "sha256:" + statement["subject"][0]["digest"]["sha256"] == digest

    res = nvkr("verify", layout, "--policy", write_policy(keys, 1, ("k1",)), "--json")
    assert res.code == 3
    [considered] = json.loads(res.stdout)["attestations"]
    assert considered["counted"] is False
    assert considered["reason"] == "verificationResult FAILED (levels FAILED)"


def test_attest_without_rebuild_is_a_usage_error(project: Project, keys: Keys, nvkr: Any) -> None:
    res = nvkr("verify", project.layout, "--attest", keys.key("k1"))
    assert res.code == 2 and "--attest needs --rebuild" in res.stderr
    res = nvkr("verify", project.layout, "--rebuild", "--attest-out", "x.json")
    assert res.code == 2 and "--attest-out needs --attest KEY" in res.stderr
    assert not vsa_dir(project.layout).exists()


# -- the registry -----------------------------------------------------------------------------
def test_attestations_pushed_as_referrers_count_and_show_lists_them(
    project: Project, keys: Keys, nvkr: Any, registry: Any, tmp_path: Path
) -> None:
    p = project
    repo = f"{registry.host}/vsa/tool"
    assert nvkr("publish", p.layout, f"{repo}:tool").code == 0
    ref = f"{repo}@{p.digest}"
    res = rebuild(nvkr, p, ref, "--attest", keys.key("k1"))
    assert res.code == 0, res.output
    first = json.loads(res.stdout)["attestation"]
    assert first["where"].startswith(f"{repo}@sha256:")
    statement = first["statement"]
    assert statement["predicate"]["resourceUri"] == f"oci://{ref}"
    assert statement["predicate"]["inputAttestations"][0]["uri"].startswith(f"oci://{repo}@")
    assert not vsa_dir(p.layout).exists(), "a REF's attestations go to the registry only"

    two = write_policy(keys, 2)
    res = nvkr("verify", ref, "--policy", two)
    assert res.code == 3 and "1 PASSED rebuild attestation(s)" in res.stderr
    time.sleep(1.1)  # another timeVerified: another attestation, by the same key
    res = rebuild(nvkr, p, ref, "--attest", keys.key("k1"), "--policy", two)
    assert res.code == 3, res.output
    again = json.loads(res.stdout)["attestation"]["where"]
    assert again != first["where"]
    # the earlier counts, whatever order the registry lists them in (by digest)
    assert f"{again}: key {first['keyid']} was counted already ({first['where']})" in res.stderr
    res = rebuild(nvkr, p, ref, "--attest", keys.key("k2"), "--policy", two)
    assert res.code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["policy"]["attestations"]["counted"] == 2
    assert {a["where"] for a in doc["attestations"] if a["counted"]} == {
        first["where"],
        doc["attestation"]["where"],
    }

    res = nvkr("release-set", "show", f"{repo}:tool", "--json")
    assert res.code == 0, res.output
    shown = json.loads(res.stdout)["attestations"]
    assert [(a["result"], a["levels"], a["verifier"], a["thisReleaseSet"]) for a in shown] == [
        ("PASSED", ["NVKR_REBUILD_IDENTICAL"], "https://nvkr.dev/verifiers/nvkr", True)
    ] * 3
    assert sorted(a["keyid"] for a in shown) == sorted(
        (first["keyid"], first["keyid"], doc["attestation"]["keyid"])
    )
    res = nvkr("release-set", "show", ref)
    assert res.code == 0, res.output
    assert (
        "3 rebuild attestations" in res.stdout and res.stdout.count("NVKR_REBUILD_IDENTICAL") == 3
    )

    # a pull leaves them in the registry: they are no signatures of the set
    pulled = tmp_path / "pulled"
    assert nvkr("pull", ref, pulled).code == 0
    assert nvkr("verify", pulled).code == 0
    index = json.loads((pulled / "index.json").read_text())
    assert [m["digest"] for m in index["manifests"]] == [p.digest]


# -- the policy's reasons, on hand-made attestations --------------------------------------------
def _sign_into(layout: Path, statement: Any, key: Path, name: str) -> None:
    envelope = sign_envelope(canonical_json(statement), mt.IN_TOTO_JSON, load_private_key(key))
    folder = vsa_dir(layout)
    folder.mkdir(exist_ok=True)
    (folder / name).write_bytes(canonical_json(envelope))


def test_ignored_attestations_are_listed_with_their_reasons_and_never_counted(
    tmp_path: Path, keys: Keys, nvkr: Any
) -> None:
    _, _, layout = build(tmp_path / "set")
    report = verify_release_set(layout)
    assert report.ok
    place = LayoutAttestations(layout)

    def attest(name: str, when: int) -> str:
        key = load_private_key(keys.key(name))
        Attester(key, place).attest(report, layout, now=when)
        return str(vsa_dir(layout) / file_name(key_id(key), _rfc3339(when)))

    k1 = attest("k1", T0)
    k1_again = attest("k1", T0 + 60)
    untrusted = attest("k3", T0)
    good = json.loads(base64.b64decode(json.loads(Path(k1).read_text())["payload"]))
    other = vsa_statement(
        metadata={"name": "another-set", "artifacts": []},
        index_digest="sha256:" + "e" * 64,
        passed=True,
        resource_uri="oci://registry.example/other@sha256:" + "e" * 64,
        policy={"uri": "https://nvkr.dev/policies/rebuild/v1"},
        input_attestations=[],
        time_verified=_rfc3339(T0),
    )
    _sign_into(layout, other, keys.key("k2"), "other-digest.json")
    malformed = copy.deepcopy(good)
    malformed["predicate"]["verificationResult"] = "OK"
    del malformed["predicate"]["timeVerified"]
    _sign_into(layout, malformed, keys.key("k2"), "malformed.json")
    failed = copy.deepcopy(good)
    failed["predicate"].update(verificationResult="FAILED", verifiedLevels=["FAILED"])
    _sign_into(layout, failed, keys.key("k2"), "failed.json")
    (vsa_dir(layout) / "garbage.json").write_text("not json")

    res = nvkr("verify", layout, "--policy", write_policy(keys, 2), "--json")
    assert res.code == 3, res.output
    doc = json.loads(res.stdout)
    reasons = {Path(a["where"]).name: a["reason"] for a in doc["attestations"]}
    assert [a for a in doc["attestations"] if a["counted"]] == [
        next(a for a in doc["attestations"] if a["where"] == k1)
    ]
    k1_id = key_id(load_public_key(keys.pub("k1")))
    assert reasons[Path(k1_again).name] == f"key {k1_id} was counted already ({k1})"
    assert reasons[Path(untrusted).name].startswith("untrusted key: signed by key id ")
    assert reasons["other-digest.json"].startswith("attests another digest: its subjects are ")
    assert f"not release set index {report.digest}" in reasons["other-digest.json"]
    assert reasons["malformed.json"].startswith("malformed: malformed VSA predicate: ")
    assert "$.predicate.timeVerified" in reasons["malformed.json"]
    assert (
        "$.predicate.verificationResult is 'OK', expected PASSED or FAILED"
        in (reasons["malformed.json"])
    )
    assert reasons["failed.json"] == "verificationResult FAILED (levels FAILED)"
    assert reasons["garbage.json"] == "malformed envelope: not JSON"
    problem = doc["problems"][0]["message"]
    assert problem.startswith("policy attestations: 1 PASSED rebuild attestation(s) by distinct")
    assert "counted already" in problem and "untrusted key" in problem

    # one more PASSED by k2: two distinct keys now, and the ignored ones still do not count
    attest("k2", T0 + 120)
    res = nvkr("verify", layout, "--policy", write_policy(keys, 2), "--json")
    assert res.code == 0, res.output
    assert json.loads(res.stdout)["policy"]["attestations"]["counted"] == 2
    res = nvkr("verify", layout, "--policy", write_policy(keys, 3), "--json")
    assert res.code == 2 and "no release set could pass" in res.stderr, "3 of 2 keys: never"

    res = nvkr("release-set", "show", layout, "--json")
    shown = {Path(a["where"]).name: a for a in json.loads(res.stdout)["attestations"]}
    assert shown["other-digest.json"]["thisReleaseSet"] is False
    assert shown["garbage.json"]["problem"] == "not JSON"
    assert shown[Path(k1).name]["timeVerified"] == _rfc3339(T0)


def test_a_policy_key_inline_or_missing(tmp_path: Path, keys: Keys, nvkr: Any) -> None:
    _, _, layout = build(tmp_path / "set")
    report = verify_release_set(layout)
    Attester(load_private_key(keys.key("k1")), LayoutAttestations(layout)).attest(report, layout)
    inline = tmp_path / "inline.yaml"
    pem = keys.pub("k1").read_text()
    inline.write_text("attestations:\n  minimum: 1\n  keys:\n    - |\n" + _indent(pem, 6))
    assert nvkr("verify", layout, "--policy", inline).code == 0
    missing = tmp_path / "missing.yaml"
    missing.write_text("attestations: {minimum: 1, keys: [keys/k1.pub, nowhere.pub]}\n")
    res = nvkr("verify", layout, "--policy", missing)
    assert res.code == 2 and f"{tmp_path / 'nowhere.pub'} does not exist" in res.stderr
    assert f"policy {missing}: attestations.keys[1]: " in res.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("attestations: {minimum: 0, keys: [k.pub]}\n")
    res = nvkr("verify", layout, "--policy", bad)
    assert res.code == 2 and "attestations.minimum" in res.stderr


def _indent(text: str, n: int) -> str:
    return "".join(" " * n + line + "\n" for line in text.splitlines())


def _rfc3339(seconds: int) -> str:
    from nvkr.provenance import timestamp

    return timestamp(seconds)


@pytest.mark.parametrize(
    ("text", "needle"),
    [  # policies no release set could pass, and misspelt ones: usage errors naming the field
        ("attestations: {minimum: 3, keys: [keys/k1.pub, keys/k2.pub]}",
         "attestations.minimum 3 is more than the 2 distinct key(s) it trusts"),
        ("attestations: {minimum: 2, keys: [keys/k1.pub, keys/k1.pub]}",
         "attestations.keys[1] is the key of attestations.keys[0] again"),
        ("attestations: {minimum: 2, keys: [keys/k1.pub, k1-copy.pub]}",
         "attestations.keys[1] is the key of attestations.keys[0] again"),
        ("attestations: {minimun: 2, keys: [keys/k1.pub]}",
         "attestations.minimun: Extra inputs are not permitted"),
        ("attestations:\n  minimum: 1\n  keys: [keys/k1.pub\n", "policy.yaml:5:1: not valid YAML: "),
    ],
)  # fmt: skip
def test_an_attestations_rule_that_cannot_pass_or_is_misspelt_exits_2(
    tmp_path: Path, keys: Keys, nvkr: Any, text: str, needle: str
) -> None:
    _, _, layout = build(tmp_path / "set")
    shutil.copy(keys.pub("k1"), tmp_path / "k1-copy.pub")
    policy = tmp_path / "policy.yaml"
    policy.write_text(text + "\n")
    res = nvkr("verify", layout, "--policy", policy)
    assert res.code == 2, res.output
    assert f"policy {policy}" in res.stderr and needle in res.stderr, res.stderr
