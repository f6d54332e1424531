"""Image pins in a chart's values.yaml: only the scalars nvkr sets change, every other byte stays.

The chart author's comments, key order, indentation, quoting, flow collections and blank lines
are what ``helm show values`` prints and what users diff; the helm-chart builder edits the
``repository`` and ``digest`` scalars in place and adds the keys that are missing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nvkr.errors import BuildError
from nvkr.helm.values import set_images

DIGEST = "sha256:" + "5e" * 32
REPO = Path(__file__).resolve().parents[2]

ODD = """\
---
# A values file written by hand, every habit at once.

image:    # the image
    repository:   'old/repo'   # single-quoted, odd spacing
    tag: "1.0"

    digest: ~  # set by the build
list:
- a
-   b   # unindented sequence
nested:
        deep:
                key: value
flow: {x: 1,   y: [1, 2]}
folded: >
    folded
    text
"quoted key": yes
anchored: &a {k: v}
ref: *a
# a trailing comment
"""


def test_odd_formatting_is_kept_byte_for_byte() -> None:
    out = set_images(ODD.encode(), {"image": ("new/repo", DIGEST)}, "values.yaml").decode()
    want = ODD.replace("'old/repo'", "'new/repo'").replace("digest: ~", f"digest: {DIGEST}")
    assert out == want


def test_missing_keys_are_added_at_the_mappings_indentation() -> None:
    data = "image:\n    repository: old  # c\n    pull: Always\n\n# next\nother: 1\n"
    out = set_images(data.encode(), {"image": ("new", DIGEST)}, "values.yaml").decode()
    assert out == (
        f"image:\n    repository: new  # c\n    pull: Always\n    digest: {DIGEST}\n\n# next\nother: 1\n"
    )


def test_missing_mappings_are_created_in_block_style() -> None:
    data = "# only a comment\nreplicas: 1"  # no final newline
    images = {"agent.image": ("r/a", DIGEST), "agent.sidecar": ("r/s", DIGEST)}
    out = set_images(data.encode(), images, "values.yaml").decode()
    assert out == (
        "# only a comment\nreplicas: 1\nagent:\n  image:\n    repository: r/a\n"
        f"    digest: {DIGEST}\n  sidecar:\n    repository: r/s\n    digest: {DIGEST}\n"
    )


def test_flow_mappings_are_edited_in_flow_style() -> None:
    data = "image: {repository: old, tag: ''}  # c\nempty: {}\n"
    images = {"image": ("new", DIGEST), "empty.image": ("e", DIGEST)}
    out = set_images(data.encode(), images, "values.yaml").decode()
    assert out == (
        f"image: {{repository: new, tag: '', digest: \"{DIGEST}\"}}  # c\n"
        f'empty: {{image: {{repository: e, digest: "{DIGEST}"}}}}\n'
    )


@pytest.mark.parametrize("null", ["", " ~", " null", "  # nothing yet"])
def test_a_null_image_key_becomes_a_mapping(null: str) -> None:
    data = f"image:{null}\nother: 1\n"
    out = set_images(data.encode(), {"image": ("new", DIGEST)}, "values.yaml").decode()
    assert yaml.safe_load(out) == {"image": {"repository": "new", "digest": DIGEST}, "other": 1}
    assert out.endswith("\nother: 1\n") and ("# nothing yet" in out) == ("#" in null)


def test_empty_or_missing_values_yaml() -> None:
    for data in (None, b"", b"# nothing\n", b"---\n"):
        out = set_images(data, {"image": ("new", DIGEST)}, "values.yaml")
        assert yaml.safe_load(out) == {"image": {"repository": "new", "digest": DIGEST}}
        assert out.startswith(data or b"")


def test_crlf_line_endings_are_kept() -> None:
    data = b"image:\r\n  repository: old\r\nother: 1\r\n"
    out = set_images(data, {"image": ("new", DIGEST)}, "values.yaml")
    assert out == f"image:\r\n  repository: new\r\n  digest: {DIGEST}\r\nother: 1\r\n".encode()


def test_block_scalar_value_is_replaced_and_the_layout_after_it_kept() -> None:
    data = "image:\n  repository: |\n    old\n  tag: x\n"
    out = set_images(data.encode(), {"image": ("new", DIGEST)}, "values.yaml").decode()
    assert out == f'image:\n  repository: "new"\n  tag: x\n  digest: {DIGEST}\n'


def test_the_node_agent_chart_changes_only_in_its_digest_line() -> None:
    path = REPO / "charts" / "node-agent" / "values.yaml"
    data = path.read_bytes()
    out = set_images(data, {"image": ("ghcr.io/nvkr/node-agent", DIGEST)}, str(path))
    assert out == data.replace(b'  digest: ""\n', f'  digest: "{DIGEST}"\n'.encode())


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("image: [a]\n", r"values.yaml: image is \[a\], not a mapping"),
        ("image:\n  repository: {a: 1}\n", r"image.repository is a mapping"),
        ("- a\n", r"values.yaml holds a list, not a mapping"),
        ("image: {a: 1}\nimage: {b: 2}\n", r"line 2: duplicate key 'image'"),
        ("base: &b {repository: x}\nimage: *b\n", r"line 2: image is an alias"),
        ("base: &b {tag: x}\nimage:\n  <<: *b\n", r"image has a merge key"),
        ("image: [\n", r"cannot edit values.yaml"),
    ],
)
def test_what_cannot_be_edited_in_place_is_an_error(data: str, message: str) -> None:
    with pytest.raises(BuildError, match=message):
        set_images(data.encode(), {"image": ("new", DIGEST)}, "values.yaml")


@pytest.mark.parametrize(
    ("images", "values", "message"),
    [
        (
            {"a": ("r", DIGEST), "a.repository.x": ("s", DIGEST)},
            {},
            "images key 'a.repository.x' lies under",
        ),
        (
            {},
            {"otlp": "x", "otlp.endpoint": "y"},
            "values key 'otlp.endpoint' lies under another value",
        ),
        (
            {"image": ("r", DIGEST)},
            {"image.digest": "x"},
            r"values key image\.digest is also 'image'",
        ),
    ],
)
def test_keys_that_collide_are_refused_naming_the_key(
    images: dict[str, tuple[str, str]], values: dict[str, str], message: str
) -> None:
    with pytest.raises(BuildError, match=message):
        set_images(b"replicas: 1\n", images, "values.yaml", values)
