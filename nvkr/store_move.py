"""An action's output moved into the store (:func:`move_file`), not copied.

A builder writes its outputs in its work dir, under the store's ``tmp/``: a node image's QCOW2
(hundreds of megabytes), a root filesystem's tarball. :meth:`~nvkr.store.Store.add_file` would
write each a second time, through a :class:`~nvkr.store.BlobWriter`; here the file is hashed as
it is read and renamed into ``blobs/sha256/``, as a BlobWriter's own temporary file is. What a
blob must be holds the same way: its bytes on disk (fsync) before the rename, read-only, sealed,
and an intact blob of the same digest kept as it is (the file is deleted instead).
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from nvkr.errors import Interrupted
from nvkr.run import stop_requested
from nvkr.store import BlobInfo, Store

_CHUNK = 1 << 20


def move_file(store: Store, path: Path, *, what: str = "file") -> BlobInfo:
    """``path`` hashed and renamed into ``store``'s blobs; its blob. ``path`` is gone after. A
    file with other hard links (renaming would make them read-only blobs too), or on another
    file system than the store's ``tmp/`` (a rename cannot cross it), is copied instead
    (:meth:`~nvkr.store.Store.add_file`) and left as it was.

    Raises:
        Interrupted: nvkr is stopping (Ctrl-C, SIGTERM) before the file was hashed; ``path``
            is left as it was.
    """
    st = os.lstat(path)
    store.tmp_dir.mkdir(parents=True, exist_ok=True)
    if (
        not stat.S_ISREG(st.st_mode)
        or st.st_nlink != 1
        or st.st_dev != os.stat(store.tmp_dir).st_dev
    ):
        return store.add_file(path, what=what)
    sha256, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            if stop_requested() is not None:
                raise Interrupted(f"stopping: {what} not stored")
            sha256.update(chunk)
            size += len(chunk)
        os.fsync(f.fileno())  # on disk before it is a blob, as a BlobWriter's file
        os.fchmod(f.fileno(), 0o444)
    digest = "sha256:" + sha256.hexdigest()
    if store.has_blob(digest):  # an intact blob is kept (hard links to it stay)
        path.unlink()
    else:  # none, or a corrupt one that has_blob just deleted
        os.replace(path, store.blob_path(digest))
        store.seal(digest)
    return BlobInfo(digest=digest, size=size, digests={"sha256": digest})
