"""The ``rootfs`` action's params, typed: what :meth:`RootfsBuilder.plan` fixes and
:meth:`RootfsBuilder.run` reads. Their JSON (:meth:`RootfsParams.to_json`, the keys they always
had) enters the action key."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class _Params(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")


class AptRepositoryParams(_Params):
    """One repository the tree's apt sources name: its recipe ``name``, ``url`` (a flat one
    with its trailing slash), ``suite``, ``components`` and the locked ``keyring`` digest."""

    name: str
    url: str
    suite: str
    components: list[str]
    keyring: str


class RootfsParams(_Params):
    """The tree's Debian ``arch``, the ``base`` set, the packages to ``include`` (sorted), the
    ``repositories``, the ``suite`` mmdebstrap installs the base set from, the
    ``hostname`` (None: the tree has no ``/etc/hostname``) and whether the locked packages
    include ``dkms`` (its modules are built unsigned and checked, its build logs removed)."""

    arch: str
    base: str
    include: list[str]
    repositories: list[AptRepositoryParams]
    suite: str
    hostname: str | None
    dkms: bool = False

    def to_json(self) -> dict[str, Any]:
        """The params as the action holds them: ``dkms`` only when the packages include dkms,
        so every other tree keeps the action key it had before the field."""
        return self.model_dump(exclude=set() if self.dkms else {"dkms"})
