"""YAML files -> data + location map: raw scalar text, duplicates, syntax errors, tags."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvkr.errors import LimitError, RecipeError
from nvkr.recipe.yamlsource import Location, format_path, read_yaml
from tests.helpers.recipes import WriteFile


def test_locations_keep_raw_scalar_text(write: WriteFile) -> None:
    path = write(
        "r.yaml",
        """\
        matrix:
          kubernetes: [1.30, "1.36"]
        sources:
          kubelet:
            sha256: abc
        flag: no
        """,
    )
    doc = read_yaml(path)
    assert doc.data == {
        "matrix": {"kubernetes": [1.3, "1.36"]},
        "sources": {"kubelet": {"sha256": "abc"}},
        "flag": False,
    }
    assert doc.locations[("matrix", "kubernetes", 0)] == Location(path, 2, 16, "1.30")
    assert doc.locations[("matrix", "kubernetes", 1)].text == "1.36"
    assert doc.locations[("sources", "kubelet", "sha256")] == Location(path, 5, 13, "abc")
    assert doc.locations[("flag",)].text == "no"
    # A mapping is located at its key, not at its first child.
    assert doc.locations[("sources", "kubelet")].line == 4
    assert doc.locations[()].line == 1


def test_duplicate_key_names_file_and_line(write: WriteFile) -> None:
    path = write(
        "r.yaml",
        """\
        sources:
          kubelet: {path: a}
          other: {path: b}
          kubelet: {path: c}
        """,
    )
    with pytest.raises(RecipeError) as err:
        read_yaml(path)
    assert str(err.value) == f"{path}:4:3: duplicate key 'kubelet' (first at line 2)"


def test_syntax_error_names_line_and_column(write: WriteFile) -> None:
    path = write("r.yaml", "a: 1\nb: [1, 2\nc: 3\n")
    with pytest.raises(RecipeError) as err:
        read_yaml(path)
    message = str(err.value)
    assert message.startswith(f"{path}:3:2: YAML syntax error: ")
    assert "flow sequence" in message


def test_tab_indentation_is_a_syntax_error(write: WriteFile) -> None:
    path = write("r.yaml", "a:\n\tb: 1\n")
    with pytest.raises(RecipeError, match=r"r\.yaml:2:1: YAML syntax error"):
        read_yaml(path)


@pytest.mark.parametrize(
    ("text", "got"),
    [
        ("- a\n- b\n", "a list"),
        ("just text\n", "the scalar 'just text'"),
        ("", "an empty document"),
        ("# only\n", "an empty document"),
    ],
)
def test_top_level_must_be_a_mapping(write: WriteFile, text: str, got: str) -> None:
    path = write("r.yaml", text)
    with pytest.raises(RecipeError, match=f"the top level must be a mapping \\(got {got}\\)"):
        read_yaml(path)


def test_several_documents_are_refused(write: WriteFile) -> None:
    path = write("r.yaml", "a: 1\n---\nb: 2\n")
    with pytest.raises(
        RecipeError, match=r"r\.yaml:2:1: YAML syntax error: but found another document"
    ):
        read_yaml(path)


def test_dates_stay_strings(write: WriteFile) -> None:
    doc = read_yaml(write("r.yaml", "epoch: 2024-01-01\n"))
    assert doc.data == {"epoch": "2024-01-01"}


@pytest.mark.parametrize(
    "text",
    [
        "a: !!binary aGVsbG8=\n",
        "a: !custom x\n",
        "a: !!set {x, y}\n",
        "a: !!python/name:os.system\n",
    ],
)
def test_non_json_tags_are_refused(write: WriteFile, text: str) -> None:
    path = write("r.yaml", text)
    with pytest.raises(RecipeError, match=r"r\.yaml:1:4: unsupported YAML tag"):
        read_yaml(path)


@pytest.mark.parametrize(
    ("key", "kind"), [("1.30", "a float"), ("yes", "a boolean"), ("12", "an integer")]
)
def test_non_string_keys_get_a_quote_hint(write: WriteFile, key: str, kind: str) -> None:
    path = write("r.yaml", f"vars:\n  {key}: x\n")
    with pytest.raises(RecipeError) as err:
        read_yaml(path)
    assert (
        str(err.value)
        == f'{path}:2:3: mapping key {key} is read by YAML as {kind}; keys must be strings: quote it: "{key}"'
    )


def test_anchors_and_merge_keys(write: WriteFile) -> None:
    path = write(
        "r.yaml",
        """\
        defaults: &d {package: ., cgo: false}
        artifacts:
          a:
            <<: *d
            cgo: true
        """,
    )
    doc = read_yaml(path)
    assert doc.data["artifacts"]["a"] == {"cgo": True, "package": "."}
    # Explicit keys win and keep their own line; merged keys point at the anchor.
    assert doc.locations[("artifacts", "a", "cgo")].line == 5
    assert doc.locations[("artifacts", "a", "package")].line == 1


def test_recursive_alias_is_refused(write: WriteFile) -> None:
    path = write("r.yaml", "a: &x [*x]\n")
    with pytest.raises(LimitError, match="recursive YAML alias"):
        read_yaml(path)


def test_missing_and_non_utf8_files(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="file not found"):
        read_yaml(tmp_path / "nope.yaml")
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"a: caf\xe9\n")
    with pytest.raises(RecipeError, match="not UTF-8"):
        read_yaml(bad)


def test_format_path() -> None:
    assert format_path(("sources", "kubelet", "url")) == "sources.kubelet.url"
    assert format_path(("matrix", "kubernetes", 0)) == "matrix.kubernetes[0]"
    assert (
        format_path(("releaseSet", "nodePoolReleases", 1, "name"))
        == "releaseSet.nodePoolReleases[1].name"
    )
