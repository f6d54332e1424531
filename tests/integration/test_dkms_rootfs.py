"""End to end: DKMS's build of a kernel module inside the rootfs action is reproducible.

A recipe made for this test: one root filesystem of Debian 13's packages from Debian's mirror,
Debian's full kernel and its headers at the OS layer's version (recipes/os/debian-13.yaml:
vars.debianKernelVersion, as the catalog's bare-metal leaves pin them) and v4l2loopback-dkms,
a small out-of-tree module that DKMS builds from source in the package's postinst, as it builds
NVIDIA's. ``nvkr lock`` resolves the closure; the tree is built in one clone, with the module in
the tree unsigned, built for the tree's kernel, and nothing of DKMS's build left. The module is
signed with a test owner key in both clones (the same bytes), a node image lays it over the
tree, and ``nvkr verify --rebuild`` in the second clone, without the key, from a store holding
only the first store's blobs (every builder runs), offline, with umask 002 and another TZ,
rebuilds the tree, the module and the image: identical but for the module's signature, which it
takes from the set and checks.

NVIDIA's own DKMS build (nvidia-kernel-dkms, the catalog's Debian-driver leaf) runs once in the
suite (tests/integration/test_catalog_leaf.py: its modules' vermagic, symbols and loading in a
boot). A second build of it costs about 350 CPU-seconds (213 s on a quiet two-core machine), so
its reproducibility is checked on demand by ``benchmarks/dkms.py --twice`` (two cold builds in
two stores, the digests compared). The two packages differ in what their Kbuild files compile;
both go through the same DKMS, the same kernel build system and the rootfs builder's DKMS hooks
(builders/rootfs-dkms/: no signing key, no build tree or log left in the tree).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from nvkr.store import Store
from tests.helpers import REPO
from tests.helpers.background import BackgroundTest
from tests.helpers.nvkr import Result, run_nvkr, seed, seed_from_build
from tests.helpers.results import record_of
from tests.helpers.secureboot import make_owner

pytestmark = pytest.mark.slow

MODULE = "v4l2loopback"
PACKAGE_VERSION = "0.15.0-2"  # trixie main, arch all (the module's source for DKMS)
REL = "recipes/dkms.yaml"
ACTION = "rootfs/dkms-rootfs@gpu=hopper,kubernetes=none,arch=amd64"
SIGNED = "signed-modules/dkms-signed@gpu=hopper,kubernetes=none,arch=amd64"
NODE = "node-image/dkms-node@gpu=hopper,kubernetes=none,arch=amd64"


def _recipe() -> str:
    """The recipe, its kernel and initramfs pins the OS layer's (one place names them)."""
    layer = yaml.safe_load((REPO / "recipes/os/debian-13.yaml").read_text())
    apt = layer["sources"]["node-packages"]["apt"]
    pins = layer["sources"]["node-packages"]["packages"]
    kernel = layer["vars"]["debianKernelVersion"]
    recipe = {
        "apiVersion": "nvkr.dev/v1alpha1",
        "kind": "Recipe",
        "metadata": {"name": "dkms-small"},
        "epoch": "1764547200",
        "matrix": {"gpu": ["hopper"], "kubernetes": ["none"], "arch": ["amd64"]},
        "sources": {
            "node-packages": {
                "apt": apt,
                "arch": "amd64",
                "packages": {
                    "linux-image-amd64": kernel,
                    "linux-headers-amd64": kernel,
                    # the initramfs the kernel's postinst makes, compressed as the nodes' are
                    "initramfs-tools": pins["initramfs-tools"],
                    "zstd": pins["zstd"],
                    f"{MODULE}-dkms": PACKAGE_VERSION,
                    # the node image's boot loaders
                    "grub-pc-bin": layer["vars"]["debianGrubVersion"],
                    "grub-efi-amd64-bin": layer["vars"]["debianGrubVersion"],
                },
            },
            # the owner's certificate, a file of a path source (recipes/owner/)
            "owner": {"path": "owner"},
        },
        "artifacts": {
            "dkms-rootfs": {"builder": "rootfs", "packages": "node-packages"},
            # the module DKMS built, signed with the owner's key by the tree's sign-file
            "dkms-signed": {
                "builder": "signed-modules",
                "rootfs": "dkms-rootfs",
                "certificate": {"source": "owner", "path": "owner.crt"},
            },
            # a node image with the signed module over the unsigned one
            "dkms-node": {
                "builder": "node-image",
                "rootfs": "dkms-rootfs",
                "kubernetesVersion": "1.36.4",
                "secureBoot": {"modules": "dkms-signed"},
            },
        },
        "releaseSet": {"name": "dkms-small", "artifacts": ["dkms-node"]},
    }
    return yaml.safe_dump(recipe, sort_keys=False)


