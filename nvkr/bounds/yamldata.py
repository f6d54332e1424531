"""YAML with its aliases bounded: :func:`check_expansion` on composed nodes, :func:`load` for
plain data.

PyYAML composes an alias as the anchored node itself, so a "billion laughs" composes and even
constructs (into shared lists) in a blink; what expands it is whatever walks the result: a JSON
dump, a ``repr``, a schema check, cloud-init in the guest. The count here is the number of values
the document holds once expanded, computed once per distinct node (linear in the file), and a
node that contains itself is refused outright.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

from nvkr.bounds import MAX_YAML_NODES, check_size
from nvkr.errors import LimitError, UsageError


def _too_many(where: str | Path, node: Node, count: int | None) -> LimitError:
    at = f"{where}:{node.start_mark.line + 1}"
    if count is None:
        return LimitError(
            f"{at}: recursive YAML alias (it refers to the node that contains it)",
            hint="write the value out instead of referring to its own anchor",
        )
    return LimitError(
        f"{at}: the YAML document holds over {MAX_YAML_NODES} values once its aliases are "
        "expanded (nvkr.bounds.MAX_YAML_NODES)",
        hint="a document with aliases that refer to aliases grows exponentially; write the "
        "values out, or use fewer aliases",
    )


def check_expansion(root: Node | None, where: str | Path) -> int:
    """The number of values ``root`` holds with its aliases expanded.

    Raises:
        LimitError: over :data:`~nvkr.bounds.MAX_YAML_NODES`, or a node holding itself (naming
            ``where`` and the line of the node where the count went over).
    """
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def count(node: Node) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        if id(node) in open_:
            raise _too_many(where, node, None)
        total = 1
        if isinstance(node, MappingNode | SequenceNode):
            open_.add(id(node))
            children = (
                [n for pair in node.value for n in pair]
                if isinstance(node, MappingNode)
                else node.value
            )
            for child in children:
                total += count(child)
                if total > MAX_YAML_NODES:
                    raise _too_many(where, child, total)
            open_.discard(id(node))
        sizes[id(node)] = total
        return total

    return count(root) if root is not None else 0


def compose(
    text: str | bytes, where: str | Path, loader: type[yaml.SafeLoader] = yaml.SafeLoader
) -> Node | None:
    """The single document of ``text`` composed by ``loader``, its expansion checked.

    Raises:
        LimitError: ``text`` over :data:`~nvkr.bounds.MAX_FILE_BYTES`, or its expansion over
            :data:`~nvkr.bounds.MAX_YAML_NODES`.
        yaml.YAMLError: as PyYAML raises it (callers word it with the line).
    """
    check_size(text, where)
    composer = loader(text)
    try:
        root = composer.get_single_node()
    finally:
        composer.dispose()
    check_expansion(root, where)
    return root


def construct(node: Node | None, loader: type[yaml.SafeLoader] = yaml.SafeLoader) -> Any:
    """The data of a composed (and checked) ``node``, as ``loader`` constructs it."""
    if node is None:
        return None
    constructor = loader("")
    try:
        return constructor.construct_document(node)
    finally:
        constructor.dispose()


def load(
    text: str | bytes, where: str | Path, loader: type[yaml.SafeLoader] = yaml.SafeLoader
) -> Any:
    """``yaml.load(text, Loader=loader)`` within the bounds (:func:`compose`)."""
    return construct(compose(text, where, loader), loader)


def load_file(path: Path, what: str, loader: type[yaml.SafeLoader] = yaml.SafeLoader) -> Any:
    """The data of the YAML file ``path`` (a ``what``: "policy", "nvkr config"), within bounds.

    Raises:
        LimitError: over a bound.
        UsageError: not UTF-8 or not YAML (naming the file and line).
        OSError: the file cannot be read (callers word it).
    """
    from nvkr.bounds import read_limited

    raw = read_limited(path, what)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UsageError(f"{path}: the {what} is not UTF-8 (byte {e.start})") from None
    try:
        return load(text, path, loader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise UsageError(f"{path}{line}: the {what} is not valid YAML: {e}") from None
