"""The remote action cache end to end: ``nvkr build --cache-to/--cache-from`` against a real CNCF
distribution registry, with a small project that builds in about a second.

The builds run in this process (:func:`tests.helpers.cli.invoke`, from the project's directory),
two stores standing for two CI runners; what only a process of its own shows starts
``python -m nvkr`` (:func:`tests.helpers.nvkr.run_nvkr`): the twin build's umask, time zone and
locale, credentials from the environment, a message said on every build, a conflict's line.

The project: a url source from a loopback server, a ``kube-packages`` tar of it (an internal
action beneath the image, which no release set references), a daemonless container image on
scratch holding both, its image index, SBOM and the release set: five actions. Trust tests
tamper with the registry the way an attacker with push access (or with its disk) would, and
check each tampered entry is a miss with its reason while the build's result stays the same.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import re
import shutil
from pathlib import Path

import pytest

from nvkr.cache.entry import (
    ANN_ATTACHMENT,
    ANN_KEYID,
    CACHE_SIGNATURE,
    DSSE_ENVELOPE,
    SIGNATURE_PAYLOAD,
    entry_tag,
    signature_payload,
)
from nvkr.canonical import canonical_json
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import LayoutBlob, artifact_manifest, descriptor, manifest_bytes
from nvkr.oci.referrers import referrer_descriptor, update_referrers_tag
from nvkr.oci.registry import RegistryClient, fallback_tag
from nvkr.sign import generate_key, key_id, load_private_key, sign_envelope
from tests.helpers.cli import invoke
from tests.helpers.nvkr import run_nvkr
from tests.helpers.registry import free_port, run_registry

RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {{name: small}}
epoch: "1700000000"
matrix:
  gpu: [hopper]
  kubernetes: ["1.36"]
  arch: [amd64]
sources:
  tool:
    url: "{base}/tool"
    sha256: "{sha}"
artifacts:
  pkgs: {{builder: kube-packages, binaries: {{tool: tool}}}}
  image:
    builder: container-image
    base: scratch
    files: {{/usr/bin/tool: {{source: tool, mode: "0755"}}, /opt/pkgs.tar: pkgs}}
    entrypoint: ["/usr/bin/tool"]
releaseSet:
  name: small
  clusterRelease: {{kubernetes: "1.36.4", images: [image]}}
"""

TOOL = b"#!/bin/sh\necho the cached tool\n" + b"y" * 8192


@pytest.fixture
def project(tmp_path, http_dir):
    """A project directory with the recipe and its lockfile; ``project.parent / "clone"`` and
    friends are made by :func:`_clone`."""
    (http_dir.root / "tool").write_bytes(TOOL)
    proj = tmp_path / "proj"
    (proj / "recipes").mkdir(parents=True)
    (proj / "recipes" / "small.yaml").write_text(
        RECIPE.format(base=http_dir.url, sha=hashlib.sha256(TOOL).hexdigest())
    )
    locked = invoke("lock", "recipes/small.yaml", cwd=proj, store=tmp_path / "lock-store")
    assert locked.code == 0, locked.stderr
    return proj


def _clone(project: Path, name: str) -> Path:
    """Another checkout of the project (recipes and lockfile), as another CI runner has."""
    dest = project.parent / name
    shutil.copytree(project / "recipes", dest / "recipes")
    shutil.copytree(project / "lockfiles", dest / "lockfiles")
    return dest


@pytest.fixture
def keys(tmp_path):
    """Two key pairs: ``writer`` (signs the cache) and ``other`` (a key nobody trusts)."""
    d = tmp_path / "keys"
    d.mkdir()
    out = {name: generate_key("ed25519", d / name) for name in ("writer", "other")}
    return out


def _build(proj: Path, store: Path, *args: str, code: int = 0, process: bool = False, **kw):
    """``nvkr build recipes/small.yaml --json ARGS`` in ``proj`` with ``store``: in this process,
    or with ``process`` in a process of its own (``kw``: :func:`run_nvkr`'s ``env``, ``umask``)."""
    argv = ("build", "recipes/small.yaml", "--json", *args)
    res = (run_nvkr if process else invoke)(*argv, cwd=proj, store=store, **kw)
    assert res.code == code, res.stdout + res.stderr
    events = res.json_events()
    result = events[-1] if events and events[-1]["event"] == "result" else None
    return res, events, result


