"""A small, real, signed Debian repository on loopback, for tests of nvkr's ``apt`` sources.

:func:`build_apt_repo` turns :class:`DebSpec` s into ``.deb`` files (``dpkg-deb --root-owner-group
-Zxz --build``, reproducible: the same spec gives the same sha256 on every run), lays them out
as Debian does (``pool/<component>/<prefix>/<source>/<name>_<version without epoch>_<arch>.deb``,
prefix ``libn`` for ``lib*`` sources, else the first letter), writes
``dists/<suite>/<component>/binary-<arch>/Packages`` and ``Packages.gz`` (``Architecture: all``
packages listed under every arch), a ``Release`` with MD5Sum and SHA256 sections for every index
file, and signs it (``InRelease``, clearsigned, and ``Release.gpg``, detached and armored) with an
ed25519 key made in a private ``GNUPGHOME``. The public key is exported as a binary keyring
(``<root>-keyring.gpg``, beside the repository and not served) for apt's ``signed-by``.

Every ``.deb`` holds ``usr/share/doc/<name>/copyright`` in the DEP-5 format with a ``License:``
line (the spec's ``license``), which SBOM code reads.

The ``apt_repos`` fixture makes served repositories and stops them at teardown; ``gpu_apt_repo``
is one served repository with :func:`gpu_stack_packages` for amd64 and arm64. To break one:
:meth:`AptRepo.resign_with_other_key` and :meth:`AptRepo.corrupt_release` (its signature no
longer verifies against ``keyring``), :meth:`AptRepo.replace_deb` (a ``.deb`` whose sha256 no
longer matches the index).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import io
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

#: 2025-12-01T00:00:00Z: every mtime in a .deb, the Release ``Date`` (in the past, as apt wants).
EPOCH = 1_764_547_200
MAINTAINER = "nvkr tests <tests@nvkr.invalid>"
ORIGIN = "nvkr-test"
TRIPLETS = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}
_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8", "TZ": "UTC"}
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_BIN_DIRS = ("usr/bin/", "usr/sbin/", "bin/", "sbin/", "usr/libexec/")


@dataclass(frozen=True)
class DebSpec:
    """One binary package.

    ``version`` is a Debian version (``[epoch:]upstream[-revision]``); ``arch`` is ``amd64``,
    ``arm64`` or ``all``; ``depends`` is the ``Depends`` field as written (``"a (>= 1), b | c"``).
    ``files`` maps absolute paths to contents; files under a ``bin``/``sbin``/``libexec`` dir or
    starting with ``#!`` get mode 0755, others 0644. ``description``: first line the synopsis,
    further lines the extended description (default: a synopsis naming the package).
    ``source`` defaults to ``name``; ``license`` goes into the DEP-5 copyright file;
    ``fields`` adds control fields (``{"Provides": "x", "Multi-Arch": "same"}``).
    """

    name: str
    version: str
    arch: str
    depends: str = ""
    priority: str = "optional"
    essential: bool = False
    files: Mapping[str, bytes] = field(default_factory=dict)
    description: str = ""
    section: str = "misc"
    source: str | None = None
    license: str = "Apache-2.0"
    component: str = "main"
    fields: Mapping[str, str] = field(default_factory=dict)

    @property
    def source_name(self) -> str:
        return self.source or self.name

    @property
    def filename(self) -> str:
        """``<name>_<version without epoch>_<arch>.deb``, as Debian names pool files."""
        return f"{self.name}_{self.version.split(':', 1)[-1]}_{self.arch}.deb"

    @property
    def pool_path(self) -> str:
        """``pool/main/n/nvidia-container-toolkit/<filename>`` (``libn`` for ``lib*`` sources)."""
        src = self.source_name
        prefix = src[:4] if src.startswith("lib") else src[0]
        return f"pool/{self.component}/{prefix}/{src}/{self.filename}"

    def control_fields(self, installed_size: int) -> list[tuple[str, str]]:
        """The ``DEBIAN/control`` fields in order (``Installed-Size`` in KiB)."""
        out: list[tuple[str, str]] = [("Package", self.name)]
        if self.source and self.source != self.name:
            out.append(("Source", self.source))
        out += [
            ("Version", self.version),
            ("Architecture", self.arch),
            ("Maintainer", MAINTAINER),
            ("Installed-Size", str(installed_size)),
        ]
        if self.depends:
            out.append(("Depends", self.depends))
        out += list(self.fields.items())
        out.append(("Priority", self.priority))
        if self.essential:
            out.append(("Essential", "yes"))
        out.append(("Section", self.section))
        return out

    def description_field(self) -> str:
        lines = (self.description or f"{self.name} (nvkr test package)").strip("\n").split("\n")
        extended = [f" {line}" if line.strip() else " ." for line in lines[1:]]
        return "\n".join([lines[0], *extended])


@dataclass(frozen=True)
class BuiltDeb:
    """A ``.deb`` in the pool: ``path`` relative to the repository root, its size and digests
    (lower-case hex), and the control fields it was built with."""

    spec: DebSpec
    path: str
    size: int
    md5: str
    sha256: str
    control: tuple[tuple[str, str], ...]


def _run(argv: list[str], *, env: Mapping[str, str] | None = None, **kw: object) -> bytes:
    proc = subprocess.run(argv, env={**_ENV, **(env or {})}, capture_output=True, check=False, **kw)  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({proc.returncode}): {proc.stderr.decode()}")
    out: bytes = proc.stdout
    return out


def copyright_file(spec: DebSpec) -> bytes:
    """A machine-readable (DEP-5) copyright file with ``License: <spec.license>``."""
    return (
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
        f"Upstream-Name: {spec.source_name}\n"
        f"Source: https://example.invalid/{spec.source_name}\n"
        "\n"
        "Files: *\n"
        "Copyright: 2025 nvkr tests\n"
        f"License: {spec.license}\n"
        "\n"
        f"License: {spec.license}\n"
        f" Test fixture made by nvkr's test suite under the {spec.license} license.\n"
    ).encode()


def _mode(rel: str, data: bytes) -> int:
    return 0o755 if rel.startswith(_BIN_DIRS) or data.startswith(b"#!") else 0o644


def build_deb(spec: DebSpec, out: Path, *, epoch: int = EPOCH) -> tuple[tuple[str, str], ...]:
    """Build ``spec`` into the file ``out``; return its control fields.

    The tree is made in a temp dir with fixed modes (any umask) and every mtime at ``epoch``;
    ``dpkg-deb`` runs with ``SOURCE_DATE_EPOCH=epoch`` and one xz thread, so the same spec gives
    the same bytes on every run and machine.

    Raises:
        ValueError: a path in ``files`` is not absolute or is the copyright file.
        RuntimeError: dpkg-deb failed (its stderr in the message).
    """
    files = {}
    for path, data in spec.files.items():
        if not path.startswith("/") or ".." in path.split("/"):
            raise ValueError(f"{spec.name}: {path!r} must be an absolute path without '..'")
        files[path.lstrip("/")] = data
    doc = f"usr/share/doc/{spec.name}/copyright"
    if doc in files:
        raise ValueError(f"{spec.name}: {doc} is written from the spec's license")
    files[doc] = copyright_file(spec)
    with tempfile.TemporaryDirectory(prefix="deb-") as tmp:
        tree = Path(tmp) / "tree"
        dirs = {"DEBIAN"}
        for rel in files:
            parts = rel.split("/")[:-1]
            dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
        for d in sorted(dirs):
            (tree / d).mkdir(parents=True, exist_ok=True)
        installed = len(dirs - {"DEBIAN"})
        for rel, data in sorted(files.items()):
            (tree / rel).write_bytes(data)
            os.chmod(tree / rel, _mode(rel, data))
            installed += (len(data) + 1023) // 1024
        control = tuple(spec.control_fields(installed))
        text = "".join(f"{k}: {v}\n" for k, v in control)
        text += f"Description: {spec.description_field()}\n"
        (tree / "DEBIAN" / "control").write_text(text)
        os.chmod(tree / "DEBIAN" / "control", 0o644)
        for d in [*sorted(dirs), ""]:
            os.chmod(tree / d, 0o755)
        for dirpath, dirnames, filenames in os.walk(tree, topdown=False):
            for name in [*filenames, *dirnames]:
                os.utime(os.path.join(dirpath, name), (epoch, epoch))
        os.utime(tree, (epoch, epoch))
        out.parent.mkdir(parents=True, exist_ok=True)
        _run(
            [
                "dpkg-deb",
                "--root-owner-group",
                "-Zxz",
                "--threads-max=1",
                "--build",
                str(tree),
                str(out),
            ],
            env={"SOURCE_DATE_EPOCH": str(epoch)},
        )
    return (*control, ("Description", spec.description_field()))


def release_date(epoch: int) -> str:
    """RFC 2822 date in UTC as Debian's Release files write it (no locale involved)."""
    t = time.gmtime(epoch)
    return (
        f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year} "
        f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} UTC"
    )


