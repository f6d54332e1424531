"""Versions of the recipe catalog, each kind parsed and ordered by its own rules.

The catalog pins three kinds of version, and compatibility rules (Kubernetes version skew, driver
branches, package pins) compare them. None is ever ordered as a string or by PEP 440:

- **upstream** (:class:`UpstreamVersion`): Kubernetes, containerd, runc, cri-tools... SemVer 2.0.0
  (https://semver.org, §2, §9-§11), compared by the ``semver`` package. An optional leading ``v``
  is accepted (``v1.36.3`` == ``1.36.3``); ``str()`` is the canonical form without it.
- **driver** (:class:`DriverVersion`): NVIDIA driver versions ``BRANCH.MINOR[.PATCH]`` such as
  ``580.95.05``, whose zero-padded third part is not SemVer; compared numerically part by part.
- **debian** (:class:`DebianVersion`): package versions ``[epoch:]upstream[-revision]`` (Debian
  Policy §5.6.12) ordered by dpkg's algorithm, through python-debian's pure-Python
  ``NativeVersion`` (checked against ``dpkg --compare-versions`` in the tests).

Kubernetes release lines (``1.36``) are a fourth, smaller type, :class:`ReleaseLine`. Ambiguous
input is an error, never a guess: ``1.36`` is not an upstream version, ``1.36.0-1.1`` (a
pre-release made only of numbers, as a Debian revision looks) is refused. Errors are
:class:`VersionError` (exit 2) naming the string, what was expected and, when given, where it came
from (``recipes/kubernetes/1.36.yaml: vars.kubeletVersion``).

Ordering is total within a kind; ordering two different kinds raises ``TypeError`` (``==`` between
kinds is simply False, as ``1 == "1"`` is).

This module holds the version kinds; :mod:`nvkr.catalog.constraints` parses any kind by name, compares, sorts and checks constraints.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import semver
from debian.debian_support import NativeVersion

from nvkr.errors import UsageError

Kind = Literal["upstream", "driver", "debian"]
KINDS: tuple[Kind, ...] = ("upstream", "driver", "debian")
OPERATORS = ("==", "!=", ">=", "<=", ">", "<")


class VersionError(UsageError):
    """A version, release line or constraint that cannot be parsed, or is ambiguous (exit 2).

    The message quotes the string and says what was expected, prefixed with ``where`` (a file and
    field, e.g. ``recipes/kubernetes/1.36.yaml: vars.kubeletVersion``) when given.

    Attributes:
        text: the offending string.
        where: the place it came from, or None.
    """

    code = "NVKR-E-VERSION"

    def __init__(
        self, text: str, problem: str, *, where: str | None = None, hint: str | None = None
    ) -> None:
        message = f"{text!r} {problem}"
        if where:
            message = f"{where}: {message}"
        super().__init__(message, hint)
        self.text = text
        self.where = where


def kind_error(a: object, b: object) -> TypeError:
    return TypeError(
        f"cannot order {describe_version(a)} against {describe_version(b)}: different version kinds"
    )


def describe_version(v: object) -> str:
    kind = getattr(v, "kind", None)
    return f"{kind} version {str(v)!r}" if kind in KINDS else f"{type(v).__name__} {v!r}"


# ---------------------------------------------------------------------------------------------
# Kubernetes release lines


@dataclass(frozen=True, order=True)
class ReleaseLine:
    """A Kubernetes release line ``MAJOR.MINOR`` (``1.36``); ``str()`` gives ``1.36``."""

    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


NUMBER = r"(?:0|[1-9][0-9]*)"
_RELEASE_LINE_RE = re.compile(rf"v?({NUMBER})\.({NUMBER})")


def parse_release_line(text: str, *, where: str | None = None) -> ReleaseLine:
    """Parse ``1.36`` or ``v1.36`` into a :class:`ReleaseLine`.

    Raises:
        VersionError: for a patch release (``1.36.3``), leading zeros, anything else.
    """
    m = _RELEASE_LINE_RE.fullmatch(text)
    if m:
        return ReleaseLine(int(m[1]), int(m[2]))
    if _UPSTREAM_CORE_RE.match(text):
        raise VersionError(
            text,
            "is a patch release; expected a release line MAJOR.MINOR such as 1.36",
            where=where,
        )
    raise VersionError(
        text, "is not a release line; expected MAJOR.MINOR such as 1.36 or v1.36", where=where
    )


# ---------------------------------------------------------------------------------------------
# Upstream (SemVer) versions


@functools.total_ordering
@dataclass(frozen=True, eq=False, repr=False)
class UpstreamVersion:
    """An upstream release, SemVer 2.0.0; build with :func:`parse_upstream`.

    Equality, hashing and ordering follow SemVer precedence (§11): pre-releases sort before their
    release, numeric identifiers numerically (``rc.2 < rc.10``), others in ASCII order
    (``alpha < beta < rc``), and **build metadata is ignored**: ``1.36.3+k3s1 == 1.36.3`` and they
    hash alike. :meth:`same_build` also compares the build metadata; ``str()`` keeps it.
    """

    major: int
    minor: int
    patch: int
    prerelease: str | None = None
    build: str | None = None
    _sv: semver.Version = field(init=False, repr=False, compare=False)
    kind: ClassVar[Kind] = "upstream"

    def __repr__(self) -> str:
        return f"UpstreamVersion({str(self)!r})"

    def __post_init__(self) -> None:
        sv = semver.Version(self.major, self.minor, self.patch, self.prerelease, self.build)
        object.__setattr__(self, "_sv", sv)

    def __str__(self) -> str:
        return str(self._sv)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, UpstreamVersion):
            return NotImplemented
        return self._sv.compare(other._sv) == 0

    def __hash__(self) -> int:
        return hash((self.major, self.minor, self.patch, self.prerelease))

    def __lt__(self, other: object) -> bool:
        if isinstance(other, UpstreamVersion):
            return self._sv.compare(other._sv) < 0
        if isinstance(other, DriverVersion | DebianVersion):
            raise kind_error(self, other)
        return NotImplemented

    @property
    def newest_key(self) -> tuple[UpstreamVersion, tuple[Any, ...]]:
        """The key ``lock --update`` takes the newest tag by: SemVer precedence, then, among
        equal ones, :func:`build_precedence` (nvkr's rule; SemVer itself has none)."""
        return (self, build_precedence(self.build))

    def same_build(self, other: UpstreamVersion) -> bool:
        """True when ``other`` has the same precedence *and* the same build metadata."""
        return self == other and self.build == other.build

    @property
    def release_line(self) -> ReleaseLine:
        """The Kubernetes release line ``MAJOR.MINOR`` this version belongs to."""
        return ReleaseLine(self.major, self.minor)

    @property
    def is_prerelease(self) -> bool:
        return self.prerelease is not None


def build_precedence(build: str | None) -> tuple[Any, ...]:
    """nvkr's order of build metadata (``+...``), which SemVer's precedence ignores: the
    identifiers compare as pre-release ones do (SemVer §11.4): dot-separated, left to right,
    only-digit identifiers numerically and before alphanumeric ones, and a longer list after
    its own prefix; an alphanumeric identifier compares run by run, its digit runs numerically
    and its other runs in ASCII order (nvkr's own: SemVer would compare ``k3s10`` and ``k3s9``
    as text); no build metadata at all sorts before any.
    ``+build.2 < +build.10``, ``+k3s9 < +k3s10``, ``+k3s < +k3s.0 < +k3s0``, ``1.2.3 <
    1.2.3+build.1``.
    """
    if build is None:
        return (0, ())
    return (1, tuple(_identifier_key(p) for p in build.split(".")))


def _identifier_key(identifier: str) -> tuple[int, int, tuple[tuple[int, int, str], ...]]:
    if identifier.isdigit():
        return (0, int(identifier), ())
    runs = re.findall(r"[0-9]+|[^0-9]+", identifier)
    return (1, 0, tuple((0, int(r), "") if r.isdigit() else (1, 0, r) for r in runs))


_UPSTREAM_CORE_RE = re.compile(r"v?([0-9]+)\.([0-9]+)\.([0-9]+)")
_DRIVER_RE = re.compile(rf"({NUMBER})\.({NUMBER})(?:\.([0-9]+))?")


def _has_leading_zero(body: str) -> bool:
    """Whether a core part or a numeric pre-release identifier is written with a leading zero
    (build metadata may have them, SemVer §10)."""
    head = body.split("+", 1)[0]
    core, _, pre = head.partition("-")
    ids = core.split(".") + (pre.split(".") if pre else [])
    return any(len(i) > 1 and i.isdigit() and i.startswith("0") for i in ids)


def parse_upstream(text: str, *, where: str | None = None) -> UpstreamVersion:
    """Parse a SemVer 2.0.0 version with an optional leading ``v`` (``v1.36.3``, ``1.36.0-rc.1``,
    ``1.30.2+k3s1``).

    Raises:
        VersionError: for a release line (``1.36``), a pre-release made only of numeric
            identifiers (``1.36.0-1.1``: that is how a Debian revision looks; use
            :func:`parse_debian`), leading zeros (``1.036.0``; a driver-like ``580.95.05`` is
            pointed to :func:`parse_driver`), whitespace, empty or other non-SemVer text.
    """
    body = text[1:] if text.startswith("v") else text
    try:
        sv: semver.Version | None = semver.Version.parse(body)
    except (ValueError, TypeError):
        sv = None
    if sv is None:
        if not text.strip():
            raise VersionError(
                text, "is empty; expected a SemVer version MAJOR.MINOR.PATCH", where=where
            )
        if _RELEASE_LINE_RE.fullmatch(text):
            raise VersionError(
                text,
                "is a release line (MAJOR.MINOR), not a version; expected a patch release "
                f"such as {body}.0",
                where=where,
            )
        if _DRIVER_RE.fullmatch(text) and _UPSTREAM_CORE_RE.fullmatch(text):
            raise VersionError(
                text,
                "has a leading zero, which SemVer forbids; expected MAJOR.MINOR.PATCH without "
                "leading zeros (NVIDIA driver versions such as 580.95.05 are not SemVer)",
                where=where,
            )
        if _has_leading_zero(body):
            raise VersionError(
                text,
                "has a numeric part with a leading zero, which SemVer forbids; expected "
                "MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD] such as 1.36.0",
                where=where,
            )
        raise VersionError(
            text,
            "is not a SemVer version; expected [v]MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD] "
            "such as 1.36.3 or 1.36.0-rc.1",
            where=where,
        )
    if sv.prerelease is not None and all(p.isdigit() for p in sv.prerelease.split(".")):
        raise VersionError(
            text,
            f"is ambiguous: its pre-release {sv.prerelease!r} is only numbers, which looks like "
            "a Debian revision; upstream versions follow SemVer (Debian versions belong in apt pins)",
            where=where,
        )
    return UpstreamVersion(sv.major, sv.minor, sv.patch, sv.prerelease, sv.build)


def parse_calendar(text: str, *, where: str | None = None) -> UpstreamVersion:
    """A calendar version ``YY.MM.PATCH`` (OVN's releases: ``23.03.1``) as an
    :class:`UpstreamVersion` for comparison: the month's leading zero is dropped (``23.3.1``),
    which keeps the order of releases.

    Raises:
        VersionError: naming ``text`` when it is not three dot-separated numbers.
    """
    if not _CALENDAR_RE.fullmatch(text):
        raise VersionError(
            text,
            "is not a calendar version; expected YY.MM.PATCH such as 23.03.1",
            where=where,
        )
    return parse_upstream(".".join(str(int(part)) for part in text.split(".")), where=where)


_CALENDAR_RE = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")


# ---------------------------------------------------------------------------------------------
# NVIDIA driver versions


@functools.total_ordering
@dataclass(frozen=True, eq=False, repr=False)
class DriverVersion:
    """An NVIDIA driver version ``BRANCH.MINOR[.PATCH]`` (``580.95.05``, ``570.172.08``,
    ``390.157``); build with :func:`parse_driver`.

    Parts compare numerically, one by one (``580.95.05 > 580.9.1``); a missing third part counts
    as 0, so ``390.157 == 390.157.0`` and ``580.95.05 == 580.95.5`` (``==`` and hashing follow the
    ordering). ``str()`` is the text as written; ``parts`` the numbers as given (2 or 3).
    """

    text: str
    parts: tuple[int, ...]
    kind: ClassVar[Kind] = "driver"

    def __repr__(self) -> str:
        return f"DriverVersion({self.text!r})"

    def __str__(self) -> str:
        return self.text

    @property
    def _key(self) -> tuple[int, ...]:
        return self.parts + (0,) * (3 - len(self.parts))

    @property
    def branch(self) -> int:
        """The driver branch, the first number (``580`` for ``580.95.05``)."""
        return self.parts[0]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DriverVersion):
            return NotImplemented
        return self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __lt__(self, other: object) -> bool:
        if isinstance(other, DriverVersion):
            return self._key < other._key
        if isinstance(other, UpstreamVersion | DebianVersion):
            raise kind_error(self, other)
        return NotImplemented


