"""Schema validation with messages a recipe author can act on.

Between merging (:mod:`nvkr.recipe.merge`) and the rest of the data flow, a merged document is
validated against the strict pydantic models. Pydantic's errors name model internals (union tags
such as ``url`` or ``go-binary`` inside the path, "Input should be a valid string"); this module
maps each one back to the document path and its :class:`~nvkr.recipe.yamlsource.Location` and
writes one line per error::

    gpu-node.yaml:7: matrix.kubernetes[0]: expected a string; YAML read 1.30 as a float: quote it: "1.30"

The walk from a pydantic ``loc`` to a document path follows the models' type annotations, so new
models (another builder in the artifact union) need no change here.
"""

from __future__ import annotations

import re
import types
from collections.abc import Sequence
from types import UnionType
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, Discriminator, Tag, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from nvkr.errors import RecipeError, UnknownBuilderError
from nvkr.recipe import models, sources
from nvkr.recipe.base import NAME_PATTERN
from nvkr.recipe.fieldchecks import semver_suggestion
from nvkr.recipe.yamlsource import DocPath, Location, LocationMap, where

M = TypeVar("M", bound=BaseModel)

SCHEMA_HINT = "the recipe format is described in schema/recipe.schema.json (`nvkr schema`)"

_PATTERNS = {
    NAME_PATTERN: "a lower-case name: a-z, 0-9, '.', '_', '-', starting and ending with a letter or digit, at most 63 characters",
    sources.SHA256_PATTERN: "a sha256 digest: 64 hex digits",
    sources.SHA512_PATTERN: "a sha512 digest: 128 hex digits",
    sources.COMMIT_PATTERN: "a full commit id: 40 (or 64) lower-case hex digits",
    r"^[0-9]+$": "decimal digits (seconds since 1970-01-01 UTC)",
}
_YAML_KINDS = {bool: "a boolean", int: "an integer", float: "a float"}


def validate(model: type[M], data: Any, locations: LocationMap) -> M:
    """``model.model_validate(data)`` (strict), with errors mapped to file lines.

    Args:
        model: the pydantic model (normally :class:`~nvkr.recipe.models.Recipe`).
        data: the merged raw document.
        locations: where each value of ``data`` was written.
    Returns:
        The validated, frozen model.
    Raises:
        UnknownBuilderError: an artifact names a builder nvkr does not have (every other error
            of the same document is listed too).
        RecipeError: anything else invalid; one ``FILE:LINE: field.path: ...`` line per error.
    """
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(model, exc, locations) from None


def validation_error(
    model: type[BaseModel], exc: ValidationError, locations: LocationMap
) -> RecipeError:
    """One :class:`RecipeError` (or :class:`UnknownBuilderError`) listing every error of ``exc``."""
    lines: list[str] = []
    unknown_builder = False
    errors = exc.errors(include_url=False)
    for error in errors:
        if _scalar_member_of_mapping(error, errors):
            continue
        line, is_builder = _line(model, error, locations)
        unknown_builder = unknown_builder or is_builder
        if line not in lines:
            lines.append(line)
    message = "\n".join(lines)
    if unknown_builder:
        return UnknownBuilderError(message, hint=f"known builders: {', '.join(models.BUILDERS)}")
    return RecipeError(message, hint=SCHEMA_HINT)


#: pydantic error types that say a value is not of a union member's type at all.
_TYPE_ERRORS = frozenset(
    {"string_type", "int_type", "bool_type", "list_type", "dict_type", "model_type",
     "model_attributes_type"}
)  # fmt: skip


def _member_segment(segment: str | int) -> bool:
    """Whether a ``loc`` segment names a member of a plain union (``str``, ``list[...]``,
    ``function-after[_check(), ImageFile]``, a model's class name)."""
    if not isinstance(segment, str):
        return False
    return (
        segment in ("str", "int", "bool")
        or segment.startswith(("list[", "dict[", "function-after[", "function-before["))
        or segment[:1].isupper()
    )


def _scalar_member_of_mapping(error: ErrorDetails, errors: list[ErrorDetails]) -> bool:
    """True for a union member whose type the value does not have at all (``str`` of ``str |
    ImageFile | list[...]`` given a mapping or a list) when another member of the same union
    took the value further: that member's error says what is wrong with it."""
    loc = error["loc"]
    if not loc or error["type"] not in _TYPE_ERRORS or not _member_segment(loc[-1]):
        return False
    parent = tuple(loc[:-1])
    return any(
        e is not error
        and tuple(e["loc"][: len(parent)]) == parent
        and len(e["loc"]) > len(parent)
        and not (e["type"] in _TYPE_ERRORS and len(e["loc"]) == len(loc))
        for e in errors
    )


