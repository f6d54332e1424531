"""The human lines of the event stream: what the plain renderer prints and the live display
prints above its running actions. One place, so a CI log and a terminal say the same words
(tests and users grep for ``built``, ``from cache``, ``up to date``).

:func:`event_lines` gives the lines of one event (none for events only the live display shows:
a cached action, a progress report); :func:`result_lines` the summary of a verb's result.
"""

from __future__ import annotations

from typing import Any

from nvkr.monitor.events import (
    ActionDone,
    ActionFailed,
    ActionStarted,
    ActionWarning,
    BootImageResult,
    BootStall,
    BootStart,
    CacheEvent,
    Event,
    Note,
    Result,
    SourceFetch,
    Step,
    StoreNotice,
)
from nvkr.quantities import human_size, plural


def event_lines(event: Event) -> list[str]:
    """The lines a human sees for ``event`` (possibly none)."""
    match event:
        case Note(message=message, level=level, hint=hint):
            head = message if level == "info" else f"{level}: {message}"
            return [head] + ([f"  hint: {hint}"] if hint else [])
        case SourceFetch(source=src, where=where):
            return [f"  fetching {src.name} {where or src.name}"]
        case ActionStarted(action=a):
            return [f"  building {a.name} ({a.builder}, {a.key[7:19]})"]
        case ActionDone(action=a, seconds=seconds):
            return [f"  built    {a.name} {seconds:.1f} s"]
        case ActionFailed(action=a):
            return [f"  failed   {a.name}"]
        case ActionWarning(message=message, hint=hint):
            return [f"warning: {message}"] + ([f"  hint: {hint}"] if hint else [])
        case StoreNotice(notice=notice, digest=digest, reason=reason):
            from nvkr.store import corrupt_line, tree_changed_line

            line = corrupt_line if notice == "blob-corrupt" else tree_changed_line
            return [f"warning: {line(digest, reason)}"]
        case CacheEvent():
            return _cache_lines(event)
        case Step(verb="publish" | "copy"):
            return _publish_lines(event)
        case BootStart():
            return [f"boot-test: {boot_line(event)}"]
        case BootStall(retry=retry) if retry:
            return [f"warning: boot-test: {boot_line(event)}"]
        case BootImageResult():
            return _image_result_lines(event)
        case Result():
            return result_lines(event)
    return []


def _cache_lines(event: CacheEvent) -> list[str]:
    f, name = event.fields, event.action.name if event.action is not None else ""
    if event.name == "cache-hit":
        return [f"  from cache {name} {f['cache']}, {human_size(int(f['bytes']))}"]
    if event.name == "cache-miss" and not f.get("absent"):
        return [f"  cache miss: {name}: {f['reason']} ({f['cache']})"]
    if event.name == "cache-push" and f["state"] in ("pushed", "signed"):
        return [f"  {f['state']}   {name} → {f['cache']}:{f['tag'][:15]}…"]
    if event.name == "cache-warning":
        level = "note" if f.get("level") == "note" else "warning"
        prefix = f"{name}: " if event.action is not None and level == "note" else ""
        return [f"  {level}: {prefix}{f['message']}"]
    return []


def boot_line(event: BootStart | BootStall) -> str:
    """A boot test's start or stall as a line for people (the CLI's and the build log's):
    ``booting X (amd64) under kvm, timeout 300 s, console log PATH`` or ``X: no console output
    for 30 s ...; booting it again under tcg``."""
    if isinstance(event, BootStart):
        why = f" ({event.why})" if event.why else ""
        return (
            f"booting {event.shown or f'{event.image} ({event.arch})'} under {event.accel}, "
            f"timeout {event.timeout:.0f} s, console log {event.log or '(none)'}{why}"
        )
    retry = f"; booting it again under {event.retry}" if event.retry else ""
    return f"{event.image}: {event.reason}{retry}"


