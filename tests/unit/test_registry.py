"""The registry client against real CNCF distribution 2.8, with and without htpasswd auth, and
through the fault-injecting proxy of :mod:`tests.helpers.registry` (dropped connections, 500/429,
truncated bodies, rewritten digests, relative Locations, a bearer-token gate)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from nvkr.errors import IntegrityError, RegistryError, UsageError
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import artifact_manifest, descriptor, image_index, index_bytes, manifest_bytes
from nvkr.oci.registry import Reference, RegistryClient, fallback_tag
from tests.helpers.registry import (
    PASSWORD,
    USER,
    free_port,
    run_proxy,
)


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def payload(n: int, salt: str) -> bytes:
    """``n`` bytes that differ per salt (so every test has blobs of its own)."""
    seed = hashlib.sha256(salt.encode()).digest()
    return (seed * (n // len(seed) + 1))[:n]


def blob_file(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / f"blob-{hashlib.sha256(data).hexdigest()[:12]}"
    path.write_bytes(data)
    return path


def push(client: RegistryClient, repo: str, path: Path) -> int:
    data = path.read_bytes()
    return client.push_blob(repo, sha256(data), len(data), lambda: open(path, "rb"))


def pull(client: RegistryClient, repo: str, digest: str, size: int | None = None) -> bytes:
    out = io.BytesIO()
    client.get_blob(repo, digest, out, size=size)
    return out.getvalue()


@pytest.fixture
def repo(request: pytest.FixtureRequest) -> str:
    return "t/" + request.node.name.lower().replace("[", "-").replace("]", "")[:60]


# -- references ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("127.0.0.1:5000/nvkr/set", ("127.0.0.1:5000", "nvkr/set", None, None)),
        ("localhost/a:v1.0_rc-1", ("localhost", "a", "v1.0_rc-1", None)),
        ("ghcr.io/a/b.c/d__e/f---g:_x", ("ghcr.io", "a/b.c/d__e/f---g", "_x", None)),
        (
            "reg.example:443/a@sha256:" + "a" * 64,
            ("reg.example:443", "a", None, "sha256:" + "a" * 64),
        ),
        ("reg.example/a:t@sha256:" + "b" * 64, ("reg.example", "a", "t", "sha256:" + "b" * 64)),
    ],
)
def test_reference_parse(text, parsed):
    ref = Reference.parse(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == parsed
    assert str(ref) == text


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (
            "reg.example/Team/app:v1",
            r"repository component 'Team' is not valid \(lower case: 'team'\)",
        ),
        ("reg.example/team/app:-v1", r"tag '-v1' is not valid"),
        ("reg.example/team/app:.v1", r"tag '\.v1' is not valid"),
        (
            "reg.example/team/app:" + "a" * 129,
            r"tag 'a+' is not valid \(129 characters, at most 128\)",
        ),
        ("reg.example/team//app", r"repository component '' is not valid"),
        ("reg.example/team/app_", r"repository component 'app_' is not valid"),
        ("reg.example/a@sha256:abc", r"'sha256:abc' is not a sha256:<64 hex> digest"),
        ("nvkr/app", r"'nvkr' is not a registry host"),
        ("reg.example", r"names no repository"),
        ("reg_example.org/app", r"'reg_example\.org' is not a registry host"),
        ("reg.example/" + "a" * 250, r"longer than 255 characters"),
    ],
)
def test_reference_parse_refuses(text, match):
    with pytest.raises(UsageError, match=match) as e:
        Reference.parse(text)
    assert e.value.exit_code == 2


def test_fallback_tag():
    assert fallback_tag("sha256:" + "ab" * 32) == "sha256-" + "ab" * 32
    assert fallback_tag("sha512:" + "c" * 128) == "sha512-" + "c" * 64


def test_scheme_is_https_unless_insecure_or_loopback():
    assert RegistryClient("reg.example:5000").base == "https://reg.example:5000/"
    assert RegistryClient("reg.example:5000", insecure=True).base == "http://reg.example:5000/"
    assert RegistryClient("localhost:5000").base == "http://localhost:5000/"
    assert RegistryClient("127.0.0.1:5000").base == "http://127.0.0.1:5000/"
    assert RegistryClient("docker.io").base == "https://registry-1.docker.io/"


# -- blobs -----------------------------------------------------------------------------------------
def test_monolithic_push_head_and_pull(registry, tmp_path, repo):
    client = RegistryClient(registry.host)
    data = payload(1000, repo)
    assert not client.blob_exists(repo, sha256(data))
    assert push(client, repo, blob_file(tmp_path, data)) == 1000
    assert client.blob_exists(repo, sha256(data))
    assert pull(client, repo, sha256(data), 1000) == data
    assert registry.blob_data(sha256(data)).read_bytes() == data
    # an empty blob goes too
    assert push(client, repo, blob_file(tmp_path, b"")) == 0
    assert pull(client, repo, sha256(b"")) == b""


def test_chunked_upload(registry, proxy, tmp_path, repo):
    client = RegistryClient(proxy.host, chunk_size=64 << 10)
    data = payload(300 << 10, repo)
    assert push(client, repo, blob_file(tmp_path, data)) == len(data)
    assert [e.method for e in proxy.requests(path="/blobs/uploads/")] == [
        "POST",
        *["PATCH"] * 4,
        "PUT",
    ]
    assert pull(RegistryClient(registry.host), repo, sha256(data)) == data


def test_chunked_upload_resumes_after_a_dropped_connection(registry, proxy, tmp_path, repo):
    client = RegistryClient(proxy.host, chunk_size=64 << 10)
    data = payload(300 << 10, repo)
    proxy.add("drop", method="PATCH", nth=2)  # never reaches the registry: the upload stays
    sent = push(client, repo, blob_file(tmp_path, data))
    assert sent == len(data) + (64 << 10), "only the broken chunk was sent twice"
    methods = [e.method for e in proxy.requests(path="/blobs/")]
    assert methods.count("POST") == 1, "the same upload went on"
    assert "GET" in methods, "the registry was asked where the upload stood"
    assert pull(RegistryClient(registry.host), repo, sha256(data)) == data


def test_chunked_upload_starts_over_when_the_registry_lost_it(registry, proxy, tmp_path, repo):
    client = RegistryClient(proxy.host, chunk_size=64 << 10)
    data = payload(300 << 10, repo)
    # half a chunk reaches distribution, which then cancels the upload (its size moved)
    proxy.add("drop-mid-body", method="PATCH", nth=3)
    sent = push(client, repo, blob_file(tmp_path, data))
    assert len(data) < sent <= 2 * len(data)
    assert [e.method for e in proxy.requests(path="/blobs/uploads/")].count("POST") == 2
    assert pull(RegistryClient(registry.host), repo, sha256(data)) == data


@pytest.mark.parametrize("status", [500, 503, 429])
def test_upload_goes_on_after_an_error_answer(registry, proxy, tmp_path, repo, status):
    client = RegistryClient(proxy.host, chunk_size=64 << 10)
    data = payload(200 << 10, repo)
    proxy.add("status", status=status, method="PATCH", nth=2)
    proxy.add("status", status=status, method="HEAD", path="/blobs/")
    assert not client.blob_exists(repo, sha256(data)), "HEAD is retried"
    # the refused chunk went over the wire once more, nothing else: the upload went on
    assert push(client, repo, blob_file(tmp_path, data)) == len(data) + (64 << 10)
    assert [e.method for e in proxy.requests(path="/blobs/uploads/")].count("POST") == 1
    assert pull(RegistryClient(registry.host), repo, sha256(data)) == data


def test_lost_answer_to_the_closing_put(registry, proxy, tmp_path, repo):
    client = RegistryClient(proxy.host)
    data = payload(5000, repo)
    proxy.add("drop-response", method="PUT", path="/blobs/uploads/")
    assert push(client, repo, blob_file(tmp_path, data)) == len(data)
    assert len(proxy.requests("POST")) == 1, "the blob was there: no second upload"


def test_relative_locations(registry, proxy, tmp_path, repo):
    proxy.relative_locations = True
    client = RegistryClient(proxy.host, chunk_size=16 << 10)
    data = payload(50 << 10, repo)
    push(client, repo, blob_file(tmp_path, data))
    assert pull(client, repo, sha256(data)) == data


def test_registry_answering_another_digest_for_a_blob(registry, proxy, tmp_path, repo):
    client = RegistryClient(proxy.host)
    proxy.add("digest", method="PUT", path="/blobs/uploads/")
    with pytest.raises(IntegrityError, match=r"the registry stored it as sha256:0+") as e:
        push(client, repo, blob_file(tmp_path, payload(100, repo)))
    assert e.value.exit_code == 3


def test_local_bytes_that_are_not_the_digest(registry, tmp_path, repo):
    client = RegistryClient(registry.host)
    path = blob_file(tmp_path, b"not what the digest says")
    with pytest.raises(IntegrityError, match="the local bytes hash to sha256:") as e:
        client.push_blob(repo, sha256(b"other"), path.stat().st_size, lambda: path.open("rb"))
    assert e.value.exit_code == 3
    assert not client.blob_exists(repo, sha256(b"other"))


def test_digest_invalid_for_good_bytes(registry, proxy, tmp_path, repo):
    """distribution 2.8 answers DIGEST_INVALID when two clients store the same blob or manifest
    at once: good bytes are sent again; only a registry that keeps saying so is an integrity
    failure."""
    client = RegistryClient(proxy.host)
    path = blob_file(tmp_path, payload(100, repo))
    proxy.add("status", status=400, code="DIGEST_INVALID", method="PUT", path="/blobs/uploads/")
    assert push(client, repo, path) == 200
    data, digest = artifact(client, repo, repo)
    proxy.add("status", status=400, code="DIGEST_INVALID", method="PUT", path="/manifests/")
    assert client.push_manifest(repo, "v1", data, mt.OCI_MANIFEST) == digest
    other = blob_file(tmp_path, payload(100, repo + "-other"))
    proxy.add("status", status=400, code="DIGEST_INVALID", method="PUT", times=0)
    with pytest.raises(IntegrityError, match="the registry computed another digest"):
        push(client, repo, other)
    with pytest.raises(RegistryError, match=r"HTTP 400.*DIGEST_INVALID"):
        client.push_manifest(repo, "v2", data, mt.OCI_MANIFEST)


def test_pull_resumes_a_truncated_body(registry, proxy, tmp_path, repo):
    data = payload(100 << 10, repo)
    push(RegistryClient(registry.host), repo, blob_file(tmp_path, data))
    proxy.add("truncate", method="GET", path="/blobs/")
    assert pull(RegistryClient(proxy.host), repo, sha256(data), len(data)) == data
    assert len(proxy.requests("GET", "/blobs/")) == 2


def test_pull_verifies_the_digest(registry, tmp_path, repo):
    data = payload(4000, repo)
    push(RegistryClient(registry.host), repo, blob_file(tmp_path, data))
    stored = registry.blob_data(sha256(data))
    stored.write_bytes(data[:-1] + b"!")
    with pytest.raises(IntegrityError, match=f"expected {sha256(data)}, got sha256:"):
        pull(RegistryClient(registry.host), repo, sha256(data))


def test_pull_of_a_missing_blob(registry, repo):
    with pytest.raises(RegistryError, match=r"HTTP 404.*BLOB_UNKNOWN") as e:
        pull(RegistryClient(registry.host), repo, sha256(b"nothing"))
    assert e.value.status == 404 and e.value.exit_code == 1


def test_persistent_failure_is_bounded(registry, proxy, repo):
    client = RegistryClient(proxy.host, retries=2)
    proxy.kill_from(1)
    with pytest.raises(RegistryError, match=r"cannot reach http://127\.0\.0\.1:\d+/v2/") as e:
        client.blob_exists(repo, sha256(b"x"))
    assert e.value.status is None and "reachable" in (e.value.hint or "")
    assert len(proxy.log) == 3


def test_unreachable_registry():
    client = RegistryClient(f"127.0.0.1:{free_port()}", retries=0)
    with pytest.raises(RegistryError, match=r"cannot reach .*Connection refused") as e:
        client.manifest_digest("a", "latest")
    # loopback is plain HTTP already: no advice to pass --insecure
    assert e.value.hint == "is the registry running and reachable?"
    # another host is HTTPS unless --insecure: said when it cannot be reached
    https = RegistryClient(f"127.0.0.2:{free_port()}", retries=0)
    with pytest.raises(RegistryError, match=r"cannot reach https://127\.0\.0\.2") as e:
        https.manifest_digest("a", "latest")
    assert "needs --insecure" in (e.value.hint or "")


def test_mount_blob(registry, tmp_path, repo):
    client = RegistryClient(registry.host)
    data = payload(3000, repo)
    push(client, repo, blob_file(tmp_path, data))
    assert client.mount_blob(repo + "-other", sha256(data), repo)
    assert client.blob_exists(repo + "-other", sha256(data))
    assert not client.mount_blob(repo + "-third", sha256(b"absent"), repo)
    assert not client.blob_exists(repo + "-third", sha256(b"absent"))


# -- manifests, referrers, tags -------------------------------------------------------------------
def artifact(client: RegistryClient, repo: str, salt: str, subject=None) -> tuple[bytes, str]:
    """Push a one-layer artifact (its blobs first); return (manifest bytes, digest)."""
    layer = payload(64, salt)
    for data in (layer, mt.EMPTY_JSON):
        client.push_blob(repo, sha256(data), len(data), lambda d=data: io.BytesIO(d))
    doc = artifact_manifest(
        "application/vnd.nvkr.test.v1",
        [descriptor(mt.OCTET_STREAM, layer, annotations={mt.ANN_TITLE: salt})],
        subject=subject,
    )
    data = manifest_bytes(doc)
    return data, client.push_manifest(repo, sha256(data), data, mt.OCI_MANIFEST)


def test_manifest_round_trip(registry, repo):
    client = RegistryClient(registry.host)
    data, digest = artifact(client, repo, repo)
    assert digest == sha256(data)
    assert client.get_manifest(repo, digest) == (data, mt.OCI_MANIFEST, digest)
    assert client.manifest_digest(repo, "v1") is None
    assert client.push_manifest(repo, "v1", data, mt.OCI_MANIFEST) == digest
    assert client.manifest_digest(repo, "v1") == digest
    assert client.get_manifest(repo, "v1")[0] == data
    with pytest.raises(RegistryError, match=r"HTTP 404.*MANIFEST_UNKNOWN") as e:
        client.get_manifest(repo, "v2")
    assert e.value.status == 404


def test_manifest_digest_mismatch_answers(registry, proxy, repo):
    client = RegistryClient(proxy.host)
    data, digest = artifact(client, repo, repo)
    proxy.add("digest", method="PUT", path="/manifests/")
    with pytest.raises(IntegrityError, match=r"the registry answered digest sha256:0+") as e:
        client.push_manifest(repo, "v1", data, mt.OCI_MANIFEST)
    assert e.value.exit_code == 3
    proxy.add("digest", method="GET", path="/manifests/v1")
    with pytest.raises(IntegrityError, match=r"the registry says sha256:0+"):
        client.get_manifest(repo, "v1")
    proxy.add("digest", method="GET", path=f"/manifests/{digest}")
    with pytest.raises(IntegrityError):
        client.get_manifest(repo, digest)


def test_a_manifest_whose_blobs_are_missing_is_refused(registry, repo):
    client = RegistryClient(registry.host)
    doc = artifact_manifest("application/x.t", [descriptor(mt.OCTET_STREAM, b"never pushed")])
    with pytest.raises(RegistryError, match=r"HTTP 400.*MANIFEST_BLOB_UNKNOWN"):
        client.push_manifest(repo, "v1", manifest_bytes(doc), mt.OCI_MANIFEST)


def test_truncated_manifest_is_fetched_again(registry, proxy, repo):
    client = RegistryClient(proxy.host)
    data, digest = artifact(client, repo, repo)
    proxy.add("truncate", method="GET", path="/manifests/")
    assert client.get_manifest(repo, digest)[0] == data


def test_distribution_has_no_referrers_api(registry, repo):
    client = RegistryClient(registry.host)
    _, subject = artifact(client, repo, "subject")
    data, _ = artifact(
        client,
        repo,
        "referrer",
        subject={"mediaType": mt.OCI_MANIFEST, "digest": subject, "size": 1},
    )
    assert json.loads(client.get_manifest(repo, sha256(data))[0])["subject"]["digest"] == subject
    assert client.referrers(repo, subject) is None
    assert client.has_referrers_api(repo, subject) is False


def test_distribution_2_8_ignores_if_match(registry, repo):
    """Found out, not assumed: distribution 2.8 stores a PUT whatever If-Match / If-None-Match
    say, so the referrers fallback cannot rely on a conditional write there."""
    client = RegistryClient(registry.host)
    _, digest = artifact(client, repo, repo)
    first = index_bytes(image_index([{"mediaType": mt.OCI_MANIFEST, "digest": digest, "size": 1}]))
    second = index_bytes(
        image_index([{"mediaType": mt.OCI_MANIFEST, "digest": digest, "size": 1}], {"a": "b"})
    )
    client.push_manifest(repo, "t", first, mt.OCI_INDEX)
    client.push_manifest(repo, "t", second, mt.OCI_INDEX, if_match="sha256:" + "0" * 64)
    assert client.manifest_digest(repo, "t") == sha256(second)
    client.push_manifest(repo, "t", first, mt.OCI_INDEX, if_none_match=True)
    assert client.manifest_digest(repo, "t") == sha256(first)


def test_tags(registry, repo):
    client = RegistryClient(registry.host)
    assert client.tags(repo) == []
    data, _ = artifact(client, repo, repo)
    for tag in ("b", "a", "c"):
        client.push_manifest(repo, tag, data, mt.OCI_MANIFEST)
    assert sorted(client.tags(repo)) == ["a", "b", "c"]


# -- authentication ----------------------------------------------------------------------------------
@pytest.fixture
def docker_config(tmp_path, monkeypatch) -> Path:
    config_dir = tmp_path / "docker-config"
    config_dir.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(config_dir))
    monkeypatch.delenv("NVKR_REGISTRY_USERNAME", raising=False)
    monkeypatch.delenv("NVKR_REGISTRY_PASSWORD", raising=False)
    return config_dir / "config.json"


def test_basic_auth_from_the_caller(auth_registry, docker_config, tmp_path, repo):
    client = RegistryClient(auth_registry.host, username=USER, password=PASSWORD)
    data = payload(100, repo)
    push(client, repo, blob_file(tmp_path, data))
    assert pull(client, repo, sha256(data)) == data


def test_basic_auth_from_the_environment(auth_registry, docker_config, monkeypatch, repo):
    monkeypatch.setenv("NVKR_REGISTRY_USERNAME", USER)
    monkeypatch.setenv("NVKR_REGISTRY_PASSWORD", PASSWORD)
    assert RegistryClient(auth_registry.host).manifest_digest(repo, "v1") is None
    # flags win over the environment
    with pytest.raises(RegistryError, match="refused access for user 'other'"):
        RegistryClient(auth_registry.host, username="other", password="x").tags(repo)


def test_basic_auth_from_docker_config(auth_registry, docker_config, repo):
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    docker_config.write_text(json.dumps({"auths": {auth_registry.host: {"auth": token}}}))
    assert RegistryClient(auth_registry.host).tags(repo) == []
    # refused credentials name the config file they came from ($DOCKER_CONFIG here)
    token = base64.b64encode(f"{USER}:wrong".encode()).decode()
    docker_config.write_text(json.dumps({"auths": {auth_registry.host: {"auth": token}}}))
    with pytest.raises(RegistryError, match="refused access") as e:
        RegistryClient(auth_registry.host).tags(repo)
    assert f"(from {docker_config}): HTTP 401" in e.value.message
    assert f"add the registry to {docker_config}" in (e.value.hint or "")


def test_no_credentials(auth_registry, docker_config, repo):
    with pytest.raises(RegistryError, match="asks for a user name and password") as e:
        RegistryClient(auth_registry.host).tags(repo)
    assert e.value.exit_code == 1 and "--password-stdin" in (e.value.hint or "")


def test_wrong_credentials(auth_registry, docker_config, repo):
    client = RegistryClient(auth_registry.host, username=USER, password="wrong")
    with pytest.raises(
        RegistryError, match=r"refused access for user 'nvkr' \(from the command line\): HTTP 401"
    ) as e:
        client.blob_exists(repo, sha256(b"x"))
    assert e.value.status == 401 and e.value.exit_code == 1
    assert "check the user name and password" in (e.value.hint or "")


def test_bearer_token_for_push(registry, tmp_path, docker_config, repo):
    with run_proxy(registry.host) as gate:
        gate.bearer = True
        client = RegistryClient(gate.host)
        data = payload(100 << 10, repo)
        push(client, repo, blob_file(tmp_path, data))
        assert pull(client, repo, sha256(data)) == data
        # one token for the pushes (anonymous: no credentials anywhere), scoped to the repository
        assert gate.token_requests[0] == {
            "service": ["nvkr-test"],
            "scope": [f"repository:{repo}:pull,push"],
        }
        scopes = {s for r in gate.token_requests for s in r["scope"]}
        assert scopes <= {f"repository:{repo}:pull,push", f"repository:{repo}:pull"}


def test_no_proxy_for_loopback_is_set():
    assert "127.0.0.1" in os.environ.get("NO_PROXY", "")


def _tls_server(tmp_path: Path, host: str) -> Any:
    """An HTTPS server on ``host`` (an address outside LOOPBACK, so the client uses TLS) whose
    self-signed certificate names another host: its verification fails."""
    import datetime
    import ssl
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "registry.example")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ThreadingHTTPServer((host, 0), BaseHTTPRequestHandler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_tls_failures_get_the_hint_that_fits(tmp_path):
    """A certificate that does not verify is not a plain-HTTP registry: no --insecure advice."""
    server = _tls_server(tmp_path, "127.0.0.2")
    try:
        client = RegistryClient(f"127.0.0.2:{server.server_address[1]}", retries=0)
        with pytest.raises(RegistryError, match="CERTIFICATE_VERIFY_FAILED") as e:
            client.manifest_digest("a", "latest")
        assert "certificate does not verify" in (e.value.hint or "")
        assert "--insecure" not in (e.value.hint or "")
    finally:
        server.shutdown()
    # a plain-HTTP server spoken to over TLS: that is what --insecure is for
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    http_server = ThreadingHTTPServer(("127.0.0.2", 0), BaseHTTPRequestHandler)
    threading.Thread(target=http_server.serve_forever, daemon=True).start()
    try:
        plain = RegistryClient(f"127.0.0.2:{http_server.server_address[1]}", retries=0)
        with pytest.raises(RegistryError) as e:
            plain.manifest_digest("a", "latest")
        assert "pass --insecure if it is plain HTTP" in (e.value.hint or "")
    finally:
        http_server.shutdown()
