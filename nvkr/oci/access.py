"""How a caller reaches a registry: :class:`RegistryAccess`, ``--insecure`` and credentials
(the CLI's ``--insecure``, ``-u`` and ``--password-stdin``, or an in-process caller's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nvkr.oci.registry import RegistryClient


@dataclass(frozen=True)
class RegistryAccess:
    """``insecure`` (plain HTTP; 127.0.0.1 and localhost always are) and the credentials to use
    (None: the client's own defaults, NVKR_REGISTRY_* or the Docker config)."""

    insecure: bool = False
    username: str | None = None
    password: str | None = None

    def client(self, registry: str, **options: Any) -> RegistryClient:
        """A :class:`~nvkr.oci.registry.RegistryClient` for ``registry`` (``host[:port]``) with
        these settings; ``options`` go to it as they are (``chunk_size``, ``pool_size``)."""
        from nvkr.oci.registry import RegistryClient

        return RegistryClient(
            registry,
            insecure=self.insecure,
            username=self.username,
            password=self.password,
            **options,
        )
