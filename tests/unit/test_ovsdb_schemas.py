"""Rule ovn-kubernetes.ovn-schema from the bytes (nvkr.catalog.schemas): the schema versions read
from libovsdb model files in a stored git tree and from the .ovsschema files of a .deb, recorded
in lock entries, and checked on the catalog's own leaves.

The bytes are stand-ins of the pins (GitHub is not reachable here): the tree is
tests.helpers.ovnkubernetes' repository, whose models embed the versions upstream's 51b98b91 does
(NB 7.11.0, SB 20.41.0), and the .deb is an ovn-central 25.03.0-1 with the schemas Debian 13's
ships (the same versions, read from the real package by tests/integration/test_catalog_leaf.py).
"""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from nvkr.catalog.evaluation import check_variants
from nvkr.catalog.schemas import (
    RECORD,
    SchemaReadError,
    SourceSchemas,
    model_schema,
    ovsschema,
)
from nvkr.errors import RecipeError
from nvkr.fetch.entries import LockEntry
from nvkr.recipe.loader import load_recipe
from nvkr.recipe.matrix import Variant, expand
from nvkr.repro import write_tar
from nvkr.store import Store
from tests.helpers import REPO, lock_entry
from tests.helpers.aptrepo import DebSpec, build_deb
from tests.helpers.cli import invoke
from tests.helpers.ovnkubernetes import NEWER_NB, SCHEMAS, Upstream, make_upstream, model_go

LEAVES = sorted((REPO / "recipes" / "catalog").glob("*.yaml"))
RULE = "ovn-kubernetes.ovn-schema"
NB_FILE, SB_FILE = "/usr/share/ovn/ovn-nb.ovsschema", "/usr/share/ovn/ovn-sb.ovsschema"


def _ovsschema(name: str, version: str) -> bytes:
    return json.dumps({"name": name, "version": version, "tables": {}}, indent=4).encode()


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Upstream:
    return make_upstream(tmp_path_factory.mktemp("upstream") / "ovn-kubernetes")


class Bytes:
    """A store holding a commit's tree (whole and ``go-controller/``) and an ovn-central .deb,
    and the lock entries naming them, as ``nvkr lock`` leaves them (``entry`` is what
    :class:`SourceSchemas` asks)."""

    def __init__(self, root: Path, upstream: Upstream, commit: str, schemas: dict[str, bytes]):
        self.store = Store(root / "store")
        tree = root / "tree"
        tree.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(upstream.repo), "archive", commit],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        self.entries: dict[str, dict[str, Any]] = {}
        for name, top in (
            ("ovn-kubernetes-repo", tree),
            ("ovn-kubernetes", tree / "go-controller"),
        ):
            buf = io.BytesIO()
            write_tar(top, buf, epoch=0)  # as nvkr stores a git tree
            digest = self.store.add_bytes(buf.getvalue()).digest
            git = {"kind": "git", "url": "u", "commit": "c", "digest": digest}
            self.entries[name] = {"resolved": lock_entry(git)}
        deb = root / "ovn-central.deb"
        build_deb(DebSpec("ovn-central", "25.03.0-1", "amd64", files=schemas), deb)
        sha = self.store.add_file(deb).digest
        package = {"name": "ovn-central", "version": "25.03.0-1", "sha256": sha}
        package |= {"arch": "amd64", "repository": "r", "url": "u", "filename": "f", "size": 1}
        self.entries["ovnkube-packages"] = {"resolved": _apt([package])}
        self.asked: list[str] = []

    def entry(self, variant: Variant, name: str) -> dict[str, Any]:
        self.asked.append(name)
        return self.entries.setdefault(name, {"resolved": _apt([])})


def _apt(packages: list[dict[str, Any]]) -> LockEntry:
    return lock_entry(
        {"kind": "apt", "arch": "amd64", "digest": "sha256:" + "0" * 64, "packages": packages}
    )


TRIXIE = {
    NB_FILE: _ovsschema("OVN_Northbound", "7.11.0"),
    SB_FILE: _ovsschema("OVN_Southbound", "20.41.0"),
}


