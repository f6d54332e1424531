"""The container-image builder on a root filesystem the rootfs builder made (``base: {rootfs:
NAME}``): the tree's tar becomes the first layer as it is (owners, modes, setuid bits, links,
device nodes, file capabilities), reproducibly; and wheels or archives unpacked into the image
(``unpack: true``)."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from typing import Any

import pytest

from nvkr.action import Action, action_key
from nvkr.builders.api import ResolvedSource
from nvkr.builders.container_image.artifact import ContainerImageArtifact
from nvkr.errors import BuildError
from nvkr.execute import run_action
from nvkr.oci import mediatypes as mt
from nvkr.recipe.sources import PypiSource
from nvkr.store import Store
from tests.helpers import lock_entry
from tests.helpers.container_images import EPOCH, World, to_action, tool, write_image_layout
from tests.helpers.results import results as typed

pytestmark = pytest.mark.usefixtures("container_image_builder")


@pytest.fixture
def world(tmp_path):
    return World(tmp_path, Store(tmp_path / "store"))


CAPABILITY = "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"


def rootfs_tar(reverse: bool = False) -> bytes:
    """A small tree as mmdebstrap writes one: ``./``-relative names, owners other than root, a
    setuid binary with a capability, a symlink, a hard link, a device node."""
    members: dict[str, tuple[tarfile.TarInfo, bytes | None]] = {}

    def add(name: str, kind: bytes = tarfile.REGTYPE, data: bytes | None = None, **attrs: Any):
        info = tarfile.TarInfo(name)
        info.type = kind
        info.mtime = EPOCH
        info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
        for k, v in attrs.items():
            setattr(info, k, v)
        if data is not None:
            info.size = len(data)
        members[name] = (info, data)

    add("./", tarfile.DIRTYPE)
    add("./etc/", tarfile.DIRTYPE)
    add("./etc/os-release", data=b"ID=debian\nVERSION_ID=12\n")
    add("./usr/", tarfile.DIRTYPE)
    add("./usr/bin/", tarfile.DIRTYPE)
    add("./usr/bin/python3", data=b"\x7fELF python\n", mode=0o755)
    add("./usr/bin/passwd", data=b"\x7fELF passwd\n", mode=0o4755)
    add(
        "./usr/bin/ping",
        data=b"\x7fELF ping\n",
        mode=0o755,
        pax_headers={"SCHILY.xattr.security.capability": CAPABILITY},
    )
    add("./usr/bin/python", tarfile.SYMTYPE, linkname="python3", mode=0o777)
    add("./usr/bin/py3", tarfile.LNKTYPE, linkname="./usr/bin/python3", mode=0o755)
    add("./var/", tarfile.DIRTYPE)
    add("./var/mail/", tarfile.DIRTYPE, mode=0o2775, gid=8)
    add("./dev/", tarfile.DIRTYPE)
    add("./dev/null", tarfile.CHRTYPE, mode=0o666, devmajor=1, devminor=3)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in reversed(members) if reverse else members:
            info, data = members[name]
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def add_rootfs(w: World, data: bytes, name: str = "rootfs") -> Action:
    blob = w.store.add_bytes(data)
    action = Action(
        key=action_key("rootfs", "1", {"tree": blob.digest}, {}, {}, EPOCH),
        builder="rootfs",
        builder_version="1",
        name=name,
        params={"arch": "amd64"},
        inputs={},
        tools={},
        epoch=EPOCH,
    )
    w.artifacts[name] = action
    w.results = getattr(w, "results", {})
    w.results[action.key] = {
        "outputs": [
            {
                "name": "rootfs.tar",
                "digest": blob.digest,
                "size": blob.size,
                "mediaType": "application/vnd.nvkr.rootfs.v1.tar",
                "role": "primary",
            }
        ]
    }
    return action


def build(w: World, **fields: Any) -> dict[str, Any]:
    action = to_action(w.plan("amd64", **fields))
    results = getattr(w, "results", {})
    deps = typed({k: results.get(k, w.agent_result) for k in action.deps})
    return run_action(action, w.store, deps).to_json()


def layer_members(w: World, result: dict[str, Any], index: int) -> list[tarfile.TarInfo]:
    manifest = json.loads(w.store.read_blob(result["metadata"]["manifestDigest"]))
    layer = manifest["layers"][index]
    with tarfile.open(w.store.blob_path(layer["digest"]), mode="r:gz") as tar:
        return tar.getmembers()


def test_the_rootfs_tar_is_the_first_layer_as_it_is(world, tmp_path):
    rootfs = add_rootfs(world, rootfs_tar())
    spec = world.plan("amd64", base={"rootfs": "rootfs"}, files={"/usr/bin/agent": "agent"})
    assert rootfs.key in spec.deps and spec.params["base"] == {
        "rootfs": "rootfs",
        "action": rootfs.key,
    }
    assert "base" not in spec.inputs and "base" not in spec.sources
    result = build(
        world,
        base={"rootfs": "rootfs"},
        files={"/usr/bin/agent": "agent"},
        cmd=["/usr/bin/python3"],
    )
    manifest = json.loads(world.store.read_blob(result["metadata"]["manifestDigest"]))
    assert len(manifest["layers"]) == 2 and all(
        layer["mediaType"] == mt.OCI_LAYER_TAR_GZIP for layer in manifest["layers"]
    )
    config = json.loads(world.store.read_blob(result["metadata"]["configDigest"]))
    assert len(config["rootfs"]["diff_ids"]) == 2
    assert [h["created_by"] for h in config["history"]] == [
        "nvkr container-image: rootfs rootfs",
        "nvkr container-image: files /usr/bin/agent",
    ]
    assert "org.opencontainers.image.base.digest" not in manifest["annotations"]
    base = {m.name: m for m in layer_members(world, result, 0)}
    assert base["./usr/bin/passwd"].mode == 0o4755
    assert base["./var/mail"].mode == 0o2775 and base["./var/mail"].gid == 8
    assert base["./usr/bin/ping"].pax_headers["SCHILY.xattr.security.capability"] == CAPABILITY
    assert base["./usr/bin/python"].issym() and base["./usr/bin/python"].linkname == "python3"
    # a hard-linked pair stays one: the first name in sorted order holds the data
    assert base["./usr/bin/py3"].isfile() and base["./usr/bin/py3"].mode == 0o755
    assert (
        base["./usr/bin/python3"].islnk() and base["./usr/bin/python3"].linkname == "./usr/bin/py3"
    )
    assert base["./dev/null"].ischr() and (
        base["./dev/null"].devmajor,
        base["./dev/null"].devminor,
    ) == (1, 3)
    assert all(m.mtime <= EPOCH and m.uname == "" for m in base.values())
    # skopeo reads it, umoci unpacks it: the layers stack into one tree
    layout = tmp_path / "layout"
    write_image_layout(world.store, result, layout)
    inspect = json.loads(tool("skopeo", "inspect", f"oci:{layout}:test"))
    assert len(inspect["Layers"]) == 2
    bundle = tmp_path / "bundle"
    tool("umoci", "unpack", "--rootless", "--image", f"{layout}:test", bundle)
    assert (bundle / "rootfs" / "etc" / "os-release").read_text().startswith("ID=debian")
    assert (bundle / "rootfs" / "usr" / "bin" / "agent").is_file()


def test_the_same_tree_in_another_member_order_gives_the_same_image(world):
    add_rootfs(world, rootfs_tar())
    first = build(world, base={"rootfs": "rootfs"})
    add_rootfs(world, rootfs_tar(reverse=True), name="rootfs")
    again = build(world, base={"rootfs": "rootfs"})
    first_layer = next(o for o in first["outputs"] if o["role"] == "layer")
    again_layer = next(o for o in again["outputs"] if o["role"] == "layer")
    assert first_layer["digest"] == again_layer["digest"], "members are sorted"
    assert len([o for o in first["outputs"] if o["role"] == "layer"]) == 1, "no empty files layer"


def test_the_model_takes_scratch_a_source_name_or_a_rootfs():
    assert ContainerImageArtifact(builder="container-image", base="debian").base == "debian"
    art = ContainerImageArtifact(builder="container-image", base={"rootfs": "ci-rootfs"})
    assert art.references()[0] == (("base", "rootfs"), "artifact", "ci-rootfs")
    with pytest.raises(ValueError, match="rootfs"):
        ContainerImageArtifact(builder="container-image", base={"tree": "x"})


# -- unpack ----------------------------------------------------------------------------------------
def wheel(files: dict[str, bytes], modes: dict[str, int] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = ((modes or {}).get(name, 0o644) | 0o100000) << 16
            zf.writestr(info, data)
    return buf.getvalue()


def add_file_source(w: World, name: str, data: bytes) -> None:
    blob = w.store.add_bytes(data)
    w.sources[name] = ResolvedSource(
        name,
        PypiSource(pypi=name, version="1.0", sha256=blob.digest[7:]),
        lock_entry(
            {
                "kind": "pypi",
                "name": name,
                "version": "1.0",
                "digest": blob.digest,
                "sha256": blob.digest,
                "filename": f"{name}-1.0-py3-none-any.whl",
            }
        ),
        w.tmp,
    )


SITE = "/usr/local/lib/python3.11/dist-packages"


def test_a_wheel_is_unpacked_into_its_directory(world, tmp_path):
    add_file_source(
        world,
        "click",
        wheel({"click/__init__.py": b"x = 1\n", "click-8.0.dist-info/METADATA": b"Name: click\n"}),
    )
    add_file_source(
        world,
        "core",
        wheel(
            {"core/_core.so": b"\x7fELF", "core-1.0.dist-info/RECORD": b""},
            {"core/_core.so": 0o755},
        ),
    )
    # several sources at one destination: a list, laid out in order
    files = {SITE: [{"source": "click", "unpack": True}, {"source": "core", "unpack": True}]}
    spec = world.plan("amd64", files=files)
    assert [f.get("unpack") for f in spec.params["files"]] == [True, True]
    assert sorted(spec.inputs) == [f"file:{SITE}#0", f"file:{SITE}#1"]
    result = build(world, files=files)
    members = {m.name: m for m in layer_members(world, result, 0)}
    site = SITE.lstrip("/")
    assert members[f"{site}/click/__init__.py"].mode == 0o644
    assert members[f"{site}/core/_core.so"].mode == 0o755
    assert f"{site}/click-8.0.dist-info/METADATA" in members


def test_unpack_refuses_wheel_data_escapes_and_collisions(world):
    add_file_source(world, "tool", wheel({"tool-1.0.data/scripts/tool": b"#!/bin/sh\n"}))
    with pytest.raises(BuildError, match=r"tool-1.0.data/.*needs an installer"):
        build(world, files={SITE: {"source": "tool", "unpack": True}})
    add_file_source(world, "evil", wheel({"../../etc/passwd": b"root::0:0\n"}))
    with pytest.raises(BuildError, match=r"'../../etc/passwd' leads outside"):
        build(world, files={SITE: {"source": "evil", "unpack": True}})
    add_file_source(world, "a", wheel({"same.py": b"a\n"}))
    add_file_source(world, "b", wheel({"same.py": b"b\n"}))
    with pytest.raises(BuildError, match=r"same.py.*already in the image"):
        build(
            world, files={SITE: [{"source": "a", "unpack": True}, {"source": "b", "unpack": True}]}
        )
    # a tree source given to unpack, and a base that is no rootfs: tests/unit/test_plancheck.py


def test_a_tar_archive_is_unpacked_too(world):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data, mode in (
            ("bin/tool", b"#!/bin/sh\n", 0o755),
            ("share/doc", b"doc\n", 0o600),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    add_file_source(world, "tools", buf.getvalue())
    result = build(world, files={"/opt/tools": {"source": "tools", "unpack": True}})
    members = {m.name: m for m in layer_members(world, result, 0)}
    assert members["opt/tools/bin/tool"].mode == 0o755
    assert members["opt/tools/share/doc"].mode == 0o644, "modes normalised as for any file"
    add_file_source(world, "junk", b"neither zip nor tar")
    with pytest.raises(BuildError, match="neither a zip nor a tar archive"):
        build(world, files={"/opt/junk": {"source": "junk", "unpack": True}})
