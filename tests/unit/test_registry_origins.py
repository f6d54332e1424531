"""Registry credentials stay with the origin (scheme, host, port) they were issued for, and no
registry path is followed from https down to http.

Real registries hand blob bytes to a storage host (S3, GCS, a CDN): an upload's ``Location`` or
a blob read's 307 names another origin. The model here is CNCF distribution without auth behind
a gate (:class:`tests.helpers.registry.FaultProxy` in bearer or basic mode) that plays the registry, and a
second proxy in front of the same distribution that plays the storage host and logs the
``Authorization`` of every request it gets (a different port is a different origin).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvkr.errors import IntegrityError, RegistryError
from nvkr.oci.registry import RegistryClient
from tests.helpers.registry import FaultProxy, run_proxy
from tests.helpers.tls import self_signed

USER, PASSWORD = "alice", "pa55"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
NETRC_BASIC = "Basic " + base64.b64encode(b"netrc-user:netrc-secret").decode()


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def push(client: RegistryClient, repo: str, data: bytes, tmp_path: Path) -> None:
    path = tmp_path / f"blob-{sha256(data)[7:19]}"
    path.write_bytes(data)
    client.push_blob(repo, sha256(data), len(data), functools.partial(path.open, "rb"))


def pull(client: RegistryClient, repo: str, digest: str) -> bytes:
    out = io.BytesIO()
    client.get_blob(repo, digest, out)
    return out.getvalue()


@pytest.fixture
def storage(registry) -> Iterator[FaultProxy]:
    """The storage host: a plain proxy in front of the registry, logging what it receives."""
    with run_proxy(registry.host) as p:
        yield p


@pytest.fixture
def no_docker_config(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.delenv("NVKR_REGISTRY_USERNAME", raising=False)
    monkeypatch.delenv("NVKR_REGISTRY_PASSWORD", raising=False)


@pytest.fixture
def tls(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that requests trusts (REQUESTS_CA_BUNDLE)."""
    cert, key = self_signed(tmp_path / "tls")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
    return cert, key


def storage_auth(storage: FaultProxy) -> set[str | None]:
    assert storage.log, "the storage host got no request: the test does not test anything"
    return {e.authorization for e in storage.log}


@pytest.mark.parametrize("gate", ["bearer", "basic"])
@pytest.mark.parametrize("chunk_size", [1 << 20, 64 << 10], ids=["monolithic", "chunked"])
def test_upload_location_on_another_host_gets_no_credentials(
    registry, storage, tmp_path, no_docker_config, gate, chunk_size
):
    with run_proxy(registry.host) as front:
        front.bearer = gate == "bearer"
        front.basic = (USER, PASSWORD) if gate == "basic" else None
        front.storage = f"http://{storage.host}"
        client = RegistryClient(front.host, username=USER, password=PASSWORD, chunk_size=chunk_size)
        data = hashlib.sha256(f"{gate}{chunk_size}".encode()).digest() * 8192  # 256 KiB
        repo = f"origins/upload-{gate}"
        push(client, repo, data, tmp_path)
        assert [e.method for e in storage.log if e.method in ("PATCH", "PUT")], storage.log
        assert storage_auth(storage) == {None}
        # the registry itself got the credentials (or the token they bought) all along
        assert front.log and {e.authorization for e in front.log} == (
            {"Bearer t0ken"} if gate == "bearer" else {BASIC}
        )
        assert pull(client, repo, sha256(data)) == data


@pytest.mark.parametrize("gate", ["bearer", "basic"])
def test_blob_read_redirected_to_storage_gets_no_credentials(
    registry, storage, tmp_path, no_docker_config, gate
):
    data = b"redirected blob " * 4096
    repo = f"origins/read-{gate}"
    push(RegistryClient(registry.host), repo, data, tmp_path)
    with run_proxy(registry.host) as front:
        front.bearer = gate == "bearer"
        front.basic = (USER, PASSWORD) if gate == "basic" else None
        front.storage, front.redirect_blobs = f"http://{storage.host}", True
        client = RegistryClient(front.host, username=USER, password=PASSWORD)
        assert pull(client, repo, sha256(data)) == data
        assert client.blob_exists(repo, sha256(data))
        assert [e.action for e in front.requests("GET", "/blobs/")] == ["redirect"]
        assert storage_auth(storage) == {None}


