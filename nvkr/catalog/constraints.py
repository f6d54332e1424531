"""Versions of any kind (:mod:`nvkr.catalog.versions`):
parsed by kind name (:func:`parse`), compared, sorted, and matched against constraints such as
``>=1.36.0, <1.37`` (:func:`parse_constraint`, :func:`satisfies`) as the compatibility rules
and ``nvkr lock --update`` use them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, overload

from nvkr.catalog.versions import (
    KINDS,
    NUMBER,
    OPERATORS,
    DebianVersion,
    DriverVersion,
    Kind,
    ReleaseLine,
    UpstreamVersion,
    VersionError,
    describe_version,
    kind_error,
    parse_debian,
    parse_driver,
    parse_upstream,
)

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
        raise TypeError(f"{describe_version(value)} is not a {kind} version")
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
            raise TypeError(
                f"{describe_version(version)} cannot meet a {self.kind} constraint {self}"
            )
        return all(c.allows(version) for c in self.comparators)

    def __str__(self) -> str:
        return ",".join(str(c) for c in self.comparators)


_OP_RE = re.compile(r"\s*([<>=!~^]*)\s*(.*?)\s*", re.DOTALL)
_PARTIAL_UPSTREAM_RE = re.compile(rf"v?({NUMBER})(?:\.({NUMBER}))?")
_PARTIAL_DRIVER_RE = re.compile(rf"({NUMBER})")


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
        raise kind_error(va, vb)
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
