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
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar, overload

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


def _kind_error(a: object, b: object) -> TypeError:
    return TypeError(f"cannot order {_describe(a)} against {_describe(b)}: different version kinds")


def _describe(v: object) -> str:
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


_NUM = r"(?:0|[1-9][0-9]*)"
_RELEASE_LINE_RE = re.compile(rf"v?({_NUM})\.({_NUM})")


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
            raise _kind_error(self, other)
        return NotImplemented

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


_UPSTREAM_CORE_RE = re.compile(r"v?([0-9]+)\.([0-9]+)\.([0-9]+)")
_DRIVER_RE = re.compile(rf"({_NUM})\.({_NUM})(?:\.([0-9]+))?")


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
            raise _kind_error(self, other)
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
            raise _kind_error(self, other)
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


# ---------------------------------------------------------------------------------------------
# Dispatch, constraints, helpers

AnyVersion = UpstreamVersion | DriverVersion | DebianVersion
V = TypeVar("V", UpstreamVersion, DriverVersion, DebianVersion)


@overload
def parse(text: str, kind: Literal["upstream"], *, where: str | None = None) -> UpstreamVersion: ...
@overload
def parse(text: str, kind: Literal["driver"], *, where: str | None = None) -> DriverVersion: ...
@overload
def parse(text: str, kind: Literal["debian"], *, where: str | None = None) -> DebianVersion: ...
@overload
def parse(text: str, kind: Kind, *, where: str | None = None) -> AnyVersion: ...
def parse(text: str, kind: Kind, *, where: str | None = None) -> AnyVersion:
    """Parse ``text`` as a version of ``kind`` (``upstream``, ``driver`` or ``debian``).

    Raises:
        VersionError: as the kind's parser does.
        ValueError: for an unknown kind.
    """
    if kind == "upstream":
        return parse_upstream(text, where=where)
    if kind == "driver":
        return parse_driver(text, where=where)
    if kind == "debian":
        return parse_debian(text, where=where)
    raise ValueError(f"unknown version kind {kind!r}; expected one of {', '.join(KINDS)}")


def _coerce(value: AnyVersion | str, kind: Kind | None) -> AnyVersion:
    if isinstance(value, str):
        if kind is None:
            raise TypeError(f"cannot tell the kind of version string {value!r}: pass kind=")
        return parse(value, kind)
    if not isinstance(value, UpstreamVersion | DriverVersion | DebianVersion):
        raise TypeError(f"expected a version or a string, got {type(value).__name__}")
    if kind is not None and value.kind != kind:
        raise TypeError(f"{_describe(value)} is not a {kind} version")
    return value


@dataclass(frozen=True)
class Comparator:
    """One comparison ``OP BOUND`` of a constraint (``>=2.0.0``)."""

    op: str
    bound: AnyVersion

    def allows(self, version: AnyVersion) -> bool:
        v, b = version, self.bound
        if self.op == "==":
            return v == b
        if self.op == "!=":
            return v != b
        if self.op == ">=":
            return v >= b
        if self.op == "<=":
            return v <= b
        if self.op == ">":
            return v > b
        return v < b

    def __str__(self) -> str:
        return f"{self.op}{self.bound}"


@dataclass(frozen=True)
class Constraint:
    """A comma-separated AND of comparators over versions of one kind; build with
    :func:`parse_constraint`."""

    kind: Kind
    comparators: tuple[Comparator, ...]

    def allows(self, version: AnyVersion) -> bool:
        """True when ``version`` meets every comparator.

        Raises:
            TypeError: when ``version`` is not of this constraint's kind.
        """
        if not isinstance(version, UpstreamVersion | DriverVersion | DebianVersion):
            raise TypeError(f"expected a parsed version, got {type(version).__name__}")
        if version.kind != self.kind:
            raise TypeError(f"{_describe(version)} cannot meet a {self.kind} constraint {self}")
        return all(c.allows(version) for c in self.comparators)

    def __str__(self) -> str:
        return ",".join(str(c) for c in self.comparators)


_OP_RE = re.compile(r"\s*([<>=!~^]*)\s*(.*?)\s*", re.DOTALL)
_PARTIAL_UPSTREAM_RE = re.compile(rf"v?({_NUM})(?:\.({_NUM}))?")
_PARTIAL_DRIVER_RE = re.compile(rf"({_NUM})")


def _bound(text: str, op: str, kind: Kind, where: str | None) -> AnyVersion:
    partial: re.Match[str] | None = None
    if kind == "upstream":
        partial = _PARTIAL_UPSTREAM_RE.fullmatch(text)
    elif kind == "driver":
        partial = _PARTIAL_DRIVER_RE.fullmatch(text)
    if partial is None:
        return parse(text, kind, where=where)
    if op in ("==", "!="):
        raise VersionError(
            text,
            f"is a partial bound, allowed only with >=, >, <=, <; {op} needs a full {kind} version",
            where=where,
        )
    major = int(partial[1])
    minor = int(partial[2] or 0) if kind == "upstream" else 0
    if kind == "upstream":
        return UpstreamVersion(major, minor, 0)
    return DriverVersion(text, (major,))


