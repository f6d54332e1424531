"""Machine images where bare-metal provisioners fetch them: ``nvkr release-set export
--images-dir OUT`` and the anonymous-read check of ``--image-url-from-registry``.

Consumer end of the data flow, beside the export text: :func:`write_images_dir` puts each machine
image disk of the release set (the QCOW2 layer, :func:`disk_images`) into a directory a web server
serves, under the name the Metal3 templates of ``--image-base-url URL`` use, with the checksum
files Ironic reads::

    OUT/
      <sha256 hex>.qcow2            0444, a hard link to the layout's blob, else a copy; from a
                                    registry, downloaded and verified
      <sha256 hex>.qcow2.sha256sum  "<hex>  <hex>.qcow2\\n" (sha256sum's format)
      SHA256SUMS                    the same line for every image of OUT, sorted
      .nvkr-images.json             the manifest: every image nvkr put here (file, digest, size)

Why both checksum files: Ironic (``ironic/common/checksum_utils.py``, ``get_checksum_from_url``)
takes an ``image_checksum`` URL of a file of md5sum/sha256sum-style lines and picks the line
ending in the image URL's base name, so one ``SHA256SUMS`` serves every image, and a file holding
one such line works too; tools that expect ``<image>.sha256sum`` next to each image find it. The
Metal3 templates nvkr writes keep the hex value itself as ``image.checksum`` (the CAPM3 ``Image``
type takes either): a value pinned in the export cannot drift from the release set, a checksum
file served from the same web server as the image guards against nothing the value does not, and
an Ironic may refuse checksum URLs (``[conductor] disable_support_for_checksum_files``).

The manifest makes OUT recognisable as nvkr's: a directory holding anything else, or a symbolic
link under any name (refused before its target is read), is refused (exit 2) unless it is an earlier export, where every image the manifest lists is hashed again
(a file whose bytes do not match its name is an integrity error, exit 3) and kept; images listed
but gone are forgotten, new ones are added. Nothing half-written ever carries a final name: each
file is made under a ``.nvkr-tmp-`` name in OUT and renamed into place once complete and
verified; the manifest is written first, listing what the export is about to add, so an
interrupted export leaves a directory the next one accepts (it removes the temp files).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from nvkr.atomic import sync_directory, write_atomic
from nvkr.delivery.export.document import export_json
from nvkr.delivery.export.metal3 import METAL3_MACHINE_TEMPLATE
from nvkr.errors import IntegrityError, UsageError
from nvkr.oci import mediatypes as mt
from nvkr.oci.layoutdir import BLOB_MODE, FILE_MODE, link_or_copy

MANIFEST: Final = ".nvkr-images.json"
SUMS: Final = "SHA256SUMS"
TMP_PREFIX: Final = ".nvkr-tmp-"
MANIFEST_KIND: Final = "ImagesDir"
MANIFEST_API_VERSION: Final = "nvkr.dev/v1alpha1"
_IMAGE = re.compile(r"([0-9a-f]{64})\.qcow2")
_READ_BLOCK: Final = 1 << 20  # bytes hashed at a time
#: seconds to connect / between bytes for the anonymous HEAD (Ironic's webserver timeout is 60)
HEAD_TIMEOUT: Final = (10, 60)


@dataclass(frozen=True)
class DiskImage:
    """A machine image disk: ``hex`` of its sha256 and ``size`` in bytes."""

    hex: str
    size: int

    @property
    def digest(self) -> str:
        return f"sha256:{self.hex}"

    @property
    def file(self) -> str:
        return f"{self.hex}.qcow2"


@dataclass
class ImagesReport:
    """What :func:`write_images_dir` did: ``written`` (file name → "hard-linked", "copied" or
    "downloaded"), ``present`` (images of the set an earlier export had written, hashed again),
    ``total`` (images in the directory now, other sets' included)."""

    path: Path
    written: dict[str, str] = field(default_factory=dict)
    present: list[str] = field(default_factory=list)
    total: int = 0

    def summary(self) -> str:
        """One line for stderr."""
        ways = [f"{sum(1 for w in self.written.values() if w == way)} {way}" for way in _WAYS]
        count = len(self.written) + len(self.present)
        return (
            f"images dir {self.path}: {count} machine image(s) of the set ({', '.join(ways)}, "
            f"{len(self.present)} already there); {self.total} in the dir"
        )


_WAYS: Final = ("hard-linked", "copied", "downloaded")


def disk_images(metadata: Mapping[str, Any]) -> list[DiskImage]:
    """The distinct QCOW2 disks of the release set's machine images, sorted by digest.

    Raises:
        UsageError: the set has no machine image, or one whose disk is not QCOW2.
        IntegrityError: the metadata names a disk digest that is not ``sha256:<64 hex>``.
    """
    found: dict[str, DiskImage] = {}
    for image in export_json(metadata, "sha256:" + "0" * 64)["machineImages"]:
        if image["mediaType"] != mt.NVKR_QCOW2:
            raise UsageError(
                f"machine image {image['name']!r} has disk media type {image['mediaType']!r}; "
                f"--images-dir writes QCOW2 disks ({mt.NVKR_QCOW2})",
                hint="build the machine image with format: qcow2",
            )
        digest = image["diskDigest"]
        match = re.fullmatch(r"sha256:([0-9a-f]{64})", digest) if isinstance(digest, str) else None
        if match is None:
            raise IntegrityError(
                f"release set metadata: machine image {image['name']!r} disk digest {digest!r} "
                "is not sha256:<64 hex>",
                hint="the metadata is damaged or from another tool; rebuild the release set",
            )
        found[match.group(1)] = DiskImage(match.group(1), int(image["size"]))
    if not found:
        raise UsageError(
            f"release set {metadata.get('name')}: no machine images to write to --images-dir",
            hint="leave out --images-dir, or export a set with machineImages",
        )
    return [found[h] for h in sorted(found)]


#: Puts the disk's bytes at the temp path (a new file), verified; says how ("hard-linked"...).
Fetch = Callable[[DiskImage, Path], str]


def layout_fetch(layout: Path) -> Fetch:
    """:data:`Fetch` from an OCI image layout: a hard link to ``blobs/sha256/<hex>`` where the
    file system allows (and the blob has the layout's read-only mode), else a copy; either way
    hashed before it counts."""

    def fetch(image: DiskImage, tmp: Path) -> str:
        blob = layout / "blobs" / "sha256" / image.hex
        link_or_copy(blob, tmp, image.digest, image.size)  # a copy is hashed on the way
        if os.path.samefile(blob, tmp):
            _check_file(tmp, image, f"blob {blob}")
            return "hard-linked"
        return "copied"

    return fetch


def registry_fetch(client: Any, repository: str) -> Fetch:
    """:data:`Fetch` from ``repository`` through ``client`` (a
    :class:`~nvkr.oci.registry.RegistryClient`): the blob is streamed into the temp file,
    hashed on the way (:meth:`~nvkr.oci.blobs.BlobTransfer.get_blob`)."""

    def fetch(image: DiskImage, tmp: Path) -> str:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            got = client.get_blob(repository, image.digest, out, size=image.size)
            if got != image.size:
                raise IntegrityError(
                    f"blob {image.digest} of {repository}: {got} bytes, expected {image.size}",
                    hint="the registry serves other bytes than the release set names",
                )
            out.flush()
            os.fchmod(out.fileno(), BLOB_MODE)
            os.fsync(out.fileno())
        return "downloaded"

    return fetch


def _check_file(path: Path, image: DiskImage, what: str) -> None:
    """Raise :class:`IntegrityError` unless ``path`` holds ``image``'s bytes."""
    h, size = hashlib.sha256(), 0
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)  # never a link's target
    with os.fdopen(fd, "rb") as f:
        while block := f.read(_READ_BLOCK):
            h.update(block)
            size += len(block)
    if size != image.size or h.hexdigest() != image.hex:
        raise IntegrityError(
            f"{what} is {size} bytes hashing to sha256:{h.hexdigest()}, expected "
            f"{image.size} bytes of {image.digest}",
            hint="the file was changed after nvkr wrote it: delete it and export again",
        )


