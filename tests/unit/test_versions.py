"""Version parsing and ordering (nvkr/versions.py): SemVer precedence, NVIDIA driver versions,
Debian versions checked against the real ``dpkg --compare-versions``, constraints, helpers."""

from __future__ import annotations

import itertools
import random
import subprocess

import pytest

from nvkr.catalog.constraints import (
    compare,
    max_version,
    minor_distance,
    parse,
    parse_constraint,
    satisfies,
    sort_versions,
)
from nvkr.catalog.versions import (
    DebianVersion,
    DriverVersion,
    ReleaseLine,
    UpstreamVersion,
    VersionError,
    build_precedence,
    parse_debian,
    parse_driver,
    parse_release_line,
    parse_upstream,
)
from nvkr.errors import UsageError

U = parse_upstream
D = parse_driver
DEB = parse_debian


# --- upstream (SemVer) --------------------------------------------------------------------------


def test_semver_precedence_chain() -> None:
    chain = [
        "0.9.9",
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0-rc.2",
        "1.0.0-rc.10",
        "1.0.0",
        "1.0.1",
        "1.2.0",
        "1.10.0",
        "2.0.0",
    ]
    versions = [U(s) for s in chain]
    for a, b in itertools.pairwise(versions):
        assert a < b and b > a and a != b and compare(a, b) == -1 and compare(b, a) == 1
    shuffled = chain[:]
    random.Random(7).shuffle(shuffled)
    assert [str(v) for v in sort_versions(shuffled, "upstream")] == chain
    assert [str(v) for v in sort_versions(shuffled, "upstream", reverse=True)] == chain[::-1]


def test_v_prefix_and_canonical_str() -> None:
    assert U("v1.36.3") == U("1.36.3")
    assert str(U("v1.36.3")) == "1.36.3"
    assert repr(U("v1.36.0-rc.1")) == "UpstreamVersion('1.36.0-rc.1')"
    v = U("v1.36.0-rc.1+k3s1")
    assert (v.major, v.minor, v.patch, v.prerelease, v.build) == (1, 36, 0, "rc.1", "k3s1")
    assert v.is_prerelease and not U("1.36.0").is_prerelease
    assert v.release_line == ReleaseLine(1, 36)


def test_build_metadata_ignored_for_precedence_but_kept() -> None:
    a, b, plain = U("1.30.2+k3s1"), U("1.30.2+k3s2"), U("1.30.2")
    assert a == b == plain and hash(a) == hash(b) == hash(plain)
    assert not a < b and not b < a and compare(a, b) == 0
    assert str(a) == "1.30.2+k3s1"
    assert a.same_build(U("v1.30.2+k3s1")) and not a.same_build(b) and not a.same_build(plain)
    assert U("1.30.2+k3s1") < U("1.30.3")
    assert len({a, b, plain}) == 1


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("1.36", "is a release line (MAJOR.MINOR), not a version; expected a patch release"),
        ("v1.36", "is a release line"),
        ("1.36.0-1.1", "looks like a Debian revision; upstream versions follow SemVer (Debian"),
        ("1.36.0-1", "is ambiguous: its pre-release '1' is only numbers"),
        ("1.036.0", "has a numeric part with a leading zero, which SemVer forbids"),
        ("01.36.0", "leading zero"),
        ("1.0.0-rc.01", "leading zero"),
        ("580.95.05", "NVIDIA driver versions such as 580.95.05 are not SemVer"),
        ("", "is empty; expected a SemVer version"),
        ("   ", "is empty"),
        ("garbage", "is not a SemVer version; expected [v]MAJOR.MINOR.PATCH"),
        ("1.36.3 ", "is not a SemVer version"),
        ("V1.36.3", "is not a SemVer version"),
        ("vv1.36.3", "is not a SemVer version"),
        ("1.36.3-", "is not a SemVer version"),
        ("1.36.3+", "is not a SemVer version"),
        ("1.36.3.4", "is not a SemVer version"),
        ("1.36.3-rc..1", "is not a SemVer version"),
        ("\u0661.\u0662.\u0663", "is not a SemVer version"),  # Arabic-Indic digits
    ],
)
def test_upstream_errors(text: str, fragment: str) -> None:
    with pytest.raises(VersionError) as info:
        U(text, where="recipes/kubernetes/1.36.yaml: vars.kubeletVersion")
    err = info.value
    assert fragment in err.message
    assert err.message.startswith(f"recipes/kubernetes/1.36.yaml: vars.kubeletVersion: {text!r} ")
    assert err.text == text and isinstance(err, UsageError) and err.exit_code == 2
    assert err.render().startswith("error[NVKR-E-VERSION]: ")