def parse_driver(text: str, *, where: str | None = None) -> DriverVersion:
    """Parse an NVIDIA driver version: 2 or 3 dot-separated numbers, the first two without leading
    zeros, the third often zero-padded (``580.95.05``).

    Raises:
        VersionError: for one part, more than three, a ``v`` prefix, suffixes (``-1``,
            ``-open``), leading zeros in the branch or minor, empty or other text.
    """
    m = _DRIVER_RE.fullmatch(text)
    if not m:
        raise VersionError(
            text,
            "is not an NVIDIA driver version; expected BRANCH.MINOR[.PATCH] numbers such as "
            "580.95.05 (a Debian package version belongs in an apt pin)",
            where=where,
        )
    return DriverVersion(text, tuple(int(p) for p in m.groups() if p is not None))


# ---------------------------------------------------------------------------------------------
# Debian package versions

_EPOCH_MAX = 2**31 - 1  # dpkg: "epoch in version is too big" above INT_MAX
_DEB_UPSTREAM_RE = re.compile(r"[0-9][A-Za-z0-9.+~:-]*")
_DEB_REVISION_RE = re.compile(r"[A-Za-z0-9.+~]+")
_NON_DIGIT_RUNS = re.compile(r"[^0-9]+")


@functools.total_ordering
@dataclass(frozen=True, eq=False, repr=False)
class DebianVersion:
    """A Debian package version ``[epoch:]upstream[-revision]``; build with :func:`parse_debian`.

    Ordered as dpkg orders (deb-version(7)): epoch first, numerically; then upstream, then
    revision, each compared as alternating runs of non-digits (``~`` before everything, even the
    end of the string; then the end; then letters; then other characters) and digits
    (numerically). ``==`` and hashing follow the ordering: ``1.0 == 1.0-0 == 0:1.0 == 1.00``.

    Attributes:
        epoch: the epoch (0 when absent).
        upstream: the upstream part (may contain ``-``, ``~``, ``+``, ``:``...).
        revision: the Debian revision after the last ``-``, or None.
    """

    text: str
    epoch: int
    upstream: str
    revision: str | None
    _native: NativeVersion = field(init=False, repr=False, compare=False)
    kind: ClassVar[Kind] = "debian"

    def __repr__(self) -> str:
        return f"DebianVersion({self.text!r})"

    def __post_init__(self) -> None:
        object.__setattr__(self, "_native", NativeVersion(self.text))

    def __str__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DebianVersion):
            return NotImplemented
        return bool(self._native == other._native)

    def __hash__(self) -> int:
        # Versions dpkg finds equal differ only in how digit runs are written (leading zeros, a
        # missing revision against "0", a missing epoch against "0"): hash what cannot differ.
        return hash(
            (
                self.epoch,
                tuple(_NON_DIGIT_RUNS.findall(self.upstream)),
                tuple(_NON_DIGIT_RUNS.findall(self.revision or "")),
            )
        )

    def __lt__(self, other: object) -> bool:
        if isinstance(other, DebianVersion):
            return bool(self._native < other._native)
        if isinstance(other, UpstreamVersion | DriverVersion):
            raise kind_error(self, other)
        return NotImplemented

    def upstream_semver(self, *, where: str | None = None) -> UpstreamVersion:
        """Best-effort upstream SemVer version of this package version.

        Exactly this is done, in order: the epoch and the revision are dropped; one trailing
        Debian repack suffix is stripped (``+dfsg``, ``~dfsg``, ``+ds``, ``~ds``, ``+repack``,
        ``~repack``, each optionally followed by digits and dots: ``1.6.20~ds1`` -> ``1.6.20``);
        one trailing tilde pre-release ``~alpha``/``~beta``/``~rc`` with an optional ``.`` and
        number becomes a SemVer pre-release (``1.7.0~rc1`` and ``1.7.0~rc.1`` -> ``1.7.0-rc.1``);
        the rest must then parse with :func:`parse_upstream`.

        Raises:
            VersionError: naming this version when what is left is not a SemVer version (e.g.
                ``2.6`` has two parts, ``1.0+git20240101`` keeps a ``+git`` suffix).
        """
        rest = re.sub(r"[~+](?:dfsg|ds|repack)[0-9.]*$", "", self.upstream)
        rest = re.sub(r"~(alpha|beta|rc)\.?([0-9]+)?$", _tilde_prerelease, rest)
        try:
            return parse_upstream(rest)
        except VersionError:
            raise VersionError(
                self.text,
                f"has no SemVer upstream version: after dropping the epoch, the revision and "
                f"any repack suffix, {rest!r} is left; expected MAJOR.MINOR.PATCH[-PRERELEASE]",
                where=where,
            ) from None


