"""The ``apt`` source kind: a closed, locked set of Debian packages for one architecture.

``nvkr lock`` resolves the set with apt itself, in a throw-away apt directory (nothing on the host
changes): ``apt-get update`` against the recipe's repositories, each checked against its own
keyring (``signed-by``), then ``apt-get install --print-uris`` from an empty dpkg status for the
base set (``minbase``: every ``Essential: yes`` and ``Priority: required`` package plus ``apt``,
as ``mmdebstrap --variant=minbase`` installs) and every recipe package at its pinned version. The
URIs, sizes and SHA256 sums apt prints come from the signed Release → Packages chain, so the
lockfile records each .deb's identity from apt's signed metadata. Every .deb is then downloaded,
checked and kept in the store.

``nvkr build`` (:func:`ensure`) never resolves anything: it downloads exactly the locked files
(through mirrors) that the store lacks, checks each one's size and sha256, and fetches one the
mirror no longer serves (404, 410) from its repository's snapshot archive at the lock's time,
which the entry records (:mod:`nvkr.fetch.snapshots`), failing naming the package when that
misses too.

The source's blob is the *package manifest*, canonical JSON of the locked package list
(:func:`~nvkr.fetch.entries.apt_manifest_bytes`); its digest pins every .deb transitively, so it is what action keys see.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from nvkr.canonical import sha256_bytes
from nvkr.errors import AptError, FetchError, IntegrityError, LockError, OfflineError, ToolError
from nvkr.fetch.context import FetchContext, check_entry, check_manifest, check_versions
from nvkr.fetch.debs import SnapshotFallback, fetch_debs, snapshot_fallback
from nvkr.fetch.entries import APT_MANIFEST_VERSION, apt_manifest_bytes
from nvkr.fetch.http import download
from nvkr.fetch.snapshots import entry_snapshot, lock_stamp
from nvkr.recipe.sources import AptKeyring, AptRepository, AptSource
from nvkr.redact import redact_url
from nvkr.run import pinned_env, run

if TYPE_CHECKING:
    from nvkr.store import Store


#: apt-get output that means a Release file failed its signature check.
_SIGNATURE_FAILURE = re.compile(
    r"NO_PUBKEY|BADSIG|EXPKEYSIG|is not signed|signatures (?:were|couldn't be) (?:invalid|verified)"
    r"|not signed|OpenPGP signature verification failed",
)
_PRINT_URI = re.compile(r"^'(?P<uri>[^']+)' (?P<file>\S+) (?P<size>\d+)(?: (?P<hash>\S+))?$")


def keyring_path(repo: AptRepository, base_dir: Path) -> Path:
    """The keyring file of a repository whose ``keyring`` is a path: absolute, or relative to
    the declaring recipe's directory. (A fetched ``{url, fingerprint}`` keyring lives in the
    store: :func:`keyring_file`.)"""
    assert isinstance(repo.keyring, str)
    p = Path(repo.keyring)
    # absolute: apt reads a relative signed-by value as a key fingerprint
    return p if p.is_absolute() else (base_dir / p).absolute()


def primary_fingerprints(path: Path, store: Store) -> list[str]:
    """The v4 fingerprints (upper-case hex) of every primary key in an OpenPGP key file
    (gpg's home is a work dir in ``store``'s ``tmp/``).

    Raises:
        IntegrityError: gpg cannot read the file as OpenPGP keys.
    """
    with store.workdir(prefix="gpg-") as home:
        home.chmod(0o700)
        proc = run(
            ["gpg", "--homedir", str(home), "--batch", "--with-colons", "--show-keys", str(path)],
            env=pinned_env(home=home),
            check=False,
        )
    fprs: list[str] = []
    last = ""
    for line in proc.stdout.decode(errors="replace").splitlines():
        fields = line.split(":")
        if fields[0] in ("pub", "sub", "sec", "ssb"):
            last = fields[0]
        elif fields[0] == "fpr" and last == "pub" and len(fields) > 9:
            fprs.append(fields[9].upper())
            last = ""
    if proc.returncode != 0 or not fprs:
        raise IntegrityError(
            f"{path} holds no OpenPGP public key gpg can read: "
            + proc.stderr.decode(errors="replace").strip()[-300:]
        )
    return fprs


def _fetch_keyring(
    name: str, repo_name: str, keyring: AptKeyring, ctx: FetchContext, locked: str | None
) -> str:
    """Make the store hold ``keyring``'s file; return its ``sha256:<hex>``.

    With ``locked`` (a lock entry's digest) the stored or downloaded file must hash to it; without
    (lock time) the downloaded file must hold exactly one primary key, ``keyring.fingerprint``.
    """
    if locked and ctx.store.has_blob(locked):
        return locked
    what = f"source {name!r}: apt repository {repo_name!r} keyring"
    ctx.require_online(name, f"the keyring of apt repository {repo_name!r} ({keyring.url})")
    blob = download(
        ctx.mirrors.rewrite(keyring.url),
        ctx.store,
        what=what,
        expected={"sha256": locked} if locked else {},
        origin=keyring.url,
    )
    digest = blob.digests["sha256"]
    if locked is None:
        want = keyring.fingerprint.upper()
        got = primary_fingerprints(ctx.store.blob_path(digest), ctx.store)
        if got != [want]:
            raise IntegrityError(
                f"{what} from {keyring.url} holds the key(s) {', '.join(got)}, "
                f"the recipe pins exactly {want}",
                hint="check the fingerprint the publisher lists; nothing was locked",
            )
    return digest


def keyring_file(
    name: str,
    repo_name: str,
    repo: AptRepository,
    ctx: FetchContext,
    base_dir: Path,
    dest_dir: Path,
    locked: str | None = None,
) -> tuple[Path, str]:
    """A file apt can use as ``signed-by`` for ``repo``, and its ``sha256:<hex>``.

    A path keyring is used where it is; a fetched keyring is copied from the store into
    ``dest_dir`` as ``nvkr-<repo>.asc`` (armored) or ``.gpg`` (binary), since apt tells the two
    formats apart by the file name.

    Raises:
        AptError: a path keyring does not exist.
        IntegrityError: a fetched key's fingerprint differs from the pin, or a stored or
            downloaded file differs from ``locked`` (exit 3).
    """
    if isinstance(repo.keyring, str):
        path = keyring_path(repo, base_dir)
        if not path.is_file():
            raise AptError(
                f"apt repository {repo_name!r}: keyring {path} does not exist",
                hint="install the keyring package (debian-archive-keyring) or fix 'keyring'",
            )
        return path, file_sha256(path)
    digest = _fetch_keyring(name, repo_name, repo.keyring, ctx, locked)
    data = ctx.store.read_blob(digest)
    if sha256_bytes(data) != digest:
        raise IntegrityError(f"the store's keyring blob {digest} does not hash to its name")
    dest = dest_dir / f"nvkr-{repo_name}{'.asc' if data[:5] == b'-----' else '.gpg'}"
    dest.write_bytes(data)
    return dest, digest


def file_sha256(path: Path) -> str:
    """``sha256:<hex>`` of the file at ``path`` (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def read_manifest(data: bytes) -> dict[str, Any]:
    """Parse a manifest blob written by :func:`manifest_bytes`.

    Raises:
        IntegrityError: not a package manifest of this version.
    """
    import json

    doc = json.loads(data)
    if not isinstance(doc, dict) or doc.get("aptManifest") != APT_MANIFEST_VERSION:
        raise IntegrityError("not an nvkr apt package manifest (aptManifest 1)")
    return doc


@contextmanager
def _apt_root(ctx: FetchContext) -> Iterator[Path]:
    with ctx.store.workdir(prefix="apt-") as root:
        for d in (
            "etc/apt/apt.conf.d",
            "etc/apt/preferences.d",
            "etc/apt/sources.list.d",
            "var/lib/apt/lists/partial",
            "var/cache/apt/archives/partial",
            "var/lib/dpkg",
            "var/log/apt",
        ):
            (root / d).mkdir(parents=True, exist_ok=True)
        (root / "var/lib/dpkg/status").write_bytes(b"")
        yield root


def _apt_options(root: Path, arch: str) -> list[str]:
    opts = {
        "Dir": str(root),
        "Dir::Etc::TrustedParts": str(root / "etc/apt/trusted.gpg.d"),
        "Dir::State::status": str(root / "var/lib/dpkg/status"),
        "APT::Architecture": arch,
        "APT::Architectures": arch,
        "APT::Install-Recommends": "false",
        "APT::Install-Suggests": "false",
        "APT::Sandbox::User": "root",
        "Acquire::Languages": "none",
        "Debug::NoLocking": "true",
        "pkgCacheFile::Generate": "true",
        "Acquire::Retries": "3",
    }
    out: list[str] = []
    for k, v in opts.items():
        out += ["-o", f"{k}={v}"]
    return out


def _sources_list(
    name: str, source: AptSource, ctx: FetchContext, base_dir: Path, root: Path
) -> tuple[str, dict[str, str]]:
    """apt's sources.list for ``source`` and the sha256 of each repository's keyring."""
    lines = []
    digests: dict[str, str] = {}
    keydir = root / "etc/apt/keyrings"
    keydir.mkdir(parents=True, exist_ok=True)
    unreachable: list[FetchError] = []  # every repository's keyring is tried: all are named
    for repo_name, repo in sorted(source.apt.items()):
        try:
            keyring, digests[repo_name] = keyring_file(name, repo_name, repo, ctx, base_dir, keydir)
        except OfflineError:
            raise
        except FetchError as e:
            unreachable.append(e)
            continue
        # a flat repository's URL keeps its trailing slash (mirror prefixes are written with it)
        url = ctx.mirrors.rewrite(repo.url.rstrip("/") + ("/" if repo.flat else ""))
        line = f"deb [signed-by={keyring} arch={source.arch}] {url} {repo.suite}"
        lines.append(" ".join([line, *repo.components]))
    if len(unreachable) == 1:
        raise unreachable[0]
    if unreachable:
        raise FetchError(
            f"source {name!r}: the keyrings of {len(unreachable)} apt repositories could not be "
            "fetched:\n"
            + "\n".join(e.message.removeprefix(f"source {name!r}: ") for e in unreachable),
            hint=unreachable[0].hint,
        )
    return "\n".join(lines) + "\n", digests


def _repo_for_uri(uri: str, source: AptSource, ctx: FetchContext) -> tuple[str, str]:
    """(repository name, recipe URL without user info) of a URI apt printed (which may be a
    mirror's; apt prints the user info a sources.list line gave it percent-decoded, so both
    sides are compared without it, :mod:`nvkr.redact`)."""
    best: tuple[int, str, str] | None = None
    bare = redact_url(uri)
    for name, repo in source.apt.items():
        base = redact_url(repo.url.rstrip("/") + "/")
        prefixes = {ctx.mirrors.rewrite(repo.url.rstrip("/") + "/"), base}
        prefixes.add(ctx.mirrors.rewrite(repo.url.rstrip("/")) + "/")
        for prefix in {redact_url(p) for p in prefixes}:
            if bare.startswith(prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), name, base + bare[len(prefix) :])
    if best is None:
        raise AptError(f"apt printed {uri!r}, which is in none of the recipe's repositories")
    return best[1], best[2]


def _selection(source: AptSource) -> list[str]:
    base = {
        "minbase": ["?essential", "?priority(required)", "apt"],
        "essential": ["?essential"],
        "none": [],
    }[source.base]
    return base + [f"{n}={v}" for n, v in sorted(source.packages.items())]


def _parse_deb_filename(filename: str) -> tuple[str, str, str]:
    stem = unquote(filename)
    if not stem.endswith(".deb") or stem.count("_") != 2:
        raise AptError(f"apt printed an unexpected archive name {filename!r}")
    name, version, arch = stem[: -len(".deb")].split("_")
    return name, version, arch


def _versions_served(session: AptSession, package: str) -> list[str]:
    """The versions of ``package`` the session's indexes hold, newest first (apt's order)."""
    proc = run(["apt-cache", *session.opts, "madison", package], env=session.env, check=False)
    seen: list[str] = []
    for line in proc.stdout.decode(errors="replace").splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) >= 2 and parts[0] == package and parts[1] not in seen:
            seen.append(parts[1])
    return seen