def test_error_without_where_starts_with_the_string() -> None:
    with pytest.raises(VersionError) as info:
        U("1.36")
    assert info.value.message.startswith("'1.36' is a release line")
    assert info.value.where is None


def test_mixed_alphanumeric_prerelease_is_not_ambiguous() -> None:
    assert U("1.0.0-0.a") < U("1.0.0-a")  # numeric identifiers sort before alphanumeric
    assert U("1.36.0-rc.1.1") < U("1.36.0-rc.1.2")
    with pytest.raises(VersionError, match="looks like a Debian revision"):
        U("1.36.0-1.1+build.007")  # build metadata does not make it unambiguous


def test_release_lines() -> None:
    assert parse_release_line("1.36") == parse_release_line("v1.36") == ReleaseLine(1, 36)
    assert str(parse_release_line("v1.36")) == "1.36"
    assert parse_release_line("1.9") < parse_release_line("1.10")
    with pytest.raises(VersionError, match=r"'1\.36\.3' is a patch release; expected a release"):
        parse_release_line("1.36.3")
    for bad in ("1", "1.036", "1.36-rc.1", "", "x.y"):
        with pytest.raises(VersionError, match="is not a release line"):
            parse_release_line(bad, where="f.yaml: k")


# --- NVIDIA driver ------------------------------------------------------------------------------


def test_driver_versions() -> None:
    v = D("580.95.05")
    assert v.branch == 580 and v.parts == (580, 95, 5) and str(v) == "580.95.05"
    assert repr(v) == "DriverVersion('580.95.05')"
    assert D("580.95.05") > D("580.9.1")  # 95 > 9, numerically
    assert D("570.172.08") < D("580.65.06") < D("580.95.05")
    assert D("535.247.01") < D("535.247.10") < D("535.261.03")
    assert D("390.157") == D("390.157.0") and hash(D("390.157")) == hash(D("390.157.0"))
    assert D("390.157") < D("390.157.1")
    assert D("580.95.05") == D("580.95.5")
    order = ["390.157", "470.82.01", "535.247.01", "570.172.08", "580.9.1", "580.95.05"]
    shuffled = order[::-1]
    assert [str(x) for x in sort_versions(shuffled, "driver")] == order
    assert str(max_version(shuffled, "driver")) == "580.95.05"


@pytest.mark.parametrize(
    "text", ["580", "580.95.05.1", "v580.95.05", "0580.95.05", "580.095.05", "580.95.05-1", ""]
)
def test_driver_errors(text: str) -> None:
    with pytest.raises(VersionError) as info:
        D(text, where="recipes/gpu.yaml: driver")
    assert info.value.message == (
        f"recipes/gpu.yaml: driver: {text!r} is not an NVIDIA driver version; expected "
        "BRANCH.MINOR[.PATCH] numbers such as 580.95.05 (a Debian package version belongs in an apt pin)"
    )


# --- kinds don't mix -----------------------------------------------------------------------------


def test_different_kinds_do_not_order() -> None:
    u, d, deb = U("1.2.3"), D("1.2.3"), DEB("1.2.3")
    for a, b in ((u, d), (d, deb), (deb, u)):
        assert a != b
        for op in ("__lt__", "__le__", "__gt__", "__ge__"):
            with pytest.raises(TypeError, match="different version kinds"):
                getattr(a, op)(b)
        with pytest.raises(TypeError):
            compare(a, b)
        with pytest.raises(TypeError):
            sort_versions([a, b])
    with pytest.raises(TypeError):
        _ = u < "1.2.4"  # type: ignore[operator]
    with pytest.raises(TypeError, match="pass kind="):
        compare("1.0.0", "2.0.0")
    with pytest.raises(TypeError, match="is not a driver version"):
        sort_versions([u], "driver")


