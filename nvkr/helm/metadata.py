"""Chart metadata the way Helm reads and writes it: ``Chart.yaml``, ``Chart.lock`` and their JSON.

The helm-chart builder reads a chart's ``Chart.yaml`` into Helm's ``Metadata`` struct
(helm/helm ``pkg/chart/v2/metadata.go``), writes it back as ``helm package`` does
(``sigs.k8s.io/yaml.Marshal``: JSON field names, ``omitempty``, keys sorted) and as the OCI config
blob Helm pushes (``json.Marshal(chart.Metadata)``: struct field order, ``omitempty``, HTML
characters escaped, no trailing newline). ``Chart.lock`` is Helm's ``Lock`` struct
(``pkg/chart/v2/dependency.go``), and its ``digest`` is ``resolver.HashReq``: the sha256 of
``json.Marshal([2][]*Dependency{Chart.yaml dependencies, Chart.lock dependencies})``.

Chart.yaml is read strictly for the chart being packaged (unknown fields and non-string scalars in
string fields are errors: ``helm lint --strict`` rejects them too, and Helm would silently turn
``appVersion: 1.0`` into ``"1"``) and leniently, the way Helm's loader does, for packaged subcharts
that come from elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from decimal import Decimal
from typing import Any, cast

import yaml

from nvkr.errors import BuildError
from nvkr.yamlemit import Dumper

API_VERSION_V2 = "v2"
CHART_TYPES = ("", "application", "library")
# Metadata fields in Go struct order (json.Marshal writes them in this order) and their kinds.
METADATA_FIELDS: tuple[tuple[str, str], ...] = (
    ("name", "str"),
    ("home", "str"),
    ("sources", "strlist"),
    ("version", "str"),
    ("description", "str"),
    ("keywords", "strlist"),
    ("maintainers", "maintainers"),
    ("icon", "str"),
    ("apiVersion", "str"),
    ("condition", "str"),
    ("tags", "str"),
    ("appVersion", "str"),
    ("deprecated", "bool"),
    ("annotations", "strmap"),
    ("kubeVersion", "str"),
    ("dependencies", "deps"),
    ("type", "str"),
)
MAINTAINER_FIELDS = (("name", "str"), ("email", "str"), ("url", "str"))
# Dependency fields; name and repository have no omitempty in Helm's struct tags.
DEPENDENCY_FIELDS: tuple[tuple[str, str], ...] = (
    ("name", "str"),
    ("version", "str"),
    ("repository", "str"),
    ("condition", "str"),
    ("tags", "strlist"),
    ("enabled", "bool"),
    ("import-values", "any"),
    ("alias", "str"),
)
_DEPENDENCY_ALWAYS = frozenset({"name", "repository"})
_ALIAS_RE = re.compile(r"^[a-zA-Z0-9_-]+$")  # chart.aliasNameFormat
# Masterminds/semver NewVersion (lenient: optional v, missing minor/patch) — what Helm's loader
# accepts; the builder separately requires strict SemVer 2 for the version it sets.
_MASTERMINDS_SEMVER = re.compile(
    r"^v?([0-9]+)(\.[0-9]+)?(\.[0-9]+)?"
    r"(-([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?"
    r"(\+([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?$"
)
_RFC3339 = re.compile(r"^(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
GO_ZERO_TIME = "0001-01-01T00:00:00Z"
_STR_TAG = "tag:yaml.org,2002:str"


class _NoTimestampLoader(yaml.SafeLoader):
    """YAML 1.1 like Helm's go-yaml, except that timestamps stay strings (Helm converts YAML to
    JSON first, where a timestamp is a string)."""


_NoTimestampLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_yaml(data: bytes, where: str) -> Any:
    """Parse one YAML document as Helm's loader would see it.

    Raises:
        BuildError: a YAML syntax error (names ``where`` and the line).
    """
    try:
        from nvkr.bounds.yamldata import load

        return load(data, where, _NoTimestampLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise BuildError(f"{where}{line}: invalid YAML: {problem}") from None


# -- Go's text forms ------------------------------------------------------------------------------
def go_json(value: Any) -> bytes:
    """``encoding/json.Marshal`` of ``value`` (dicts keep their order; give generic maps sorted).

    Go escapes ``<``, ``>``, ``&``, U+2028 and U+2029 in strings; JSON has those characters only
    inside strings, so replacing them in the text is exact.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(ch, esc)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").encode()


