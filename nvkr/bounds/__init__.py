"""The bounds on every untrusted input: one home for the limits and the readers that keep them.

A recipe (and every file it extends), the compatibility rules, ``boot-test --user-data`` and
``--meta-data``, a chart's ``values.yaml`` and ``Chart.yaml``, a ``verify --policy`` file, the
nvkr config and a lockfile are read through these functions, and every Jinja template nvkr renders
from user data (recipe fields, a ``## template: jinja`` user-data, a recipe's ``spireAgent.config``)
through :mod:`nvkr.bounds.jinja`. Each limit is far above what a real input needs and far below
what costs minutes or gigabytes; going over one raises :class:`~nvkr.errors.LimitError` (exit 2)
naming the file and the limit, before the rest is read, parsed or rendered:

* :data:`MAX_FILE_BYTES`: a file's size, taken from ``fstat`` before reading (and at most one byte
  more is ever read, for files whose size the kernel does not know);
* :data:`MAX_YAML_NODES`: the values a YAML document holds once its aliases are expanded (a
  "billion laughs" is a few hundred bytes), counted on the composed nodes in linear time;
* :mod:`nvkr.bounds.jinja`: :data:`MAX_TEMPLATE_STRING` characters (or items) in any one value a
  template makes, :data:`MAX_FORMAT_WIDTH` for a width or precision in ``%`` or ``format``,
  :data:`MAX_TEMPLATE_STEPS` loop iterations and calls per rendering, :data:`MAX_TEMPLATE_OUTPUT`
  characters of output, :data:`MAX_TEMPLATE_MADE` characters made in all,
  :data:`MAX_TEMPLATE_SECONDS` of rendering.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from nvkr.errors import LimitError

#: bytes in one YAML, JSON or template file a user gives nvkr (a large lockfile is ~0.2 MiB)
MAX_FILE_BYTES: Final = 4 << 20
#: bytes in a lockfile (JSON nvkr writes; a catalog leaf's is ~0.2 MiB)
MAX_LOCKFILE_BYTES: Final = 64 << 20
#: values (scalars, lists, mappings) in one YAML document once its aliases are expanded
MAX_YAML_NODES: Final = 1_000_000
#: characters in one string (items in one list) a template makes
MAX_TEMPLATE_STRING: Final = 1 << 20
#: a width or precision in a ``%`` format or a ``format`` spec
MAX_FORMAT_WIDTH: Final = 10_000
#: loop iterations, calls and filters in one rendering
MAX_TEMPLATE_STEPS: Final = 1_000_000
#: characters of all the strings one rendering makes together (its operators, calls, filters,
#: joins and values written)
MAX_TEMPLATE_MADE: Final = 64 << 20
#: characters one rendering writes
MAX_TEMPLATE_OUTPUT: Final = MAX_FILE_BYTES
#: seconds one rendering may take
MAX_TEMPLATE_SECONDS: Final = 5.0


def size_hint(limit: int) -> str:
    """``4194304 bytes (4 MiB)``."""
    return f"{limit} bytes ({limit >> 20} MiB)" if limit >= 1 << 20 else f"{limit} bytes"


def _too_big(where: str | Path, size: int | str, what: str, limit: int) -> LimitError:
    return LimitError(
        f"{where}: the {what} is {size} bytes, over nvkr's limit of {size_hint(limit)} "
        f"(nvkr.bounds.{'MAX_LOCKFILE_BYTES' if limit == MAX_LOCKFILE_BYTES else 'MAX_FILE_BYTES'})",
        hint=f"a {what} is far smaller than this; check that this is the file meant",
    )


def read_limited(path: Path, what: str = "file", limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of ``path``, refused unread when over ``limit``.

    Raises:
        LimitError: the file is larger than ``limit`` (by ``fstat``, or by reading one byte more
            where the size is unknown: a pipe, ``/proc``).
        OSError: as :func:`open` and :func:`os.read` raise it (FileNotFoundError...): callers
            word those themselves.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise _too_big(path, size, what, limit)
        data = f.read(limit + 1)
    if len(data) > limit:
        raise _too_big(path, f"over {limit}", what, limit)
    return data


def check_size(data: bytes | str, where: str | Path, what: str = "file") -> None:
    """Refuse ``data`` already in memory (given, fetched, from an archive) over the limit.

    Raises:
        LimitError: ``data`` is over :data:`MAX_FILE_BYTES` (bytes; a str's characters count as
            at least one byte each).
    """
    if len(data) > MAX_FILE_BYTES:
        raise _too_big(where, len(data), what, MAX_FILE_BYTES)