def test_frozen_and_hashable() -> None:
    for v in (U("1.0.0"), D("580.95.05"), DEB("1:1.0-1")):
        with pytest.raises(AttributeError):
            v.text = "x"  # type: ignore[misc,union-attr]
        assert {v: 1}[v] == 1


def test_parse_dispatch() -> None:
    assert isinstance(parse("1.0.0", "upstream"), UpstreamVersion)
    assert isinstance(parse("580.95.05", "driver"), DriverVersion)
    assert isinstance(parse("1.0-1", "debian"), DebianVersion)
    with pytest.raises(ValueError, match="unknown version kind 'pep440'"):
        parse("1.0", "pep440")  # type: ignore[call-overload]


# --- Debian ---------------------------------------------------------------------------------------

DEBIAN_PAIRS = [
    ("1.0", "1.0-0"),
    ("1.0", "1.00"),
    ("0:1.0", "1.0"),
    ("1:0.1", "2.0"),
    ("1.0~rc1", "1.0"),
    ("1.0~~", "1.0~"),
    ("1.0~", "1.0"),
    ("1.0~rc1", "1.0~rc1~1"),
    ("1.0a", "1.0+"),
    ("1.0a", "1.0."),
    ("1.0", "1.0a"),
    ("1.0.1", "1.0a"),
    ("1.2.10", "1.2.9"),
    ("1.6.20~ds1-1+deb12u3", "1.6.20~ds1-1"),
    ("1.6.20~ds1-1+deb12u3", "1.6.20-1"),
    ("1:1.4.7-1+b2", "1:1.4.7-1"),
    ("1:1.4.7-1+b2", "1:1.4.7-1.1"),
    ("1:1.4.7-1+b2", "1.5.0-1"),
    ("1.36.0-1.1", "1.36.0-1"),
    ("1.36.0-1.1", "1.36.0-2"),
    ("2.1.0+dfsg-1", "2.1.0-1"),
    ("2.1.0+dfsg1-1", "2.1.0+dfsg-1"),
    ("1.0-1~bpo12+1", "1.0-1"),
    ("1.0-1~bpo12+1", "1.0-0.1"),
    ("7.88.1-10+deb12u5", "7.88.1-10+deb12u12"),
    ("252.30-1~deb12u2", "252.30-1"),
    ("1.1.5+ds1-1", "1.1.5-1"),
    ("0.0~git20230101.abc-1", "0.0~git20221231.fff-1"),
    ("1.0-a", "1.0-1"),
    ("1.0-A", "1.0-a"),
    ("1:1:1.0", "1:1:0.9"),
    ("10", "9"),
    ("01", "1"),
    ("1.01", "1.1"),
    ("1-2-3", "1-2-2"),
    ("1.0-1-1", "1.0-1"),
    ("4.19.0~rc1", "4.19.0~beta2"),
    ("6.1.192-1", "6.1.192-1+deb12u1"),
    ("1.0+~", "1.0+"),
    ("1.0~a", "1.0~b"),
    ("1.0~A", "1.0~a"),
    ("99999999999999999999999", "99999999999999999999998"),
    ("1.0.", "1.0"),
    ("1.0-+", "1.0-~"),
    ("2:1.0", "1:9.9"),
    ("1.0-0", "1.0-00"),
    ("1.0+b1", "1.0.1"),
    ("1.0~rc1-1", "1.0-0"),
    ("3.0.9-1+deb12u5", "3.0.9-1+deb12u5"),
    ("1.2a3", "1.2a10"),
    ("1.2-a3", "1.2-a.3"),
]


