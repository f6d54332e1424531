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
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from nvkr.canonical import canonical_json, canonical_json_file, hex_of
from nvkr.errors import ChecksumError, FetchError, IntegrityError, LockError, UsageError
from nvkr.fetch import FetchContext, ensure
from nvkr.fetch.checksums import algorithm_for
from nvkr.fetch.http import url_filename
from nvkr.fetch.oci import LAYOUT_PREFIX
from nvkr.oci import mediatypes as mt
from nvkr.oci.session import LOOPBACK
from nvkr.recipe.models import AptKeyring
from nvkr.store import Store, write_file_atomic
from nvkr.yamlemit import double_quoted

MIRROR_VERSION = 1
INDEX = "index.json"
_CHUNK = 1 << 20


@dataclass
class ExportReport:
    """What an export did: blobs ``written`` (new in DIR), ``reused`` (already there), with their
    bytes; ``linked`` of the written ones are hard links; ``fetched`` names the sources that were
    missing from the store and fetched first; ``skipped`` the path sources left out."""

    directory: Path
    sources: int = 0
    written: int = 0
    written_bytes: int = 0
    reused: int = 0
    reused_bytes: int = 0
    linked: int = 0
    fetched: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


@dataclass
class ImportReport:
    """What an import did: blobs ``added`` to the store (verified) and their bytes, blobs the
    store already ``present``ly held (not read)."""

    added: int = 0
    added_bytes: int = 0
    present: int = 0


@dataclass(frozen=True)
class RecipeSelection:
    """One recipe to export: its bound sources, as ``open_session`` gives them.

    ``bindings`` maps ``(name, canonical spec)`` → ``(source model, lock entry, base_dir,
    variant ids)``.
    """

    name: str
    path: str
    digest: str
    variants: list[str]
    lockfile_path: str
    lockfile_digest: str
    bindings: dict[bytes, tuple[str, Any, dict[str, Any], Path, list[str]]]
    skipped: list[str]


# -- export ------------------------------------------------------------------------------------
def select_sources(loaded: Any, variants: list[Any], resolver: Any) -> RecipeSelection:
    """Bind every source of ``variants`` to its lock entry (``resolver`` must be ``locked``).

    Args:
        loaded: the :class:`~nvkr.recipe.LoadedRecipe`; variants: the selected cells;
        resolver: a :class:`~nvkr.lock.Resolver` over the recipe's lockfile.
    Raises:
        LockError: there is no lockfile, or it lacks a source of a selected variant (exit 2).
    """
    from nvkr.lock import lock_digest
    from nvkr.recipe.models import PathSource

    if resolver.lock is None:
        raise LockError(
            f"{loaded.path}: there is no lockfile at {resolver.lock_path}",
            hint=f"run `nvkr lock {loaded.path}` first: an export holds what the lockfile pins",
        )
    bindings: dict[bytes, tuple[str, Any, dict[str, Any], Path, list[str]]] = {}
    skipped: set[str] = set()
    for variant in variants:
        for name, source in sorted(variant.recipe.sources.items()):
            if isinstance(source, PathSource):
                skipped.add(name)
                continue
            bound = resolver.source_for(variant, name)
            key = canonical_json([name, source.model_dump(exclude_none=True)])
            if key not in bindings:
                bindings[key] = (name, source, bound.entry, bound.base_dir, [])
            bindings[key][4].append(variant.id)
    return RecipeSelection(
        name=loaded.recipe.metadata.name,
        path=str(loaded.path),
        digest=loaded.digest,
        variants=[v.id for v in variants],
        lockfile_path=str(resolver.lock_path),
        lockfile_digest=lock_digest(resolver.lock),
        bindings=bindings,
        skipped=sorted(skipped),
    )


