"""``nvkr copy`` between two real CNCF distribution 2.8 registries (no referrers API: every
referrer goes through the fallback tag).

The source holds a small signed release set (its provenance and SBOMs inside, its signatures
attached) and referrers pushed by hand: an image index of artifact manifests with a subject (the
shape of a source closure) and a signature of that index (a referrer of a referrer). A copy keeps
every digest and every referrer, ``nvkr pull --key`` and ``nvkr verify REF`` pass at the
destination; a re-copy uploads nothing and a copy within one registry mounts; a copy cut off
anywhere leaves the destination tag absent and a re-run completes it; a source serving other
bytes for a manifest exits 3 naming its digest; bad references exit 2 before any request; and
``skopeo copy --all`` stops at the release set's nested index, as the README says.
"""

from __future__ import annotations

import functools
import io
import json
import subprocess
from typing import Any

import pytest

from nvkr.delivery.publish import publish_layout
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import (
    LayoutBlob,
    artifact_manifest,
    descriptor,
    image_index,
    index_bytes,
    manifest_bytes,
)
from nvkr.oci.referrers import list_referrers, referrer_descriptor, update_referrers_tag
from nvkr.oci.registry import RegistryClient
from tests.helpers.cli import invoke, invoke_output
from tests.helpers.registry import Registry, run_proxy, run_registry
from tests.helpers.releasesets import NAME

SOURCE_CLOSURE = "application/vnd.nvkr.source-closure.v1"
SIGNATURE = "application/vnd.example.signature.v1"
REPO = "copy/src"


def _blob(client: RegistryClient, repo: str, data: bytes, media_type: str) -> dict[str, Any]:
    desc = descriptor(media_type, data)
    client.push_blob(repo, desc["digest"], len(data), functools.partial(io.BytesIO, data))
    return desc


def _manifest(
    client: RegistryClient, repo: str, doc: dict[str, Any], subject: str | None = None
) -> dict[str, Any]:
    """Push ``doc`` (a manifest or index) and, when it has a subject, list it in the subject's
    fallback tag as publish does; return its descriptor."""
    index = doc["mediaType"] == mt.OCI_INDEX
    data = index_bytes(doc) if index else manifest_bytes(doc)
    desc = descriptor(doc["mediaType"], data)
    client.push_manifest(repo, desc["digest"], data, doc["mediaType"])
    if subject is not None:
        blob = LayoutBlob(desc["digest"], desc["size"], desc["mediaType"], "test")
        update_referrers_tag(client, repo, subject, [referrer_descriptor(blob, doc)])
    return desc


@pytest.fixture(scope="module")
def source(registry: Registry, signed: dict[str, Any]) -> dict[str, Any]:
    """The signed set published to ``registry``'s ``copy/src``, with a source-closure index
    (two artifact manifests of three layers each) attached to the set, a signature attached to
    that index and one attached to a provenance manifest of the set."""
    client = RegistryClient(registry.host)
    report = publish_layout(signed["layout"], f"{registry.host}/{REPO}", client)
    top, _, _ = client.get_manifest(REPO, report.digest)
    set_desc = {"mediaType": mt.OCI_INDEX, "digest": report.digest, "size": len(top)}
    _blob(client, REPO, mt.EMPTY_JSON, mt.OCI_EMPTY)
    children = []
    for n in range(2):
        layers = [
            _blob(client, REPO, f"source {n} file {i}\n".encode() * 40, mt.OCTET_STREAM)
            for i in range(3)
        ]
        children.append(_manifest(client, REPO, artifact_manifest("application/x-source", layers)))
    closure = image_index(children, artifact_type=SOURCE_CLOSURE)
    closure["subject"] = set_desc
    closure_desc = _manifest(client, REPO, closure, subject=report.digest)

    def signature(subject: dict[str, Any], text: bytes) -> dict[str, Any]:
        layer = _blob(client, REPO, text, mt.OCTET_STREAM)
        doc = artifact_manifest(SIGNATURE, [layer], subject=subject)
        return _manifest(client, REPO, doc, subject=subject["digest"])

    provenance = next(
        m
        for m in json.loads(top)["manifests"]
        if json.loads(client.get_manifest(REPO, m["digest"])[0]).get("artifactType")
        == mt.IN_TOTO_JSON
    )
    signatures = [
        signature(closure_desc, b"signature of the source closure"),
        signature(
            {k: provenance[k] for k in ("mediaType", "digest", "size")}, b"signature of provenance"
        ),
    ]
    return {
        **signed,
        "client": client,
        "digest": report.digest,
        "ref": f"{registry.host}/{REPO}:{NAME}",
        "closure": closure_desc,
        "children": children,
        "signatures": signatures,
        "provenance": provenance["digest"],
    }


def _referrers(client: RegistryClient, repo: str, subject: str) -> set[str]:
    return {str(d["digest"]) for d in list_referrers(client, repo, subject)}


def _copy_json(*args: str) -> dict[str, Any]:
    result = invoke("copy", *args, "--json")
    assert result.code == 0, result.output
    return dict(json.loads(result.stdout.splitlines()[-1]))