def _explain_apt_failure(
    name: str, source: AptSource, output: str, session: AptSession
) -> AptError:
    m = re.search(r"Version '([^']+)' for '([^']+)' was not found", output)
    if m:
        versions = _versions_served(session, m.group(2))
        return AptError(
            f"source {name!r}: package {m.group(2)} version {m.group(1)} is not in the "
            f"repositories ({', '.join(sorted(source.apt))}) for {source.arch}; they have: "
            + (", ".join(versions) or "none"),
            hint="pin one of the versions listed",
        )
    m = re.search(r"Unable to locate package (\S+)", output)
    if m:
        return AptError(
            f"source {name!r}: package {m.group(1)} is in none of the repositories "
            f"({', '.join(sorted(source.apt))}) for {source.arch}"
        )
    lines = [ln for ln in output.splitlines() if ln.startswith(("E:", " "))]
    return AptError(
        f"source {name!r}: apt cannot resolve the package set for {source.arch}:\n"
        + "\n".join(lines[-15:])
    )


def _stanzas(text: str) -> Iterator[dict[str, str]]:
    """deb822 stanzas (continuation lines folded) of ``apt-cache show`` output."""
    for block in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = None
        for line in block.splitlines():
            if line[:1] in (" ", "\t") and key is not None:
                fields[key] += "\n" + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if fields:
            yield fields


