"""Units to jobs (nvkr.ci.jobs): which units share a matrix, chunks, aggregators, order."""

from __future__ import annotations

import pytest

from nvkr.ci.jobs import Limits, make_jobs
from nvkr.errors import UsageError
from nvkr.fanout import FanOut, Unit


def unit(uid: str, needs: list[str] = (), final: bool = False) -> Unit:  # type: ignore[assignment]
    return Unit(
        id=uid, argv=["nvkr", "build", "r.yaml", uid], needs=list(needs), arch=None, final=final
    )


def fan(*units: Unit, name: str = "r") -> FanOut:
    return FanOut(recipe="r.yaml", name=name, by="action", units=list(units))


def test_units_share_a_matrix_only_when_they_need_and_are_needed_by_the_same():
    jobs = make_jobs(
        [
            fan(
                unit("rootfs-amd64"),
                unit("rootfs-arm64"),
                unit("agent-amd64"),
                unit("node-image-hopper-amd64", ["rootfs-amd64", "agent-amd64"]),
                unit("node-image-blackwell-amd64", ["rootfs-amd64", "agent-amd64"]),
                unit("node-image-hopper-arm64", ["rootfs-arm64"]),
                unit(
                    "set",
                    [
                        "node-image-hopper-amd64",
                        "node-image-blackwell-amd64",
                        "node-image-hopper-arm64",
                    ],
                ),
                unit("final", ["set"], final=True),
            )
        ],
        Limits(matrix=256),
    )
    by_id = {j.id: j for j in jobs}
    assert [j.id for j in jobs] == [
        "rootfs-agent-amd64", "rootfs-arm64", "node-image-amd64", "node-image-hopper-arm64", "set", "final",
    ]  # fmt: skip
    assert [u.id for u in by_id["rootfs-agent-amd64"].units] == ["rootfs-amd64", "agent-amd64"]
    assert by_id["node-image-amd64"].matrix and by_id["node-image-amd64"].needs == [
        "rootfs-agent-amd64"
    ]
    assert by_id["set"].needs == ["node-image-amd64", "node-image-hopper-arm64"]
    assert by_id["final"].kind == "final" and by_id["final"].needs == ["set"]


def test_chunks_and_aggregators_stay_within_the_limits():
    units = [unit(f"v{i}") for i in range(7)]
    jobs = make_jobs(
        [fan(*units, unit("join", [u.id for u in units]), unit("final", ["join"], final=True))],
        Limits(matrix=5, needs=2),
    )
    by_id = {j.id: j for j in jobs}
    sizes = {j.id: len(j.units) for j in jobs if j.kind == "units" and j.id != "join"}
    assert sizes == {"matrix-1": 2, "matrix-2": 2, "matrix-3": 2, "matrix-4": 1}
    for job in jobs:
        assert sum(by_id[n].instances for n in job.needs) <= 2, job
    seen: set[str] = set()
    for job in jobs:  # dependencies first
        assert set(job.needs) <= seen, job.id
        seen.add(job.id)
    assert by_id["join"].needs == ["join-needs-2-1", "join-needs-2-2"]


def test_several_recipes_get_prefixed_ids_and_one_final_job():
    a = fan(
        unit("amd64"), unit("join", ["amd64"]), unit("final", ["join"], final=True), name="hopper"
    )
    b = fan(
        unit("amd64"), unit("join", ["amd64"]), unit("final", ["join"], final=True), name="ampere"
    )
    jobs = make_jobs([a, b], Limits(matrix=256))
    assert [j.id for j in jobs] == [
        "hopper-amd64",
        "hopper-join",
        "ampere-amd64",
        "ampere-join",
        "final",
    ]
    assert len(jobs[-1].units) == 2 and jobs[-1].needs == ["hopper-join", "ampere-join"]
    with pytest.raises(UsageError, match=r"same metadata\.name: hopper"):
        make_jobs([a, a], Limits(matrix=256))
