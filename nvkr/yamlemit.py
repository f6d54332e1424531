"""How nvkr writes YAML: every string it writes reads back as that very string.

What nvkr writes is read by YAML readers of two generations. YAML 1.1: PyYAML, and go-yaml, which
Helm and kubectl read through sigs.k8s.io/yaml (1.1 booleans such as ``yes``, ``on``, ``y``, plus
Go's number syntax: ``0o17``, ``0X1f``, ``1e3``, ``1_000``). YAML 1.2 core schema: ruamel.yaml
(``1e3`` and ``09`` are numbers, ``yes`` is a string). A plain scalar that any of them resolves
to something other than a string must be quoted; :func:`plain_is_str` is that test, kept here
once. Every writer uses it:

- :class:`Dumper`, a PyYAML ``SafeDumper`` that quotes by it: exported documents
  (:mod:`nvkr.delivery.export`) and, through a subclass with go-yaml's quoting style, ``Chart.yaml`` and
  ``Chart.lock`` (:mod:`nvkr.helm.metadata`);
- :func:`scalar`, one string as YAML text, for the writers that edit text in place or write it
  line by line: image pins in ``values.yaml`` (:mod:`nvkr.helm.values`), ``lock --update``'s
  recipe edits (:mod:`nvkr.update.edit`) and the mirror config snippet (:mod:`nvkr.airgap.serve`).

Quoting more than needed is harmless (a quoted scalar is a string to every reader), so the
go-yaml rules below are a superset of what go-yaml resolves; the YAML 1.1 spec's own float
pattern, which would make ``0.1.0`` a float, is not followed: no reader implements it, and
quoting every version string would make Chart.yaml differ from what ``helm package`` writes.
"""

from __future__ import annotations

import re
from typing import Any, Final, cast

import yaml
from ruamel.yaml.nodes import ScalarNode as RuamelScalarNode
from ruamel.yaml.resolver import VersionedResolver

STR_TAG: Final = "tag:yaml.org,2002:str"
#: What :meth:`Dumper.resolve` answers for a string that must not be written plain.
AMBIGUOUS_TAG: Final = "tag:nvkr.dev,2025:ambiguous-str"

_YAML_1_1: Any = yaml.resolver.Resolver()  # untyped in types-PyYAML
_YAML_1_2 = VersionedResolver(version=(1, 2))

# go-yaml v2/v3 resolve(): these words, then for a scalar starting with a digit, sign or '.',
# with every '_' removed, strconv.ParseInt/ParseUint (base 0: 0x, 0o, 0b, leading-0 octal),
# its float pattern, and time.Parse of 2006-1-2 (with an optional time after T, t or a space).
# fmt: off
_GO_WORDS: Final = frozenset({
    "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
    "true", "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF",
    "~", "null", "Null", "NULL", ".nan", ".NaN", ".NAN",
    ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF", "<<",
})
# fmt: on
_GO_INT = re.compile(r"[-+]?(?:0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|[0-9]+)")
_GO_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_GO_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt ]|$)")

# Plain scalars nvkr writes as text: no indicator, no space, nothing a flow context ends on.
# ':' only outside flow collections (libyaml-based readers refuse 'a:b' inside '{}').
_PLAIN_BLOCK = re.compile(r"[A-Za-z0-9_./][A-Za-z0-9_.~+:/@=-]*")
_PLAIN_FLOW = re.compile(r"[A-Za-z0-9_./][A-Za-z0-9_.~+/@=-]*")

# YAML's c-printable (1.1 and 1.2) minus the characters a reader folds or strips: NEL, LS, PS, BOM.
_PRINTABLE = re.compile(
    "[\x09\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]"
)
_ESCAPES: Final = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _go_yaml_resolves(text: str) -> bool:
    if text in _GO_WORDS or text == "":
        return True
    if text[0] not in "0123456789+-.":
        return False
    plain = text.replace("_", "")
    return bool(_GO_INT.fullmatch(plain) or _GO_FLOAT.fullmatch(plain) or _GO_TIMESTAMP.match(text))


def plain_is_str(text: str) -> bool:
    """True when the plain scalar ``text`` is the string ``text`` to YAML 1.1 (PyYAML, with the
    1.1 spec's ``y``/``n`` booleans), YAML 1.2 (ruamel.yaml's core schema) and go-yaml (Helm,
    kubectl); False when any of them reads a number, boolean, null, timestamp, merge or value
    key (``<<``, ``=``). Only the resolution: whether ``text`` can be plain at all (indicators,
    spaces) is the emitter's question (:func:`scalar` asks both).
    """
    if _go_yaml_resolves(text):
        return False
    if _YAML_1_1.resolve(yaml.ScalarNode, text, (True, False)) != STR_TAG:
        return False
    return str(_YAML_1_2.resolve(RuamelScalarNode, text, (True, False))) == STR_TAG


def double_quoted(text: str) -> str:
    """``text`` as a YAML double-quoted scalar that YAML 1.1 and 1.2 readers and go-yaml read
    back unchanged: backslash escapes for ``\\`` and ``"``, line breaks, tabs and every
    character outside YAML's printable set (``\\xNN``, ``\\uNNNN``, ``\\UNNNNNNNN``; never
    ``\\/``, which go-yaml does not know)."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif _PRINTABLE.fullmatch(ch):
            out.append(ch)
        elif ord(ch) <= 0xFF:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return '"' + "".join(out) + '"'


def single_quoted(text: str) -> str | None:
    """``text`` as a YAML single-quoted scalar (``'`` doubled), or None when it holds a
    character that only a double-quoted scalar can carry (a line break, a non-printable)."""
    if not all(_PRINTABLE.fullmatch(ch) and ch != "\t" for ch in text):
        return None
    return "'" + text.replace("'", "''") + "'"


def scalar(text: str, *, flow: bool = False, style: str | None = None) -> str:
    """``text`` as one YAML scalar on one line: plain when that reads back as ``text`` in every
    reader (:func:`plain_is_str`) and holds only characters safe in any position, else quoted.

    Args:
        flow: the scalar goes inside a flow collection (``{...}``, ``[...]``), where ``:`` is
            not written plain.
        style: ``'"'`` or ``"'"`` to keep the quoting a scalar was written with (a
            single-quoted scalar that cannot carry ``text`` becomes double-quoted); None or
            ``""`` for plain where possible.
    """
    if style == '"':
        return double_quoted(text)
    if style == "'":
        return single_quoted(text) or double_quoted(text)
    plain = (_PLAIN_FLOW if flow else _PLAIN_BLOCK).fullmatch(text)
    return text if plain and plain_is_str(text) else double_quoted(text)


class Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper, except that a string :func:`plain_is_str` rejects is never
    written plain (the emitter picks single or double quotes as for any non-plain string)."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        tag = cast(Any, super()).resolve(kind, value, implicit)
        if kind is yaml.ScalarNode and implicit[0] and tag == STR_TAG and not plain_is_str(value):
            return AMBIGUOUS_TAG
        return tag
