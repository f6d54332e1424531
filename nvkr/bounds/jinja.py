"""A Jinja sandbox whose every rendering is bounded: :class:`BoundedSandbox` and :func:`render`.

Jinja's :class:`~jinja2.sandbox.SandboxedEnvironment` keeps a template away from Python's
internals but not from the host's memory and time: ``{{ 'x' * 10**9 }}``, ``{{ '%999999999s' %
'x' }}`` or ``{{ 10**10**10 }}`` each allocate gigabytes or run for minutes in one step. Here:

* ``*``, ``**``, ``%`` and ``+`` are intercepted (so never folded at compile time either) and
  refused when their result would hold over :data:`~nvkr.bounds.MAX_TEMPLATE_STRING` characters
  or items (or an integer over :data:`MAX_INT_BITS` bits), or a ``%`` format has a width or
  precision over :data:`~nvkr.bounds.MAX_FORMAT_WIDTH` (or a ``*`` one);
* the methods and filters that pad, repeat or join (``center``, ``ljust``, ``format``, ``join``,
  ``replace``, ``indent``, ``batch``...) are checked the same way before they run, and every
  call's result after it;
* ``~`` joins, ``{{ }}`` output and ``{% set %}`` blocks measure their parts first, expanding
  shared lists as ``str`` would (a list of a list of a list...);
* every loop iteration, call and filter is a step: at most :data:`~nvkr.bounds.MAX_TEMPLATE_STEPS`
  of them and :data:`~nvkr.bounds.MAX_TEMPLATE_SECONDS` per rendering, and at most
  :data:`~nvkr.bounds.MAX_TEMPLATE_OUTPUT` characters written.

Going over raises :class:`TemplateLimit` (a :class:`jinja2.exceptions.SecurityError`, so every
caller's ``TemplateError`` handling words it with the file and field), whose message names the
limit.
"""

from __future__ import annotations

import contextvars
import re
import string
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

import jinja2
from jinja2 import nodes
from jinja2.exceptions import SecurityError
from jinja2.sandbox import MAX_RANGE, SandboxedEnvironment, safe_range
from jinja2.visitor import NodeTransformer

from nvkr.bounds import (
    MAX_FORMAT_WIDTH,
    MAX_TEMPLATE_MADE,
    MAX_TEMPLATE_OUTPUT,
    MAX_TEMPLATE_SECONDS,
    MAX_TEMPLATE_STEPS,
    MAX_TEMPLATE_STRING,
)

#: bits in an integer a template makes with ``*`` or ``**``
MAX_INT_BITS: Final = 64 * 1024
_PRINTF = re.compile(r"%(?:\([^)]*\))?[#0 +-]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?[a-zA-Z%]")
_NUMBER = re.compile(r"\d+")
_SELF = "nvkr.bounds.jinja"


class TemplateLimit(SecurityError):
    """A rendering went over one of the bounds; the message names it."""


class _Budget:
    def __init__(self) -> None:
        self.steps = 0
        self.made = 0
        self.deadline = time.monotonic() + MAX_TEMPLATE_SECONDS

    def charge(self, size: int) -> None:
        self.made += size
        if self.made > MAX_TEMPLATE_MADE:
            raise TemplateLimit(
                f"the template makes over {MAX_TEMPLATE_MADE} characters of strings in all "
                "(nvkr.bounds.MAX_TEMPLATE_MADE)"
            )

    def step(self) -> None:
        self.steps += 1
        if self.steps > MAX_TEMPLATE_STEPS:
            raise TemplateLimit(
                f"the template takes over {MAX_TEMPLATE_STEPS} loop iterations and calls "
                "(nvkr.bounds.MAX_TEMPLATE_STEPS)"
            )
        if not self.steps % 256 and time.monotonic() > self.deadline:
            raise TemplateLimit(
                f"the template renders for over {MAX_TEMPLATE_SECONDS:g} s "
                "(nvkr.bounds.MAX_TEMPLATE_SECONDS)"
            )


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar(
    "nvkr_budget", default=None
)


def _step() -> None:
    budget = _BUDGET.get()
    if budget is not None:
        budget.step()


def _too_long(what: str, size: int) -> TemplateLimit:
    return TemplateLimit(
        f"{what} would make {size} characters or items, over nvkr's limit of "
        f"{MAX_TEMPLATE_STRING} (nvkr.bounds.MAX_TEMPLATE_STRING)"
    )


def _check_length(what: str, size: int) -> None:
    if size > MAX_TEMPLATE_STRING:
        raise _too_long(what, size)
    budget = _BUDGET.get()
    if budget is not None:
        budget.charge(size)


def _total(what: str, items: Iterable[Any], each: int = 0) -> None:
    """Check the summed :func:`expanded_size` of ``items`` (plus ``each`` per item), stopping
    as soon as it is over."""
    total = 0
    for item in items:
        total += expanded_size(item) + each
        if total > MAX_TEMPLATE_STRING:
            break
    _check_length(what, total)