def go_float(f: float) -> str:
    """``strconv.FormatFloat(f, 'g', -1, 64)``: what sigs.k8s.io/yaml turns a YAML float into when
    the target field is a string (``1.0`` becomes ``"1"``)."""
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    if f == 0:
        return "-0" if math.copysign(1, f) < 0 else "0"
    sign, digits, exp = Decimal(repr(f)).normalize().as_tuple()
    assert isinstance(exp, int)
    ds = "".join(map(str, digits))
    point = len(ds) + exp  # position of the decimal point relative to the digit string
    x = point - 1  # decimal exponent of the first digit
    neg = "-" if sign else ""
    # shortest 'g' switches to %e when the exponent is < -4 or >= 6 (strconv/ftoa.go, eprec = 6)
    if x < -4 or x >= 6:
        mant = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
        return f"{neg}{mant}e{'+' if x >= 0 else '-'}{abs(x):02d}"
    if point <= 0:
        return f"{neg}0.{'0' * -point}{ds}"
    if point >= len(ds):
        return f"{neg}{ds}{'0' * (point - len(ds))}"
    return f"{neg}{ds[:point]}.{ds[point:]}"


def go_scalar_str(value: Any) -> str | None:
    """The string Helm's loader makes of a YAML scalar in a string field, or None if not a scalar."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        return value
    return None


def sanitize(text: str) -> str:
    """Helm's ``sanitizeString``: whitespace becomes a space, non-printable characters go."""
    out = []
    for ch in text:
        if ch.isspace() or unicodedata.category(ch) == "Zs":
            out.append(" ")
        elif ch.isprintable():
            out.append(ch)
    return "".join(out)


def go_time(value: Any, where: str) -> str:
    """A ``time.Time`` read from JSON (RFC 3339) and written back (``RFC3339Nano``): trailing zeros
    of the fraction dropped, a zero offset written ``Z``. Missing: Go's zero time.

    Raises:
        BuildError: not an RFC 3339 time.
    """
    if value is None:
        return GO_ZERO_TIME
    m = _RFC3339.match(value) if isinstance(value, str) else None
    if m is None:
        raise BuildError(
            f"{where}: 'generated' is {value!r}, not an RFC 3339 time",
            hint='Helm writes e.g. generated: "2025-01-02T03:04:05.123456789Z"; run helm dependency update',
        )
    date, clock, frac, zone = m.groups()
    frac = (frac or "").rstrip("0")
    frac = "" if frac == "." else frac
    zone = "Z" if zone in ("Z", "z", "+00:00", "-00:00") else zone
    return f"{date}T{clock}{frac}{zone}"


# -- reading --------------------------------------------------------------------------------------
def _field(value: Any, kind: str, where: str, key: str, lenient: bool) -> Any:
    def bad(expected: str, hint: str | None = None) -> BuildError:
        return BuildError(
            f"{where}: field {key!r} is {value!r} ({type(value).__name__}): expected {expected}",
            hint=hint,
        )

    if kind == "str":
        if isinstance(value, str):
            return value
        converted = go_scalar_str(value) if lenient else None
        if converted is None:
            raise bad("a string", f'quote it, e.g. {key}: "{value}"')
        return converted
    if kind == "bool":
        if isinstance(value, bool):
            return value
        raise bad("true or false")
    if kind == "strlist":
        if not isinstance(value, list):
            raise bad("a list of strings")
        return [_field(v, "str", where, f"{key}[{i}]", lenient) for i, v in enumerate(value)]
    if kind == "strmap":
        if not isinstance(value, dict):
            raise bad("a map of strings")
        return {str(k): _field(v, "str", where, f"{key}.{k}", lenient) for k, v in value.items()}
    if kind == "maintainers":
        if not isinstance(value, list):
            raise bad("a list of {name, email, url}")
        return [
            _struct(m, MAINTAINER_FIELDS, where, f"{key}[{i}]", lenient)
            for i, m in enumerate(value)
        ]
    if kind == "deps":
        if not isinstance(value, list):
            raise bad("a list of dependencies")
        return [
            _struct(d, DEPENDENCY_FIELDS, where, f"{key}[{i}]", lenient)
            for i, d in enumerate(value)
        ]
    return value  # "any": import-values, kept as parsed


