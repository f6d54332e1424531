"""YAML files as plain data plus where every value was written.

The first step of the recipe data flow: a recipe file (or a file it extends) becomes a
:class:`Document`, JSON-shaped data (dicts, lists, str, int, float, bool, None) and a location
map from each value's path (``("sources", "kubelet", "sha256")``, ``("matrix", "kubernetes", 0)``)
to the file, line, column and raw scalar text it came from. Every later error message (schema,
template, reference) names ``FILE:LINE`` through this map, and quotes values as written, so a
``1.30`` that YAML read as the float 1.3 is reported as ``1.30``.

We compose YAML into nodes (libyaml's C parser when available) and build the data ourselves
instead of using the constructor: that is where paths are known, where duplicate keys can be
caught (PyYAML silently keeps the last) and where anything that is not JSON-shaped is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from nvkr.bounds import check_size, read_limited
from nvkr.bounds.yamldata import check_expansion
from nvkr.errors import RecipeError

DocPath = tuple[str | int, ...]

_TAG = "tag:yaml.org,2002:"
_STR, _INT, _FLOAT, _BOOL, _NULL = (_TAG + t for t in ("str", "int", "float", "bool", "null"))
_MAP, _SEQ, _MERGE, _TIMESTAMP = (_TAG + t for t in ("map", "seq", "merge", "timestamp"))

_Base: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class RecipeYamlLoader(_Base):  # type: ignore[valid-type,misc]
    """Safe loader without implicit timestamps.

    ``2024-01-01`` stays the string it looks like: no recipe field is a date, and a date object
    has no JSON form for the recipe digest.
    """

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP]
        for first, resolvers in _Base.yaml_implicit_resolvers.items()
    }


@dataclass(frozen=True)
class Location:
    """Where a value was written.

    Attributes:
        file: the file as the loader reached it (relative when the recipe path was relative).
        line: 1-based line.
        column: 1-based column.
        text: the raw scalar text as written (``1.30``, ``no``, unquoted string content); empty
            for mappings and lists, whose location is their key's (or first item's) position.
    """

    file: Path
    line: int
    column: int
    text: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


LocationMap = dict[DocPath, Location]


@dataclass(frozen=True)
class Document:
    """JSON-shaped data and the location of each value in it.

    Attributes:
        data: the top-level mapping.
        locations: ``{path tuple: Location}``; ``()`` is the document itself.
    """

    data: dict[str, Any]
    locations: LocationMap


EMPTY = Document({}, {})


def format_path(path: DocPath) -> str:
    """``("sources", "kubelet", "url")`` -> ``sources.kubelet.url``; list indices as ``[0]``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + part
    return text


def locate(locations: LocationMap, path: DocPath) -> Location | None:
    """The location of ``path``, else of its nearest ancestor that has one (None if none has)."""
    for end in range(len(path), -1, -1):
        found = locations.get(path[:end])
        if found is not None:
            return found
    return None


def read_yaml(path: Path, raw: bytes | None = None, what: str = "recipe") -> Document:
    """Read one YAML file into a :class:`Document`.

    Args:
        path: the file; kept as given in every :class:`Location`.
        raw: the file's bytes when the caller already holds them (an edit not yet written,
            ``nvkr lock --update``); None reads ``path``.
        what: what the file is, in a limit's message ("recipe", "rules file").
    Returns:
        The document; its top level is a mapping.
    Raises:
        RecipeError: unreadable file or not UTF-8; ``FILE:LINE:COL: YAML syntax error: ...``;
            a duplicate key; a non-string key; a tag other than str/int/float/bool/null/map/seq;
            several documents in one file; a top level that is not a mapping.
        LimitError: the file is over nvkr.bounds.MAX_FILE_BYTES, or its aliases expand to over
            MAX_YAML_NODES values (or refer to themselves).
    """
    try:
        if raw is None:
            raw = read_limited(path, what)
        else:
            check_size(raw, path, what)
    except FileNotFoundError:
        raise RecipeError(
            f"{path}: file not found",
            hint="paths are relative to the current directory (RECIPE defaults to recipes/default.yaml) "
            "or, in extends, to the file that names them",
        ) from None
    except OSError as exc:
        raise RecipeError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise RecipeError(
            f"{path}: not UTF-8 (byte {exc.start})", hint="save the file as UTF-8"
        ) from None
    try:
        root = yaml.compose(text, Loader=RecipeYamlLoader)
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(path, exc) from None
    except yaml.YAMLError as exc:
        raise RecipeError(f"{path}: YAML error: {exc}") from None
    if root is None:
        raise RecipeError(f"{path}:1:1: the top level must be a mapping (got an empty document)")
    if not isinstance(root, MappingNode):
        got = "a list" if isinstance(root, SequenceNode) else f"the scalar {root.value!r}"
        raise RecipeError(f"{_where(path, root)}: the top level must be a mapping (got {got})")
    # aliases let a small file expand exponentially ("billion laughs"): counted before building
    check_expansion(root, path)
    builder = _Builder(path)
    data = builder.build(root, (), root)
    return Document(data, builder.locations)


