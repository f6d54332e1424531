"""Registry answers a retry cannot fix, rate limits and oversized answers, against a loopback
stand-in (:mod:`tests.helpers.standin`): what is retried, how long nvkr waits in total, and
that a manifest, index, tag list, token or error body of a gigabyte is never read whole.

No test sleeps: the session's waits are recorded instead (the requests and the waits asked for
are asserted, never how long anything took)."""

from __future__ import annotations

import hashlib
import time
import types
from collections.abc import Iterator

import pytest

from nvkr.errors import IntegrityError, RegistryError
from nvkr.oci import mediatypes as mt
from nvkr.oci import session as session_mod
from nvkr.oci.registry import RegistryClient
from tests.helpers.standin import Answer, error, standin

MiB = 1 << 20
GiB = 1 << 30
MANIFEST = b'{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}'
DIGEST = "sha256:" + hashlib.sha256(MANIFEST).hexdigest()


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The seconds the registry session asked to sleep, in order (nothing sleeps)."""
    asked: list[float] = []
    fake = types.SimpleNamespace(sleep=asked.append, time=time.time, monotonic=time.monotonic)
    monkeypatch.setattr(session_mod, "time", fake)
    yield asked


def limit_of(name: str, default: float) -> float:
    return float(getattr(session_mod, name, default))


# -- answers a retry cannot fix ------------------------------------------------------------------
def test_manifest_invalid_is_not_retried(waits):
    bad = error(400, "MANIFEST_INVALID", "manifest invalid", "missing layers")
    with standin([("PUT", "/manifests/", bad)]) as reg:
        client = RegistryClient(reg.host)
        with pytest.raises(RegistryError) as e:
            client.push_manifest("a/b", "v1", MANIFEST, mt.OCI_MANIFEST)
    assert reg.count("PUT") == 1
    assert waits == []
    assert e.value.status == 400
    assert "MANIFEST_INVALID: manifest invalid (missing layers)" in e.value.message
    assert f"http://{reg.host}/v2/a/b/manifests/v1" in e.value.message


@pytest.fixture
def race_waits(waits: list[float], monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """:func:`waits`, with a backoff of 1 s (the suite's is 0: nothing waits), so the jittered
    waits can be told apart."""
    monkeypatch.setattr(session_mod, "BACKOFF", 1.0)
    return waits


def _race_waits_are_jittered(waits: list[float]) -> None:
    """The waits between sends after DIGEST_INVALID: the backoff of each race times a factor in
    [0.5, 1.5), so two writers in lockstep send again at different moments."""
    assert len(waits) == session_mod.DIGEST_RACE_SENDS - 1, waits
    for k, w in enumerate(waits):
        assert 0.5 * 2**k <= w < 1.5 * 2**k, waits


def test_a_manifest_that_raced_twice_is_stored_by_the_third_send(race_waits):
    """The failing input (a CI run): two publishers of the same set, in lockstep, each answered
    DIGEST_INVALID twice in a row by distribution 2.8 for the same manifest; the bytes are ours
    and hash to their digest, so the third send stores it."""
    bad = error(400, "DIGEST_INVALID", "provided digest did not match uploaded content")
    bad.times = 2
    stored = Answer(201, headers={"Docker-Content-Digest": DIGEST})
    with standin([("PUT", "/manifests/", bad), ("PUT", "/manifests/", stored)]) as reg:
        client = RegistryClient(reg.host)
        assert client.push_manifest("a/b", DIGEST, MANIFEST, mt.OCI_MANIFEST) == DIGEST
    assert reg.count("PUT") == 3
    _race_waits_are_jittered(race_waits)


def test_digest_invalid_on_a_manifest_is_sent_a_bounded_number_of_times(race_waits):
    """A registry that answers DIGEST_INVALID to every send of the bytes means it:
    DIGEST_RACE_SENDS sends, then the registry's error."""
    bad = error(400, "DIGEST_INVALID", "provided digest did not match uploaded content")
    with standin([("PUT", "/manifests/", bad)]) as reg:
        client = RegistryClient(reg.host)
        with pytest.raises(RegistryError, match=r"HTTP 400.*DIGEST_INVALID") as e:
            client.push_manifest("a/b", "v1", MANIFEST, mt.OCI_MANIFEST)
    assert reg.count("PUT") == session_mod.DIGEST_RACE_SENDS
    _race_waits_are_jittered(race_waits)
    assert e.value.exit_code == 1


def _blob_rules(races: int | None) -> tuple[bytes, str, list[tuple[str, str, Answer]]]:
    data = b"good bytes"
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    location = {"Location": "/v2/a/b/blobs/uploads/u1"}
    bad = error(400, "DIGEST_INVALID", "digest mismatch")
    bad.times = races
    rules = [
        ("POST", "/blobs/uploads/$", Answer(202, headers=location)),
        ("PUT", "/blobs/uploads/u1", bad),
        ("PUT", "/blobs/uploads/u1", Answer(201, headers={"Docker-Content-Digest": digest})),
    ]
    return data, digest, rules


def test_a_blob_that_raced_twice_is_stored_by_the_third_upload(race_waits, tmp_path):
    """The same race on a blob: two DIGEST_INVALID answers for bytes that hash to their digest,
    then the third upload is stored."""
    data, digest, rules = _blob_rules(2)
    path = tmp_path / "blob"
    path.write_bytes(data)
    with standin(rules) as reg:
        client = RegistryClient(reg.host)
        assert client.push_blob("a/b", digest, len(data), lambda: path.open("rb")) >= len(data)
    assert reg.count("PUT") == 3
    _race_waits_are_jittered(race_waits)


def test_digest_invalid_on_a_blob_is_sent_a_bounded_number_of_times(race_waits, tmp_path):
    """Bytes that hash to their digest, and a registry that keeps saying they do not:
    DIGEST_RACE_SENDS uploads (the distribution 2.8 race), then an integrity failure (a proxy
    altering uploads)."""
    data, digest, rules = _blob_rules(None)
    path = tmp_path / "blob"
    path.write_bytes(data)
    with standin(rules) as reg:
        client = RegistryClient(reg.host)
        with pytest.raises(IntegrityError, match="the registry computed another digest"):
            client.push_blob("a/b", digest, len(data), lambda: path.open("rb"))
    assert reg.count("PUT") == session_mod.DIGEST_RACE_SENDS
    _race_waits_are_jittered(race_waits)


def test_403_is_not_retried_and_says_so(waits):
    denied = error(403, "DENIED", "requested access to the resource is denied")
    with standin([("GET", "/manifests/", denied)]) as reg:
        client = RegistryClient(reg.host, credentials_from_env=False)
        with pytest.raises(RegistryError) as e:
            client.get_manifest("a/b", "v1")
    assert reg.count("GET") == 1
    assert waits == []
    assert e.value.status == 403
    assert "DENIED: requested access to the resource is denied" in e.value.message
    assert e.value.hint and "docker login" in e.value.hint


def test_401_to_the_credentials_is_not_retried(waits):
    challenge = Answer(
        401,
        b'{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}',
        {"WWW-Authenticate": 'Basic realm="r"'},
    )
    with standin([("GET", "/manifests/", challenge)]) as reg:
        client = RegistryClient(reg.host, username="u", password="wrong")
        with pytest.raises(RegistryError, match="refused access for user 'u'") as e:
            client.get_manifest("a/b", "v1")
    assert reg.count("GET") == 2  # anonymous, then once with the credentials
    assert waits == []
    assert e.value.status == 401


# -- rate limits -----------------------------------------------------------------------------
def too_many(after: str) -> Answer:
    answer = error(429, "TOOMANYREQUESTS", "You have reached your pull rate limit")
    answer.headers["Retry-After"] = after
    return answer


def test_429_waits_a_bounded_total_and_says_rate_limit(waits):
    with standin([("GET", "/manifests/", too_many("3600"))]) as reg:
        client = RegistryClient(reg.host)
        with pytest.raises(RegistryError) as e:
            client.get_manifest("a/b", "v1")
    cap = limit_of("MAX_RETRY_AFTER", 30)
    assert waits and all(0 < w <= cap for w in waits)
    assert sum(waits) <= limit_of("RATE_LIMIT_WAIT", 60)
    assert reg.count("GET") == len(waits) + 1
    assert e.value.status == 429
    assert "rate limit" in e.value.message
    assert "TOOMANYREQUESTS: You have reached your pull rate limit" in e.value.message
    assert e.value.hint and "log in" in e.value.hint and "mirror" in e.value.hint


def test_429_budget_is_shared_by_the_session(waits):
    with standin([("GET", "/manifests/", too_many("3600"))]) as reg:
        client = RegistryClient(reg.host)
        for _ in range(3):
            with pytest.raises(RegistryError, match="rate limit"):
                client.get_manifest("a/b", "v1")
    assert sum(waits) <= limit_of("RATE_LIMIT_WAIT", 60)


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        ("2", [2.0]),
        ("Fri, 31 Dec 2099 23:59:59 GMT", [30.0]),
        ("Wed, 21 Oct 2015 07:28:00 GMT", [0.0]),
    ],
)
def test_retry_after_seconds_and_http_date_then_ok(waits, after, expected):
    limited = too_many(after)
    limited.times = 1
    ok = Answer(200, MANIFEST, {"Content-Type": mt.OCI_MANIFEST})
    with standin([("GET", "/manifests/", limited), ("GET", "/manifests/", ok)]) as reg:
        client = RegistryClient(reg.host)
        assert client.get_manifest("a/b", DIGEST)[2] == DIGEST
    assert reg.count("GET") == 2
    assert [w for w in waits if w] == [w for w in expected if w]