def _struct(
    doc: Any, fields: tuple[tuple[str, str], ...], where: str, key: str, lenient: bool
) -> dict[str, Any]:
    """A YAML mapping read into a Go struct: known fields in struct order, null meaning unset."""
    if not isinstance(doc, dict):
        raise BuildError(
            f"{where}: {key} is {doc!r}: expected a mapping (empty or null entries are errors)"
        )
    known = dict(fields)
    unknown = sorted(str(k) for k in doc if k not in known)
    if unknown and not lenient:
        raise BuildError(
            f"{where}: {key} has unknown field(s) {', '.join(unknown)}",
            hint="helm lint --strict rejects fields Helm does not know; check the spelling",
        )
    out: dict[str, Any] = {}
    for name, kind in fields:
        if doc.get(name) is not None:
            sub = name if key == "Chart.yaml" else f"{key}.{name}"
            out[name] = _field(doc[name], kind, where, sub, lenient)
    return out


def read_metadata(data: bytes, where: str, *, lenient: bool = False) -> dict[str, Any]:
    """``Chart.yaml`` bytes as Helm's ``Metadata``: known fields in struct order, strings
    sanitized as Helm's ``Validate`` does, then Helm's load-time checks.

    Args:
        where: names the file in errors.
        lenient: convert numbers and booleans in string fields as Helm's loader does and drop
            unknown fields (for subcharts made elsewhere); otherwise both are errors.
    Raises:
        BuildError: invalid YAML, a wrong type, an unknown field, or a check Helm's loader makes
            (apiVersion, name, version, type, dependency aliases) fails.
    """
    doc = load_yaml(data, where)
    if doc is None:
        raise BuildError(
            f"{where}: the file is empty", hint="a chart needs apiVersion, name, version"
        )
    meta = _struct(doc, METADATA_FIELDS, where, "Chart.yaml", lenient)
    _sanitize_metadata(meta)
    _check_dependencies(meta.get("dependencies", []), where)
    if not meta.get("apiVersion"):
        meta["apiVersion"] = "v1"  # Helm 2 charts had none; the builder rejects v1
    if not meta.get("name"):
        raise BuildError(f"{where}: field 'name' is required")
    if meta.get("type", "") not in CHART_TYPES:
        raise BuildError(
            f"{where}: field 'type' is {meta['type']!r}: must be application or library"
        )
    return meta


def _sanitize_metadata(meta: dict[str, Any]) -> None:
    """Sanitize the string fields of ``meta`` in place as Helm's ``Metadata.Validate`` does
    (its maintainers' and dependencies' too)."""
    for key in (
        "name",
        "description",
        "home",
        "icon",
        "condition",
        "tags",
        "appVersion",
        "kubeVersion",
    ):
        if key in meta:
            meta[key] = sanitize(meta[key])
    for key in ("sources", "keywords"):
        if key in meta:
            meta[key] = [sanitize(s) for s in meta[key]]
    for m in meta.get("maintainers", []):
        for key in list(m):
            m[key] = sanitize(m[key])
    for dep in meta.get("dependencies", []):
        for key in ("name", "version", "repository", "condition"):
            if key in dep:
                dep[key] = sanitize(dep[key])
        if "tags" in dep:
            dep["tags"] = [sanitize(t) for t in dep["tags"]]


def _check_dependencies(dependencies: list[dict[str, Any]], where: str) -> None:
    """Helm's load-time checks of the (sanitized) dependencies: aliases of allowed characters,
    no two with the same name or alias.

    Raises:
        BuildError: naming ``where`` and the dependency.
    """
    seen: set[str] = set()
    for dep in dependencies:
        if dep.get("alias") and not _ALIAS_RE.match(dep["alias"]):
            raise BuildError(
                f"{where}: dependency {dep.get('name')!r} has disallowed characters in the alias"
            )
        ref = dep.get("alias") or dep.get("name", "")
        if ref in seen:
            raise BuildError(f"{where}: more than one dependency with name or alias {ref!r}")
        seen.add(ref)


def check_loadable_version(meta: dict[str, Any], where: str) -> None:
    """Helm's loader refuses a chart whose version is missing or not SemVer (Masterminds).

    Raises:
        BuildError: naming ``where`` and the version.
    """
    version = meta.get("version", "")
    if not version or not _MASTERMINDS_SEMVER.match(version):
        raise BuildError(f"{where}: field 'version' is {version!r}: not a SemVer version")


