"""``nvkr release-set export --images-dir OUT`` writes each machine image as ``OUT/<sha256
hex>.qcow2`` (hard-linked from the layout, else copied; downloaded and verified from a registry)
with the checksum files Ironic reads, refuses a directory holding anything else unless it is an
earlier export, and ``--image-url-from-registry`` checks with one anonymous HEAD per blob URL
that Ironic can read it. Against the real CNCF distribution of :mod:`tests.helpers.registry`
(open and behind htpasswd)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nvkr.delivery.export.images import disk_images
from nvkr.delivery.publish import publish_layout
from nvkr.errors import UsageError
from nvkr.oci import mediatypes as mt
from nvkr.oci.registry import RegistryClient
from nvkr.releaseset import read_metadata
from tests.helpers.cli import invoke
from tests.helpers.machine_sets import NAME, make_machine_image_set
from tests.helpers.registry import PASSWORD, USER, Registry, run_proxy
from tests.helpers.sample_set import build

MARKER = ".nvkr-images.json"


def disks(layout: Path) -> dict[str, int]:
    """sha256 hex → size of each machine image disk (the QCOW2 layer) of the set."""
    meta = read_metadata(layout)
    return {
        a["primary"]["digest"].split(":", 1)[1]: a["primary"]["size"]
        for a in meta["artifacts"]
        if a["kind"] == "machine-image"
    }


def listing(out: Path) -> dict[str, tuple[str, int]]:
    """name → (sha256 hex of the bytes, mode) of every entry of ``out``."""
    return {
        p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), stat.S_IMODE(p.stat().st_mode))
        for p in sorted(out.iterdir())
    }


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_machine_image_set(tmp_path_factory.mktemp("set"), count=3, size=64 << 10)


@pytest.fixture(scope="module")
def other_layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another set: the three images of ``layout`` again (the same seed) and a fourth."""
    return make_machine_image_set(
        tmp_path_factory.mktemp("other"), count=4, size=64 << 10, seed=0, name="other-k8s1.36"
    )


def export(source: str | Path, out: Path, *extra: str, input: str | None = None) -> Any:
    return invoke(
        "release-set",
        "export",
        source,
        "--format",
        "json",
        "--images-dir",
        out,
        *extra,
        input=input,
    )


def test_images_dir_holds_each_disk_under_its_digest_with_checksum_files(layout, tmp_path):
    out = tmp_path / "images"
    result = export(layout, out)
    assert result.code == 0, result.output
    want = disks(layout)
    assert len(want) == 3
    names = {f"{h}.qcow2" for h in want} | {f"{h}.qcow2.sha256sum" for h in want}
    assert set(os.listdir(out)) == names | {"SHA256SUMS", MARKER}
    for hexdigest, size in want.items():
        image = out / f"{hexdigest}.qcow2"
        blob = layout / "blobs" / "sha256" / hexdigest
        assert image.stat().st_size == size
        assert hashlib.sha256(image.read_bytes()).hexdigest() == hexdigest
        assert os.path.samefile(image, blob), "a hard link to the layout's blob"
        assert stat.S_IMODE(image.stat().st_mode) == 0o444
        # md5sum/sha256sum style, the line Ironic's checksum-file parser looks for
        line = (out / f"{hexdigest}.qcow2.sha256sum").read_text()
        assert line == f"{hexdigest}  {hexdigest}.qcow2\n"
    sums = (out / "SHA256SUMS").read_text().splitlines()
    assert sums == sorted(f"{h}  {h}.qcow2" for h in want)
    assert "3 machine image(s)" in result.stderr and "3 hard-linked" in result.stderr
    # the real tool agrees with every checksum file
    for sums_file in ["SHA256SUMS", *(f"{h}.qcow2.sha256sum" for h in want)]:
        check = subprocess.run(
            ["sha256sum", "--check", "--strict", sums_file], cwd=out, capture_output=True
        )
        assert check.returncode == 0, check.stdout + check.stderr
    manifest = json.loads((out / MARKER).read_text())
    assert manifest["kind"] == "ImagesDir"
    assert [i["file"] for i in manifest["images"]] == sorted(f"{h}.qcow2" for h in want)
    for name in ["SHA256SUMS", MARKER, *(f"{h}.qcow2.sha256sum" for h in want)]:
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o644, name  # a web server reads them


