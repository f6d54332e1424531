"""Pinning images in a chart's ``values.yaml``, keeping the file's comments and layout.

For each image the recipe names (``images: {KEY: {artifact, repository}}``) the helm-chart
builder sets ``KEY.repository`` and ``KEY.digest`` (``sha256:<hex>`` of the image index it built),
where ``KEY`` is a dotted path of mappings (``image``, ``agent.image``), created when missing.
Everything else stays: the file is edited with ruamel.yaml's round-trip mode, which keeps
comments, key order and quoting (indentation is normalised to two spaces). Helm packages
``values.yaml`` byte for byte, so what is written here is what ships.
"""

from __future__ import annotations

import io
from importlib.metadata import version
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError

from nvkr.errors import BuildError


def emitter_versions() -> dict[str, str]:
    """Versions of the YAML emitters whose bytes end up in a chart archive (ruamel.yaml for
    values.yaml, PyYAML for Chart.yaml and Chart.lock): the helm-chart builder's tool versions,
    so an upgrade that could change those bytes also changes the action key."""
    return {"pyyaml": version("PyYAML"), "ruamel.yaml": version("ruamel.yaml")}


def _yaml() -> YAML:
    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 1 << 16  # never fold long strings the author kept on one line
    return y


def set_images(data: bytes | None, images: dict[str, tuple[str, str]], where: str) -> bytes:
    """``values.yaml`` (``data``; None when the chart has none) with each
    ``images[KEY] = (repository, "sha256:<hex>")`` written to ``KEY.repository``/``KEY.digest``.

    Raises:
        BuildError: the file is not one YAML mapping, has duplicate keys, or a part of ``KEY``
            holds something other than a mapping (names the file and the key).
    """
    y = _yaml()
    try:
        doc: Any = y.load(data) if data else None
    except YAMLError as e:
        raise BuildError(
            f"{where}: cannot edit values.yaml: {e}",
            hint="values.yaml must be one YAML document (a mapping) without duplicate keys",
        ) from None
    if doc is None:
        doc = CommentedMap()
    if not isinstance(doc, dict):
        raise BuildError(f"{where}: values.yaml holds a {type(doc).__name__}, not a mapping")
    for key, (repository, digest) in sorted(images.items()):
        node: Any = doc
        parts = key.split(".")
        for i, part in enumerate(parts):
            child = node.get(part)
            if child is None:
                child = CommentedMap()
                node[part] = child
            elif not isinstance(child, dict):
                raise BuildError(
                    f"{where}: {'.'.join(parts[: i + 1])} is {child!r}, not a mapping, so "
                    f"{key}.repository and {key}.digest cannot be set",
                    hint=f"make {key} a mapping in values.yaml, or point the recipe's images "
                    "key at one",
                )
            node = child
        node["repository"] = repository
        node["digest"] = digest
    out = io.StringIO()
    y.dump(doc, out)
    return out.getvalue().encode()
