"""The oci source kind against a real CNCF distribution registry on loopback, and OCI layouts.

The registry (``/usr/bin/docker-registry`` from Debian's docker-registry package, which install.sh
installs) is started once for this module with a temp storage dir and stopped afterwards; images
are pushed into it with skopeo from OCI layouts the tests write. A small proxy in front of it
plays the token service and the basic-auth gate, and serves tampered bytes.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from nvkr.canonical import canonical_json
from nvkr.errors import ChecksumError, FetchError, LockError, OfflineError
from nvkr.fetch.context import FetchContext
from nvkr.fetch.mirrors import Mirrors
from nvkr.fetch.oci import _Registry, docker_credentials, ensure, resolve
from nvkr.oci import mediatypes as mt
from nvkr.recipe.sources import OciSource
from nvkr.store import Store
from tests.helpers import lock_entry
from tests.helpers.oci_images import Image, make_layout, push
from tests.helpers.registry import Registry, skopeo

# The registry: CNCF distribution on loopback, shared with the publish tests (tests/helpers/registry.py).


@pytest.fixture
def pushed(registry: Registry, tmp_path: Path, request: pytest.FixtureRequest) -> Image:
    """A fresh image (its own bytes) pushed as ``<test name>:v1``."""
    image = make_layout(tmp_path / "layout", salt=request.node.name)
    push(image, registry, request.node.name.lower())
    return image


def source(registry: Registry, repo: str, digest: str) -> OciSource:
    return OciSource(oci=f"{registry.host}/{repo}", digest=digest)


# -- pulls from the registry -----------------------------------------------------------------------
def test_resolve_pulls_the_whole_closure(registry, pushed, ctx, store, tmp_path, request):
    src = source(registry, request.node.name.lower(), pushed.digest)
    entry = resolve("base", src, ctx, base_dir=tmp_path)
    assert entry == {
        "kind": "oci",
        "ref": src.oci,
        "digest": pushed.digest,
        "mediaType": mt.OCI_INDEX,
        "size": store.blob_path(pushed.digest).stat().st_size,
        "blobs": pushed.blobs,
    }
    assert len(entry["blobs"]) == 7  # index, 2 manifests, 2 configs, 2 layers
    for d in entry["blobs"]:
        store.verify_blob(d)
        assert (
            store.blob_path(d).read_bytes() == (pushed.layout / "blobs/sha256" / d[7:]).read_bytes()
        )
    assert not os.listdir(store.tmp_dir)
    assert entry == json.loads(canonical_json(entry)), "JSON-able, no floats"


def test_ensure_is_a_no_op_when_the_store_holds_the_closure(
    registry, pushed, ctx, tmp_path, request, no_network
):
    src = source(registry, request.node.name.lower(), pushed.digest)
    # fill the store through the layout, then ensure the registry source: nothing is opened
    layout_src = OciSource(oci="oci-layout:layout", digest=pushed.digest)
    entry = resolve("base", layout_src, ctx, base_dir=tmp_path)
    entry["ref"] = src.oci
    assert ensure("base", src, entry, ctx, base_dir=tmp_path) == pushed.digest
    assert ensure(
        "base", src, entry, FetchContext(store=ctx.store, offline=True), base_dir=tmp_path
    )
    assert resolve("base", src, ctx, base_dir=tmp_path) == entry, "resolve uses the store too"


def test_ensure_pulls_into_an_empty_store(registry, pushed, tmp_path, request):
    src = source(registry, request.node.name.lower(), pushed.digest)
    entry = resolve("base", src, FetchContext(store=Store(tmp_path / "first")), base_dir=tmp_path)
    fresh = Store(tmp_path / "second")
    assert ensure("base", src, entry, FetchContext(store=fresh), base_dir=tmp_path) == pushed.digest
    assert all(fresh.has_blob(d) for d in entry["blobs"])
    # a layer lost from the store is fetched again; the rest is not touched
    layer = next(d for d in entry["blobs"] if fresh.blob_path(d).read_bytes()[:2] == b"\x1f\x8b")
    fresh.blob_path(layer).unlink()
    assert ensure("base", src, entry, FetchContext(store=fresh), base_dir=tmp_path) == pushed.digest
    fresh.verify_blob(layer)


def test_offline_refuses_to_pull(registry, pushed, store, tmp_path, request, snapshot):
    src = source(registry, request.node.name.lower(), pushed.digest)
    offline = FetchContext(store=store, offline=True)
    with pytest.raises(OfflineError, match=r"source 'base'.*--offline"):
        resolve("base", src, offline, base_dir=tmp_path)
    entry = {"kind": "oci", "ref": src.oci, "digest": pushed.digest, "blobs": pushed.blobs}
    with pytest.raises(OfflineError) as e:
        ensure("base", src, entry, offline, base_dir=tmp_path)
    assert e.value.exit_code == 1
    assert snapshot(store) == ([], [])


def test_tampered_blob_is_a_checksum_error_and_nothing_is_stored(
    registry, pushed, store, ctx, tmp_path, request, snapshot
):
    repo = request.node.name.lower()
    index = json.loads((pushed.layout / "blobs/sha256" / pushed.digest[7:]).read_bytes())
    arm64 = index["manifests"][1]["digest"]
    manifest = json.loads((pushed.layout / "blobs/sha256" / arm64[7:]).read_bytes())
    layer = manifest["layers"][0]["digest"]
    data = registry.blob_data(layer)
    good = data.read_bytes()
    bad = bytearray(good)
    bad[-5] ^= 0xFF  # same size, other bytes
    data.write_bytes(bytes(bad))
    try:
        with pytest.raises(ChecksumError) as e:
            resolve("base", source(registry, repo, pushed.digest), ctx, base_dir=tmp_path)
    finally:
        data.write_bytes(good)
    assert e.value.exit_code == 3
    assert f"{registry.host}/{repo}" in e.value.message and layer in e.value.message
    assert "expected " + layer in e.value.message
    assert snapshot(store) == ([], []), "no blob of the closure is kept"


def test_a_digest_the_registry_lacks(registry, pushed, ctx, tmp_path, request, snapshot, store):
    missing = "sha256:" + "0" * 64
    with pytest.raises(FetchError, match=r"HTTP 404.*manifests/sha256:0000") as e:
        resolve(
            "base", source(registry, request.node.name.lower(), missing), ctx, base_dir=tmp_path
        )
    assert "check the repository and the digest" in (e.value.hint or "")
    assert snapshot(store) == ([], [])


def test_unreachable_registry(ctx, tmp_path, free_port):
    src = OciSource(oci=f"127.0.0.1:{free_port}/x", digest="sha256:" + "1" * 64)
    with pytest.raises(FetchError, match=r"cannot reach http://127\.0\.0\.1:\d+/v2/x/manifests"):
        resolve("base", src, ctx, base_dir=tmp_path)


def test_docker_schema2_images_are_taken(registry, tmp_path, ctx, store, request):
    image = make_layout(tmp_path / "layout", salt=request.node.name)
    repo = request.node.name.lower()
    push(image, registry, repo, "--format", "v2s2")
    raw = skopeo("inspect", "--raw", "--tls-verify=false", f"docker://{registry.host}/{repo}:v1")
    doc = json.loads(raw)
    assert doc["mediaType"] == mt.DOCKER_MANIFEST_LIST
    digest = "sha256:" + __import__("hashlib").sha256(raw.encode()).hexdigest()
    entry = resolve("base", source(registry, repo, digest), ctx, base_dir=tmp_path)
    assert entry["mediaType"] == mt.DOCKER_MANIFEST_LIST and len(entry["blobs"]) == 7
    child = json.loads(store.read_blob(doc["manifests"][0]["digest"]))
    assert child["mediaType"] == mt.DOCKER_MANIFEST
    assert child["layers"][0]["mediaType"] == mt.DOCKER_LAYER_TAR_GZIP


def test_mirror_rewrites_the_registry_prefix(registry, pushed, ctx, store, tmp_path, request):
    repo = request.node.name.lower()
    src = OciSource(oci=f"registry.example.invalid/{repo}", digest=pushed.digest)
    mirrored = FetchContext(
        store=store,
        mirrors=Mirrors((("https://registry.example.invalid/", f"http://{registry.host}/"),)),
    )
    entry = resolve("base", src, mirrored, base_dir=tmp_path)
    assert entry["ref"] == src.oci and entry["blobs"] == pushed.blobs


def test_scheme_follows_insecure_and_loopback(ctx):
    def base(ref: str, insecure: bool = False) -> str:
        return _Registry("b", ref, insecure, ctx).base

    assert base("registry.example.org/team/img") == "https://registry.example.org/"
    assert (
        base("registry.example.org:5000/img", insecure=True) == "http://registry.example.org:5000/"
    )
    assert base("localhost:5000/img") == "http://localhost:5000/"
    assert base("127.0.0.1:5000/img") == "http://127.0.0.1:5000/"
    assert base("docker.io/library/debian") == "https://registry-1.docker.io/"
    for bad in ("justaname", "registry.example.org/img:tag", "registry.example.org/img@sha256:1"):
        with pytest.raises(FetchError, match="not REGISTRY/REPOSITORY"):
            base(bad)


def test_lock_entry_must_match_the_recipe(registry, pushed, ctx, tmp_path, request):
    src = source(registry, request.node.name.lower(), pushed.digest)
    entry = resolve("base", src, ctx, base_dir=tmp_path)
    with pytest.raises(LockError, match="digest"):
        ensure("base", src, {**entry, "digest": "sha256:" + "2" * 64}, ctx, base_dir=tmp_path)
    with pytest.raises(LockError, match="ref"):
        ensure("base", src, {**entry, "ref": "elsewhere.example/x"}, ctx, base_dir=tmp_path)
    with pytest.raises(LockError, match="kind"):
        ensure("base", src, {**entry, "kind": "url"}, ctx, base_dir=tmp_path)


# -- OCI layouts -----------------------------------------------------------------------------------
def test_pull_from_an_oci_layout(tmp_path, ctx, store, snapshot):
    image = make_layout(tmp_path / "images" / "base", salt="layout")
    src = OciSource(oci="oci-layout:images/base", digest=image.digest)
    entry = resolve("base", src, ctx, base_dir=tmp_path)
    assert entry["ref"] == "oci-layout:images/base" and entry["blobs"] == image.blobs
    assert entry["mediaType"] == mt.OCI_INDEX
    # a layout is local: offline is fine
    fresh = FetchContext(store=Store(tmp_path / "fresh"), offline=True)
    assert ensure("base", src, entry, fresh, base_dir=tmp_path) == image.digest


def test_tampered_layout_blob(tmp_path, ctx, store, snapshot):
    image = make_layout(tmp_path / "base", salt="tamper")
    config = next(
        d
        for d in image.blobs
        if (tmp_path / "base/blobs/sha256" / d[7:]).read_bytes().startswith(b'{"architecture"')
    )
    (tmp_path / "base/blobs/sha256" / config[7:]).write_bytes(b'{"architecture":"evil"}')
    with pytest.raises(ChecksumError, match=rf"oci-layout:base.*blob {config}.*expected \d+ bytes"):
        resolve(
            "base", OciSource(oci="oci-layout:base", digest=image.digest), ctx, base_dir=tmp_path
        )
    assert snapshot(store) == ([], [])


def test_missing_layout(tmp_path, ctx):
    with pytest.raises(FetchError, match="does not exist"):
        resolve(
            "base",
            OciSource(oci="oci-layout:nope", digest="sha256:" + "3" * 64),
            ctx,
            base_dir=tmp_path,
        )


def test_layout_without_the_digest(tmp_path, ctx):
    make_layout(tmp_path / "base", salt="x")
    with pytest.raises(FetchError, match="missing from"):
        resolve(
            "base",
            OciSource(oci="oci-layout:base", digest="sha256:" + "4" * 64),
            ctx,
            base_dir=tmp_path,
        )


# -- authentication ----------------------------------------------------------------------------------
@dataclass
class Gate:
    """A proxy in front of the registry that wants a bearer token or basic credentials."""

    host: str
    mode: str  # "bearer" | "basic"
    upstream: str
    token_requests: list[dict[str, list[str]]]
    token_auth: list[str | None]


class _GateHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _GateServer

    def do_GET(self) -> None:
        gate = self.server.gate
        url = urlsplit(self.path)
        if url.path == "/token":
            gate.token_requests.append(parse_qs(url.query))
            gate.token_auth.append(self.headers.get("Authorization"))
            self._send(
                200, json.dumps({"token": "t0ken"}).encode(), {"Content-Type": "application/json"}
            )
            return
        want = (
            "Bearer t0ken"
            if gate.mode == "bearer"
            else "Basic " + base64.b64encode(b"nvkr:s3cret").decode()
        )
        if self.headers.get("Authorization") != want:
            challenge = (
                f'Bearer realm="http://{gate.host}/token",service="nvkr-test",scope="repository:gated:pull"'
                if gate.mode == "bearer"
                else 'Basic realm="nvkr-test"'
            )
            self._send(401, b'{"errors":[]}', {"WWW-Authenticate": challenge})
            return
        conn = http.client.HTTPConnection(gate.upstream, timeout=10)
        conn.request("GET", self.path, headers={"Accept": self.headers.get("Accept", "*/*")})
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        self._send(resp.status, body, {"Content-Type": resp.getheader("Content-Type", "")})

    def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _GateServer(ThreadingHTTPServer):
    daemon_threads = True
    gate: Gate


@pytest.fixture(params=["bearer", "basic"])
def gate(request, registry) -> Iterator[Gate]:
    server = _GateServer(("127.0.0.1", 0), _GateHandler)
    host = f"127.0.0.1:{server.server_address[1]}"
    server.gate = Gate(
        host=host, mode=request.param, upstream=registry.host, token_requests=[], token_auth=[]
    )
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield server.gate
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def docker_config(tmp_path, monkeypatch) -> Path:
    config_dir = tmp_path / "docker-config"
    config_dir.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(config_dir))
    return config_dir / "config.json"


def test_registry_behind_authentication(registry, gate, docker_config, tmp_path, ctx, store):
    image = make_layout(tmp_path / "layout", salt="gated-" + gate.mode)
    push(image, registry, "gated")
    src = OciSource(oci=f"{gate.host}/gated", digest=image.digest)
    if gate.mode == "basic":
        with pytest.raises(FetchError, match="asks for a user name and password") as e:
            resolve("base", src, ctx, base_dir=tmp_path)
        assert "config.json" in (e.value.hint or "")
        docker_config.write_text(
            json.dumps({"auths": {gate.host: {"auth": base64.b64encode(b"nvkr:s3cret").decode()}}})
        )
    entry = resolve("base", src, ctx, base_dir=tmp_path)
    assert entry["blobs"] == image.blobs
    if gate.mode == "bearer":
        # one anonymous token for the whole pull, for the scope the challenge named
        assert gate.token_requests == [
            {"service": ["nvkr-test"], "scope": ["repository:gated:pull"]}
        ]
        assert gate.token_auth == [None]


def test_bearer_token_bought_with_docker_credentials(registry, docker_config, tmp_path, request):
    gate_server = _GateServer(("127.0.0.1", 0), _GateHandler)
    host = f"127.0.0.1:{gate_server.server_address[1]}"
    gate_server.gate = Gate(host, "bearer", registry.host, [], [])
    threading.Thread(target=gate_server.serve_forever, daemon=True).start()
    try:
        image = make_layout(tmp_path / "layout", salt=request.node.name)
        push(image, registry, "gated")
        docker_config.write_text(
            json.dumps({"auths": {f"http://{host}/": {"username": "u", "password": "p"}}})
        )
        ctx = FetchContext(store=Store(tmp_path / "store"))
        resolve("base", OciSource(oci=f"{host}/gated", digest=image.digest), ctx, base_dir=tmp_path)
        assert gate_server.gate.token_auth == ["Basic " + base64.b64encode(b"u:p").decode()]
    finally:
        gate_server.shutdown()
        gate_server.server_close()


def test_docker_credentials(docker_config):
    docker_config.write_text(
        json.dumps({"auths": {"https://index.docker.io/v1/": {"username": "u", "password": "p"}}})
    )
    assert docker_credentials("registry-1.docker.io") == ("u", "p")
    assert docker_credentials("docker.io") == ("u", "p")
    assert docker_credentials("elsewhere.example") is None
    docker_config.write_text("not json")
    assert docker_credentials("registry-1.docker.io") is None


def test_a_mirror_gets_its_own_credentials_not_the_upstreams(
    registry, docker_config, tmp_path, request
):
    """Credentials are looked up for the host a request goes to: a mirror of a registry never
    sees the upstream registry's password (containerd asks its credential function per host)."""
    from tests.helpers.registry import run_proxy

    image = make_layout(tmp_path / "layout", salt=request.node.name)
    push(image, registry, "mirrored")
    upstream = "registry.example.invalid"
    with run_proxy(registry.host) as mirror:
        mirror.basic = ("mirror-user", "mirror-pw")
        docker_config.write_text(
            json.dumps(
                {
                    "auths": {
                        upstream: {"username": "upstream-user", "password": "upstream-pw"},
                        mirror.host: {"username": "mirror-user", "password": "mirror-pw"},
                    }
                }
            )
        )
        ctx = FetchContext(
            store=Store(tmp_path / "store"),
            mirrors=Mirrors(((f"https://{upstream}/", f"http://{mirror.host}/"),)),
        )
        src = OciSource(oci=f"{upstream}/mirrored", digest=image.digest)
        entry = resolve("base", src, ctx, base_dir=tmp_path)
        assert entry["blobs"] == image.blobs
        upstream_basic = "Basic " + base64.b64encode(b"upstream-user:upstream-pw").decode()
        assert upstream_basic not in mirror.challenged
        assert mirror.log and {e.authorization for e in mirror.log} == {
            "Basic " + base64.b64encode(b"mirror-user:mirror-pw").decode()
        }


