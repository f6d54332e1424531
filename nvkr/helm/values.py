"""Pinning images in a chart's ``values.yaml``, every byte the build does not set kept as written.

For each image the recipe names (``images: {KEY: {artifact, repository}}``) the helm-chart
builder sets ``KEY.repository`` and ``KEY.digest`` (``sha256:<hex>`` of the image index it built),
where ``KEY`` is a dotted path of mappings (``image``, ``agent.image``), created when missing;
the recipe's ``values`` (``{KEY: string, boolean or integer}``, e.g. ``otlp.endpoint``,
``tags.ovs-node: false``) are set the same way.

The file is edited as text, never re-dumped: PyYAML composes it into nodes that know where they
were written, each scalar the build sets is replaced where it stands (in its quoting, unless the
new value needs quotes: :func:`nvkr.yamlemit.scalar`), a missing key goes after the last entry of
its mapping at that mapping's indentation (block style) or before its ``}`` (flow style), and a
null (``image:``, ``image: ~``) becomes a flow mapping in place. Comments, key order,
indentation, quoting, blank lines and line endings stay: Helm packages ``values.yaml`` byte for
byte and ``helm show values`` prints it, so what the chart's author wrote is what ships. The
result is parsed again and must be the old values with the pins set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any, cast

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from nvkr.bounds import check_size
from nvkr.bounds.yamldata import compose
from nvkr.errors import BuildError
from nvkr.yamlemit import double_quoted, scalar

_NULL_TAG = "tag:yaml.org,2002:null"
_PROPERTIES = re.compile(r"(?:[&!]\S*[ \t]+)*")  # an anchor or tag before a scalar
# {"image": {"repository": ..., "digest": ...}, "agent": {"image": {...}}}: leaves are strings,
# booleans or integers (a recipe's values)
Tree = dict[str, Any]
Leaf = str | bool | int


def _leaf_text(value: Leaf, *, flow: bool = False, style: str | None = None) -> str:
    """A leaf as YAML: a string through :func:`nvkr.yamlemit.scalar` (quoted when it must be),
    a boolean as ``true``/``false``, an integer in decimal."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return scalar(value, flow=flow, style=style)


def emitter_versions() -> dict[str, str]:
    """Versions of the YAML libraries whose behaviour shapes bytes in a chart archive (PyYAML
    writes Chart.yaml and Chart.lock and parses values.yaml for the edits; both decide what
    needs quotes, :mod:`nvkr.yamlemit`): the helm-chart builder's tool versions, so an upgrade
    that could change those bytes also changes the action key."""
    return {"pyyaml": version("PyYAML"), "ruamel.yaml": version("ruamel.yaml")}


class _Alias(Node):
    id = "alias"


class _Composer(yaml.SafeLoader):
    """Composes nodes with their marks; an alias stays an :class:`_Alias` (where it is written)
    instead of becoming the anchored node (where that is written)."""

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        this = cast(Any, self)  # the composer's methods are untyped in types-PyYAML
        if this.check_event(yaml.AliasEvent):
            event = this.get_event()
            return _Alias("alias", event.anchor, event.start_mark, event.end_mark)
        return cast(Node, super().compose_node(parent, index))


def _tree(
    images: dict[str, tuple[str, str]], where: str, values: dict[str, Leaf] | None = None
) -> Tree:
    tree: Tree = {}
    for key, value in sorted((values or {}).items()):
        *parents, leaf = key.split(".")
        node = _mapping_at(tree, parents, f"{where}: values key {key!r} lies under another value")
        node[leaf] = value
    for key, (repository, digest) in sorted(images.items()):
        error = f"{where}: images key {key!r} lies under another key's pin"
        node = _mapping_at(tree, key.split("."), error)
        for leaf, value in (("repository", repository), ("digest", digest)):
            if isinstance(node.get(leaf), dict):
                raise BuildError(f"{where}: images key {key}.{leaf} lies under {key!r}'s pin")
            if leaf in node:
                raise BuildError(f"{where}: values key {key}.{leaf} is also {key!r}'s image pin")
            node[leaf] = value
    return tree


def _mapping_at(tree: Tree, parts: list[str], error: str) -> Tree:
    """The mapping of ``tree`` at the path ``parts``, created when missing; ``error`` when a
    part on the way already holds a value."""
    node = tree
    for part in parts:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise BuildError(error)
    return node