def _width(what: str, width: int) -> None:
    if width > MAX_FORMAT_WIDTH:
        raise TemplateLimit(
            f"{what} has a format width or precision of {width}, over nvkr's limit of "
            f"{MAX_FORMAT_WIDTH} (nvkr.bounds.MAX_FORMAT_WIDTH)"
        )


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def expanded_size(value: Any) -> int:
    """About how many characters ``str(value)`` has, counting a shared list once per place
    (linear in the distinct objects); stops counting past the limit."""
    sizes: dict[int, int] = {}

    def size(v: Any) -> int:
        if isinstance(v, str):
            return len(v)
        if isinstance(v, list | tuple | set | frozenset | dict):
            known = sizes.get(id(v))
            if known is not None:
                return known
            sizes[id(v)] = 5  # a list holding itself prints as [...]
            items = [x for kv in v.items() for x in kv] if isinstance(v, dict) else list(v)
            total = 2
            for item in items:
                total += size(item) + 2
                if total > MAX_TEMPLATE_STRING:
                    break
            sizes[id(v)] = total
            return total
        if isinstance(v, int) and not isinstance(v, bool):
            return v.bit_length() // 3 + 1
        return 16

    return size(value)


def _check_value(what: str, value: Any) -> Any:
    _check_length(what, expanded_size(value))
    return value


def _check_printf(fmt: str, args: Any) -> None:
    for match in _PRINTF.finditer(fmt):
        for group in match.groups():
            if group == "*":
                raise TemplateLimit("a '%' format with a '*' width is not allowed in a template")
            if group:
                _width("the '%' format", int(group))
    values = args.values() if isinstance(args, Mapping) else args
    values = values if isinstance(values, tuple | list) or isinstance(args, Mapping) else (values,)
    _total("the '%' format", [fmt, *values])


def _check_format_spec(fmt: str) -> None:
    for _literal, _field, spec, _conversion in string.Formatter().parse(fmt):
        if spec and "{" in spec:
            raise TemplateLimit("a nested replacement field in a format spec is not allowed")
        for number in _NUMBER.findall(spec or ""):
            _width("the format spec", int(number))


def _repeat(left: Any, right: Any) -> None:
    for seq, times in ((left, right), (right, left)):
        if isinstance(seq, str | list | tuple | bytes) and isinstance(times, int):
            _check_length("the repetition", expanded_size(seq) * max(times, 0))
            return
    ints = isinstance(left, int) and isinstance(right, int)
    if ints and abs(left).bit_length() + abs(right).bit_length() > MAX_INT_BITS:
        raise TemplateLimit(f"the product is over {MAX_INT_BITS} bits (nvkr.bounds.jinja)")


def _power(left: Any, right: Any) -> None:
    ints = isinstance(left, int) and isinstance(right, int)
    if ints and abs(left) > 1 and right > 0 and abs(left).bit_length() * right > MAX_INT_BITS:
        raise TemplateLimit(f"the power is over {MAX_INT_BITS} bits (nvkr.bounds.jinja)")


_METHOD_CHECKS: dict[str, Callable[[Any, tuple[Any, ...]], None]] = {
    "center": lambda s, a: _check_length(".center()", _int(a[0]) if a else 0),
    "ljust": lambda s, a: _check_length(".ljust()", _int(a[0]) if a else 0),
    "rjust": lambda s, a: _check_length(".rjust()", _int(a[0]) if a else 0),
    "zfill": lambda s, a: _check_length(".zfill()", _int(a[0]) if a else 0),
    "expandtabs": lambda s, a: _check_length(
        ".expandtabs()", len(s) + s.count("\t") * (_int(a[0]) if a else 8)
    ),
    "replace": lambda s, a: _check_length(
        ".replace()",
        len(s) + (s.count(a[0]) * len(a[1]) if len(a) > 1 and isinstance(a[0], str) else 0),
    ),
    "join": lambda s, a: _total(".join()", a[0] if a else (), len(s)),
    "format": lambda s, a: _check_format_spec(s),
    "format_map": lambda s, a: _check_format_spec(s),
}