def dpkg_compare(a: str, b: str) -> int:
    def holds(op: str) -> bool:
        run = subprocess.run(["dpkg", "--compare-versions", a, op, b], capture_output=True)
        assert run.stderr == b"", run.stderr  # every input here is a valid version for dpkg
        return run.returncode == 0

    return -1 if holds("lt") else (0 if holds("eq") else 1)


def test_debian_corpus_matches_dpkg() -> None:
    assert len(DEBIAN_PAIRS) >= 40
    mismatches = []
    for a, b in DEBIAN_PAIRS:
        va, vb = DEB(a), DEB(b)
        expected = dpkg_compare(a, b)
        got = compare(va, vb)
        if got != expected or compare(vb, va) != -expected:
            mismatches.append((a, b, expected, got))
        if expected == 0:
            assert hash(va) == hash(vb), (a, b)
    assert mismatches == []
    assert {dpkg_compare(a, b) for a, b in DEBIAN_PAIRS} == {-1, 0, 1}


def test_debian_known_orders() -> None:
    # independent of dpkg: the rules as deb-version(7) states them
    assert DEB("1.0~rc1") < DEB("1.0")  # tilde before the end
    assert DEB("1.0~~") < DEB("1.0~")
    assert DEB("1.0a") < DEB("1.0+")  # letters before non-letters
    assert DEB("1.2.10") > DEB("1.2.9")  # digit runs numerically
    assert DEB("1:0.1") > DEB("9.9")  # epoch first
    assert DEB("1.0") == DEB("1.0-0") == DEB("0:1.0") == DEB("1.00")
    assert len({DEB("1.0"), DEB("1.0-0"), DEB("0:1.0"), DEB("1.00")}) == 1


def _random_debian(rng: random.Random) -> str:
    text = rng.choice("0123456789") + "".join(
        rng.choice("0192a.+~") for _ in range(rng.randint(0, 5))
    )
    if rng.random() < 0.25:
        text = f"{rng.randint(0, 2)}:{text}"
    if rng.random() < 0.5:
        text += "-" + "".join(rng.choice("01a+.~") for _ in range(rng.randint(1, 4)))
    return text


def test_debian_random_pairs_match_dpkg() -> None:
    rng = random.Random(20260101)
    pairs = [(_random_debian(rng), _random_debian(rng)) for _ in range(200)]
    pairs += [
        (a, a.replace("1", "01", 1)) for a, _ in pairs[:20]
    ]  # equal under dpkg, differ in text
    mismatches = []
    for a, b in pairs:
        va, vb = DEB(a), DEB(b)
        expected = dpkg_compare(a, b)
        if compare(va, vb) != expected:
            mismatches.append((a, b, expected))
        if expected == 0:
            assert va == vb and hash(va) == hash(vb), (a, b)
    assert mismatches == []


def test_debian_shuffled_sort_is_dpkg_order() -> None:
    texts = sorted({t for pair in DEBIAN_PAIRS for t in pair})
    random.Random(3).shuffle(texts)
    ordered = sort_versions(texts, "debian")
    assert len(ordered) == len(texts)
    for a, b in itertools.pairwise(ordered):
        assert dpkg_compare(str(a), str(b)) <= 0, (str(a), str(b))
    assert str(max_version(texts, "debian")) == "2:1.0"  # the epoch wins


