"""Hand-made action records as nvkr reads them: the typed :class:`~nvkr.action.ActionResult` of a
record a test writes as JSON (and may break on purpose before it is read)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nvkr.action import ActionResult


def result(record: Mapping[str, Any], key: str = "sha256:" + "0" * 64) -> ActionResult:
    """``record`` read as the store reads an action record (:meth:`ActionResult.from_json`); one
    without a ``key``, ``builder``, ``name`` or ``metadata`` gets ``key``, ``test``, its
    builder's name and none (a test writes only what the code under test reads)."""
    builder = record.get("builder", "test")
    doc = {"key": key, "builder": builder, "name": builder, "metadata": {}, **record}
    return ActionResult.from_json(doc, "test record")


def results(records: Mapping[str, Mapping[str, Any]]) -> dict[str, ActionResult]:
    """:func:`result` of every record, by action key."""
    return {key: result(record, key) for key, record in records.items()}


def record_of(result: ActionResult | None) -> dict[str, Any] | None:
    """The JSON record of ``result`` (as the store holds it), None for None."""
    return None if result is None else result.to_json()
