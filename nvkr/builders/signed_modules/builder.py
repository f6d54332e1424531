"""The ``signed-modules`` builder: the kernel modules of a root filesystem that carry no
signature (those DKMS built: the kernel package's own are signed by Debian), signed with the
owner's Secure Boot key, so that a kernel in lockdown (Secure Boot enforcing) loads them once the
owner's certificate is enrolled as a MOK.

A separate action from the ``rootfs`` one, so the unsigned tree stays bit-identical whoever
builds it, and the signed modules are bit-identical for every build by the key holder:

1. The rootfs tar is read; every module (``.ko``, ``.ko.xz``) under ``/usr/lib/modules/KERNEL/``
   outside the kernel package's ``kernel/`` directory is decompressed; the unsigned ones are
   signed. A module compressed otherwise (``.ko.zst``, ``.ko.gz``) is refused.
2. Each is signed by the tree's own ``sign-file`` (``/usr/lib/linux-kbuild-*/scripts/sign-file``,
   from the kernel's headers, which DKMS needs anyway), run through the tree's dynamic loader and
   libraries as :func:`nvkr.disk.grub.tree_mkimage` runs GRUB's tool: ``sign-file sha256 KEY
   CERT MODULE``, a PKCS#7 signature without signed attributes (no signing time), which with an
   RSA key is a function of key and module alone. The key is in a 0600 file of the work dir
   while the action runs (:meth:`nvkr.secureboot.owner.OwnerKey.pem_file`).
3. Each signature is checked (:func:`nvkr.secureboot.modsig.verify_module`: by the owner's
   certificate, over exactly the unsigned bytes), then the module is compressed as the kernel
   build compresses its own (``xz --check=crc32 --lzma2=dict=1MiB``, one thread) through
   Python's ``lzma``, whose liblzma version is in the action key.

The output is a tar of the signed modules under their names in the rootfs tar, with their modes,
owners and times, for the node image to lay over its tree; the metadata lists each module with
the sha256 of its unsigned ELF payload (what a rebuild without the key compares) and of its
signed file.
"""

from __future__ import annotations

import hashlib
import lzma
import re
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from nvkr.builders import treetools
from nvkr.builders.api import (
    ActionContext,
    ActionSpec,
    Builder,
    PlanRefs,
    Problem,
    ReleaseKind,
    ResolvedSource,
)
from nvkr.builders.node_image.staging import primary_output
from nvkr.builders.owner_signing import (
    action_certificates,
    certificate_params,
    read_certificate,
    signing_problems,
)
from nvkr.builders.signed_modules.artifact import SignedModulesArtifact
from nvkr.errors import BuildError
from nvkr.hosttools import package_version
from nvkr.jsondoc import JsonObject
from nvkr.recipe.matrix import Variant
from nvkr.repro import tar_member, tar_writer
from nvkr.run import pinned_env, run
from nvkr.secureboot import modsig
from nvkr.secureboot.owner import (
    OwnerCertificate,
    has_owner_key,
    owner_key_for,
)
from nvkr.secureboot.published import PublishedSignatures, published_signatures

if TYPE_CHECKING:
    from nvkr.action import Action

MEDIA_TYPE = "application/vnd.nvkr.signed-modules.v1.tar"
#: the kernel build's xz options for modules (scripts/Makefile.modinst: --check=crc32
#: --lzma2=dict=1MiB), one thread: Python's lzma is single-threaded
XZ_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 6, "dict_size": 1 << 20}]
#: a module path in the tree: [./][usr/]lib/modules/KERNEL/REST
_MODULE = re.compile(r"^(?:\./)?(?:usr/)?lib/modules/([^/]+)/(.+\.ko(?:\.xz|\.zst|\.gz)?)$")
_SIGN_FILE = re.compile(r"^(?:\./)?usr/lib/linux-kbuild-[^/]+/scripts/sign-file$")


def compress_module(data: bytes) -> bytes:
    """``data`` as ``xz --check=crc32 --lzma2=dict=1MiB -T1`` writes it (byte for byte)."""
    return lzma.compress(data, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32, filters=XZ_FILTERS)