def test_debian_fields() -> None:
    v = DEB("1:1.4.7-1+b2")
    assert (v.epoch, v.upstream, v.revision, str(v)) == (1, "1.4.7", "1+b2", "1:1.4.7-1+b2")
    v = DEB("1.6.20~ds1-1+deb12u3")
    assert (v.epoch, v.upstream, v.revision) == (0, "1.6.20~ds1", "1+deb12u3")
    v = DEB("1:2:3-4-5")
    assert (v.epoch, v.upstream, v.revision) == (1, "2:3-4", "5")
    v = DEB("2.6")
    assert (v.epoch, v.upstream, v.revision) == (0, "2.6", None)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "has an empty upstream version"),
        ("1.0-", "has an empty revision after '-'"),
        (":1.0", "has an epoch that is not a number"),
        ("x:1.0", "has an epoch that is not a number"),
        ("99999999999:1.0", "has an epoch above 2147483647"),
        ("1:", "has an empty upstream version"),
        ("a1.0", "has an upstream version 'a1.0' not starting with a digit"),
        ("1_0", "has characters not allowed in upstream version '1_0'"),
        ("1.0 ", "has characters not allowed"),
        ("1.0-1_1", "has a revision '1_1' with characters not allowed"),
        ("1.0:1", "has an epoch that is not a number"),
    ],
)
def test_debian_errors(text: str, fragment: str) -> None:
    with pytest.raises(VersionError) as info:
        DEB(text, where="recipes/x.yaml: packages.runc")
    assert info.value.message.startswith(f"recipes/x.yaml: packages.runc: {text!r} {fragment}")
    assert "expected [EPOCH:]UPSTREAM[-REVISION]" in info.value.message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.36.0-1.1", "1.36.0"),
        ("1:1.4.7-1+b2", "1.4.7"),
        ("1.6.20~ds1-1+deb12u3", "1.6.20"),
        ("2.1.0+dfsg-1", "2.1.0"),
        ("1.1.5+ds1-1", "1.1.5"),
        ("1.2.3+repack2-1", "1.2.3"),
        ("1.7.0~rc1-1", "1.7.0-rc.1"),
        ("1.7.0~rc.2-1", "1.7.0-rc.2"),
        ("1.7.0~beta-1", "1.7.0-beta"),
        ("1.7.0", "1.7.0"),
    ],
)
def test_upstream_semver(text: str, expected: str) -> None:
    assert str(DEB(text).upstream_semver()) == expected


@pytest.mark.parametrize("text", ["2.6-1", "1.0+git20240101-1", "0.0~git20230101.abc-1", "252-1"])
def test_upstream_semver_failure_names_the_version(text: str) -> None:
    with pytest.raises(VersionError) as info:
        DEB(text).upstream_semver(where="lock: pkgs")
    assert info.value.message.startswith(f"lock: pkgs: {text!r} has no SemVer upstream version")


# --- constraints ---------------------------------------------------------------------------------


def test_constraints_upstream() -> None:
    assert satisfies(U("2.5.0"), ">=2.0.0,<3.0.0")
    assert not satisfies(U("3.0.0"), ">=2.0.0,<3.0.0")
    assert satisfies(U("3.0.0-rc.1"), ">=2.0.0,<3.0.0")  # SemVer precedence only (documented)
    assert satisfies(U("v1.36.3"), "==1.36.3") and satisfies(U("1.36.3+k3s1"), "==v1.36.3")
    assert not satisfies(U("1.7.0"), "!=1.7.0") and satisfies(U("1.7.1"), "!=1.7.0")
    assert satisfies(U("2.0.0"), " >= 2.0 , < 3 ")  # partial bounds, whitespace
    assert not satisfies(U("1.99.0"), ">=2")
    assert satisfies(U("1.36.0"), ">1.35") and not satisfies(U("1.35.0"), ">1.35")
    assert satisfies(U("1.35.9"), "<=1.36") and not satisfies(U("1.36.1"), "<=1.36")
    assert str(parse_constraint(">=2.0, <3", "upstream")) == ">=2.0.0,<3.0.0"