def _sha256_sums(
    name: str, opts: list[str], env: dict[str, str], picked: list[tuple[str, str, str, str, int]]
) -> dict[tuple[str, str, str], str]:
    """SHA256 of each picked .deb from the (signature-checked) Packages indexes."""
    if not picked:
        return {}
    queries = sorted({f"{pkg}:{arch}={version}" for pkg, version, arch, _, _ in picked})
    proc = run(["apt-cache", *opts, "show", *queries], env=env)
    sums: dict[tuple[str, str, str], str] = {}
    for st in _stanzas(proc.stdout.decode(errors="replace")):
        if "SHA256" in st:
            sums[(st.get("Package", ""), st.get("Version", ""), st.get("Architecture", ""))] = (
                "sha256:" + st["SHA256"].lower()
            )
    for pkg, version, arch, _, _ in picked:
        if (pkg, version, arch) not in sums:
            raise AptError(
                f"source {name!r}: the index gives {pkg} {version} ({arch}) no SHA256 sum",
                hint="the repository's Packages index must carry SHA256 fields",
            )
    return sums


@dataclass(frozen=True)
class AptSession:
    """A throw-away apt directory whose indexes are up to date and signature-checked.

    Attributes:
        opts: ``-o`` options that point apt-get/apt-cache at the directory and the arch.
        env: the environment to run them with.
        keyrings: ``{repository: "sha256:.."}`` of each repository's keyring.
    """

    root: Path
    opts: list[str]
    env: dict[str, str]
    keyrings: dict[str, str]


