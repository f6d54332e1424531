"""What ``nvkr plan --fan-out`` and ``nvkr ci generate`` share: a session's recipe cut into
fan-out units (:mod:`nvkr.fanout`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nvkr.cli.common import echo_note
from nvkr.errors import LockError
from nvkr.session import Session, make_session_plan


def session_fan_out(
    session: Session, recipe: Path, by: str, lockfile: Path | None, *, estimates: bool = True
) -> Any:
    """The :class:`~nvkr.fanout.FanOut` of ``session`` (every variant of its recipe).

    ``by="action"`` plans the recipe and needs a lockfile that pins every source (the units
    name actions, and CI builds them ``--locked``); ``by="variant"`` needs the matrix only and
    adds actions and estimates when the lock is complete.

    Raises:
        LockError: ``by="action"`` and the lockfile is missing or drifted (every difference).
        UsageError, RecipeError: as planning does.
    """
    from nvkr.fanout import by_action, by_variant
    from nvkr.paths import display_path
    from nvkr.plan import make_plan

    shown = display_path(recipe)
    lock_arg = display_path(lockfile) if lockfile is not None else None
    drift = session.resolver.drift(session.variants)
    if by == "action":
        if drift:
            raise LockError(
                f"--by action names the plan's actions, which need the lock: {session.lock_path} "
                "does not pin every source:\n  - " + "\n  - ".join(drift),
                hint=f"run `nvkr lock {shown}` first, or fan out --by variant (the matrix only)",
            )
        plan = make_session_plan(session, note=echo_note)
        return by_action(plan, shown, store=session.store if estimates else None, lockfile=lock_arg)
    name = session.loaded.recipe.metadata.name
    if drift or not estimates:
        return by_variant(session.variants, shown, name, lockfile=lock_arg)
    full = make_session_plan(session, note=echo_note)

    def partial(variants: list[Any]) -> Any:
        return make_plan(
            session.loaded,
            variants,
            session.resolver.source_for,
            epoch=full.epoch,
            lockfile=_lockfile_of(full),
            debs_for=session.resolver.locked_debs,
        )

    return by_variant(
        session.variants,
        shown,
        name,
        partial_plan=partial,
        full_plan=full,
        store=session.store,
        lockfile=lock_arg,
    )


def _lockfile_of(plan: Any) -> dict[str, str]:
    """The ``{"path", "digest"}`` a plan's release-set actions name (every set names the same)."""
    action = plan.actions[next(iter(plan.release_sets.values()))]
    lockfile: dict[str, str] = action.params["lockfile"]
    return lockfile