def test_export_twice_gives_the_same_files_and_bytes(layout, tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    assert export(layout, first).code == 0
    assert export(layout, second).code == 0
    assert listing(first) == listing(second)
    again = export(layout, first)  # a re-export into the same dir changes nothing
    assert again.code == 0, again.output
    assert "3 already there" in again.stderr
    assert listing(first) == listing(second)


def test_copy_where_no_hard_link_can_be_made(layout, tmp_path, monkeypatch):
    """OUT on another file system: os.link fails with EXDEV, each disk is copied (atomically,
    hashed on the way) and ends up the same as a linked one."""
    linked = tmp_path / "linked"
    assert export(layout, linked).code == 0

    def cross_device(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), str(src), None, str(dst))

    monkeypatch.setattr(os, "link", cross_device)
    copied = tmp_path / "copied"
    result = export(layout, copied)
    assert result.code == 0, result.output
    assert "3 copied" in result.stderr
    for hexdigest in disks(layout):
        image = copied / f"{hexdigest}.qcow2"
        assert not os.path.samefile(image, layout / "blobs" / "sha256" / hexdigest)
        assert image.stat().st_nlink == 1
    assert listing(copied) == listing(linked)


@pytest.fixture
def other_file_system(tmp_path: Path) -> Iterator[Path]:
    """A directory on another file system than ``tmp_path`` (the tmpfs at /dev/shm)."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("no second file system at /dev/shm (the forced-copy test covers the path)")
    path = Path(tempfile.mkdtemp(prefix="nvkr-images-", dir=shm))
    try:
        yield path
    finally:
        shutil.rmtree(path)


def test_copy_onto_another_file_system(layout, tmp_path, other_file_system):
    out = other_file_system / "images"
    result = export(layout, out)
    assert result.code == 0, result.output
    assert "3 copied" in result.stderr
    linked = tmp_path / "linked"
    assert export(layout, linked).code == 0
    assert listing(out) == listing(linked)


def test_a_re_export_adds_and_keeps(layout, other_layout, tmp_path):
    out = tmp_path / "images"
    assert export(layout, out).code == 0
    result = export(other_layout, out)
    assert result.code == 0, result.output
    both = set(disks(layout)) | set(disks(other_layout))
    assert len(both) == 4
    assert {p.name for p in out.glob("*.qcow2")} == {f"{h}.qcow2" for h in both}
    assert (out / "SHA256SUMS").read_text().splitlines() == sorted(f"{h}  {h}.qcow2" for h in both)
    assert "1 hard-linked" in result.stderr and "3 already there" in result.stderr
    assert "4 in the dir" in result.stderr
    manifest = json.loads((out / MARKER).read_text())
    assert len(manifest["images"]) == 4
    before = listing(out)
    result = export(layout, out)  # the fourth image is not in this set, and stays
    assert result.code == 0, result.output
    assert "3 machine image(s) of the set" in result.stderr and "4 in the dir" in result.stderr
    assert listing(out) == before


def test_a_dir_with_other_content_is_refused(layout, tmp_path):
    out = tmp_path / "www"
    out.mkdir()
    (out / "index.html").write_text("<html></html>")
    (out / "notes.txt").write_text("mine")
    result = export(layout, out)
    assert result.code == 2, result.output
    assert str(out) in result.stderr and "index.html" in result.stderr
    assert sorted(os.listdir(out)) == ["index.html", "notes.txt"]  # nothing written


def test_a_foreign_file_in_an_earlier_export_is_refused(layout, tmp_path):
    out = tmp_path / "images"
    assert export(layout, out).code == 0
    (out / "extra.qcow2").write_bytes(b"someone else's")
    result = export(layout, out)
    assert result.code == 2, result.output
    assert str(out) in result.stderr and "extra.qcow2" in result.stderr


def test_a_tampered_file_in_an_earlier_export_is_an_integrity_error(layout, tmp_path):
    out = tmp_path / "images"
    assert export(layout, out).code == 0
    hexdigest = sorted(disks(layout))[0]
    image = out / f"{hexdigest}.qcow2"
    image.unlink()  # not through the hard link: the layout's blob stays intact
    image.write_bytes(b"\0" * 100)
    result = export(layout, out)
    assert result.code == 3, result.output
    assert image.name in result.stderr and "sha256:" in result.stderr
    image.unlink()
    assert export(layout, out).code == 0  # a missing image is written again
    sums = out / f"{hexdigest}.qcow2.sha256sum"
    sums.write_text(f"{'0' * 64}  {hexdigest}.qcow2\n")
    result = export(layout, out)
    assert result.code == 3, result.output
    assert sums.name in result.stderr
    sums.unlink()
    assert export(layout, out).code == 0
    (out / "SHA256SUMS").write_text(f"{'0' * 64}  {hexdigest}.qcow2\n")
    result = export(layout, out)
    assert result.code == 3 and "SHA256SUMS" in result.stderr, result.output


def test_a_damaged_manifest_is_an_integrity_error(layout, tmp_path):
    out = tmp_path / "images"
    assert export(layout, out).code == 0
    (out / MARKER).write_text("{not json")
    result = export(layout, out)
    assert result.code == 3 and MARKER in result.stderr, result.output


@pytest.fixture
def immutable(tmp_path: Path) -> Iterator[Path]:
    """A directory nothing can be created in, root included (chattr +i; chmod for others)."""
    path = tmp_path / "ro"
    path.mkdir()
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(path)], check=True)
    else:
        path.chmod(0o555)
    try:
        yield path
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        path.chmod(0o755)


def test_an_unwritable_dir_is_a_usage_error(layout, immutable):
    for out in (immutable, immutable / "images"):
        result = export(layout, out)
        assert result.code == 2, result.output
        assert str(out) in result.stderr, result.output
        assert "Traceback" not in result.output
    assert os.listdir(immutable) == []


def test_images_dir_that_is_a_file(layout, tmp_path):
    out = tmp_path / "file"
    out.write_text("x")
    result = export(layout, out)
    assert result.code == 2 and str(out) in result.stderr, result.output


# -- from a registry ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pooled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A set whose node-pool releases boot its machine images (for the Metal3 templates)."""
    return make_machine_image_set(
        tmp_path_factory.mktemp("pooled"), count=2, size=64 << 10, seed=7, pools=True
    )


