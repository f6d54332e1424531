"""URL prefix mirrors: where to fetch a source from when its upstream is slow, blocked or offline.

Mirrors sit between a recipe's URLs and the network. ``nvkr build --mirror PREFIX=REPLACEMENT`` and
the ``mirrors:`` list of the user's config file both map a URL prefix to another; every fetcher
rewrites the URL it is about to open (a ``url``, a ``checksumUrl``, a git clone URL, a pip index)
just before opening it. A mirror changes where bytes come from, never which bytes are accepted:
digests, commits and lockfile entries keep the recipe's original URL (README, "Commands":
``--mirror`` "rewrites source URLs, never digests").
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nvkr.bounds import read_limited
from nvkr.bounds.yamldata import load
from nvkr.errors import UsageError


def default_config_path() -> Path:
    """``$NVKR_CONFIG`` if set, else ``~/.config/nvkr/config.yaml`` (the file may not exist)."""
    env = os.environ.get("NVKR_CONFIG")
    return Path(env).expanduser() if env else Path.home() / ".config" / "nvkr" / "config.yaml"


def mirror_label(url: str, origin: str | None) -> str:
    """``url`` for messages: ``"<url> (mirror of <origin>)"`` when a mirror rewrote ``origin``."""
    return f"{url} (mirror of {origin})" if origin and origin != url else url


def read_config(path: Path | None = None) -> tuple[dict[str, Any], str]:
    """The top-level map of an nvkr config file (``path``, default :func:`default_config_path`;
    empty when the file does not exist or is empty) and how messages name the file.

    Raises:
        UsageError: the file cannot be read, is not UTF-8, not YAML or not a map.
    """
    path = path if path is not None else default_config_path()
    where = f"nvkr config {path}"
    try:
        text = read_limited(path, "nvkr config").decode("utf-8")
    except FileNotFoundError:
        return {}, where
    except OSError as e:
        raise UsageError(f"cannot read nvkr config {path}: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise UsageError(
            f"nvkr config {path} is not UTF-8 (byte {e.start})", hint="save the file as UTF-8"
        ) from None
    try:
        data: Any = load(text, path)
    except yaml.YAMLError as e:
        raise UsageError(f"nvkr config {path} is not valid YAML: {e}") from e
    if data is None:
        return {}, where
    if not isinstance(data, dict):
        raise UsageError(f"nvkr config {path}: expected a map at the top level")
    return data, where


#: the config file's top-level keys, each read by its owner: ``mirrors`` (:class:`Mirrors`),
#: ``snapshots`` (:class:`nvkr.fetch.snapshots.SnapshotArchives`), ``cache``
#: (:mod:`nvkr.cache.settings`)
CONFIG_KEYS = ("cache", "mirrors", "snapshots")


def unknown_config_keys(path: Path | None = None) -> list[str]:
    """The config file's top-level keys no reader of this nvkr reads (a typo such as
    ``snapshot:`` is silently ignored by the readers: ``nvkr validate`` names it).

    Raises:
        UsageError: as :func:`read_config`.
    """
    data, _ = read_config(path)
    return sorted(str(k) for k in data if k not in CONFIG_KEYS)


@dataclass(frozen=True)
class Mirrors:
    """An ordered set of ``(prefix, replacement)`` URL rewrites.

    :meth:`rewrite` replaces the longest matching prefix; between equal prefixes the earlier entry
    wins, which is how command-line mirrors override the config file (see :meth:`merged`).
    """

    entries: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, specs: Iterable[str]) -> Mirrors:
        """Mirrors from ``--mirror`` values, each ``PREFIX=REPLACEMENT`` (split at the first ``=``).

        Raises:
            UsageError: a value has no ``=`` or an empty side.
        """
        entries: list[tuple[str, str]] = []
        for spec in specs:
            prefix, sep, replacement = spec.partition("=")
            if not sep or not prefix or not replacement:
                raise UsageError(
                    f"--mirror {spec!r}: expected PREFIX=REPLACEMENT",
                    hint="e.g. --mirror https://dl.k8s.io/=http://127.0.0.1:8080/k8s/",
                )
            entries.append((prefix, replacement))
        return cls(tuple(entries))

    @classmethod
    def from_config(cls, path: Path | None = None) -> Mirrors:
        """Mirrors from the ``mirrors:`` list of an nvkr config file (YAML)::

            mirrors:
              - {prefix: "https://dl.k8s.io/", replacement: "http://mirror.local/k8s/"}

        ``path`` defaults to :func:`default_config_path`. A missing file, or one without a
        ``mirrors`` key, gives no mirrors; other top-level keys are left to their owners.

        Raises:
            UsageError: the file is not valid YAML, or ``mirrors`` is not a list of
                ``{prefix, replacement}`` maps of non-empty strings.
        """
        data, where = read_config(path)
        raw = data.get("mirrors")
        if raw is None:
            return cls()
        if not isinstance(raw, list):
            raise UsageError(f"{where}: 'mirrors' must be a list of {{prefix, replacement}}")
        entries: list[tuple[str, str]] = []
        for i, item in enumerate(raw):
            if (
                not isinstance(item, dict)
                or set(item) != {"prefix", "replacement"}
                or not all(isinstance(v, str) and v for v in item.values())
            ):
                raise UsageError(
                    f"{where}: mirrors[{i}] must be a map with exactly the non-empty "
                    f"strings 'prefix' and 'replacement', got {item!r}"
                )
            entries.append((item["prefix"], item["replacement"]))
        return cls(tuple(entries))

    def merged(self, other: Mirrors) -> Mirrors:
        """These entries, then ``other``'s: call it on the command-line mirrors with the config's."""
        return Mirrors(self.entries + other.entries)

    def rewrite(self, url: str) -> str:
        """``url`` with its longest matching prefix replaced; unchanged when nothing matches."""
        best: tuple[str, str] | None = None
        for prefix, replacement in self.entries:
            if url.startswith(prefix) and (best is None or len(prefix) > len(best[0])):
                best = (prefix, replacement)
        if best is None:
            return url
        return best[1] + url[len(best[0]) :]