def _filter_check(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    value = args[0] if args else None
    rest = args[1:]
    if name == "center":
        _check_length("the center filter", _int(rest[0] if rest else kwargs.get("width", 80)))
    elif name == "indent":
        width = rest[0] if rest else kwargs.get("width", 4)
        pad = len(width) if isinstance(width, str) else _int(width)
        lines = str(value).count("\n") + 1 if isinstance(value, str) else 1
        _check_length("the indent filter", len(str(value)) + pad * lines)
    elif name == "format" and isinstance(value, str):
        _check_printf(value, kwargs or tuple(rest))
    elif name == "join":
        sep = rest[0] if rest else kwargs.get("d", "")
        items = value if isinstance(value, list | tuple | range | str) else []
        _total("the join filter", items, len(str(sep)))
    elif name == "replace" and isinstance(value, str) and len(rest) > 1:
        _check_length(
            "the replace filter", len(value) + value.count(str(rest[0])) * len(str(rest[1]))
        )
    elif name in ("batch", "slice"):
        _check_length(f"the {name} filter", _int(rest[0] if rest else 0))
    elif name == "wordwrap":
        wrap = kwargs.get("wrapstring") or (rest[2] if len(rest) > 2 else None) or "\n"
        _check_length("the wordwrap filter", len(str(value)) * (len(str(wrap)) + 1))
    elif name in ("string", "tojson", "pprint", "list", "safe", "e", "escape", "urlencode"):
        _check_value(f"the {name} filter", value)


def _bounded_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    passed = 1 if getattr(func, "jinja_pass_arg", None) else 0  # the context, environment...

    def bounded(*args: Any, **kwargs: Any) -> Any:
        _step()
        _filter_check(name, args[passed:], kwargs)
        result = func(*args, **kwargs)
        if isinstance(result, str | list | tuple):
            _check_length(f"the {name} filter", len(result))
        return result

    for attr in ("jinja_pass_arg", "__name__", "__doc__"):
        if hasattr(func, attr):
            setattr(bounded, attr, getattr(func, attr))
    return bounded


def steps(iterable: Any) -> Iterator[Any]:
    """``iterable``, one step of the budget per item (every ``{% for %}`` goes through this)."""
    for item in iterable:
        _step()
        yield item


def concat(*parts: Any) -> str:
    """``a ~ b ~ c`` with its parts measured before they are joined."""
    _total("the '~' join", parts)
    return "".join(map(str, parts))


def _join_output(parts: Iterable[Any]) -> str:
    parts = list(parts)
    _total("the block", parts)
    return "".join(parts)


class _Rewrite(NodeTransformer):
    """Every ``for`` iterates through :func:`steps`; every ``~`` joins through :func:`concat`."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = nodes.Call(
            nodes.ImportedName(f"{_SELF}.steps"), [node.iter], [], None, None, lineno=node.lineno
        )
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return nodes.Call(
            nodes.ImportedName(f"{_SELF}.concat"), list(node.nodes), [], None, None,
            lineno=node.lineno,
        )  # fmt: skip


def _bounded_range(*args: int) -> range:
    """Jinja's sandboxed ``range`` (at most :data:`jinja2.sandbox.MAX_RANGE` items), which
    raises OverflowError, a Python error, over it: a :class:`TemplateLimit` naming the limit."""
    _step()
    try:
        return safe_range(*args)
    except OverflowError:
        raise TemplateLimit(
            f"the template asks for a range of over {MAX_RANGE} items "
            "(jinja2.sandbox.MAX_RANGE, which nvkr keeps)"
        ) from None


class BoundedSandbox(SandboxedEnvironment):
    """A :class:`~jinja2.sandbox.SandboxedEnvironment` within nvkr's bounds (module docstring);
    takes the same options."""

    intercepted_binops = frozenset({"*", "**", "%", "+"})
    concat = staticmethod(_join_output)

    def __init__(self, **options: Any) -> None:
        options.setdefault("finalize", lambda v: _check_value("the value written", v))
        super().__init__(**options)
        self.filters = {name: _bounded_filter(name, f) for name, f in self.filters.items()}
        self.globals["range"] = _bounded_range

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        rewritten = _Rewrite().visit(tree)
        assert isinstance(rewritten, nodes.Template)
        return rewritten

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _step()
        if operator == "*":
            _repeat(left, right)
        elif operator == "**":
            _power(left, right)
        elif operator == "%" and isinstance(left, str):
            _check_printf(left, right)
        elif operator == "+" and isinstance(left, str | list | tuple):
            _check_length("the '+'", expanded_size(left) + expanded_size(right))
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        _step()
        method = getattr(__obj, "__wrapped__", __obj)
        owner = getattr(method, "__self__", None)
        if isinstance(owner, str):
            check = _METHOD_CHECKS.get(getattr(method, "__name__", ""))
            if check is not None:
                check(owner, args)
        result = SandboxedEnvironment.call(__self, __context, __obj, *args, **kwargs)
        if isinstance(result, str | list | tuple | dict):
            _check_length("the call", len(result))
        if isinstance(owner, list | dict | set):  # append, extend, update...
            _check_length(f"the {type(owner).__name__}", len(owner))
        return result


_ENV: BoundedSandbox | None = None


def render(template: jinja2.Template, context: Mapping[str, Any]) -> str:
    """``template`` (of a :class:`BoundedSandbox`) rendered with ``context`` within one fresh
    budget of steps and seconds, its output at most :data:`~nvkr.bounds.MAX_TEMPLATE_OUTPUT`.

    Raises:
        TemplateLimit: over a bound (the message names it); other ``TemplateError``\\ s and
            whatever the template's own code raises, as Jinja raises them.
    """
    token = _BUDGET.set(_Budget())
    try:
        out: list[str] = []
        written = 0
        for part in template.generate(**context):
            written += len(part)
            if written > MAX_TEMPLATE_OUTPUT:
                raise TemplateLimit(
                    f"the template writes over {MAX_TEMPLATE_OUTPUT} characters "
                    "(nvkr.bounds.MAX_TEMPLATE_OUTPUT)"
                )
            out.append(part)
        return "".join(out)
    finally:
        _BUDGET.reset(token)
