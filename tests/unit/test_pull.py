"""Pulling release sets from real CNCF distribution 2.8: publish → pull → verify round-trips by
digest, signatures come along through the referrers fallback tag, and every failure (wrong key,
tampered blob, tag-only reference) leaves DIR absent. ``release-set show REF`` reads only the
index and the metadata.
"""

from __future__ import annotations

import json
import shutil

from nvkr.delivery.publish import publish_layout
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import LayoutReader
from nvkr.oci.registry import Reference, RegistryClient, fallback_tag
from nvkr.releaseset.remote import read_remote_metadata
from tests.helpers.cli import invoke_output
from tests.helpers.registry import run_proxy
from tests.helpers.releasesets import NAME, blobs, payload


def test_pull_round_trips_with_signatures(published, tmp_path):
    out = tmp_path / "pulled"
    code, _ = invoke_output("pull", f"{published['ref']}@{published['digest']}", str(out))
    assert code == 0
    original = LayoutReader(published["layout"]).index["manifests"]
    pulled = LayoutReader(out).index["manifests"]
    assert pulled[0]["digest"] == published["digest"] == original[0]["digest"]
    assert pulled[0]["annotations"][mt.ANN_REF_NAME] == NAME
    assert [m["digest"] for m in pulled] == [m["digest"] for m in original]
    assert pulled == original  # signature entries as the signed build wrote them
    assert blobs(out) == blobs(published["layout"])
    assert (out / "index.json").read_bytes() == (published["layout"] / "index.json").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pulled"]  # no temp dir left
    assert invoke_output("verify", str(out), "--key", str(published["key"]))[0] == 0
    code, text = invoke_output("release-set", "show", str(out), "--json")
    assert code == 0 and json.loads(text)["digest"] == published["digest"]


def test_pull_verifies_keys_before_writing(published, tmp_path):
    out = tmp_path / "pulled"
    ref = f"{published['ref']}@{published['digest']}"
    assert invoke_output("pull", ref, str(out), "--key", str(published["key"]))[0] == 0
    assert LayoutReader(out).index["manifests"][0]["digest"] == published["digest"]
    wrong = tmp_path / "wrong"
    code, text = invoke_output("pull", ref, str(wrong), "--key", str(published["other"]))
    assert code == 3, text
    assert not wrong.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pulled"]


