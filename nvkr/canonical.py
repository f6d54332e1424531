"""Canonical JSON and digests: the byte forms that action keys, lockfiles and manifests hash.

Canonical JSON here means: UTF-8, keys sorted, no insignificant whitespace, no floats (a float
raises, since its text form is not stable across producers), ``ensure_ascii=False``. Digests are
written ``algo:hex`` (OCI image-spec "Digests"), e.g. ``sha256:9f86d0...``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any, BinaryIO

DIGEST_RE = re.compile(r"^(sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128})$")
_CHUNK = 1 << 20


def _reject_floats(value: Any, path: str = "$") -> None:
    if isinstance(value, float):
        raise TypeError(f"float at {path} has no canonical JSON form; use a string or integer")
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"non-string key {k!r} at {path}")
            _reject_floats(v, f"{path}.{k}")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _reject_floats(v, f"{path}[{i}]")


def canonical_json(value: Any) -> bytes:
    """Serialise ``value`` (dicts, lists, str, int, bool, None) to canonical JSON bytes.

    Raises:
        TypeError: on floats, non-string keys or other unsupported types.
    """
    _reject_floats(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def canonical_json_file(value: Any) -> bytes:
    """Canonical JSON for files kept in git: sorted keys, 2-space indent, trailing newline, no floats."""
    _reject_floats(value)
    text = json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False)
    return (text + "\n").encode()


def sha256_bytes(data: bytes) -> str:
    """``sha256:<hex>`` of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def digest_json(value: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``value``."""
    return sha256_bytes(canonical_json(value))


def hash_stream(
    stream: BinaryIO, algorithms: Iterable[str] = ("sha256",)
) -> tuple[dict[str, str], int]:
    """Read ``stream`` to the end; return ``({algo: "algo:hex"}, size in bytes)``."""
    hashers = {a: hashlib.new(a) for a in algorithms}
    size = 0
    while chunk := stream.read(_CHUNK):
        size += len(chunk)
        for h in hashers.values():
            h.update(chunk)
    return {a: f"{a}:{h.hexdigest()}" for a, h in hashers.items()}, size


def hex_of(digest: str) -> str:
    """The hex part of ``algo:hex``; raises ValueError when ``digest`` is malformed."""
    if not DIGEST_RE.match(digest):
        raise ValueError(
            f"malformed digest {digest!r}: expected sha256:<64 hex> or sha512:<128 hex>"
        )
    return digest.split(":", 1)[1]