def read_lock(data: bytes, where: str) -> dict[str, Any]:
    """``Chart.lock`` bytes as Helm's ``Lock``: ``{"generated", "digest", "dependencies"}`` in
    struct order; ``generated`` in Go's text form, ``dependencies`` None when absent (Go's nil).

    Raises:
        BuildError: invalid YAML, not a mapping, a wrong type.
    """
    doc = load_yaml(data, where)
    if not isinstance(doc, dict):
        raise BuildError(f"{where}: expected a mapping with generated, digest, dependencies")
    digest = doc.get("digest") or ""
    if not isinstance(digest, str):
        raise BuildError(f"{where}: field 'digest' is {digest!r}: expected a string")
    deps = doc.get("dependencies")
    return {
        "generated": go_time(doc.get("generated"), where),
        "digest": digest,
        "dependencies": None
        if deps is None
        else _field(deps, "deps", where, "dependencies", lenient=True),
    }


# -- writing --------------------------------------------------------------------------------------
def _omitempty(d: dict[str, Any], always: frozenset[str] = frozenset()) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k in always or v not in ("", [], {}, None, False)}


def _dependency_json(dep: dict[str, Any]) -> dict[str, Any]:
    full = {
        name: dep.get(name, "" if name in _DEPENDENCY_ALWAYS else None)
        for name, _ in DEPENDENCY_FIELDS
    }
    return _omitempty(full, _DEPENDENCY_ALWAYS)


def metadata_json_value(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` as ``json.Marshal(chart.Metadata)`` shapes it: struct order, ``omitempty``."""
    out: dict[str, Any] = {}
    for name, kind in METADATA_FIELDS:
        value = meta.get(name)
        if kind == "maintainers" and value:
            value = [_omitempty(m) for m in value]
        elif kind == "deps" and value:
            value = [_dependency_json(d) for d in value]
        elif kind == "strmap" and value:
            value = dict(sorted(value.items()))  # Go marshals maps with sorted keys
        out[name] = value
    return _omitempty(out)


def metadata_json(meta: dict[str, Any]) -> bytes:
    """The Helm OCI config blob: ``json.Marshal(chart.Metadata)`` (helm/helm
    ``pkg/registry/client.go`` Push), no trailing newline."""
    return go_json(metadata_json_value(meta))


class _GoYamlDumper(Dumper):
    """Emits strings as go-yaml v2 does (sigs.k8s.io/yaml's encoder, a libyaml port like
    PyYAML's emitter): double quotes for a string that would read back as another type
    (``"1.0"``, ``"true"``, a timestamp; and, beyond go-yaml, whatever a YAML 1.2 reader would
    take for one, such as ``"1e3"``: :func:`nvkr.yamlemit.plain_is_str`), literal blocks for
    multi-line strings, plain or single quotes otherwise, lines folded at 80 columns."""


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style: str | None = None
    if "\n" in data:
        style = "|"
    elif cast(Any, dumper).resolve(yaml.ScalarNode, data, (True, False)) != _STR_TAG:
        style = '"'
    return dumper.represent_scalar(_STR_TAG, data, style=style)


_GoYamlDumper.add_representer(str, _represent_str)


def _sigs_yaml(value: Any) -> bytes:
    # sigs.k8s.io/yaml.Marshal: JSON first (field names, omitempty), then YAML with sorted keys.
    text = yaml.dump(
        value,
        Dumper=_GoYamlDumper,
        sort_keys=True,
        allow_unicode=True,
        default_flow_style=False,
        width=80,
    )
    return text.encode()


def chart_yaml(meta: dict[str, Any]) -> bytes:
    """``Chart.yaml`` as ``helm package`` writes it (``yaml.Marshal(c.Metadata)``)."""
    return _sigs_yaml(json.loads(metadata_json(meta)))


def lock_yaml(lock: dict[str, Any]) -> bytes:
    """``Chart.lock`` as ``helm package`` writes it (``yaml.Marshal(c.Lock)``)."""
    deps = lock["dependencies"]
    value = {
        "generated": lock["generated"],
        "digest": lock["digest"],
        "dependencies": None if deps is None else [_dependency_json(d) for d in deps],
    }
    return _sigs_yaml(value)


def hash_req(req: list[dict[str, Any]] | None, locked: list[dict[str, Any]] | None) -> str:
    """Helm's ``resolver.HashReq``: ``sha256:<hex>`` of ``json.Marshal([req, lock])``, where
    ``req`` are Chart.yaml's dependencies and ``locked`` Chart.lock's (None is Go's nil: ``null``).
    """

    def deps(d: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        return None if d is None else [_dependency_json(x) for x in d]

    return "sha256:" + hashlib.sha256(go_json([deps(req), deps(locked)])).hexdigest()
