"""The ``kube-packages`` action's params, typed: what :meth:`KubePackagesBuilder.plan` fixes and
:meth:`KubePackagesBuilder.run` reads. Their JSON (:meth:`KubePackagesParams.to_json`, the keys
they always had) enters the action key."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class KubeFile(BaseModel):
    """One binary: its file ``name``, ``path`` in the tar (under the prefix, no leading ``/``),
    the ``source`` it comes from, that source's input role (``input``) and the ``member`` of
    the source's archive holding it (None: the source is the binary)."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    name: str
    path: str
    source: str
    input: str
    member: str | None


class KubePackagesParams(BaseModel):
    """The tar's file name (``output``), the ``prefix`` directory (no leading ``/``; empty for
    the root) and the ``files``, sorted by name."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    output: str
    prefix: str
    files: list[KubeFile]

    def to_json(self) -> dict[str, Any]:
        """The params as the action holds them."""
        return self.model_dump()
