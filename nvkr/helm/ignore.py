"""``.helmignore`` rules with Helm's own semantics (helm/helm ``pkg/ignore/rules.go``).

The helm-chart builder walks a chart directory the way ``helm package`` does and drops what the
chart's ``.helmignore`` names, so a chart nvkr packages holds the same files Helm's would. Helm's
rules are not gitignore's, and this module copies them, quirks included:

- one pattern per line, surrounding whitespace trimmed; blank lines and ``#`` comments skipped;
  ``**`` is an error, and so is a pattern Go's ``filepath.Match`` cannot compile;
- a pattern without ``/`` is matched against the last path component only (``*.swp``);
  a pattern with ``/`` is matched against the whole path relative to the chart
  (``templates/*.bak``); a leading ``/`` only anchors (``/README.md`` is the top-level file);
  ``*`` and ``?`` never match ``/`` (glob per component);
- a trailing ``/`` makes a rule apply to directories only; an ignored directory is skipped whole;
- rules are evaluated in order and the first one that decides wins. A negated rule ``!pat``
  decides *ignore* for every path it does **not** match (and, as ``!dir/``, for every file), and
  passes a path it matches on to the next rules: ``!pat`` keeps nothing that an earlier rule
  ignored, and ignores everything that is not ``pat`` (Helm's behaviour, not gitignore's);
- Helm appends the default rule ``templates/.?*`` (dot files under ``templates/``);
- ``.helmignore`` itself is not special: Helm packages it unless a rule names it.

A pattern without ``/`` (``values-*.yaml``, ``ci/``) matches at any depth, so one meant for the
chart's top level also drops files of the subcharts vendored under ``charts/``:
:meth:`HelmIgnore.deciding_rule` names the rule that dropped a path, and the chart loader warns
about each such file (:func:`nvkr.helm.chart.load_dir`); ``/values-*.yaml`` anchors it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass

from nvkr.errors import BuildError

#: Helm's rule appended after the file's own (``Rules.AddDefaults``).
DEFAULT_RULES = ("templates/.?*",)


class PatternError(ValueError):
    """A pattern Go's ``path/filepath.Match`` rejects (``filepath.ErrBadPattern``)."""


def _class_char(pat: str, i: int) -> tuple[str, int]:
    """One character of a ``[...]`` class at ``pat[i]`` (Go's ``getEsc``); returns it and the
    next index."""
    if i >= len(pat) or pat[i] in "-]":
        raise PatternError("syntax error in pattern")
    if pat[i] == "\\":
        i += 1
        if i >= len(pat):
            raise PatternError("syntax error in pattern")
    return pat[i], i + 1


def glob_regex(pat: str) -> re.Pattern[str]:
    """Translate a Go ``filepath.Match`` pattern (on ``/``-separated paths) to a regex.

    ``*`` is any run of non-``/`` characters, ``?`` one non-``/`` character, ``[a-z]`` and
    ``[^a-z]`` character classes (which, as in Go, may match ``/``), ``\\c`` a literal ``c``.

    Raises:
        PatternError: an unclosed class, an empty class, a bad range or a trailing ``\\``.
    """
    out: list[str] = []
    i = 0
    while i < len(pat):
        c = pat[i]
        if c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "\\":
            if i + 1 >= len(pat):
                raise PatternError("syntax error in pattern")
            out.append(re.escape(pat[i + 1]))
            i += 2
        elif c == "[":
            i += 1
            negated = i < len(pat) and pat[i] == "^"
            if negated:
                i += 1
            ranges: list[str] = []
            while True:
                if i < len(pat) and pat[i] == "]" and ranges:
                    i += 1
                    break
                lo, i = _class_char(pat, i)
                hi = lo
                if i < len(pat) and pat[i] == "-":
                    hi, i = _class_char(pat, i + 1)
                ranges.append(re.escape(lo) if lo == hi else f"{re.escape(lo)}-{re.escape(hi)}")
                if hi < lo:  # Go accepts a reversed range and never matches it
                    ranges[-1] = ""
            body = "".join(ranges)
            if body:
                out.append(("[^" if negated else "[") + body + "]")
            else:
                out.append("." if negated else "(?!)")
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out), re.DOTALL)


