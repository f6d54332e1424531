"""The cache entry format (nvkr.cache.entry): what a config holds and leaves out, the manifest's
form, the reader's checks, and where a builder's run metadata goes."""

from __future__ import annotations

import hashlib
import json

import pytest

from nvkr.action import Action, ActionOutput, ActionResult, action_key
from nvkr.builders import api
from nvkr.cache.entry import (
    ACTION_RESULT,
    EntryProblem,
    check_config,
    check_manifest,
    check_signature_payload,
    entry_tag,
    make_entry,
    missing_closure,
    signature_payload,
)
from nvkr.canonical import canonical_json
from nvkr.execute import execute
from nvkr.fetch.context import FetchContext
from nvkr.oci import mediatypes as mt
from nvkr.plan import Plan
from nvkr.store import Store

KEY = "sha256:" + "ab" * 32


def _action(name="image [amd64]", builder="container-image", key=KEY):
    return Action(
        key=key,
        builder=builder,
        builder_version="7",
        name=name,
        params={},
        inputs={},
        tools={},
        epoch=0,
    )


def _record(**over):
    record = {
        "key": KEY,
        "builder": "container-image",
        "name": "image [amd64]",
        "outputs": [
            {
                "name": "layer-0.tar.gz",
                "digest": "sha256:" + "11" * 32,
                "size": 10,
                "mediaType": mt.OCI_LAYER_TAR_GZIP,
                "role": "layer",
            },
            {
                "name": "manifest.json",
                "digest": "sha256:" + "22" * 32,
                "size": 20,
                "mediaType": mt.OCI_MANIFEST,
                "role": "manifest",
            },
        ],
        "metadata": {"platform": {"os": "linux", "architecture": "amd64"}},
        "log": "sha256:" + "33" * 32,
        "run": {
            "invocationId": "0b0e6f3e-1111-4a4a-8888-000000000001",
            "startedOn": "2026-01-01T00:00:00Z",
            "finishedOn": "2026-01-01T00:00:09Z",
        },
    }
    record.update(over)
    return record


def _result(**over):
    return ActionResult.from_json(_record(**over), "test record")


def test_the_tag_is_the_key_hex_or_the_salted_hash():
    assert entry_tag(KEY) == "ac-" + "ab" * 32
    salted = entry_tag(KEY, "2026-01")
    assert salted == "ac-" + hashlib.sha256(b"2026-01" + KEY.encode()).hexdigest()
    assert salted != entry_tag(KEY, "2026-02")
    with pytest.raises(ValueError):
        entry_tag("ab" * 32)


def test_two_honest_writers_write_the_same_bytes():
    """What differs between two runs of one action (times, invocation, log, the artifact's
    name) stays out of the config and the manifest."""
    first = make_entry(_action(), _result())
    other_run = _result(
        name="another recipe's name [amd64]",
        log="sha256:" + "44" * 32,
        run={
            "invocationId": "0b0e6f3e-2222-4a4a-8888-000000000002",
            "startedOn": "2026-03-03T10:00:00Z",
            "finishedOn": "2026-03-03T10:05:00Z",
        },
        remote={"cache": "r.example/c", "manifest": "sha256:" + "55" * 32},
    )
    second = make_entry(_action(name="another recipe's name [amd64]"), other_run)
    assert (first.config, first.manifest, first.digest) == (
        second.config,
        second.manifest,
        second.digest,
    )
    config = json.loads(first.config)
    assert set(config) == {"key", "builder", "builderVersion", "outputs", "metadata"}
    assert first.config == canonical_json(config)
    for word in (b"startedOn", b"invocationId", b"image [amd64]", b"33333333"):
        assert word not in first.config and word not in first.manifest


def test_a_builders_run_metadata_never_reaches_the_config():
    """node-image declares ``timings`` as describing its run: a record of an older nvkr that
    still holds them in metadata makes the same entry as one without."""
    action = _action(name="node-image [hopper amd64]", builder="node-image")
    old = _result(builder="node-image", metadata={"arch": "amd64", "timings": {"disk": 1234}})
    new = _result(builder="node-image", metadata={"arch": "amd64"})
    assert make_entry(action, old).config == make_entry(action, new).config
    assert b"timings" not in make_entry(action, old).config


def test_the_manifest_has_one_layer_per_output_and_no_annotations():
    entry = make_entry(_action(), _result())
    doc = json.loads(entry.manifest)
    assert doc["artifactType"] == ACTION_RESULT
    assert doc["config"]["mediaType"] == ACTION_RESULT
    assert doc["config"]["digest"] == "sha256:" + hashlib.sha256(entry.config).hexdigest()
    assert doc["layers"] == [
        {"mediaType": o["mediaType"], "digest": o["digest"], "size": o["size"]}
        for o in _record()["outputs"]
    ]
    assert "annotations" not in doc and "subject" not in doc


