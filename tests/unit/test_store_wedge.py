"""A store never wedges (issue 27, item 4): an output blob of a cached action below another
cached action (a container-image layer below a cached image index and release set) missing or
corrupt makes the next build rebuild whatever it invalidates, at any depth; ``store verify``
reports action records whose outputs are gone and ``--repair`` deletes them.

The project: a daemonless image on two arches (so an image-index action joins them), whose one
file is a url source from a loopback server; a build takes about a second.

The verbs run in this process (:func:`tests.helpers.cli.invoke`: the console script's entry point,
its output and exit codes); the store's warnings reach the result's stderr as a terminal shows them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nvkr.store import Store
from tests.helpers.cli import invoke
from tests.helpers.recipes import SCRATCH_TOOL, write_scratch_tool_recipe

TOOL = SCRATCH_TOOL


@pytest.fixture
def project(tmp_path, http_dir):
    (http_dir.root / "tool").write_bytes(TOOL)
    proj = tmp_path / "proj"
    write_scratch_tool_recipe(proj, "wedge", http_dir.url, arches="amd64, arm64")
    locked = invoke("lock", "recipes/wedge.yaml", cwd=proj, store=tmp_path / "store")
    assert locked.code == 0, locked.stderr
    return proj


def _build(proj: Path, store: Path) -> tuple[object, dict]:
    res = invoke("build", "recipes/wedge.yaml", "--json", cwd=proj, store=store)
    assert res.code == 0, res.stdout[-3000:] + res.stderr[-3000:]
    result = res.json_events()[-1]
    assert result["event"] == "result"
    return res, result


def _records(store: Path) -> dict[str, dict]:
    return {p.name: json.loads(p.read_bytes()) for p in (store / "actions").glob("*.json")}


def _output_of_one_arch(store: Path, role: str) -> str:
    """The digest of output ``role`` (layer, manifest) of the amd64 image: an output of a
    container-image action whose image-index and release-set records are cached above it."""
    (image,) = [
        r
        for r in _records(store).values()
        if r["builder"] == "container-image"
        and r["metadata"]["platform"]["architecture"] == "amd64"
    ]
    (out,) = [o for o in image["outputs"] if o["role"] == role]
    return str(out["digest"])


def _damage(path: Path, how: str) -> None:
    if how == "missing":
        path.unlink()
        return
    st = path.stat()
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(st.st_size // 2)
        byte = f.read(1)
        f.seek(st.st_size // 2)
        f.write(bytes([byte[0] ^ 0x01]))
    os.chmod(path, 0o444)


@pytest.mark.parametrize("role", ["layer", "manifest"])
@pytest.mark.parametrize("how", ["missing", "corrupt"])
def test_an_output_lost_below_a_cached_index_is_rebuilt(project, tmp_path, how, role):
    store = tmp_path / "store"
    _, first = _build(project, store)
    lost = _output_of_one_arch(store, role)
    _damage(Store(store).blob_path(lost), how)
    _, again = _build(project, store)
    assert again["releaseSets"][0]["digest"] == first["releaseSets"][0]["digest"]
    assert again["built"], "the image whose output was lost must be built again"
    assert Store(store).has_blob(lost)
    _, third = _build(project, store)
    assert third["upToDate"] and not third["built"]


# -- at any depth: in-process builders whose results reference their dependencies' outputs ------
class OciChain:
    """The ``test-oci`` builder: ``layer`` writes a blob, ``index`` an OCI index over its
    dependencies' first outputs (so its consumers read blobs only its dependencies' records
    own), ``set`` takes the closure of its dependencies into its outputs, as a release set
    does (and fails as one does when a blob of it is missing)."""

    name = "test-oci"
    version = "1"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def run(self, ctx) -> None:
        from nvkr.oci import mediatypes as mt
        from nvkr.oci.closure import store_closure

        self.calls.append(ctx.action.name)
        kind = ctx.action.params["kind"]
        out = ctx.workdir / "out"
        if kind == "layer":
            out.write_bytes(f"the layer of {ctx.action.name}".encode())
            ctx.add_output(out, name="layer", media_type="application/octet-stream", role="layer")
            return
        firsts = [ctx.deps[k].outputs[0].descriptor() for k in ctx.action.deps]
        if kind == "index":
            manifests = firsts
            doc = {"schemaVersion": 2, "mediaType": mt.OCI_INDEX, "manifests": manifests}
            out.write_bytes(json.dumps(doc, sort_keys=True).encode())
            ctx.add_output(out, name="index", media_type=mt.OCI_INDEX, role="index")
            return
        for first in firsts:
            for n, blob in enumerate(store_closure(ctx.store, first, referrer=ctx.action.name)):
                path = ctx.workdir / f"blob{n}"
                path.write_bytes(ctx.store.checked_path(blob["digest"]).read_bytes())
                ctx.add_output(path, name=f"blob{n}", media_type=blob["mediaType"], role="blob")


def _oci_action(name: str, kind: str, deps=()):
    from nvkr.action import Action, action_key

    params = {"n": name, "kind": kind}
    key = action_key("test-oci", "1", params, {}, {}, 0, tuple(deps))
    return Action(
        key=key,
        builder="test-oci",
        builder_version="1",
        name=name,
        params=params,
        inputs={},
        tools={},
        epoch=0,
        deps=tuple(deps),
    )


@pytest.fixture
def chain(monkeypatch):
    """leaf (a blob) <- mid (an index over it) <- top (an index over mid) <- root (a set of
    top's closure): the leaf's blob is two cached actions below the one that reads it."""
    from nvkr.builders import api
    from tests.helpers.recorder import make_plan

    api.get_builder("go-binary")  # fill the registry first
    oci = OciChain()
    monkeypatch.setitem(api.REGISTRY, "test-oci", oci)
    leaf = _oci_action("leaf", "layer")
    mid = _oci_action("mid", "index", [leaf.key])
    top = _oci_action("top", "index", [mid.key])
    root = _oci_action("root", "set", [top.key])
    return oci, make_plan(leaf, mid, top, root, roots=[root]), (leaf, mid, top, root)


@pytest.mark.parametrize("lost", ["leaf", "mid"])
@pytest.mark.parametrize("how", ["missing", "corrupt"])
def test_an_output_lost_at_any_depth_is_rebuilt(chain, tmp_path, how, lost):
    from nvkr.execute import execute
    from nvkr.fetch.context import FetchContext

    oci, plan, actions = chain
    store = Store(tmp_path / "store", notice=lambda digest, reason: None)
    first = execute(plan, store, FetchContext(store=store), jobs=1)
    (victim,) = [a for a in actions if a.name == lost]
    blob = first.results[victim.key].outputs[0].digest
    _damage(store.blob_path(blob), how)
    oci.calls.clear()
    again = execute(plan, store, FetchContext(store=store), jobs=1)
    assert sorted(oci.calls) == sorted([lost, "root"]), "the producer of the lost blob runs again"
    root = actions[-1].key
    assert again.results[root].outputs == first.results[root].outputs
    oci.calls.clear()
    assert execute(plan, store, FetchContext(store=store), jobs=1).up_to_date
    assert oci.calls == []


# -- store verify -------------------------------------------------------------------------------
def test_store_verify_reports_records_whose_outputs_are_gone_and_repair_unwedges(project, tmp_path):
    store = tmp_path / "store"
    _, first = _build(project, store)
    layer = _output_of_one_arch(store, "layer")
    Store(store).blob_path(layer).unlink()
    res = invoke("store", "verify", cwd=project, store=store)
    assert res.code == 3, res.stdout + res.stderr
    assert "store: ok" not in res.stdout
    (line,) = [x for x in res.stdout.splitlines() if x.strip().startswith("missing")]
    assert layer in line and "(container-image)" in line and "(release-set)" in line, line
    report = json.loads(invoke("store", "verify", "--json", cwd=project, store=store).stdout)
    assert report["ok"] is False and list(report["missingOutputs"]) == [layer]
    stale = {name for name, r in _records(store).items() if layer in json.dumps(r["outputs"])}
    assert sorted(report["staleActions"]) == sorted(stale) and len(stale) >= 2
    rep = invoke("store", "verify", "--repair", "--json", cwd=project, store=store)
    assert rep.code == 0, rep.stderr
    assert json.loads(rep.stdout)["repaired"] is True
    assert not stale & set(_records(store)), "--repair deletes the records whose outputs are gone"
    _, again = _build(project, store)
    assert again["releaseSets"][0]["digest"] == first["releaseSets"][0]["digest"]
    assert invoke("store", "verify", cwd=project, store=store).code == 0
    _, third = _build(project, store)
    assert third["upToDate"]


def test_store_verify_repair_of_a_rotten_layer_leaves_a_store_that_builds(project, tmp_path):
    """Bit rot (the seal still matches): --repair deletes the blob and the records naming it,
    and the next build (not three) rebuilds what they made."""
    store = tmp_path / "store"
    _, first = _build(project, store)
    layer = _output_of_one_arch(store, "layer")
    s = Store(store)
    _damage(s.blob_path(layer), "corrupt")
    s.seal(layer)
    rep = invoke("store", "verify", "--repair", "--json", cwd=project, store=store)
    assert rep.code == 0, rep.stderr
    report = json.loads(rep.stdout)
    assert report["corrupt"] == [layer] and report["staleActions"], report
    assert invoke("store", "verify", cwd=project, store=store).code == 0, "repaired is ok"
    _, again = _build(project, store)
    assert again["releaseSets"][0]["digest"] == first["releaseSets"][0]["digest"]
    assert again["built"]
