"""Go modules in an SBOM: a binary's build info as SPDX packages with golang purls.

The ``go-binary`` builder stores ``go version -m -json`` of every binary it makes (output role
``buildinfo``, Go's ``runtime/debug.BuildInfo``: ``GoVersion``, ``Path``, ``Main``, ``Deps``,
``Settings``). :func:`link_go_binary` turns it into packages of the document being built: the
main module (the binary is ``GENERATED_FROM`` it), every dependency module and the standard
library of the Go toolchain (the binary is ``STATIC_LINK``-ed to each), with purls per
purl-spec type ``golang``. A binary inside an image gets the same packages, found by its
content digest (:mod:`nvkr.sbom.describe`), so two binaries sharing a module share its package.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from nvkr.errors import BuildError
from nvkr.sbom.spdx import SpdxDocument, hashed_id, package

#: What Go reports as the main module's version when it has none (no VCS stamping, -trimpath).
DEVEL = "(devel)"


def parse_buildinfo(data: bytes, what: str) -> dict[str, Any]:
    """``go version -m -json`` output as a dict, checked for the fields the SBOM needs.

    Returns:
        the parsed BuildInfo: ``GoVersion`` (e.g. ``"go1.27.3"``), ``Main`` (``{"Path",
        "Version"[, "Sum"]}``), ``Deps`` (list of modules, each may have a ``Replace`` module),
        ``Settings`` (``[{"Key", "Value"}]``).
    Raises:
        BuildError: not JSON, or no GoVersion / Main.Path (names ``what``).
    """
    try:
        info = json.loads(data)
    except ValueError as e:
        raise BuildError(f"{what}: the Go build info is not JSON: {e}") from e
    if (
        not isinstance(info, dict)
        or not isinstance(info.get("GoVersion"), str)
        or not isinstance(info.get("Main"), dict)
        or not isinstance(info["Main"].get("Path"), str)
    ):
        raise BuildError(
            f"{what}: the Go build info lacks GoVersion or Main.Path",
            hint="it should be `go version -m -json` output; rebuild the go-binary artifact",
        )
    return info


def golang_purl(path: str, version: str | None) -> str:
    """``pkg:golang/<module path>[@<version>]`` (purl-spec type ``golang``).

    The spec asks for a lower-cased namespace and name; each path segment and the version are
    percent-encoded (``+incompatible`` becomes ``%2Bincompatible``). The SPDX package's ``name``
    keeps the module path's case, which Go treats as significant.
    """
    segments = "/".join(quote(s, safe="") for s in path.lower().split("/") if s)
    purl = f"pkg:golang/{segments}"
    if version and version != DEVEL:
        purl += "@" + quote(version, safe="")
    return purl


def stdlib_purl(go_version: str) -> str:
    """``pkg:golang/stdlib@<version without "go">``: the standard library as SBOM tools name it."""
    return "pkg:golang/stdlib@" + quote(go_version.removeprefix("go"), safe="")


def _h1_sha256(sum_: str) -> str | None:
    """The hex of a go.sum ``h1:`` hash (base64 SHA-256 of the module's file list), or None."""
    if not sum_.startswith("h1:"):
        return None
    try:
        raw = base64.b64decode(sum_[3:], validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw.hex() if len(raw) == 32 else None


def _module(doc: SpdxDocument, mod: Mapping[str, Any], *, main: bool) -> str:
    """The package of one module (its replacement when it has one); returns its SPDXID."""
    used = mod.get("Replace") if isinstance(mod.get("Replace"), Mapping) else None
    target = used or mod
    path, version = str(target.get("Path") or ""), str(target.get("Version") or "")
    notes = []
    if used is not None:
        notes.append(f"replaces {mod.get('Path')} {mod.get('Version') or ''}".rstrip())
    sum_ = str(target.get("Sum") or "")
    h1 = _h1_sha256(sum_)
    if sum_:
        # The go.sum h1 hash is the SHA-256 of the module's file list (dirhash), not of any
        # single file: it is kept as SHA256 (as other SBOM tools do) and spelled out here.
        notes.append(f"go.sum {sum_}")
    pkg = package(
        hashed_id("Package-go", path, version),
        path,
        version=version or None,
        purl=golang_purl(path, version),
        sha256=h1,
        purpose="APPLICATION" if main else "LIBRARY",
        comment="; ".join(notes) or None,
    )
    return doc.add_package(pkg)


def _settings(info: Mapping[str, Any]) -> str:
    pairs = [
        f"{s.get('Key')}={s.get('Value')}"
        for s in info.get("Settings") or []
        if isinstance(s, Mapping) and s.get("Key")
    ]
    return " ".join(pairs)


def link_go_binary(doc: SpdxDocument, binary_id: str, info: Mapping[str, Any]) -> list[str]:
    """Add the modules of ``info`` (from :func:`parse_buildinfo`) and relate ``binary_id`` (a
    file or package) to them: ``GENERATED_FROM`` the main module, ``STATIC_LINK`` to every
    dependency and to the Go standard library (package ``stdlib``, versionInfo = GoVersion).

    Returns:
        the SPDXIDs of the module packages, main module first, then stdlib, then the deps.
        Build settings differ per binary (GOARCH, ...), so they belong on the binary (see
        :func:`build_comment`), never on the module packages that binaries share.
    """
    main = info["Main"]
    main_id = _module(doc, main, main=True)
    go_version = str(info["GoVersion"])
    std = package(
        hashed_id("Package-go", "stdlib", go_version),
        "stdlib",
        version=go_version,
        purl=stdlib_purl(go_version),
        purpose="LIBRARY",
        comment=f"the standard library of the Go toolchain {go_version}",
    )
    std_id = doc.add_package(std)
    doc.relate(binary_id, "GENERATED_FROM", main_id)
    doc.relate(binary_id, "STATIC_LINK", std_id)
    ids = [main_id, std_id]
    for dep in info.get("Deps") or []:
        if isinstance(dep, Mapping) and dep.get("Path"):
            dep_id = _module(doc, dep, main=False)
            doc.relate(binary_id, "STATIC_LINK", dep_id)
            doc.relate(main_id, "DEPENDS_ON", dep_id)
            ids.append(dep_id)
    return ids


def build_comment(info: Mapping[str, Any]) -> str:
    """One line naming the toolchain, the package built and Go's build settings of a binary."""
    text = f"built by {info['GoVersion']} from {info.get('Path') or info['Main']['Path']}"
    settings = _settings(info)
    return f"{text} ({settings})" if settings else text


__all__ = [
    "DEVEL",
    "build_comment",
    "golang_purl",
    "link_go_binary",
    "parse_buildinfo",
    "stdlib_purl",
]
