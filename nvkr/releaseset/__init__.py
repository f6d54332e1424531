"""The release set: assembled from cached artifacts into the store, then materialised on disk.

Last step of the data flow (docs/architecture.md, "The data flow", step 7): the ``release-set``
action gets the release set's spec (its params) and the cached results of the actions it names, and
:func:`assemble` writes an OCI image layout's worth of blobs into the store; its result is an
ordinary action result, so an unchanged release set is a cache hit. :func:`materialize` then puts
that layout at ``dist/<name>/`` atomically; ``publish`` pushes the same blobs to a registry.

The modules, in the order the data flows through them: :mod:`.spec` (the action's params: the
name, the artifacts grouped by action, the variants' order), :mod:`.artifacts` (the layout's
blobs; a binary or an image as the set holds it), :mod:`.chart` (a Helm chart manifest as
``helm push`` makes it), :mod:`.assemble` (provenance, the release set index, ``index.json``),
:mod:`.metadata` (the metadata JSON and :func:`read_metadata`), :mod:`.materialize` (the
layout on disk) and :mod:`.record` (the build record written beside the layout: the times of
the set's actions, which the layout never holds).

Shape of the layout (image-spec v1.1.0 image-layout.md)::

    index.json        one descriptor: the release set index, ref.name = <name>
    release set index artifactType application/vnd.nvkr.release-set.v1+json; manifests:
      [0]             metadata manifest: config = the metadata JSON (METADATA_SCHEMA_VERSION)
      [1..n]          one entry per distinct action key (sorted by name, platform, digest), by
                      the spec artifact's ``kind``:
                      binary  an OCI artifact manifest (``artifactType`` from the spec,
                              ``platform`` set), layers = primary output + the rest
                      image   the image-index action's own OCI image index, as built (nested
                              in the release set index), with its whole closure: child
                              manifests, configs, layers, subjects
                      chart   a Helm chart manifest as ``helm push`` makes it: config = Helm's
                              config JSON, layers = the .tgz (+ .prov), no artifactType
      [n+1..]         one in-toto provenance manifest per entry, ``subject`` = that entry

Every entry carries the annotation ``dev.nvkr.artifact`` (the artifact's name); only the
``index.json`` entry carries ``org.opencontainers.image.ref.name``.

The descriptors inside the release set index carry no ``artifactType`` (the manifests
themselves do): containers/image before v5.32 (skopeo < 1.16, e.g. Debian's 1.9.3) drops that
field when it clones an index during ``skopeo copy --all`` and then writes the index re-serialised
under a new digest (containers/image#2460, fixed by #2475). Without it, skopeo keeps the original
bytes and the release set digest survives a copy. A release set holding an image cannot be
copied whole by skopeo at all: containers/image refuses an index nested in an index ("Unexpectedly
received a manifest list instead of a manifest for a single image", containers/image#2076, open);
``skopeo copy --all`` of the image index alone works, and so does any tool that walks nested
indexes (umoci, oras, containerd).

Every byte is a function of the spec and the artifacts' bytes: no wall-clock time (the epoch is
the only date), canonical JSON, sorted lists; so a rebuild gives the same release set digest.
"""

from nvkr.releaseset.assemble import assemble
from nvkr.releaseset.chart import helm_annotations
from nvkr.releaseset.materialize import materialize
from nvkr.releaseset.metadata import METADATA_SCHEMA_VERSION, read_metadata
from nvkr.releasespec import KINDS, check_name

__all__ = [
    "KINDS",
    "METADATA_SCHEMA_VERSION",
    "assemble",
    "check_name",
    "helm_annotations",
    "materialize",
    "read_metadata",
]