def sums_line(image: DiskImage) -> str:
    """The sha256sum line of ``image``: ``<hex>  <hex>.qcow2`` (two spaces: text mode)."""
    return f"{image.hex}  {image.file}\n"


def manifest_bytes(images: Iterable[DiskImage]) -> bytes:
    """The manifest :data:`MANIFEST` listing ``images`` (sorted; same images, same bytes)."""
    doc = {
        "apiVersion": MANIFEST_API_VERSION,
        "kind": MANIFEST_KIND,
        "images": [
            {"file": i.file, "digest": i.digest, "size": i.size}
            for i in sorted(images, key=lambda i: i.hex)
        ],
    }
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def _read_manifest(path: Path) -> dict[str, DiskImage]:
    """file name → image of an earlier export's manifest.

    Raises:
        IntegrityError: not a manifest nvkr writes.
    """
    try:
        doc = json.loads(path.read_bytes())
        if doc.get("kind") != MANIFEST_KIND or not isinstance(doc.get("images"), list):
            raise ValueError(f"kind {doc.get('kind')!r}, expected {MANIFEST_KIND}")
        listed = {}
        for entry in doc["images"]:
            match = _IMAGE.fullmatch(str(entry["file"]))
            if match is None or entry["digest"] != f"sha256:{match.group(1)}":
                raise ValueError(f"entry {entry!r} names no image by its digest")
            listed[match.group(0)] = DiskImage(match.group(1), int(entry["size"]))
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise IntegrityError(
            f"{path} is not the manifest of an nvkr images dir: {e}",
            hint="it was changed after nvkr wrote it: restore it, or export into a new directory",
        ) from e
    return listed