class SignedModulesBuilder(Builder[SignedModulesArtifact]):
    name = "signed-modules"
    version = "1"
    per_arch = True
    artifact_model = SignedModulesArtifact
    release_kind = ReleaseKind.INTERNAL

    def check(
        self, artifact_name: str, artifact: SignedModulesArtifact, variant: Variant
    ) -> list[Problem]:
        return signing_problems(
            artifact_name, "rootfs", artifact.rootfs, "rootfs", artifact.certificate, variant
        )

    def plan(
        self, artifact_name: str, artifact: SignedModulesArtifact, variant: Variant, refs: PlanRefs
    ) -> ActionSpec:
        rootfs = refs.artifact(artifact.rootfs)
        cert = refs.source(artifact.certificate.source)
        params: JsonObject = {
            "arch": rootfs.params.get("arch"),
            "rootfs": rootfs.key,
            "certificate": certificate_params(cert, artifact.certificate),
        }
        purpose = "the signed-modules builder (the xz compression of the signed modules)"
        return ActionSpec(
            params=params,
            inputs={"certificate": cert.digest},
            tools={"liblzma5": package_version("liblzma5", purpose=purpose)},
            sources={"certificate": cert},
            deps=(rootfs.key,),
        )

    def owner_certificates(
        self, action: Action, source_path: Callable[[ResolvedSource], Path]
    ) -> list[OwnerCertificate]:
        return action_certificates(action, source_path)

    def run(self, ctx: ActionContext) -> None:
        params = ctx.action.params
        arch = str(params["arch"])
        cert = read_certificate(ctx.input_path("certificate"), params)
        rootfs_tar = primary_output(ctx, ctx.deps[str(params["rootfs"])], "rootfs")
        out = ctx.workdir / "signed-modules.tar"
        with tarfile.open(rootfs_tar) as tf:
            unsigned, signed_already, sign_file = _unsigned_modules(tf)
            _log(ctx, f"{len(unsigned)} unsigned modules, {signed_already} signed already")
            signed: list[tuple[tarfile.TarInfo, bytes]] = []
            records: list[JsonObject] = []
            published = None if has_owner_key() else published_signatures()
            if unsigned and published is not None:  # a rebuild without the key: checked reuse
                for info, payload in unsigned:
                    data = _published(published, info, payload, cert)
                    records.append(_record(info, payload, data))
                    signed.append((info, data))
            elif unsigned:
                if sign_file is None:
                    raise BuildError(
                        f"{len(unsigned)} modules of the rootfs are unsigned "
                        f"({unsigned[0][0].name}) and it holds no sign-file "
                        "(/usr/lib/linux-kbuild-*/scripts/sign-file)",
                        hint="the tree gets it with the kernel's headers (linux-headers-*), "
                        "which DKMS needs too",
                    )
                argv = _tree_tool(tf, sign_file, arch, ctx.workdir / "tools")
                key = owner_key_for(cert, ctx.action.ref)
                cert_file = ctx.workdir / "owner.der"
                cert_file.write_bytes(cert.der)
                with key.pem_file(ctx.workdir) as key_file:
                    for n, (info, payload) in enumerate(unsigned, 1):
                        ctx.progress(n - 1, len(unsigned), "steps", f"sign {info.name}")
                        data = _sign(ctx, argv, key_file, cert_file, info, payload, n, cert)
                        records.append(_record(info, payload, data))
                        signed.append((info, data))
        with open(out, "wb") as f, tar_writer(f) as tw:
            for info, data in sorted(signed, key=lambda s: s[0].name):
                m = tar_member(info.name, mtime=int(info.mtime), mode=info.mode, size=len(data))
                m.uid, m.gid = info.uid, info.gid
                tw.addfile(m, _Reader(data))
        ctx.add_output(out, name="signed-modules.tar", media_type=MEDIA_TYPE)
        ctx.metadata.update(
            {
                "certificate": {"digest": cert.digest, "subject": cert.subject},
                "modules": records,
                "signedAlready": signed_already,
            }
        )


def _log(ctx: ActionContext, line: str) -> None:
    with open(ctx.log_file, "a", encoding="utf-8") as f:
        f.write(f"signed-modules: {line}\n")


class _Reader:
    """A file object over bytes for :meth:`tarfile.TarFile.addfile`."""

    def __init__(self, data: bytes) -> None:
        self._data, self._pos = data, 0

    def read(self, n: int = -1) -> bytes:
        end = len(self._data) if n < 0 else self._pos + n
        chunk = self._data[self._pos : end]
        self._pos += len(chunk)
        return chunk


