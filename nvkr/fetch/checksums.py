"""Checksum files: the ``checksumUrl`` of a url source, read once by ``nvkr lock``.

Upstreams publish digests in a handful of text formats; this module turns one of them into the
``(algorithm, hex)`` pin the lockfile records, so the download itself is verified exactly like a
source pinned in the recipe. Accepted (coreutils ``sha256sum`` / BSD ``sha256 -r`` and ``-t``
output, OpenSSL ``dgst`` output):

- a bare hash, alone in the file (or alone on its only line, or named ``-``: read from stdin);
- GNU lines ``HASH  NAME`` (text mode) and ``HASH *NAME`` (binary mode), ``\\``-escaped names;
- BSD tagged lines ``SHA256 (NAME) = HASH`` / ``SHA512 (NAME) = HASH`` and ``SHA2-256(NAME)= HASH``.

Hex may be upper case, lines may end in CRLF, blank lines, ``#`` comments and anything that is
not a checksum line (a PGP armour, a ``Hash:`` header) are skipped.
"""

from __future__ import annotations

import posixpath
import re
import string
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from nvkr.errors import FetchError

LENGTHS = {"sha256": 64, "sha512": 128}
_HEX = frozenset(string.hexdigits)
_BSD = re.compile(
    r"^(?P<tag>SHA-?2?-?(?:256|512))\s*\((?P<name>.*)\)\s*=\s*(?P<hash>[0-9A-Fa-f]+)$",
    re.IGNORECASE,
)
_GNU = re.compile(r"^(?P<hash>[^ \t]+)[ \t]*(?P<rest>.*)$")
_HINT = "pin sha256 or sha512 in the recipe, or set checksumAlgorithm / filename to match the file"


@dataclass(frozen=True)
class _Line:
    algorithm: str | None  # from a BSD tag; None for GNU and bare lines
    hex: str
    name: str | None


def algorithm_for(checksum_url: str, declared: str | None) -> str | None:
    """The algorithm of a checksum file: ``declared`` (the recipe's ``checksumAlgorithm``), else
    the URL's file name (``*.sha256``, ``*.sha512``, ``SHA256SUMS``, ``sha512sum.txt``), else
    None (then :func:`parse_checksum_file` goes by the hash length)."""
    if declared:
        return declared
    base = posixpath.basename(unquote(urlsplit(checksum_url).path)).lower()
    for algo in ("sha256", "sha512"):
        if base.endswith((f".{algo}", f".{algo}sum", f".{algo}sums")) or base.startswith(
            f"{algo}sum"
        ):
            return algo
    return None


def is_html(head: bytes) -> bool:
    """True when ``head`` (the first bytes of a body) starts like an HTML document."""
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    return start.startswith((b"<!doctype html", b"<html"))


def _parse_line(line: str) -> _Line | None:
    m = _BSD.match(line)
    if m:
        algo = "sha512" if m["tag"].endswith("512") else "sha256"
        return _Line(algo, m["hash"].lower(), m["name"])
    escaped = line.startswith("\\")
    if escaped:
        line = line[1:]
    m = _GNU.match(line)
    if m is None or not _HEX.issuperset(m["hash"]):
        return None
    rest = m["rest"]
    if rest.startswith("*"):
        rest = rest[1:]
    if escaped:
        # coreutils escapes names holding a newline or a backslash and marks the line with "\"
        rest = rest.replace("\\n", "\n").replace("\\\\", "\\")
    name = rest if rest and rest != "-" else None
    return _Line(None, m["hash"].lower(), name)


def _names_match(listed: str, filename: str) -> bool:
    return listed == filename or posixpath.basename(listed.replace("\\", "/")) == filename


def parse_checksum_file(
    text: str, filename: str, algorithm: str | None, *, url: str | None = None
) -> tuple[str, str]:
    """The digest a checksum file gives for ``filename``.

    Args:
        text: the checksum file's content (any line endings).
        filename: the downloaded file's name; a line matches when its name, or the name's last
            path segment, equals it.
        algorithm: ``"sha256"``, ``"sha512"`` or None to infer it from the hash length
            (64 hex digits: sha256, 128: sha512); see :func:`algorithm_for`.
        url: the checksum file's URL, for error messages.
    Returns:
        ``(algorithm, lower-case hex)``, e.g. ``("sha256", "9f86d0...")``.
    Raises:
        FetchError: the file is empty or an HTML page; no line names ``filename`` (and it is not
            a single unnamed hash); matching lines disagree; the hash has the wrong length for
            the algorithm.
    """
    where = f"checksum file {url}" if url else "checksum file"
    text = text.lstrip("\ufeff")
    if not text.strip():
        raise FetchError(f"{where} is empty (expected a hash for {filename!r})", hint=_HINT)
    if is_html(text[:512].encode("utf-8", "replace")):
        raise FetchError(
            f"{where}: got an HTML page instead of a checksum file (expected a hash for {filename!r})",
            hint="the URL probably points at a web page or an error page; check checksumUrl",
        )
    lines: list[_Line] = []
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        parsed = _parse_line(stripped)
        if parsed is not None:
            lines.append(parsed)
    matches = [ln for ln in lines if ln.name is not None and _names_match(ln.name, filename)]
    if not matches and len(lines) == 1 and lines[0].name is None:
        matches = lines
    if algorithm:
        matches = [ln for ln in matches if ln.algorithm in (None, algorithm)]
    if not matches:
        listed = sorted({ln.name for ln in lines if ln.name is not None})
        found = (
            f" (it lists {', '.join(repr(n) for n in listed[:5])}{', ...' if len(listed) > 5 else ''})"
            if listed
            else ""
        )
        want = f"a {algorithm} hash" if algorithm else "a hash"
        raise FetchError(f"{where} has no line with {want} for {filename!r}{found}", hint=_HINT)
    hexes = sorted({ln.hex for ln in matches})
    if len(hexes) > 1:
        raise FetchError(
            f"{where} lists {len(hexes)} different hashes for {filename!r}: {', '.join(hexes)}",
            hint=_HINT,
        )
    hexdigest = hexes[0]
    algo = algorithm or matches[0].algorithm
    if algo is None:
        algo = next((a for a, n in LENGTHS.items() if n == len(hexdigest)), None)
        if algo is None:
            raise FetchError(
                f"{where}: the hash for {filename!r} has {len(hexdigest)} hex digits; "
                "expected 64 (sha256) or 128 (sha512)",
                hint=_HINT,
            )
    if len(hexdigest) != LENGTHS[algo]:
        raise FetchError(
            f"{where}: the hash for {filename!r} has {len(hexdigest)} hex digits; "
            f"expected {LENGTHS[algo]} for {algo}",
            hint=_HINT,
        )
    return algo, hexdigest