def _tilde_prerelease(m: re.Match[str]) -> str:
    return f"-{m[1]}.{m[2]}" if m[2] else f"-{m[1]}"


def parse_debian(text: str, *, where: str | None = None) -> DebianVersion:
    """Parse a Debian package version ``[epoch:]upstream[-revision]`` as dpkg does: the epoch is
    what precedes the first ``:``, the revision what follows the last ``-``.

    Raises:
        VersionError: for an empty or non-numeric epoch, an epoch above 2^31-1, an empty
            upstream or revision, an upstream not starting with a digit, characters outside
            ``[A-Za-z0-9.+~:-]`` (``[A-Za-z0-9.+~]`` in the revision), whitespace, empty text.
    """
    expected = "expected [EPOCH:]UPSTREAM[-REVISION] such as 1:1.4.7-1+b2 (Debian Policy 5.6.12)"
    epoch = 0
    rest = text
    if ":" in text:
        head, rest = text.split(":", 1)
        if not head.isdigit() or not head.isascii():
            raise VersionError(text, f"has an epoch that is not a number; {expected}", where=where)
        epoch = int(head)
        if epoch > _EPOCH_MAX:
            raise VersionError(text, f"has an epoch above {_EPOCH_MAX}; {expected}", where=where)
    upstream, sep, revision = rest.rpartition("-")
    if not sep:
        upstream, revision = rest, ""
    elif not revision:
        raise VersionError(text, f"has an empty revision after '-'; {expected}", where=where)
    elif not _DEB_REVISION_RE.fullmatch(revision):
        raise VersionError(
            text,
            f"has a revision {revision!r} with characters not allowed; {expected}",
            where=where,
        )
    if not upstream:
        raise VersionError(text, f"has an empty upstream version; {expected}", where=where)
    if upstream[0] not in "0123456789":
        raise VersionError(
            text,
            f"has an upstream version {upstream!r} not starting with a digit; {expected}",
            where=where,
        )
    if not _DEB_UPSTREAM_RE.fullmatch(upstream):
        raise VersionError(
            text,
            f"has characters not allowed in upstream version {upstream!r}; {expected}",
            where=where,
        )
    return DebianVersion(text, epoch, upstream, revision if sep else None)
