"""``nvkr publish --with-sources``, ``nvkr pull --with-sources`` and ``nvkr verify --rebuild REF``
from the registry alone, on a small recipe built in a second (nvkr.delivery.sources).

The recipe extends a base file (so the closure must carry more than the recipe), lays out a url
source, a path source's tree and a url source marked ``publish: false`` in a scratch image; the
registry is a real CNCF distribution on loopback. The last test is issue 31's promotion end to
end: two rebuilders attest the set from the registry alone, ``nvkr copy`` moves it with every
referrer to a second registry, and a rebuild from there passes a policy wanting both.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from nvkr.canonical import sha256_bytes
from nvkr.oci import mediatypes as mt
from nvkr.oci.registry import RegistryClient
from nvkr.repro import tar_bytes
from tests.helpers.cli import invoke
from tests.helpers.recipes import NONFREE, write_closure_project


@pytest.fixture
def built(tmp_path: Path, http_dir: Any) -> tuple[Path, Path, Any]:
    """The closure project (tests.helpers.recipes.write_closure_project), locked and built:
    (project, store, http_dir)."""
    proj, store = write_closure_project(tmp_path, http_dir)
    for step in (("lock", "recipes/closure.yaml"), ("build", "recipes/closure.yaml", "--locked")):
        res = invoke(*step, cwd=proj, store=store)
        assert res.code == 0, res.stderr
    return proj, store, http_dir


def _closure(host: str, repo: str, subject: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The source closure index of ``subject`` and its (first) part's config, the index."""
    from nvkr.delivery.sources import find_closure

    with RegistryClient(host, insecure=True) as client:
        desc = find_closure(client, repo, subject)
        assert desc is not None
        root = json.loads(client.get_manifest(repo, desc["digest"])[0])
        part = json.loads(client.get_manifest(repo, root["manifests"][0]["digest"])[0])
        config = _blob(client, repo, part["config"]["digest"])
    return root, json.loads(config)


def _blob(client: RegistryClient, repo: str, digest: str) -> bytes:
    import io

    buf = io.BytesIO()
    client.get_blob(repo, digest, buf)
    return buf.getvalue()


def _publish(proj: Path, store: Path, ref: str, *more: str) -> Any:
    return invoke(
        "publish", "dist/closure", ref, "--insecure", "--with-sources", "--json", *more,
        cwd=proj, store=store,
    )  # fmt: skip


def test_the_closure_holds_the_export_the_project_and_withholds_what_is_marked(
    built: tuple[Path, Path, Any], registry: Any
) -> None:
    proj, store, _ = built
    ref = f"{registry.host}/rel/closure:v1"
    env = ("--build-env", f"{registry.host}/ci@sha256:{'ab' * 32}")
    res = _publish(proj, store, ref, *env)
    assert res.code == 0, res.stderr
    result = json.loads(res.stdout.splitlines()[-1])
    subject = result["digest"]
    sources = result["sources"]
    assert sources["withheld"] == ["closure/nonfree"] and sources["parts"] == 1

    root, index = _closure(registry.host, "rel/closure", subject)
    assert root["subject"]["digest"] == subject and root["artifactType"] == mt.NVKR_SOURCE_CLOSURE
    # the export's index, as `nvkr mirror export` writes it, with the project and the withheld
    assert index["nvkrMirror"] == 1 and [s["name"] for s in index["sources"]] == ["tool"]
    assert [w["name"] for w in index["withheld"]] == ["nonfree"]
    assert index["withheld"][0]["digest"] == "sha256:" + hashlib.sha256(NONFREE).hexdigest()
    project = index["project"]
    assert project["recipe"] == "recipes/closure.yaml"
    assert project["lockfile"] == "lockfiles/closure.lock.json"
    assert project["files"]["names"] == [
        "lockfiles/closure.lock.json", "recipes/base-sources.yaml", "recipes/closure.yaml",
    ]  # fmt: skip
    assert [t["path"] for t in project["trees"]] == ["conf"]
    conf = tar_bytes(proj / "conf", epoch=0, exclude=["*.tmp"])
    assert project["trees"][0]["digest"] == sha256_bytes(conf), "the tree is the path kind's tar"
    assert index["buildEnvironment"]["image"].endswith("@sha256:" + "ab" * 32)
    with RegistryClient(registry.host, insecure=True) as client:
        assert not client.blob_exists("rel/closure", index["withheld"][0]["digest"])
        assert client.blob_exists("rel/closure", index["sources"][0]["blobs"][0]["digest"])

    res = invoke("release-set", "show", ref, "--insecure", "--json")
    assert res.code == 0, res.stderr
    assert json.loads(res.stdout)["sources"] == {"digest": sources["digest"], "manifests": 1}
    res = invoke("release-set", "show", ref, "--insecure")
    assert f"sources: the source closure {sources['digest']} (1 manifest)" in res.stdout
    bare = f"{registry.host}/rel/bare-show:v1"
    assert invoke("publish", "dist/closure", bare, "--insecure", cwd=proj, store=store).code == 0
    res = invoke("release-set", "show", bare, "--insecure")
    assert "sources: none in the registry" in res.stdout
    res = invoke("release-set", "show", proj / "dist" / "closure", "--json")
    assert json.loads(res.stdout)["sources"] is None, "a directory holds no closure"

    again = _publish(proj, store, ref, *env)
    assert again.code == 0, again.stderr
    redo = json.loads(again.stdout.splitlines()[-1])["sources"]
    assert redo["digest"] == sources["digest"] and redo["bytesUploaded"] == 0