def reject_floats(value: Any, path: DocPath, locations: LocationMap) -> None:
    """Fail on any float under ``value`` (at ``path``), e.g. in a criteria overlay's vars.

    No recipe field is a float and floats have no canonical JSON form (so no digest); a float is
    always a YAML reading of something meant as a string.

    Raises:
        RecipeError: ``FILE:LINE: path: expected a string; YAML read 1.30 as a float: quote it``.
    """
    if isinstance(value, float):
        raise RecipeError(
            f"{where(locations, path)}: {_quote_hint(value, locations.get(path))}", hint=SCHEMA_HINT
        )
    if isinstance(value, dict):
        for key, item in value.items():
            reject_floats(item, (*path, key), locations)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            reject_floats(item, (*path, index), locations)


def describe_value(value: Any, location: Location | None = None) -> str:
    """A short rendering of ``value`` for ``(got ...)``: the YAML text as written when known."""
    if isinstance(value, dict):
        return "a mapping" if value else "an empty mapping"
    if isinstance(value, list):
        return "a list" if value else "an empty list"
    text = location.text if location is not None and location.text else None
    if isinstance(value, str):
        shown = f"'{_clip(value)}'"
        if text is not None and text != value:
            shown += f" (rendered from '{_clip(text)}')"
        return shown
    if text is not None:
        return _clip(text)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return _clip(str(value))


def _clip(text: str, limit: int = 80) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _quote_hint(value: Any, location: Location | None, field: FieldInfo | None = None) -> str:
    """``expected a string; YAML read 1.30 as a float: quote it: "1.30"``, suggesting only a
    string the field's own checks accept (``version: 0.20`` is quoted as ``"0.20.0"``, since a
    chart version is SemVer); when none does, what the field expects."""
    text = location.text if location is not None and location.text else describe_value(value)
    kind = _YAML_KINDS.get(type(value), "a non-string")
    read = f"expected a string; YAML read {text} as {kind}"
    problem = _field_problem(field, text)
    if problem is None:
        return f'{read}: quote it: "{text}"'
    suggestion = semver_suggestion(text)
    if suggestion is not None and _field_problem(field, suggestion) is None:
        return f'{read}: quote it as a SemVer version: "{suggestion}"'
    return f'{read}, and "{text}" would not do either: {problem}'


def _field_problem(field: FieldInfo | None, text: str) -> str | None:
    """What ``field``'s checks say about the string ``text``, or None when they accept it."""
    if field is None:
        return None
    try:
        annotated: Any = Annotated[field.annotation, *field.metadata]
        TypeAdapter(annotated).validate_python(text)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        return _lower_first(first["msg"].removeprefix("Value error, "))
    return None


def _field_of(owner: type[BaseModel] | None, path: DocPath) -> FieldInfo | None:
    """The field of ``owner`` the last segment of ``path`` names (None for a list item or a
    mapping value, whose checks are their container's)."""
    if owner is None or not path or not isinstance(path[-1], str):
        return None
    return owner.model_fields.get(path[-1])


def _line(model: type[BaseModel], error: ErrorDetails, locations: LocationMap) -> tuple[str, bool]:
    """``(message line, is an unknown builder)`` for one pydantic error."""
    path, owner, key_error = resolve_loc(model, error["loc"])
    kind = error["type"]
    value = error.get("input")
    ctx = error.get("ctx") or {}
    location = locations.get(path)
    got = f" (got {describe_value(value, location)})"

    if key_error:
        return f"{where(locations, path)}: invalid key '{path[-1]}': {_expected(error)}", False
    if kind == "missing":
        return f"{where(locations, path[:-1])}: missing required key '{path[-1]}'", False
    if kind == "extra_forbidden":
        allowed = ", ".join(owner.model_fields) if owner is not None else "see the schema"
        return f"{where(locations, path)}: unknown key '{path[-1]}' (allowed: {allowed})", False
    if kind == "string_type" and isinstance(value, bool | int | float):
        hint = _quote_hint(value, location, _field_of(owner, path))
        return f"{where(locations, path)}: {hint}", False
    if kind == "union_tag_invalid" and ctx.get("discriminator") == "'builder'":
        builder_path = (*path, "builder")
        known = ", ".join(models.BUILDERS)
        tag = ctx.get("tag")
        return (
            f"{where(locations, builder_path)}: unknown builder '{tag}' (known builders: {known})",
            True,
        )
    if kind == "union_tag_not_found" and ctx.get("discriminator") == "'builder'":
        known = ", ".join(models.BUILDERS)
        return (
            f"{where(locations, path)}: missing required key 'builder' (known builders: {known})",
            False,
        )
    if kind == "source_kind":
        keys = (
            f"got keys: {', '.join(value)}"
            if isinstance(value, dict) and value
            else f"got {describe_value(value, location)}"
        )
        return (
            f"{where(locations, path)}: a source needs one of the keys {models.one_of_keys()} "
            f"({keys})",
            False,
        )
    if kind == "value_error":
        message = _lower_first(error["msg"].removeprefix("Value error, "))
        if isinstance(value, str) and location is not None and location.text not in ("", value):
            message += f" (rendered from '{_clip(location.text)}')"
        return f"{where(locations, path)}: {message}", False
    return f"{where(locations, path)}: {_expected(error)}{got}", False