def _push(proj, store, reg, repo, keys, *extra, **kw):
    return _build(
        proj,
        store,
        "--cache-to",
        f"{reg.host}/{repo}",
        "--cache-sign-key",
        str(keys["writer"].private_path),
        *extra,
        **kw,
    )


def _pull(proj, store, reg, repo, keys, *extra, code=0):
    return _build(
        proj,
        store,
        "--cache-from",
        f"{reg.host}/{repo}",
        "--cache-trust",
        str(keys["writer"].public_path),
        *extra,
        code=code,
    )


def _keys_by_name(events) -> dict[str, dict]:
    return {
        e["name"]: e for e in events if e["event"] in ("action-done", "action-cached", "cache-hit")
    }


def _digest(result) -> str:
    return result["releaseSets"][0]["digest"]


# -- round trips -------------------------------------------------------------------------------
def test_a_fresh_store_takes_the_release_set_from_the_cache_and_runs_no_builder(
    project, tmp_path, registry, keys
):
    _, events, first = _push(project, tmp_path / "a", registry, "round", keys)
    pushed = [e for e in events if e["event"] == "cache-push"]
    # min: the release set, the image index, its per-arch image and the SBOM; not the package
    # tar beneath the image, which no release set references and which builds in no time
    assert sorted(e["name"] for e in pushed) == [
        "image",
        "image [amd64]",
        "release set small",
        "sbom image",
    ]
    assert {e["state"] for e in pushed} == {"pushed"}
    clone = _clone(project, "clone")
    _res, events, second = _pull(clone, tmp_path / "b", registry, "round", keys)
    assert second["built"] == [] and second["cached"] == []
    assert second["remote"] == [
        {
            "key": _keys_by_name(events)["release set small"]["key"],
            "name": "release set small",
            "cache": f"{registry.host}/round",
        }
    ]
    assert _digest(second) == _digest(first)
    assert not [e for e in events if e["event"] == "source-fetch"]
    blobs = clone / "dist" / "small" / "blobs" / "sha256"
    for p in blobs.iterdir():
        assert hashlib.sha256(p.read_bytes()).hexdigest() == p.name
    # the local record says where it came from; the next build finds it in the store
    record = json.loads(next((tmp_path / "b" / "actions").glob("*.json")).read_text())
    assert record["remote"]["cache"] == f"{registry.host}/round"
    assert set(record["run"]) >= {"invocationId", "startedOn", "finishedOn"}
    _, _, third = _pull(clone, tmp_path / "b", registry, "round", keys)
    assert third["remote"] == [] and third["upToDate"]


def test_a_no_op_build_with_cache_to_pushes_what_the_cache_lacks(project, tmp_path, registry, keys):
    store = tmp_path / "a"
    _, _, _first = _build(project, store)
    _, events, again = _push(project, store, registry, "noop", keys, "--cache-mode", "max")
    assert again["built"] == []
    pushed = {e["name"]: e["state"] for e in events if e["event"] == "cache-push"}
    assert pushed == dict.fromkeys(
        ["image", "image [amd64]", "pkgs [amd64]", "release set small", "sbom image"], "pushed"
    )
    _, events, _ = _push(project, store, registry, "noop", keys, "--cache-mode", "max")
    assert {e["state"] for e in events if e["event"] == "cache-push"} == {"present"}


