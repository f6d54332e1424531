"""End to end: the default recipe built, signed and verified, then rebuilt bit for bit.

Builds the default release set once (fresh clone, store seeded with the Go toolchain wheel as in
test_build_default.py), signs it with a key made by ``nvkr keys generate``, and runs the real
``nvkr verify`` in a subprocess: with the key, with a policy, after a flipped byte, and with
``--rebuild`` (a second full build in a fresh store, compared artifact by artifact).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.nvkr import Result, make_clone, run_nvkr, start_nvkr

pytestmark = pytest.mark.slow

SET = "nvkr-default-k8s1.36"


def nvkr(*args: Any, cwd: Path, store: Path) -> Result:
    """The real CLI in a subprocess (:func:`tests.helpers.nvkr.start_nvkr`), for up to 30 min (a
    rebuild)."""
    return start_nvkr(*(str(a) for a in args), cwd=cwd, store=store, timeout=1800).result()


@dataclass
class Built:
    clone: Path
    store: Path
    layout: Path
    pub: Path
    digest: str


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory, default_build: Any) -> Built:
    from nvkr.releaseset.signing import sign_release_set
    from nvkr.sign import load_private_key

    tmp = tmp_path_factory.mktemp("verify-default")
    clone = make_clone(tmp / "clone")
    store = default_build.store  # a no-op build writing this clone's dist/
    res = run_nvkr("build", "--locked", cwd=clone, store=store)
    assert res.code == 0, res.stderr
    layout = clone / "dist" / SET
    digest = json.loads((layout / "index.json").read_bytes())["manifests"][0]["digest"]
    made = nvkr(
        "keys", "generate", "--type", "ecdsa-p256", "--out", "release", cwd=clone, store=store
    )
    assert made.code == 0, made.stderr
    assert "PRIVATE KEY" not in made.stdout + made.stderr
    sign_release_set(layout, load_private_key(clone / "release.key"))
    return Built(clone, store, layout, clone / "release.pub", digest)


def test_signed_default_release_set_verifies_with_its_key(signed: Built) -> None:
    res = nvkr(
        "verify", f"dist/{SET}", "--key", signed.pub, "--json", cwd=signed.clone, store=signed.store
    )
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["releaseSet"]["digest"] == signed.digest, "signing left the release set digest alone"
    keyid = doc["keys"][0]["keyid"]
    assert doc["releaseSet"]["signatures"][0]["verifiedBy"] == [keyid]
    kinds = {a["kind"] for a in doc["artifacts"]}
    assert kinds == {"binary", "image", "chart", "machine-image"}
    for art in doc["artifacts"]:
        assert art["provenance"], art
        assert [s["verifiedBy"] for s in art["signatures"]] == [[keyid]], art
    # how long it took is measured by benchmarks/verify.py, not asserted here
    assert isinstance(doc["milliseconds"], int) and "seconds" not in doc


def test_the_default_policy_holds(signed: Built) -> None:
    policy = signed.clone / "policy.yaml"
    policy.write_text(
        "allowedBuilderIds: [https://nvkr.dev/builders/nvkr]\n"
        "requireProvenance: [binary, image, chart, machine-image]\n"
        "requireSbom: [binary, image, chart, machine-image]\n"
        "allowedSourcePrefixes: ['https://files.pythonhosted.org/', 'http://deb.debian.org/']\n"
        "minimumKeyBits: 128\n"
    )
    res = nvkr(
        "verify",
        f"dist/{SET}",
        "--key",
        signed.pub,
        "--policy",
        policy,
        cwd=signed.clone,
        store=signed.store,
    )
    assert res.code == 0, res.stdout + res.stderr
    assert "0 violation(s)" in res.stdout


def test_in_toto_verifies_every_signed_provenance(signed: Built) -> None:
    from in_toto.models.metadata import Metadata
    from securesystemslib.signer import SSlibKey

    from nvkr.sign import key_id, load_public_key

    public = load_public_key(signed.pub)
    key = SSlibKey.from_crypto(public, keyid=key_id(public)).to_dict()
    key["keyid"] = key_id(public)
    top = json.loads((signed.layout / "index.json").read_bytes())
    checked = 0
    for desc in top["manifests"][1:]:
        manifest = json.loads(
            (signed.layout / "blobs" / "sha256" / desc["digest"][7:]).read_bytes()
        )
        envelope = json.loads(
            (signed.layout / "blobs" / "sha256" / manifest["layers"][0]["digest"][7:]).read_bytes()
        )
        Metadata.from_dict(envelope).verify_signature(key)
        checked += 1
    assert checked >= 5


@pytest.mark.parametrize(
    ("artifact", "kind"), [("agent", "binary"), ("node-image", "machine-image")]
)
def test_a_flipped_byte_in_a_released_file_fails(
    signed: Built, tmp_path: Path, artifact: str, kind: str
) -> None:
    """One flipped byte in the agent binary or in a QCOW2 machine image: exit 3, naming the
    blob and the artifact. The copy of the layout hard-links its blobs; the flipped file is
    rewritten, never written through the link."""
    from nvkr.releaseset import read_metadata

    layout = shutil.copytree(signed.layout, tmp_path / SET, copy_function=os.link)
    primary = next(
        a["primary"]["digest"]
        for a in read_metadata(layout, SET)["artifacts"]
        if a["name"] == artifact and a["kind"] == kind
    )
    path = layout / "blobs" / "sha256" / primary[7:]
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x80
    path.unlink()
    path.write_bytes(bytes(data))
    res = nvkr("verify", layout, "--key", signed.pub, cwd=signed.clone, store=signed.store)
    assert res.code == 3, res.stdout + res.stderr
    assert f"blob {primary}" in res.stderr and f"artifact {artifact}" in res.stderr


def test_rebuild_reports_every_artifact_identical(default_build: Any) -> None:
    """``nvkr verify REF --rebuild`` of one variant of the session's default build (with Secure
    Boot on: the session's Secure Boot set), published with its sources (started by the fixture
    and running alongside the other tests): a rebuild in a fresh store from the registry's
    source closure alone (recipe, lockfile, every blob), offline, without the owner's key,
    gives the same digest for every artifact and for the release set (the UKI's signature taken
    from the set, checked and named), and builds only that variant. Its Secure Boot claims are
    tests/integration/test_secure_boot.py's."""
    res = default_build.rebuild.result()
    assert res.code == 0, res.stdout[-4000:] + res.stderr
    rebuilt = json.loads(res.stdout)["rebuild"]
    assert rebuilt["identical"] is True, rebuilt
    index = default_build.secure_boot.layout / "index.json"
    digest = json.loads(index.read_bytes())["manifests"][0]["digest"]
    assert rebuilt["digest"] == rebuilt["rebuiltDigest"] == digest
    assert rebuilt["artifacts"] and all(a["identical"] for a in rebuilt["artifacts"]), rebuilt
    names = {a["name"] for a in rebuilt["artifacts"]}
    assert names == {"agent", "agent-image", "agent-chart", "node-image"}
    assert "arm64" not in json.dumps(rebuilt["artifacts"]), "one variant, hopper amd64"
    # from the registry alone: the set was published with its sources, and the rebuild took
    # the recipe, the lockfile and every blob from there (offline, other addresses unreachable)
    published = json.loads(default_build.published.stdout.splitlines()[-1])
    sources = rebuilt["sources"]
    assert sources["closure"] == published["sources"]["digest"] and not sources["withheld"]
    exported = json.loads((default_build.mirror / "index.json").read_bytes())
    assert sources["imported"] == exported["blobs"]["count"], "what `mirror export` holds"
    assert sources["bytes"] > exported["blobs"]["bytes"], "the export's blobs, and the project"
    print(  # the figures of the closure, for the record (-s)
        f"\nsource closure {sources['bytes']} bytes in {sources['blobs']} blobs, pushed in "
        f"{published['sources']['milliseconds']} ms; release set {published['bytesUploaded'] + published['bytesSkipped']} "
        f"bytes; rebuild {rebuilt['milliseconds']} ms"
    )
