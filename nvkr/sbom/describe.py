"""What each kind of artifact holds, as SPDX elements: a binary, a container image, a chart.

Called by the ``sbom`` builder (:mod:`nvkr.builders.sbom.builder`) with the cached result of the
artifact's action (for an image, of its image-index action) and the blobs in the store. Each
describer adds the artifact's root package (``SPDXRef-DOCUMENT DESCRIBES`` it) and what it holds
to an :class:`~nvkr.sbom.spdx.SpdxDocument`, and returns the ``sha256:<hex>`` of the bytes the
root package stands for — the same digest the release set's provenance names as its subject:

- binary: the primary output as a package ``CONTAINS`` one file; with a ``buildinfo`` output,
  its Go modules (:func:`nvkr.sbom.golang.link_go_binary`); a cgo build's C toolchain packages
  (the tools tree's compiler, binutils, C library) are each ``BUILD_TOOL_OF`` it.
- image: the image index → one package per platform manifest → one package per layer, each
  layer ``CONTAINS`` its regular files; a file whose sha256 is the primary output of a Go binary
  the image was built with gets that binary's modules.
- chart: the .tgz ``CONTAINS`` its files and ``DEPENDS_ON`` each image it pins by digest;
  an image that has an SBOM of its own is ``DESCRIBED_BY`` that document (an external document
  reference with the SHA1 of its bytes), so what the chart deploys is named down to its files
  and Go modules without copying them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nvkr.action import ActionResult
from nvkr.canonical import sha256_bytes
from nvkr.errors import BuildError, IntegrityError
from nvkr.jsondoc import json_object, json_objects, load_json_object
from nvkr.oci import mediatypes as mt
from nvkr.sbom.archive import tar_files
from nvkr.sbom.golang import build_comment, link_go_binary
from nvkr.sbom.spdx import FileDigest, SpdxDocument, hashed_id, oci_purl, package, spdx_id
from nvkr.store import Store

_DIGEST_PREFIX = "sha256:"


def _hex(digest: str) -> str:
    return digest.removeprefix(_DIGEST_PREFIX)


def _read_checked(store: Store, digest: str, what: str) -> bytes:
    try:
        data = store.read_blob(digest)
    except OSError as e:
        raise IntegrityError(
            f"{what}: blob {digest} is not in the store {store.root}",
            hint="the cache entry is stale; run the build again to re-create it",
        ) from e
    if sha256_bytes(data) != digest:
        raise IntegrityError(
            f"{what}: store blob {digest} is corrupt",
            hint="delete it from the store and build again",
        )
    return data


def _file_digest(store: Store, digest: str, what: str) -> FileDigest:
    data = _read_checked(store, digest, what)
    return FileDigest(
        hashlib.sha1(data, usedforsecurity=False).hexdigest(),
        _hex(digest),
        len(data),
        elf=data[:4] == b"\x7fELF",
    )


def _json_blob(store: Store, digest: str, what: str) -> dict[str, Any]:
    return load_json_object(
        _read_checked(store, digest, what), f"{what}: blob {digest}", error=BuildError
    )


# -- binaries ------------------------------------------------------------------------------------
def describe_binary(
    doc: SpdxDocument,
    store: Store,
    result: ActionResult,
    label: str,
    buildinfo: Mapping[str, Any] | None,
) -> str:
    """A binary artifact: its primary output as a package holding one file (module doc).

    Args:
        result: the artifact action's result (``outputs`` with one role ``primary``).
        buildinfo: the parsed Go build info of the binary, if it has one.
    Returns:
        the primary output's ``sha256:<hex>``.
    Raises:
        BuildError: no single primary output. IntegrityError: its blob is missing or corrupt.
    """
    what = f"artifact {label}"
    primary = result.output("primary", what)
    digest = primary.digest
    fd = _file_digest(store, digest, f"{what} output {primary.name!r}")
    meta = result.metadata
    platform = "/".join(str(meta[k]) for k in ("goos", "goarch") if meta.get(k))
    notes = [f"platform {platform}"] if platform else []
    if meta.get("linkage") == "dynamic":
        notes.append(f"dynamically linked (ELF interpreter {meta.get('interpreter', '?')})")
    root = doc.add_package(
        package(
            spdx_id("Package-artifact", label),
            label,
            file_name=primary.name,
            sha256=fd.sha256,
            purpose="APPLICATION",
            comment="; ".join(notes) or None,
        )
    )
    doc.describes(root)
    file_id = doc.add_file(
        hashed_id("File", digest, primary.name),
        f"./{primary.name}",
        fd,
        comment=build_comment(buildinfo) if buildinfo else None,
    )
    doc.contains_file(root, file_id)
    if buildinfo:
        link_go_binary(doc, file_id, buildinfo)
    c_toolchain = meta.get("cToolchain")
    if c_toolchain:  # a cgo build: the tools tree's compiler, binutils and C library
        from nvkr.sbom.debian import add_build_tools  # it uses this module's helpers

        add_build_tools(doc, root, json_objects(json_object(c_toolchain).get("packages")))
    return digest


# -- images --------------------------------------------------------------------------------------
def _platform(desc: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, str]:
    # the index's platform wins: it may carry a variant the config leaves out
    given = desc.get("platform")
    p: Mapping[str, Any] = given if isinstance(given, Mapping) else config
    return {k: str(p[k]) for k in ("os", "architecture", "variant") if p.get(k)}


def _platform_text(p: Mapping[str, str]) -> str:
    return "/".join(p[k] for k in ("os", "architecture", "variant") if p.get(k))


class _ImageWalk:
    """One image index walked down to its files; layers shared by platforms are read once."""

    def __init__(
        self,
        doc: SpdxDocument,
        store: Store,
        label: str,
        binaries: Mapping[str, Mapping[str, Any]],
    ) -> None:
        self.doc, self.store, self.label, self.binaries = doc, store, label, binaries
        self._layers: dict[str, str] = {}

    def index(self, parent: str, digest: str, what: str) -> None:
        index = _json_blob(self.store, digest, what)
        for i, desc in enumerate(index.get("manifests") or []):
            media_type = desc.get("mediaType")
            here = f"{what} manifests[{i}]"
            if media_type in mt.INDEX_TYPES:
                child = self.doc.add_package(
                    package(
                        spdx_id("Package-image", _hex(desc["digest"])),
                        f"{self.label} index",
                        version=desc["digest"],
                        sha256=_hex(desc["digest"]),
                        purl=oci_purl(self.label, desc["digest"]),
                        purpose="CONTAINER",
                    )
                )
                self.doc.relate(parent, "CONTAINS", child)
                self.index(child, desc["digest"], here)
            elif media_type in mt.IMAGE_MANIFEST_TYPES:
                self.manifest(parent, desc, here)

    def manifest(self, parent: str, desc: Mapping[str, Any], what: str) -> None:
        digest = str(desc["digest"])
        manifest = _json_blob(self.store, digest, what)
        config_desc = manifest.get("config") or {}
        # Attestation manifests (buildx: platform unknown/unknown) and other artifacts are not
        # images: nothing of theirs is shipped in a container.
        if config_desc.get("mediaType") not in (mt.OCI_IMAGE_CONFIG, mt.DOCKER_CONFIG):
            return
        config = _json_blob(self.store, str(config_desc["digest"]), f"{what} config")
        platform = _platform(desc, config)
        qualifiers = {"arch": platform.get("architecture", ""), "os": platform.get("os", "")}
        if platform.get("variant"):
            qualifiers["variant"] = platform["variant"]
        image = self.doc.add_package(
            package(
                spdx_id("Package-image", _hex(digest)),
                f"{self.label} {_platform_text(platform)}",
                version=digest,
                sha256=_hex(digest),
                purl=oci_purl(self.label, digest, {k: v for k, v in qualifiers.items() if v}),
                purpose="CONTAINER",
                comment=f"image config {config_desc['digest']}",
            )
        )
        self.doc.relate(parent, "CONTAINS", image)
        for n, layer in enumerate(manifest.get("layers") or []):
            self.doc.relate(image, "CONTAINS", self.layer(layer, f"{what} layers[{n}]"))

    def layer(self, desc: Mapping[str, Any], what: str) -> str:
        digest = str(desc["digest"])
        if digest in self._layers:
            return self._layers[digest]
        layer_id = self.doc.add_package(
            package(
                spdx_id("Package-layer", _hex(digest)),
                f"layer {digest}",
                sha256=_hex(digest),
                purpose="ARCHIVE",
                comment=f"mediaType {desc.get('mediaType')}",
            )
        )
        for path, fd in tar_files(self.store, digest, what).items():
            file_id = self.doc.add_file(hashed_id("File", digest, path), f"./{path}", fd)
            self.doc.contains_file(layer_id, file_id)
            info = self.binaries.get(_DIGEST_PREFIX + fd.sha256)
            if info is not None:
                link_go_binary(self.doc, file_id, info)
        self._layers[digest] = layer_id
        return layer_id


def describe_image(
    doc: SpdxDocument,
    store: Store,
    result: ActionResult,
    label: str,
    binaries: Mapping[str, Mapping[str, Any]],
) -> str:
    """A container image: index → platform images → layers → files (module doc).

    Args:
        result: the image-index action's result (one output with role ``index``); the index's
            whole closure must be in ``store``.
        binaries: ``sha256:<hex>`` of a Go binary the image was built with → its parsed build
            info; a file in a layer with that digest gets the binary's modules.
    Returns:
        the image index's ``sha256:<hex>``.
    Raises:
        BuildError: no index output, or a document or layer that cannot be read.
        IntegrityError: a blob is missing from the store or corrupt.
    """
    what = f"image {label}"
    digest = result.output("index", what).digest
    root = doc.add_package(
        package(
            spdx_id("Package-image", _hex(digest)),
            label,
            version=digest,
            sha256=_hex(digest),
            purl=oci_purl(label, digest),
            purpose="CONTAINER",
        )
    )
    doc.describes(root)
    _ImageWalk(doc, store, label, binaries).index(root, digest, f"{what} index {digest}")
    return digest


# -- charts --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OtherSbom:
    """Another artifact's SBOM a document may refer to: ``describes`` (``sha256:<hex>`` of the
    artifact), the document's ``name``, ``namespace`` and the ``sha1`` hex of its bytes."""

    describes: str
    name: str
    namespace: str
    sha1: str


