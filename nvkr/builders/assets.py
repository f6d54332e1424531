"""Where a builder's assets are: the one function that finds them (:func:`asset_dir`).

A builder's assets (templates, hooks, dib elements) live in the top-level ``builders/<name>/``
of the source tree, as the project layout promises. A wheel carries them as
``nvkr/_assets/<name>/`` (``setup.py`` copies them there at build time), so an installed nvkr
finds the same bytes; they are hashed into action keys, so both places give the same keys.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent  # the nvkr package directory


def asset_dir(name: str) -> Path:
    """The assets directory of builder ``name`` (``node-image``, ``rootfs``): ``nvkr/_assets/<name>``
    in an installed wheel, else ``builders/<name>`` of the source checkout nvkr runs from (an
    editable install or ``python -m nvkr`` in the tree). Returns the checkout's path when
    neither exists; reading a file from it then fails naming that path."""
    packaged = _PACKAGE / "_assets" / name
    if packaged.is_dir():
        return packaged
    return _PACKAGE.parent / "builders" / name