def _earlier_export(out: Path) -> dict[str, DiskImage]:
    """The images an earlier export left in ``out`` (hashed again), {} for a new or empty dir;
    removes the temp files of an interrupted export and the checksum files of forgotten images.

    Raises:
        UsageError: ``out`` is not a directory, or holds a file nvkr did not write there.
        IntegrityError: a file whose bytes do not match its name, or a damaged manifest.
    """
    try:
        entries = sorted(os.listdir(out))
    except FileNotFoundError:
        return {}
    except NotADirectoryError as e:
        raise UsageError(
            f"--images-dir {out} is not a directory", hint="give a new or an empty directory"
        ) from e
    if not entries:
        return {}
    # before anything of it is read or hashed: a link could name any file (a device, another
    # user's file, something huge), and the web server would serve its target
    links = [e for e in entries if not e.startswith(TMP_PREFIX) and (out / e).is_symlink()]
    if links:
        raise UsageError(
            f"--images-dir {out}: {links[0]} is a symbolic link; nvkr reads and serves only the "
            "files it wrote there",
            hint="replace the link with the file itself, or export into a new directory",
        )
    if MANIFEST not in entries:
        raise UsageError(
            f"--images-dir {out} holds other files ({entries[0]}) and is no earlier "
            f"nvkr export (no {MANIFEST})",
            hint="give a new or an empty directory, or one an earlier export wrote",
        )
    listed = _read_manifest(out / MANIFEST)
    ours = {MANIFEST, SUMS} | set(listed) | {f"{name}.sha256sum" for name in listed}
    foreign = [e for e in entries if e not in ours and not e.startswith(TMP_PREFIX)]
    if foreign:
        raise UsageError(
            f"--images-dir {out} is an earlier nvkr export but also holds {foreign[0]}, "
            f"which {MANIFEST} does not list",
            hint="move it elsewhere: nvkr adds only its own files to an images dir",
        )
    kept = {}
    for name, image in listed.items():
        if name in entries:
            _check_file(out / name, image, f"{out / name}")
            kept[name] = image
    for name in entries:
        if name.startswith(TMP_PREFIX):
            (out / name).unlink()  # left by an interrupted export
    _check_sums(out, entries, listed, kept)
    return kept


def _check_sums(
    out: Path, entries: list[str], listed: Mapping[str, DiskImage], kept: Mapping[str, DiskImage]
) -> None:
    """Raise :class:`IntegrityError` for a checksum file an earlier export wrote that now says
    something else; remove those of images that are gone."""
    for name in entries:
        if not name.endswith(".sha256sum"):
            continue
        image = kept.get(name.removesuffix(".sha256sum"))
        if image is None:  # its image is gone
            (out / name).unlink()
        elif (out / name).read_text(errors="replace") != sums_line(image):
            raise IntegrityError(
                f"{out / name} does not hold the checksum of {image.file}",
                hint="it was changed after nvkr wrote it: delete it and export again",
            )
    if SUMS in entries:
        for n, line in enumerate((out / SUMS).read_text(errors="replace").splitlines(), 1):
            hexdigest, _, file = line.partition("  ")
            if file not in listed or listed[file].hex != hexdigest:
                raise IntegrityError(
                    f"{out / SUMS} line {n}: {line[:100]!r} is not the checksum of an image "
                    "nvkr wrote here",
                    hint="it was changed after nvkr wrote it: delete it and export again",
                )