def test_the_reader_refuses_another_actions_config_and_layers_that_differ():
    entry = make_entry(_action(), _result())
    _, layers = check_manifest(entry.manifest, mt.OCI_MANIFEST)
    assert check_config(entry.config, _action(), entry.manifest, layers)["key"] == KEY
    other = _action(key="sha256:" + "cd" * 32)
    with pytest.raises(EntryProblem, match="result of action sha256:abab"):
        check_config(entry.config, other, entry.manifest, layers)
    with pytest.raises(EntryProblem, match=r"layers \(1\) do not match its config.s outputs \(2\)"):
        check_config(entry.config, _action(), entry.manifest, layers[:1])
    newer = _action()
    object.__setattr__(newer, "builder_version", "8")
    with pytest.raises(EntryProblem, match="builderVersion '7', not '8'"):
        check_config(entry.config, newer, entry.manifest, layers)
    loose = json.dumps(json.loads(entry.config), indent=1).encode()
    with pytest.raises(EntryProblem, match="not canonical JSON"):
        check_config(loose, _action(), entry.manifest, layers)
    with pytest.raises(EntryProblem, match="artifactType"):
        check_manifest(entry.manifest.replace(ACTION_RESULT.encode(), b"x/y", 1), mt.OCI_MANIFEST)


def test_a_signature_payload_must_name_this_key_tag_and_manifest():
    entry = make_entry(_action(), _result())
    desc = entry.manifest_descriptor
    payload = signature_payload(KEY, entry.tag, desc)
    check_signature_payload(payload, KEY, entry.tag, desc)
    with pytest.raises(EntryProblem, match="names action key"):
        check_signature_payload(payload, "sha256:" + "cd" * 32, entry.tag, desc)
    with pytest.raises(EntryProblem, match="another salt"):
        check_signature_payload(payload, KEY, entry_tag(KEY, "new salt"), desc)
    with pytest.raises(EntryProblem, match="names manifest"):
        check_signature_payload(payload, KEY, entry.tag, {**desc, "digest": "sha256:" + "0" * 64})


def test_missing_closure_follows_manifests_in_the_store(tmp_path):
    store = Store(tmp_path / "store")
    layer = store.add_bytes(b"layer")
    config = store.add_bytes(b"{}")
    manifest = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": mt.OCI_MANIFEST,
            "config": {"mediaType": mt.OCI_IMAGE_CONFIG, "digest": config.digest, "size": 2},
            "layers": [{"mediaType": mt.OCI_LAYER_TAR, "digest": layer.digest, "size": 5}],
        }
    )
    index = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": mt.OCI_INDEX,
            "manifests": [
                {
                    "mediaType": mt.OCI_MANIFEST,
                    "digest": "sha256:" + hashlib.sha256(manifest).hexdigest(),
                    "size": len(manifest),
                }
            ],
        }
    )
    index_blob = store.add_bytes(index)
    outputs = [
        ActionOutput("index.json", index_blob.digest, index_blob.size, mt.OCI_INDEX, "index")
    ]
    manifest_digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    assert missing_closure(store, outputs) == [manifest_digest]
    store.add_bytes(manifest)
    assert missing_closure(store, outputs) == []
    store.blob_path(layer.digest).unlink()
    assert missing_closure(store, outputs) == [layer.digest]


class _Timed:
    """A builder that records phase times in metadata and declares them run metadata."""

    name = "test-timed"
    version = "1"
    per_arch = False
    release_kind = "internal"
    run_metadata = ("timings",)

    def plan(self, *a):  # pragma: no cover - actions are made by hand
        raise AssertionError

    def run(self, ctx):
        out = ctx.workdir / "out"
        out.write_text("output")
        ctx.add_output(out, name="out", media_type="text/plain")
        ctx.metadata.update({"size": 6, "timings": {"phase": 12}})


def test_the_executor_files_run_metadata_under_run(tmp_path, monkeypatch):
    monkeypatch.setitem(api.REGISTRY, "test-timed", _Timed())
    key = action_key("test-timed", "1", {}, {}, {}, 0)
    action = Action(key, "test-timed", "1", "timed", {}, {}, {}, 0)
    plan = Plan(None, [], 0, {key: action}, [key], {})  # type: ignore[arg-type]
    store = Store(tmp_path / "store")
    execute(plan, store, FetchContext(store=store), jobs=1)
    record = store.get_action(key)
    assert record is not None
    assert record.metadata == {"size": 6}
    assert record.run is not None and record.run["timings"] == {"phase": 12}