def _done(result: Result) -> dict:
    """The rootfs action's ``action-done`` event of a ``--json`` build."""
    assert result.code == 0, result.stderr
    (done,) = [
        e for e in result.json_events() if e["event"] == "action-done" and e["builder"] == "rootfs"
    ]
    return done


def _twice(tmp_path: Path, go_toolchain: tuple[Path, str]) -> None:
    """The test's body, run in the background (:func:`start_in_background`)."""
    first = tmp_path / "first"
    (first / "recipes" / "owner").mkdir(parents=True)
    (first / REL).write_text(_recipe())
    keys = tmp_path / "keys"  # the owner's key stays out of the project
    keys.mkdir()
    make_owner(keys / "owner.key", first / "recipes/owner/owner.crt")
    store_a = seed(tmp_path / "store-a", go_toolchain)  # the default lock's .debs, some shared
    locked = run_nvkr("lock", REL, cwd=first, store=store_a)
    assert locked.code == 0, locked.stderr
    built = _done(run_nvkr("build", REL, "--locked", "--action", ACTION, "--json",
                           cwd=first, store=store_a))  # fmt: skip

    second = tmp_path / "second"
    shutil.copytree(first, second, ignore=shutil.ignore_patterns("dist"))
    # the first store's actions and blobs: the second clone signs from the same tree (the tree
    # is built again, from the blobs alone, by verify --rebuild at the end)
    store_b = seed_from_build(tmp_path / "store-b", store_a)
    ra = record_of(Store(store_a).get_action(built["key"]))
    assert ra is not None

    # what DKMS left in the tree: the module for the tree's kernel, unsigned, and no build of it
    lock = json.loads(next((first / "lockfiles").rglob("dkms*.lock.json")).read_text())
    packages = {p["name"] for e in lock["sources"] for p in e["resolved"].get("packages", [])}
    assert {"dkms", f"{MODULE}-dkms", "linux-headers-amd64"} <= packages
    (tar_out,) = [o for o in ra["outputs"] if o["name"] == "rootfs.tar"]
    tree = Store(store_a).blob_path(tar_out["digest"])
    with tarfile.open(tree) as tar:
        names = tar.getnames()
        (ko,) = [n for n in names if n.endswith(f"/updates/dkms/{MODULE}.ko.xz")]
        kernel = ko.split("/lib/modules/")[1].split("/")[0]
        member = tar.extractfile(ko)
        assert member is not None
        (tmp_path / "m.ko.xz").write_bytes(member.read())
    info = subprocess.run(
        ["modinfo", str(tmp_path / "m.ko.xz")], capture_output=True, text=True, check=True
    )
    fields = dict(line.split(":", 1) for line in info.stdout.splitlines() if ":" in line)
    assert fields["vermagic"].split()[0] == kernel, fields["vermagic"]
    assert "sig_id" not in fields and "signer" not in fields, "the module is signed"
    left = [n for n in names if "/var/lib/dkms/" in n]
    assert not [n for n in left if n.endswith(("mok.key", "mok.pub", "make.log"))], left
    assert not [n for n in left if n.endswith("/build") or "/log/" in n], left
    _signed_twice(tmp_path, first, second, store_a, store_b, ko)


