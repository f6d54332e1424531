"""Small multi-arch OCI images for the oci source and mirror tests: :func:`make_layout` writes an
image layout (an index over one tiny image per arch, tagged ``v1``), :func:`push` copies it to the
loopback registry with skopeo."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from nvkr.oci import mediatypes as mt
from nvkr.oci.image import image_config, image_manifest, layer_from_tree, platform_of
from nvkr.oci.layout import descriptor, image_index, index_bytes
from nvkr.store import Store
from tests.helpers.registry import Registry, skopeo


@dataclass
class Image:
    """An OCI image layout on disk, tagged ``v1``."""

    layout: Path
    digest: str  # the index (or manifest) digest
    blobs: list[str]  # the closure, sorted


def make_layout(root: Path, salt: str, arches: tuple[str, ...] = ("amd64", "arm64")) -> Image:
    """An OCI layout with an index over one small image per arch, tagged ``v1``."""
    store = Store(root.parent / f"{root.name}-store")
    manifests, blobs = [], []
    for arch in arches:
        tree = root.parent / f"{root.name}-tree-{arch}"
        (tree / "etc").mkdir(parents=True)
        (tree / "etc" / "os-release").write_text(f"ID={salt}\nARCH={arch}\n")
        layer = layer_from_tree(tree, store, epoch=0)
        config = store.add_bytes(image_config(arch=arch, diff_ids=[layer.diff_id], epoch=0))
        config_desc = descriptor(mt.OCI_IMAGE_CONFIG, config.digest, config.size)
        manifest = store.add_bytes(image_manifest(config_desc, [layer.descriptor()], {}))
        manifests.append(
            descriptor(mt.OCI_MANIFEST, manifest.digest, manifest.size, platform=platform_of(arch))
        )
        blobs += [layer.digest, config.digest, manifest.digest]
    index = store.add_bytes(index_bytes(image_index(manifests)))
    blobs.append(index.digest)
    (root / "blobs" / "sha256").mkdir(parents=True)
    for d in blobs:
        shutil.copyfile(store.blob_path(d), root / "blobs" / "sha256" / d[7:])
    (root / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    top = descriptor(mt.OCI_INDEX, index.digest, index.size, annotations={mt.ANN_REF_NAME: "v1"})
    (root / "index.json").write_bytes(index_bytes(image_index([top])))
    return Image(layout=root, digest=index.digest, blobs=sorted(set(blobs)))


def push(image: Image, registry: Registry, repo: str, *extra: str) -> None:
    """Copy ``image`` (every arch) to ``registry`` as ``repo:v1`` with skopeo."""
    skopeo(
        "copy",
        "--all",
        *extra,
        "--dest-tls-verify=false",
        f"oci:{image.layout}:v1",
        f"docker://{registry.host}/{repo}:v1",
    )
