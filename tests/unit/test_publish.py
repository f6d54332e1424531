"""Publishing release sets to real CNCF distribution 2.8: order, referrers fallback tags,
re-publish, atomicity under injected faults at every request, the CLI's errors and exit codes.

The release sets are small but real (assembled with :func:`nvkr.releaseset.assemble`): a Go-like
binary per arch as an OCI artifact, a two-arch container image index, and their provenance.
skopeo and oras read what nvkr pushed.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from nvkr import releaseset
from nvkr.canonical import canonical_json
from nvkr.delivery.publish import publish_layout
from nvkr.errors import IntegrityError, RegistryError, UsageError
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import (
    LayoutReader,
    artifact_manifest,
    descriptor,
    manifest_bytes,
)
from nvkr.oci.referrers import update_referrers_tag
from nvkr.oci.registry import RegistryClient, fallback_tag
from tests.helpers.registry import (
    PASSWORD,
    USER,
    Registry,
    nvkr_cli,
    run_proxy,
    skopeo,
)
from tests.helpers.releasesets import EPOCH, NAME, make_set


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Layouts: ``a`` and ``b`` (a later epoch: new manifests, mostly the same layers), ``a2``
    (a's artifacts, other provenance), ``big`` (a 3 MiB binary)."""
    tmp = tmp_path_factory.mktemp("sets")
    return {
        "a": make_set(tmp / "a"),
        "b": make_set(tmp / "b", epoch=EPOCH + 86400),
        "a2": make_set(tmp / "a2", lock="6"),
        "big": make_set(tmp / "big", binary_size=3 << 20, epoch=EPOCH + 7),
    }


def root_digest(layout: Path) -> str:
    digest: str = json.loads((layout / "index.json").read_bytes())["manifests"][0]["digest"]
    return digest


def layout_manifests(layout: Path) -> dict[str, bytes]:
    reader = LayoutReader(layout)
    return {
        b.digest: reader.blob_path(b.digest).read_bytes()
        for b in reader.walk(deep=False)
        if b.media_type in mt.MANIFEST_TYPES
    }


def provenance(layout: Path) -> dict[str, dict[str, Any]]:
    """subject digest → the provenance manifest (as JSON) about it."""
    out = {}
    for digest, data in layout_manifests(layout).items():
        doc = json.loads(data)
        if "subject" in doc:
            out[doc["subject"]["digest"]] = {"digest": digest, "size": len(data), **doc}
    return out


@pytest.fixture
def repo(request: pytest.FixtureRequest) -> str:
    return "p/" + request.node.name.lower().replace("[", "-").replace("]", "")[:60]


# -- publish, read back --------------------------------------------------------------------------
def test_publish_then_skopeo_and_oras_read_the_same_bytes(registry, sets, repo, tmp_path):
    layout = sets["a"]
    report = publish_layout(layout, f"{registry.host}/{repo}", RegistryClient(registry.host))
    root = root_digest(layout)
    assert (report.tag, report.digest, report.name) == (NAME, root, NAME)
    assert report.blobs_uploaded == report.blobs and report.bytes_uploaded > 0
    assert report.manifests_pushed == report.manifests and report.tag_moved
    assert report.referrers == "fallback-tag" and len(report.referrers_tags) == 3
    for digest, data in layout_manifests(layout).items():
        raw = skopeo(
            "inspect", "--raw", "--tls-verify=false", f"docker://{registry.host}/{repo}@{digest}"
        )
        assert raw.encode() == data, digest
    tagged = skopeo(
        "inspect", "--raw", "--tls-verify=false", f"docker://{registry.host}/{repo}:{NAME}"
    )
    assert hashlib.sha256(tagged.encode()).hexdigest() == root[7:]
    # oras (another client) pulls a binary artifact nvkr pushed
    import oras.client

    meta = releaseset.read_metadata(layout)
    agent = next(a for a in meta["artifacts"] if a["name"] == "agent")
    client = oras.client.OrasClient(hostname=registry.host, insecure=True)
    files = client.pull(
        target=f"{registry.host}/{repo}@{agent['manifest']['digest']}",
        outdir=str(tmp_path / "oras"),
    )
    assert sorted(Path(f).name for f in files) == ["agent", "buildinfo.json"]
    pulled = (tmp_path / "oras" / "agent").read_bytes()
    assert pulled == LayoutReader(layout).blob_path(agent["primary"]["digest"]).read_bytes()