def test_many_blobs_split_into_several_manifests(
    built: tuple[Path, Path, Any], registry: Any
) -> None:
    """--max-layers 1: one manifest per layer (project tar, tree, tool), under one index."""
    proj, store, _ = built
    res = _publish(proj, store, f"{registry.host}/rel/split:v1", "--max-layers", "1")
    assert res.code == 0, res.stderr
    result = json.loads(res.stdout.splitlines()[-1])
    assert result["sources"]["parts"] == 3
    root, _ = _closure(registry.host, "rel/split", result["digest"])
    assert [m["artifactType"] for m in root["manifests"]] == [mt.NVKR_SOURCE_CLOSURE] * 3


def test_pull_with_sources_writes_an_export_and_verify_rebuilds_from_the_registry_alone(
    built: tuple[Path, Path, Any], registry: Any, tmp_path: Path
) -> None:
    proj, store, http = built
    res = _publish(proj, store, f"{registry.host}/rel/closure:v1")
    assert res.code == 0, res.stderr
    digest = json.loads(res.stdout.splitlines()[-1])["digest"]
    ref = f"{registry.host}/rel/closure@{digest}"

    src = tmp_path / "src"
    res = invoke("pull", ref, tmp_path / "set", "--insecure", "--with-sources", src,
                 store=tmp_path / "pull-store")  # fmt: skip
    assert res.code == 0, res.stderr
    assert "withheld: closure/nonfree (url)" in res.stderr
    assert (f"then in {src / 'project'}: nvkr build recipes/closure.yaml --locked --offline "
            "--variant gpu=hopper,kubernetes=1.36,arch=amd64") in res.stderr  # fmt: skip
    assert (src / "project" / "recipes" / "closure.yaml").read_bytes() == (
        proj / "recipes" / "closure.yaml"
    ).read_bytes()
    assert (src / "project" / "conf" / "sub" / "more.conf").read_text() == "more\n"
    assert not (src / "project" / "conf" / "scratch.tmp").exists(), "excluded from the tree"
    fresh = tmp_path / "fresh-store"
    res = invoke("mirror", "import", src, store=fresh)
    assert res.code == 0, res.stderr
    assert "imported 1 blob" in res.stdout
    # the command pull's summary prints builds the same set there (the withheld file added)
    (fresh / "blobs" / "sha256" / hashlib.sha256(NONFREE).hexdigest()).write_bytes(NONFREE)
    res = invoke("build", "recipes/closure.yaml", "--locked", "--offline", "--variant",
                 "gpu=hopper,kubernetes=1.36,arch=amd64", "--json", cwd=src / "project",
                 store=fresh)  # fmt: skip
    assert res.code == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1])["releaseSets"][0]["digest"] == digest

    # nothing upstream any more: the loopback mirror is emptied
    shutil.rmtree(http.root)
    http.root.mkdir()
    nonfree_only = tmp_path / "nonfree-store"
    (nonfree_only / "blobs" / "sha256").mkdir(parents=True)
    hexd = hashlib.sha256(NONFREE).hexdigest()
    (nonfree_only / "blobs" / "sha256" / hexd).write_bytes(NONFREE)
    res = invoke("verify", ref, "--insecure", "--rebuild", "--seed-store", nonfree_only, "--json",
                 cwd=tmp_path)  # fmt: skip
    assert res.code == 0, res.stderr + res.stdout
    rebuilt = json.loads(res.stdout)["rebuild"]
    assert rebuilt["identical"] is True and rebuilt["digest"] == digest
    assert rebuilt["sources"]["withheld"][0]["name"] == "nonfree"
    assert rebuilt["sources"]["imported"] >= 1

    # without the withheld source, or with a store that lacks it: named before any build
    nonfree = "sha256:" + hashlib.sha256(NONFREE).hexdigest()
    lacking = tmp_path / "lacking-store"
    (lacking / "blobs" / "sha256").mkdir(parents=True)
    for seed in ((), ("--seed-store", lacking)):
        res = invoke("verify", ref, "--insecure", "--rebuild", *seed, cwd=tmp_path)
        assert res.code == 2, res.stderr
        assert "withholds 1 source the rebuild needs (publish: false in the recipe" in res.stderr
        assert f"closure/nonfree (url, {nonfree})" in res.stderr and "--seed-store" in res.stderr
        assert "the rebuild of" not in res.stderr, "nothing was built"