def test_existing_dir_untouched_on_failure(published, tmp_path):
    ref = f"{published['ref']}@{published['digest']}"
    out = tmp_path / "pulled"
    assert invoke_output("pull", ref, str(out), "--key", str(published["key"]))[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    # A failed pull leaves an earlier pull's layout as it was.
    assert invoke_output("pull", ref, str(out), "--key", str(published["other"]))[0] == 3
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    # A good pull replaces it.
    assert invoke_output("pull", ref, str(out), "--key", str(published["key"]))[0] == 0
    # A directory that is not a layout, or a file, is never replaced, even by a good pull.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep").write_text("mine")
    assert invoke_output("pull", ref, str(mine), "--key", str(published["key"]))[0] == 2
    assert [p.name for p in mine.iterdir()] == ["keep"]
    file_target = tmp_path / "a-file"
    file_target.write_text("mine")
    assert invoke_output("pull", ref, str(file_target))[0] == 2
    assert file_target.read_text() == "mine"


def test_tampered_blob_exits_3_and_writes_nothing(registry, signed, tmp_path):
    repo = "pull/tampered"
    report = publish_layout(
        signed["layout"], f"{registry.host}/{repo}", RegistryClient(registry.host)
    )
    layer = payload(signed["layout"])
    path = registry.blob_data(layer.digest)
    saved = path.read_bytes()
    try:
        path.write_bytes(bytes([saved[0] ^ 1]) + saved[1:])
        out = tmp_path / "pulled"
        code, text = invoke_output("pull", f"{registry.host}/{repo}@{report.digest}", str(out))
        assert code == 3, text
        assert layer.digest in text
        assert not out.exists() and list(tmp_path.iterdir()) == []
    finally:
        path.write_bytes(saved)


def test_missing_blob_leaves_nothing(registry, published, tmp_path):
    with run_proxy(registry.host) as faulty:
        faulty.add("status", method="GET", path="/blobs/", status=404, code="BLOB_UNKNOWN", nth=2)
        out = tmp_path / "pulled"
        code, _ = invoke_output(
            "pull", f"{faulty.host}/{published['repo']}@{published['digest']}", str(out)
        )
    assert code != 0
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_tag_only_reference_is_a_usage_error(published, tmp_path):
    code, text = invoke_output("pull", f"{published['ref']}:{NAME}", str(tmp_path / "x"))
    assert code == 2 and "digest" in text
    assert not (tmp_path / "x").exists()


def test_unknown_tag_or_digest_says_what_was_looked_up(published, tmp_path):
    ref, missing = published["ref"], "sha256:" + "0" * 64
    code, text = invoke_output("pull", f"{ref}@{missing}", str(tmp_path / "x"))
    assert code == 1 and "404" in text and f"holds no manifest {missing}" in text
    assert not (tmp_path / "x").exists()
    code, text = invoke_output(
        "release-set", "show", ref
    )  # no tag: 'latest', which publish never writes
    assert code == 1 and "no tag given, so 'latest' was looked up" in text
    assert f"e.g. {ref}:<release set name>" in text
    code, text = invoke_output("release-set", "show", f"{ref}:nope")
    assert code == 1 and "has no tag 'nope'" in text
    assert invoke_output("release-set", "show", f"{ref}:{NAME}")[0] == 0
    # a digest of the repository that is no release set: a usage mistake, not tampering
    top = json.loads((published["layout"] / "index.json").read_bytes())["manifests"][0]
    index = json.loads((published["layout"] / "blobs" / "sha256" / top["digest"][7:]).read_bytes())
    member = index["manifests"][1]["digest"]
    code, text = invoke_output("pull", f"{ref}@{member}", str(tmp_path / "y"))
    assert code == 2 and "is not an nvkr release set index but a" in text, text
    assert not (tmp_path / "y").exists()


def test_show_reads_only_index_and_metadata(registry, proxy, published):
    ref = f"{proxy.host}/{published['repo']}:{NAME}"
    code, text = invoke_output("release-set", "show", ref, "--json")
    assert code == 0, text
    doc = json.loads(text)
    assert doc["digest"] == published["digest"] and doc["metadata"]["name"] == NAME
    fetched = {e.path.rsplit("/", 1)[-1] for e in proxy.requests("GET", "/blobs/")}
    _, top = read_remote_metadata(
        RegistryClient(registry.host), Reference.parse(ref.replace(proxy.host, registry.host))
    )
    assert top["digest"] == published["digest"]
    reader = LayoutReader(published["layout"])
    index = reader.read_json(reader.index["manifests"][0])
    config = reader.read_json(index["manifests"][0])["config"]["digest"]
    assert fetched == {config}  # the metadata only: no payload layer
    manifests = [e.path for e in proxy.requests("GET", "/manifests/")]
    # the index, the metadata manifest, and the referrers tag, read for the rebuild attestations
    # and for the source closure it lists (none here): distribution has no referrers API
    assert len(manifests) == 4 and all(
        m.endswith("/manifests/" + fallback_tag(top["digest"])) for m in manifests[2:]
    )
    code, text = invoke_output(
        "release-set", "show", f"{proxy.host}/{published['repo']}@{published['digest']}"
    )
    assert code == 0 and NAME in text


def test_show_by_reference_needs_no_payload(registry, signed, tmp_path):
    repo = "pull/nopayload"
    report = publish_layout(
        signed["layout"], f"{registry.host}/{repo}", RegistryClient(registry.host)
    )
    layer = payload(signed["layout"])
    path = registry.blob_data(layer.digest)
    saved = tmp_path / "saved"
    shutil.move(path, saved)
    try:
        code, text = invoke_output("release-set", "show", f"{registry.host}/{repo}:{NAME}")
        assert code == 0 and report.digest in text, text
    finally:
        shutil.move(saved, path)


def test_verify_by_registry_reference(published):
    """``nvkr verify REF`` pulls the set into a temporary directory (every digest checked on
    the way) and verifies it there: the right key passes, the wrong one exits 3, a tag-only
    reference is a usage error."""
    ref = f"{published['ref']}@{published['digest']}"
    code, text = invoke_output("verify", ref, "--key", str(published["key"]), "--json")
    assert code == 0, text
    report = json.loads(text)
    assert report["ok"] and report["releaseSet"]["digest"] == published["digest"]
    assert report["releaseSet"]["signatures"][0]["verifiedBy"]
    code, text = invoke_output("verify", ref, "--key", str(published["other"]))
    assert code == 3, text
    code, text = invoke_output("verify", published["ref"] + ":latest")
    assert code == 2 and "neither a directory nor a registry reference by digest" in text
