"""``nvkr ci generate|check``: CI pipelines from the fan-out, and their drift (:mod:`nvkr.ci`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from nvkr.cli import DEFAULT_RECIPE, App


@click.group("ci")
def command() -> None:
    """CI pipelines that fan a recipe's build out across runners."""


def _label(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    from nvkr.errors import UsageError

    labels: dict[str, str] = {}
    for value in values:
        arch, sep, label = value.partition("=")
        if not sep or not arch or not label:
            raise UsageError(
                f"--runner-label {value!r} is not ARCH=LABEL",
                hint="e.g. --runner-label arm64=ubuntu-24.04-arm (ARCH: amd64, arm64 or any)",
            )
        labels[arch] = label
    return labels


@command.command("generate")
@click.argument("platform", type=click.Choice(["github", "gitlab", "argo"]))
@click.argument("recipes", nargs=-1, type=click.Path(path_type=Path))
@click.option("--cache", required=True, metavar="REGISTRY/REPO", help="The main action cache.")
@click.option("--push", metavar="REGISTRY/REPO", help="Where the final job publishes.")
@click.option(
    "--with-sources",
    is_flag=True,
    help="With --push: the final job also pushes each release set's source closure, naming "
    "the CI image as the build environment a rebuild runs in.",
)
@click.option(
    "--image",
    metavar="REGISTRY/REPO[@sha256:...]",
    required=True,
    help="The CI image every job runs, by digest (with --image-from: the repository only).",
)
@click.option(
    "--image-from",
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="Take the image digest from this built release set (of ci/image/nvkr-ci.yaml).",
)
@click.option(
    "--by",
    type=click.Choice(["variant", "action"]),
    default="variant",
    show_default=True,
    help="A job per variant (the matrix only) or per action (needs each recipe's lock).",
)
@click.option(
    "--runner-label",
    "labels",
    multiple=True,
    metavar="ARCH=LABEL",
    callback=_label,
    help="Runner label (GitHub runs-on, GitLab tag, Argo node arch) for amd64, arm64 or any.",
)
@click.option("--trust", default=None, metavar="PUB", help="The main cache's public key file.")
@click.option("--pr-trust", default=None, metavar="PUB", help="The PR caches' public key file.")
@click.option(
    "--max-needs",
    type=click.IntRange(min=1),
    default=50,
    show_default=True,
    help="GitLab: jobs one job may need (the instance's ci_max_needs).",
)
@click.option("--default-branch", default="main", show_default=True)
@click.option("--out", type=click.Path(path_type=Path), help="Write here instead of stdout.")
@click.pass_obj
def generate(app: App, /, out: Path | None, **kwargs: Any) -> None:
    """Write a PLATFORM pipeline that builds RECIPES (default recipes/default.yaml)."""
    from nvkr.ci import DEFAULT_PR_TRUST, DEFAULT_TRUST

    text = generate_text(app, out=out, **kwargs)
    for which, pub in (
        ("main", kwargs["trust"] or DEFAULT_TRUST),
        ("PR", kwargs["pr_trust"] or DEFAULT_PR_TRUST),
    ):
        if not Path(pub).is_file():  # read by the pipeline's jobs from the checkout's root
            click.echo(
                f"warning: the pipeline trusts the {which} cache's key {pub}, which is not in "
                f"this checkout: commit the public half there (`nvkr keys generate --out "
                f"{pub.removesuffix('.pub')}`, the .key as the CI secret), or every job "
                "fails reading it",
                err=True,
            )
    if out is None:
        click.echo(text, nl=False)
        return
    from nvkr.atomic import write_atomic

    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, text.encode())
    click.echo(f"nvkr: wrote {out}", err=True)