def test_a_project_that_is_not_the_sets_pushes_nothing(
    built: tuple[Path, Path, Any], registry: Any
) -> None:
    proj, store, _ = built
    recipe = proj / "recipes" / "closure.yaml"
    recipe.write_text(recipe.read_text().replace("/usr/bin/tool", "/usr/bin/tool2"))
    res = _publish(proj, store, f"{registry.host}/rel/other:v1")
    assert res.code == 2, res.stderr
    assert "was built from recipe recipes/closure.yaml" in res.stderr
    with RegistryClient(registry.host, insecure=True) as client:
        assert client.manifest_digest("rel/other", "v1") is None, "not even the set is pushed"


def test_a_project_without_the_sets_files_or_an_option_without_the_flag_is_named(
    built: tuple[Path, Path, Any], registry: Any, tmp_path: Path
) -> None:
    proj, store, _ = built
    layout = proj / "dist" / "closure"
    ref = f"{registry.host}/rel/nowhere:v1"
    for where, what in ((tmp_path, "recipe recipes/closure.yaml"),
                        (proj / "recipes", "recipe recipes/closure.yaml")):  # fmt: skip
        res = invoke("publish", layout, ref, "--insecure", "--with-sources", "--project", where,
                     store=store)  # fmt: skip
        assert res.code == 2, res.stderr
        assert f"release set closure was built from {what}, which is not in {where}" in (res.stderr)
    (proj / "lockfiles" / "closure.lock.json").rename(tmp_path / "moved.json")
    res = invoke("publish", layout, ref, "--insecure", "--with-sources", "--project", proj,
                 store=store)  # fmt: skip
    assert res.code == 2 and "lockfile lockfiles/closure.lock.json, which is not in" in res.stderr
    for option in (("--project", str(proj)), ("--build-env", "r.example/ci@sha256:" + "a" * 64)):
        res = invoke("publish", layout, ref, "--insecure", *option, store=store)
        assert res.code == 2 and f"{option[0]} is an option of --with-sources" in res.stderr
    with RegistryClient(registry.host, insecure=True) as client:
        assert client.manifest_digest("rel/nowhere", "v1") is None, "nothing pushed"


def test_a_closure_missing_a_blob_names_it_and_its_source(
    built: tuple[Path, Path, Any], registry: Any, tmp_path: Path
) -> None:
    proj, store, _ = built
    res = _publish(proj, store, f"{registry.host}/rel/broken:v1")
    assert res.code == 0, res.stderr
    digest = json.loads(res.stdout.splitlines()[-1])["digest"]
    _, index = _closure(registry.host, "rel/broken", digest)
    tool = index["sources"][0]["blobs"][0]["digest"]
    shutil.rmtree(registry.blob_data(tool).parent)  # the registry lost it
    src = tmp_path / "src"
    res = invoke("pull", f"{registry.host}/rel/broken@{digest}", tmp_path / "set", "--insecure",
                 "--with-sources", src, store=tmp_path / "pull-store")  # fmt: skip
    assert res.code == 3, res.stderr
    assert tool in res.stderr and "source 'tool'" in res.stderr
    assert not src.exists() and not (tmp_path / "set").exists(), "nothing written"


