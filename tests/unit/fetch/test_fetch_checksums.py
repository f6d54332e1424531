"""Checksum file formats (nvkr.fetch.checksums)."""

from __future__ import annotations

import hashlib

import pytest

from nvkr.errors import FetchError
from nvkr.fetch.checksums import algorithm_for, parse_checksum_file

H256 = hashlib.sha256(b"kubelet").hexdigest()
H512 = hashlib.sha512(b"kubelet").hexdigest()
OTHER = hashlib.sha256(b"kubectl").hexdigest()
URL = "https://dl.example/v1/kubelet.sha256"


@pytest.mark.parametrize(
    ("text", "algorithm", "want"),
    [
        pytest.param(H256, None, ("sha256", H256), id="bare-no-newline"),
        pytest.param(H256 + "\n", "sha256", ("sha256", H256), id="bare"),
        pytest.param(H512 + "\n", None, ("sha512", H512), id="bare-sha512-by-length"),
        pytest.param(H256.upper() + "\n", None, ("sha256", H256), id="upper-case"),
        pytest.param(H256 + "\r\n\r\n\n", None, ("sha256", H256), id="crlf-trailing-blank-lines"),
        pytest.param(f"{H256}  kubelet\n", None, ("sha256", H256), id="gnu-text"),
        pytest.param(f"{H256} *kubelet\n", None, ("sha256", H256), id="gnu-binary"),
        pytest.param(
            f"{H256}  ./bin/linux/amd64/kubelet\n", None, ("sha256", H256), id="gnu-path-basename"
        ),
        pytest.param(f"{H256}  -\n", None, ("sha256", H256), id="gnu-stdin"),
        pytest.param(f"SHA256 (kubelet) = {H256}\n", None, ("sha256", H256), id="bsd-sha256"),
        pytest.param(
            f"SHA512 (kubelet) = {H512.upper()}\r\n", None, ("sha512", H512), id="bsd-sha512"
        ),
        pytest.param(f"SHA2-256(kubelet)= {H256}\n", None, ("sha256", H256), id="openssl"),
        pytest.param(f"\ufeff{H256}  kubelet\r\n", None, ("sha256", H256), id="bom"),
        pytest.param(
            f"{OTHER}  kubectl\n{H256}  kubelet\n{OTHER}  kubeadm\n",
            None,
            ("sha256", H256),
            id="multi-line",
        ),
        pytest.param(
            f"-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\n{OTHER}  kubectl\n{H256}  kubelet\n"
            "-----BEGIN PGP SIGNATURE-----\n",
            None,
            ("sha256", H256),
            id="signed-sums",
        ),
        pytest.param(
            f"SHA256 (kubelet) = {H256}\nSHA512 (kubelet) = {H512}\n",
            "sha512",
            ("sha512", H512),
            id="bsd-both-pick",
        ),
        pytest.param(
            f"{H256}  kubelet\n{H256}  ./kubelet\n", None, ("sha256", H256), id="same-hash-twice"
        ),
        pytest.param(f"# comment\n{H256}  kubelet\n", None, ("sha256", H256), id="comment"),
    ],
)
def test_formats(text: str, algorithm: str | None, want: tuple[str, str]) -> None:
    assert parse_checksum_file(text, "kubelet", algorithm) == want


def test_escaped_gnu_name() -> None:
    text = f"\\{H256}  dir\\\\kubelet\n"  # sha256sum's form for a name holding a backslash
    assert parse_checksum_file(text, "dir\\kubelet", None) == ("sha256", H256)


@pytest.mark.parametrize(
    ("text", "algorithm", "needle"),
    [
        pytest.param("", None, "is empty", id="empty"),
        pytest.param("\n\r\n  \n", None, "is empty", id="blank"),
        pytest.param(
            "<!DOCTYPE html><html><body>404</body></html>", None, "HTML page", id="html-doctype"
        ),
        pytest.param("  <html>\n<head>", None, "HTML page", id="html-tag"),
        pytest.param(
            f"{OTHER}  kubectl\n{OTHER}  kubeadm\n",
            None,
            "no line with a hash for 'kubelet'",
            id="no-match",
        ),
        pytest.param(f"{OTHER}  kubectl\n", None, "it lists 'kubectl'", id="single-named-other"),
        pytest.param(
            f"{H256}  kubelet\n{OTHER}  ./kubelet\n", None, "2 different hashes", id="conflict"
        ),
        pytest.param("abcdef  kubelet\n", None, "has 6 hex digits", id="short"),
        pytest.param(H512 + "\n", "sha256", "expected 64 for sha256", id="wrong-length-for-algo"),
        pytest.param(
            f"SHA512 (kubelet) = {H512}\n",
            "sha256",
            "no line with a sha256 hash",
            id="bsd-other-algo",
        ),
        pytest.param(
            f"SHA256 (kubelet) = {H256}\nSHA512 (kubelet) = {H512}\n",
            None,
            "2 different hashes",
            id="bsd-ambiguous",
        ),
        pytest.param("not a checksum\n", None, "no line", id="garbage"),
    ],
)
def test_rejected(text: str, algorithm: str | None, needle: str) -> None:
    with pytest.raises(FetchError) as exc:
        parse_checksum_file(text, "kubelet", algorithm, url=URL)
    assert needle in exc.value.message
    assert URL in exc.value.message
    assert "kubelet" in exc.value.message


@pytest.mark.parametrize(
    ("url", "declared", "want"),
    [
        ("https://x/kubelet.sha256", None, "sha256"),
        ("https://x/kubelet.sha512", None, "sha512"),
        ("https://x/kubelet.SHA512?raw=1", None, "sha512"),
        ("https://x/SHA256SUMS", None, "sha256"),
        ("https://x/sha512sum.txt", None, "sha512"),
        ("https://x/checksums.txt", None, None),
        ("https://x/kubelet.sha256", "sha512", "sha512"),
    ],
)
def test_algorithm_for(url: str, declared: str | None, want: str | None) -> None:
    assert algorithm_for(url, declared) == want