def _syntax_error(path: Path, exc: yaml.MarkedYAMLError) -> RecipeError:
    mark = exc.problem_mark or exc.context_mark
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
    problem = exc.problem or "invalid YAML"
    if exc.context:
        problem += f" ({exc.context}"
        if exc.context_mark and exc.context_mark is not mark:
            problem += f" started at line {exc.context_mark.line + 1}"
        problem += ")"
    return RecipeError(
        f"{where}: YAML syntax error: {problem}",
        hint="check the indentation, and quote values holding ':', '{', '[' or '#'",
    )


def _where(path: Path, node: Node) -> str:
    return f"{path}:{node.start_mark.line + 1}:{node.start_mark.column + 1}"


class _Builder:
    """Walks a composed node tree once, building data and the location map side by side."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self.locations: LocationMap = {}
        self._scalars = SafeConstructor()
        self._open: set[int] = set()

    def _location(self, node: Node, text: str = "") -> Location:
        return Location(self.file, node.start_mark.line + 1, node.start_mark.column + 1, text)

    def build(self, node: Node, path: DocPath, anchor: Node) -> Any:
        """Data for ``node`` at ``path``; ``anchor`` is where a collection is reported (its key)."""
        if isinstance(node, ScalarNode):
            self.locations[path] = self._location(node, node.value)
            return self._scalar(node)
        if id(node) in self._open:
            raise RecipeError(f"{_where(self.file, node)}: recursive YAML alias")
        self._open.add(id(node))
        try:
            self.locations[path] = self._location(anchor)
            if isinstance(node, SequenceNode):
                self._expect_tag(node, _SEQ, "list")
                return [self.build(item, (*path, i), item) for i, item in enumerate(node.value)]
            if isinstance(node, MappingNode):
                self._expect_tag(node, _MAP, "mapping")
                return self._mapping(node, path)
        finally:
            self._open.discard(id(node))
        raise RecipeError(f"{_where(self.file, node)}: unsupported YAML node")  # pragma: no cover

    def _expect_tag(self, node: Node, tag: str, kind: str) -> None:
        if node.tag != tag:
            raise RecipeError(
                f"{_where(self.file, node)}: unsupported YAML tag {node.tag} on a {kind}",
                hint="a recipe holds only strings, numbers, booleans, null, lists and mappings",
            )

    def _scalar(self, node: ScalarNode) -> Any:
        constructors = {
            _STR: self._scalars.construct_yaml_str,
            _INT: self._scalars.construct_yaml_int,
            _FLOAT: self._scalars.construct_yaml_float,
            _BOOL: self._scalars.construct_yaml_bool,
            _NULL: self._scalars.construct_yaml_null,
        }
        construct = constructors.get(node.tag)
        if construct is None:
            raise RecipeError(
                f"{_where(self.file, node)}: unsupported YAML tag {node.tag}",
                hint="a recipe holds only strings, numbers, booleans, null, lists and mappings",
            )
        return construct(node)

    def _mapping(self, node: MappingNode, path: DocPath) -> dict[str, Any]:
        out: dict[str, Any] = {}
        first_seen: dict[str, Node] = {}
        merges: list[Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                merges.append(value_node)
                continue
            key = self._key(key_node)
            if key in first_seen:
                raise RecipeError(
                    f"{_where(self.file, key_node)}: duplicate key '{key}' "
                    f"(first at line {first_seen[key].start_mark.line + 1})",
                    hint="YAML would silently keep the last one; remove or rename one of them",
                )
            first_seen[key] = key_node
            out[key] = self.build(
                value_node, (*path, key), key_node if _is_collection(value_node) else value_node
            )
        # YAML merge keys (<<): explicit keys win, then earlier merged mappings win over later ones.
        for merge_node in merges:
            sources = merge_node.value if isinstance(merge_node, SequenceNode) else [merge_node]
            for source in sources:
                if not isinstance(source, MappingNode):
                    raise RecipeError(
                        f"{_where(self.file, source)}: a YAML merge key (<<) needs a mapping or a list of mappings"
                    )
                scratch = _Builder(self.file)
                scratch._open = self._open
                merged = scratch.build(source, path, source)
                for key, value in merged.items():
                    if key in out:
                        continue
                    out[key] = value
                    prefix = (*path, key)
                    self.locations.update(
                        (p, loc)
                        for p, loc in scratch.locations.items()
                        if p[: len(prefix)] == prefix
                    )
        return out

    def _key(self, node: Node) -> str:
        if isinstance(node, ScalarNode) and node.tag == _STR:
            return str(node.value)
        if isinstance(node, ScalarNode):
            kind = {_INT: "an integer", _FLOAT: "a float", _BOOL: "a boolean", _NULL: "null"}.get(
                node.tag, node.tag
            )
            raise RecipeError(
                f"{_where(self.file, node)}: mapping key {node.value or '~'} is read by YAML as {kind}; "
                f'keys must be strings: quote it: "{node.value}"'
            )
        raise RecipeError(
            f"{_where(self.file, node)}: mapping keys must be strings, not a list or a mapping"
        )


def _is_collection(node: Node) -> bool:
    return isinstance(node, MappingNode | SequenceNode)


def where(locations: LocationMap, path: DocPath) -> str:
    """``FILE:LINE: field.path`` for messages (``FILE:LINE`` alone for the document root).

    The line is the nearest located ancestor's when ``path`` itself was never written (a default,
    a missing key).
    """
    location = locate(locations, path)
    prefix = str(location) if location else "<recipe>"
    return f"{prefix}: {format_path(path)}" if path else prefix