def _kind(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    return "an alias" if isinstance(node, _Alias) else "a scalar"


@dataclass
class _Editor:
    """Text edits of one file: ``(start, end, replacement, order)`` on character offsets."""

    text: str
    where: str
    newline: str
    edits: list[tuple[int, int, str, int]] = field(default_factory=list)

    def edit(self, start: int, end: int, replacement: str) -> None:
        self.edits.append((start, end, replacement, len(self.edits)))

    def applied(self) -> str:
        out = self.text
        # right to left; of two insertions at one place the first recorded (the deeper
        # mapping's) comes first in the text
        for start, end, replacement, _ in sorted(self.edits, key=lambda e: (e[0], e[3]))[::-1]:
            out = out[:start] + replacement + out[end:]
        return out

    def fail(self, node: Node, message: str, hint: str | None = None) -> BuildError:
        return BuildError(f"{self.where}: line {node.start_mark.line + 1}: {message}", hint=hint)

    # -- writing values ------------------------------------------------------------------------
    def flow_text(self, tree: Tree) -> str:
        items = [
            f"{scalar(k, flow=True)}: {self.value_text(v, flow=True)}" for k, v in tree.items()
        ]
        return "{" + ", ".join(items) + "}"

    def value_text(self, value: Leaf | Tree, *, flow: bool) -> str:
        return self.flow_text(value) if isinstance(value, dict) else _leaf_text(value, flow=flow)

    def block_lines(self, tree: Tree, indent: int) -> str:
        out = []
        for key, value in tree.items():
            head = " " * indent + scalar(key)
            if not isinstance(value, dict):
                out.append(f"{head}: {_leaf_text(value)}{self.newline}")
            else:
                out.append(f"{head}:{self.newline}{self.block_lines(value, indent + 2)}")
        return "".join(out)

    # -- where things go -----------------------------------------------------------------------
    def value_span(self, node: Node) -> tuple[int, int]:
        """The scalar's own text (after any anchor or tag), as offsets."""
        start, end = node.start_mark.index, node.end_mark.index
        props = _PROPERTIES.match(self.text, start, end)
        return (props.end() if props else start), end

    def after_colon(self, node: Node) -> int:
        """Where an empty value goes: its mark, which PyYAML puts right after the ':'."""
        at = node.start_mark.index
        if self.text[at - 1 : at] != ":":
            raise self.fail(node, "an empty value nvkr cannot find the place of")
        return at

    def line_after(self, node: Node) -> int:
        """Offset of the line after the last line ``node`` (a block collection) writes to."""
        while isinstance(node, MappingNode | SequenceNode) and not node.flow_style and node.value:
            last = node.value[-1]
            node = last[1] if isinstance(node, MappingNode) else last
        at = node.end_mark.index
        line_start = self.text.rfind("\n", 0, at) + 1
        if not self.text[line_start:at].strip(" "):
            return line_start  # a block scalar ends after its line break (and the next indent)
        nl = self.text.find("\n", at)
        if nl < 0:
            self.edit(len(self.text), len(self.text), self.newline)
            return len(self.text)
        return nl + 1

    # -- the walk ------------------------------------------------------------------------------
    def set_scalar(self, node: Node, value: Leaf, *, flow: bool) -> None:
        start, end = self.value_span(node)
        style = node.style if isinstance(node, ScalarNode) else None
        if style in ("|", ">"):
            written = self.text[start:end]
            tail = written[len(written.rstrip(" \t\r\n")) :]
            text = double_quoted(value) if isinstance(value, str) else _leaf_text(value)
            self.edit(start, end, text + tail)
        elif start == end:
            self.edit(self.after_colon(node), end, " " + _leaf_text(value, flow=flow))
        elif isinstance(value, str):
            self.edit(start, end, scalar(value, flow=flow, style=style))
        else:
            self.edit(start, end, _leaf_text(value))

    def set_mapping(self, node: Node, tree: Tree, path: list[str], *, flow: bool) -> None:
        if isinstance(node, MappingNode):
            self.mapping(node, tree, path)
        elif isinstance(node, ScalarNode) and node.style is None and node.tag == _NULL_TAG:
            start, end = self.value_span(node)
            if start == end:
                start = end = self.after_colon(node)
            prefix = " " if start == end else ""
            self.edit(start, end, prefix + self.flow_text(tree))
        else:
            dotted = ".".join(path)
            written = self.text[node.start_mark.index : node.end_mark.index]
            raise BuildError(
                f"{self.where}: {dotted} is {written}, not a mapping, so the image pins under it "
                "cannot be set",
                hint=f"make {dotted} a mapping in values.yaml, or point the recipe's images key "
                "at one",
            )

    def mapping(self, node: MappingNode, tree: Tree, path: list[str]) -> None:
        keys: dict[str, tuple[Node, Node]] = {}
        merges = False
        for k, v in node.value:
            if isinstance(k, ScalarNode):
                if k.value in keys:
                    raise self.fail(
                        k,
                        f"duplicate key {k.value!r}",
                        hint="Helm refuses a values.yaml that defines a key twice",
                    )
                keys[k.value] = (k, v)
                merges |= k.tag == "tag:yaml.org,2002:merge"
        missing: Tree = {}
        for name, want in tree.items():
            dotted = ".".join([*path, name])
            if name not in keys:
                if merges:
                    raise self.fail(
                        node,
                        f"{'.'.join(path) or 'the top level'} has a merge key (<<), so {dotted} "
                        "cannot be added in place",
                        hint="write the keys out instead of merging them in",
                    )
                missing[name] = want
                continue
            _, value = keys[name]
            if isinstance(value, _Alias):
                raise self.fail(
                    value,
                    f"{dotted} is an alias (*{value.value}): nvkr sets image pins in place and "
                    "cannot set them through an alias",
                    hint=f"write {dotted} out as a mapping",
                )
            if not isinstance(want, dict):
                if not isinstance(value, ScalarNode):
                    raise self.fail(value, f"{dotted} is {_kind(value)}, not a scalar")
                self.set_scalar(value, want, flow=bool(node.flow_style))
            else:
                self.set_mapping(value, want, [*path, name], flow=bool(node.flow_style))
        if missing:
            self.insert(node, missing)

    def insert(self, node: MappingNode, tree: Tree) -> None:
        if node.flow_style:
            end = node.end_mark.index
            if node.value:
                at, text = node.value[-1][1].end_mark.index, ", " + self.flow_text(tree)[1:-1]
            else:
                at, text = end - 1, self.flow_text(tree)[1:-1]
            self.edit(at, at, text)
            return
        indent = node.value[0][0].start_mark.column
        at = self.line_after(node)
        self.edit(at, at, self.block_lines(tree, indent))


def _expected(values: Any, tree: Tree) -> Any:
    """``values`` (as loaded) with ``tree``'s pins set, the way the edits set them."""
    if not isinstance(values, dict):
        values = {}
    for key, want in tree.items():
        if not isinstance(want, dict):
            values[key] = want
        else:
            values[key] = _expected(values.get(key), want)
    return values


def set_images(
    data: bytes | None,
    images: dict[str, tuple[str, str]],
    where: str,
    values: dict[str, Leaf] | None = None,
) -> bytes:
    """``values.yaml`` (``data``; None when the chart has none) with each
    ``images[KEY] = (repository, "sha256:<hex>")`` written to ``KEY.repository``/``KEY.digest``
    and each of ``values`` (``{dotted KEY: leaf}``, the recipe's own) to ``KEY``, every other
    byte unchanged (module docstring).

    Raises:
        LimitError: the file is over a bound of :mod:`nvkr.bounds` (its size, its aliases).
        BuildError: the file is not UTF-8 or not one YAML mapping; a key on the way is defined
            twice, is an alias or comes from a merge key (``<<``); a part of ``KEY`` holds
            something other than a mapping, or ``repository``/``digest`` something other than a
            scalar (names the file, the line and the key).
    """
    try:
        text = (data or b"").decode("utf-8")
    except UnicodeDecodeError as e:
        raise BuildError(f"{where}: not UTF-8 (byte {e.start})") from None
    check_size(text, where, "values.yaml")
    tree = _tree(images, where, values)
    newline = "\r\n" if "\r\n" in text else "\n"
    editor = _Editor(text, where, newline)
    try:
        loader = _Composer(text)
        try:
            root = loader.get_single_node()
        finally:
            loader.dispose()
        # bounded first: a billion laughs composes in a blink, then expands in repr()
        before = yaml.safe_load(text) if compose(text, where) is not None else None
    except yaml.YAMLError as e:
        raise BuildError(
            f"{where}: cannot edit values.yaml: {e}",
            hint="values.yaml must be one YAML document (a mapping)",
        ) from None
    if root is None or (isinstance(root, ScalarNode) and root.tag == _NULL_TAG):
        if text and not text.endswith("\n"):
            editor.edit(len(text), len(text), newline)
        editor.edit(len(text), len(text), editor.block_lines(tree, 0))
    elif isinstance(root, MappingNode):
        editor.mapping(root, tree, [])
    else:
        raise BuildError(f"{where}: values.yaml holds {_kind(root)}, not a mapping")
    out = editor.applied()
    try:
        after = yaml.safe_load(out)
    except yaml.YAMLError as e:
        after = e
    if repr(after) != repr(_expected(before, tree)):
        raise BuildError(
            f"{where}: setting the image pins and values in place did not give the values expected",
            hint="this is a bug in nvkr, please report it with the chart's values.yaml",
        )
    return out.encode()