def test_model_and_schema_files_are_read_as_upstream_writes_them() -> None:
    """modelgen's model.go embeds the schema as a raw string; an .ovsschema is the JSON itself."""
    for pkg, (db, version) in SCHEMAS.items():
        assert model_schema(model_go(pkg, db, version).encode(), "m.go") == (db, version)
    assert ovsschema(TRIXIE[NB_FILE], NB_FILE) == ("OVN_Northbound", "7.11.0")


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"package nbdb\n\nfunc FullDatabaseModel() {}\n", "m.go embeds no schema"),
        (b'package nbdb\n\nvar schema = `{"name": "X",`\n', "m.go: its schema is not JSON"),
        (b'package nbdb\n\nvar schema = `{"tables": {}}`\n', 'm.go: its schema has no "name"'),
        (b'package nbdb\n\nvar schema = `{"name": "X", "version": "7.11"}`\n', "expected x.y.z"),
    ],
    ids=["no-schema", "not-json", "no-name", "bad-version"],
)
def test_a_file_that_is_no_model_says_why(data: bytes, problem: str) -> None:
    with pytest.raises(SchemaReadError) as err:
        model_schema(data, "m.go")
    assert problem in err.value.message


def _leaf_variants(leaf: Path) -> list[Variant]:
    return expand(load_recipe(leaf))


@pytest.mark.parametrize("leaf", LEAVES, ids=lambda p: p.stem)
def test_every_leaf_passes_with_the_bytes_of_its_pins(
    leaf: Path, upstream: Upstream, tmp_path: Path
) -> None:
    """Each leaf's variants (both arches) with the tree of the pinned models and trixie's
    ovn-central: the rule applies and holds; what was read is recorded in the entries (the
    models once per commit and file, from both git sources)."""
    found = Bytes(tmp_path, upstream, upstream.good, TRIXIE)
    report = check_variants(
        leaf, _leaf_variants(leaf), schemas=SourceSchemas(found.entry, found.store, reread=True)
    )
    assert RULE in report.applied
    assert found.entries["ovn-kubernetes"][RECORD] == [
        {"file": "go-controller/pkg/nbdb/model.go", "name": "OVN_Northbound", "version": "7.11.0"},
        {"file": "go-controller/pkg/sbdb/model.go", "name": "OVN_Southbound", "version": "20.41.0"},
    ]
    assert found.entries["ovn-kubernetes-repo"][RECORD] == found.entries["ovn-kubernetes"][RECORD]
    assert found.entries["ovnkube-packages"][RECORD] == [
        {"package": "ovn-central", "file": NB_FILE, "name": "OVN_Northbound", "version": "7.11.0"},
        {"package": "ovn-central", "file": SB_FILE, "name": "OVN_Southbound", "version": "20.41.0"},
    ]


