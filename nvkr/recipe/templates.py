"""Jinja2 templates in recipe values, rendered once per variant.

Matrix expansion calls :func:`render_document` on each variant's merged, overlay-applied raw
document before validating it: every string value (never a key) under ``sources``,
``artifacts`` and ``releaseSet`` that contains ``{{`` or ``{%`` is rendered with the variant's
axes and the recipe's ``vars``. ``vars`` themselves are rendered first, with only the axes in
context, so a var cannot depend on another var (no ordering questions, no cycles).

The environment is sandboxed (recipe authors cannot reach Python internals) and bounded
(:mod:`nvkr.bounds.jinja`: a repetition, a format width, the steps and the output), strict (an
undefined name is an error, not an empty string that would produce a wrong URL) and does not
escape anything (these are URLs and names, not HTML).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import jinja2
from jinja2 import StrictUndefined

from nvkr.bounds.jinja import BoundedSandbox, TemplateLimit, render
from nvkr.errors import LimitError, RecipeError
from nvkr.recipe.yamlsource import DocPath, Document, LocationMap, where

RENDERED_KEYS = ("sources", "artifacts", "releaseSet")

_ENV = BoundedSandbox(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)


def is_template(text: str) -> bool:
    """True when ``text`` holds a Jinja2 expression or statement (the only strings rendered)."""
    return "{{" in text or "{%" in text


def render_document(document: Document, cell: Mapping[str, str]) -> Document:
    """``document`` with its vars, sources, artifacts and releaseSet strings rendered for ``cell``.

    Args:
        document: a merged raw recipe document (``vars`` may hold non-strings: they are passed
            through and reported by validation afterwards).
        cell: ``{"gpu": ..., "kubernetes": ..., "arch": ...}``.
    Returns:
        A new document; locations are unchanged (a rendered value keeps its template's location,
        whose ``text`` is the template).
    Raises:
        RecipeError: ``FILE:LINE: sources.kubelet.url: template error: 'kubernets' is undefined``,
            with a hint listing the names available there; also template syntax errors and
            sandbox violations.
    """
    axes = {axis: cell[axis] for axis in ("gpu", "kubernetes", "arch")}
    data = dict(document.data)
    locations = document.locations
    raw_vars = data.get("vars")
    rendered_vars: dict[str, Any] = {}
    if isinstance(raw_vars, dict):
        rendered_vars = {
            name: _render_value(
                value,
                ("vars", name),
                axes,
                locations,
                "gpu, kubernetes, arch (vars cannot use other vars)",
            )
            for name, value in raw_vars.items()
        }
        data["vars"] = rendered_vars
    metadata = data.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    context = {**axes, "vars": rendered_vars, "recipe": {"name": name}}
    available = ", ".join([*axes, "recipe.name", *(f"vars.{v}" for v in rendered_vars)])
    for key in RENDERED_KEYS:
        if key in data:
            data[key] = _render_value(data[key], (key,), context, locations, available)
    return Document(data, locations)


def _render_value(
    value: Any, path: DocPath, context: Mapping[str, Any], locations: LocationMap, available: str
) -> Any:
    if isinstance(value, str):
        return (
            _render_string(value, path, context, locations, available)
            if is_template(value)
            else value
        )
    if isinstance(value, dict):
        return {
            k: _render_value(v, (*path, k), context, locations, available) for k, v in value.items()
        }
    if isinstance(value, list):
        return [
            _render_value(v, (*path, i), context, locations, available) for i, v in enumerate(value)
        ]
    return value


def _render_string(
    text: str, path: DocPath, context: Mapping[str, Any], locations: LocationMap, available: str
) -> str:
    try:
        return render(_compile(text), context)
    except TemplateLimit as exc:
        # an input over a bound, as the README's exit-code table lists it (NVKR-E-LIMIT)
        raise LimitError(
            f"{where(locations, path)}: template: {exc.message or exc}",
            hint="nvkr bounds what a recipe's template may make (nvkr.bounds); a recipe field "
            "needs a short value: check the template",
        ) from None
    except jinja2.UndefinedError as exc:
        raise RecipeError(
            f"{where(locations, path)}: template error: {exc.message}",
            hint=f"available names: {available}",
        ) from None
    except jinja2.TemplateSyntaxError as exc:
        raise RecipeError(
            f"{where(locations, path)}: template error: {exc.message} (template line {exc.lineno})",
            hint="templates use Jinja2 syntax: {{ name }}, {% if ... %}...{% endif %}",
        ) from None
    except jinja2.TemplateError as exc:
        # SecurityError (sandbox) and the rest: still a recipe problem at this value.
        raise RecipeError(
            f"{where(locations, path)}: template error: {exc.message or exc}",
            hint=f"available names: {available}",
        ) from None
    except Exception as exc:
        # The template is the recipe author's code: `{{ gpu + 1 }}` fails here, not in nvkr.
        raise RecipeError(
            f"{where(locations, path)}: template error: {type(exc).__name__}: {exc}"
        ) from None


@lru_cache(maxsize=4096)
def _compile(text: str) -> jinja2.Template:
    # The same URL template is rendered for every variant; compile it once.
    return _ENV.from_string(text)
