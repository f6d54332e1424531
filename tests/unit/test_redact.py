"""nvkr.redact: which part of a URL's user info goes (issue 27)."""

from __future__ import annotations

import pytest

from nvkr.errors import FetchError
from nvkr.redact import redact_text, redact_url, redact_urls


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://dl.k8s.io/release/v1.36.3/bin", "https://dl.k8s.io/release/v1.36.3/bin"),
        ("https://u:pw@h.example/a?x=1@2", "https://h.example/a?x=1@2"),
        ("https://TOKEN@github.com/o/r.git", "https://github.com/o/r.git"),
        ("http://u:p@ss@127.0.0.1:8080/f", "http://127.0.0.1:8080/f"),
        ("ssh://git@github.com/o/r.git", "ssh://git@github.com/o/r.git"),
        ("ssh://git:pw@github.com/o/r.git", "ssh://github.com/o/r.git"),
        ("registry.example/repo@sha256:ab", "registry.example/repo@sha256:ab"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_text_structures_and_errors_lose_the_password() -> None:
    assert redact_text("cannot fetch 'https://a:b@h/x' (via http://c:d@i/)") == (
        "cannot fetch 'https://h/x' (via http://i/)"
    )
    assert redact_urls({"u": ["https://a:b@h/"], "n": 1}) == {"u": ["https://h/"], "n": 1}
    err = FetchError("from https://a:secret@h/x", hint="try https://a:secret@m/")
    assert "secret" not in err.render() and "secret" not in str(err)