def test_pulling_sources_of_a_set_published_without_writes_nothing(
    built: tuple[Path, Path, Any], registry: Any, tmp_path: Path
) -> None:
    proj, store, _ = built
    res = invoke("publish", "dist/closure", f"{registry.host}/rel/bare:v1", "--insecure",
                 "--json", cwd=proj, store=store)  # fmt: skip
    assert res.code == 0, res.stderr
    digest = json.loads(res.stdout.splitlines()[-1])["digest"]
    res = invoke("pull", f"{registry.host}/rel/bare@{digest}", tmp_path / "set", "--insecure",
                 "--with-sources", tmp_path / "src", store=tmp_path / "pull-store")  # fmt: skip
    assert res.code == 2, res.stderr
    assert "has no source closure among its referrers" in res.stderr
    assert "--with-sources" in res.stderr  # the hint: publish it with its sources
    assert not (tmp_path / "set").exists() and not (tmp_path / "src").exists()


def test_a_closure_whose_parts_name_different_indexes_is_refused(
    built: tuple[Path, Path, Any], registry: Any, tmp_path: Path
) -> None:
    """A part whose config is another index than the others' (a closure put together by
    hand): which index holds would depend on the part read last, so the pull exits 3."""
    import io

    from nvkr.canonical import canonical_json
    from nvkr.delivery.sources import find_closure
    from nvkr.oci.layout import LayoutBlob
    from nvkr.oci.referrers import referrer_descriptor, update_referrers_tag

    proj, store, _ = built
    res = _publish(proj, store, f"{registry.host}/rel/mixed:v1", "--max-layers", "1")
    assert res.code == 0, res.stderr
    subject = json.loads(res.stdout.splitlines()[-1])["digest"]
    repo = "rel/mixed"
    with RegistryClient(registry.host, insecure=True) as client:
        desc = find_closure(client, repo, subject)
        assert desc is not None
        root = json.loads(client.get_manifest(repo, desc["digest"])[0])
        part = json.loads(client.get_manifest(repo, root["manifests"][1]["digest"])[0])
        other = canonical_json({"nvkrMirror": 1, "sources": []})
        digest = sha256_bytes(other)
        client.push_blob(repo, digest, len(other), lambda: io.BytesIO(other))
        part["config"] = {**part["config"], "digest": digest, "size": len(other)}
        data = canonical_json(part)
        client.push_manifest(repo, sha256_bytes(data), data, mt.OCI_MANIFEST)
        root["manifests"][1] = {**root["manifests"][1], "digest": sha256_bytes(data),
                                "size": len(data)}  # fmt: skip
        data = canonical_json(root)
        client.push_manifest(repo, sha256_bytes(data), data, mt.OCI_INDEX)
        blob = LayoutBlob(sha256_bytes(data), len(data), mt.OCI_INDEX, "test")
        update_referrers_tag(client, repo, subject, [referrer_descriptor(blob, root)])
        # the hand-made closure sorts first or not: drop the true one from the listing
        tag = "sha256-" + subject.split(":", 1)[1]
        listed = json.loads(client.get_manifest(repo, tag)[0])
        listed["manifests"] = [m for m in listed["manifests"] if m["digest"] != desc["digest"]]
        data = canonical_json(listed)
        client.push_manifest(repo, tag, data, mt.OCI_INDEX)
    src = tmp_path / "src"
    res = invoke("pull", f"{registry.host}/{repo}@{subject}", tmp_path / "set", "--insecure",
                 "--with-sources", src, store=tmp_path / "pull-store")  # fmt: skip
    assert res.code == 3, res.stderr
    assert f"manifests[1] names config {digest}" in res.stderr
    assert not src.exists()