def _signed_twice(
    tmp_path: Path, first: Path, second: Path, store_a: Path, store_b: Path, ko: str
) -> None:
    """The module signed with the owner's key in both clones: the same bytes, a signature by
    the owner's certificate that the kernel's modinfo and OpenSSL read, over exactly the
    unsigned module of the tree; no key, or another key, refused before anything builds."""
    from nvkr.secureboot import modsig
    from nvkr.secureboot.owner import parse_certificate

    key = tmp_path / "keys/owner.key"
    crt = first / "recipes/owner/owner.crt"
    # no key, or the wrong one: refused before anything builds (a store without the result)
    empty = tmp_path / "store-empty"
    no_key = run_nvkr("build", REL, "--locked", "--action", SIGNED, cwd=first, store=empty)
    assert no_key.code == 2 and "no key was given" in no_key.stderr, no_key.stderr
    other = tmp_path / "keys/other.key"
    subprocess.run(["openssl", "genrsa", "-out", other, "2048"], check=True, capture_output=True)
    wrong = run_nvkr("build", REL, "--locked", "--action", SIGNED, "--secure-boot-key", str(other),
                     cwd=first, store=empty)  # fmt: skip
    assert wrong.code == 2 and "does not match the certificate" in wrong.stderr, wrong.stderr
    assert not (empty / "actions").exists() or not any((empty / "actions").iterdir())
    records = []
    for clone, store in ((first, store_a), (second, store_b)):
        done = run_nvkr("build", REL, "--locked", "--offline", "--action", SIGNED, "--json",
                        "--secure-boot-key", str(key), cwd=clone, store=store)  # fmt: skip
        assert done.code == 0, done.stderr
        (event,) = [e for e in done.json_events() if e["event"] == "action-done"
                    and e["builder"] == "signed-modules"]  # fmt: skip
        record = record_of(Store(store).get_action(event["key"]))
        assert record is not None
        records.append(record)
        log = "".join(p.read_text() for p in Path(store, "logs").rglob("*.log"))
        assert "PRIVATE KEY" not in log and not list(Path(store).rglob("owner-key.pem"))
    assert records[0]["outputs"] == records[1]["outputs"], "signed twice, other bytes"
    (out,) = records[0]["outputs"]
    with tarfile.open(Store(store_a).blob_path(out["digest"])) as tar:
        (member,) = tar.getmembers()
        assert member.name == ko and member.mode == 0o644
        data = tar.extractfile(member).read()  # type: ignore[union-attr]
    cert = parse_certificate(crt.read_bytes(), str(crt))
    modsig.verify_module(data, cert, member.name)
    (meta,) = records[0]["metadata"]["modules"]
    unsigned = (tmp_path / "m.ko.xz").read_bytes()  # the tree's module, as DKMS built it
    assert modsig.unsigned_payload(data) == modsig.decompress(unsigned)
    assert meta["unsigned"] == "sha256:" + hashlib.sha256(modsig.decompress(unsigned)).hexdigest()
    # what the kernel's tools and OpenSSL read of it
    (tmp_path / "signed.ko.xz").write_bytes(data)
    info = subprocess.run(["modinfo", "-F", "signer", tmp_path / "signed.ko.xz"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert info.stdout.strip() == "nvkr test owner"
    split = modsig.split_module(modsig.decompress(data))
    assert split.pkcs7 is not None
    (tmp_path / "payload").write_bytes(split.payload)
    (tmp_path / "sig.p7").write_bytes(split.pkcs7)
    subprocess.run(
        ["openssl", "cms", "-verify", "-binary", "-inform", "DER", "-in", tmp_path / "sig.p7",
         "-content", tmp_path / "payload", "-certfile", crt, "-CAfile", crt, "-purpose", "any",
         "-out", "/dev/null"],
        check=True, capture_output=True,
    )  # fmt: skip
    # the node image holds the signed module where DKMS put the unsigned one (no key needed:
    # the signed result is in the store)
    node = run_nvkr("build", REL, "--locked", "--offline", "--action", NODE, "--json",
                    cwd=first, store=store_a)  # fmt: skip
    assert node.code == 0, node.stderr
    (event,) = [e for e in node.json_events() if e["event"] == "action-done"
                and e["builder"] == "node-image"]  # fmt: skip
    image = record_of(Store(store_a).get_action(event["key"]))
    assert image is not None
    (disk,) = [o for o in image["outputs"] if o["name"].endswith(".qcow2")]
    cat = subprocess.run(
        [sys.executable, "-m", "nvkr", "image", "cat",
         Store(store_a).blob_path(disk["digest"]), "/" + ko.removeprefix("./")],
        capture_output=True, check=True,
    )  # fmt: skip
    assert cat.stdout == data, "the image's module is not the signed one"

    # verify --rebuild without the key, from the second clone and the blobs of its store: the
    # rootfs and the image are rebuilt, each module signature taken from the set and checked
    # over the rebuilt module; identical but for those signatures
    full = run_nvkr("build", REL, "--locked", "--offline", cwd=first, store=store_a)
    assert full.code == 0, full.stderr  # the set, from the actions above
    verified = run_nvkr(
        "verify", str(first / "dist/dkms-small"), "--rebuild", "--project", str(second),
        "--seed-store", str(store_b), "--offline", "--json", cwd=second, store=store_b,
        umask=0o002, env={"TZ": "Asia/Kolkata"},
    )  # fmt: skip
    assert verified.code == 0, verified.stdout + verified.stderr
    rebuilt = json.loads(verified.stdout)["rebuild"]
    assert rebuilt["identical"] and all(a["identical"] for a in rebuilt["artifacts"]), rebuilt
    (used,) = rebuilt["signatures"]
    assert used["path"] == "/" + ko.removeprefix("./"), used
    assert used["signer"] == "CN=nvkr test owner" and used["certificate"] == cert.digest


def start_in_background(request: pytest.FixtureRequest) -> BackgroundTest:
    """The test's body, from the session's first test on, beside the other tests (minutes of
    builds that need nothing of the default build: tests/helpers/background.py)."""
    return BackgroundTest.start(request, "dkms", _twice, "go_toolchain", nice=5)


def test_a_dkms_module_is_built_the_same_from_a_second_clone_offline(
    _started_in_background: dict[str, BackgroundTest],
) -> None:
    _started_in_background[__name__].check()
