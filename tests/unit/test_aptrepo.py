"""The loopback apt repository of tests/helpers/aptrepo.py is a real one: apt-get (in a throw-away
Dir) updates from it and verifies its signature, resolves dependencies and prints the .deb URIs
with their SHA256; a repository signed by another key or with a tampered Release fails, and so
does a replaced .deb. The .debs are reproducible and carry a DEP-5 copyright file."""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.aptrepo import (
    DRIVER_VERSION,
    TOOLKIT_VERSION,
    AptRepo,
    DebSpec,
    build_apt_repo,
    build_deb,
    gpu_stack_packages,
)

# the fixtures, as a conftest would import them

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("apt-get", "dpkg-deb", "gpg", "gpgv")),
    reason="needs apt-get, dpkg-deb, gpg and gpgv",
)


class Apt:
    """apt-get against one repository in a throw-away Dir (no host state read or written)."""

    def __init__(self, root: Path, repo: AptRepo, arch: str = "amd64") -> None:
        self.root, self.arch = root, arch
        for d in (
            "etc/apt/apt.conf.d",
            "etc/apt/preferences.d",
            "etc/apt/sources.list.d",
            "etc/apt/trusted.gpg.d",
            "var/lib/apt/lists/partial",
            "var/cache/apt/archives/partial",
        ):
            (root / d).mkdir(parents=True, exist_ok=True)
        (root / "status").write_text("")
        (root / "apt.conf").write_text("")
        (root / "etc/apt/sources.list").write_text(repo.sources_line() + "\n")

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [
            "apt-get",
            "-o", f"Dir={self.root}",
            "-o", f"Dir::State::status={self.root}/status",
            "-o", f"APT::Architecture={self.arch}",
            "-o", "APT::Architectures::=",
            "-o", f"APT::Architectures::={self.arch}",
            "-o", "Debug::NoLocking=1",
            "-o", "APT::Sandbox::User=root",
            "-o", "Acquire::Languages=none",
            "-o", "Acquire::Retries=0",
            *args,
        ]  # fmt: skip
        env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "LC_ALL": "C.UTF-8",
            "APT_CONFIG": str(self.root / "apt.conf"),
        }
        return subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=120, check=False
        )


def print_uris(out: str) -> dict[str, tuple[str, int, str]]:
    """``apt-get install --print-uris`` lines → file name: (URL, size, checksum)."""
    found = {}
    for line in out.splitlines():
        m = re.match(r"^'(\S+)' (\S+) (\d+) (\S+)$", line)
        if m:
            found[m[2]] = (m[1], int(m[3]), m[4])
    return found


def test_apt_get_updates_and_resolves_the_gpu_stack(gpu_apt_repo: AptRepo, tmp_path: Path) -> None:
    apt = Apt(tmp_path / "apt", gpu_apt_repo)
    res = apt("update")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "W:" not in res.stderr and "E:" not in res.stderr, res.stderr
    assert "/dists/stable/InRelease" in gpu_apt_repo.requests

    # apt 2.6 prints each .deb's MD5Sum unless a hash type is forced
    sha256 = ("-o", "Acquire::ForceHash=SHA256")
    res = apt(
        "install",
        "--print-uris",
        "-y",
        "-qq",
        *sha256,
        "nvidia-container-toolkit",
        "nvidia-driver-570",
    )
    assert res.returncode == 0, res.stdout + res.stderr
    uris = print_uris(res.stdout)
    want = {
        "nvidia-container-toolkit": "amd64",
        "libnvidia-container-tools": "amd64",
        "libnvidia-container1": "amd64",
        "nvidia-driver-570": "all",
        "libnvidia-compute-570": "amd64",
        "nvidia-utils-570": "amd64",
    }
    assert len(uris) == len(want), res.stdout
    for name, arch in want.items():
        deb = gpu_apt_repo.deb(name, arch=arch)
        url, size, checksum = uris[deb.spec.filename]
        assert url == f"{gpu_apt_repo.url}/{deb.path}"
        assert (size, checksum) == (deb.size, f"SHA256:{deb.sha256}")

    # the arm64 view of the same repository
    arm = Apt(tmp_path / "apt-arm64", gpu_apt_repo, arch="arm64")
    assert arm("update").returncode == 0
    res = arm("install", "--print-uris", "-y", "-qq", "nvidia-container-toolkit")
    assert "libnvidia-container1_1.17.8-1_arm64.deb" in print_uris(res.stdout), res.stdout

    # a .deb whose bytes no longer match the index
    gpu_apt_repo.replace_deb("nvidia-utils-570", b"not the package", arch="amd64")
    res = apt("install", "--download-only", "-y", "nvidia-utils-570")
    assert res.returncode != 0
    assert "Hash Sum mismatch" in res.stdout + res.stderr or "File has unexpected size" in (
        res.stdout + res.stderr
    ), res.stdout + res.stderr