def _image_result_lines(r: BootImageResult) -> list[str]:
    """``ok IMAGE: LINE (12.3 s, kvm)`` and its labels, or the error as the CLI renders one."""
    if not r.ok:
        return [f"error[{r.code}]: {r.error}"] + ([f"  hint: {r.hint}"] if r.hint else [])
    from nvkr.machine.kvmhang import SKIPPED

    how = str(r.accel)
    if r.fallback.startswith(SKIPPED):
        how += ": KVM stalled an earlier guest on this host"
    elif r.fallback:
        how += " after a KVM stall"
    lines = [f"ok {r.image}: {r.line} ({r.seconds:.1f} s, {how})"]
    if r.labels:
        lines.append("   labels: " + ",".join(f"{k}={v}" for k, v in sorted(r.labels.items())))
    for c in r.checks:
        lines.append(f"   {'ok' if c['ok'] else 'FAILED'} {c['check']}: {c['detail']}")
    if r.secure_boot:
        sb = r.secure_boot
        lockdown = sb["lockdown"]
        moks = ", ".join(m["subject"] for m in sb.get("moks", ())) or "none"
        lines.append(f"   secure boot: enforcing, lockdown {lockdown}, db {sb['db']}, MOKs: "
                     f"{moks} ({r.total_seconds:.1f} s in all)")  # fmt: skip
        modules = sb.get("modules")
        if modules is not None and not modules["checks"]:
            lines.append("   modules: no out-of-tree module in the image")
        for c in (modules or {}).get("checks", ()):
            lines.append(f"   {'ok' if c['ok'] else 'FAILED'} {c['check']}: {c['detail']}")
    if r.tpm:
        log = r.tpm["eventLog"]
        lines.append(f"   tpm: PCRs {','.join(map(str, r.tpm['replayed']))} replay the event "
                     f"log ({len(log['events'])} events, sha256 {log['sha256'][:16]}…, "
                     f"{log.get('file', 'not kept')})")  # fmt: skip
        # the registers a measured boot predicts (nvkr.secureboot.measure), abridged
        shown = [f"{n}={r.tpm['pcrs'][n][:16]}…" for n in ("4", "5", "7", "9", "11", "14")
                 if n in r.tpm["pcrs"]]  # fmt: skip
        lines.append(f"   tpm: PCRs (sha256) {' '.join(shown)}")
        predicted = r.tpm.get("predictions")
        if predicted is not None and predicted["compared"]:
            lines.append(f"   tpm: PCRs {','.join(predicted['pcrs'])} equal the release set's "
                         f"predictions (phase {predicted['phase']})")  # fmt: skip
        elif predicted is not None:
            lines.append(f"   tpm: not compared with the predictions: {predicted['reason']}")
    return lines


def _verb(word: str) -> str:
    """``word`` padded to the column publish's digests start at."""
    return "  " + word + " " * (10 - len(word))


def _publish_lines(event: Step) -> list[str]:
    f, kind = event.fields, event.name
    digest = str(f.get("digest", ""))[:19]
    if kind == "start" and event.verb == "copy":
        return [
            f"nvkr: copying {f['reference']} to {f['destination']} ({f['manifests']} manifests, "
            f"{plural(f['referrers'], 'referrer')}, {plural(f['blobs'], 'blob')} of "
            f"{human_size(f['bytes'])})"
        ]
    if kind == "start":
        return [f"nvkr: publishing {f.get('what') or ''}{f['reference']}"]
    if kind == "blob-uploaded":
        return [f"{_verb('uploaded')}blob {digest} {human_size(f['size'])}"]
    if kind == "blob-mounted":
        return [f"{_verb('mounted')}blob {digest} from {f['source']}"]
    if kind == "manifest-pushed":
        return [f"{_verb('pushed')}manifest {digest} {f.get('artifactType') or f['mediaType']}"]
    if kind == "referrers-tag" and f["written"]:
        return [f"{_verb('referrers')}{f['tag'][:19]} (fallback tag)"]
    if kind == "tagged":
        target = f"{f['target']}:{f['tag']}"
        if f["previous"] != f["digest"]:
            was = f" (was {f['previous'][:19]})" if f["previous"] else ""
            return [f"{_verb('tagged')}{target} → {f['digest']}{was}"]
        return [f"{_verb('tag')}{target} already at {f['digest']}"]
    if kind == "build-record":
        count = f"({plural(len(f['digests']), 'manifest')})"
        there = "" if f.get("pushed", True) else "already there "
        return [f"{_verb('attached')}build record {there}{count}"]
    return []


def result_lines(event: Result) -> list[str]:
    """The summary of a verb's result (``event.fields`` as the JSON result has them)."""
    if event.verb == "publish":
        return _publish_summary(event.fields)
    if event.verb == "copy":
        return [
            f"nvkr: copied {event.fields['source']} to {event.fields['reference']} with "
            f"{plural(event.fields['referrerManifests'], 'referrer')}",
            *_publish_summary(event.fields),
        ]
    if event.verb == "pull":
        return _pull_summary(event.summary)
    if event.verb == "build":
        return _build_summary(event.summary)
    return []


