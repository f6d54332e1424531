"""The one loader of a JSON document that must be an object (nvkr/jsondoc.py): its message
names the document and says what it got, and it raises the caller's error class, so each
caller keeps its exit code."""

from __future__ import annotations

import pytest

from nvkr.cache.entry import EntryProblem
from nvkr.errors import BuildError, FetchError, IntegrityError
from nvkr.jsondoc import json_kind, load_json_object


@pytest.mark.parametrize("data", [b'{"a": [1, 2]}', '{"a": [1, 2]}'])
def test_an_object_is_returned_as_parsed(data: bytes | str) -> None:
    assert load_json_object(data, "x.json", error=IntegrityError) == {"a": [1, 2]}


@pytest.mark.parametrize(
    ("data", "got"),
    [
        (b"[1, 2]", "a list"),
        (b'"text"', "a string"),
        (b"3.5", "a number"),
        (b"7", "a number"),
        (b"true", "a boolean"),
        (b"null", "null"),
    ],
)
def test_a_document_that_is_no_object_is_named_with_what_it_is(data: bytes, got: str) -> None:
    with pytest.raises(IntegrityError) as e:
        load_json_object(data, "blob sha256:ab (referenced by index.json)", error=IntegrityError)
    assert e.value.message == (
        f"blob sha256:ab (referenced by index.json) is not a JSON object (it is {got})"
    )
    assert e.value.exit_code == 3


def test_what_is_not_json_says_where_the_parser_stopped() -> None:
    with pytest.raises(FetchError) as e:
        load_json_object(b'{"a": 1,\n', "oci source base: sha256:cd", error=FetchError)
    assert e.value.message.startswith("oci source base: sha256:cd is not JSON: ")
    assert "line 2" in e.value.message
    assert e.value.exit_code == 1
    assert isinstance(e.value.__cause__, ValueError)
    with pytest.raises(BuildError, match=r"^m\.json is not JSON: .*utf-8"):
        load_json_object(b'{"\xff": 1}', "m.json", error=BuildError)


def test_the_callers_error_class_is_raised_whatever_it_is() -> None:
    with pytest.raises(EntryProblem) as e:
        load_json_object(b"[]", "its config", error=EntryProblem)
    assert str(e.value) == "its config is not a JSON object (it is a list)"


def test_json_kind() -> None:
    assert [json_kind(v) for v in ({}, [], "", 0, 0.5, False, None)] == [
        "an object", "a list", "a string", "a number", "a number", "a boolean", "null",
    ]  # fmt: skip
    assert json_kind(()) == "a tuple value"