def test_build_push_with_sources_pushes_the_closure_after_the_set(
    built: tuple[Path, Path, Any], registry: Any
) -> None:
    """``build --push --with-sources``: the same closure ``publish --with-sources`` makes."""
    from nvkr.delivery.sources import find_closure

    proj, store, _ = built
    res = invoke("build", "recipes/closure.yaml", "--locked", "--push",
                 f"{registry.host}/rel/built", "--with-sources", "--insecure",
                 cwd=proj, store=store)  # fmt: skip
    assert res.code == 0, res.stderr
    assert "pushed the sources of closure: 1 source, 3 blobs (" in res.stderr
    assert "withheld: closure/nonfree" in res.stderr
    with RegistryClient(registry.host, insecure=True) as client:
        subject = client.manifest_digest("rel/built", "closure")
        assert subject is not None
        built_closure = find_closure(client, "rel/built", subject)
    published = _publish(proj, store, f"{registry.host}/rel/built:closure")
    assert published.code == 0, published.stderr
    assert built_closure is not None
    pushed = json.loads(published.stdout.splitlines()[-1])["sources"]["digest"]
    assert pushed == built_closure["digest"], "one closure, whichever verb pushed it"

    res = invoke("build", "recipes/closure.yaml", "--with-sources", cwd=proj, store=store)
    assert res.code == 2 and "--with-sources pushes with --push" in res.stderr


# -- promotion: attested by two rebuilders, copied whole, rebuilt from the second registry ---------
def _keys(tmp: Path) -> dict[str, Path]:
    for name in ("k1", "k2"):
        res = invoke("keys", "generate", "--out", tmp / name)
        assert res.code == 0, res.stderr
    return {name: tmp / name for name in ("k1", "k2")}


def test_an_attested_set_copied_with_its_sources_rebuilds_from_the_second_registry(
    built: tuple[Path, Path, Any],
    registry: Any,
    tmp_path: Path,
) -> None:
    from tests.helpers.registry import run_registry

    proj, store, http = built
    res = invoke("publish", "dist/closure", f"{registry.host}/ci/closure:v1", "--insecure",
                 "--with-sources", "--json", cwd=proj, store=store)  # fmt: skip
    assert res.code == 0, res.stderr
    digest = json.loads(res.stdout.splitlines()[-1])["digest"]
    shutil.rmtree(http.root)  # nothing upstream from here on
    http.root.mkdir()
    withheld = tmp_path / "withheld-store"  # the one source the closure does not carry
    (withheld / "blobs" / "sha256").mkdir(parents=True)
    (withheld / "blobs" / "sha256" / hashlib.sha256(NONFREE).hexdigest()).write_bytes(NONFREE)
    keys = _keys(tmp_path)
    ref = f"{registry.host}/ci/closure@{digest}"
    for key in keys.values():
        res = invoke("verify", ref, "--insecure", "--rebuild", "--seed-store", withheld,
                     "--attest", f"{key}.key", cwd=tmp_path)  # fmt: skip
        assert res.code == 0, res.stderr + res.stdout

    policy = tmp_path / "policy.yaml"
    policy.write_text("attestations:\n  minimum: 2\n  keys: [k1.pub, k2.pub]\n")
    with run_registry(tmp_path / "second") as second:
        res = invoke("copy", f"{registry.host}/ci/closure:v1", f"{second.host}/prod/closure:v1",
                     "--insecure", cwd=tmp_path)  # fmt: skip
        assert res.code == 0, res.stderr
        promoted = f"{second.host}/prod/closure@{digest}"
        res = invoke("verify", promoted, "--insecure", "--rebuild", "--seed-store", withheld,
                     "--policy", policy, "--json", cwd=tmp_path)  # fmt: skip
        assert res.code == 0, res.stderr + res.stdout
        doc = json.loads(res.stdout)
        assert doc["rebuild"]["identical"] is True and doc["rebuild"]["digest"] == digest
        assert doc["rebuild"]["sources"]["reference"].startswith(f"{second.host}/prod/closure@")
        assert doc["policy"]["attestations"]["counted"] == 2

        # a rebuilder that did not attest: one of the two the policy wants is missing
        assert invoke("keys", "generate", "--out", tmp_path / "k3").code == 0
        other = tmp_path / "other.yaml"
        other.write_text("attestations:\n  minimum: 2\n  keys: [k1.pub, k3.pub]\n")
        res = invoke("verify", promoted, "--insecure", "--policy", other, cwd=tmp_path)
        assert res.code == 3 and "1 PASSED" in res.stderr and "the policy requires 2" in res.stderr