def _oci_blobs(store: Store, source: Any, entry: dict[str, Any]) -> list[dict[str, Any]]:
    """Every blob of an oci source's closure, documents with their media type, walked in the
    store from the pinned digest (as :mod:`nvkr.fetch.oci` pulled it)."""
    ref: str = source.oci
    base = None
    if not ref.startswith(LAYOUT_PREFIX):
        registry, _, repository = ref.partition("/")
        host = urlsplit("//" + registry).hostname or registry
        scheme = "http" if source.insecure or host in LOOPBACK else "https"
        base = f"{scheme}://{registry}/v2/{repository}"
    out: dict[str, dict[str, Any]] = {}
    todo: list[tuple[str, str | None]] = [(entry["digest"], entry.get("mediaType"))]
    while todo:
        digest, media_type = todo.pop()
        if digest in out:
            continue
        item: dict[str, Any] = {"digest": digest, "urls": []}
        is_doc = media_type is None or media_type in mt.MANIFEST_TYPES
        if is_doc:
            try:
                doc = json.loads(store.read_blob(digest))
            except (OSError, ValueError) as e:
                raise IntegrityError(
                    f"oci source {ref}: store blob {digest} is not a readable JSON document: {e}"
                ) from e
            media_type = media_type or (doc.get("mediaType") if isinstance(doc, dict) else None)
            item["mediaType"] = media_type or mt.OCI_MANIFEST
            children = []
            if isinstance(doc, dict):
                children = list(doc.get("manifests") or []) + list(doc.get("layers") or [])
                if isinstance(doc.get("config"), dict):
                    children.append(doc["config"])
            for child in children:
                if isinstance(child, dict) and isinstance(child.get("digest"), str):
                    # a descriptor without a media type is a leaf, as nvkr.fetch.oci walks it
                    todo.append((child["digest"], str(child.get("mediaType") or "")))
        if base is not None:
            item["urls"] = [f"{base}/{'manifests' if is_doc else 'blobs'}/{digest}"]
        out[digest] = item
    listed = set(entry.get("blobs") or [])
    if listed and listed != set(out):
        raise IntegrityError(
            f"oci source {ref}: the closure of {entry['digest']} in the store has other blobs "
            "than the lock entry lists",
            hint="run `nvkr lock` again",
        )
    return [out[d] for d in sorted(out)]


def _checksum_file(source: Any, entry: dict[str, Any]) -> dict[str, str] | None:
    """The ``checksumUrl`` of a url source rebuilt from the lock: ``HASH  NAME\\n``."""
    url = getattr(source, "checksumUrl", None)
    if not url:
        return None
    algo = algorithm_for(url, getattr(source, "checksumAlgorithm", None))
    algo = algo or ("sha512" if "sha512" in entry else "sha256")
    pinned = entry.get(algo) or (entry["digest"] if algo == "sha256" else None)
    if not pinned:
        return None
    name = getattr(source, "filename", None) or url_filename(entry["url"])
    return {"url": url, "algorithm": algo, "text": f"{hex_of(pinned)}  {name}\n"}


