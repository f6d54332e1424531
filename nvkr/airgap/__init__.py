"""Air-gapped builds: export every locked source to a portable directory, import it, serve it.

A connected machine runs ``nvkr mirror export RECIPE... DIR``: for every source the recipes'
lockfiles pin (all variants, or those of ``--variant``) the blobs a build reads from the store are
written to ``DIR/blobs/sha256/<hex>`` (hard-linked from the store when on the same file system,
else copied), and ``DIR/index.json`` — written last, through a temp file and a rename, so a
half-written export has none — describes them::

    {"nvkrMirror": 1,
     "recipes": [{"name", "path", "digest": "sha256:..", "variants": [...],
                  "lockfile": {"path", "digest": "sha256:.."}}],
     "sources": [{"recipe", "name", "kind", "digest", "variants": [...], "upstream": <URL or ref>,
                  "blobs": [{"digest": "sha256:..", "size": <bytes>, "urls": [<upstream URLs>],
                             "mediaType"?: <OCI document type>, "package"?: "<name> <version> (<arch>)",
                             "role"?: "manifest" | "member"}],
                  "checksum"?: {"url", "algorithm", "text"}}],
     "skipped": [{"recipe", "name", "kind": "path", "reason"}],
     "blobs": {"count": N, "bytes": B}}

What each kind keeps in the store (see :mod:`nvkr.fetch`): ``url``, ``pypi`` and ``git`` one
blob (the file; the wheel or the wheel's ``member``; the tree's tar), ``apt`` the package
manifest plus every .deb it lists, ``oci`` the whole closure of the pinned digest. ``path``
sources are this repository's own directories: they travel with the repository, not the export.

The disconnected machine runs ``nvkr mirror import DIR``: every listed blob the store lacks is
streamed through the store's :class:`~nvkr.store.BlobWriter` against its sha256 and size, so a
tampered or truncated blob exits 3 naming it and its source and leaves nothing behind; then
``nvkr build --offline`` needs no network. Or ``nvkr mirror serve DIR`` answers ``GET /<host>/<path>``
with the blob whose upstream URL was ``http(s)://<host>/<path>`` (OCI documents and blobs under
``/<registry>/v2/<repo>/{manifests,blobs}/<digest>``, and each url source's ``checksumUrl`` as a
``HASH  NAME`` line built from the lock), so ``--mirror https://host/=http://127.0.0.1:PORT/host/``
makes the ordinary fetch path work. pip (``pypi``) and git sources cannot be served that way:
import them.

Export is :mod:`nvkr.airgap.export`, the index both ends read :mod:`nvkr.airgap.index`, import
:mod:`nvkr.airgap.importing`, serving :mod:`nvkr.airgap.serve`.
"""