def _stanza(deb: BuiltDeb) -> str:
    """A Packages stanza: the control fields, then Filename, Size, MD5sum, SHA256, Description."""
    fields = [(k, v) for k, v in deb.control if k != "Description"]
    fields += [
        ("Filename", deb.path),
        ("Size", str(deb.size)),
        ("MD5sum", deb.md5),
        ("SHA256", deb.sha256),
        ("Description", dict(deb.control)["Description"]),
    ]
    return "".join(f"{k}: {v}\n" for k, v in fields)


# fd 3 := the listening socket, then become gpg-agent (a shell cannot redirect fds above 9).
_EXEC_AGENT = """\
import os, sys
os.dup2(int(sys.argv[1]), 3)
os.execvp("gpg-agent", ["gpg-agent", "--homedir", sys.argv[2], "--supervised",
                        "--disable-scdaemon", "--allow-loopback-pinentry"])
"""


class _Gpg:
    """A private GNUPGHOME with its own gpg-agent.

    The agent runs as this process's child (``--supervised`` on a socket made here; gpg runs
    with ``--no-autostart``), so stopping it reaps it: an agent gpg spawned itself would
    detach, and where PID 1 does not reap orphans each one would stay behind as a zombie. The
    home is a short path in the temp dir, since the agent's socket lives in it (108-byte limit).
    """

    def __init__(self) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="nvkr-gpg-"))
        os.chmod(self.home, 0o700)
        # The socket is ours, handed over as fd 3 (the LISTEN_FDS convention of --supervised).
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(self.home / "S.gpg-agent"))
            listener.listen(16)
            fd = listener.fileno()
            agent = subprocess.Popen(
                [sys.executable, "-c", _EXEC_AGENT, str(fd), str(self.home)],
                env={**_ENV, "LISTEN_FDS": "1", "LISTEN_FDNAMES": "std"},
                pass_fds=(fd,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        finally:
            listener.close()
        self._finalizer = weakref.finalize(self, _Gpg._cleanup, self.home, agent)
        self.run(
            "--quick-gen-key", "nvkr test repository <apt@nvkr.invalid>", "ed25519", "sign", "never"
        )
        listing = self.run("--with-colons", "--list-secret-keys").decode()
        self.fingerprint = next(
            line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:")
        )

    def run(self, *args: str) -> bytes:
        return _run(
            [
                *("gpg", "--homedir", str(self.home), "--no-autostart", "--batch", "--yes"),
                *("--no-tty", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""),
                *args,
            ]
        )

    def sign(self, release: Path) -> None:
        """``InRelease`` (clearsigned) and ``Release.gpg`` (detached, armored) beside ``release``."""
        common = ["--local-user", self.fingerprint, "--digest-algo", "SHA512"]
        self.run(*common, "--clearsign", "-o", str(release.parent / "InRelease"), str(release))
        self.run(
            *common,
            "--armor",
            "--detach-sign",
            "-o",
            str(release.parent / "Release.gpg"),
            str(release),
        )

    def export(self, keyring: Path) -> None:
        keyring.write_bytes(self.run("--export", self.fingerprint))

    def close(self) -> None:
        """Stop the agent and delete the home (idempotent)."""
        self._finalizer()

    @staticmethod
    def _cleanup(home: Path, agent: subprocess.Popen[bytes]) -> None:
        agent.terminate()
        try:
            agent.wait(timeout=10)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()
        shutil.rmtree(home, ignore_errors=True)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def __init__(
        self,
        *args: object,
        directory: str,
        requests: list[str],
        auth: Callable[[], str | None] = lambda: None,
        **kw: object,
    ) -> None:
        self._requests = requests
        self._auth = auth
        super().__init__(*args, directory=directory, **kw)  # type: ignore[arg-type]

    def send_head(self):  # type: ignore[no-untyped-def]
        self._requests.append(self.path)
        need = self._auth()
        if need is not None and self.headers.get("Authorization") != need:
            self.send_error(401)
            return None
        # Files are rewritten within the same second (re-signing, add()): never answer 304.
        del self.headers["If-Modified-Since"]
        return super().send_head()

    def log_message(self, format: str, *args: object) -> None:
        pass


@dataclass
class AptRepo:
    """A repository on disk (``root``: ``dists/`` and ``pool/``) with its signing key.

    ``keyring`` is the binary OpenPGP keyring holding the public key (for ``signed-by``);
    ``debs`` lists every built package; ``url`` is set by :meth:`serve`; ``requests`` lists
    the paths asked for while served.
    """

    root: Path
    keyring: Path
    suite: str
    components: tuple[str, ...]
    arches: tuple[str, ...]
    debs: list[BuiltDeb]
    epoch: int = EPOCH
    url: str | None = None
    requests: list[str] = field(default_factory=list)
    #: when set, every request without exactly this ``Authorization`` header is answered 401
    authorization: str | None = None
    _gpg: _Gpg | None = None
    _server: http.server.ThreadingHTTPServer | None = None

    # -- reading it ------------------------------------------------------------------------------
    def deb(self, name: str, *, arch: str | None = None, version: str | None = None) -> BuiltDeb:
        """The built package ``name`` (narrowed by ``arch``/``version`` when several match).

        Raises:
            KeyError: none or more than one package matches.
        """
        found = [
            d
            for d in self.debs
            if d.spec.name == name
            and (arch is None or d.spec.arch == arch)
            and (version is None or d.spec.version == version)
        ]
        if len(found) != 1:
            raise KeyError(f"{len(found)} packages match {name} arch={arch} version={version}")
        return found[0]

    def sources_line(self, url: str | None = None) -> str:
        """``deb [signed-by=<keyring>] <url> <suite> <components>`` for a sources.list."""
        where = url or self.url
        if where is None:
            raise RuntimeError("the repository is not served; call serve() or pass url")
        return f"deb [signed-by={self.keyring}] {where} {self.suite} {' '.join(self.components)}"

    # -- serving ----------------------------------------------------------------------------------
    def serve(self) -> str:
        """Serve ``root`` on 127.0.0.1 (a free port, threaded); return and set :attr:`url`
        (``http://127.0.0.1:<port>``, the repository root). Idempotent; :meth:`close` stops it."""
        if self._server is None:
            handler = functools.partial(
                _QuietHandler,
                directory=str(self.root),
                requests=self.requests,
                auth=lambda: self.authorization,
            )
            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
            server.daemon_threads = True
            threading.Thread(
                target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
            ).start()
            self._server = server
            self.url = f"http://127.0.0.1:{server.server_address[1]}"
        assert self.url is not None
        return self.url

    def close(self) -> None:
        """Stop serving and delete the signing key's GNUPGHOME (the files stay)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._gpg is not None:
            self._gpg.close()

    # -- changing it ---------------------------------------------------------------------------
    def add(self, packages: Iterable[DebSpec], *, sign: bool = True) -> list[BuiltDeb]:
        """Build more packages into the pool, then rewrite the indexes and re-sign (see
        :meth:`reindex`). Returns the new packages."""
        new = [self._build(spec) for spec in packages]
        self.debs.extend(new)
        self.reindex(sign=sign)
        return new

    @property
    def flat(self) -> bool:
        """A flat repository (suite ``/``: ``Packages`` and ``Release`` at the root, as NVIDIA's
        CUDA repositories are laid out) rather than ``dists/<suite>/<component>/...``."""
        return self.suite == "/"

    @property
    def dist(self) -> Path:
        """The directory holding ``Release``: ``dists/<suite>``, or the root when flat."""
        return self.root if self.flat else self.root / "dists" / self.suite

    def reindex(self, *, sign: bool = True) -> None:
        """Rewrite every Packages, Packages.gz and Release from :attr:`debs`; sign with the
        repository's key (``sign=False``: drop InRelease and Release.gpg)."""
        dist = self.dist
        index_files: list[str] = []
        if self.flat:  # one index for every arch, Filename relative to the root
            listed = sorted(self.debs, key=lambda d: (d.spec.name, d.spec.version, d.spec.arch))
            text = "\n".join(_stanza(d) for d in listed).encode()
            (dist / "Packages").write_bytes(text)
            (dist / "Packages.gz").write_bytes(_gzip(text))
            index_files += ["Packages", "Packages.gz"]
        for component in self.components:
            for arch in self.arches:
                rel = f"{component}/binary-{arch}"
                (dist / rel).mkdir(parents=True, exist_ok=True)
                listed = sorted(
                    (
                        d
                        for d in self.debs
                        if d.spec.component == component and d.spec.arch in (arch, "all")
                    ),
                    key=lambda d: (d.spec.name, d.spec.version, d.spec.arch),
                )
                text = "\n".join(_stanza(d) for d in listed).encode()
                (dist / rel / "Packages").write_bytes(text)
                (dist / rel / "Packages.gz").write_bytes(_gzip(text))
                index_files += [f"{rel}/Packages", f"{rel}/Packages.gz"]
        lines = [
            f"Origin: {ORIGIN}",
            f"Label: {ORIGIN}",
            *([] if self.flat else [f"Suite: {self.suite}", f"Codename: {self.suite}"]),
            f"Date: {release_date(self.epoch)}",
            f"Architectures: {' '.join(self.arches)}",
            *([] if self.flat else [f"Components: {' '.join(self.components)}"]),
            "Description: nvkr test repository",
        ]
        for title, algo in (("MD5Sum", hashlib.md5), ("SHA256", hashlib.sha256)):
            lines.append(f"{title}:")
            for rel in sorted(index_files):
                data = (dist / rel).read_bytes()
                lines.append(f" {algo(data).hexdigest()} {len(data):>16} {rel}")
        (dist / "Release").write_text("\n".join(lines) + "\n")
        for name in ("InRelease", "Release.gpg"):
            (dist / name).unlink(missing_ok=True)
        if sign:
            assert self._gpg is not None
            self._gpg.sign(dist / "Release")

    def resign_with_other_key(self) -> None:
        """Sign the same Release with a new key that ``keyring`` does not hold (apt: NO_PUBKEY)."""
        other = _Gpg()
        try:
            other.sign(self.dist / "Release")
        finally:
            other.close()

    def corrupt_release(self) -> None:
        """Change a byte of the signed text of ``Release`` and ``InRelease`` after signing
        (apt: BADSIG; the hashes in it still match the indexes)."""
        dist = self.dist
        for name in ("Release", "InRelease"):
            path = dist / name
            text = path.read_text()
            changed = text.replace(f"Label: {ORIGIN}\n", f"Label: {ORIGIN}-tampered\n", 1)
            assert changed != text, f"{path} has no Label line"
            path.write_text(changed)

    def replace_deb(
        self, name: str, new_bytes: bytes, *, arch: str | None = None, version: str | None = None
    ) -> Path:
        """Overwrite a pool file with ``new_bytes``; the index keeps the old size and sha256
        (apt: Hash Sum mismatch). Returns the file's path."""
        path = self.root / self.deb(name, arch=arch, version=version).path
        path.write_bytes(new_bytes)
        return path

    def _build(self, spec: DebSpec) -> BuiltDeb:
        if spec.arch not in (*self.arches, "all"):
            raise ValueError(f"{spec.name}: arch {spec.arch} is not among {self.arches} or all")
        if self.components and spec.component not in self.components:
            raise ValueError(f"{spec.name}: component {spec.component} is not {self.components}")
        out = self.root / spec.pool_path
        control = build_deb(spec, out, epoch=self.epoch)
        data = out.read_bytes()
        return BuiltDeb(
            spec=spec,
            path=spec.pool_path,
            size=len(data),
            md5=hashlib.md5(data).hexdigest(),
            sha256=hashlib.sha256(data).hexdigest(),
            control=control,
        )


def _gzip(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as gz:
        gz.write(data)
    return buf.getvalue()


def build_apt_repo(
    root: Path,
    *,
    suite: str,
    components: tuple[str, ...] = ("main",),
    arches: tuple[str, ...] = ("amd64", "arm64"),
    packages: list[DebSpec],
    sign: bool = True,
    epoch: int = EPOCH,
) -> AptRepo:
    """Build a repository under ``root`` (created; its parent gets ``<root name>-keyring.gpg``).

    Returns the repository, not yet served (:meth:`AptRepo.serve`); call :meth:`AptRepo.close`
    (the fixtures do) to remove its GNUPGHOME. ``sign=False`` writes no InRelease/Release.gpg
    (the key and keyring exist anyway).

    Raises:
        ValueError: a package's arch or component is not in the repository, or two packages
            share a pool file; see :func:`build_deb`.
        RuntimeError: dpkg-deb or gpg failed.
    """
    seen: dict[str, DebSpec] = {}
    for spec in packages:
        if spec.arch not in (*arches, "all"):
            raise ValueError(f"{spec.name}: arch {spec.arch} is not among {arches} or all")
        if components and spec.component not in components:
            raise ValueError(f"{spec.name}: component {spec.component} is not in {components}")
        if spec.pool_path in seen:
            raise ValueError(f"{spec.name} and {seen[spec.pool_path].name} share {spec.pool_path}")
        seen[spec.pool_path] = spec
    root.mkdir(parents=True, exist_ok=True)
    gpg = _Gpg()
    keyring = root.parent / f"{root.name}-keyring.gpg"
    gpg.export(keyring)
    repo = AptRepo(
        root=root,
        keyring=keyring,
        suite=suite,
        components=tuple(components),
        arches=tuple(arches),
        debs=[],
        epoch=epoch,
        _gpg=gpg,
    )
    repo.debs = [repo._build(spec) for spec in packages]
    repo.reindex(sign=sign)
    return repo


# -- the GPU stack ----------------------------------------------------------------------------------
TOOLKIT_VERSION = "1.17.8-1"
DRIVER_BRANCH = "570"
DRIVER_VERSION = "570.172.08-0ubuntu1"


def _script(text: str) -> bytes:
    return f"#!/bin/sh\n{text}\n".encode()


def gpu_stack_packages(arch: str) -> list[DebSpec]:
    """NVIDIA's GPU node stack in miniature, for ``arch`` (``amd64`` or ``arm64``).

    - ``libnvidia-container1`` (arch): ``/usr/lib/<triplet>/libnvidia-container.so.1``;
    - ``libnvidia-container-tools`` (arch, depends ``libnvidia-container1 (>= 1.17.8)``):
      ``/usr/bin/nvidia-container-cli``;
    - ``nvidia-container-toolkit`` (arch, depends ``libnvidia-container-tools (>= 1.17.8),
      libnvidia-container-tools (<< 2.0.0)``): ``/usr/bin/nvidia-container-runtime``,
      ``/usr/bin/nvidia-ctk``, ``/usr/bin/nvidia-container-runtime-hook`` (shell scripts), and
      ``/etc/nvidia-container-runtime/config.toml``;
    - ``libnvidia-compute-570`` (arch): ``/usr/lib/<triplet>/libcuda.so.570.172.08``;
    - ``nvidia-utils-570`` (arch): ``/usr/bin/nvidia-smi``;
    - ``nvidia-driver-570`` (``all``, a meta package, priority ``extra``, license
      ``NVIDIA-Proprietary``): depends on both at ``=`` their version.

    Versions: toolkit ``1.17.8-1``, driver ``570.172.08-0ubuntu1``; licenses Apache-2.0 for the
    container stack, ``NVIDIA-Proprietary`` for the driver packages.
    """
    triplet = TRIPLETS[arch]
    lib = f"/usr/lib/{triplet}"
    ver = TOOLKIT_VERSION.split("-")[0]
    drv = DRIVER_VERSION.split("-")[0]
    proprietary = "NVIDIA-Proprietary"
    return [
        DebSpec(
            "libnvidia-container1",
            TOOLKIT_VERSION,
            arch,
            source="libnvidia-container",
            section="libs",
            files={f"{lib}/libnvidia-container.so.1": f"ELF stand-in {arch}\n".encode()},
            fields={"Multi-Arch": "same"},
            description="NVIDIA container runtime library\nThe nvidia-container library.",
        ),
        DebSpec(
            "libnvidia-container-tools",
            TOOLKIT_VERSION,
            arch,
            source="libnvidia-container",
            section="utils",
            depends=f"libnvidia-container1 (>= {ver})",
            files={"/usr/bin/nvidia-container-cli": _script(f'echo "cli-version: {ver}"')},
            description="NVIDIA container runtime library (command-line tools)",
        ),
        DebSpec(
            "nvidia-container-toolkit",
            TOOLKIT_VERSION,
            arch,
            section="utils",
            depends=f"libnvidia-container-tools (>= {ver}), libnvidia-container-tools (<< 2.0.0)",
            files={
                "/usr/bin/nvidia-container-runtime": _script(
                    f'echo "NVIDIA Container Runtime version {ver}"'
                ),
                "/usr/bin/nvidia-ctk": _script(
                    f'echo "NVIDIA Container Toolkit CLI version {ver}"'
                ),
                "/usr/bin/nvidia-container-runtime-hook": _script("exit 0"),
                "/etc/nvidia-container-runtime/config.toml": (
                    b'[nvidia-container-runtime]\nmode = "auto"\n'
                ),
            },
            description="NVIDIA Container toolkit\nProvides tools and utilities to enable GPU support in containers.",
        ),
        DebSpec(
            f"libnvidia-compute-{DRIVER_BRANCH}",
            DRIVER_VERSION,
            arch,
            source=f"nvidia-graphics-drivers-{DRIVER_BRANCH}",
            section="libs",
            license=proprietary,
            files={f"{lib}/libcuda.so.{drv}": f"ELF stand-in libcuda {arch}\n".encode()},
            description="NVIDIA libcompute package",
        ),
        DebSpec(
            f"nvidia-utils-{DRIVER_BRANCH}",
            DRIVER_VERSION,
            arch,
            source=f"nvidia-graphics-drivers-{DRIVER_BRANCH}",
            section="utils",
            license=proprietary,
            files={"/usr/bin/nvidia-smi": _script(f'echo "NVIDIA-SMI {drv}"')},
            description="NVIDIA driver support binaries",
        ),
        DebSpec(
            f"nvidia-driver-{DRIVER_BRANCH}",
            DRIVER_VERSION,
            "all",
            source=f"nvidia-graphics-drivers-{DRIVER_BRANCH}",
            section="metapackages",
            priority="extra",
            license=proprietary,
            depends=(
                f"libnvidia-compute-{DRIVER_BRANCH} (= {DRIVER_VERSION}), "
                f"nvidia-utils-{DRIVER_BRANCH} (= {DRIVER_VERSION})"
            ),
            description="NVIDIA driver metapackage",
        ),
    ]


def gpu_stack_repo_packages(arches: Iterable[str] = ("amd64", "arm64")) -> list[DebSpec]:
    """:func:`gpu_stack_packages` for every arch, the ``all`` packages once."""
    out: dict[str, DebSpec] = {}
    for arch in arches:
        for spec in gpu_stack_packages(arch):
            out.setdefault(spec.pool_path, spec)
    return list(out.values())


# -- fixtures ------------------------------------------------------------------------------------------
@pytest.fixture
def apt_repos(tmp_path: Path) -> Iterator[Callable[..., AptRepo]]:
    """``apt_repos(name="repo", **build_apt_repo kwargs) -> AptRepo``: built under
    ``tmp_path / name`` and served; every one is closed at teardown."""
    made: list[AptRepo] = []

    def make(name: str = "repo", **kwargs: object) -> AptRepo:
        repo = build_apt_repo(tmp_path / name, **kwargs)  # type: ignore[arg-type]
        made.append(repo)
        repo.serve()
        return repo

    try:
        yield make
    finally:
        for repo in made:
            repo.close()


@pytest.fixture
def gpu_apt_repo(apt_repos: Callable[..., AptRepo]) -> AptRepo:
    """A served, signed repository (suite ``stable``, component ``main``, amd64 and arm64) with
    :func:`gpu_stack_packages` for both arches."""
    return apt_repos("gpu-repo", suite="stable", packages=gpu_stack_repo_packages())