def generate_text(
    app: App,
    *,
    platform: str,
    recipes: tuple[Path, ...],
    cache: str,
    push: str | None,
    image: str,
    image_from: Path | None,
    by: str,
    labels: dict[str, str],
    trust: str | None,
    pr_trust: str | None,
    max_needs: int,
    default_branch: str,
    out: Path | None,
    max_matrix: int | None = None,
    with_sources: bool = False,
) -> str:
    """The pipeline text ``nvkr ci generate`` writes for these options.

    Raises:
        UsageError: bad options (:func:`nvkr.ci.check_options`), two recipes with one name.
        LockError: ``by="action"`` and a recipe's lock is missing or drifted.
        RecipeError: a recipe that does not validate (exit 2).
    """
    from nvkr.catalog.evaluation import check_variants
    from nvkr.ci import (
        DEFAULT_PR_TRUST,
        DEFAULT_TRUST,
        CiOptions,
        argo,
        check_options,
        github,
        gitlab,
    )
    from nvkr.ci.jobs import make_jobs
    from nvkr.cli.common import open_session
    from nvkr.cli.units import session_fan_out
    from nvkr.fanout import dns_label
    from nvkr.paths import display_path

    if image_from is not None:
        image = _image_digest(image, image_from)
    options = CiOptions(
        cache=cache,
        image=image,
        push=push,
        with_sources=with_sources,
        by=by,
        labels=labels,
        trust=trust or DEFAULT_TRUST,
        pr_trust=pr_trust or DEFAULT_PR_TRUST,
        max_needs=max_needs,
        max_matrix=max_matrix,
        default_branch=default_branch,
        out=display_path(out) if out is not None else None,
    )
    check_options(options)
    paths = list(recipes) or [Path(DEFAULT_RECIPE)]
    fans = []
    for recipe in paths:
        session = open_session(app, recipe, offline=True)
        check_variants(recipe, session.variants)
        fans.append(session_fan_out(session, recipe, by, None, estimates=False))
    names = [f.name for f in fans]
    renderer: Any = {"github": github, "gitlab": gitlab, "argo": argo}[platform]
    limits = gitlab.limits(options) if platform == "gitlab" else renderer.LIMITS
    if max_matrix is not None and platform != "gitlab":
        from nvkr.ci.jobs import Limits

        limits = Limits(matrix=max_matrix, needs=limits.needs)
    jobs = make_jobs(fans, limits)
    title = names[0] if len(names) == 1 else f"{len(names)} recipes"
    if platform == "argo":
        title = dns_label(f"nvkr-{names[0] if len(names) == 1 else 'recipes'}")
    else:
        title = f"nvkr {title}"
    command = _command(platform, [display_path(p) for p in paths], options)
    text: str = renderer.render(jobs, options, command, title)
    return text


def _command(platform: str, recipes: list[str], options: Any) -> list[str]:
    """The canonical argv of a generate run, as the header records it."""
    from nvkr.ci import DEFAULT_PR_TRUST, DEFAULT_TRUST

    argv = ["nvkr", "ci", "generate", platform, *recipes, "--by", options.by]
    argv += ["--cache", options.cache]
    if options.push:
        argv += ["--push", options.push]
    if options.with_sources:
        argv += ["--with-sources"]
    argv += ["--image", options.image]
    for arch, label in sorted(options.labels.items()):
        argv += ["--runner-label", f"{arch}={label}"]
    if options.trust != DEFAULT_TRUST:
        argv += ["--trust", options.trust]
    if options.pr_trust != DEFAULT_PR_TRUST:
        argv += ["--pr-trust", options.pr_trust]
    if platform == "gitlab" and options.max_needs != 50:
        argv += ["--max-needs", str(options.max_needs)]
    if options.default_branch != "main":
        argv += ["--default-branch", options.default_branch]
    if options.out:
        argv += ["--out", options.out]
    return argv


def _image_digest(image: str, layout: Path) -> str:
    """``image`` (``REGISTRY/REPO``) at the index digest of the one image of the release set in
    ``layout``.

    Raises:
        UsageError: ``image`` already has a digest, or the set has no single image.
    """
    from nvkr.errors import UsageError
    from nvkr.releaseset import read_metadata

    if "@" in image:
        raise UsageError(
            f"--image {image!r} has a digest; with --image-from give the repository only"
        )
    # the metadata lists an image once per variant that holds it: the same index each time
    images = sorted(
        {
            a["index"]["digest"]
            for a in read_metadata(layout)["artifacts"]
            if a.get("kind") == "image"
        }
    )
    if len(images) != 1:
        raise UsageError(
            f"--image-from {layout}: the release set holds {len(images)} images, not one",
            hint="give --image REGISTRY/REPO@sha256:... instead",
        )
    return f"{image}@{images[0]}"


@command.command("check")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--write", is_flag=True, help="Rewrite the files that differ instead of failing.")
@click.pass_obj
def check(app: App, paths: tuple[Path, ...], write: bool) -> None:
    """Exit 1 when a generated pipeline under PATHS (default ci/) differs from what its recorded
    command writes now, printing the diff (--write: rewrite it)."""
    from nvkr.ci.check import check_pipelines

    check_pipelines(
        lambda command: regenerate(app, command), list(paths) or [Path("ci")], write=write
    )


def regenerate(app: App, command: list[str]) -> str:
    """What ``command`` (``["nvkr", "ci", "generate", ...]``, as a pipeline's header records
    it) writes, parsed by this verb's own options and generated in memory.

    Raises:
        UsageError: the command is not a ``generate`` command nvkr parses.
    """
    from nvkr.errors import UsageError

    if command[:3] != ["nvkr", "ci", "generate"]:
        raise UsageError(f"not an `nvkr ci generate` command: {' '.join(command)}")
    try:
        ctx = generate.make_context("generate", command[3:], obj=app)
    except click.UsageError as e:
        raise UsageError(f"the recorded command does not parse: {e.format_message()}") from e
    return generate_text(app, **ctx.params)