def test_entries_from_two_independent_builds_are_byte_identical(project, tmp_path, registry, keys):
    """Every action's manifest and config, pushed by two clones with two stores, umasks, time
    zones and locales: the same bytes (times and logs travel as referrers)."""
    _push(project, tmp_path / "a", registry, "twin-a", keys, "--cache-mode", "max")
    twin = _clone(project, "twin")
    _push(
        twin,
        tmp_path / "b",
        registry,
        "twin-b",
        keys,
        "--cache-mode",
        "max",
        "--jobs",
        "1",
        process=True,
        env={"TZ": "Pacific/Chatham", "LC_ALL": "C"},
        umask=0o002,
    )
    client = RegistryClient(registry.host)
    tags = sorted(t for t in client.tags("twin-a") if t.startswith("ac-"))
    assert len(tags) == 5
    assert tags == sorted(t for t in client.tags("twin-b") if t.startswith("ac-"))
    for tag in tags:
        a, _, digest_a = client.get_manifest("twin-a", tag)
        b, _, _digest_b = client.get_manifest("twin-b", tag)
        assert a == b, tag
        config = json.loads(a)["config"]
        ca, cb = io.BytesIO(), io.BytesIO()
        client.get_blob("twin-a", config["digest"], ca)
        client.get_blob("twin-b", config["digest"], cb)
        assert ca.getvalue() == cb.getvalue()
        # what differs, the run, is in referrers of the same manifest in each repository
        for repo in ("twin-a", "twin-b"):
            referrers, _, _ = client.get_manifest(repo, fallback_tag(digest_a))
            kinds = sorted(
                (m.get("annotations") or {}).get(ANN_ATTACHMENT)
                for m in json.loads(referrers)["manifests"]
            )
            assert kinds == ["cache-run", "cache-signature"]


def test_the_first_writer_wins_and_a_differing_result_is_named(project, tmp_path, registry, keys):
    store_a, store_b = tmp_path / "a", tmp_path / "b"
    _, events, _ = _push(project, store_a, registry, "race", keys, "--cache-mode", "max")
    pkgs_key = _keys_by_name(events)["pkgs [amd64]"]["key"]
    shutil.copytree(store_a, store_b)
    record_path = store_b / "actions" / (pkgs_key.split(":", 1)[1] + ".json")
    record = json.loads(record_path.read_text())
    record["metadata"]["files"][0]["mode"] = "0700"  # a builder that is not reproducible
    record_path.write_bytes(canonical_json(record))
    client = RegistryClient(registry.host)
    first = client.manifest_digest("race", entry_tag(pkgs_key))
    clone = _clone(project, "clone")
    res, events, _ = _build(
        clone,
        store_b,
        "--cache-to",
        f"{registry.host}/race",
        "--cache-sign-key",
        str(keys["other"].private_path),
        "--cache-mode",
        "max",
    )
    warnings = [e for e in events if e["event"] == "cache-warning"]
    assert len(warnings) == 1, warnings
    assert warnings[0]["name"] == "pkgs [amd64]"
    assert "not reproducible" in warnings[0]["message"] and pkgs_key in warnings[0]["message"]
    assert client.manifest_digest("race", entry_tag(pkgs_key)) == first
    states = {e["name"]: e["state"] for e in events if e["event"] == "cache-push"}
    assert states.pop("pkgs [amd64]") == "conflict"
    assert set(states.values()) == {"signed"}, "the second key adds its signature to the rest"
    res = run_nvkr(
        "build", "recipes/small.yaml", "--cache-to", f"{registry.host}/race",
        "--cache-sign-key", str(keys["other"].private_path), "--cache-mode", "max",
        cwd=clone, store=store_b,
    )  # fmt: skip
    assert res.code == 0
    line = next(x for x in res.stderr.splitlines() if "not reproducible" in x)
    assert "pkgs [amd64]" in line and "the first entry stays" in line


# -- demand-driven lookups ---------------------------------------------------------------------
def test_a_hit_stops_the_descent(project, tmp_path, registry, keys):
    """With every action in the cache but the release set, a fresh store builds the release set
    from the image index, its per-arch image (the index's closure) and the SBOM: the package tar
    beneath the image is never looked up and the source beneath it never fetched."""
    _, events, first = _push(
        project, tmp_path / "a", registry, "descent", keys, "--cache-mode", "max"
    )
    by_name = _keys_by_name(events)
    client = RegistryClient(registry.host)
    tag = entry_tag(by_name["release set small"]["key"])
    assert client.delete_manifest("descent", client.manifest_digest("descent", tag))
    _, events, second = _pull(_clone(project, "clone"), tmp_path / "b", registry, "descent", keys)
    assert second["built"] == [by_name["release set small"]["key"]]
    hits = sorted(e["name"] for e in events if e["event"] == "cache-hit")
    assert hits == ["image", "image [amd64]", "sbom image"]
    assert not [e for e in events if e.get("name") == "pkgs [amd64]"]
    assert not [e for e in events if e["event"] == "source-fetch"]
    misses = [e for e in events if e["event"] == "cache-miss"]
    assert [(e["name"], e["reason"], e["absent"]) for e in misses] == [
        ("release set small", "no entry", True)
    ]
    assert _digest(second) == _digest(first)


