from __future__ import annotations

import pytest

from nvkr.canonical import canonical_json, canonical_json_file, digest_json, hex_of


def test_sorted_compact_utf8():
    assert (
        canonical_json({"b": 1, "a": [True, None, "é"]}) == '{"a":[true,null,"é"],"b":1}'.encode()
    )


def test_file_form_has_trailing_newline_and_sorted_keys():
    assert canonical_json_file({"b": 1, "a": 2}) == b'{\n  "a": 2,\n  "b": 1\n}\n'


def test_floats_rejected():
    with pytest.raises(TypeError, match=r"\$\.x\[0\]"):
        canonical_json({"x": [1.5]})


def test_digest_is_key_order_independent():
    assert digest_json({"a": 1, "b": 2}) == digest_json({"b": 2, "a": 1})


def test_hex_of_rejects_malformed():
    with pytest.raises(ValueError):
        hex_of("sha256:abc")
    assert hex_of("sha256:" + "0" * 64) == "0" * 64
