"""Materialising a release set: the assembled layout, from the store to ``dist/<name>/``.

After :func:`nvkr.releaseset.assemble` has put every blob into the store, ``nvkr build`` calls
:func:`materialize` with the action's result; it reads ``index.json`` back, checks it, and hands
the directory's contents to :func:`nvkr.oci.layoutdir.write_layout`, which swaps it in atomically.
"""

from __future__ import annotations

from pathlib import Path

from nvkr.action import Outputs
from nvkr.errors import IntegrityError
from nvkr.oci.layoutdir import links_current, write_layout
from nvkr.releaseset.signing import keep_signed_layout
from nvkr.releasespec import check_name
from nvkr.store import Store


def materialize(result: Outputs, store: Store, out_dir: Path) -> Path:
    """Write the layout of an :func:`assemble` result (or of the release-set action's result,
    which holds the same outputs and metadata) to ``out_dir/<name>/`` atomically.

    ``out_dir/<name>/`` gets ``oci-layout`` (``{"imageLayoutVersion":"1.0.0"}``), ``index.json``
    and ``blobs/sha256/*`` (hard links from the store where possible), built in
    ``out_dir/.<name>.tmp-XXXX`` and swapped in (:func:`nvkr.oci.layoutdir.write_layout`). An
    existing directory with the same ``index.json`` bytes and every blob is left alone, and so is
    one holding the same release set signed (:func:`nvkr.releaseset.signing.keep_signed_layout`:
    its signatures still hold, so an unchanged rebuild keeps them). Modes do
    not depend on the umask: directories 0755, ``index.json``/``oci-layout`` 0644, blobs 0444.

    Every blob is checked against its store seal first (:meth:`nvkr.store.Store.checked_path`),
    and a layout whose blob is a hard link to another inode than the store's (the store's copy
    was found corrupt and replaced) is rewritten.

    Returns:
        ``out_dir/<name>``.
    Raises:
        BuildError: the result has a bad name or not exactly one ``index.json`` output.
        IntegrityError: a blob is missing from the store or differs from its digest (a corrupt
            one is deleted: the next build makes it again).
        OSError: the file system refused. On any failure no temp dir is left and an existing
            ``out_dir/<name>`` is as it was.
    """
    name = check_name(result.metadata.get("name"))
    index_digest = result.output("index", f"release set {name}").digest
    try:
        index_data = store.read_blob(index_digest)  # hashed as it is read
    except OSError as e:
        raise IntegrityError(
            f"release set {name}: index.json ({index_digest}) is not in the store",
            hint="build again",
        ) from e
    except IntegrityError as e:
        raise IntegrityError(f"release set {name}: index.json: {e.message}", hint=e.hint) from e
    blobs = [(o.digest, o.size) for o in result.outputs_with("blob")]
    # Every blob is checked against its seal before it is linked or left linked: a blob
    # written after it was stored is never (re)published in dist/.
    paths = {digest: store.checked_path(digest) for digest, _ in blobs}
    target = Path(out_dir) / name
    if links_current(target, paths) and keep_signed_layout(target, index_data):
        return target
    # The new links (and the old layout's removal) change the blobs' ctime: taken into their
    # seals, so the next build checks them without hashing.
    with store.linking(paths):
        write_layout(target, index_data, blobs, paths.__getitem__)
    return target