# -- trust ---------------------------------------------------------------------------------------
def _entry(client: RegistryClient, repo: str, key: str) -> tuple[bytes, dict]:
    data, _, _ = client.get_manifest(repo, entry_tag(key))
    return data, json.loads(data)


def _put_blob(client, repo, data: bytes) -> dict:
    desc = descriptor(mt.OCTET_STREAM, data)
    if not client.blob_exists(repo, desc["digest"]):
        client.push_blob(repo, desc["digest"], len(data), functools.partial(io.BytesIO, data))
    return desc


def _sign(client, repo, key_path: Path, action_key: str, tag: str, manifest: bytes) -> None:
    """Attach a signature by ``key_path`` over (action_key, tag, manifest), as a writer does."""
    key = load_private_key(key_path)
    desc = descriptor(mt.OCI_MANIFEST, manifest)
    envelope = canonical_json(
        sign_envelope(signature_payload(action_key, tag, desc), SIGNATURE_PAYLOAD, key)
    )
    _put_blob(client, repo, envelope)
    _put_blob(client, repo, mt.EMPTY_JSON)
    sig = manifest_bytes(
        artifact_manifest(
            DSSE_ENVELOPE,
            [descriptor(DSSE_ENVELOPE, envelope)],
            {ANN_ATTACHMENT: CACHE_SIGNATURE, ANN_KEYID: key_id(key)},
            subject=desc,
        )
    )
    sig_digest = client.push_manifest(
        repo, descriptor(mt.OCI_MANIFEST, sig)["digest"], sig, mt.OCI_MANIFEST
    )
    blob = LayoutBlob(sig_digest, len(sig), mt.OCI_MANIFEST, "test")
    update_referrers_tag(client, repo, desc["digest"], [referrer_descriptor(blob, json.loads(sig))])


def _forge(client, repo, tag: str, config: dict, layers: list) -> bytes:
    """Tag a manifest with ``config`` and ``layers`` (descriptors already in ``repo``)."""
    doc = artifact_manifest("application/vnd.nvkr.action-result.v1+json", layers, config=config)
    data = manifest_bytes(doc)
    client.push_manifest(repo, tag, data, mt.OCI_MANIFEST)
    return data


TAMPERING = {
    # what an attacker does to the release set's entry -> the reason the reader gives
    "swapped-config": "it is not signed",
    "swapped-config-signed": "its config is the result of action",
    "layers-not-outputs": r"its layers \(1\) do not match its config's outputs",
    "payload-names-another-key": "its signature names action key",
    "untrusted-key": "signed only by keys this build does not trust",
    "another-salt": r"its signature is for tag .* \(another salt\)",
}


