"""Checks of single recipe values, run by the models (:mod:`nvkr.recipe.models`) as validators.

A value that is wrong on its own (a chart version that is not SemVer, an image repository with
upper-case letters, a path that leaves its tree, a disk size beyond what the store's file system
holds) is refused where the recipe is validated, with the file and line (:mod:`nvkr.recipe.
validation`), by every command: ``validate`` as much as ``plan``. Each check raises ValueError
with what was expected; a value holding a template is left for the check after rendering, when
the variant is validated again. The builders that need a value normalised (a relative path for
an absolute one) call the same function, so the rule lives here once.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator

from nvkr.recipe.templates import is_template

#: Helm values keys the chart's ``images`` may name: a dotted path of simple keys.
VALUES_KEY_RE = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
# distribution/reference: optional registry host[:port]/, then lower-case path components
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPOSITORY_RE = re.compile(
    rf"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*$"
)
#: An OCI tag holds at most 128 characters (distribution spec); a chart is pushed under its
#: version with ``+`` as ``_``, which leaves every other SemVer character valid in a tag.
_TAG_MAX = 128

#: The largest node image disk, in bytes: the raw disk is a sparse file in the store, and ext4
#: (Debian's default file system, 4 KiB blocks) holds files of less than 16 TiB (``truncate -s
#: 16T`` fails there with EFBIG, 16 TiB less 1 MiB works); qcow2 and GPT allow more.
DISK_SIZE_MAX = (16 << 40) - (1 << 20)

SEMVER_EXPECTED = "a SemVer 2 version MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD], no leading v"


def chart_version(value: str) -> str:
    """A chart ``version``: SemVer 2 (Helm's rule), short enough to be an OCI tag."""
    if is_template(value):
        return value
    import semver

    if not semver.Version.is_valid(value):
        raise ValueError(f"{value!r} is not {SEMVER_EXPECTED}, e.g. 0.1.0")
    if len(value) > _TAG_MAX:
        raise ValueError(
            f"{value[:20]!r}... has {len(value)} characters; a chart is pushed under its version "
            f"as an OCI tag of at most {_TAG_MAX}"
        )
    return value


def semver_suggestion(text: str) -> str | None:
    """The SemVer version a YAML number was most likely meant as (``0.20`` -> ``0.20.0``,
    ``2`` -> ``2.0.0``), or None."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return None
    parts = [str(int(p)) for p in parts] + ["0"] * (3 - len(parts))
    return ".".join(parts)


def app_version(value: str) -> str:
    """A chart ``appVersion``: any non-empty printable string (Helm's rule)."""
    if not value.strip() or not value.isprintable():
        raise ValueError(f"{value!r}: expected a non-empty printable string, e.g. 0.1.0")
    return value


#: A Debian version (deb-version(7)): [EPOCH:]UPSTREAM[-REVISION] of these characters.
_DEB_VERSION_RE = re.compile(r"^([0-9]+:)?[0-9A-Za-z][0-9A-Za-z.+~:-]*$")


def apt_version(value: str) -> str:
    """An apt package pin: one exact Debian version. apt would take ``252.*`` as a glob and pick
    whichever matching version the mirror serves that day, so a glob is refused here."""
    if is_template(value):
        return value
    if any(c in value for c in "*?[]"):
        raise ValueError(
            f"{value!r} is a glob; an apt pin is one exact Debian version, e.g. 252.39-1~deb12u1 "
            "(the versions a mirror serves: apt-cache madison NAME)"
        )
    if not _DEB_VERSION_RE.match(value):
        raise ValueError(
            f"{value!r} is not a Debian version [EPOCH:]UPSTREAM[-REVISION], e.g. 252.39-1~deb12u1"
        )
    return value


def relative_dir(value: str) -> str | None:
    """A directory inside a source (a chart's ``subdir``), normalised; None for the source's
    root."""
    norm = posixpath.normpath(value)
    if value.startswith("/") or norm == ".." or norm.startswith("../"):
        raise ValueError(f"{value!r}: expected a relative path inside the source, e.g. charts/x")
    return None if norm == "." else norm


def values_file(value: str) -> str:
    """A chart's values file (``values-single-node-zone.yaml``): a relative ``.yaml``/``.yml``
    path inside the chart directory, normalised."""
    norm = posixpath.normpath(value)
    if (
        value.startswith("/")
        or norm in (".", "..")
        or norm.startswith("../")
        or not norm.endswith((".yaml", ".yml"))
    ):
        raise ValueError(
            f"{value!r}: expected a YAML file inside the chart directory, e.g. "
            "values-single-node-zone.yaml"
        )
    return norm


def values_leaf(value: Any) -> Any:
    """A value a recipe sets in a chart's values.yaml: a string, a boolean or an integer (a float
    would be written back in another form than the recipe's: quote it)."""
    if isinstance(value, str | bool | int) and not isinstance(value, float):
        return value
    raise ValueError(
        f"expected a string, boolean or integer, not {value!r} (quote a number with a fraction)"
    )


def values_key(value: str) -> str:
    """A key of a chart's ``images`` or ``values``: a dotted values path."""
    if not VALUES_KEY_RE.match(value):
        raise ValueError(
            f"key {value!r} is not a dotted values path, e.g. image, agent.image or otlp.endpoint"
        )
    return value


def image_repository(value: str) -> str:
    """An image repository ``[HOST[:PORT]/]PATH`` with lower-case path components, no tag or
    digest (distribution/reference)."""
    if is_template(value) or REPOSITORY_RE.match(value):
        return value
    raise ValueError(
        f"{value!r}: expected an image repository without tag or digest, in lower case "
        "(e.g. ghcr.io/nvkr/node-agent; the digest is set by the build)"
    )


#: The digest of an image pinned by a recipe: sha256, 64 lower-case hex (OCI image-spec).
PINNED_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


def pinned_image(value: str) -> str:
    """An image nvkr does not build, pinned by digest: ``REPOSITORY@sha256:<64 hex>``
    (distribution/reference's canonical form), no tag: with the digest beside it every runtime
    ignores the tag, so a tag would only tell the reader something nothing checks."""
    if is_template(value):
        return value
    repository, at, digest = value.rpartition("@")
    if at and PINNED_DIGEST_RE.match(digest):
        if REPOSITORY_RE.match(repository):
            return value
        untagged, colon, tag = repository.rpartition(":")
        if colon and "/" not in tag and REPOSITORY_RE.match(untagged):
            raise ValueError(
                f"{value!r}: the tag {tag!r} beside the digest is ignored by every runtime; "
                f"write {untagged}@{digest} (keep the version in a comment)"
            )
    raise ValueError(
        f"{value!r}: expected an image pinned by digest, REPOSITORY@sha256:<64 lower-case hex>, "
        "e.g. otel/opentelemetry-collector-contrib@sha256:<hex> (the repository in lower case)"
    )


def image_path(value: str) -> str:
    """An absolute path in an image or a root file system, normalised (no ``..``, no ``//``);
    returns it relative to ``/`` (``""`` for ``/``)."""
    path = PurePosixPath(value)
    if not path.is_absolute() or ".." in path.parts or value not in (str(path), f"{path}/"):
        raise ValueError(
            f"{value!r} must be a normalised absolute path, e.g. /usr/bin/node-agent "
            "(no '..', no '//')"
        )
    return str(path.relative_to("/")) if str(path) != "/" else ""


def inner_path(value: str) -> str:
    """A path inside a source's tree (``path`` of a file entry, a Dockerfile), relative and
    without ``..``; returns it normalised (``""`` for the root)."""
    path = PurePosixPath(value)
    if path.is_absolute() or ".." in path.parts:
        raise ValueError(f"path {value!r} must be relative to the source's root, without '..'")
    return "" if str(path) == "." else str(path)


def dockerfile_path(value: str) -> str:
    """A Dockerfile's path in its build context: relative, inside it, not the context itself."""
    rel = inner_path(value)
    if not rel:
        raise ValueError(f"dockerfile {value!r} must name a file inside the context")
    return rel


def archive_member(value: str) -> str:
    """A member path as written in archives (relative, no ``./``, no ``..``)."""
    path = PurePosixPath(value)
    if path.is_absolute() or ".." in path.parts or str(path) in ("", "."):
        raise ValueError(
            f"member {value!r} must be a path relative to the archive's root, without '..', "
            "e.g. crictl"
        )
    return str(path)


def disk_size(value: str) -> str:
    """A node image's virtual size, ``<N>MiB`` or ``<N>GiB`` (the field's pattern), in
    ``1MiB .. DISK_SIZE_MAX``."""
    if not value.endswith(("MiB", "GiB")) or not value[:-3].isdigit():
        return value  # the pattern reports it
    size = int(value[:-3]) << (30 if value.endswith("GiB") else 20)
    if not 0 < size <= DISK_SIZE_MAX:
        raise ValueError(
            f"{value!r}: a disk size is 1MiB .. {DISK_SIZE_MAX >> 20}MiB (16 TiB less 1 MiB)"
        )
    return value


def size_bytes(size: str) -> int:
    """``"4GiB"`` -> 4294967296; ``"2048MiB"`` -> 2147483648 (checked by :func:`disk_size`)."""
    unit = 1 << 30 if size.endswith("GiB") else 1 << 20
    return int(size[:-3]) * unit


def epoch(value: str) -> str:
    """The recipe's ``epoch``: decimal seconds in the range :func:`nvkr.repro.epoch_problem`
    allows."""
    from nvkr.repro import epoch_problem

    problem = epoch_problem(value)
    if problem is not None:
        raise ValueError(f"{value!r}: {problem}")
    return value


def no_floats(value: Any, path: str = "") -> Any:
    """``value`` unchanged when it holds no float anywhere: values that enter an action key are
    canonical JSON, which has no floats (:mod:`nvkr.canonical`)."""
    if isinstance(value, float):
        raise ValueError(
            f"{path.lstrip('.') or 'the value'} is the float {value!r}: it enters the action "
            f'key, which holds no floats; quote it ("{value!r}"; Helm charts take quantities '
            "such as cpu as strings) or write an integer"
        )
    if isinstance(value, dict):
        for k, v in value.items():
            no_floats(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            no_floats(v, f"{path}[{i}]")
    return value


# -- the checked types the models declare ------------------------------------------------------
def _keep(check: Callable[[str], object]) -> AfterValidator:
    """A validator running ``check`` (one that also normalises) and keeping the value as written."""

    def validate(value: str) -> str:
        check(value)
        return value

    return AfterValidator(validate)


ImagePath = Annotated[str, _keep(image_path)]
InnerPath = Annotated[str, _keep(inner_path)]
RelativeDir = Annotated[str, _keep(relative_dir)]
DockerfilePath = Annotated[str, _keep(dockerfile_path)]
ArchiveMember = Annotated[str, _keep(archive_member)]
ChartVersion = Annotated[str, AfterValidator(chart_version)]
AppVersion = Annotated[str, AfterValidator(app_version)]
ValuesKey = Annotated[str, AfterValidator(values_key)]
ValuesFile = Annotated[str, AfterValidator(values_file)]
ValuesLeaf = Annotated[str | bool | int, BeforeValidator(values_leaf)]
ImageRepository = Annotated[str, AfterValidator(image_repository)]
PinnedImage = Annotated[str, AfterValidator(pinned_image)]
DiskSize = Annotated[str, AfterValidator(disk_size)]
Epoch = Annotated[str, AfterValidator(epoch)]
AptVersion = Annotated[str, AfterValidator(apt_version)]
NoFloats = Annotated[dict[str, Any], AfterValidator(no_floats)]