def source_blobs(store: Store, name: str, source: Any, entry: dict[str, Any]) -> dict[str, Any]:
    """The index entry of one resolved source (its blobs, their upstream URLs and sizes).

    Raises:
        IntegrityError: a blob is missing from the store or its size differs from the lock.
    """
    kind = entry.get("kind")
    blobs: list[dict[str, Any]] = []
    item: dict[str, Any] = {"name": name, "kind": kind, "digest": entry["digest"]}
    if kind == "url":
        item["upstream"] = entry["url"]
        blobs.append({"digest": entry["digest"], "size": entry.get("size"), "urls": [entry["url"]]})
        checksum = _checksum_file(source, entry)
        if checksum is not None:
            item["checksum"] = checksum
    elif kind == "pypi":
        item["upstream"] = f"{entry.get('name')}=={entry.get('version')} {entry.get('filename')}"
        blob: dict[str, Any] = {"digest": entry["digest"], "urls": []}
        if entry.get("member"):
            blob["role"] = "member"  # the wheel's member, not the wheel: nothing to serve
        elif entry.get("url"):
            blob["urls"] = [entry["url"]]
        blobs.append(blob)
    elif kind == "git":
        item["upstream"] = f"{entry.get('url')}@{entry.get('commit')}"
        blobs.append({"digest": entry["digest"], "urls": []})
    elif kind == "apt":
        item["upstream"] = sorted({r.url for r in source.apt.values()})
        blobs.append({"digest": entry["digest"], "urls": [], "role": "manifest"})
        for p in entry["packages"]:
            blobs.append(
                {
                    "digest": p["sha256"],
                    "size": p["size"],
                    "urls": [p["url"]],
                    "package": f"{p['name']} {p['version']} ({p['arch']})",
                }
            )
        # keys fetched by URL and pinned by fingerprint live in the store too (path keyrings
        # stay files of the repository or the host)
        keyrings = entry.get("keyrings") or {}
        for repo_name, repo in sorted(source.apt.items()):
            if isinstance(repo.keyring, AptKeyring) and repo_name in keyrings:
                blobs.append(
                    {"digest": keyrings[repo_name], "urls": [repo.keyring.url], "role": "keyring"}
                )
    elif kind == "oci":
        item["upstream"] = f"{source.oci}@{entry['digest']}"
        blobs = _oci_blobs(store, source, entry)
    else:
        raise LockError(f"lock entry for source {name!r} has an unknown kind {kind!r}")
    for b in blobs:
        path = store.blob_path(b["digest"])
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise IntegrityError(
                f"source {name!r}: blob {b['digest']} is not in the store {store.blobs_dir}"
            ) from None
        if b.get("size") is not None and b["size"] != size:
            raise IntegrityError(
                f"source {name!r}: store blob {path} has {size} bytes, the lock says {b['size']}",
                hint="delete it from the store and export again (it will be fetched)",
            )
        b["size"] = size
    item["blobs"] = blobs
    return item


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def _place(src: Path, dst: Path, digest: str) -> bool:
    """Put ``src`` at ``dst`` atomically: a hard link when possible, else a copy checked against
    ``digest`` while it is written. Returns True for a link.

    Raises:
        IntegrityError: the store blob does not hash to its name (nothing is left at ``dst``).
    """
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=dst.parent)
    os.close(fd)
    try:
        os.unlink(tmp)
        try:
            os.link(src, tmp)
            linked = True
        except OSError:  # another file system, or links not allowed: copy
            linked = False
        if not linked:
            h = hashlib.sha256()
            with open(src, "rb") as fin, open(tmp, "wb") as fout:
                while chunk := fin.read(_CHUNK):
                    h.update(chunk)
                    fout.write(chunk)
                fout.flush()
                os.fsync(fout.fileno())
            if "sha256:" + h.hexdigest() != digest:
                raise IntegrityError(
                    f"store blob {src} is corrupt: its sha256 is sha256:{h.hexdigest()}",
                    hint="delete it (or the whole store) and export again",
                )
            os.chmod(tmp, 0o444)
        os.replace(tmp, dst)
        return linked
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def export_mirror(
    selections: list[RecipeSelection],
    ctx: FetchContext,
    directory: Path,
    *,
    verify: bool = False,
    progress: Callable[[str], None] | None = None,
) -> ExportReport:
    """Write every blob the selected sources need into ``directory``, then its ``index.json``.

    Sources missing from ``ctx.store`` are fetched first (:func:`nvkr.fetch.ensure`). A blob
    already in ``directory`` with the right size is reused (``verify``: re-hashed too); one of
    the wrong size or digest is replaced.

    Raises:
        FetchError, OfflineError: a source is not in the store and cannot be fetched (named).
        ChecksumError, IntegrityError: a fetched or stored blob fails its digest (exit 3).
    """
    say = progress or (lambda _msg: None)
    report = ExportReport(directory=directory)
    blobs_dir = directory / "blobs" / "sha256"
    blobs_dir.mkdir(parents=True, exist_ok=True)
    sources: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for sel in selections:
        for name in sel.skipped:
            skipped.append(
                {
                    "recipe": sel.name,
                    "name": name,
                    "kind": "path",
                    "reason": "a directory of the repository: it travels with the repository",
                }
            )
            report.skipped.append(f"{sel.name}/{name}")
        for key in sorted(sel.bindings):
            name, source, entry, base_dir, variants = sel.bindings[key]
            missing = not _all_present(ctx.store, entry)
            if missing:
                say(f"fetching {name} (not in the store)")
                try:
                    ensure(name, source, entry, ctx, base_dir=base_dir)
                except FetchError as e:
                    raise type(e)(
                        f"cannot export source {name!r} of recipe {sel.path}: {e.message}",
                        hint=e.hint
                        or "fetch it into the store first (nvkr build), or give --mirror",
                    ) from e
                report.fetched.append(name)
            item = source_blobs(ctx.store, name, source, entry)
            item["recipe"] = sel.name
            item["variants"] = sorted(variants)
            sources.append(item)
    seen: dict[str, int] = {}
    for item in sources:
        for b in item["blobs"]:
            if b["digest"] in seen:
                continue
            seen[b["digest"]] = b["size"]
            src = ctx.store.checked_path(b["digest"])  # never export a corrupt blob
            dst = blobs_dir / hex_of(b["digest"])
            if (
                dst.is_file()
                and dst.stat().st_size == b["size"]
                and (not verify or _file_sha256(dst) == b["digest"])
            ):
                report.reused += 1
                report.reused_bytes += b["size"]
                continue
            if _place(src, dst, b["digest"]):
                report.linked += 1
                ctx.store.refresh_seal(b["digest"])  # the link changed its ctime
            report.written += 1
            report.written_bytes += b["size"]
    report.sources = len(sources)
    index = {
        "nvkrMirror": MIRROR_VERSION,
        "recipes": [
            {
                "name": s.name,
                "path": s.path,
                "digest": s.digest,
                "variants": s.variants,
                "lockfile": {"path": s.lockfile_path, "digest": s.lockfile_digest},
            }
            for s in selections
        ],
        "sources": sources,
        "skipped": skipped,
        "blobs": {"count": len(seen), "bytes": sum(seen.values())},
    }
    write_file_atomic(directory / INDEX, canonical_json_file(index))
    return report