@dataclass(frozen=True)
class _Rule:
    raw: str
    match: Callable[[str], bool]
    negate: bool
    must_dir: bool
    #: matched against the last path component only: at any depth
    unanchored: bool = False
    #: the line of the ``.helmignore`` (None for :data:`DEFAULT_RULES`)
    line: int | None = None


def _parse_rule(line: str) -> _Rule | None:
    rule = line.strip()
    if not rule or rule.startswith("#"):
        return None
    if "**" in rule:
        raise PatternError("double-star (**) syntax is not supported")
    glob_regex(rule)  # Helm compiles the raw rule (with its '!' and '/') once to reject bad ones
    raw, negate, must_dir = rule, False, False
    if rule.startswith("!"):
        negate, rule = True, rule[1:]
    if rule.endswith("/"):
        must_dir, rule = True, rule[:-1]
    if rule.startswith("/") or "/" in rule:
        rx = glob_regex(rule.removeprefix("/"))

        def match(path: str) -> bool:
            return rx.fullmatch(path) is not None

    else:
        rx = glob_regex(rule)

        def match(path: str) -> bool:
            return rx.fullmatch(path.rsplit("/", 1)[-1]) is not None

    unanchored = not (rule.startswith("/") or "/" in rule)
    return _Rule(raw=raw, match=match, negate=negate, must_dir=must_dir, unanchored=unanchored)


class HelmIgnore:
    """Parsed ``.helmignore`` rules plus Helm's defaults.

    Build with :meth:`parse`; ask :meth:`ignored` for each path of the walk.
    """

    def __init__(self, rules: list[_Rule], where: str = ".helmignore") -> None:
        self._rules = rules
        self.where = where

    @classmethod
    def parse(cls, text: str, *, where: str = ".helmignore") -> HelmIgnore:
        """Rules from the text of a ``.helmignore`` (``where`` names it in errors), then
        :data:`DEFAULT_RULES`.

        Raises:
            BuildError: a ``**`` or a pattern Go's ``filepath.Match`` rejects (names the line).
        """
        rules: list[_Rule] = []
        own = len(text.splitlines())
        for lineno, line in enumerate([*text.splitlines(), *DEFAULT_RULES], start=1):
            try:
                rule = _parse_rule(line)
            except PatternError as e:
                raise BuildError(
                    f"{where}:{lineno}: pattern {line.strip()!r}: {e}",
                    hint="Helm's .helmignore takes Go filepath.Match globs, one per line; "
                    "a pattern without '/' matches names in every directory",
                ) from None
            if rule is not None:
                rules.append(dataclasses.replace(rule, line=lineno if lineno <= own else None))
        return cls(rules, where)

    def ignored(self, path: str, is_dir: bool) -> bool:
        """Whether Helm leaves out ``path`` (``/``-separated, relative to the chart directory).

        Mirrors ``Rules.Ignore``: the first deciding rule wins (see the module doc for ``!``).
        """
        return self.deciding_rule(path, is_dir) is not None

    def deciding_rule(self, path: str, is_dir: bool) -> _Rule | None:
        """The rule that leaves ``path`` out (as :meth:`ignored`), or None when Helm keeps it."""
        if path in ("", ".", "./"):
            return None
        for rule in self._rules:
            if rule.negate:
                if rule.must_dir and not is_dir:
                    return rule
                if not rule.match(path):
                    return rule
                continue
            if rule.must_dir and not is_dir:
                continue
            if rule.match(path):
                return rule
        return None

    def subchart_warning(self, path: str, is_dir: bool, chart: str = ".") -> str | None:
        """A warning when ``path`` (relative to the directory ``chart`` names in the warning),
        under ``charts/``, is left out by a pattern of the file's
        own without ``/``, which matches at any depth (one meant for the top level drops the
        subcharts' files too); None otherwise."""
        rule = self.deciding_rule(path, is_dir)
        if (
            rule is None
            or rule.negate
            or not rule.unanchored
            or rule.line is None
            or not path.startswith("charts/")
        ):
            return None
        what = "directory" if is_dir else "file"
        return (
            f"{self.where}:{rule.line}: pattern {rule.raw!r} has no leading '/', so it matches "
            f"at any depth and drops the subchart {what} {chart}/{path} under charts/ too (write "
            f"'/{rule.raw}' for the top level only)"
        )