@pytest.fixture(scope="module")
def open_published(registry: Registry, pooled: Path) -> str:
    publish_layout(pooled, f"{registry.host}/images/set", RegistryClient(registry.host))
    return f"{registry.host}/images/set:{NAME}"


@pytest.fixture(scope="module")
def auth_published(auth_registry: Registry, pooled: Path) -> str:
    client = RegistryClient(auth_registry.host, username=USER, password=PASSWORD)
    publish_layout(pooled, f"{auth_registry.host}/images/set", client)
    return f"{auth_registry.host}/images/set:{NAME}"


def test_images_dir_from_a_registry_downloads_and_verifies(open_published, pooled, tmp_path):
    from_layout, from_registry = tmp_path / "layout", tmp_path / "registry"
    assert export(pooled, from_layout).code == 0
    result = export(open_published, from_registry)
    assert result.code == 0, result.output
    assert "2 downloaded" in result.stderr
    assert listing(from_registry) == listing(from_layout)


def test_a_blob_the_registry_serves_wrong_leaves_nothing_half_written(registry, tmp_path):
    layout = make_machine_image_set(tmp_path / "set", count=2, size=64 << 10, seed=11)
    publish_layout(layout, f"{registry.host}/images/bad", RegistryClient(registry.host))
    bad = sorted(disks(layout))[1]
    data = registry.blob_data(f"sha256:{bad}")
    data.write_bytes(b"\1" * data.stat().st_size)  # same size, other bytes
    out = tmp_path / "images"
    result = export(f"{registry.host}/images/bad:{NAME}", out)
    assert result.code == 3, result.output
    assert bad in result.stderr
    left = os.listdir(out)
    assert f"{bad}.qcow2" not in left
    assert not [n for n in left if n.startswith(".nvkr-tmp")], left
    good = sorted(disks(layout))[0]
    image = out / f"{good}.qcow2"
    if image.exists():  # written before the bad one: complete and verified
        assert hashlib.sha256(image.read_bytes()).hexdigest() == good


def metal3(source: str, *extra: str, input: str | None = None) -> Any:
    return invoke(
        "release-set",
        "export",
        source,
        "--format",
        "capi",
        "--infrastructure",
        "metal3",
        "--control-plane-endpoint",
        "192.0.2.10:6443",
        "--image-url-from-registry",
        "--host-arch-label",
        "kubernetes.io/arch",
        *extra,
        input=input,
    )


def template_urls(text: str) -> set[str]:
    return {
        d["spec"]["template"]["spec"]["image"]["url"]
        for d in yaml.safe_load_all(text)
        if d and d.get("kind") == "Metal3MachineTemplate"
    }


def test_registry_urls_of_an_open_registry_pass_one_anonymous_head_each(registry, pooled, tmp_path):
    with run_proxy(registry.host) as proxy:
        publish_layout(pooled, f"{proxy.host}/images/open", RegistryClient(proxy.host))
        proxy.clear()
        result = metal3(f"{proxy.host}/images/open:{NAME}")
        assert result.code == 0, result.output
        # no anonymous-read warning (the sample set's chart is no CNI: that one is said)
        assert "answers" not in result.stderr and "reached" not in result.stderr, result.stderr
        urls = template_urls(result.stdout)
        assert len(urls) == 2  # the control plane boots pool-0's image again
        heads = proxy.requests("HEAD", r"/blobs/sha256:")
        assert sorted(f"http://{proxy.host}{e.path}" for e in heads) == sorted(urls)
        assert all(e.status == 200 and e.authorization is None for e in heads)