def test_a_blob_redirected_from_https_to_http_is_refused(registry, tmp_path, request, monkeypatch):
    """An oci source read over https whose blobs the registry hands to a plain-HTTP storage
    host: refused as a downgrade (exit 3), naming the source, not taken for tampered bytes."""
    from nvkr.errors import DowngradeError
    from tests.helpers.registry import run_proxy
    from tests.helpers.tls import self_signed

    image = make_layout(tmp_path / "layout", salt=request.node.name)
    push(image, registry, "downgraded")
    cert, key = self_signed(tmp_path / "tls")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    with run_proxy(registry.host) as storage, run_proxy(registry.host, tls=(cert, key)) as front:
        front.storage, front.redirect_blobs = f"http://{storage.host}", True
        upstream = "registry.example.invalid"
        ctx = FetchContext(
            store=Store(tmp_path / "store"),
            mirrors=Mirrors(((f"https://{upstream}/", f"https://{front.host}/"),)),
        )
        src = OciSource(oci=f"{upstream}/downgraded", digest=image.digest)
        with pytest.raises(DowngradeError) as e:
            resolve("base", src, ctx, base_dir=tmp_path)
        assert e.value.exit_code == 3 and "source 'base'" in e.value.message
        assert f"https://{front.host}/v2/downgraded/blobs/" in e.value.message
        assert f"http://{storage.host}/v2/downgraded/blobs/" in e.value.message
        assert storage.log == []