def _build_summary(s: dict[str, Any]) -> list[str]:
    """``s``: ``remote`` (key → cache), ``built`` and ``actions`` (counts), ``targets`` (count
    or None), ``cache`` (the --cache-to repository or None) with ``states`` and ``local`` of
    its push, ``releaseSets`` (name, path, digest each)."""
    lines = []
    remote, built = s["remote"], s["built"]
    if remote:
        caches = ", ".join(sorted(set(remote.values())))
        lines.append(
            f"nvkr: {plural(len(remote), 'action')} from {caches}"
            + ("" if built else "; no builder ran")
        )
    if s.get("cache") is not None:
        states = s["states"]
        there = states.get("present", 0) + states.get("signed", 0)
        lines.append(
            f"nvkr: cache {s['cache']}: {states.get('pushed', 0)} entries pushed, "
            f"{there} there already"
            + (f", {states['conflict']} not reproducible" if states.get("conflict") else "")
            + (f", {s['local']} kept local" if s["local"] else "")
        )
    targets = s["targets"]
    if targets is not None:
        rest = f", {targets - built} cached" if built < targets else ""
        lines.append(f"nvkr: {built} of {plural(targets, 'selected action')} built{rest}")
    elif not built and not remote:
        lines.append(f"nvkr: up to date — {s['actions']} actions, no builder ran")
    elif built:
        rest = "" if built == s["actions"] else "; the rest were cached"
        lines.append(f"nvkr: built {built} of {plural(s['actions'], 'action')}{rest}")
    for item in s["releaseSets"]:
        lines.append(f"  release set {item['name']} → {item['path']} {item['digest']}")
    return lines


def _publish_summary(r: dict[str, Any]) -> list[str]:
    uploaded = f"{r['blobsUploaded']} blobs, {human_size(r['bytesUploaded'])} uploaded"
    if r["bytesUploaded"] == 0:
        uploaded = "0 bytes uploaded"
    lines = [
        f"nvkr: {uploaded}; {r['blobsSkipped']} blobs already there "
        f"({human_size(r['bytesSkipped'])}), {r['blobsMounted']} mounted; "
        f"{r['manifestsPushed']} manifests pushed, {r['manifestsSkipped']} already there "
        f"({r['milliseconds'] / 1000:.1f} s)"
    ]
    if (src := r.get("sources")) is not None:
        lines.append(
            f"nvkr: sources {src['digest']}: {plural(src['sources'], 'source')}, "
            f"{plural(src['blobs'], 'blob')} ({human_size(src['bytes'])}) in "
            f"{plural(src['parts'], 'manifest')}, {human_size(src['bytesUploaded'])} uploaded "
            f"({src['milliseconds'] / 1000:.1f} s)"
        )
        if src["withheld"]:
            lines.append(f"  withheld (publish: false): {', '.join(src['withheld'])}")
    return lines


def _pull_summary(r: dict[str, Any]) -> list[str]:
    checked = "signatures verified" if r["verified"] else "signatures not checked (no --key)"
    reused = ""
    if r["reused_blobs"]:
        reused = (
            f" ({human_size(r['downloaded_bytes'])} downloaded, {r['reused_blobs']} blobs "
            f"of {human_size(r['reused_bytes'])} reused from {r['target_dir']} or the store)"
        )
    lines = [
        f"nvkr: pulled {r['name']} {r['digest']} into {r['target_dir']}: {r['blobs']} blobs, "
        f"{human_size(r['bytes'])}{reused}, {r['signatures']} signatures; digests checked, "
        f"{checked} ({r['seconds']:.1f} s)"
    ]
    if (src := r.get("sources")) is not None:
        lines.append(
            f"nvkr: sources {src['digest']} into {src['target']}: "
            f"{plural(src['sources'], 'source')}, {plural(src['blobs'], 'blob')} "
            f"({human_size(src['bytes'])}, {human_size(src['downloaded_bytes'])} downloaded)"
        )
        variants = "".join(f" --variant {v}" for v in src["variants"])
        lines.append(
            f"  to build it again: nvkr mirror import {src['target']}, then in {src['project']}: "
            f"nvkr build {src['recipe']} --locked --offline{variants}"
        )
        for w in src["withheld"]:
            lines.append(f"  withheld: {w['recipe']}/{w['name']} ({w['kind']}): {w['reason']}")
    return lines