@pytest.mark.parametrize("how", sorted(TAMPERING))
def test_a_tampered_entry_is_a_miss_with_its_reason(project, tmp_path, registry, keys, how):
    repo = f"tamper-{how}"
    _, events, first = _push(project, tmp_path / "a", registry, repo, keys)
    by_name = _keys_by_name(events)
    set_key, sbom_key = by_name["release set small"]["key"], by_name["sbom image"]["key"]
    client = RegistryClient(registry.host)
    tag = entry_tag(set_key)
    set_data, set_doc = _entry(client, repo, set_key)
    sbom_data, sbom_doc = _entry(client, repo, sbom_key)
    extra: list[str] = []
    if how == "swapped-config":  # the release set's layers, another action's config
        _forge(client, repo, tag, sbom_doc["config"], set_doc["layers"])
    elif how == "swapped-config-signed":  # ... signed by the trusted key (a compromised writer)
        forged = _forge(client, repo, tag, sbom_doc["config"], set_doc["layers"])
        _sign(client, repo, keys["writer"].private_path, set_key, tag, forged)
    elif how == "layers-not-outputs":
        forged = _forge(client, repo, tag, set_doc["config"], sbom_doc["layers"])
        _sign(client, repo, keys["writer"].private_path, set_key, tag, forged)
    elif how == "payload-names-another-key":  # the SBOM's entry, signed for the SBOM, re-tagged
        client.push_manifest(repo, tag, sbom_data, mt.OCI_MANIFEST)
    elif how == "untrusted-key":
        extra = ["--cache-trust", str(keys["other"].public_path)]
    elif how == "another-salt":  # the entry of the old salt, tagged for the new one
        extra = ["--cache-salt", "2026-02"]
        client.push_manifest(repo, entry_tag(set_key, "2026-02"), set_data, mt.OCI_MANIFEST)
    args = ["--cache-from", f"{registry.host}/{repo}"]
    if how != "untrusted-key":
        args += ["--cache-trust", str(keys["writer"].public_path)]
    _res, events, second = _build(_clone(project, "clone"), tmp_path / "b", *args, *extra)
    misses = [e for e in events if e["event"] == "cache-miss" and e["name"] == "release set small"]
    assert len(misses) == 1, events
    assert re.search(TAMPERING[how], misses[0]["reason"]), misses[0]["reason"]
    assert set_key in second["built"]
    assert _digest(second) == _digest(first)
    # one line for humans too
    human = invoke(
        "build",
        "recipes/small.yaml",
        *args,
        *extra,
        cwd=_clone(project, "clone2"),
        store=tmp_path / "c",
    )
    assert human.code == 0
    assert [x for x in human.stderr.splitlines() if "cache miss: release set small" in x]


def test_a_flipped_byte_in_a_layer_is_a_miss_and_the_image_builds_locally(project, tmp_path, keys):
    """A layer changed on the registry's disk: the download does not hash to its digest, so
    the release set's entry and the image's (which holds the same layer) are misses; both build
    here, the rest comes from the cache, and the result is the same."""
    with run_registry(tmp_path / "own-registry") as reg:  # its blobs are its own to break
        _, events, first = _push(project, tmp_path / "a", reg, "flip", keys, "--cache-mode", "max")
        client = RegistryClient(reg.host)
        by_name = _keys_by_name(events)
        _, doc = _entry(client, "flip", by_name["image [amd64]"]["key"])
        layer = next(x for x in doc["layers"] if x["mediaType"] == mt.OCI_LAYER_TAR_GZIP)
        data = reg.blob_data(layer["digest"])
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0x01
        data.write_bytes(bytes(raw))
        _, events, second = _pull(_clone(project, "clone"), tmp_path / "b", reg, "flip", keys)
    misses = {e["name"]: e["reason"] for e in events if e["event"] == "cache-miss"}
    assert set(misses) == {"release set small", "image [amd64]"}, misses
    for reason in misses.values():
        assert layer["digest"][:19] in reason and "expected " + layer["digest"] in reason
    assert sorted(second["built"]) == sorted(
        [by_name["release set small"]["key"], by_name["image [amd64]"]["key"]]
    )
    assert _digest(second) == _digest(first)


def test_unsigned_entries_need_trust_unsigned_which_is_said_on_every_build(
    project, tmp_path, registry, keys
):
    _, events, first = _push(project, tmp_path / "a", registry, "unsigned", keys)
    client = RegistryClient(registry.host)
    for e in events:
        if e["event"] == "cache-push":  # drop every signature: the entries are unsigned now
            index = client.manifest_digest("unsigned", fallback_tag(e["manifest"]))
            client.delete_manifest("unsigned", index)
    clone = _clone(project, "clone")
    base = [
        "--cache-from",
        f"{registry.host}/unsigned",
        "--cache-trust",
        str(keys["writer"].public_path),
    ]
    _, events, refused = _build(clone, tmp_path / "b", *base)
    assert {e["reason"] for e in events if e["event"] == "cache-miss" and not e.get("absent")} == {
        "it is not signed (pass --cache-trust-unsigned to use such entries)"
    }
    assert _digest(refused) == _digest(first)
    for store in (tmp_path / "c", tmp_path / "c"):  # a first build and a no-op one
        res = run_nvkr(
            "build", "recipes/small.yaml", *base, "--cache-trust-unsigned", cwd=clone, store=store
        )
        assert res.code == 0, res.stderr
        assert [x for x in res.stderr.splitlines() if "--cache-trust-unsigned" in x], res.stderr
    _, events, used = _build(clone, tmp_path / "d", *base, "--cache-trust-unsigned")
    assert [e["signed"] for e in events if e["event"] == "cache-hit"] == [False]
    assert used["built"] == [] and _digest(used) == _digest(first)


