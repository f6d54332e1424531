"""``nvkr build``: parse the options, open the session (:mod:`nvkr.session`) and call
:func:`nvkr.build.build`, which plans, executes against the store and writes each release set
to ``--out`` with its build record, ``dist/<name>.build-record.json`` (with ``--sign`` also
``.build-record.dsse.json``: :mod:`nvkr.releaseset.record`).

Every event goes to one :class:`~nvkr.monitor.Monitor` (:mod:`nvkr.monitor`): humans get the
live display on a terminal and one line per action on stderr elsewhere; ``--json`` prints one
JSON object per event on stdout (stream version 1: ``actions-planned``, ``action-cached``,
``action-start``, ``action-progress``, ``action-done``, ``action-failed``, ``action-warning``
with ``message`` and ``hint``, ``source-fetch``, ``bytes``; with a remote cache ``cache-hit``,
``cache-miss`` with its ``reason``, ``cache-push`` and ``cache-warning``) and a final ``result``
(``built``: keys a builder ran for; ``cached``: found in the store; ``remote``:
``[{key, name, cache}]`` taken from a cache) or ``error``. A bad ``--push`` reference, signing
key or remote cache setting (:mod:`nvkr.cache.settings`) fails, and ``--cache-to``'s push access
is asked, before anything is built.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from nvkr.cli import App
from nvkr.cli.common import (
    CacheArgs,
    RegistryAccess,
    cache_options,
    fetch_options,
    open_session,
    recipe_argument,
    registry_options,
    variant_option,
)
from nvkr.monitor import monitoring, open_monitor

if TYPE_CHECKING:
    from nvkr.build import BuildOutcome
    from nvkr.monitor import Monitor
    from nvkr.session import Session


@click.command("build")
@recipe_argument
@variant_option
@click.option(
    "--action",
    "action_refs",
    multiple=True,
    metavar="BUILDER/ARTIFACT@VARIANT",
    help="Build only this action of the plan (repeatable; `nvkr plan --json` lists each "
    "action's ref); what it needs must be cached. Writes no release set unless one is selected.",
)
@fetch_options
@click.option(
    "--locked",
    is_flag=True,
    help="Refuse to build when the recipe or any pin drifted from the lockfile.",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=Path("dist"),
    show_default=True,
    help="Where release sets are written.",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=lambda: os.cpu_count() or 2,
    help="Actions run in parallel (default: CPUs).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable events on stdout.")
@click.option(
    "--sign",
    "sign_key",
    metavar="KEY",
    help="Sign each release set with this private key (a PEM file or env://NAME).",
)
@click.option(
    "--secure-boot-key",
    "secure_boot_key",
    metavar="KEY",
    envvar="NVKR_SECURE_BOOT_KEY",
    help="The owner's Secure Boot private key (RSA, a PEM file or env://NAME; env "
    "NVKR_SECURE_BOOT_KEY) that signed-modules and signed-uki artifacts sign with; checked "
    "against their "
    "certificates before anything builds.",
)
@click.option(
    "--push",
    metavar="REGISTRY/REPOSITORY[:TAG]",
    help="Publish each release set there after the build (tag default: the release set name).",
)
@click.option(
    "--with-sources",
    is_flag=True,
    help="With --push: also push each set's source closure (nvkr publish --with-sources).",
)
@click.option(
    "--cached-only",
    is_flag=True,
    help="Run no builder: assemble from the store and the caches, or fail naming what is missing.",
)
@cache_options
@registry_options("With --push, --cache-from, --cache-to")
@click.pass_obj
def command(
    app: App,
    recipe: Path,
    variants: tuple[str, ...],
    action_refs: tuple[str, ...],
    mirrors: tuple[str, ...],
    offline: bool,
    lockfile: Path | None,
    locked: bool,
    out: Path,
    jobs: int,
    as_json: bool,
    sign_key: str | None,
    secure_boot_key: str | None,
    push: str | None,
    with_sources: bool,
    cache: CacheArgs,
    cached_only: bool,
    registry: RegistryAccess,
) -> None:
    """Build RECIPE (default recipes/default.yaml) into release sets under --out."""
    from nvkr.planmemo import BuildMemo, memoized

    def full(monitor: Monitor) -> tuple[Session, bool, BuildOutcome]:
        """The build itself: bad push references, cache settings and unreadable keys fail
        before anything builds."""
        from nvkr.build import BuildOptions, build, prepare_cache

        push_ref = None
        if with_sources and push is None:
            from nvkr.errors import UsageError

            raise UsageError("--with-sources pushes with --push: give --push REGISTRY/REPO")
        if push is not None:
            from nvkr.oci.reference import Reference

            push_ref = Reference.parse(push)
        signing_key = None
        if sign_key is not None:
            from nvkr.sign import load_private_key

            signing_key = load_private_key(sign_key)
        owner_key = None
        if secure_boot_key:
            from nvkr.secureboot.owner import load_owner_key

            owner_key = load_owner_key(secure_boot_key)
        settings = prepare_cache(
            cache.settings(app.config), offline=offline, registry=registry, monitor=monitor
        )
        session = open_session(
            app, recipe, variants, mirrors=mirrors, offline=offline, locked=locked,
            lockfile=lockfile,
        )  # fmt: skip
        options = BuildOptions(
            out=out, jobs=jobs, action_refs=action_refs, locked=locked, sign_key=signing_key,
            secure_boot_key=owner_key,
            push=push_ref, with_sources=with_sources, cache=settings, cached_only=cached_only,
            registry=registry,
        )  # fmt: skip
        return session, settings.enabled, build(session, options, monitor)

    memo = BuildMemo.for_build(
        store_root=app.store_root, config=app.config, debug=app.debug,
        bypass=bool(
            action_refs or sign_key or secure_boot_key or push or cached_only or cache.given
        ),
        options={"recipe": recipe, "variants": variants, "mirrors": mirrors, "offline": offline,
                 "lockfile": lockfile, "locked": locked, "out": out, "jobs": jobs},
    )  # fmt: skip
    with monitoring(open_monitor("build", as_json=as_json)) as monitor:
        # a no-op may be answered from the plan memo (nvkr.planmemo) without planning
        memoized(memo, monitor, click.get_current_context().with_resource, full)
