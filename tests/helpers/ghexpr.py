"""GitHub Actions expressions (``${{ ... }}``), evaluated as GitHub does, for the tests that run
generated workflows.

The grammar of GitHub's "Evaluate expressions in workflows and actions" reference, enough of it
for what workflows are made of: literals (``'string'`` with ``''`` for a quote, numbers,
``true``, ``false``, ``null``), context paths (``github.event.pull_request.number``,
``secrets.NAME``, ``matrix['x']``), ``!``, ``==``/``!=`` (strings compared case-insensitively;
mixed types compared as numbers), ``&&``/``||`` (returning an operand, as in JavaScript),
parentheses, and the functions ``format``, ``contains``, ``startsWith``, ``endsWith``,
``toJSON``. A missing property is ``null``, which reads as ``''`` in a string. Anything else
raises, so a workflow using more than this fails the test instead of being misread.
"""

from __future__ import annotations

import json
import re
from typing import Any

_TOKEN = re.compile(
    r"\s*(?:(?P<num>-?\d+(?:\.\d+)?)|(?P<str>'(?:[^']|'')*')|(?P<op>==|!=|&&|\|\||[!().,\[\]])"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))"
)


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"expression {text!r}: cannot read {text[pos:]!r}")
        kind = m.lastgroup
        assert kind is not None
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def _to_str(value: Any) -> str:
    if value is None:
        return ""
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (dict, list)):
        return "Object" if isinstance(value, dict) else "Array"
    return str(value)


def _truthy(value: Any) -> bool:
    return value not in (None, False, 0, "", 0.0)


def _to_num(value: Any) -> float:
    if value is None or value == "":
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    if type(a) is type(b) and not isinstance(a, (int, float)):
        return bool(a == b)
    return _to_num(a) == _to_num(b)


class _Parser:
    def __init__(self, text: str, contexts: dict[str, Any]) -> None:
        self.tokens = _tokens(text)
        self.i = 0
        self.contexts = contexts
        self.text = text

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value):
            raise ValueError(f"expression {self.text!r}: expected {value or 'more'}")
        self.i += 1
        return tok

    def parse(self) -> Any:
        value = self.or_()
        if self.peek() is not None:
            raise ValueError(f"expression {self.text!r}: unexpected {self.peek()}")
        return value

    def or_(self) -> Any:
        value = self.and_()
        while self.peek() == ("op", "||"):
            self.take()
            right = self.and_()
            value = value if _truthy(value) else right
        return value

    def and_(self) -> Any:
        value = self.eq()
        while self.peek() == ("op", "&&"):
            self.take()
            right = self.eq()
            value = right if _truthy(value) else value
        return value

    def eq(self) -> Any:
        value = self.unary()
        while self.peek() in (("op", "=="), ("op", "!=")):
            op = self.take()[1]
            right = self.unary()
            value = _equal(value, right) == (op == "==")
        return value

    def unary(self) -> Any:
        if self.peek() == ("op", "!"):
            self.take()
            return not _truthy(self.unary())
        return self.primary()

    def primary(self) -> Any:
        kind, text = self.take()
        if kind == "num":
            return float(text)
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if (kind, text) == ("op", "("):
            value = self.or_()
            self.take(")")
            return value
        if kind != "name":
            raise ValueError(f"expression {self.text!r}: unexpected {text!r}")
        if text in ("true", "false"):
            return text == "true"
        if text == "null":
            return None
        if self.peek() == ("op", "("):
            return self.call(text)
        if text not in self.contexts:
            raise ValueError(f"expression {self.text!r}: unknown context {text!r}")
        value: Any = self.contexts[text]
        while self.peek() in (("op", "."), ("op", "[")):
            if self.take()[1] == ".":
                key: Any = self.take()[1]
            else:
                key = self.or_()
                self.take("]")
            value = value.get(key) if isinstance(value, dict) else None
        return value

    def call(self, name: str) -> Any:
        self.take("(")
        args: list[Any] = []
        while self.peek() != ("op", ")"):
            args.append(self.or_())
            if self.peek() == ("op", ","):
                self.take()
        self.take(")")
        low = name.lower()
        if low == "format":
            fmt, rest = _to_str(args[0]), [_to_str(a) for a in args[1:]]
            return re.sub(r"\{(\d+)\}", lambda m: rest[int(m.group(1))], fmt)
        if low == "contains":
            hay, needle = args
            if isinstance(hay, list):
                return any(_equal(h, needle) for h in hay)
            return _to_str(needle).lower() in _to_str(hay).lower()
        if low == "startswith":
            return _to_str(args[0]).lower().startswith(_to_str(args[1]).lower())
        if low == "endswith":
            return _to_str(args[0]).lower().endswith(_to_str(args[1]).lower())
        if low == "tojson":
            return json.dumps(args[0], indent=2)
        raise ValueError(f"expression {self.text!r}: unknown function {name!r}")


def evaluate(expression: str, contexts: dict[str, Any]) -> Any:
    """The value of one expression (without ``${{ }}``)."""
    return _Parser(expression, contexts).parse()


_TEMPLATE = re.compile(r"\$\{\{(.*?)\}\}", re.S)


def render(text: str, contexts: dict[str, Any]) -> Any:
    """A workflow value: a string that is one ``${{ }}`` gives the expression's value, else each
    ``${{ }}`` inside is replaced by its value as a string."""
    whole = _TEMPLATE.fullmatch(text.strip())
    if whole is not None:
        return evaluate(whole.group(1), contexts)
    return _TEMPLATE.sub(lambda m: _to_str(evaluate(m.group(1), contexts)), text)