# -- bad input -----------------------------------------------------------------------------------
def test_an_unreachable_cache_warns_once_and_the_build_goes_on(project, tmp_path, keys):
    """Two repositories on one registry that does not answer: one warning, both skipped from
    then on; another dead registry: its own warning. Everything builds here. (In this process
    the registry client's retries do not sleep: ``fast_retries``; in one of its own each dead
    registry costs 3.5 s of backoff.)"""
    dead, other = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    _, events, result = _build(
        project, tmp_path / "a", "--cache-from", f"{dead}/cache", "--cache-from",
        f"{dead}/other", "--cache-from", f"{other}/cache",
        "--cache-trust", str(keys["writer"].public_path),
    )  # fmt: skip
    warnings = [e for e in events if e["event"] == "cache-warning"]
    assert len(warnings) == 2
    assert {tuple(w["caches"]) for w in warnings} == {
        (f"{dead}/cache", f"{dead}/other"),
        (f"{other}/cache",),
    }
    assert all("skipped for the rest of this build" in w["message"] for w in warnings)
    assert len(result["built"]) == 5
    human = invoke(
        "build", "recipes/small.yaml", "--cache-from", f"{dead}/cache",
        "--cache-trust", str(keys["writer"].public_path), cwd=project, store=tmp_path / "b",
    )  # fmt: skip
    assert human.code == 0
    lines = [x for x in human.stderr.splitlines() if "skipped for the rest" in x]
    assert len(lines) == 1 and "cannot reach" in lines[0], human.stderr


def test_cache_to_needs_a_signing_key_and_push_access_before_anything_builds(
    project, tmp_path, registry, auth_registry, keys
):
    store = tmp_path / "a"
    res = run_nvkr(
        "build", "recipes/small.yaml", "--cache-to", f"{registry.host}/c", cwd=project, store=store
    )
    assert res.code == 2, res.stderr
    assert "no signing key is given" in res.stderr and "--cache-sign-key" in res.stderr
    res = run_nvkr(
        "build", "recipes/small.yaml", "--cache-to", f"{auth_registry.host}/c",
        "--cache-sign-key", str(keys["writer"].private_path), cwd=project, store=store,
    )  # fmt: skip
    assert res.code == 1, res.stderr
    assert "push access to" in res.stderr and "asks for a user name and password" in res.stderr
    wrong = {"NVKR_REGISTRY_USERNAME": "nvkr", "NVKR_REGISTRY_PASSWORD": "wrong"}
    res = run_nvkr(
        "build", "recipes/small.yaml", "--cache-to", f"{auth_registry.host}/c",
        "--cache-sign-key", str(keys["writer"].private_path), cwd=project, store=store, env=wrong,
    )  # fmt: skip
    assert res.code == 1, res.stderr
    assert "refused access for user 'nvkr'" in res.stderr, res.stderr
    res = run_nvkr(
        "build", "recipes/small.yaml", "--cache-from", f"{registry.host}/c", cwd=project,
        store=store,
    )  # fmt: skip
    assert res.code == 2 and "--cache-trust" in res.stderr, res.stderr
    assert not list((store / "actions").glob("*.json")), "nothing may build before the checks"


def test_cached_only_names_every_missing_action_or_assembles_without_building(
    project, tmp_path, registry, keys
):
    clone = _clone(project, "clone")
    res, _, _ = _pull(clone, tmp_path / "b", registry, "only", keys, "--cached-only", code=1)
    assert "--cached-only: 5 actions neither in the store nor in a cache" in res.stderr
    for name, builder in (
        ("release set small", "release-set"),
        ("image [amd64]", "container-image"),
        ("pkgs [amd64]", "kube-packages"),
        ("sbom image", "sbom"),
    ):
        line = next(x for x in res.stderr.splitlines() if x.strip().startswith(name + " ("))
        assert (
            f"builder {builder}" in line and "variant gpu=hopper,kubernetes=1.36,arch=amd64" in line
        )
        assert "key sha256:" in line
    assert not list((tmp_path / "b" / "actions").glob("*.json"))
    _, _, first = _push(project, tmp_path / "a", registry, "only", keys)
    _, _events, second = _pull(clone, tmp_path / "b", registry, "only", keys, "--cached-only")
    assert second["built"] == [] and len(second["remote"]) == 1
    assert _digest(second) == _digest(first)


