"""The bounded Jinja sandbox (:mod:`nvkr.bounds.jinja`): ordinary templates render as Jinja's own
sandbox renders them; each way of making a huge string, a long loop or a slow rendering is refused
with the limit it hit, before it allocates."""

from __future__ import annotations

import jinja2
import pytest

from nvkr.bounds.jinja import BoundedSandbox, TemplateLimit, render

ENV = BoundedSandbox(
    undefined=jinja2.StrictUndefined, extensions=["jinja2.ext.do"], keep_trailing_newline=True
)


@pytest.mark.parametrize(
    ("template", "out"),
    [
        ("{{ 'a' ~ b ~ 3 }}", "aB3"),
        ("{% for i in range(3) %}{{ i }}{% endfor %}", "012"),
        ("{{ '%05d' % 3 }}", "00003"),
        ("{{ '{:>5}'.format('x') }}", "    x"),
        ("{{ 'x'|center(5) }}", "  x  "),
        ("{{ [1, 2]|join(',') }}", "1,2"),
        ("{{ 2**10 }}{{ 'ab' * 2 }}", "1024abab"),
        ("{% set l = [] %}{% do l.append(1) %}{{ l }}", "[1]"),
        ("{% set x %}abc{% endset %}{{ x|upper }}", "ABC"),
    ],
)
def test_ordinary_templates_render(template: str, out: str) -> None:
    assert render(ENV.from_string(template), {"b": "B"}) == out


@pytest.mark.parametrize(
    ("template", "limit"),
    [
        ("{{ 'x' * 10**9 }}", "MAX_TEMPLATE_STRING"),
        ("{{ 10**9 * 'x' }}", "MAX_TEMPLATE_STRING"),
        ("{{ [1] * 10**9 }}", "MAX_TEMPLATE_STRING"),
        ("{{ '%999999999s' % 'x' }}", "MAX_FORMAT_WIDTH"),
        ("{{ '%*s' % (10**9, 'x') }}", "'*' width"),
        ("{{ '{:999999999}'.format('x') }}", "MAX_FORMAT_WIDTH"),
        ("{{ '%999999999s'|format('x') }}", "MAX_FORMAT_WIDTH"),
        ("{{ 'x'|center(10**9) }}", "MAX_TEMPLATE_STRING"),
        ("{{ 'x'.ljust(10**9) }}", "MAX_TEMPLATE_STRING"),
        ("{{ 'ab'|replace('', 'x' * 1000000) }}", "MAX_TEMPLATE_STRING"),
        ("{{ [1]|batch(10**9, 'x') }}", "MAX_TEMPLATE_STRING"),
        ("{{ range(100000)|join('x' * 100000) }}", "MAX_TEMPLATE_STRING"),
        ("{{ 7 ** (10**8) }}", "bits"),
        ("{{ range(10**9)|length }}", "MAX_RANGE"),  # Jinja's OverflowError before
        ("{% for i in range(0, 10**12, 2) %}{% endfor %}", "MAX_RANGE"),
        (
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            "MAX_TEMPLATE_STEPS",
        ),
        (
            "{% set ns = namespace(s='xx') %}{% for i in range(40) %}"
            "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
            "MAX_TEMPLATE_STRING",
        ),
        (
            "{% set ns = namespace(l=[1]) %}{% for i in range(60) %}"
            "{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l }}",
            "MAX_TEMPLATE_STRING",
        ),
        ("{% set l = [1] %}{% for i in range(40) %}{% do l.extend(l) %}{% endfor %}", "STRING"),
        ("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "MAX_TEMPLATE_OUTPUT"),
        (
            "{% set x %}{% for i in range(100000) %}{{ 'y' * 1000000 }}{% endfor %}{% endset %}",
            "MAX_TEMPLATE_MADE",
        ),
    ],
)
def test_a_bomb_is_refused_naming_the_limit(template: str, limit: str) -> None:
    with pytest.raises(TemplateLimit, match=limit):
        render(ENV.from_string(template), {})
