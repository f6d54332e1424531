"""url sources over a loopback HTTP server and file:// (nvkr.fetch.http)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from nvkr.errors import ChecksumError, FetchError, LockError, OfflineError
from nvkr.fetch import http as fetch_http
from nvkr.fetch.context import FetchContext
from nvkr.fetch.http import ensure, resolve
from nvkr.fetch.mirrors import Mirrors
from nvkr.recipe.sources import UrlSource

BODY = b"kubelet binary\x00\x01" * 1000
SHA256 = hashlib.sha256(BODY).hexdigest()
SHA512 = hashlib.sha512(BODY).hexdigest()
WRONG = "0" * 64


def url_source(url: str, **kw: Any) -> UrlSource:
    return UrlSource(url=url, **kw)


def test_sha256_ok(http_server, ctx: FetchContext, tmp_path: Path) -> None:
    url = http_server.add("/v1/kubelet", BODY)
    entry = resolve("kubelet", url_source(url, sha256=SHA256.upper()), ctx, base_dir=tmp_path)
    assert entry == {
        "kind": "url",
        "url": url,
        "size": len(BODY),
        "digest": f"sha256:{SHA256}",
        "sha256": f"sha256:{SHA256}",
    }
    assert ctx.store.read_blob(entry["digest"]) == BODY


def test_sha512_ok(http_server, ctx: FetchContext, tmp_path: Path) -> None:
    url = http_server.add("/v1/kubelet", BODY)
    entry = resolve("kubelet", url_source(url, sha512=SHA512), ctx, base_dir=tmp_path)
    assert entry["sha512"] == f"sha512:{SHA512}"
    assert entry["digest"] == entry["sha256"] == f"sha256:{SHA256}"
    assert set(entry) == {"kind", "url", "size", "digest", "sha256", "sha512"}


def test_both_pins_ok(http_server, ctx: FetchContext, tmp_path: Path) -> None:
    url = http_server.add("/k", BODY)
    entry = resolve("k", url_source(url, sha256=SHA256, sha512=SHA512), ctx, base_dir=tmp_path)
    assert entry["sha512"] == f"sha512:{SHA512}"


@pytest.mark.parametrize(
    "pin", [{"sha256": WRONG}, {"sha512": "f" * 128}, {"sha256": SHA256, "sha512": "f" * 128}]
)
def test_wrong_digest_leaves_nothing(
    http_server, ctx: FetchContext, tmp_path: Path, snapshot, pin
) -> None:
    url = http_server.add("/v1/kubelet", BODY)
    before = snapshot(ctx.store)
    with pytest.raises(ChecksumError) as exc:
        resolve("kubelet", url_source(url, **pin), ctx, base_dir=tmp_path)
    err = exc.value
    assert err.exit_code == 3
    assert err.code == "NVKR-E-CHECKSUM"
    assert "'kubelet'" in err.message
    assert url in err.message
    algo = "sha512" if "f" * 128 in pin.values() else "sha256"
    actual = SHA512 if algo == "sha512" else SHA256
    assert f"{algo}:{pin[algo]}" in err.message
    assert f"{algo}:{actual}" in err.message
    assert snapshot(ctx.store) == before


def test_truncated_body(http_server, ctx: FetchContext, tmp_path: Path, snapshot) -> None:
    url = http_server.add("/cut", BODY[:100], claim_length=len(BODY))
    before = snapshot(ctx.store)
    with pytest.raises(FetchError) as exc:
        resolve("cut", url_source(url, sha256=SHA256), ctx, base_dir=tmp_path)
    assert "broke off after 100 of 16000 bytes" in exc.value.message
    assert http_server.routes["/cut"].hits == fetch_http.ATTEMPTS
    assert snapshot(ctx.store) == before


def test_truncated_file_against_locked_size(tmp_path: Path, ctx: FetchContext, snapshot) -> None:
    # a file:// source that shrank since the lock: the size check catches it before any digest
    path = tmp_path / "kubelet"
    path.write_bytes(BODY[:100])
    source = url_source(path.as_uri(), sha256=SHA256)
    entry = {
        "kind": "url",
        "url": path.as_uri(),
        "size": len(BODY),
        "digest": f"sha256:{SHA256}",
        "sha256": f"sha256:{SHA256}",
    }
    before = snapshot(ctx.store)
    with pytest.raises(ChecksumError) as exc:
        ensure("kubelet", source, entry, ctx, base_dir=tmp_path)
    assert f"expected {len(BODY)} bytes, got 100" in exc.value.message
    assert snapshot(ctx.store) == before


def test_empty_body(http_server, ctx: FetchContext, tmp_path: Path, snapshot) -> None:
    url = http_server.add("/empty", b"")
    before = snapshot(ctx.store)
    with pytest.raises(FetchError) as exc:
        resolve(
            "e", url_source(url, sha256=hashlib.sha256(b"").hexdigest()), ctx, base_dir=tmp_path
        )
    assert "empty body" in exc.value.message
    assert url in exc.value.message
    assert snapshot(ctx.store) == before


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"<html><body>Sign in</body></html>", "text/html; charset=utf-8"),
        (b"\n  <!DOCTYPE html>\n<html>...", "application/octet-stream"),
        (b"binary-looking but labelled", "text/html"),
    ],
)
def test_html_page(
    http_server, ctx: FetchContext, tmp_path: Path, snapshot, body: bytes, content_type: str
) -> None:
    url = http_server.add("/kubelet", body, content_type=content_type)
    before = snapshot(ctx.store)
    with pytest.raises(FetchError) as exc:
        resolve(
            "k", url_source(url, sha256=hashlib.sha256(body).hexdigest()), ctx, base_dir=tmp_path
        )
    assert "got an HTML page instead of" in exc.value.message
    assert url in exc.value.message
    assert snapshot(ctx.store) == before


def test_html_url_may_be_html(http_server, ctx: FetchContext, tmp_path: Path) -> None:
    body = b"<!doctype html><html>docs</html>"
    url = http_server.add("/docs/index.html", body, content_type="text/html")
    entry = resolve(
        "docs", url_source(url, sha256=hashlib.sha256(body).hexdigest()), ctx, base_dir=tmp_path
    )
    assert entry["size"] == len(body)


def test_404(http_server, ctx: FetchContext, tmp_path: Path) -> None:
    url = http_server.url("/missing")
    with pytest.raises(FetchError) as exc:
        resolve("m", url_source(url, sha256=SHA256), ctx, base_dir=tmp_path)
    assert "HTTP 404" in exc.value.message
    assert url in exc.value.message


def test_500_after_retries(http_server, ctx: FetchContext, tmp_path: Path) -> None:
    url = http_server.add("/flaky", BODY, fail_first=100)
    with pytest.raises(FetchError) as exc:
        resolve("f", url_source(url, sha256=SHA256), ctx, base_dir=tmp_path)
    assert "HTTP 500" in exc.value.message
    assert url in exc.value.message
    assert http_server.routes["/flaky"].hits == fetch_http.RETRIES + 1


def test_retry_after_one_500(http_server, ctx: FetchContext, tmp_path: Path) -> None:
    url = http_server.add("/flaky", BODY, fail_first=1)
    entry = resolve("f", url_source(url, sha256=SHA256), ctx, base_dir=tmp_path)
    assert entry["digest"] == f"sha256:{SHA256}"
    assert http_server.routes["/flaky"].hits == 2


def test_429_retry_after_is_bounded(
    http_server, ctx: FetchContext, tmp_path: Path, monkeypatch
) -> None:
    # an hour-long Retry-After would stall the build; nvkr waits at most MAX_RETRY_AFTER seconds
    monkeypatch.setattr(fetch_http, "MAX_RETRY_AFTER", 0)
    url = http_server.add(
        "/limited", BODY, fail_first=2, fail_status=429, fail_headers={"Retry-After": "3600"}
    )
    entry = resolve("l", url_source(url, sha256=SHA256), ctx, base_dir=tmp_path)
    assert entry["size"] == len(BODY)
    assert http_server.routes["/limited"].hits == 3


def test_unreachable_port(ctx: FetchContext, tmp_path: Path, free_port: int) -> None:
    url = f"http://127.0.0.1:{free_port}/kubelet"
    with pytest.raises(FetchError) as exc:
        resolve("k", url_source(url, sha256=SHA256), ctx, base_dir=tmp_path)
    assert "cannot reach" in exc.value.message
    assert url in exc.value.message
    assert "refused" in exc.value.message.lower()
    assert exc.value.hint is not None
    assert "--mirror" in exc.value.hint
    assert "--offline" in exc.value.hint


def test_unsupported_scheme(ctx: FetchContext, tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="unsupported URL"):
        resolve("k", url_source("ftp://host/kubelet", sha256=SHA256), ctx, base_dir=tmp_path)


# -- file:// ---------------------------------------------------------------------------------------
def test_file_url(ctx: FetchContext, tmp_path: Path) -> None:
    path = tmp_path / "dir with space" / "kubelet"
    path.parent.mkdir()
    path.write_bytes(BODY)
    entry = resolve("k", url_source(path.as_uri(), sha256=SHA256), ctx, base_dir=tmp_path)
    assert entry["url"] == path.as_uri()
    assert ctx.store.read_blob(entry["digest"]) == BODY


def test_file_url_missing(ctx: FetchContext, tmp_path: Path) -> None:
    url = (tmp_path / "nope").as_uri()
    with pytest.raises(FetchError) as exc:
        resolve("k", url_source(url, sha256=SHA256), ctx, base_dir=tmp_path)
    assert "no such file" in exc.value.message
    assert url in exc.value.message


def test_file_url_wrong_digest(ctx: FetchContext, tmp_path: Path, snapshot) -> None:
    path = tmp_path / "kubelet"
    path.write_bytes(BODY)
    before = snapshot(ctx.store)
    with pytest.raises(ChecksumError):
        resolve("k", url_source(path.as_uri(), sha256=WRONG), ctx, base_dir=tmp_path)
    assert snapshot(ctx.store) == before


# -- checksumUrl -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "text", "algo"),
    [
        ("kubelet.sha256", f"{SHA256}\n", "sha256"),
        ("kubelet.sha512", f"{SHA512.upper()}\r\n", "sha512"),
        ("SHA256SUMS", f"{'1' * 64}  kubectl\n{SHA256} *kubelet\n", "sha256"),
        ("CHECKSUMS", f"SHA512 (kubelet) = {SHA512}\n", "sha512"),
    ],
)
def test_checksum_url(
    http_server, ctx: FetchContext, tmp_path: Path, name: str, text: str, algo: str
) -> None:
    url = http_server.add("/v1/kubelet", BODY)
    checksum_url = http_server.add(f"/v1/{name}", text.encode(), content_type="text/plain")
    entry = resolve("kubelet", url_source(url, checksumUrl=checksum_url), ctx, base_dir=tmp_path)
    assert entry["digest"] == f"sha256:{SHA256}"
    assert ("sha512" in entry) == (algo == "sha512")
    if algo == "sha512":
        assert entry["sha512"] == f"sha512:{SHA512}"


def test_checksum_url_declared_algorithm_and_filename(
    http_server, ctx: FetchContext, tmp_path: Path
) -> None:
    url = http_server.add("/download", BODY) + "?id=7"
    checksum_url = http_server.add("/sums.txt", f"{SHA512}  kubelet-linux-amd64\n".encode())
    source = url_source(
        url, checksumUrl=checksum_url, checksumAlgorithm="sha512", filename="kubelet-linux-amd64"
    )
    entry = resolve("kubelet", source, ctx, base_dir=tmp_path)
    assert entry["sha512"] == f"sha512:{SHA512}"


def test_checksum_url_mismatch(http_server, ctx: FetchContext, tmp_path: Path, snapshot) -> None:
    url = http_server.add("/v1/kubelet", BODY)
    checksum_url = http_server.add("/v1/kubelet.sha256", f"{WRONG}  kubelet\n".encode())
    before = snapshot(ctx.store)
    with pytest.raises(ChecksumError) as exc:
        resolve("kubelet", url_source(url, checksumUrl=checksum_url), ctx, base_dir=tmp_path)
    assert f"sha256:{WRONG}" in exc.value.message
    assert snapshot(ctx.store) == before


@pytest.mark.parametrize(
    ("body", "content_type", "needle"),
    [
        (b"<html><body>Not Found</body></html>", "text/plain", "HTML page"),
        (b"<p>hi</p>", "text/html", "HTML page"),
        (b"", "text/plain", "is empty"),
        (b"abc  kubelet\n", "text/plain", "hex digits"),
    ],
)
def test_checksum_url_rejected(
    http_server, ctx: FetchContext, tmp_path: Path, body: bytes, content_type: str, needle: str
) -> None:
    url = http_server.add("/v1/kubelet", BODY)
    checksum_url = http_server.add("/v1/kubelet.sha256", body, content_type=content_type)
    with pytest.raises(FetchError) as exc:
        resolve("kubelet", url_source(url, checksumUrl=checksum_url), ctx, base_dir=tmp_path)
    assert needle in exc.value.message
    assert checksum_url in exc.value.message
    assert http_server.routes["/v1/kubelet"].hits == 0


def test_checksum_url_404(http_server, ctx: FetchContext, tmp_path: Path) -> None:
    url = http_server.add("/v1/kubelet", BODY)
    with pytest.raises(FetchError) as exc:
        resolve(
            "kubelet",
            url_source(url, checksumUrl=http_server.url("/v1/kubelet.sha256")),
            ctx,
            base_dir=tmp_path,
        )
    assert "HTTP 404" in exc.value.message
    assert "/v1/kubelet.sha256" in exc.value.message


# -- mirrors ---------------------------------------------------------------------------------------
def test_mirror_rewrite(http_server, store, tmp_path: Path, free_port: int) -> None:
    upstream = f"http://127.0.0.1:{free_port}/release/"
    http_server.add("/mirror/v1/kubelet", BODY)
    http_server.add("/mirror/v1/kubelet.sha256", f"{SHA256}  kubelet\n".encode())
    ctx = FetchContext(
        store=store, mirrors=Mirrors.parse([f"{upstream}={http_server.url('/mirror/')}"])
    )
    source = url_source(upstream + "v1/kubelet", checksumUrl=upstream + "v1/kubelet.sha256")
    entry = resolve("kubelet", source, ctx, base_dir=tmp_path)
    assert entry["url"] == upstream + "v1/kubelet"
    assert entry["digest"] == f"sha256:{SHA256}"
    # at build time, from an empty store, through the mirror again
    fresh = FetchContext(store=type(store)(tmp_path / "store2"), mirrors=ctx.mirrors)
    assert ensure("kubelet", source, entry, fresh, base_dir=tmp_path) == entry["digest"]
    assert http_server.routes["/mirror/v1/kubelet"].hits == 2


def test_mirror_mismatch_names_both_urls(http_server, store, tmp_path: Path) -> None:
    upstream = "https://dl.example.invalid/"
    http_server.add("/m/kubelet", b"tampered")
    ctx = FetchContext(store=store, mirrors=Mirrors.parse([f"{upstream}={http_server.url('/m/')}"]))
    with pytest.raises(ChecksumError) as exc:
        resolve("kubelet", url_source(upstream + "kubelet", sha256=SHA256), ctx, base_dir=tmp_path)
    assert http_server.url("/m/kubelet") in exc.value.message
    assert f"mirror of {upstream}kubelet" in exc.value.message


# -- store shortcuts, ensure, offline --------------------------------------------------------------
def test_resolve_uses_store_without_network(ctx: FetchContext, tmp_path: Path, no_network) -> None:
    ctx.store.add_bytes(BODY)
    entry = resolve(
        "k",
        url_source("https://dl.example.invalid/k", sha256=SHA256, sha512=SHA512),
        ctx,
        base_dir=tmp_path,
    )
    assert entry["size"] == len(BODY)
    assert entry["sha512"] == f"sha512:{SHA512}"


def test_resolve_store_blob_contradicts_sha512_pin(
    ctx: FetchContext, tmp_path: Path, no_network
) -> None:
    ctx.store.add_bytes(BODY)
    with pytest.raises(ChecksumError, match="sha512"):
        resolve(
            "k",
            url_source("https://x.invalid/k", sha256=SHA256, sha512="e" * 128),
            ctx,
            base_dir=tmp_path,
        )


def _entry(url: str) -> dict[str, Any]:
    return {
        "kind": "url",
        "url": url,
        "size": len(BODY),
        "digest": f"sha256:{SHA256}",
        "sha256": f"sha256:{SHA256}",
    }


def test_ensure_blob_present_no_network(ctx: FetchContext, tmp_path: Path, no_network) -> None:
    ctx.store.add_bytes(BODY)
    url = "https://dl.example.invalid/kubelet"
    offline = FetchContext(store=ctx.store, offline=True)
    for c in (ctx, offline):
        assert (
            ensure("kubelet", url_source(url, sha256=SHA256), _entry(url), c, base_dir=tmp_path)
            == f"sha256:{SHA256}"
        )


def test_ensure_offline_blob_absent(ctx: FetchContext, tmp_path: Path, no_network) -> None:
    url = "https://dl.example.invalid/kubelet"
    offline = FetchContext(store=ctx.store, offline=True)
    with pytest.raises(OfflineError) as exc:
        ensure("kubelet", url_source(url, sha256=SHA256), _entry(url), offline, base_dir=tmp_path)
    assert "'kubelet'" in exc.value.message
    assert url in exc.value.message
    assert f"sha256:{SHA256}" in exc.value.message
    assert exc.value.code == "NVKR-E-OFFLINE"


def test_resolve_offline(ctx: FetchContext, tmp_path: Path, no_network) -> None:
    offline = FetchContext(store=ctx.store, offline=True)
    with pytest.raises(OfflineError, match="checksum file"):
        resolve(
            "k",
            url_source("https://x.invalid/k", checksumUrl="https://x.invalid/k.sha256"),
            offline,
            base_dir=tmp_path,
        )
    with pytest.raises(OfflineError, match=r"https://x\.invalid/k"):
        resolve("k", url_source("https://x.invalid/k", sha256=SHA256), offline, base_dir=tmp_path)


def test_ensure_fetches_and_verifies(
    http_server, ctx: FetchContext, tmp_path: Path, snapshot
) -> None:
    url = http_server.add("/k", BODY)
    source = url_source(url, checksumUrl=url + ".sha256")
    assert ensure("k", source, _entry(url), ctx, base_dir=tmp_path) == f"sha256:{SHA256}"
    assert ctx.store.read_blob(f"sha256:{SHA256}") == BODY
    # a lock entry that disagrees with what the server now serves
    http_server.add("/k", BODY + b"changed")
    fresh = FetchContext(store=type(ctx.store)(tmp_path / "s2"))
    before = snapshot(fresh.store)
    with pytest.raises(ChecksumError):
        ensure("k", source, _entry(url), fresh, base_dir=tmp_path)
    assert snapshot(fresh.store) == before


def test_ensure_rejects_foreign_entry(ctx: FetchContext, tmp_path: Path) -> None:
    source = url_source("https://a.invalid/k", sha256=SHA256)
    with pytest.raises(LockError, match="kind 'git'"):
        ensure("k", source, {"kind": "git", "digest": f"sha256:{SHA256}"}, ctx, base_dir=tmp_path)
    with pytest.raises(LockError, match="url="):
        ensure("k", source, _entry("https://b.invalid/k"), ctx, base_dir=tmp_path)
    with pytest.raises(LockError, match="sha256="):
        ensure(
            "k",
            url_source("https://a.invalid/k", sha256=WRONG),
            _entry("https://a.invalid/k"),
            ctx,
            base_dir=tmp_path,
        )


def test_429_to_the_end_says_rate_limit(http_server, ctx: FetchContext, tmp_path: Path) -> None:
    url = http_server.add(
        "/limited", BODY, fail_first=99, fail_status=429, fail_headers={"Retry-After": "0"}
    )
    with pytest.raises(FetchError) as exc:
        resolve("l", url_source(url, sha256=SHA256), ctx, base_dir=tmp_path)
    assert http_server.routes["/limited"].hits == fetch_http.RETRIES + 1
    assert "HTTP 429" in exc.value.message and "rate limit" in exc.value.message
    assert url in exc.value.message
    assert exc.value.hint is not None and "--mirror" in exc.value.hint


def test_403_is_not_retried(http_server, ctx: FetchContext, tmp_path: Path) -> None:
    url = http_server.add("/denied", BODY, fail_first=99, fail_status=403)
    with pytest.raises(FetchError, match="HTTP 403"):
        resolve("d", url_source(url, sha256=SHA256), ctx, base_dir=tmp_path)
    assert http_server.routes["/denied"].hits == 1


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_login_hints_at_the_credentials(
    http_server, ctx: FetchContext, tmp_path: Path, status: int
) -> None:
    """401 (no or wrong credentials) and 403 name where credentials come from, not the network
    (found by the fresh-user trial: a wrong password was told to check the network)."""
    if status == 401:
        url = http_server.add("/private", BODY, require_auth="Basic dTpw")
    else:
        url = http_server.add("/private", BODY, fail_first=99, fail_status=403)
    with pytest.raises(FetchError, match=f"HTTP {status}") as exc:
        resolve("p", url_source(url, sha256=SHA256), ctx, base_dir=tmp_path)
    assert exc.value.hint is not None and "credentials" in exc.value.hint, exc.value.hint
    assert "~/.netrc" in exc.value.hint and "user info" in exc.value.hint, exc.value.hint
