"""Materialising a release set: the assembled layout, from the store to ``dist/<name>/``.

After :func:`nvkr.releaseset.assemble` has put every blob into the store, ``nvkr build`` calls
:func:`materialize` with the action's result; it reads ``index.json`` back, checks it, and hands
the directory's contents to :func:`nvkr.oci.layoutdir.write_layout`, which swaps it in atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nvkr.canonical import sha256_bytes
from nvkr.errors import BuildError, IntegrityError
from nvkr.oci.layoutdir import write_layout
from nvkr.releaseset.signing import keep_signed_layout
from nvkr.releaseset.spec import check_name
from nvkr.store import Store


def materialize(result: dict[str, Any], store: Store, out_dir: Path) -> Path:
    """Write the layout of an :func:`assemble` result to ``out_dir/<name>/`` atomically.

    ``out_dir/<name>/`` gets ``oci-layout`` (``{"imageLayoutVersion":"1.0.0"}``), ``index.json``
    and ``blobs/sha256/*`` (hard links from the store where possible), built in
    ``out_dir/.<name>.tmp-XXXX`` and swapped in (:func:`nvkr.oci.layoutdir.write_layout`). An
    existing directory with the same ``index.json`` bytes and every blob is left alone, and so is
    one holding the same release set signed (:func:`nvkr.releaseset.signing.keep_signed_layout`:
    its signatures still hold, so an unchanged rebuild keeps them). Modes do
    not depend on the umask: directories 0755, ``index.json``/``oci-layout`` 0644, blobs 0444.

    Returns:
        ``out_dir/<name>``.
    Raises:
        BuildError: the result has a bad name or not exactly one ``index.json`` output.
        IntegrityError: a blob is missing from the store or differs from its digest.
        OSError: the file system refused. On any failure no temp dir is left and an existing
            ``out_dir/<name>`` is as it was.
    """
    name = check_name(result.get("metadata", {}).get("name"))
    outputs = result.get("outputs", [])
    index_out = [o for o in outputs if o.get("role") == "index"]
    if len(index_out) != 1:
        raise BuildError(
            f"release set {name}: the result has {len(index_out)} index.json outputs, expected 1"
        )
    index_digest = index_out[0]["digest"]
    try:
        index_data = store.read_blob(index_digest)
    except OSError as e:
        raise IntegrityError(
            f"release set {name}: index.json ({index_digest}) is not in the store",
            hint="build again",
        ) from e
    if sha256_bytes(index_data) != index_digest:
        raise IntegrityError(
            f"release set {name}: store blob {index_digest} (index.json) is corrupt"
        )
    blobs = [(o["digest"], o["size"]) for o in outputs if o.get("role") == "blob"]
    target = Path(out_dir) / name
    if keep_signed_layout(target, index_data):
        return target
    write_layout(target, index_data, blobs, store.blob_path)
    return target
