"""Byte counts in the event stream: a publish's upload (chunked, to a real registry) goes out
as ``bytes`` events that count up to the blob's size, and the CLI's stream is version 1 to its
end, an error included."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from nvkr.delivery.publish import publish_layout
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import artifact_manifest, descriptor, manifest_bytes
from nvkr.oci.registry import RegistryClient
from tests.helpers.nvkr import run_nvkr
from tests.helpers.registry import nvkr_cli
from tests.helpers.streams import RECIPE, TOOL

LAYER = os.urandom(3 << 20)


def _layout(root: Path) -> Path:
    """An OCI image layout with one artifact manifest holding a 3 MiB layer, tagged ``big``."""
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        (blobs / digest[7:]).write_bytes(data)
        return digest

    put(mt.EMPTY_JSON)
    layer = descriptor("application/octet-stream", put(LAYER), len(LAYER))
    data = manifest_bytes(artifact_manifest("application/vnd.nvkr.test", [layer]))
    entry = descriptor(mt.OCI_MANIFEST, put(data), len(data), {mt.ANN_REF_NAME: "big"})
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (root / "index.json").write_text(
        json.dumps({"schemaVersion": 2, "mediaType": mt.OCI_INDEX, "manifests": [entry]})
    )
    return root


def test_an_upload_reports_its_bytes_up_to_the_size(registry, tmp_path):
    layout = _layout(tmp_path / "layout")
    events: list[tuple[str, dict]] = []
    client = RegistryClient(registry.host, insecure=True, chunk_size=1 << 20)
    with client:
        publish_layout(
            layout, f"{registry.host}/t/bytes", client, on_event=lambda k, f: events.append((k, f))
        )
    done = [f["done"] for k, f in events if k == "blob-progress" and f["size"] == len(LAYER)]
    assert done and done[-1] == len(LAYER), done
    assert done == sorted(done) and len(set(done)) >= 3, "counted as the chunks go up"


def test_publish_json_streams_bytes_and_ends_with_result_or_error(registry, tmp_path):
    layout = _layout(tmp_path / "layout")
    ref = f"{registry.host}/t/json"
    ok = nvkr_cli("publish", str(layout), ref, "--insecure", "--json", "--chunk-size", "1")
    assert ok.returncode == 0, ok.stderr
    events = [json.loads(line) for line in ok.stdout.splitlines()]
    assert all(e["v"] == 1 and e["ts"].endswith("Z") for e in events)
    pushed = [e for e in events if e["event"] == "bytes"]
    assert {e["direction"] for e in pushed} == {"pushed"}
    # the layer's own bar (the config's 2 bytes go up beside it and may end after it)
    layer = [e for e in pushed if e["total"] == len(LAYER)]
    assert len(layer) > 1 and layer[-1]["finished"] and layer[-1]["done"] == len(LAYER)
    assert not any(e["finished"] for e in layer[:-1])
    assert events[-1]["event"] == "result" and events[-1]["exitCode"] == 0
    assert events[-1]["bytesUploaded"] == len(LAYER) + len(mt.EMPTY_JSON)
    # a digest the layout does not hold: exit 2, and the stream says so last
    bad = nvkr_cli("publish", str(layout), f"{ref}@sha256:{'0' * 64}", "--insecure", "--json")
    last = json.loads(bad.stdout.splitlines()[-1])
    assert bad.returncode == 2 and last["event"] == "error"
    assert last["exitCode"] == 2 and last["code"] == "NVKR-E-USAGE" and last["v"] == 1


def test_a_bad_reference_still_ends_the_stream_with_an_error(tmp_path):
    """Arguments are checked inside the stream: ``--json`` readers get an ``error`` event."""
    layout = _layout(tmp_path / "layout")
    for args in (
        ("publish", str(layout), "Bad/Name", "--json"),
        ("pull", "127.0.0.1:1/x:latest", str(tmp_path / "out"), "--json"),
    ):
        res = nvkr_cli(*args)
        (last,) = [json.loads(line) for line in res.stdout.splitlines()]
        assert res.returncode == 2 and last["event"] == "error" and last["exitCode"] == 2, args


def test_pull_json_streams_bytes_and_its_result_in_the_one_key_style(registry, tmp_path, http_dir):
    (http_dir.root / "tool").write_bytes(TOOL)
    proj = tmp_path / "proj"
    (proj / "recipes").mkdir(parents=True)
    (proj / "recipes" / "small.yaml").write_text(
        RECIPE.format(base=http_dir.url, sha=hashlib.sha256(TOOL).hexdigest())
    )
    built = run_nvkr("build", "recipes/small.yaml", "--json", cwd=proj, store=tmp_path / "s")
    assert built.code == 0, built.stderr
    (release,) = built.json_events()[-1]["releaseSets"]
    ref = f"{registry.host}/t/pull"
    assert nvkr_cli("publish", str(proj / release["path"]), ref, "--insecure").returncode == 0
    res = nvkr_cli(
        "--store", str(tmp_path / "empty"), "pull", f"{ref}@{release['digest']}",
        str(tmp_path / "out"), "--insecure", "--json",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    events = [json.loads(line) for line in res.stdout.splitlines()]
    pulled = [e for e in events if e["event"] == "bytes"]
    assert pulled and {e["direction"] for e in pulled} == {"pulled"}
    assert any(e["finished"] and e["done"] == e["total"] for e in pulled)
    result = events[-1]
    assert result["event"] == "result" and result["exitCode"] == 0 and result["v"] == 1
    assert {"buildRecord", "downloadedBytes", "reusedBlobs", "milliseconds"} <= result.keys()
    assert not {"build_record", "seconds", "downloaded_bytes"} & result.keys()