def test_republish_uploads_nothing(registry, sets, repo):
    client = RegistryClient(registry.host)
    publish_layout(sets["a"], f"{registry.host}/{repo}", client)
    again = publish_layout(sets["a"], f"{registry.host}/{repo}", client)
    assert again.bytes_uploaded == 0 and again.blobs_uploaded == 0 and again.bytes_sent == 0
    assert again.blobs_skipped == again.blobs and again.manifests_pushed == 0
    assert not again.tag_moved and again.previous == root_digest(sets["a"])
    cli = nvkr_cli("publish", str(sets["a"]), f"{registry.host}/{repo}")
    assert cli.returncode == 0, cli.stderr
    assert "0 bytes uploaded" in cli.stderr and "already at" in cli.stderr


def test_push_order_children_first_tag_last(registry, proxy, sets, repo):
    publish_layout(sets["a"], f"{proxy.host}/{repo}", RegistryClient(proxy.host))
    writes = [e for e in proxy.log if e.method in ("PUT", "PATCH", "POST")]
    position = {
        e.path.rsplit("/", 1)[1]: i for i, e in enumerate(writes) if "/manifests/" in e.path
    }
    last_blob = max(i for i, e in enumerate(writes) if "/blobs/" in e.path)
    assert last_blob < min(position.values()), "every blob before any manifest"
    root = root_digest(sets["a"])
    for digest, data in layout_manifests(sets["a"]).items():
        doc = json.loads(data)
        refs = [*(doc.get("manifests") or []), *(doc.get("layers") or []), doc.get("subject")]
        for ref in refs:
            if isinstance(ref, dict) and ref["digest"] in position:
                assert position[ref["digest"]] < position[digest], (
                    f"{ref['digest']} before {digest}"
                )
    referrers_tags = [i for p, i in position.items() if p.startswith("sha256-")]
    assert len(referrers_tags) == 3 and max(referrers_tags) < position[root]
    assert writes[-1].path.endswith(f"/manifests/{NAME}"), "the tag is the last write"


def test_referrers_fallback_tags_list_the_provenance(registry, sets, repo):
    client = RegistryClient(registry.host)
    publish_layout(sets["a"], f"{registry.host}/{repo}", client)
    for subject, prov in provenance(sets["a"]).items():
        data, media_type, _ = client.get_manifest(repo, fallback_tag(subject))
        assert media_type == mt.OCI_INDEX
        assert json.loads(data)["manifests"] == [
            {
                "mediaType": mt.OCI_MANIFEST,
                "digest": prov["digest"],
                "size": prov["size"],
                "artifactType": mt.IN_TOTO_JSON,
                "annotations": prov["annotations"],
            }
        ]