# -- oversized answers -------------------------------------------------------------------------
def huge(content_type: str) -> Answer:
    return Answer(200, b'{"tags":["a",', {"Content-Type": content_type}, size=GiB)


def assert_limit(e: pytest.ExceptionInfo[RegistryError], url: str, sent: int) -> None:
    assert e.value.exit_code == 2
    assert url in e.value.message
    assert "4 MiB" in e.value.message
    assert sent < 32 * MiB, "the body was read far beyond the limit"


def test_huge_manifest(waits):
    with standin([("GET", "/manifests/", huge(mt.OCI_MANIFEST))]) as reg:
        client = RegistryClient(reg.host)
        with pytest.raises(RegistryError) as e:
            client.get_manifest("a/b", "v1")
    assert_limit(e, f"http://{reg.host}/v2/a/b/manifests/v1", reg.sent)
    assert reg.count("GET") == 1


def test_huge_referrers_index(waits):
    with standin([("GET", "/referrers/", huge(mt.OCI_INDEX))]) as reg:
        client = RegistryClient(reg.host)
        with pytest.raises(RegistryError) as e:
            client.referrers("a/b", DIGEST)
    assert_limit(e, f"http://{reg.host}/v2/a/b/referrers/{DIGEST}", reg.sent)


def test_huge_tag_list(waits):
    with standin([("GET", "/tags/list", huge("application/json"))]) as reg:
        client = RegistryClient(reg.host)
        with pytest.raises(RegistryError) as e:
            client.tags("a/b")
    assert_limit(e, f"http://{reg.host}/v2/a/b/tags/list", reg.sent)


def test_huge_token(waits):
    with standin([]) as reg:
        realm = f"http://{reg.host}/token"
        challenge = Answer(401, b"", {"WWW-Authenticate": f'Bearer realm="{realm}",service="s"'})
        reg.rules += [
            ("GET", "/token", huge("application/json")),
            ("GET", "/manifests/", challenge),
        ]
        client = RegistryClient(reg.host)
        with pytest.raises(RegistryError) as e:
            client.get_manifest("a/b", "v1")
    assert_limit(e, realm, reg.sent)


def test_huge_error_body_is_not_read_whole(waits):
    with standin([("GET", "/manifests/", Answer(404, b"x", size=GiB))]) as reg:
        client = RegistryClient(reg.host)
        with pytest.raises(RegistryError) as e:
            client.get_manifest("a/b", "v1")
    assert e.value.status == 404
    assert reg.sent < 32 * MiB
