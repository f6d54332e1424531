"""Credentials never leave: the user info of a URL is stripped wherever nvkr writes or prints it.

A recipe may carry credentials in a URL's user info (``https://user:password@host/path``,
README "Sources"); they go to the origin that URL names (:mod:`nvkr.origin`) and nowhere else.
Every URL nvkr writes (lockfile entries, provenance, build records, SBOMs, ``plan --json``, the
mirror export's index, image annotations) or prints (error messages, the ``--json`` stream, log
lines) goes through :func:`redact_url` first, so none of them holds a password, and the action
keys, computed from those entries, do not change when a password does.

The rule: a password is always dropped; so is the whole user info of every URL but ``ssh://``
(``https://TOKEN@github.com/``, ``https://oauth2:TOKEN@gitlab.example/``: the user name is often
the secret), whose bare user name (``ssh://git@host/``) names an account, never a secret, and is
kept. A URL without user info is returned unchanged, so redaction moves no lockfile or action
key of a recipe without credentials.

Fetching still uses the recipe's own URL (credentials and all), never the lockfile's: each
fetcher's ``ensure`` compares the two with their user info stripped (:func:`redact_urls`).

This module imports nothing of nvkr: :mod:`nvkr.errors` applies :func:`redact_text` to every
message.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Final, TypeVar

T = TypeVar("T")

#: ``scheme://userinfo@``: the user info runs to the last ``@`` before the path, query or
#: fragment (as :func:`urllib.parse.urlsplit` reads it), so a stray ``@`` in a password goes too.
_USERINFO: Final = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*)://([^\s/?#]*)@")
#: Schemes whose bare user name is kept (it names an account; keys authenticate).
_KEEP_USER: Final = frozenset({"ssh", "git+ssh"})


def _strip(match: re.Match[str]) -> str:
    scheme, userinfo = match.group(1), match.group(2)
    user, sep, _password = userinfo.partition(":")
    if scheme.lower() in _KEEP_USER and user and not sep:
        return f"{scheme}://{user}@"
    return f"{scheme}://"


def redact_url(url: str) -> str:
    """``url`` without its user info (module docstring: ``ssh://`` keeps a bare user name);
    unchanged when it has none."""
    return redact_text(url)


def redact_text(text: str) -> str:
    """``text`` with the user info of every URL in it stripped (an error message, a log line,
    a tool's output naming the URL it was given)."""
    if "@" not in text:
        return text
    return _USERINFO.sub(_strip, text)


def redact_urls(value: T) -> T:
    """A copy of ``value`` (JSON-like: dicts, lists, strings) with every string redacted by
    :func:`redact_text`."""
    return _walk(value)  # type: ignore[no-any-return]


def _walk(value: Any) -> Any:
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: _walk(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v) for v in value]
    return value


class RedactingFormatter(logging.Formatter):
    """A log formatter stripping user info from every line (a ``--debug`` argv, a URL fetched)."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))