def _pinned_image(reference: str) -> tuple[str, str] | None:
    """``repository@sha256:<hex>`` → (repository, digest); None for anything else."""
    repository, sep, digest = reference.rpartition("@")
    if not sep or not digest.startswith(_DIGEST_PREFIX):
        return None
    return repository, digest


def describe_chart(
    doc: SpdxDocument,
    store: Store,
    result: ActionResult,
    label: str,
    image_sboms: Mapping[str, OtherSbom] | None = None,
) -> str:
    """A Helm chart: the .tgz (role ``primary``) ``CONTAINS`` its files; the images its values pin
    (metadata ``images``: ``{KEY: "repository@sha256:<hex>"}``) are packages it ``DEPENDS_ON``,
    each ``DESCRIBED_BY`` its own SBOM when ``image_sboms`` (index digest → SBOM) has one.

    Returns:
        the .tgz's ``sha256:<hex>``.
    Raises:
        BuildError: no single primary output, or a .tgz that is not a tar.gz.
        IntegrityError: the .tgz is missing from the store or corrupt.
    """
    what = f"chart {label}"
    tgz = result.output("primary", what)
    digest = tgz.digest
    meta = result.metadata
    root = doc.add_package(
        package(
            spdx_id("Package-chart", label),
            str(meta.get("chartName") or label),
            version=str(meta["version"]) if meta.get("version") else None,
            file_name=tgz.name,
            sha256=_hex(digest),
            purpose="INSTALL",
            comment=f"appVersion {meta['appVersion']}" if meta.get("appVersion") else None,
        )
    )
    doc.describes(root)
    for path, fd in tar_files(store, digest, f"{what} archive {tgz.name!r}").items():
        file_id = doc.add_file(hashed_id("File", digest, path), f"./{path}", fd)
        doc.contains_file(root, file_id)
    images = json_object(meta.get("images"))
    pinned: dict[tuple[str, str], list[str]] = {}
    for key, reference in images.items():
        found = _pinned_image(str(reference))
        if found is not None:
            pinned.setdefault(found, []).append(str(key))
    for (repository, image_digest), keys in sorted(pinned.items()):
        name = repository.rsplit("/", 1)[-1]
        image = doc.add_package(
            package(
                hashed_id("Package-image", repository, image_digest),
                repository,
                version=image_digest,
                sha256=_hex(image_digest),
                purl=oci_purl(name, image_digest, {"repository_url": repository}),
                purpose="CONTAINER",
                comment="pinned by the chart's values as " + ", ".join(sorted(keys)),
            )
        )
        doc.relate(root, "DEPENDS_ON", image)
        other = (image_sboms or {}).get(image_digest)
        if other is not None:
            ref = doc.add_external_document(
                f"{other.name}-{_hex(image_digest)[:12]}", other.namespace, other.sha1
            )
            doc.relate(image, "DESCRIBED_BY", f"{ref}:SPDXRef-DOCUMENT")
    return digest