def test_netrc_credentials_never_reach_a_registry_or_its_storage(
    registry, storage, tmp_path, no_docker_config, monkeypatch
):
    """Registry credentials come from the flags, the environment or the Docker config only: a
    ``default`` entry of ~/.netrc (which requests would apply to any host) goes nowhere."""
    netrc = tmp_path / "netrc"
    netrc.write_text("default login netrc-user password netrc-secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    data = b"netrc " * 1000
    repo = "origins/netrc"
    with run_proxy(registry.host) as front:
        front.bearer = True
        front.storage, front.redirect_blobs = f"http://{storage.host}", True
        client = RegistryClient(front.host, username=USER, password=PASSWORD)
        push(client, repo, data, tmp_path)
        assert pull(client, repo, sha256(data)) == data
        sent = {e.authorization for e in [*front.log, *storage.log]} | set(front.token_auth)
        assert NETRC_BASIC not in sent
        assert storage_auth(storage) == {None}
        assert front.token_auth == [BASIC] * len(front.token_auth)


def test_token_realm_on_another_host(registry, storage, tmp_path, no_docker_config):
    """The Docker token flow: the registry's challenge names a token service elsewhere; the
    user's credentials go there (Basic), the token it answers goes to the registry only."""
    data = b"realm " * 1000
    repo = "origins/realm"
    with run_proxy(registry.host) as tokens, run_proxy(registry.host) as front:
        tokens.bearer = True  # serves /token
        front.bearer, front.realm = True, f"http://{tokens.host}/token"
        front.storage, front.redirect_blobs = f"http://{storage.host}", True
        client = RegistryClient(front.host, username=USER, password=PASSWORD)
        push(client, repo, data, tmp_path)
        assert pull(client, repo, sha256(data)) == data
        assert tokens.token_auth and set(tokens.token_auth) == {BASIC}
        assert not tokens.log  # nothing but token requests went to the token service
        assert {e.authorization for e in front.log} == {"Bearer t0ken"}
        assert storage_auth(storage) == {None}


def test_a_challenge_from_the_storage_host_is_not_answered(registry, tmp_path, no_docker_config):
    data = b"challenged " * 1000
    repo = "origins/challenge"
    push(RegistryClient(registry.host), repo, data, tmp_path)
    with run_proxy(registry.host) as storage, run_proxy(registry.host) as front:
        storage.bearer = True  # asks for a token of its own, from its own /token
        front.basic = (USER, PASSWORD)
        front.storage, front.redirect_blobs = f"http://{storage.host}", True
        client = RegistryClient(front.host, username=USER, password=PASSWORD, retries=0)
        with pytest.raises(RegistryError, match=rf"HTTP 401 .* from http://{storage.host}/v2/"):
            pull(client, repo, sha256(data))
        assert storage.token_requests == []  # neither the credentials nor a token request


def test_https_registry_redirecting_a_blob_to_http_is_refused(
    registry, storage, tls, tmp_path, no_docker_config
):
    data = b"downgrade " * 1000
    repo = "origins/downgrade"
    push(RegistryClient(registry.host), repo, data, tmp_path)
    with run_proxy(registry.host, tls=tls) as front:
        front.storage, front.redirect_blobs = f"http://{storage.host}", True
        client = RegistryClient(front.host, base_url=f"https://{front.host}/")
        assert client.manifest_digest(repo, "latest") is None  # TLS to the front works
        first = f"https://{front.host}/v2/{repo}/blobs/{sha256(data)}"
        with pytest.raises(IntegrityError) as e:
            pull(client, repo, sha256(data))
        assert first in e.value.message
        assert f"http://{storage.host}/v2/{repo}/blobs/{sha256(data)}" in e.value.message
        assert e.value.exit_code == 3
        assert storage.log == []  # refused before anything went over plain HTTP


def test_https_registry_naming_an_http_token_service_is_refused(
    registry, tls, tmp_path, no_docker_config
):
    with run_proxy(registry.host) as tokens, run_proxy(registry.host, tls=tls) as front:
        tokens.bearer = True
        front.bearer, front.realm = True, f"http://{tokens.host}/token"
        client = RegistryClient(
            front.host, base_url=f"https://{front.host}/", username=USER, password=PASSWORD
        )
        with pytest.raises(IntegrityError) as e:
            client.blob_exists("origins/realm-downgrade", sha256(b"x"))
        assert f"http://{tokens.host}/token" in e.value.message
        assert f"https://{front.host}/" in e.value.message
        assert tokens.token_requests == []  # the password never went over plain HTTP