def _unsigned_modules(
    tf: tarfile.TarFile,
) -> tuple[list[tuple[tarfile.TarInfo, bytes]], int, tarfile.TarInfo | None]:
    """The modules of the tree that carry no signature (each with its decompressed bytes), how
    many carry one, and the tree's sign-file (None when it has none)."""
    unsigned: list[tuple[tarfile.TarInfo, bytes]] = []
    signed_already = 0
    sign_file = None
    for info in tf:
        if _SIGN_FILE.match(info.name) and info.isfile():
            sign_file = info
            continue
        m = _MODULE.match(info.name)
        if m is None or not info.isfile() or m.group(2).startswith("kernel/"):
            continue
        if info.name.endswith((".zst", ".gz")):
            raise BuildError(
                f"module {info.name}: compressed with {info.name.rsplit('.', 1)[1]}; modules are "
                "signed and compressed again as .ko or .ko.xz only",
                hint="Debian's kernels (CONFIG_MODULE_COMPRESS_XZ) want .ko.xz, as DKMS writes them",
            )
        f = tf.extractfile(info)
        assert f is not None
        payload = modsig.decompress(f.read(), info.name)
        if modsig.split_module(payload, info.name).pkcs7 is None:
            unsigned.append((info, payload))
        else:
            signed_already += 1
    return unsigned, signed_already, sign_file


def _tree_tool(tf: tarfile.TarFile, tool: tarfile.TarInfo, arch: str, dest: Path) -> list[str]:
    """The argv running ``tool`` (a member of the tree's tar) through the tree's own loader."""
    name = treetools.member_name(tool)
    treetools.extract(tf, dest, lambda n: n == name or treetools.is_library(n, arch))
    return treetools.loader_argv(dest, arch, name, "signing the modules")


def _sign(
    ctx: ActionContext,
    argv: list[str],
    key_file: Path,
    cert_file: Path,
    info: tarfile.TarInfo,
    payload: bytes,
    n: int,
    cert: OwnerCertificate,
) -> bytes:
    """One module signed by sign-file, its signature checked, compressed as it came."""
    work = ctx.workdir / "modules" / f"{n}.ko"
    work.parent.mkdir(exist_ok=True)
    work.write_bytes(payload)
    env = pinned_env({"OPENSSL_CONF": "/dev/null"})
    run([*argv, "sha256", key_file, cert_file, work], env=env, log_file=ctx.log_file)
    signed = work.read_bytes()
    work.unlink()
    split = modsig.split_module(signed, info.name)
    if split.payload != payload:
        raise BuildError(f"sign-file changed the bytes of {info.name}, not only appended to them")
    modsig.verify_module(signed, cert, info.name)
    return compress_module(signed) if info.name.endswith(".xz") else signed


def _published(
    published: PublishedSignatures, info: tarfile.TarInfo, payload: bytes, cert: OwnerCertificate
) -> bytes:
    """The module signed as the release set holds it, its signature checked over the rebuilt
    ``payload`` by ``cert``, compressed as a signing build compresses it."""
    found = published.signed_module(payload)
    if found is None:
        raise BuildError(
            f"module {info.name}: no machine image of the release set holds a signed module "
            "whose unsigned bytes are the rebuilt ones (the module is not reproducible, or the "
            "image does not carry it)",
            hint="without the owner's key a rebuild takes each signature from the release set; "
            "with --secure-boot-key it signs again",
        )
    signed, where = found
    modsig.verify_module(signed, cert, f"{info.name} (from {where})")
    if modsig.split_module(signed, where).payload != payload:  # the digest matched: cannot be
        raise BuildError(f"{where}: its payload is not the rebuilt module's")
    published.record("/" + info.name.removeprefix("./"), where, cert.subject, cert.digest)
    return compress_module(signed) if info.name.endswith(".xz") else signed


def _record(info: tarfile.TarInfo, payload: bytes, data: bytes) -> JsonObject:
    m = _MODULE.match(info.name)
    assert m is not None
    return {
        "path": "/" + info.name.removeprefix("./"),
        "kernel": m.group(1),
        "unsigned": "sha256:" + hashlib.sha256(payload).hexdigest(),
        "signed": "sha256:" + hashlib.sha256(data).hexdigest(),
    }
