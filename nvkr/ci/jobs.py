"""From fan-out units to CI jobs, within a platform's limits.

Between :mod:`nvkr.fanout` (units with their needs) and the renderers (:mod:`nvkr.ci.github`,
:mod:`nvkr.ci.gitlab`, :mod:`nvkr.ci.argo`). Units that need the same units and are needed by
the same units are interchangeable for the scheduler, so they share one **matrix** job: no unit
then waits for more than it needs. A matrix larger than the platform allows (GitHub: 256 jobs
per matrix; GitLab: 200 per ``parallel:matrix``) is cut into chunks. A job whose ``needs``
count more jobs than the platform allows (GitLab: 50 by default, counting every instance of a
matrix job) needs **aggregator** jobs instead, each needing at most that many; a matrix is also
cut to at most that many instances, or nothing could need it. The final units of every recipe
become one final job that runs their commands in turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from nvkr.errors import UsageError
from nvkr.fanout import FanOut, Unit, dns_label

Kind = Literal["units", "final", "aggregate"]


@dataclass
class Job:
    """A CI job: ``units`` (several: a matrix; a final job runs them one after another), the
    job ids it ``needs`` and what it is."""

    id: str
    units: list[Unit]
    needs: list[str] = field(default_factory=list)
    kind: Kind = "units"

    @property
    def matrix(self) -> bool:
        return self.kind == "units" and len(self.units) > 1

    @property
    def instances(self) -> int:
        """How many jobs the platform runs for it (what a ``needs`` on it counts)."""
        return len(self.units) if self.matrix else 1


@dataclass(frozen=True)
class Limits:
    """``matrix``: units per matrix job; ``needs``: job instances one job may need (None: no
    limit)."""

    matrix: int
    needs: int | None = None


def _prefixed(fans: list[FanOut]) -> list[list[Unit]]:
    """Each fan-out's units, their ids (and needs) prefixed with the recipe name when there are
    several recipes, so ids stay unique across them."""
    names = [f.name for f in fans]
    if len(set(names)) != len(names):
        raise UsageError(
            "two recipes have the same metadata.name: "
            + ", ".join(sorted({n for n in names if names.count(n) > 1})),
            hint="their units and release sets would collide: give each its own name",
        )
    if len(fans) == 1:
        return [list(fans[0].units)]

    def rename(fan: FanOut, uid: str) -> str:
        return dns_label(f"{fan.name}-{uid}")

    out = []
    for fan in fans:
        out.append(
            [
                Unit(
                    id=rename(fan, u.id),
                    argv=u.argv,
                    needs=[rename(fan, n) for n in u.needs],
                    arch=u.arch,
                    actions=u.actions,
                    variants=u.variants,
                    estimate=u.estimate,
                    final=u.final,
                )
                for u in fan.units
            ]
        )
    return out


def _group_id(units: list[Unit], taken: set[str]) -> str:
    """A matrix job's id: the words its units' ids begin and end with (``node-image-amd64`` for
    ``node-image-hopper-amd64`` and ``node-image-blackwell-amd64``), or for up to three units
    with no first word in common each one's own words (``rootfs-kube-packages-amd64``), else
    ``variants`` or ``matrix``; unique among ``taken``."""
    words = [u.id.split("-") for u in units]
    head: list[str] = []
    for parts in zip(*words, strict=False):
        if len(set(parts)) != 1:
            break
        head.append(parts[0])
    tail: list[str] = []
    for parts in zip(*(w[len(head) :][::-1] for w in words), strict=False):
        if len(set(parts)) != 1:
            break
        tail.insert(0, parts[0])
    if not head and len(units) <= 3:  # a few unrelated units: name each (rootfs-kube-packages)
        head = [p for w in words for p in w[: len(w) - len(tail)]]
    if not head:
        head = ["variants" if all("--variant" in u.argv for u in units) else "matrix"]
    return _fresh(dns_label("-".join([*head, *tail])), taken)


def _fresh(base: str, taken: set[str]) -> str:
    """``base``, or ``base-2``, ``base-3``... whichever is not ``taken``."""
    uid, n = base, 1
    while uid in taken:
        n += 1
        uid = dns_label(f"{base}-{n}")
    return uid


def make_jobs(fans: list[FanOut], limits: Limits) -> list[Job]:
    """The jobs of ``fans`` (one fan-out per recipe), dependencies first, the final job last.

    Raises:
        UsageError: two recipes share a name; ``limits`` below 1.
    """
    if limits.matrix < 1 or (limits.needs is not None and limits.needs < 1):
        raise UsageError("the platform limits must be at least 1")
    per_recipe = _prefixed(fans)
    units = [u for recipe in per_recipe for u in recipe if not u.final]
    finals = [u for recipe in per_recipe for u in recipe if u.final]
    dependents: dict[str, set[str]] = {u.id: set() for u in units}
    for unit in [*units, *finals]:
        for need in unit.needs:
            dependents[need].add(unit.id)
    groups: dict[tuple[tuple[str, ...], tuple[str, ...]], list[Unit]] = {}
    for unit in units:
        sig = (tuple(sorted(unit.needs)), tuple(sorted(dependents[unit.id])))
        groups.setdefault(sig, []).append(unit)
    chunk = limits.matrix if limits.needs is None else min(limits.matrix, limits.needs)
    jobs: list[Job] = []
    job_of: dict[str, list[str]] = {}  # unit id -> the job ids holding it (a matrix's chunks)
    taken = {u.id for u in units} | {"final"}
    for members in groups.values():
        if len(members) == 1:
            jobs.append(Job(members[0].id, members))
            job_of[members[0].id] = [members[0].id]
            continue
        base = _group_id(members, taken - {m.id for m in members})
        taken.add(base)
        parts = [members[i : i + chunk] for i in range(0, len(members), chunk)]
        ids = []
        for n, part in enumerate(parts, 1):
            jid = base if len(parts) == 1 else _fresh(dns_label(f"{base}-{n}"), taken)
            taken.add(jid)
            ids.append(jid)
            jobs.append(Job(jid, part))
        for member in members:
            job_of[member.id] = ids
    for job in jobs:
        job.needs = _job_needs(job.units, job_of)
    final = Job("final", finals, _job_needs(finals, job_of), kind="final")
    jobs.append(final)
    if limits.needs is not None:
        jobs = _aggregate(jobs, limits.needs)
    return jobs


def _job_needs(units: list[Unit], job_of: dict[str, list[str]]) -> list[str]:
    out: list[str] = []
    for unit in units:
        for need in unit.needs:
            for jid in job_of[need]:
                if jid not in out:
                    out.append(jid)
    return out


def _aggregate(jobs: list[Job], cap: int) -> list[Job]:
    """Put aggregator jobs between every job and needs that count more than ``cap`` instances."""
    by_id = {j.id: j for j in jobs}
    out: list[Job] = []
    for job in jobs:
        needs = job.needs
        level = 0
        while sum(by_id[n].instances for n in needs) > cap:
            level += 1
            batches: list[list[str]] = [[]]
            for need in needs:
                size = by_id[need].instances
                if batches[-1] and sum(by_id[n].instances for n in batches[-1]) + size > cap:
                    batches.append([])
                batches[-1].append(need)
            needs = []
            for n, batch in enumerate(batches, 1):
                agg = Job(dns_label(f"{job.id}-needs-{level}-{n}"), [], batch, kind="aggregate")
                by_id[agg.id] = agg
                out.append(agg)
                needs.append(agg.id)
        job.needs = needs
        out.append(job)
    return out