def test_constraints_driver_and_debian() -> None:
    assert satisfies(D("580.95.05"), ">=570") and not satisfies(D("565.57.01"), ">=570")
    assert satisfies(D("570.172.08"), ">=570,<580") and not satisfies(D("580.9.1"), "<580")
    assert satisfies(D("580.95.05"), "==580.95.5")
    assert satisfies(DEB("1.6.20~ds1-1+deb12u3"), ">=1.6.20~ds1-1,<1.6.20")
    assert not satisfies(DEB("1:1.0-1"), "<2.0")  # the epoch wins
    assert satisfies(DEB("1.0"), "==1.0-0")
    c = parse_constraint(">=570", "driver")
    assert c.allows(D("570.0")) and c.kind == "driver"
    with pytest.raises(TypeError, match="cannot meet a driver constraint"):
        c.allows(U("600.0.0"))
    with pytest.raises(TypeError, match="needs a parsed version"):
        satisfies("1.0.0", ">=1.0.0")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("constraint", "fragment"),
    [
        ("=>2.0.0", "'=>2.0.0' has unknown operator '=>'; expected one of == != >= <= > <"),
        ("~>1.2", "unknown operator '~>'"),
        ("^1.2.0", "unknown operator '^'"),
        ("=1.2.0", "unknown operator '='"),
        ("<<1.2.0", "unknown operator '<<'"),
        ("1.2.0", "'1.2.0' has no operator"),
        (">=2.0.0,", "'' is an empty comparator"),
        (">=", "'>=' has no version after the operator"),
        ("==1.36", "'1.36' is a partial bound, allowed only with >=, >, <=, <; == needs a full"),
        ("!=1", "partial bound"),
        (">=1.036", "has a numeric part with a leading zero"),
        (">=1.36.0-1", "looks like a Debian revision"),
    ],
)
def test_constraint_errors(constraint: str, fragment: str) -> None:
    with pytest.raises(VersionError) as info:
        satisfies(U("2.0.0"), constraint, where="compat.yaml: rules[0]")
    msg = info.value.message
    assert msg.startswith(f"compat.yaml: rules[0]: constraint {constraint!r}: "), msg
    assert fragment in msg


def test_constraint_errors_other_kinds() -> None:
    with pytest.raises(
        VersionError, match=r"'580' is a partial bound, .* == needs a full driver version"
    ):
        parse_constraint("==580", "driver")
    with pytest.raises(VersionError, match="is not an NVIDIA driver version"):
        parse_constraint(">=580.95.05-1", "driver")
    with pytest.raises(VersionError, match="has an empty revision"):
        parse_constraint(">=1.0-", "debian")
    with pytest.raises(VersionError, match="is an empty constraint"):
        parse_constraint("  ", "debian")


# --- helpers -------------------------------------------------------------------------------------


def test_compare_and_max() -> None:
    assert compare("1.0.0", "v1.0.0", kind="upstream") == 0
    assert compare("580.95.05", "580.9.1", kind="driver") == 1
    assert compare("1.0~rc1", "1.0", kind="debian") == -1
    assert max_version([U("1.2.0+a"), U("1.2.0+b")]).build == "a"  # first among equals
    assert max_version(["1.36.3", "1.35.9", "1.36.0-rc.1"], "upstream") == U("1.36.3")
    with pytest.raises(ValueError, match="no versions"):
        max_version([], "upstream")


def test_minor_distance() -> None:
    assert minor_distance(U("1.33.5"), U("1.36.3")) == 3
    assert minor_distance(U("1.36.3"), U("1.33.0")) == -3
    assert minor_distance(U("1.36.0-rc.1"), U("1.36.9")) == 0
    assert minor_distance(parse_release_line("1.34"), U("v1.36.3")) == 2
    with pytest.raises(VersionError, match="minor distances are counted within one major"):
        minor_distance(U("1.36.0"), U("2.0.0"))
    with pytest.raises(TypeError):
        minor_distance(D("580.95.05"), U("1.0.0"))  # type: ignore[arg-type]


def test_build_precedence_compares_build_metadata_like_prerelease_identifiers() -> None:
    texts = ["1.2.3", "1.2.3+0", "1.2.3+build", "1.2.3+build.2", "1.2.3+build.10", "1.2.3+k3s1"]
    shuffled = random.Random(7).sample(texts, len(texts))
    ordered = sorted((parse_upstream(t) for t in shuffled), key=lambda v: v.newest_key)
    assert [str(v) for v in ordered] == texts
    assert build_precedence(None) < build_precedence("0") < build_precedence("a")
    # digit runs inside an identifier compare numerically, text runs in ASCII order
    assert build_precedence("k3s9") < build_precedence("k3s10") < build_precedence("k3t1")
    assert build_precedence("k3s") < build_precedence("k3s.0") < build_precedence("k3s0")
    assert parse_upstream("1.2.4").newest_key > parse_upstream("1.2.3+zzz").newest_key