def _all_present(store: Store, entry: dict[str, Any]) -> bool:
    digests = [entry["digest"]]
    if entry.get("kind") == "apt":
        digests += [p["sha256"] for p in entry.get("packages") or []]
    if entry.get("kind") == "oci":
        digests += list(entry.get("blobs") or [])
    return all(store.has_blob(d) for d in digests)


# -- import ------------------------------------------------------------------------------------
def read_index(directory: Path) -> dict[str, Any]:
    """``DIR/index.json`` of an export, checked for shape.

    Raises:
        UsageError: there is none (not an export, or an export that did not finish).
        IntegrityError: it is not valid JSON or not a mirror index of this version.
    """
    path = directory / INDEX
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        raise UsageError(
            f"{directory} is not an nvkr mirror export: it has no {INDEX}",
            hint="give the DIR of `nvkr mirror export`; an interrupted export writes no index: run it again",
        ) from None
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise IntegrityError(f"{path}: not valid JSON: {e}") from e
    ok = (
        isinstance(doc, dict)
        and doc.get("nvkrMirror") == MIRROR_VERSION
        and isinstance(doc.get("sources"), list)
        and all(
            isinstance(s, dict)
            and isinstance(s.get("blobs"), list)
            and all(
                isinstance(b, dict)
                and isinstance(b.get("digest"), str)
                and b["digest"].startswith("sha256:")
                and len(b["digest"]) == 71
                and isinstance(b.get("size"), int)
                for b in s["blobs"]
            )
            for s in doc["sources"]
        )
    )
    if not ok:
        raise IntegrityError(f"{path}: not an nvkr mirror index (nvkrMirror {MIRROR_VERSION})")
    result: dict[str, Any] = doc
    return result


def _blob_label(source: dict[str, Any], blob: dict[str, Any]) -> str:
    what = f"source {source.get('name')!r} (recipe {source.get('recipe')})"
    if blob.get("package"):
        what += f", package {blob['package']}"
    if blob.get("urls"):
        what += f", {blob['urls'][0]}"
    return f"blob {blob['digest']} of {what}"


def import_mirror(
    directory: Path, store: Store, *, progress: Callable[[str], None] | None = None
) -> ImportReport:
    """Add every blob ``DIR/index.json`` lists to ``store``, each verified (sha256 and size)
    through the store's atomic writer. Blobs the store already holds are not read.

    Raises:
        UsageError: ``directory`` has no index.
        IntegrityError: a listed blob is missing from ``directory`` (exit 3).
        ChecksumError: a blob's bytes differ from its digest or size (exit 3); it is not stored.
    """
    say = progress or (lambda _msg: None)
    index = read_index(directory)
    report = ImportReport()
    done: set[str] = set()
    for source in index["sources"]:
        for blob in source["blobs"]:
            digest = blob["digest"]
            if digest in done:
                continue
            done.add(digest)
            if store.has_blob(digest):
                report.present += 1
                continue
            label = _blob_label(source, blob)
            path = directory / "blobs" / "sha256" / hex_of(digest)
            if not path.is_file():
                raise IntegrityError(
                    f"{label}: {path} is missing from the export",
                    hint="export again into that directory (it adds what is missing)",
                )
            with open(path, "rb") as f, store.writer(expected={"sha256": digest}, expected_size=blob["size"], what=label, url=str(path)) as w:  # fmt: skip
                w.copy_from(f)
                try:
                    info = w.commit()
                except ChecksumError as e:
                    raise ChecksumError(
                        e.message,
                        hint="the export was altered or damaged; nothing of this blob was "
                        "stored: export it again from a connected machine",
                    ) from e
            say(f"imported {digest}")
            report.added += 1
            report.added_bytes += info.size
    return report