@pytest.mark.parametrize("breakage", ["resign_with_other_key", "corrupt_release"])
def test_a_bad_signature_fails_apt_get_update(
    gpu_apt_repo: AptRepo, tmp_path: Path, breakage: str
) -> None:
    apt = Apt(tmp_path / "apt", gpu_apt_repo)
    getattr(gpu_apt_repo, breakage)()
    res = apt("update")
    text = res.stdout + res.stderr
    assert res.returncode != 0, text
    expected = "NO_PUBKEY" if breakage == "resign_with_other_key" else "BADSIG"
    assert expected in text and "is not signed" in text, text


def test_unsigned_repository_fails_apt_get_update(apt_repos, tmp_path: Path) -> None:
    repo = apt_repos(
        suite="bookworm", packages=gpu_stack_packages("amd64"), arches=("amd64",), sign=False
    )
    assert not (repo.root / "dists/bookworm/InRelease").exists()
    res = Apt(tmp_path / "apt", repo)("update")
    assert res.returncode != 0 and "is not signed" in res.stdout + res.stderr


def test_layout_indexes_and_release(gpu_apt_repo: AptRepo) -> None:
    root = gpu_apt_repo.root
    toolkit = gpu_apt_repo.deb("nvidia-container-toolkit", arch="amd64")
    assert (
        toolkit.path
        == "pool/main/n/nvidia-container-toolkit/nvidia-container-toolkit_1.17.8-1_amd64.deb"
    )
    assert gpu_apt_repo.deb("libnvidia-container1", arch="arm64").path.startswith(
        "pool/main/libn/libnvidia-container/"
    )
    packages = (root / "dists/stable/main/binary-amd64/Packages").read_bytes()
    assert (
        gzip.decompress((root / "dists/stable/main/binary-amd64/Packages.gz").read_bytes())
        == packages
    )
    stanzas = {s.split("\n", 1)[0][9:]: s for s in packages.decode().split("\n\n")}
    assert sorted(stanzas) == [
        "libnvidia-compute-570",
        "libnvidia-container-tools",
        "libnvidia-container1",
        "nvidia-container-toolkit",
        "nvidia-driver-570",
        "nvidia-utils-570",
    ]
    fields = [
        line.split(":", 1)[0]
        for line in stanzas["nvidia-container-toolkit"].splitlines()
        if not line.startswith(" ")
    ]
    assert fields == [
        "Package",
        "Version",
        "Architecture",
        "Maintainer",
        "Installed-Size",
        "Depends",
        "Priority",
        "Section",
        "Filename",
        "Size",
        "MD5sum",
        "SHA256",
        "Description",
    ]
    assert f"SHA256: {toolkit.sha256}\n" in stanzas["nvidia-container-toolkit"]
    assert "Architecture: all\n" in stanzas["nvidia-driver-570"]
    release = (root / "dists/stable/Release").read_text()
    assert "Date: Mon, 01 Dec 2025 00:00:00 UTC\n" in release
    assert "Architectures: amd64 arm64\n" in release and "Components: main\n" in release
    for rel in ("main/binary-amd64/Packages", "main/binary-arm64/Packages.gz"):
        data = (root / "dists/stable" / rel).read_bytes()
        assert f" {hashlib.sha256(data).hexdigest()} {len(data):>16} {rel}\n" in release
        assert f" {hashlib.md5(data).hexdigest()} {len(data):>16} {rel}\n" in release
    # both signatures verify with gpgv against the exported binary keyring
    for argv in (
        ["gpgv", "--keyring", str(gpu_apt_repo.keyring), str(root / "dists/stable/InRelease")],
        [
            "gpgv",
            "--keyring",
            str(gpu_apt_repo.keyring),
            str(root / "dists/stable/Release.gpg"),
            str(root / "dists/stable/Release"),
        ],
    ):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
    assert (
        (root / "dists/stable/Release.gpg").read_text().startswith("-----BEGIN PGP SIGNATURE-----")
    )
    assert not gpu_apt_repo.keyring.read_bytes().startswith(b"-----"), "a binary keyring"