def test_a_build_reports_fetching_the_layers_a_store_lost(tmp_path, ctx, store):
    """The image's index is in the store, one of its layers is not (store gc, verify --repair):
    the build's source gate fetches it again and says so, as for an apt source's lost .debs."""
    from types import SimpleNamespace

    from nvkr.builders.api import ResolvedSource
    from nvkr.execute import _SourceGate
    from nvkr.monitor.events import Event, SourceFetch

    image = make_layout(tmp_path / "images" / "base", salt="lost-layer")
    src = OciSource(oci="oci-layout:images/base", digest=image.digest)
    entry = resolve("base", src, ctx, base_dir=tmp_path)
    layer = next(d for d in entry["blobs"] if store.blob_path(d).read_bytes()[:2] == b"\x1f\x8b")
    store.blob_path(layer).unlink()
    assert store.has_blob(entry["digest"])
    events: list[Event] = []
    resolved = ResolvedSource("base", src, lock_entry(entry), tmp_path)
    _SourceGate(ctx, events.append).ensure(SimpleNamespace(sources={"base": resolved}))  # type: ignore[arg-type]
    (fetch,) = [e for e in events if isinstance(e, SourceFetch)]
    assert fetch.source.name == "base" and fetch.debs is None
    store.verify_blob(layer)
