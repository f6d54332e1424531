"""The remote action cache: action results shared through any OCI registry.

Where the store is one machine's action cache, a remote cache is a repository of the user's own
registry that many machines read (``nvkr build --cache-from REGISTRY/REPO``) and write
(``--cache-to``): one signed, immutable entry per action key (:mod:`nvkr.cache.entry` has the
format). The executor asks the local store, then each cache in order, then builds
(:mod:`nvkr.execute`); :mod:`nvkr.cache.remote` reads and checks entries, :mod:`nvkr.cache.push`
writes them, :mod:`nvkr.cache.prune` deletes old ones, :mod:`nvkr.cache.settings` gathers the
options. No cache server of nvkr's own: the registry is the shared store, the CI system the
scheduler.

A shared cache is a supply-chain boundary, so an entry is used only when every check passes: a
signature by a trusted key over the action key, the tag and the manifest digest; a config for
this very action; layers equal to the config's outputs; every blob hashing to its digest. Any
failed check is a miss with one line saying why, never an error, and the action builds locally.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nvkr.action import Action

#: Why a result is not shared: its key does not cover every tool that can change its bytes.
NOT_HERMETIC = (
    "its action key does not cover every tool that can change its bytes (a host toolchain or a "
    "container daemon outside the key): the result stays in this store"
)


def shareable(action: Action) -> bool:
    """Whether ``action``'s result may go to or come from a remote cache: only a result whose
    action key covers every tool that can change its bytes (``cgo: true`` with host C tools and
    ``backend: docker`` through a daemon do not, unless their builders pin those tools and mark
    the action ``hermetic``)."""
    return bool(getattr(action, "hermetic", True))