def test_copy_keeps_every_digest_and_referrer(source, tmp_path):
    src: RegistryClient = source["client"]
    with run_registry(tmp_path / "second") as second:
        dest_ref = f"{second.host}/promoted/set"
        result = _copy_json(source["ref"], dest_ref)
        assert result["event"] == "result" and result["digest"] == source["digest"]
        dest = RegistryClient(second.host)
        repo = "promoted/set"
        assert dest.manifest_digest(repo, NAME) == source["digest"]
        # the same bytes: the index and each manifest it lists
        assert dest.get_manifest(repo, NAME)[0] == src.get_manifest(REPO, NAME)[0]
        # every referrer of the set (signatures, the closure index) is listed at the destination
        for subject in (source["digest"], source["closure"]["digest"], source["provenance"]):
            want = _referrers(src, REPO, subject)
            assert want and _referrers(dest, repo, subject) == want
        assert source["closure"]["digest"] in _referrers(dest, repo, source["digest"])
        assert source["signatures"][0]["digest"] in _referrers(
            dest, repo, source["closure"]["digest"]
        )
        # the closure's child manifests and their layers came along
        for child in source["children"]:
            data, _, digest = dest.get_manifest(repo, child["digest"])
            assert digest == child["digest"]
            for layer in json.loads(data)["layers"]:
                assert dest.blob_exists(repo, layer["digest"])
        assert result["referrerManifests"] >= 5  # provenance, SBOMs, signatures, closure, ...
        assert result["referrers"] == "fallback-tag"
        # consumers at the destination: pull with the key, verify the reference
        out = tmp_path / "pulled"
        at = f"{dest_ref}@{source['digest']}"
        code, text = invoke_output("pull", at, str(out), "--key", str(source["key"]))
        assert code == 0, text
        code, text = invoke_output("verify", at, "--key", str(source["key"]))
        assert code == 0, text
        # a re-copy sends nothing
        again = _copy_json(source["ref"], dest_ref)
        assert again["bytesUploaded"] == 0 and again["blobsUploaded"] == 0
        assert again["manifestsPushed"] == 0 and not again["tagMoved"]
        assert again["blobsSkipped"] == result["blobsUploaded"]


def test_copy_within_a_registry_mounts(registry, source):
    result = _copy_json(source["ref"], f"{registry.host}/copy/mounted:v1")
    assert result["blobsMounted"] == result["blobs"] > 0
    assert result["bytesUploaded"] == 0
    client = RegistryClient(registry.host)
    assert client.manifest_digest("copy/mounted", "v1") == source["digest"]


def test_interrupted_copy_leaves_no_tag_and_a_rerun_completes(source, tmp_path):
    with run_registry(tmp_path / "second") as second, run_proxy(second.host) as proxy:
        dest = RegistryClient(second.host)
        full = _copy_json("--jobs", "1", source["ref"], f"{proxy.host}/whole/set")
        log = [(e.method, e.path) for e in proxy.log]
        puts = [i for i, (m, p) in enumerate(log) if m == "PUT" and "/manifests/" in p]
        uploads = [i for i, (m, p) in enumerate(log) if m == "PUT" and "/blobs/" in p]
        # among the blob uploads, between two manifest pushes, and at the tag itself
        for n in (uploads[len(uploads) // 2], puts[len(puts) // 2], puts[-1]):
            repo = f"cut/at{n}"
            proxy.clear()
            proxy.kill_from(n + 1)
            code, text = invoke_output("copy", "--jobs", "1", source["ref"], f"{proxy.host}/{repo}")
            assert code != 0, text
            assert dest.manifest_digest(repo, NAME) is None, n
            proxy.clear()
            again = _copy_json(source["ref"], f"{proxy.host}/{repo}")
            assert dest.manifest_digest(repo, NAME) == source["digest"]
            assert again["bytesUploaded"] < full["bytesUploaded"] or n < uploads[0]


def test_a_source_serving_other_bytes_exits_3(registry, source, tmp_path):
    with run_registry(tmp_path / "second") as second, run_proxy(registry.host) as proxy:
        proxy.add("corrupt", method="GET", path=f"/manifests/{source['provenance']}", times=0)
        code, text = invoke_output("copy", f"{proxy.host}/{REPO}:{NAME}", f"{second.host}/bad/set")
        assert code == 3, text
        assert source["provenance"] in text
        assert RegistryClient(second.host).manifest_digest("bad/set", NAME) is None


def test_bad_references_exit_2(registry, source):
    other = "sha256:" + "1" * 64
    code, text = invoke_output("copy", source["ref"], f"{registry.host}/copy/x@{other}")
    assert code == 2, text
    assert other in text and source["digest"] in text
    assert RegistryClient(registry.host).manifest_digest("copy/x", NAME) is None
    code, text = invoke_output("copy", f"{registry.host}/{REPO}", f"{registry.host}/copy/y")
    assert code == 2, text
    assert "names no tag and no digest" in text
    code, text = invoke_output("copy", "not a reference", f"{registry.host}/copy/y")
    assert code == 2, text


def test_skopeo_copy_all_stops_at_the_nested_index(source, tmp_path):
    with run_registry(tmp_path / "second") as second:
        proc = subprocess.run(
            ["skopeo", "--insecure-policy", "copy", "--all", "--src-tls-verify=false",
             "--dest-tls-verify=false", f"docker://{source['ref']}",
             f"docker://{second.host}/skopeo/set:{NAME}"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert proc.returncode != 0
        assert "Unexpectedly received a manifest list instead of a manifest for a single image" in (
            proc.stderr
        )
        assert RegistryClient(second.host).manifest_digest("skopeo/set", NAME) is None