def test_prune_deletes_entries_older_than_the_duration(project, tmp_path, registry, keys):
    _push(project, tmp_path / "a", registry, "prune", keys, "--cache-mode", "max")
    client = RegistryClient(registry.host)
    entries = sorted(t for t in client.tags("prune") if t.startswith("ac-"))
    assert len(entries) == 5
    keep = run_nvkr(
        "cache",
        "prune",
        f"{registry.host}/prune",
        "--older-than",
        "30d",
        cwd=project,
        store=tmp_path / "a",
    )
    assert keep.code == 0 and "deleted 0 entries older than 30d; kept 5" in keep.stdout, keep.stdout
    dry = invoke(
        "cache",
        "prune",
        f"{registry.host}/prune",
        "--older-than",
        "0s",
        "--dry-run",
        "--json",
        cwd=project,
        store=tmp_path / "a",
    )
    assert dry.code == 0, dry.stderr
    assert sorted(e["tag"] for e in json.loads(dry.stdout)["deleted"]) == entries
    assert sorted(t for t in client.tags("prune") if t.startswith("ac-")) == entries
    gone = invoke(
        "cache",
        "prune",
        f"{registry.host}/prune",
        "--older-than",
        "0s",
        cwd=project,
        store=tmp_path / "a",
    )
    assert gone.code == 0 and "deleted 5 entries" in gone.stdout, gone.stdout + gone.stderr
    assert not [t for t in client.tags("prune") if t.startswith(("ac-", "sha256-"))]
    _, _events, again = _pull(_clone(project, "clone"), tmp_path / "b", registry, "prune", keys)
    assert len(again["built"]) == 5
    bad = invoke(
        "cache",
        "prune",
        f"{registry.host}/prune",
        "--older-than",
        "a while",
        cwd=project,
        store=tmp_path / "a",
    )
    assert bad.code == 2 and "is not a duration" in bad.stderr


def test_blobs_are_mounted_from_a_cache_on_the_same_registry(project, tmp_path, registry, keys):
    """A pull request's cache reads the main one and writes its own: what the main cache holds
    is mounted, not uploaded again (only each run record's envelope is new)."""
    store = tmp_path / "a"
    _, events, _ = _push(project, store, registry, "main", keys, "--cache-mode", "max")
    uploaded_main = sum(e["bytes"] for e in events if e["event"] == "cache-push")
    _, events, _ = _push(
        project, store, registry, "pr-1", keys, "--cache-mode", "max",
        "--cache-from", f"{registry.host}/main", "--cache-trust", str(keys["writer"].public_path),
    )  # fmt: skip
    pushed = [e for e in events if e["event"] == "cache-push"]
    assert len(pushed) == 5 and {e["state"] for e in pushed} == {"pushed"}
    uploaded_pr = sum(e["bytes"] for e in pushed)
    assert uploaded_main > 20480 > 8000 > uploaded_pr, (uploaded_main, uploaded_pr)


def test_the_bytes_uploaded_count_each_blob_once(project, tmp_path, registry, keys):
    """Entries share blobs (the release set holds the image's layers): what the summary says was
    uploaded is each blob of the new repository once."""
    _, events, _ = _push(project, tmp_path / "a", registry, "count", keys, "--cache-mode", "max")
    said = sum(e["bytes"] for e in events if e["event"] == "cache-push")
    client = RegistryClient(registry.host)
    sizes: dict[str, int] = {}
    for e in events:
        if e["event"] != "cache-push":
            continue
        manifests = [e["manifest"]]
        index, _, _ = client.get_manifest("count", fallback_tag(e["manifest"]))
        manifests += [m["digest"] for m in json.loads(index)["manifests"]]
        for digest in manifests:
            doc = json.loads(client.get_manifest("count", digest)[0])
            for desc in [doc["config"], *doc["layers"]]:
                sizes[desc["digest"]] = desc["size"]
    assert said == sum(sizes.values())
