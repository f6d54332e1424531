"""in-toto Statement v1 / SLSA provenance v1: shape, validation, no wall-clock time."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nvkr.canonical import canonical_json
from nvkr.errors import IntegrityError
from nvkr.provenance import (
    BUILD_TYPE,
    BUILDER_ID,
    SLSA_PROVENANCE_V1,
    STATEMENT_TYPE,
    TIME_FIELDS,
    digest_set,
    slsa_statement,
    statement_bytes,
    validate_statement,
)

HEX = "ab" * 32


def statement(**overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "build_type": BUILD_TYPE,
        "external_parameters": {
            "recipe": {"path": "recipes/default.yaml", "digest": "sha256:" + HEX}
        },
        "internal_parameters": {"epoch": 1764547200},
        "resolved_dependencies": [
            {"name": "go", "uri": "https://example.test/go.whl", "digest": {"sha256": HEX}}
        ],
        "builder_id": BUILDER_ID,
        "builder_version": {"nvkr": "0.1.0"},
        "invocation_id": "sha256:" + HEX,
    }
    args.update(overrides)
    return slsa_statement([{"name": "node-agent", "digest": {"sha256": HEX}}], **args)


def test_shape() -> None:
    st = statement()
    assert st == {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": "node-agent", "digest": {"sha256": HEX}}],
        "predicateType": SLSA_PROVENANCE_V1,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {
                    "recipe": {"path": "recipes/default.yaml", "digest": "sha256:" + HEX}
                },
                "internalParameters": {"epoch": 1764547200},
                "resolvedDependencies": [
                    {"name": "go", "uri": "https://example.test/go.whl", "digest": {"sha256": HEX}}
                ],
            },
            "runDetails": {
                "builder": {"id": BUILDER_ID, "version": {"nvkr": "0.1.0"}},
                "metadata": {"invocationId": "sha256:" + HEX},
            },
        },
    }
    assert STATEMENT_TYPE == "https://in-toto.io/Statement/v1"
    assert SLSA_PROVENANCE_V1 == "https://slsa.dev/provenance/v1"
    assert BUILD_TYPE == "https://nvkr.dev/buildtypes/recipe/v1"
    assert BUILDER_ID == "https://nvkr.dev/builders/nvkr"


def test_no_time_and_same_bytes_every_time() -> None:
    st = statement()
    assert not TIME_FIELDS & set(st["predicate"]["runDetails"]["metadata"])
    assert statement_bytes(st) == statement_bytes(statement()) == canonical_json(st)


def test_inputs_are_copied_not_shared() -> None:
    ext = {"a": "b"}
    st = statement(external_parameters=ext)
    ext["a"] = "changed"
    assert st["predicate"]["buildDefinition"]["externalParameters"] == {"a": "b"}


def test_digest_set() -> None:
    assert digest_set("sha256:" + HEX) == {"sha256": HEX}
    with pytest.raises(ValueError, match="malformed digest"):
        digest_set("sha256:XYZ")


def test_a_subject_needs_a_digest() -> None:
    with pytest.raises(IntegrityError, match=r"\$\.subject\[0\]\.digest is required"):
        slsa_statement(
            [{"name": "x", "uri": "https://example.test/x"}],
            build_type=BUILD_TYPE,
            external_parameters={},
            internal_parameters={},
            resolved_dependencies=[],
            builder_id=BUILDER_ID,
            builder_version={},
            invocation_id="i",
        )


def test_a_dependency_needs_uri_digest_or_content() -> None:
    with pytest.raises(
        IntegrityError, match=r"resolvedDependencies\[0\] needs one of uri, digest, content"
    ):
        statement(resolved_dependencies=[{"name": "go"}])


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(_type="https://in-toto.io/Statement/v0.1"), r"\$\._type"),
        (lambda d: d.update(subject=[]), r"\$\.subject must be a non-empty list"),
        (lambda d: d["subject"][0].update(digest={"sha256": "ABC"}), r"64 lower-case hex"),
        (lambda d: d["subject"][0].update(digest={}), r"non-empty object"),
        (lambda d: d.update(predicateType=""), r"predicateType"),
        (lambda d: d.update(predicate=[]), r"\$\.predicate must be an object"),
        (lambda d: d["predicate"].pop("buildDefinition"), r"buildDefinition must be an object"),
        (lambda d: d["predicate"]["buildDefinition"].pop("buildType"), r"buildType"),
        (
            lambda d: d["predicate"]["buildDefinition"].pop("externalParameters"),
            r"externalParameters",
        ),
        (
            lambda d: d["predicate"]["buildDefinition"].update(internalParameters=[]),
            r"internalParameters",
        ),
        (
            lambda d: d["predicate"]["buildDefinition"].update(resolvedDependencies={}),
            r"must be a list",
        ),
        (lambda d: d["predicate"].pop("runDetails"), r"runDetails must be an object"),
        (lambda d: d["predicate"]["runDetails"]["builder"].pop("id"), r"builder\.id"),
        (
            lambda d: d["predicate"]["runDetails"]["builder"].update(version={"nvkr": 1}),
            r"builder\.version",
        ),
        (
            lambda d: d["predicate"]["runDetails"]["metadata"].update(invocationId=7),
            r"invocationId",
        ),
    ],
)
def test_validate_names_the_broken_field(mutate: Any, message: str) -> None:
    d = copy.deepcopy(statement())
    mutate(d)
    with pytest.raises(IntegrityError, match=message):
        validate_statement(d)


def test_validate_lists_every_problem() -> None:
    with pytest.raises(IntegrityError) as e:
        validate_statement({"_type": "x", "subject": [], "predicateType": "", "predicate": None})
    assert e.value.message.count(";") == 3
    with pytest.raises(IntegrityError, match="expected a JSON object"):
        validate_statement([])


def test_validate_accepts_other_producers_times_and_predicates() -> None:
    d = statement()
    d["predicate"]["runDetails"]["metadata"]["startedOn"] = "2025-12-01T00:00:00Z"
    validate_statement(d)
    validate_statement(
        {
            "_type": STATEMENT_TYPE,
            "subject": [{"digest": {"sha512": "0" * 128}}],
            "predicateType": "https://spdx.dev/Document",
            "predicate": {},
        }
    )
