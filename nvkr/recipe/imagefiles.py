"""The ``files`` entries of the artifacts that lay out files in an image (container images, node
images): :class:`ImageFile` and :func:`file_refs`, the names such a map refers to.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field, model_validator

from nvkr.recipe import fieldchecks as fc
from nvkr.recipe.base import Strict


class ImageFile(Strict):
    """Content of one path in a container image: an artifact's primary output or a source."""

    artifact: str | None = Field(default=None, description="an artifact of the same variant")
    source: str | None = Field(default=None, description="a source (file, or directory tree)")
    path: fc.InnerPath | None = Field(
        default=None, description="Optional. a file or directory inside the source"
    )
    mode: str | None = Field(
        default=None,
        pattern=r"^0[0-7]{3}$",
        description='Optional. file mode, e.g. "0755"; default 0755 for artifacts, else from the source',
    )
    unpack: bool = Field(
        default=False,
        description="Optional. container images: a file source that is a zip (a wheel) or a tar "
        "archive is unpacked into the destination directory instead of copied",
    )

    @model_validator(mode="after")
    def _one_origin(self) -> ImageFile:
        if (self.artifact is None) == (self.source is None):
            raise ValueError("an image file needs exactly one of artifact or source")
        if self.artifact is not None and self.path is not None:
            raise ValueError(
                "'path' selects inside a source; an artifact's file is its primary output"
            )
        return self


def file_refs(
    files: Mapping[str, str | ImageFile | list[str | ImageFile]],
) -> list[tuple[tuple[str, ...], str, str]]:
    """The references of a ``files`` map (container images, node images); a list value's entries
    are ``files.DEST.N``."""
    refs: list[tuple[tuple[str, ...], str, str]] = []
    for dest, value in files.items():
        entries = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
        for n, entry in entries:
            where = ("files", dest) if n is None else ("files", dest, str(n))
            if isinstance(entry, str):
                refs.append((where, "artifact", entry))
            elif entry.artifact is not None:
                refs.append(((*where, "artifact"), "artifact", entry.artifact))
            elif entry.source is not None:
                refs.append(((*where, "source"), "source", entry.source))
    return refs