def write_images_dir(out: Path, images: Sequence[DiskImage], fetch: Fetch) -> ImagesReport:
    """Put ``images`` into ``out`` (created if missing) as the module docstring draws it,
    keeping an earlier export's images; ``fetch`` brings each missing one.

    Raises:
        UsageError: ``out`` is not a directory, holds files nvkr did not write, or cannot be
            written (naming it and the reason).
        IntegrityError: an earlier export's file does not match its name, or a fetched disk
            does not match its digest (nothing of it is left under its name).
        RegistryError: the registry fails.
    """
    report = ImagesReport(out)
    try:
        kept = _earlier_export(out)
        report.present = sorted(i.file for i in images if i.file in kept)
        adding = [i for i in images if i.file not in kept]
        everything = {**kept, **{i.file: i for i in adding}}
        report.total = len(everything)
        out.mkdir(parents=True, exist_ok=True)
        # first: an interrupted export must leave a dir whose every image the manifest lists
        _write_file(out / MANIFEST, manifest_bytes(everything.values()))
        for image in adding:
            tmp = out / f"{TMP_PREFIX}{image.hex}"
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            try:
                report.written[image.file] = fetch(image, tmp)
                os.replace(tmp, out / image.file)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
        for image in everything.values():
            _write_file(out / f"{image.file}.sha256sum", sums_line(image).encode())
        sums = "".join(sums_line(everything[name]) for name in sorted(everything))
        _write_file(out / SUMS, sums.encode())
        sync_directory(out)
    except OSError as e:
        if e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.ENOSPC):
            raise
        raise UsageError(
            f"--images-dir {out}: cannot write {e.filename or out}: {e.strerror}",
            hint="give a directory you can write to, on a file system with room for the images",
        ) from e
    return report


def _write_file(path: Path, data: bytes) -> None:
    """``data`` at ``path`` (mode 0644, for the web server) via a temp file and a rename;
    unchanged when it already holds them."""
    with contextlib.suppress(OSError):
        if path.read_bytes() == data and path.stat().st_mode & 0o7777 == FILE_MODE:
            return
    write_atomic(path, data, mode=FILE_MODE, prefix=TMP_PREFIX)


# -- --image-url-from-registry: can Ironic read it? ------------------------------------------------
def template_image_urls(resources: Iterable[Mapping[str, Any]]) -> list[str]:
    """The distinct ``image.url`` of the Metal3MachineTemplates in ``resources``, sorted."""
    urls = set()
    for doc in resources:
        if doc.get("kind") == METAL3_MACHINE_TEMPLATE:
            url = (((doc.get("spec") or {}).get("template") or {}).get("spec") or {}).get("image")
            if isinstance(url, Mapping) and isinstance(url.get("url"), str):
                urls.add(url["url"])
    return sorted(urls)


def check_anonymous_reads(urls: Iterable[str], warn: Callable[[str], None]) -> None:
    """One HEAD per URL without credentials, as Ironic validates an image URL before it
    downloads (``ironic/common/image_service.py``, ``HttpImageService.validate_href``: anything
    but 200 fails the deployment); a warning to ``warn`` for each that does not answer 200.

    No ``Authorization`` goes out: no credentials are given, and the session's do-nothing auth
    keeps requests from applying ``~/.netrc`` (the environment's proxies and CA bundle still
    apply, as they do to Ironic's requests). Redirects are followed (a registry may send blob
    reads to a storage host) and the final answer counts.
    """
    import requests

    from nvkr.oci.session import _NoNetrc

    with requests.Session() as session:
        session.auth = _NoNetrc()
        for url in urls:
            try:
                resp = session.head(url, allow_redirects=True, timeout=HEAD_TIMEOUT)
                resp.close()
            except requests.RequestException as e:
                answer = f"could not be reached ({type(e).__name__}: {e})"
            else:
                if resp.status_code == 200:
                    continue
                answer = f"answers {resp.status_code} {resp.reason or ''}".rstrip()
            warn(
                f"warning: {url} {answer} to an anonymous HEAD: Ironic sends no credentials, so "
                "it cannot download this machine image; export with --images-dir DIR and serve "
                "DIR with a web server (--image-base-url URL), or make the repository public"
            )
