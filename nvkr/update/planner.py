"""The whole ``nvkr lock --update`` plan (:func:`plan_update`): the pins collected
(:mod:`nvkr.update.pins`), their targets chosen and edits computed (:mod:`nvkr.update.targets`),
the edited recipe loaded from memory and checked; :func:`write_atomically` writes the files once
the caller has locked the result.
"""

from __future__ import annotations

import os
from pathlib import Path

from nvkr.errors import NvkrError, RecipeError, UsageError
from nvkr.fetch.context import FetchContext
from nvkr.recipe.loader import LoadedRecipe, load_recipe
from nvkr.recipe.matrix import Variant, expand
from nvkr.update.edit import Edit
from nvkr.update.hooks import UpdateHook, collect_pins, hook_of, pin_value, selection
from nvkr.update.pins import Change, Pin, UpdatePlan, UpdateRequest
from nvkr.update.targets import Listings, apply_to_files, choose_target


# -- the whole plan ----------------------------------------------------------------------------
def plan_update(
    loaded: LoadedRecipe, variants: list[Variant], ctx: FetchContext, request: UpdateRequest
) -> UpdatePlan:
    """Decide every pin's new version and load the edited recipe from memory (nothing written).

    Args:
        loaded, variants: the recipe as it is and all its variants.
        ctx: fetch context (mirrors) for the upstream listings and checksum files.
    Returns:
        The plan; ``plan.loaded`` is the edited recipe (None when nothing moves).
    Raises:
        UsageError: an unknown SOURCE, ``NAME:PACKAGE`` of a non-apt source, ``--to`` without
            SOURCE or naming a version the upstream does not list, a named source without an
            upstream nvkr can ask; ``--offline``.
        VersionError: a pin that is not a version of its kind (naming FILE:LINE).
        FetchError: an upstream listing or checksum file is unreachable or unreadable; PyPI has
            no wheel matching the pinned one for the new version; no checksum file is published
            for a url source with an inline digest.
        IntegrityError: an apt Release signature fails (exit 3).
        RecipeError: a pin cannot be rewritten in place, or the edited recipe is invalid.
    """
    if ctx.offline:
        raise UsageError("--update asks the upstreams for their versions; it cannot run --offline")
    wanted = selection(request, variants)
    collector = collect_pins(loaded, variants, wanted)
    listings = Listings(ctx, collector, request.pre)
    plan = UpdatePlan(notes=sorted(collector.notes.values()))
    version_edits: list[Edit] = []
    moved: list[tuple[Pin, str]] = []
    pins = sorted(collector.pins.values(), key=lambda p: (str(p.location.file), p.location.line))
    for pin in pins:
        new = choose_target(pin, listings, request)
        if new is None:
            continue
        moved.append((pin, new))
        version_edits.append(Edit(pin.location, pin.what, pin.current, new))
        for hook in _hooks(pin):  # what follows the version in each kind's sources
            version_edits += hook.version_edits(pin, new, listings)
        plan.changes.append(
            Change(
                sources=tuple(dict.fromkeys(u.source for u in pin.uses)),
                package=_package_label(pin),
                old=pin.current,
                new=new,
                where=pin.where,
            )
        )
    if not moved:
        return plan
    files = apply_to_files({}, plan.originals, version_edits)
    first = _load(loaded.path, files)
    moved_by_hook: dict[UpdateHook, set[tuple[str, str]]] = {}
    for pin, _ in moved:
        for u in pin.uses:
            use_hook = hook_of(u.variant.recipe.sources[u.source])
            if use_hook is not None:
                moved_by_hook.setdefault(use_hook, set()).add((u.variant.id, u.source))
    edited = expand(first, None)
    digest_edits = [
        edit for hook, ms in moved_by_hook.items() for edit in hook.moved_edits(ctx, edited, ms)
    ]
    files = apply_to_files(files, plan.originals, digest_edits)
    plan.edits = version_edits + digest_edits
    plan.files = files
    plan.loaded = _load(loaded.path, files) if digest_edits else first
    _check(plan.loaded, moved)
    return plan


def _hooks(pin: Pin) -> list[UpdateHook]:
    """The hooks of the kinds of the sources using ``pin``, once each, in their order."""
    hooks = (hook_of(u.variant.recipe.sources[u.source]) for u in pin.uses)
    return list(dict.fromkeys(h for h in hooks if h is not None))


def _package_label(pin: Pin) -> str | None:
    """How a change names an apt pin: the package, or for a var several packages read (the OS
    layer's kernel version, say) the var and its packages."""
    packages = sorted({u.package for u in pin.uses if u.package})
    if pin.what.startswith("vars.") and len(packages) > 1:
        return f"{pin.what} ({', '.join(packages)})"
    return pin.uses[0].package


def _load(path: Path, files: dict[Path, bytes]) -> LoadedRecipe:
    try:
        return load_recipe(path, overrides=files)
    except NvkrError as e:
        raise RecipeError(
            f"the updated recipe is invalid: {e.message}",
            hint="nothing was written; " + (e.hint or "fix the recipe and run `nvkr lock`"),
        ) from e


def _check(loaded: LoadedRecipe, moved: list[tuple[Pin, str]]) -> None:
    """Every use of a moved pin now reads the new value (no other layer overrides it)."""
    by_id = {v.id: v for v in expand(loaded, None)}
    for pin, new in moved:
        for use in pin.uses:
            variant = by_id.get(use.variant.id)
            got = pin_value(variant, pin, use) if variant is not None else None
            if got != new:
                raise RecipeError(
                    f"{pin.where}: {pin.what} was set to {new!r} but source {use.source!r} of "
                    f"{use.variant.id} reads {got!r} after the edit",
                    hint="another layer or overlay sets it too; update that one by hand",
                )


def write_atomically(files: dict[Path, bytes], originals: dict[Path, bytes]) -> None:
    """Write each file through a temp file in its directory and a rename (mode kept), all temp
    files first, so an error while writing leaves every file as it was.

    Raises:
        RecipeError: a file changed on disk since it was planned (nothing is written).
    """
    for path, before in originals.items():
        if path.read_bytes() != before:
            raise RecipeError(
                f"{path} changed while updating; nothing was written", hint="run the update again"
            )
    from nvkr.atomic import stage, sync_directory

    staged: list[tuple[Path, Path]] = []
    try:
        for path, data in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            mode = path.stat().st_mode & 0o7777 if path.exists() else None
            staged.append((stage(path, data, mode=mode), path))
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, path in staged:
        os.replace(tmp, path)
    for directory in sorted({path.parent for path in files}):
        sync_directory(directory)
