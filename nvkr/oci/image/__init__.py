"""Reproducible container-image primitives: layers, configs and manifests, and stored base images.

Both backends of the ``container-image`` builder write images with these: the daemonless one
turns the files of a recipe into a layer with :func:`layer_from_tree`, the docker one re-tars what a
daemon built with :func:`normalise_layer`; then :func:`image_config` and :func:`image_manifest`
give the config and manifest bytes. Layers are deterministic tars (members sorted by path bytes,
integer mtimes, no PAX atime/ctime, empty owner names: the tar primitives of :mod:`nvkr.repro`)
compressed with its fixed gzip header (mtime 0, no name, level 9) or a fixed zstd level, streamed
into the store while the uncompressed bytes are hashed for the ``diff_id``. Base images pulled by
the ``oci`` fetcher (OCI or Docker schema 2) are read back from the store with
:func:`load_image`, which picks the variant's platform from an index. Shapes follow image-spec
v1.1.0: layer.md, config.md, manifest.md and image-index.md.

The package holds three concepts: :mod:`.layers` (writing and normalising layer blobs),
:mod:`.config` (platforms, the image config and the image manifest) and :mod:`.stored` (reading
a pulled image back from the store).
"""

from nvkr.oci.image.config import (
    PLATFORM_VARIANTS,
    image_config,
    image_manifest,
    platform_label,
    platform_of,
)
from nvkr.oci.image.layers import (
    KEPT_PAX_PREFIXES,
    LAYER_MEDIA_TYPES,
    OCI_LAYER_TAR_ZSTD,
    ZSTD_LEVEL,
    Layer,
    layer_from_tree,
    normalise_layer,
)
from nvkr.oci.image.stored import (
    OCI_EQUIVALENT,
    StoredImage,
    load_image,
    media_type_of,
    select_manifest,
)

__all__ = [
    "KEPT_PAX_PREFIXES",
    "LAYER_MEDIA_TYPES",
    "OCI_EQUIVALENT",
    "OCI_LAYER_TAR_ZSTD",
    "PLATFORM_VARIANTS",
    "ZSTD_LEVEL",
    "Layer",
    "StoredImage",
    "image_config",
    "image_manifest",
    "layer_from_tree",
    "load_image",
    "media_type_of",
    "normalise_layer",
    "platform_label",
    "platform_of",
    "select_manifest",
]