def test_debs_are_reproducible_with_control_and_copyright(tmp_path: Path) -> None:
    spec = DebSpec(
        "tool",
        "1:2.0-1",
        "amd64",
        depends="libc6 (>= 2.36)",
        essential=True,
        priority="required",
        license="MIT",
        files={"/usr/bin/tool": b"#!/bin/sh\necho tool\n", "/etc/tool.conf": b"x = 1\n"},
        description="a tool\nIt does things.\n\nOn two paragraphs.",
    )
    assert spec.filename == "tool_2.0-1_amd64.deb"
    first = tmp_path / "a" / spec.filename
    build_deb(spec, first)
    old = os.umask(0o077)
    try:
        second = tmp_path / "b" / spec.filename
        build_deb(spec, second)
    finally:
        os.umask(old)
    assert first.read_bytes() == second.read_bytes()

    info = subprocess.run(
        ["dpkg-deb", "--field", str(first)], capture_output=True, text=True, check=True
    ).stdout
    assert (
        "Version: 1:2.0-1\n" in info
        and "Essential: yes\n" in info
        and "Priority: required\n" in info
    )
    assert "Description: a tool\n It does things.\n .\n On two paragraphs.\n" in info
    listing = subprocess.run(
        ["dpkg-deb", "--contents", str(first)], capture_output=True, text=True, check=True
    ).stdout
    assert re.search(
        r"^-rwxr-xr-x root/root .* 2025-12-01 00:00 \./usr/bin/tool$", listing, re.M
    ), listing
    assert re.search(r"^-rw-r--r-- root/root .* \./etc/tool\.conf$", listing, re.M), listing
    copyright_text = subprocess.run(
        ["dpkg-deb", "--fsys-tarfile", str(first)], capture_output=True, check=True
    ).stdout
    assert (
        b"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
        in copyright_text
    )
    assert b"\nLicense: MIT\n" in copyright_text


def test_the_same_packages_give_the_same_indexes(tmp_path: Path) -> None:
    repos = [
        build_apt_repo(tmp_path / name, suite="stable", packages=gpu_stack_packages("amd64"))
        for name in ("one", "two")
    ]
    try:
        for rel in ("main/binary-amd64/Packages.gz", "main/binary-arm64/Packages", "Release"):
            one, two = (r.root / "dists/stable" / rel for r in repos)
            assert one.read_bytes() == two.read_bytes(), rel
        assert repos[0].keyring.read_bytes() != repos[1].keyring.read_bytes(), "a key each"
    finally:
        for r in repos:
            r.close()


def test_add_reindexes_and_resigns(apt_repos, tmp_path: Path) -> None:
    repo = apt_repos(suite="stable", packages=gpu_stack_packages("amd64"), arches=("amd64",))
    apt = Apt(tmp_path / "apt", repo)
    assert apt("update").returncode == 0
    newer = DebSpec(
        "nvidia-container-toolkit",
        "1.18.0-1",
        "amd64",
        depends="libnvidia-container-tools (>= 1.17.8)",
    )
    repo.add([newer])
    assert apt("update").returncode == 0
    res = apt("install", "--print-uris", "-y", "-qq", "nvidia-container-toolkit")
    assert "nvidia-container-toolkit_1.18.0-1_amd64.deb" in print_uris(res.stdout), res.stdout


def test_versions_exposed() -> None:
    names = {s.name: s for s in gpu_stack_packages("arm64")}
    assert names["nvidia-container-toolkit"].version == TOOLKIT_VERSION
    assert (
        names["nvidia-driver-570"].version == DRIVER_VERSION
        and names["nvidia-driver-570"].arch == "all"
    )
    assert "/usr/bin/nvidia-ctk" in names["nvidia-container-toolkit"].files


def test_repository_rejects_a_foreign_arch(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="arch arm64 is not among"):
        build_apt_repo(
            tmp_path / "r", suite="s", arches=("amd64",), packages=gpu_stack_packages("arm64")
        )
