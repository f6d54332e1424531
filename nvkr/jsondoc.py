"""Reading a JSON document that must be an object: the one loader of manifests, configs,
metadata and payloads that nvkr reads as bytes or text and then looks into by key.

It raises the error class its caller names (an :class:`~nvkr.errors.IntegrityError` for a blob
that fails its contract, a :class:`~nvkr.errors.FetchError` for what a registry served, a
:class:`~nvkr.errors.BuildError` for a builder's input...), so each caller keeps its exit code,
with one wording: ``WHAT is not JSON: REASON`` or ``WHAT is not a JSON object (it is a list)``.
It reads what it is given: a size limit on untrusted input stays with the reader that got the
bytes (:mod:`nvkr.bounds`, a registry answer's cap).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeAlias

#: A parsed JSON value (what :func:`json.loads` returns), for documents nvkr passes on verbatim.
JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
#: A parsed JSON object.
JsonObject: TypeAlias = "dict[str, JsonValue]"

#: What a parsed JSON value is, as a message says it.
_KINDS: dict[type, str] = {
    dict: "an object",
    list: "a list",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def json_kind(value: Any) -> str:
    """What ``value`` (a parsed JSON value) is, for a message: ``"a list"``, ``"a string"``,
    ``"a number"``, ``"a boolean"``, ``"null"``, ``"an object"``; another Python type by name
    (``"a tuple value"``)."""
    return _KINDS.get(type(value), f"a {type(value).__name__} value")


def load_json_object(
    data: bytes | str, what: str, *, error: Callable[[str], Exception]
) -> dict[str, Any]:
    """``data`` parsed as JSON, which must be an object.

    Args:
        data: the document (bytes are read as UTF-8, as :func:`json.loads` does).
        what: what the document is, as the message names it: the file, the blob and who
            references it (``"blob sha256:... (referenced by index.json)"``).
        error: the exception class (or a function making one from the message) to raise.
    Raises:
        error: ``"{what} is not JSON: {reason}"`` (the parser's reason, with line and column),
            or ``"{what} is not a JSON object (it is a list)"``; chained to the parser's error.
    """
    try:
        doc = json.loads(data)
    except ValueError as e:  # json.JSONDecodeError, and UnicodeDecodeError for bytes
        raise error(f"{what} is not JSON: {e}") from e
    if not isinstance(doc, dict):
        raise error(f"{what} is not a JSON object (it is {json_kind(doc)})")
    return doc