@contextmanager
def apt_session(
    name: str, source: AptSource, ctx: FetchContext, base_dir: Path
) -> Iterator[AptSession]:
    """``apt-get update`` against ``source``'s repositories in a throw-away directory (nothing
    on the host changes), each Release checked against its own keyring; removed on exit.

    Raises:
        IntegrityError: a Release signature does not verify (exit 3), or a fetched keyring's
            fingerprint differs from its pin.
        FetchError: a repository is unreachable; AptError: a keyring file is missing.
    """
    with _apt_root(ctx) as root:
        sources_list, keyrings = _sources_list(name, source, ctx, base_dir, root)
        (root / "etc/apt/sources.list").write_text(sources_list)
        opts = _apt_options(root, source.arch)
        env = pinned_env(home=root)
        log = root / "apt.log"
        try:
            run(["apt-get", *opts, "--error-on=any", "update"], env=env, log_file=log)
        except ToolError as e:
            text = log.read_text(errors="replace")
            if _SIGNATURE_FAILURE.search(text):
                bad = [ln for ln in text.splitlines() if _SIGNATURE_FAILURE.search(ln)]
                raise IntegrityError(
                    f"source {name!r}: an apt repository's Release signature does not verify "
                    f"against its keyring:\n" + "\n".join(bad[:6]),
                    hint="check the repository URL and its 'keyring'",
                ) from e
            errs = [ln for ln in text.splitlines() if ln.startswith(("E:", "W:", "Err:"))]
            raise FetchError(
                f"source {name!r}: apt-get update failed:\n" + "\n".join(errs[-10:])
            ) from e
        yield AptSession(root=root, opts=opts, env=env, keyrings=keyrings)


