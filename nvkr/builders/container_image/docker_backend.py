"""The ``docker`` backend of the ``container-image`` builder: a Dockerfile built by a daemon.

The container-image builder delegates here when an artifact says ``backend: docker``. At plan time
the build context (a path or git source, held in the store as a deterministic tar) and the
Dockerfile settings become the action's inputs and params. At run time the context is unpacked
into the work dir and built through whatever Docker-API socket ``DOCKER_HOST`` names (Docker, or
``podman system service``), for ``linux/<arch>``, with no build cache, no network for ``RUN``
steps and ``SOURCE_DATE_EPOCH`` as a build arg. A daemon's image is not reproducible by itself
(creation times, layer mtimes, its own labels, ids in history comments), so the saved image
(docker-archive) is taken apart and written again the way the daemonless backend writes images:
each layer re-tarred deterministically (:func:`nvkr.oci.image.normalise_layer`), a fresh config
(:func:`nvkr.oci.image.image_config`) with every time set to the epoch, and an OCI manifest. The
outputs therefore have the same shape as the daemonless backend's (roles ``layer``, ``config``,
``manifest``; ``platform``, ``manifestDigest`` and ``configDigest`` in the metadata), and the
daemon's copy of the image is removed afterwards.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, cast

import docker
import docker.errors
import requests

from nvkr.builders.api import ActionContext, ActionSpec, PlanRefs, Problem, a_kind, source_kind_of
from nvkr.builders.container_image.artifact import ContainerImageArtifact
from nvkr.builders.container_image.common import execution_params, image_annotations, record_image
from nvkr.builders.container_image.params import DockerParams
from nvkr.errors import BuildError, ToolError
from nvkr.oci import mediatypes as mt
from nvkr.oci.image import (
    Layer,
    image_config,
    image_manifest,
    normalise_layer,
    platform_of,
)
from nvkr.oci.layout import rfc3339
from nvkr.recipe import fieldchecks as fc
from nvkr.recipe.matrix import Variant
from nvkr.repro import extract_tar
from nvkr.run import tail

log = logging.getLogger("nvkr.builders.docker")

NO_SOCKET = (
    "the docker backend needs a Docker-API socket: set DOCKER_HOST "
    "(e.g. unix:///run/podman/podman.sock)"
)
#: Seconds the daemon may stay silent during one build step before the build is abandoned.
BUILD_TIMEOUT = 3600
#: Source kinds whose blob is a tar of a directory tree (a usable build context).
CONTEXT_KINDS = frozenset({"path", "git", "url"})
#: Labels a daemon stamps on every image it builds: they name the daemon's version, not the
#: image, and would make the same Dockerfile differ between machines.
DAEMON_LABELS = frozenset({"io.buildah.version"})
#: Variant arch -> the kernel's machine name, as qemu's binfmt_misc entries are called
#: (``/proc/sys/fs/binfmt_misc/qemu-aarch64``).
QEMU_MACHINE = {"amd64": "x86_64", "arm64": "aarch64"}
#: image-spec config.md execution fields, plus Docker's extensions a Dockerfile can set.
EXECUTION_CONFIG_KEYS = (
    "User",
    "ExposedPorts",
    "Env",
    "Entrypoint",
    "Cmd",
    "Volumes",
    "WorkingDir",
    "Labels",
    "StopSignal",
    "ArgsEscaped",
    "Healthcheck",
    "Shell",
    "OnBuild",
)
#: What a call to the daemon can raise besides a clean API error: a dropped or timed-out stream.
API_ERRORS = (docker.errors.DockerException, requests.RequestException)
_BUILT = re.compile(r"^Successfully built ([0-9a-f]{12,64})\s*$")
# "--> 1f2e3d4c5b6" (podman/buildah) and " ---> 1f2e3d4c5b6a" (Docker's classic builder) name the
# image each Dockerfile step committed.
_STEP_IMAGE = re.compile(r"^\s*-+> ([0-9a-f]{11,64})\s*$")


def check(artifact_name: str, artifact: ContainerImageArtifact, variant: Variant) -> list[Problem]:
    """The build context is a tree: a path or git source, or a url source of a tar."""
    kind = source_kind_of(variant, artifact.context) if artifact.context is not None else None
    if kind is None or kind in CONTEXT_KINDS:
        return []
    return [
        (
            ("artifacts", artifact_name, "context"),
            f"{artifact.context!r} is {a_kind(kind)} source, not a directory tree",
            "a build context is a path or git source (or a url source of a tar)",
        )
    ]


def plan(
    artifact_name: str, artifact: ContainerImageArtifact, variant: Variant, refs: PlanRefs
) -> ActionSpec:
    """The action of one docker-backend image for one variant.

    ``inputs["context"]`` is the ``sha256:<hex>`` of the context source's tar in the store. Params
    hold ``"backend": "docker"``, ``platform`` (:func:`nvkr.oci.image.platform_of`: ``{"os":
    "linux", "architecture": <arch>}``, plus ``"variant": "v8"`` for arm64), the Dockerfile path
    (relative, normalised), build args, the recipe's config settings (entrypoint, cmd, env, user,
    workdir, labels), the layer compression and the manifest annotations (the recipe's, plus
    ``org.opencontainers.image.version`` and ``.revision``/``.source`` from ``version`` and
    ``revisionSource``); the epoch is already part of every action. Not hermetic: the daemon,
    its builder and the base images it resolves are outside the key.

    Raises:
        RecipeReferenceError: the context or revision source does not exist (from ``refs``);
            the context's kind is :func:`check`'s, the Dockerfile path the model's.
    """
    where = f"artifact {artifact_name!r}"
    assert artifact.context is not None  # the model requires one for backend docker
    src = refs.source(artifact.context)
    dockerfile = PurePosixPath(fc.dockerfile_path(artifact.dockerfile))
    params = DockerParams(
        backend="docker",
        platform=platform_of(variant.arch),
        dockerfile=dockerfile.as_posix(),
        buildArgs=dict(sorted(artifact.buildArgs.items())),
        **execution_params(artifact),
        # the daemonless backend's rules (version, revision, source; the recipe's own win)
        annotations=image_annotations(where, artifact, refs, None),
    )
    # The daemon (its builder, and the base images a FROM line resolves by tag) is in no key.
    return ActionSpec(
        params=params.to_json(),
        inputs={"context": src.digest},
        sources={"context": src},
        hermetic=False,
    )


def connect() -> docker.DockerClient:
    """A client for the daemon ``DOCKER_HOST`` names (Docker's default socket when unset).

    Raises:
        ToolError: nothing answers there (one line, no hint: the message is the fix).
    """
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        # version="auto" asks the daemon for its API version, which doubles as the reachability
        # check; a short timeout keeps a dead TCP host from hanging the build.
        client = docker.from_env(version="auto", timeout=30)
        client.ping()
    except docker.errors.DockerException as e:
        log.debug("no Docker API at %s: %s", host, e)
        raise ToolError(f"{NO_SOCKET}; nothing answered at {host}") from None
    client.api.timeout = BUILD_TIMEOUT
    return client


def run(ctx: ActionContext) -> None:
    """Build the Dockerfile, normalise the saved image into the store, record the outputs.

    Outputs: every layer (role ``layer``, ``application/vnd.oci.image.layer.v1.tar+gzip``), the
    config (role ``config``) and the manifest (role ``manifest``); metadata ``platform``,
    ``manifestDigest`` and ``configDigest`` (``sha256:<hex>``).

    Raises:
        ToolError: no daemon answers at ``DOCKER_HOST``.
        BuildError: the build failed (the message holds the tail of the daemon's build log; for a
            foreign platform without qemu emulation it names the platform), or the daemon built
            an image for another platform than asked.
        pydantic.ValidationError: params :func:`plan` does not write.
    """
    p = DockerParams.model_validate(ctx.action.params)
    context = ctx.workdir / "context"
    context.mkdir()
    with open(ctx.input_path("context"), "rb") as f:
        src = ctx.action.sources.get("context")
        extract_tar(f, context, what=f"build context {src.name if src else 'source'!r}")
    if not (context / p.dockerfile).is_file():
        raise BuildError(
            f"{ctx.action.name}: the build context has no {p.dockerfile!r}",
            hint="dockerfile is a path relative to the context source's root",
        )
    client = connect()
    try:
        image_id, step_images = _build(client, ctx, p, context)
        try:
            archive = ctx.workdir / "image.tar"
            with open(archive, "wb") as out:
                for chunk in client.api.get_image(image_id):
                    out.write(chunk)
        except API_ERRORS as e:
            raise BuildError(f"{ctx.action.name}: saving image {image_id} failed: {e}") from e
        finally:
            _remove(client, [image_id, *reversed(step_images)])
    finally:
        client.close()
    _normalise(ctx, p, archive)


def _build(
    client: docker.DockerClient, ctx: ActionContext, p: DockerParams, context: Path
) -> tuple[str, list[str]]:
    """Run the build, streaming the daemon's log into the action's log file.

    Returns:
        the built image's id and the ids of the images its steps committed (oldest first).
    Raises:
        BuildError: the daemon reported an error or no image (see :func:`_build_failed`).
    """
    platform = f"linux/{p.platform['architecture']}"
    image_id: str | None = None
    step_images: list[str] = []
    error: str | None = None
    with open(ctx.log_file, "a", encoding="utf-8") as log_file:
        log_file.write(f"$ docker build --platform {platform} -f {p.dockerfile} {context}\n")
        try:
            events: Iterator[dict[str, Any]] = client.api.build(
                path=str(context),
                dockerfile=p.dockerfile,
                platform=platform,
                buildargs={**p.buildArgs, "SOURCE_DATE_EPOCH": str(ctx.action.epoch)},
                # every step runs again: a cached layer from an earlier build would carry that
                # build's files and times, not necessarily this context's
                nocache=True,
                rm=True,
                forcerm=True,
                pull=False,
                network_mode="none",  # no network: what a step could download is in no action key
                use_config_proxy=False,  # ~/.docker/config.json proxies would become build args
                decode=True,
            )
            for event in events:
                text = event.get("stream")
                if isinstance(text, str):
                    log_file.write(text)
                    for line in text.splitlines():
                        if m := _STEP_IMAGE.match(line):
                            step_images.append(m.group(1))
                        elif m := _BUILT.match(line):
                            image_id = m.group(1)
                aux = event.get("aux")
                if isinstance(aux, dict) and isinstance(aux.get("ID"), str):
                    image_id = aux["ID"]
                if "error" in event:
                    error = str(event.get("error") or "").strip()
                    log_file.write(f"error: {error}\n")
        except API_ERRORS as e:
            error = str(e)
            log_file.write(f"error: {error}\n")
    if error is None and image_id is None:
        error = "the daemon reported no image id"
    if error is not None or image_id is None:
        _remove(client, list(reversed(step_images)))
        raise _build_failed(client, ctx, p.platform["architecture"], platform, error or "")
    return image_id, step_images


def _build_failed(
    client: docker.DockerClient, ctx: ActionContext, arch: str, platform: str, error: str
) -> BuildError:
    """The error for a failed build: the daemon's message and the tail of its log.

    A foreign platform is only a problem for ``RUN`` steps (``COPY`` needs no emulation), so it
    is named only after a failure, when the daemon runs another arch and the machine has no qemu
    emulation registered for this one (or the daemon is remote and cannot be checked).
    """
    log_tail = tail(ctx.log_file.read_text(errors="replace"))
    try:
        daemon_arch = str(client.version().get("Arch", ""))
    except API_ERRORS:
        daemon_arch = ""
    local = (os.environ.get("DOCKER_HOST") or "unix://").startswith("unix://")
    if daemon_arch and daemon_arch != arch and not (local and _emulated(arch)):
        where = "this machine registers" if local else "the daemon's host may have"
        return BuildError(
            f"{ctx.action.name}: docker build for {platform} failed on a linux/{daemon_arch} "
            f"daemon, and {where} no qemu emulation for {platform}: {error}\n{log_tail}",
            hint="RUN steps of a foreign platform need qemu-user-static and binfmt-support "
            f"(update-binfmts --enable qemu-{QEMU_MACHINE.get(arch, arch)}) where the daemon runs",
        )
    return BuildError(f"{ctx.action.name}: docker build for {platform} failed: {error}\n{log_tail}")


def _emulated(arch: str) -> bool:
    """True when binfmt_misc runs ``arch`` binaries through qemu on this machine."""
    entry = Path("/proc/sys/fs/binfmt_misc") / f"qemu-{QEMU_MACHINE.get(arch, arch)}"
    try:
        return entry.read_text().startswith("enabled")
    except OSError:
        return False


def _remove(client: docker.DockerClient, ids: list[str]) -> None:
    """Remove the images this build made (final image first, then its steps' images).

    Tagged or digest-pinned images are someone's base image, never ours: they are kept. Removal is
    best effort: a leftover image costs disk space on the daemon, not correctness.
    """
    for image_id in ids:
        try:
            attrs = client.images.get(image_id).attrs
            if attrs.get("RepoTags") or attrs.get("RepoDigests"):
                continue
            client.images.remove(image_id, force=True)
        except docker.errors.DockerException as e:
            log.debug("could not remove image %s: %s", image_id, e)


def _normalise(ctx: ActionContext, p: DockerParams, archive: Path) -> None:
    """Rewrite the docker-archive ``archive`` into the store as a reproducible OCI image."""
    arch = p.platform["architecture"]
    epoch = ctx.action.epoch
    what = f"{ctx.action.name}: the saved image"
    with tarfile.open(archive) as tar:
        index = json.loads(_member(tar, "manifest.json", what))
        if not isinstance(index, list) or len(index) != 1:
            raise BuildError(f"{what} does not hold exactly one image")
        built = json.loads(_member(tar, index[0]["Config"], what))
        if built.get("architecture") != arch or built.get("os") != "linux":
            raise BuildError(
                f"{ctx.action.name}: the daemon built an image for "
                f"{built.get('os')}/{built.get('architecture')}, not linux/{arch}",
                hint="the daemon ignored the platform: use one that honours it (podman, or "
                "Docker with BuildKit)",
            )
        layers: list[Layer] = []
        for i, name in enumerate(index[0]["Layers"]):
            stream = tar.extractfile(name)  # follows the archive's symlinks to shared layers
            if stream is None:
                raise BuildError(f"{what} lacks layer {i} ({name})")
            with stream:
                layers.append(
                    normalise_layer(
                        cast(BinaryIO, stream), ctx.store, epoch=epoch, compression=p.compression
                    )
                )
    if not layers:
        raise BuildError(
            f"{ctx.action.name}: the Dockerfile produced an image without layers",
            hint="an image needs at least one COPY, ADD or RUN step",
        )
    config = image_config(
        arch=arch,
        diff_ids=[layer.diff_id for layer in layers],
        epoch=epoch,
        entrypoint=p.entrypoint,
        cmd=p.cmd,
        env=p.env,
        user=p.user,
        workdir=p.workdir,
        labels=p.labels,
        history=_history(built.get("history") or []),
        # Only the execution config is carried over: the daemon's rootfs.diff_ids name its own
        # (unnormalised) layers and its history holds creation times.
        base_config={"config": _execution_config(built.get("config") or {})},
    )
    config_info = ctx.store.add_bytes(config)
    config_desc = {
        "mediaType": mt.OCI_IMAGE_CONFIG,
        "digest": config_info.digest,
        "size": config_info.size,
    }
    annotations = {mt.ANN_CREATED: rfc3339(epoch), **p.annotations}
    manifest = image_manifest(config_desc, [layer.descriptor() for layer in layers], annotations)
    manifest_info = ctx.store.add_bytes(manifest)
    manifest_desc = {
        "mediaType": mt.OCI_MANIFEST,
        "digest": manifest_info.digest,
        "size": manifest_info.size,
    }
    record_image(
        ctx, [layer.descriptor() for layer in layers], config_desc, manifest_desc, p.platform
    )


def _member(tar: tarfile.TarFile, name: str, what: str) -> bytes:
    f = tar.extractfile(name) if name in tar.getnames() else None
    if f is None:
        raise BuildError(f"{what} has no {name!r}")
    with f:
        return f.read()


def _execution_config(built: dict[str, Any]) -> dict[str, Any]:
    """The built image's execution config with only the fields image-spec config.md defines
    (plus Docker's Healthcheck, Shell and OnBuild), empty values and daemon labels dropped.

    Docker's legacy container fields (Hostname, AttachStdin, Image, ...) say nothing about the
    image, and podman fills Hostname with a random id.
    """
    out: dict[str, Any] = {}
    for key in EXECUTION_CONFIG_KEYS:
        value = built.get(key)
        if key == "Labels" and isinstance(value, dict):
            value = {k: v for k, v in sorted(value.items()) if k not in DAEMON_LABELS}
        if value not in (None, "", [], {}):
            out[key] = value
    return out


def _history(built: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The build's history entries without their times (:func:`image_config` sets the epoch).

    ``comment`` is dropped: podman writes ``FROM <intermediate image id>`` there, an id that
    changes with every build.
    """
    out: list[dict[str, Any]] = []
    for entry in built:
        item: dict[str, Any] = {
            key: entry[key] for key in ("created_by", "author") if entry.get(key)
        }
        if entry.get("empty_layer"):
            item["empty_layer"] = True
        out.append(item)
    return out