# -- serve -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Served:
    """One path the mirror answers: the blob file (or inline bytes) and its headers."""

    path: Path | None
    data: bytes | None
    size: int
    content_type: str
    digest: str | None


def serve_table(directory: Path, index: dict[str, Any]) -> tuple[dict[str, Served], list[str]]:
    """``/<host>/<path>`` → what to answer, and the upstream prefixes (``https://host/``) served.

    Every blob with upstream URLs, each url source's checksum file, and ``/<registry>/v2/`` for
    each registry an oci source came from (the API version check).
    """
    table: dict[str, Served] = {}
    prefixes: set[str] = set()
    blobs = directory / "blobs" / "sha256"

    def add(url: str, served: Served) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return
        table[f"/{parts.netloc}{unquote(parts.path)}"] = served
        prefixes.add(f"{parts.scheme}://{parts.netloc}/")

    for source in index["sources"]:
        for blob in source["blobs"]:
            media = blob.get("mediaType") or "application/octet-stream"
            for url in blob.get("urls") or []:
                served = Served(
                    blobs / hex_of(blob["digest"]), None, blob["size"], media, blob["digest"]
                )
                add(url, served)
                if source.get("kind") == "oci" and "/v2/" in url:
                    root = url.split("/v2/", 1)[0] + "/v2/"
                    add(root, Served(None, b"{}", 2, "application/json", None))
        checksum = source.get("checksum")
        if isinstance(checksum, dict):
            text = str(checksum["text"]).encode()
            add(str(checksum["url"]), Served(None, text, len(text), "text/plain", None))
    return table, sorted(prefixes)


def mirror_flags(prefixes: list[str], base_url: str) -> list[str]:
    """``--mirror https://host/=http://127.0.0.1:PORT/host/`` for each upstream prefix."""
    return [f"--mirror {p}={base_url}/{urlsplit(p).netloc}/" for p in prefixes]


def config_snippet(prefixes: list[str], base_url: str) -> str:
    """The same mirrors as an nvkr config file ``mirrors:`` list (YAML)."""
    lines = ["mirrors:"]
    for p in prefixes:
        rep = f"{base_url}/{urlsplit(p).netloc}/"
        lines.append(f"  - {{prefix: {double_quoted(p)}, replacement: {double_quoted(rep)}}}")
    return "\n".join(lines) + "\n"


def make_server(
    directory: Path, host: str = "127.0.0.1", port: int = 0
) -> tuple[http.server.ThreadingHTTPServer, list[str]]:
    """A (not yet started) HTTP server answering the export's upstream URL layout, and the
    upstream prefixes it stands in for. ``GET`` and ``HEAD`` only; unknown paths (directories
    included) are 404.

    Raises:
        UsageError, IntegrityError: as :func:`read_index`; UsageError when the address is taken.
    """
    table, prefixes = serve_table(directory, read_index(directory))

    class Handler(http.server.BaseHTTPRequestHandler):
        server_version = "nvkr-mirror"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _answer(self, body: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            served = table.get(path)
            if served is None:
                self.send_response(404)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", "10")
                self.end_headers()
                if body:
                    self.wfile.write(b"not found\n")
                return
            self.send_response(200)
            self.send_header("Content-Type", served.content_type)
            self.send_header("Content-Length", str(served.size))
            if served.digest:
                self.send_header("Docker-Content-Digest", served.digest)
            self.end_headers()
            if not body:
                return
            if served.data is not None:
                self.wfile.write(served.data)
                return
            assert served.path is not None
            with contextlib.suppress(BrokenPipeError, ConnectionResetError), open(served.path, "rb") as f:  # fmt: skip
                shutil.copyfileobj(f, self.wfile, _CHUNK)

        def do_GET(self) -> None:
            self._answer(True)

        def do_HEAD(self) -> None:
            self._answer(False)

    try:
        server = http.server.ThreadingHTTPServer((host, port), Handler)
    except OSError as e:
        raise UsageError(f"cannot listen on {host}:{port}: {e.strerror}") from e
    server.daemon_threads = True
    return server, prefixes


@contextlib.contextmanager
def serving(directory: Path, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve ``directory`` in a background thread; yields its base URL ``http://HOST:PORT``."""
    import threading

    server, _ = make_server(directory, host, port)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
