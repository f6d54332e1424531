"""``nvkr verify --rebuild REF``'s sources from the registry alone, when the release set has its
source closure there (``nvkr publish --with-sources``, :mod:`nvkr.delivery.sources`).

:func:`fetch_rebuild_inputs` pulls the closure beside the pulled set (every blob checked against
its digest), imports its blobs into a fresh seed store (:func:`nvkr.airgap.importing.import_mirror`,
each checked again), after hard-linking in the blobs of ``--seed-store`` when one is given (the
sources the closure withholds must come from somewhere), and hands back the closure's project
directory and that store: :func:`nvkr.verify.rebuild` then builds offline from them, so no
upstream is contacted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvkr.errors import UsageError
from nvkr.oci.registry import RegistryClient
from nvkr.quantities import plural


@dataclass(frozen=True)
class RebuildInputs:
    """The project directory and seed store a rebuild from the registry reads, and what the
    report says of them (``info``: the closure's digest, blobs imported, sources withheld)."""

    project: Path
    seed_store: Path
    info: dict[str, Any]


def fetch_rebuild_inputs(
    client: RegistryClient, repo: str, subject: str, work: Path, seed_store: Path | None
) -> RebuildInputs | None:
    """Pull the source closure of ``subject`` into ``work/sources`` and import it into the
    store ``work/seed-store``; None when the registry has no closure of it.

    Raises:
        UsageError: a source the closure withholds (``publish: false``) is not in
            ``seed_store`` either (exit 2), named before anything is built.
        IntegrityError: a blob fails its digest, or the closure lacks one (exit 3).
        RegistryError: the registry refused or is unreachable.
    """
    from nvkr.airgap.importing import import_mirror
    from nvkr.delivery.sources import find_closure, pull_sources
    from nvkr.store import Store
    from nvkr.verify.rebuild import seed_blobs

    if find_closure(client, repo, subject) is None:
        return None
    pulled = pull_sources(client, repo, subject, work / "sources")
    store_dir = work / "seed-store"
    (store_dir / "blobs" / "sha256").mkdir(parents=True)
    if seed_store is not None:
        seed_blobs(seed_store, store_dir)
    store = Store(store_dir)
    with store.reading():
        imported = import_mirror(work / "sources", store)
        lacking = [
            w for w in pulled.withheld if w.get("digest") and not store.has_blob(w["digest"])
        ]
    if lacking:  # said now, not by an offline build minutes in
        names = ", ".join(
            f"{w['recipe']}/{w['name']} ({w['kind']}, {w['digest']})" for w in lacking
        )
        raise UsageError(
            f"the source closure of {client.registry}/{repo}@{subject} withholds "
            f"{plural(len(lacking), 'source')} the rebuild needs ({lacking[0]['reason']}): "
            f"{names}",
            hint="give --seed-store DIR, a store holding them (e.g. the build's own, or one "
            "`nvkr mirror import` filled)",
        )
    info = {
        "closure": pulled.digest,
        "reference": f"{client.registry}/{repo}@{pulled.digest}",
        "blobs": pulled.blobs,
        "bytes": pulled.bytes,
        "imported": imported.added,
        "downloadedBytes": pulled.downloaded_bytes,
        "withheld": [
            {k: w.get(k) for k in ("recipe", "name", "kind", "digest")} for w in pulled.withheld
        ],
        "variants": pulled.variants,
    }
    return RebuildInputs(Path(pulled.project), store_dir, info)