def _resolve_packages(
    name: str, source: AptSource, ctx: FetchContext, base_dir: Path
) -> tuple[list[dict[str, Any]], dict[str, str], str]:
    """The closure, the keyrings' digests and the lock's time (when the indexes were read)."""
    with apt_session(name, source, ctx, base_dir) as session:
        stamp = lock_stamp()
        opts, env, keyrings = session.opts, session.env, session.keyrings
        selection = _selection(source)
        if not selection:
            return [], keyrings, stamp
        proc = run(
            ["apt-get", *opts, "install", "--print-uris", "-y", "-qq", *selection],
            env=env,
            check=False,
        )
        out = proc.stdout.decode(errors="replace")
        if proc.returncode != 0:
            output = out + proc.stderr.decode(errors="replace")
            raise _explain_apt_failure(name, source, output, session)
        picked: list[tuple[str, str, str, str, int]] = []
        for line in out.splitlines():
            m = _PRINT_URI.match(line.strip())
            if m:
                pkg, version, arch = _parse_deb_filename(m.group("file"))
                picked.append((pkg, version, arch, m.group("uri"), int(m.group("size"))))
        sums = _sha256_sums(name, opts, env, picked)
    packages: list[dict[str, Any]] = []
    for pkg, version, arch, uri, size in picked:
        repo, url = _repo_for_uri(uri, source, ctx)
        # url has no user info: the manifest, its digest and the lock hold no credentials
        packages.append(
            {
                "name": pkg,
                "version": version,
                "arch": arch,
                "repository": repo,
                "url": url,
                "filename": unquote(url.rsplit("/", 1)[-1]),
                "size": size,
                "sha256": sums[(pkg, version, arch)],
            }
        )
    packages.sort(key=lambda p: (p["name"], p["arch"]))
    have = {p["name"]: p["version"] for p in packages}
    for pkg, version in sorted(source.packages.items()):
        if have.get(pkg) != version:
            raise AptError(
                f"source {name!r}: apt did not select {pkg} {version} (got {have.get(pkg)})"
            )
    return packages, keyrings, stamp


def _with_credentials(url: str, repository: Any, source: AptSource) -> str:
    """A locked .deb URL (no user info, :mod:`nvkr.redact`) with the user info of the recipe's
    repository URL put back: the credentials come from the recipe, never the lockfile."""
    repo = source.apt.get(repository) if isinstance(repository, str) else None
    if repo is None:
        return url
    base = repo.url.rstrip("/") + "/"
    bare = redact_url(base)
    return base + url[len(bare) :] if base != bare and url.startswith(bare) else url


def _fetch_debs(
    name: str,
    packages: list[dict[str, Any]],
    ctx: FetchContext,
    source: AptSource,
    fallback: SnapshotFallback | None = None,
) -> None:
    fetch_debs(
        name,
        packages,
        ctx,
        lambda p: _with_credentials(p["url"], p.get("repository"), source),
        fallback,
    )


