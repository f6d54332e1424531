"""Redirects of url sources and checksum files (nvkr.fetch.http): never from https down to http,
at lock and at build; messages name where a redirect led; credentials never follow one to
another host.

The servers are loopback HTTP and HTTPS servers (a self-signed certificate that requests trusts
through REQUESTS_CA_BUNDLE), one of each on 127.0.0.2 as "another host".
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import pytest

from nvkr.errors import ChecksumError, DowngradeError, FetchError
from nvkr.fetch.context import FetchContext
from nvkr.fetch.http import ensure, fetch_text, resolve
from nvkr.recipe.sources import UrlSource

BODY = b"kubelet binary\x00\x01" * 1000
SHA256 = hashlib.sha256(BODY).hexdigest()
WRONG = "0" * 64


def entry_for(url: str) -> dict[str, Any]:
    return {
        "kind": "url",
        "url": url,
        "size": len(BODY),
        "digest": f"sha256:{SHA256}",
        "sha256": f"sha256:{SHA256}",
    }


# -- no downgrade --------------------------------------------------------------------------------
def test_lock_refuses_a_source_redirected_to_http(
    https_server, http_server, ctx: FetchContext, tmp_path: Path, snapshot
) -> None:
    plain = http_server.add("/kubelet", BODY)
    url = https_server.redirect("/kubelet", plain)
    before = snapshot(ctx.store)
    with pytest.raises(DowngradeError) as e:
        resolve("kubelet", UrlSource(url=url, sha256=SHA256), ctx, base_dir=tmp_path)
    assert url in e.value.message and plain in e.value.message
    assert e.value.exit_code == 3 and e.value.code == "NVKR-E-INTEGRITY"
    assert http_server.routes["/kubelet"].hits == 0  # refused before asking the http URL
    assert snapshot(ctx.store) == before


def test_lock_refuses_a_checksum_file_redirected_to_http(
    https_server, http_server, ctx: FetchContext, tmp_path: Path
) -> None:
    """The digest a lock records must not come over plain HTTP behind an https URL."""
    url = https_server.add("/kubelet", BODY)
    plain = http_server.add("/kubelet.sha256", f"{SHA256}  kubelet\n".encode())
    checksum_url = https_server.redirect("/kubelet.sha256", plain)
    with pytest.raises(DowngradeError) as e:
        resolve("kubelet", UrlSource(url=url, checksumUrl=checksum_url), ctx, base_dir=tmp_path)
    assert checksum_url in e.value.message and plain in e.value.message
    assert http_server.routes["/kubelet.sha256"].hits == 0
    assert https_server.routes["/kubelet"].hits == 0


def test_build_refuses_a_source_redirected_to_http(
    https_server, http_server, ctx: FetchContext, tmp_path: Path
) -> None:
    plain = http_server.add("/kubelet", BODY)
    url = https_server.redirect("/kubelet", plain)
    with pytest.raises(DowngradeError) as e:
        ensure("kubelet", UrlSource(url=url, sha256=SHA256), entry_for(url), ctx, base_dir=tmp_path)
    assert url in e.value.message and plain in e.value.message
    assert http_server.routes["/kubelet"].hits == 0


def test_a_downgrade_anywhere_in_the_chain_is_refused(
    https_server, https_other_host, http_server, ctx: FetchContext, tmp_path: Path
) -> None:
    plain = http_server.add("/kubelet", BODY)
    middle = https_other_host.redirect("/cdn/kubelet", plain, status=307)
    url = https_server.redirect("/kubelet", middle, status=301)
    with pytest.raises(DowngradeError) as e:
        resolve("kubelet", UrlSource(url=url, sha256=SHA256), ctx, base_dir=tmp_path)
    assert url in e.value.message and plain in e.value.message and middle in e.value.message
    assert https_other_host.routes["/cdn/kubelet"].hits == 1
    assert http_server.routes["/kubelet"].hits == 0


def test_upstream_version_files_refuse_a_downgrade_too(https_server, http_server) -> None:
    plain = http_server.add("/stable-1.36.txt", b"v1.36.4\n")
    url = https_server.redirect("/stable-1.36.txt", plain)
    with pytest.raises(DowngradeError):
        fetch_text(url, what="release line 1.36")


def test_redirects_that_keep_tls_or_upgrade_are_followed(
    https_server, https_other_host, http_server, ctx: FetchContext, tmp_path: Path
) -> None:
    final = https_other_host.add("/objects/kubelet", BODY)
    url = https_server.redirect("/releases/kubelet", final, status=307)
    entry = resolve("kubelet", UrlSource(url=url, sha256=SHA256), ctx, base_dir=tmp_path)
    assert entry["url"] == url and entry["digest"] == f"sha256:{SHA256}"
    upgraded = http_server.redirect("/kubelet", final)  # http -> https: an upgrade
    fresh = FetchContext(store=type(ctx.store)(tmp_path / "fresh"))
    src = UrlSource(url=upgraded, sha256=SHA256)
    assert ensure("kubelet", src, entry_for(upgraded), fresh, base_dir=tmp_path) == entry["digest"]


def test_endless_redirects_end(http_server, ctx: FetchContext, tmp_path: Path) -> None:
    url = http_server.redirect("/a", http_server.url("/b"))
    http_server.redirect("/b", url)
    with pytest.raises(FetchError, match="redirects more than 10 times") as e:
        resolve("loop", UrlSource(url=url, sha256=SHA256), ctx, base_dir=tmp_path)
    assert url in e.value.message


# -- messages name the final URL -------------------------------------------------------------------
def test_checksum_mismatch_names_the_url_redirected_to(
    http_server, other_host, ctx: FetchContext, tmp_path: Path, snapshot
) -> None:
    final = other_host.add("/objects/kubelet", b"other bytes")
    url = http_server.redirect("/kubelet", final)
    before = snapshot(ctx.store)
    with pytest.raises(ChecksumError) as e:
        resolve("kubelet", UrlSource(url=url, sha256=SHA256), ctx, base_dir=tmp_path)
    assert url in e.value.message and final in e.value.message
    assert f"sha256:{SHA256}" in e.value.message
    assert snapshot(ctx.store) == before


def test_checksum_mismatch_names_the_checksum_file_the_pin_came_from(
    http_server, other_host, ctx: FetchContext, tmp_path: Path
) -> None:
    url = http_server.add("/kubelet", BODY)
    final = other_host.add("/sums/kubelet.sha256", f"{WRONG}  kubelet\n".encode())
    checksum_url = http_server.redirect("/kubelet.sha256", final)
    with pytest.raises(ChecksumError) as e:
        resolve("kubelet", UrlSource(url=url, checksumUrl=checksum_url), ctx, base_dir=tmp_path)
    assert f"sha256:{WRONG}" in e.value.message
    assert checksum_url in e.value.message and final in e.value.message


def test_http_error_after_a_redirect_names_both_urls(
    http_server, other_host, ctx: FetchContext, tmp_path: Path
) -> None:
    final = other_host.url("/objects/gone")
    url = http_server.redirect("/kubelet", final)
    with pytest.raises(FetchError, match="HTTP 404") as e:
        resolve("kubelet", UrlSource(url=url, sha256=SHA256), ctx, base_dir=tmp_path)
    assert url in e.value.message and final in e.value.message


# -- credentials stay with their host ------------------------------------------------------------
def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize("target", ["other_host", "other_port"])
def test_url_credentials_do_not_follow_a_redirect_elsewhere(
    http_server, ctx: FetchContext, tmp_path: Path, target: str, request
) -> None:
    server = request.getfixturevalue(target)
    final = server.add("/objects/kubelet", BODY)
    http_server.redirect("/kubelet", final)
    url = f"http://u:secret@127.0.0.1:{http_server.port}/kubelet"
    resolve("kubelet", UrlSource(url=url, sha256=SHA256), ctx, base_dir=tmp_path)
    assert http_server.routes["/kubelet"].auth == [basic("u", "secret")]
    assert server.routes["/objects/kubelet"].auth == [None]


def test_netrc_credentials_go_to_the_host_they_name_only(
    http_server, other_host, ctx: FetchContext, tmp_path: Path, monkeypatch
) -> None:
    """~/.netrc (requests reads it, trust_env) names a host: a redirect to another host gets
    nothing, neither the first host's entry nor anything else."""
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login n password netrc-secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    final = other_host.add("/objects/kubelet", BODY)
    url = http_server.redirect("/kubelet", final)
    resolve("kubelet", UrlSource(url=url, sha256=SHA256), ctx, base_dir=tmp_path)
    assert http_server.routes["/kubelet"].auth == [basic("n", "netrc-secret")]
    assert other_host.routes["/objects/kubelet"].auth == [None]
