"""Reading a JSON document that must be an object: the one loader of manifests, configs,
metadata and payloads that nvkr reads as bytes or text and then looks into by key.

It raises the error class its caller names (an :class:`~nvkr.errors.IntegrityError` for a blob
that fails its contract, a :class:`~nvkr.errors.FetchError` for what a registry served, a
:class:`~nvkr.errors.BuildError` for a builder's input...), so each caller keeps its exit code,
with one wording: ``WHAT is not JSON: REASON`` or ``WHAT is not a JSON object (it is a list)``.
It reads what it is given: a size limit on untrusted input stays with the reader that got the
bytes (:mod:`nvkr.bounds`, a registry answer's cap).

It also names what a parsed JSON value is, for the documents whose shape is a producer's own
(the metadata a builder writes into its action result): :data:`JsonValue` and
:data:`JsonObject`, read-only (``Sequence``, ``Mapping``), so a builder's ``list[dict[str,
str]]`` is one as it is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

#: A JSON value as :func:`json.loads` makes it (or as a producer hands it to
#: :func:`nvkr.canonical.canonical_json`): read-only, since a reader only looks into it.
JsonValue: TypeAlias = (
    "str | int | float | bool | Sequence[JsonValue] | Mapping[str, JsonValue] | None"
)
#: A JSON object whose keys and values are the producer's to choose.
JsonObject: TypeAlias = Mapping[str, JsonValue]

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


def json_object(value: object) -> JsonObject:
    """``value`` when it is a JSON object, else an empty one: what a reader of a producer's
    document (a builder's metadata) takes for a field that is absent (or not an object)."""
    return value if isinstance(value, Mapping) else {}


def json_list(value: object) -> Sequence[JsonValue]:
    """``value`` when it is a JSON list, else an empty one (as :func:`json_object`)."""
    return value if isinstance(value, Sequence) and not isinstance(value, str | bytes) else ()


def json_objects(value: object) -> list[JsonObject]:
    """The objects of ``value`` when it is a JSON list (as :func:`json_list`), in order."""
    return [v for v in json_list(value) if isinstance(v, Mapping)]