def resolve(name: str, source: AptSource, ctx: FetchContext, *, base_dir: Path) -> dict[str, Any]:
    """Lock an apt source: resolve its closure with apt, fetch and check every .deb.

    Returns:
        ``{"kind": "apt", "arch": "amd64", "digest": "sha256:<manifest>", "keyrings": {repo:
        "sha256:.."}, "packages": [{"name", "version", "arch", "repository", "url", "filename",
        "size", "sha256"}, ...], "snapshot": {"time": "20251201T091512Z", "archives": {repo:
        "https://snapshot.debian.org/archive/debian"}}}``; ``url`` is the recipe repository's
        URL, never a mirror's; ``snapshot`` the lock's time and each repository's snapshot
        archive (:mod:`nvkr.fetch.snapshots`), outside the manifest.
    Raises:
        AptError: a keyring is missing, a package or version is not in the repositories, or
            apt cannot satisfy the dependencies (apt's own lines quoted).
        IntegrityError: a Release signature fails (exit 3).
        FetchError: a repository is unreachable; ChecksumError: a .deb differs from its index.
        OfflineError: ``ctx.offline``.
    """
    ctx.require_online(name, "the apt repositories' metadata")
    packages, keyrings, stamp = _resolve_packages(name, source, ctx, base_dir)
    _fetch_debs(name, packages, ctx, source)
    data = apt_manifest_bytes(source.arch, packages)
    digest = sha256_bytes(data)
    if not ctx.store.has_blob(digest):
        ctx.store.add_bytes(data)
    return {
        "kind": "apt",
        "arch": source.arch,
        "digest": digest,
        "keyrings": keyrings,
        "packages": packages,
        # where and when, not what: outside the manifest, so no action key sees it
        "snapshot": entry_snapshot(source, ctx.snapshots, stamp),
    }


def ensure(
    name: str, source: AptSource, resolved: dict[str, Any], ctx: FetchContext, *, base_dir: Path
) -> str:
    """Make the store hold the manifest and every locked .deb; return the manifest's digest.

    Touches no network when everything is in the store. Never resolves a version.

    Raises:
        LockError: ``resolved`` is not an apt entry for this arch, lacks a recipe package or pins
            another version of it, or its package list does not hash to its digest.
        OfflineError: a .deb is missing and ``ctx.offline`` (names the package).
        FetchError: neither the mirror nor the snapshot archive serves a missing .deb (names the
            package and each URL tried).
        ChecksumError: a downloaded .deb differs from the lock (exit 3); IntegrityError: a
            snapshot archive answers other bytes (exit 3, naming both URLs and digests).
    """
    check_entry(name, resolved, "apt", **source.lock_identity())
    packages = resolved.get("packages")
    if not isinstance(packages, list):
        raise LockError(f"lock entry for source {name!r} has no package list")
    check_versions(name, {p.get("name"): p.get("version") for p in packages}, source.packages)
    digest: str = resolved["digest"]
    locked_keys = resolved.get("keyrings") or {}
    for repo_name, repo in sorted(source.apt.items()):
        if isinstance(repo.keyring, AptKeyring):
            if repo_name not in locked_keys:
                raise LockError(
                    f"lock entry for source {name!r} has no keyring for repository {repo_name!r}",
                    hint="run `nvkr lock` to update the lockfile",
                )
            _fetch_keyring(name, repo_name, repo.keyring, ctx, locked_keys[repo_name])
    if ctx.store.has_blob(digest) and all(ctx.store.has_blob(p["sha256"]) for p in packages):
        return digest
    data = apt_manifest_bytes(source.arch, packages)
    check_manifest(name, data, digest)
    _fetch_debs(name, packages, ctx, source, snapshot_fallback(name, source, resolved, ctx))
    if not ctx.store.has_blob(digest):
        ctx.store.add_bytes(data)
    return digest