def test_a_newer_pin_against_trixies_ovn_fails_naming_both(
    upstream: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The models of a commit generated from a newer Northbound schema: refused, naming both
    versions, the files, and where the commit and the ovn-central pin are written."""
    monkeypatch.chdir(REPO)  # files named as a user in the repository names them
    leaf = Path("recipes/catalog/hopper-k8s1.36.yaml")
    found = Bytes(tmp_path, upstream, upstream.newer, TRIXIE)
    with pytest.raises(RecipeError) as err:
        check_variants(leaf, _leaf_variants(leaf), schemas=SourceSchemas(found.entry, found.store))
    lines = err.value.message.splitlines()
    assert len(lines) == 2, lines  # one per variant (amd64, arm64), the two sources read once
    assert lines[0].startswith(
        "recipes/catalog/hopper-k8s1.36.yaml: variant gpu=hopper,kubernetes=1.36,arch=amd64: "
        f"rule {RULE}: the OVN_Northbound models are generated from schema {NEWER_NB} "
        "(go-controller/pkg/nbdb/model.go of https://github.com/ovn-org/ovn-kubernetes at commit "
        "51b98b91ff05, recipes/network/ovn-kubernetes.yaml:"
    ), lines[0]
    assert (
        ": sources.ovn-kubernetes.commit), newer than the OVN_Northbound 7.11.0 that " in lines[0]
    )
    assert (
        f"ovn-central ships ({NB_FILE} of ovn-central 25.03.0-1, recipes/network/ovn-kubernetes.yaml:"
    ) in lines[0]
    assert (
        ": sources.ovnkube-packages.packages.ovn-central): the models must be at most" in lines[0]
    )


def test_an_older_ovn_under_the_pinned_models_fails(upstream: Upstream, tmp_path: Path) -> None:
    """The same rule from the other side: the pinned models against an ovn-central whose
    schemas are older (bookworm's OVN 23.03: NB 7.0.0, SB 20.27.0)."""
    leaf = REPO / "recipes" / "catalog" / "ampere-k8s1.36.yaml"
    older = {
        NB_FILE: _ovsschema("OVN_Northbound", "7.0.0"),
        SB_FILE: _ovsschema("OVN_Southbound", "20.27.0"),
    }
    found = Bytes(tmp_path, upstream, upstream.good, older)
    with pytest.raises(RecipeError) as err:
        check_variants(leaf, _leaf_variants(leaf), schemas=SourceSchemas(found.entry, found.store))
    assert "schema 7.11.0" in err.value.message and "OVN_Northbound 7.0.0 that" in err.value.message
    assert (
        "schema 20.41.0" in err.value.message and "OVN_Southbound 20.27.0 that" in err.value.message
    )


def test_plan_checks_the_record_and_fails_closed_without_it(
    upstream: Upstream, tmp_path: Path
) -> None:
    """After the lock read the bytes, the check needs only the entries' records (a fresh runner
    without the blobs); an entry recording nothing, with no blob to read, is a violation asking
    for `nvkr lock`; a package without the files the rule names, too."""
    leaf = REPO / "recipes" / "catalog" / "hopper-k8s1.36.yaml"
    variants = _leaf_variants(leaf)
    found = Bytes(tmp_path / "a", upstream, upstream.newer, TRIXIE)
    check = SourceSchemas(found.entry, found.store, reread=True)
    with pytest.raises(RecipeError):
        check_variants(leaf, variants, schemas=check)
    empty = Store(tmp_path / "empty")
    with pytest.raises(RecipeError) as err:  # from the record alone: the same verdict
        check_variants(leaf, variants, schemas=SourceSchemas(found.entry, empty))
    assert f"schema {NEWER_NB}" in err.value.message
    del found.entries["ovn-kubernetes"][RECORD]
    with pytest.raises(RecipeError) as err:
        check_variants(leaf, variants, schemas=SourceSchemas(found.entry, empty))
    assert (
        "the lockfile records no schema of go-controller/pkg/nbdb/model.go, " in err.value.message
    )
    assert "and the store does not hold the bytes (sha256:" in err.value.message
    assert "run `nvkr lock`" in err.value.message

    bare = Bytes(tmp_path / "b", upstream, upstream.good, {NB_FILE: TRIXIE[NB_FILE]})
    with pytest.raises(RecipeError) as err:
        check_variants(leaf, variants, schemas=SourceSchemas(bare.entry, bare.store))
    assert f"{SB_FILE} is not in ovn-central 25.03.0-1 (" in err.value.message
    assert "sources.ovnkube-packages.packages.ovn-central): the rule reads it" in err.value.message


LOCKED_LEAF = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: ovsdb}
matrix: {gpu: [hopper], kubernetes: ["1.36"], arch: [amd64]}
vars: {kubeletVersion: "1.36.3"}
sources:
  ovn-kubernetes:
    git: https://github.com/ovn-org/ovn-kubernetes
    commit: "@COMMIT@"
    subdir: go-controller
  image-packages:
    apt: {test: {url: "@URL@", suite: stable, keyring: "@KEYRING@"}}
    arch: amd64
    base: none
    packages: {@PACKAGE@: "25.03.0-1"}
artifacts: {}
releaseSet: {name: "ovsdb-{{ gpu }}", clusterRelease: {kubernetes: "1.36.3"}}
"""


def test_lock_records_plan_checks_and_a_refusal_writes_nothing(
    upstream: Upstream, apt_repos: Any, tmp_path: Path
) -> None:
    """Through the CLI on a leaf of a catalog of its own: `nvkr lock` records both sides; a lock
    restoring a record deleted by hand says the entries changed; the newer commit is refused by
    `plan` (the server side from the record, said so) and by `lock` (the lockfile left as it
    was); a leaf pinning the models without ovn-central gets a note, not silence."""
    repo = apt_repos(
        suite="stable",
        arches=("amd64",),
        packages=[
            DebSpec("ovn-central", "25.03.0-1", "amd64", files=TRIXIE),
            DebSpec("ovn-host", "25.03.0-1", "amd64"),
        ],
    )
    catalog = tmp_path / "recipes"
    catalog.mkdir()
    (catalog / "compatibility.yaml").write_bytes(
        (REPO / "recipes" / "compatibility.yaml").read_bytes()
    )
    leaf, store = catalog / "ovsdb.yaml", tmp_path / "store"
    text = (
        LOCKED_LEAF.replace("@URL@", str(repo.url))
        .replace("@KEYRING@", str(repo.keyring))
        .replace("@PACKAGE@", "ovn-central")
    )
    leaf.write_text(text.replace("@COMMIT@", upstream.good))
    mirror = ("--mirror", f"https://github.com/ovn-org/ovn-kubernetes={upstream.repo.as_uri()}")
    lockfile = tmp_path / "lockfiles" / "ovsdb.lock.json"

    locked = invoke("lock", leaf, *mirror, store=store)
    assert locked.code == 0, locked.stderr
    assert "locked 2 sources of 1 variant into" in locked.stdout
    doc = json.loads(lockfile.read_text())
    records = {e["name"]: e[RECORD] for e in doc["sources"]}
    assert records["image-packages"][0] == {
        "package": "ovn-central",
        "file": NB_FILE,
        "name": "OVN_Northbound",
        "version": "7.11.0",
    }
    assert [r["version"] for r in records["ovn-kubernetes"]] == ["7.11.0", "20.41.0"]

    for entry in doc["sources"]:
        del entry[RECORD]
    lockfile.write_text(json.dumps(doc))
    relocked = invoke("lock", leaf, "--offline", store=store)
    assert relocked.code == 0, relocked.stderr
    assert "changed: image-packages, ovn-kubernetes" in relocked.stdout
    assert json.loads(lockfile.read_text())["sources"][0][RECORD]

    leaf.write_text(text.replace("@COMMIT@", upstream.newer))
    before = lockfile.read_bytes()
    planned = invoke("plan", leaf, *mirror, store=store)
    assert planned.code == 2, planned.stderr
    message = " ".join(planned.stderr.split())
    assert (
        f"rule {RULE}: the OVN_Northbound models are generated from schema {NEWER_NB} " in message
    )
    assert (
        f"newer than the OVN_Northbound 7.11.0 that ovn-central ships ({NB_FILE} of ovn-central "
        f"25.03.0-1, {leaf}:15: sources.image-packages.packages.ovn-central; as the lockfile "
        "records it): the models must be at most the server's schema; pin a commit whose models "
        "are generated from OVN_Northbound 7.11.0 or older, or pin ovn-central at a version "
        "shipping a newer schema"
    ) in message
    refused = invoke("lock", leaf, *mirror, store=store)
    assert refused.code == 2 and f"schema {NEWER_NB}" in refused.stderr, refused.stderr
    assert lockfile.read_bytes() == before

    leaf.write_text(text.replace("@COMMIT@", upstream.newer).replace("ovn-central", "ovn-host"))
    noted = invoke("lock", leaf, *mirror, store=store)
    assert noted.code == 0, noted.stderr
    assert (
        f"note: rule {RULE} did not apply to gpu=hopper,kubernetes=1.36,arch=amd64: no apt source "
        "installs ovn-central, so the models of https://github.com/ovn-org/ovn-kubernetes have no "
        "schema to be held to"
    ) in " ".join(noted.stderr.split())


def test_two_files_naming_one_database_fail_closed(upstream: Upstream, tmp_path: Path) -> None:
    """Each file the rule names is one database's: a package whose two schema files name the
    same database is not compared (its other database would go unchecked), it is refused."""
    leaf = REPO / "recipes" / "catalog" / "hopper-k8s1.36.yaml"
    twice = {NB_FILE: TRIXIE[NB_FILE], SB_FILE: _ovsschema("OVN_Northbound", "7.11.0")}
    found = Bytes(tmp_path, upstream, upstream.good, twice)
    with pytest.raises(RecipeError) as err:
        check_variants(leaf, _leaf_variants(leaf), schemas=SourceSchemas(found.entry, found.store))
    assert f"{NB_FILE} and {SB_FILE} of ovn-central 25.03.0-1 (" in err.value.message
    assert "all hold a schema named OVN_Northbound: the rule reads one database from each file" in (
        err.value.message
    )