def parse_constraint(text: str, kind: Kind, *, where: str | None = None) -> Constraint:
    """Parse a constraint: comparators ``OP BOUND`` joined by ``,`` (all must hold), OP one of
    ``==``, ``!=``, ``>=``, ``<=``, ``>``, ``<``; whitespace around comparators is ignored.

    Bounds are parsed as versions of ``kind``. For ``upstream`` and ``driver`` a *partial* bound
    is allowed with ``>=``, ``>``, ``<=``, ``<``: missing parts are 0 (``>=2.0`` means
    ``>=2.0.0``; ``<2`` means ``<2.0.0``; a driver branch ``>=570`` means ``>=570.0.0``).
    ``==1.36`` and ``!=580`` are refused: an exact comparison needs a full version. Upstream
    comparisons follow SemVer precedence only, so ``<3.0.0`` admits ``3.0.0-rc.1``. Debian bounds
    use the same six operators (not dpkg's ``<<``/``>>``).

    Raises:
        VersionError: for an empty constraint or comparator, an unknown operator (named), a
            missing operator, or a bound that does not parse.
    """
    where_c = f"{where}: constraint {text!r}" if where else f"constraint {text!r}"
    if not text.strip():
        raise VersionError(
            text, "is an empty constraint; expected e.g. >=1.0.0,<2.0.0", where=where
        )
    comparators = []
    for part in text.split(","):
        m = _OP_RE.fullmatch(part)
        assert m is not None  # the pattern matches any string
        op, bound = m[1], m[2]
        if not op and not bound:
            raise VersionError(
                part, "is an empty comparator; expected OP VERSION joined by ','", where=where_c
            )
        if op not in OPERATORS:
            problem = f"has unknown operator {op!r}" if op else "has no operator"
            raise VersionError(
                part.strip(), f"{problem}; expected one of {' '.join(OPERATORS)}", where=where_c
            )
        if not bound:
            raise VersionError(part.strip(), "has no version after the operator", where=where_c)
        comparators.append(Comparator(op, _bound(bound, op, kind, where_c)))
    return Constraint(kind, tuple(comparators))


def satisfies(
    version: AnyVersion, constraint: str | Constraint, *, where: str | None = None
) -> bool:
    """True when ``version`` meets ``constraint`` (parsed by :func:`parse_constraint` with the
    version's own kind when given as a string).

    Raises:
        VersionError: when the constraint does not parse.
        TypeError: when ``version`` is a string, or the constraint is of another kind.
    """
    if not isinstance(version, UpstreamVersion | DriverVersion | DebianVersion):
        raise TypeError(
            f"satisfies() needs a parsed version, not {type(version).__name__} {version!r}: "
            "use parse_upstream, parse_driver or parse_debian"
        )
    if isinstance(constraint, str):
        constraint = parse_constraint(constraint, version.kind, where=where)
    return constraint.allows(version)


def compare(a: AnyVersion | str, b: AnyVersion | str, *, kind: Kind | None = None) -> int:
    """-1, 0 or 1 as ``a`` is older than, equal to or newer than ``b``. Strings need ``kind``.

    Raises:
        TypeError: for different kinds, or a string without ``kind``.
        VersionError: for a string that does not parse.
    """
    va, vb = _coerce(a, kind), _coerce(b, kind)
    if va.kind != vb.kind:
        raise _kind_error(va, vb)
    return -1 if va < vb else (1 if va > vb else 0)


@overload
def sort_versions(items: Iterable[V], kind: None = None, *, reverse: bool = False) -> list[V]: ...
@overload
def sort_versions(
    items: Iterable[AnyVersion | str], kind: Kind, *, reverse: bool = False
) -> list[AnyVersion]: ...
def sort_versions(
    items: Iterable[Any], kind: Kind | None = None, *, reverse: bool = False
) -> list[Any]:
    """The versions sorted oldest first (newest first with ``reverse``); strings are parsed as
    ``kind``. Stable: equal versions (``1.0`` and ``1.00`` for dpkg) keep their input order.

    Raises:
        TypeError: for mixed kinds, or strings without ``kind``.
        VersionError: for a string that does not parse.
    """
    versions = [_coerce(v, kind) for v in items]
    kinds = {v.kind for v in versions}
    if len(kinds) > 1:
        raise TypeError(f"cannot sort versions of different kinds: {', '.join(sorted(kinds))}")
    return sorted(versions, reverse=reverse)


@overload
def max_version(items: Iterable[V], kind: None = None) -> V: ...
@overload
def max_version(items: Iterable[AnyVersion | str], kind: Kind) -> AnyVersion: ...
def max_version(items: Iterable[Any], kind: Kind | None = None) -> Any:
    """The newest version (the first given, among equals).

    Raises:
        ValueError: for no versions. TypeError, VersionError: as :func:`sort_versions`.
    """
    versions = sort_versions(items, kind, reverse=True)
    if not versions:
        raise ValueError("max_version() of no versions")
    return versions[0]


def minor_distance(a: UpstreamVersion | ReleaseLine, b: UpstreamVersion | ReleaseLine) -> int:
    """How many minor releases ``b`` is ahead of ``a`` (negative when behind), both of the same
    major: ``minor_distance(1.33.5, 1.36.3) == 3``. Pre-releases and patches do not count. For
    Kubernetes skew: a kubelet is allowed when ``0 <= minor_distance(kubelet, apiserver) <= 3``.

    Raises:
        VersionError: when the majors differ (minors of different majors cannot be counted).
        TypeError: for driver or Debian versions.
    """
    for v in (a, b):
        if not isinstance(v, UpstreamVersion | ReleaseLine):
            raise TypeError(f"minor_distance() needs upstream versions or release lines, not {v!r}")
    if a.major != b.major:
        raise VersionError(
            str(b),
            f"has major {b.major} and {str(a)!r} major {a.major}; minor distances are counted "
            "within one major version",
        )
    return b.minor - a.minor