def test_registry_urls_of_an_authenticated_registry_warn(
    auth_registry, auth_published, tmp_path, monkeypatch
):
    # credentials in a netrc file requests would apply by itself: the HEAD must not send them
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine 127.0.0.1 login {USER} password {PASSWORD}\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    result = metal3(auth_published, "-u", USER, "--password-stdin", input=PASSWORD)
    assert result.code == 0, result.output
    urls = template_urls(result.stdout)
    assert len(urls) == 2
    warnings = [line for line in result.stderr.splitlines() if "anonymous" in line]
    assert len(warnings) == 2, result.stderr
    for url in urls:
        line = next(w for w in warnings if url in w)
        assert "401" in line and "--images-dir" in line and "public" in line
    # the blobs are there: the export read them with credentials
    client = RegistryClient(auth_registry.host, username=USER, password=PASSWORD)
    for url in urls:
        assert client.blob_exists("images/set", url.rsplit("/", 1)[1])


def test_image_base_url_templates_name_the_files_of_the_images_dir(pooled, tmp_path):
    out = tmp_path / "images"
    result = invoke(
        "release-set",
        "export",
        pooled,
        "--format",
        "capi",
        "--infrastructure",
        "metal3",
        "--control-plane-endpoint",
        "192.0.2.10:6443",
        "--image-base-url",
        "https://images.example/nvkr",
        "--images-dir",
        out,
    )
    assert result.code == 0, result.output
    for url in template_urls(result.stdout):
        assert url.startswith("https://images.example/nvkr/")
        assert (out / url.rsplit("/", 1)[1]).is_file()


def test_an_interrupted_export_is_taken_up_again(layout, tmp_path):
    """What a killed export leaves (its manifest, a temp file, an image missing) is accepted: the
    temp file goes, the image is written."""
    out = tmp_path / "images"
    assert export(layout, out).code == 0
    gone = sorted(disks(layout))[2]
    (out / f"{gone}.qcow2").unlink()
    (out / f".nvkr-tmp-{gone}").write_bytes(b"half")
    result = export(layout, out)
    assert result.code == 0, result.output
    assert "1 hard-linked" in result.stderr and "2 already there" in result.stderr
    assert not [n for n in os.listdir(out) if n.startswith(".nvkr-tmp")]
    assert (out / f"{gone}.qcow2").is_file()


def test_a_set_without_qcow2_machine_images(tmp_path):
    _, _, binaries_only = build(tmp_path / "sample")
    result = export(binaries_only, tmp_path / "images")
    assert result.code == 2 and "no machine images" in result.stderr, result.output
    assert not (tmp_path / "images").exists()
    meta = read_metadata(make_machine_image_set(tmp_path / "set", count=1, size=1024))
    meta["artifacts"][0]["primary"]["mediaType"] = mt.OCTET_STREAM
    with pytest.raises(UsageError, match="writes QCOW2 disks"):
        disk_images(meta)


def test_registry_urls_that_cannot_be_reached_warn(pooled, tmp_path):
    from tests.helpers.registry import free_port

    host = f"127.0.0.1:{free_port()}"  # nothing listens there
    result = metal3(str(pooled), "--repository", f"{host}/images/set")
    assert result.code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if "anonymous HEAD" in line]
    assert len(warnings) == 2 and all("could not be reached" in w for w in warnings), warnings
    assert all(f"http://{host}/v2/images/set/blobs/sha256:" in w for w in warnings)


@pytest.mark.parametrize("entry", ["image", MARKER, "SHA256SUMS", "sha256sum"])
def test_a_symlink_in_an_earlier_export_is_refused_before_its_target_is_read(
    layout, tmp_path, monkeypatch, entry
):
    """A symbolic link in the images dir could point anywhere (a device, another user's file, a
    huge file): it is refused (exit 2) before anything hashes or reads its target."""
    from nvkr.delivery.export import images

    out = tmp_path / "images"
    assert export(layout, out).code == 0
    hexdigest = sorted(disks(layout))[0]
    name = {"image": f"{hexdigest}.qcow2", "sha256sum": f"{hexdigest}.qcow2.sha256sum"}.get(
        entry, entry
    )
    target = tmp_path / "elsewhere"
    shutil.copyfile(out / name, target)  # the same bytes: only the link is wrong
    (out / name).unlink()
    (out / name).symlink_to(target)
    hashed: list[Path] = []
    real_check = images._check_file
    monkeypatch.setattr(
        images, "_check_file", lambda path, *a: (hashed.append(path), real_check(path, *a))[1]
    )
    result = export(layout, out)
    assert result.code == 2, result.output
    assert "symbolic link" in result.stderr and name in result.stderr, result.stderr
    assert hashed == [], hashed
    assert (out / name).is_symlink() and target.exists()  # nothing of the user's is removed