def test_two_publishers_attach_to_the_same_subject(registry, sets, repo):
    """Sets a and a2 hold the same artifacts with other provenance; published at the same time
    into one repository, every subject's fallback tag lists both provenance manifests."""
    errors: list[BaseException] = []

    def publish(layout: Path, tag: str) -> None:
        try:
            publish_layout(layout, f"{registry.host}/{repo}:{tag}", RegistryClient(registry.host))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=publish, args=(sets[k], k)) for k in ("a", "a2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    client = RegistryClient(registry.host)
    a, a2 = provenance(sets["a"]), provenance(sets["a2"])
    assert a.keys() == a2.keys()
    for subject in a:
        listed = json.loads(client.get_manifest(repo, fallback_tag(subject))[0])["manifests"]
        assert [m["digest"] for m in listed] == sorted(
            [a[subject]["digest"], a2[subject]["digest"]]
        )


def test_concurrent_merges_keep_every_entry(registry, repo):
    client = RegistryClient(registry.host)
    subject = "sha256:" + hashlib.sha256(repo.encode()).hexdigest()
    # referrers must exist in the repository: an index may only list manifests it holds
    client.push_blob(repo, mt.EMPTY_DIGEST, 2, lambda: io.BytesIO(mt.EMPTY_JSON))
    entries = []
    for n in range(12):
        doc = {
            "schemaVersion": 2,
            "mediaType": mt.OCI_MANIFEST,
            "artifactType": f"application/x.t{n}",
            "config": mt.empty_descriptor(),
            "layers": [mt.empty_descriptor()],
            "subject": {"mediaType": mt.OCI_MANIFEST, "digest": subject, "size": 1},
        }
        data = manifest_bytes(doc)
        digest = client.push_manifest(
            repo, "sha256:" + hashlib.sha256(data).hexdigest(), data, mt.OCI_MANIFEST
        )
        entries.append({"mediaType": mt.OCI_MANIFEST, "digest": digest, "size": len(data)})
    errors: list[BaseException] = []

    def writer(part: list[dict[str, Any]]) -> None:
        try:
            update_referrers_tag(RegistryClient(registry.host), repo, subject, part)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(entries[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    listed = json.loads(client.get_manifest(repo, fallback_tag(subject))[0])["manifests"]
    assert sorted(m["digest"] for m in listed) == sorted(e["digest"] for e in entries)
    assert update_referrers_tag(client, repo, subject, entries[:3]) is False, "nothing to add"


def test_referrers_tag_retries_a_412(registry, proxy, sets, repo):
    proxy.add("status", status=412, method="PUT", path="/manifests/sha256-")
    report = publish_layout(sets["a"], f"{proxy.host}/{repo}", RegistryClient(proxy.host))
    assert report.referrers_tags and proxy.requests("PUT", "/manifests/sha256-")[0].status == 412
    client = RegistryClient(registry.host)
    for subject in provenance(sets["a"]):
        assert client.manifest_digest(repo, fallback_tag(subject)) is not None


def test_a_registry_with_the_referrers_api_needs_no_fallback_tag(registry, proxy, sets, repo):
    empty = json.dumps({"schemaVersion": 2, "mediaType": mt.OCI_INDEX, "manifests": []}).encode()
    proxy.add("status", status=200, method="GET", path="/referrers/", body=empty, times=0)
    report = publish_layout(sets["a"], f"{proxy.host}/{repo}", RegistryClient(proxy.host))
    assert report.referrers == "api" and report.referrers_tags == []
    assert proxy.requests(path="/manifests/sha256-") == []
    assert len(proxy.requests("GET", "/referrers/")) == 1, "asked once per publish"


def test_a_referrers_tag_holding_something_else(registry, sets, repo):
    client = RegistryClient(registry.host)
    publish_layout(sets["a"], f"{registry.host}/{repo}:x", client)
    subject = next(iter(provenance(sets["a"])))
    some_manifest = next(
        d for d, data in layout_manifests(sets["a"]).items() if b'"layers"' in data
    )
    client.push_manifest(
        repo, fallback_tag(subject), layout_manifests(sets["a"])[some_manifest], mt.OCI_MANIFEST
    )
    with pytest.raises(RegistryError, match="is not a referrers index"):
        publish_layout(sets["a2"], f"{registry.host}/{repo}:y", client)
    assert client.manifest_digest(repo, "y") is None


def attach(layout: Path, subject: dict[str, Any], payload: bytes) -> dict[str, Any]:
    """Add a signature-like referrer of ``subject`` beside the release set in ``index.json``, as
    ``nvkr build --sign`` does; return its descriptor."""
    blobs = layout / "blobs" / "sha256"
    envelope = descriptor("application/vnd.dsse.envelope.v1+json", payload)
    doc = artifact_manifest("application/vnd.dsse.envelope.v1+json", [envelope], subject=subject)
    data = manifest_bytes(doc)
    for blob in (payload, data, mt.EMPTY_JSON):
        path = blobs / hashlib.sha256(blob).hexdigest()
        if not path.exists():
            path.write_bytes(blob)
    entry = descriptor(mt.OCI_MANIFEST, data, annotations={"dev.nvkr.attachment": "signature"})
    index = json.loads((layout / "index.json").read_bytes())
    index["manifests"].append(entry)
    (layout / "index.json").write_bytes(canonical_json(index))
    return entry


def test_signatures_beside_the_release_set_are_published(registry, sets, repo, tmp_path):
    layout = tmp_path / "signed"
    shutil.copytree(sets["a"], layout)
    for p in layout.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    root = json.loads((layout / "index.json").read_bytes())["manifests"][0]
    on_root = attach(layout, {k: root[k] for k in ("mediaType", "digest", "size")}, b"sig-1")
    stranger = {"mediaType": mt.OCI_MANIFEST, "digest": "sha256:" + "e" * 64, "size": 3}
    elsewhere = attach(layout, stranger, b"sig-2")  # about something not in this set: left out
    client = RegistryClient(registry.host)
    report = publish_layout(layout, f"{registry.host}/{repo}", client)
    assert report.digest == root["digest"] and report.tag == NAME
    assert client.manifest_digest(repo, on_root["digest"]) == on_root["digest"]
    assert client.manifest_digest(repo, elsewhere["digest"]) is None
    listed = json.loads(client.get_manifest(repo, fallback_tag(root["digest"]))[0])["manifests"]
    assert [m["digest"] for m in listed] == [on_root["digest"]]
    assert listed[0]["artifactType"] == "application/vnd.dsse.envelope.v1+json"


def test_mount_from_another_repository(registry, sets, repo):
    client = RegistryClient(registry.host)
    publish_layout(sets["a"], f"{registry.host}/{repo}", client)
    report = publish_layout(sets["a"], f"{registry.host}/{repo}-copy", client, mount_from=[repo])
    assert report.blobs_mounted == report.blobs and report.bytes_uploaded == 0


def test_large_blobs_go_in_chunks_and_survive_a_drop(registry, proxy, sets, repo):
    client = RegistryClient(proxy.host, chunk_size=1 << 20)
    proxy.add("drop-mid-body", method="PATCH", nth=2)
    report = publish_layout(sets["big"], f"{proxy.host}/{repo}", client)
    assert report.bytes_sent > report.bytes_uploaded > 6 << 20
    assert len(proxy.requests("PATCH")) >= 4
    assert RegistryClient(registry.host).manifest_digest(repo, NAME) == root_digest(sets["big"])


# -- atomicity --------------------------------------------------------------------------------------
def tag_of(registry: Registry, repo: str, tag: str = NAME) -> str | None:
    return RegistryClient(registry.host).manifest_digest(repo, tag)


def complete(registry: Registry, repo: str, layout: Path) -> None:
    """The tag points at ``layout``'s set and the registry holds its whole closure."""
    client = RegistryClient(registry.host)
    assert tag_of(registry, repo) == root_digest(layout)
    for blob in LayoutReader(layout).walk(deep=False):
        if blob.media_type in mt.MANIFEST_TYPES:
            assert client.manifest_digest(repo, blob.digest) == blob.digest
        else:
            assert client.blob_exists(repo, blob.digest), blob


@pytest.mark.slow  # seconds: out of the fast tier (pyproject's markers)
def test_killed_at_any_request_the_tag_is_old_or_absent_and_a_rerun_completes(registry, sets):
    a, b = sets["a"], sets["b"]
    # how many requests a publish of b over a takes
    with run_proxy(registry.host) as counter:
        publish_layout(a, f"{registry.host}/p/kill-count", RegistryClient(registry.host))
        publish_layout(b, f"{counter.host}/p/kill-count", RegistryClient(counter.host))
        total = len(counter.log)
    assert total > 40
    points = sorted(
        {*range(1, total + 1, max(1, total // 12)), total, total - 1, total - 2}
        | set(random.Random(6).sample(range(1, total + 1), 5))
    )
    for n, point in enumerate(points):
        repo = f"p/kill-{point}"
        previous = None
        if n % 3 != 2:  # most with a complete set already tagged, some on an empty repository
            publish_layout(a, f"{registry.host}/{repo}", RegistryClient(registry.host))
            previous = root_digest(a)
        with run_proxy(registry.host) as faulty:
            faulty.kill_from(point)  # that request and every later one: connections dropped
            with pytest.raises(RegistryError):
                publish_layout(b, f"{faulty.host}/{repo}", RegistryClient(faulty.host, retries=1))
            assert tag_of(registry, repo) == previous, f"killed at request {point} of {total}"
            faulty.clear()
            report = publish_layout(b, f"{faulty.host}/{repo}", RegistryClient(faulty.host))
        assert report.tag_moved
        complete(registry, repo, b)


def test_a_500_on_the_release_set_index_leaves_the_tag(registry, proxy, sets, repo):
    publish_layout(sets["a"], f"{registry.host}/{repo}", RegistryClient(registry.host))
    root = root_digest(sets["b"])
    proxy.add("status", status=500, method="PUT", path=f"/manifests/{root}", times=0)
    with pytest.raises(RegistryError, match="HTTP 500") as e:
        publish_layout(sets["b"], f"{proxy.host}/{repo}", RegistryClient(proxy.host))
    assert e.value.exit_code == 1
    assert len(proxy.requests("PUT", f"/manifests/{root}")) == 4, "retried, then given up"
    assert tag_of(registry, repo) == root_digest(sets["a"])
    proxy.clear()
    publish_layout(sets["b"], f"{proxy.host}/{repo}", RegistryClient(proxy.host))
    complete(registry, repo, sets["b"])


def test_kill_9_mid_publish_then_rerun(registry, sets, repo):
    publish_layout(sets["a"], f"{registry.host}/{repo}", RegistryClient(registry.host))
    with run_proxy(registry.host) as faulty:
        pid: list[int] = []

        def kill(entry: Any) -> None:
            if len(faulty.log) == 30 and pid:
                os.kill(pid[0], signal.SIGKILL)

        faulty.hook = kill
        import subprocess
        import sys

        proc = subprocess.Popen(
            [sys.executable, "-m", "nvkr", "publish", str(sets["b"]), f"{faulty.host}/{repo}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        pid.append(proc.pid)
        assert proc.wait(120) == -signal.SIGKILL
        assert tag_of(registry, repo) == root_digest(sets["a"])
        faulty.hook = None
        rerun = nvkr_cli("publish", str(sets["b"]), f"{faulty.host}/{repo}")
        assert rerun.returncode == 0, rerun.stderr
    complete(registry, repo, sets["b"])


# -- bad input ---------------------------------------------------------------------------------------
def test_registry_answering_another_digest(registry, proxy, sets, repo):
    proxy.add("digest", method="PUT", path="/manifests/")
    with pytest.raises(IntegrityError, match="the registry answered digest"):
        publish_layout(sets["a"], f"{proxy.host}/{repo}", RegistryClient(proxy.host))
    proxy.clear()
    proxy.add("digest", method="PUT", path="/manifests/", times=0)
    cli = nvkr_cli("publish", str(sets["a"]), f"{proxy.host}/{repo}")
    assert cli.returncode == 3, cli.stderr
    assert "error[NVKR-E-INTEGRITY]" in cli.stderr
    assert tag_of(registry, repo) is None


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("{host}/Team/set", "repository component 'Team' is not valid"),
        ("{host}/team/set:-bad", "tag '-bad' is not valid"),
        ("{host}/team/set:" + "x" * 129, "is not valid"),
    ],
)
def test_bad_reference_is_refused_before_any_request(proxy, sets, ref, message):
    cli = nvkr_cli("publish", str(sets["a"]), ref.format(host=proxy.host))
    assert cli.returncode == 2, cli.stderr
    assert "error[NVKR-E-USAGE]" in cli.stderr and message in cli.stderr
    assert proxy.log == []


def test_api_refusals(registry, sets, tmp_path):
    client = RegistryClient(registry.host)
    with pytest.raises(UsageError, match="not on"):
        publish_layout(sets["a"], "other.example/x", client)
    with pytest.raises(UsageError, match=r"names sha256:0+, but"):
        publish_layout(sets["a"], f"{registry.host}/x@sha256:" + "0" * 64, client)
    with pytest.raises(IntegrityError, match="no readable oci-layout"):
        publish_layout(tmp_path, f"{registry.host}/x", client)


def test_cli_credentials(auth_registry, sets, repo, tmp_path, monkeypatch):
    env = {
        "DOCKER_CONFIG": str(tmp_path),
        "NVKR_REGISTRY_USERNAME": "",
        "NVKR_REGISTRY_PASSWORD": "",
    }
    ref = f"{auth_registry.host}/{repo}"
    wrong = nvkr_cli(
        "publish",
        str(sets["a"]),
        ref,
        "--username",
        USER,
        "--password-stdin",
        stdin="nope\n",
        env=env,
    )
    assert wrong.returncode == 1
    assert (
        "error[NVKR-E-REGISTRY]" in wrong.stderr
        and "refused access for user 'nvkr'" in wrong.stderr
    )
    none = nvkr_cli("publish", str(sets["a"]), ref, env=env)
    assert none.returncode == 1 and "asks for a user name and password" in none.stderr
    ok = nvkr_cli(
        "publish",
        str(sets["a"]),
        ref,
        "-u",
        USER,
        "--password-stdin",
        "--json",
        stdin=PASSWORD + "\n",
        env=env,
    )
    assert ok.returncode == 0, ok.stderr
    events = [json.loads(line) for line in ok.stdout.splitlines()]
    result = events[-1]
    assert result["event"] == "result" and result["digest"] == root_digest(sets["a"])
    assert result["bytesUploaded"] > 0 and result["tag"] == NAME
    assert {e["event"] for e in events} >= {"start", "blob-uploaded", "manifest-pushed", "tagged"}
    assert RegistryClient(auth_registry.host, username=USER, password=PASSWORD).manifest_digest(
        repo, NAME
    ) == root_digest(sets["a"])


def test_cli_usage_errors(registry, sets, tmp_path):
    ref = f"{registry.host}/p/usage"
    assert nvkr_cli("publish", str(tmp_path), ref).returncode == 2
    nopw = nvkr_cli(
        "publish", str(sets["a"]), ref, "--username", "u", env={"NVKR_REGISTRY_PASSWORD": ""}
    )
    assert nopw.returncode == 2 and "--password-stdin" in nopw.stderr
    assert nvkr_cli("publish", str(sets["a"]), ref, "--password-stdin", stdin="x").returncode == 2
