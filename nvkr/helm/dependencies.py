"""Checking a chart's packaged subcharts against ``Chart.yaml`` and ``Chart.lock``.

nvkr never downloads chart dependencies at build time: a chart with dependencies must carry them
in ``charts/`` (``helm dependency build`` run and committed). Before packaging, the builder checks:

- without ``Chart.lock``: what ``helm package`` checks (``action.CheckDependencies``): every
  dependency Chart.yaml declares has a subchart of that chart name in ``charts/``;
- with ``Chart.lock``: the lock lists the same dependencies as Chart.yaml, in order, with the same
  name and repository; its ``digest`` equals Helm's ``resolver.HashReq`` over both lists (the
  check ``helm dependency build`` makes, so a Chart.yaml edited after locking is caught); and for
  every locked dependency ``charts/`` holds a subchart whose own Chart.yaml has the locked name
  and exactly the locked version.

What cannot be checked: that a subchart came from the locked repository (an archive does not
record where it was downloaded from). Subcharts that no dependency names are allowed, as in Helm.
"""

from __future__ import annotations

from nvkr.errors import BuildError
from nvkr.helm.chart import LoadedChart
from nvkr.helm.metadata import hash_req

_HINT = "run `helm dependency update` (or `build`) and commit charts/ and Chart.lock together"


def verify_dependencies(chart: LoadedChart) -> list[str]:
    """Check ``chart``'s subcharts (see the module doc); return one log line per check made.

    Raises:
        BuildError: naming the subchart (or the Chart.lock entry) that differs.
    """
    where = chart.where
    declared = chart.metadata.get("dependencies")
    present = list(chart.subcharts)
    log: list[str] = []
    if chart.lock is None:
        for dep in declared or []:
            if not any(sub.name == dep["name"] for _, sub in present):
                raise BuildError(
                    f"{where}/Chart.yaml: dependency {dep['name']!r} is declared but charts/ "
                    f"holds no chart named {dep['name']!r}",
                    hint=_HINT,
                )
            log.append(f"dependency {dep['name']}: present in charts/ (no Chart.lock)")
        return log

    locked = chart.lock["dependencies"] or []
    declared_list = declared or []
    if len(locked) != len(declared_list):
        raise BuildError(
            f"{where}/Chart.lock: locks {len(locked)} dependencies, Chart.yaml declares "
            f"{len(declared_list)}",
            hint=_HINT,
        )
    for i, (dep, lock) in enumerate(zip(declared_list, locked, strict=True)):
        for key in ("name", "repository"):
            if dep.get(key, "") != lock.get(key, ""):
                raise BuildError(
                    f"{where}/Chart.lock: dependencies[{i}] has {key} {lock.get(key, '')!r}, "
                    f"Chart.yaml has {dep.get(key, '')!r}",
                    hint=_HINT,
                )
    digest = hash_req(declared, chart.lock["dependencies"])
    if digest != chart.lock["digest"]:
        raise BuildError(
            f"{where}/Chart.lock: digest {chart.lock['digest'] or '(none)'} does not match the "
            f"dependencies of Chart.yaml and Chart.lock (Helm's HashReq gives {digest})",
            hint="the lock is out of sync with Chart.yaml; " + _HINT,
        )
    log.append(f"Chart.lock digest {digest} matches Chart.yaml")
    unused = list(present)
    for lock in locked:
        name, version = lock.get("name", ""), lock.get("version", "")
        same_name = [(e, s) for e, s in unused if s.name == name]
        exact = [(e, s) for e, s in same_name if s.version == version]
        if not exact:
            if same_name:
                entry, sub = same_name[0]
                raise BuildError(
                    f"{where}/charts/{entry}: subchart {name!r} is version {sub.version}, "
                    f"Chart.lock pins {version}",
                    hint=_HINT,
                )
            raise BuildError(
                f"{where}/charts: subchart {name!r} {version} (from Chart.lock, repository "
                f"{lock.get('repository', '')!r}) is missing",
                hint=_HINT,
            )
        unused.remove(exact[0])
        log.append(f"subchart {name} {version}: charts/{exact[0][0]} matches Chart.lock")
    for entry, sub in unused:
        log.append(
            f"subchart {sub.name} {sub.version} in charts/{entry} is not a locked dependency"
        )
    return log