def _expected(error: ErrorDetails) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern", ""))
        return "expected " + _PATTERNS.get(pattern, f"a string matching {pattern}")
    if kind == "too_short":
        count = ctx.get("min_length", 1)
        return f"expected at least {count} item{'s' if count != 1 else ''}"
    if kind == "literal_error":
        return f"expected {ctx.get('expected')}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "expected a mapping"
    if kind == "list_type":
        return "expected a list"
    if kind == "string_type":
        return "expected a string"
    if kind == "bool_type":
        return "expected true or false"
    if kind == "int_type":
        return "expected an integer"
    message = error["msg"].removeprefix("Value error, ")
    message = re.sub(r"^Input should be ", "expected ", message)
    return _lower_first(message)


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


# -- pydantic loc -> document path -------------------------------------------------------------
def resolve_loc(
    model: type[BaseModel], loc: Sequence[str | int]
) -> tuple[DocPath, type[BaseModel] | None, bool]:
    """Map a pydantic error ``loc`` to ``(document path, owning model, is a key error)``.

    Pydantic puts union tags into ``loc`` (``sources.kubelet.url.sha256`` for the url member of
    the source union); the document has no such level. The walk follows the models' annotations
    and drops each tag segment. The owning model is the model whose field (or unknown key) the last
    path segment names; ``[key]`` segments (an invalid mapping key) end the walk.
    """
    path: list[str | int] = []
    annotation: Any = model
    owner: type[BaseModel] | None = None
    discriminator: Any = None
    for segment in loc:
        if segment == "[key]":
            return tuple(path), owner, True
        annotation, discriminator = _strip(annotation, discriminator)
        if discriminator is not None:
            member = _member_for_tag(annotation, discriminator, segment)
            discriminator = None
            if member is not None:
                annotation = member
                continue
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            owner = annotation
            field = annotation.model_fields.get(str(segment))
            path.append(segment)
            annotation = field.annotation if field is not None else Any
            if field is not None and field.discriminator is not None:
                discriminator = field.discriminator
            continue
        origin = get_origin(annotation)
        if origin in (Union, UnionType) and isinstance(segment, str):
            # A plain (undiscriminated) union: pydantic names the member it tried, as ``str`` or
            # ``function-after[_check(), ImageFile]``; the document has no such level.
            member = next(
                (
                    m
                    for m in get_args(annotation)
                    if segment == getattr(m, "__name__", None)
                    or segment.endswith(f", {getattr(m, '__name__', '?')}]")
                    or (segment.startswith("list[") and get_origin(m) is list)
                    or (segment.startswith("dict[") and get_origin(m) is dict)
                ),
                None,
            )
            if member is not None:
                annotation = member
                continue
        path.append(segment)
        if origin is dict:
            annotation = get_args(annotation)[1]
        elif origin is list:
            annotation = get_args(annotation)[0]
        else:
            annotation = Any
    return tuple(path), owner, False


def _strip(annotation: Any, discriminator: Any) -> tuple[Any, Any]:
    """Remove ``Annotated`` wrappers and ``X | None``; note a union discriminator on the way."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            base, *metadata = get_args(annotation)
            for item in metadata:
                if isinstance(item, Discriminator):
                    discriminator = item
                elif isinstance(item, FieldInfo) and item.discriminator is not None:
                    discriminator = item.discriminator
            annotation = base
            continue
        if origin in (Union, types.UnionType):
            members = [a for a in get_args(annotation) if a is not type(None)]
            if len(members) == 1:
                annotation = members[0]
                continue
        return annotation, discriminator


def _member_for_tag(annotation: Any, discriminator: Any, tag: str | int) -> Any:
    """The union member (or the single model) that pydantic's ``tag`` segment names, else None."""
    origin = get_origin(annotation)
    members = get_args(annotation) if origin in (Union, types.UnionType) else (annotation,)
    for member in members:
        if get_origin(member) is Annotated:
            for item in get_args(member)[1:]:
                if isinstance(item, Tag) and item.tag == tag:
                    return member
        if isinstance(discriminator, str):
            inner, _ = _strip(member, None)
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                field = inner.model_fields.get(discriminator)
                if field is not None and tag in get_args(field.annotation):
                    return member
    return None
