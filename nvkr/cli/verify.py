"""``nvkr verify``: check a release set on disk; exit 3 when anything fails.

Runs :func:`nvkr.verify.verify_release_set` (closure, metadata, provenance, signatures with the
``--key`` keys, the build record beside the layout when there is one, ``--policy``), then with ``--rebuild`` :func:`nvkr.verify.rebuild`. Humans get a
summary on stdout; ``--json`` prints the report (:meth:`nvkr.verify.VerifyReport.to_json`)
instead. Any problem raises an :class:`~nvkr.errors.IntegrityError` naming the first one (exit 3)
after the report is printed. ``--attest KEY`` (with ``--rebuild``) signs the result as a SLSA
verification summary attestation (:mod:`nvkr.verify.attest`), kept beside PATH or pushed as a
referrer of REF, before a policy's attestations rule counts them (:mod:`nvkr.verify.gate`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from nvkr.cli import App
from nvkr.cli.common import RegistryAccess, registry_options
from nvkr.quantities import human_size

if TYPE_CHECKING:
    from nvkr.sign import PrivateKey
    from nvkr.verify.attestations import AttestationPlace


@click.command("verify")
@click.argument("path", metavar="PATH|REF", type=click.Path(path_type=Path))
@click.option(
    "--key",
    "keys",
    multiple=True,
    metavar="PUB",
    help="Public key (PEM file or env://VAR), repeatable; signatures are then required.",
)
@click.option(
    "--policy", type=click.Path(path_type=Path), help="Policy YAML (builder ids, SBOMs, ...)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--rebuild", is_flag=True, help="Rebuild from the recipe and lockfile and compare every digest."
)
@click.option(
    "--project",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("."),
    help="With --rebuild: the project checkout the set was built from (the directory holding its recipes/; default: here, or for a REF whose sources are in the registry, theirs).",
)
@click.option(
    "--seed-store",
    type=click.Path(path_type=Path, file_okay=False),
    help="With --rebuild: hard-link this store's blobs into the fresh store (no re-download).",
)
@click.option(
    "--offline",
    is_flag=True,
    help="With --rebuild: no network; every source comes from --seed-store (e.g. a store "
    "`nvkr mirror import` filled), and what is missing is named.",
)
@click.option(
    "--jobs", "-j", type=click.IntRange(min=1), help="With --rebuild: actions in parallel."
)
@click.option(
    "--attest",
    metavar="KEY",
    help="With --rebuild: sign the result (PASSED or FAILED) as a SLSA verification summary "
    "attestation with this private key (PEM file or env://VAR), kept in PATH.vsa/ or pushed "
    "as a referrer of REF.",
)
@click.option(
    "--attest-out",
    type=click.Path(path_type=Path, dir_okay=False),
    help="With --attest: also write the attestation's DSSE envelope to this file.",
)
@registry_options("REF")
@click.pass_obj
def command(
    app: App,
    path: Path,
    keys: tuple[str, ...],
    policy: Path | None,
    as_json: bool,
    rebuild: bool,
    project: Path,
    seed_store: Path | None,
    offline: bool,
    jobs: int | None,
    attest: str | None,
    attest_out: Path | None,
    registry: RegistryAccess,
) -> None:
    """Verify the release set in PATH (a dist/<name> directory) or at REF
    (REGISTRY/REPOSITORY@sha256:<hex>, pulled into a temporary directory first): every blob's
    digest and size, provenance, signatures (--key), a policy, and optionally a bit-for-bit
    rebuild."""
    import tempfile

    from nvkr.errors import UsageError
    from nvkr.sign import load_private_key, load_public_key
    from nvkr.verify.attestations import LayoutAttestations, RegistryAttestations

    if (attest or attest_out) and not rebuild:
        raise UsageError(
            f"{'--attest' if attest else '--attest-out'} needs --rebuild: an attestation states "
            "what a rebuild found",
            hint="add --rebuild (and --attest KEY), or drop it",
        )
    if attest_out and not attest:
        raise UsageError("--attest-out needs --attest KEY", hint="name the key to sign with")
    public_keys = [load_public_key(k) for k in keys]
    signing = (load_private_key(attest), attest_out) if attest else None
    if path.is_dir():
        from nvkr.oci.layout import require_layout

        require_layout(path)
        _verify(
            app, path, public_keys, policy, as_json, rebuild, project, seed_store, jobs, offline,
            signing=signing, place=LayoutAttestations(path),
        )  # fmt: skip
        return
    if "@sha256:" not in str(path):
        raise UsageError(
            f"{path} is neither a directory nor a registry reference by digest",
            hint="give the release set's layout (dist/<name>) or REGISTRY/REPO@sha256:<hex>",
        )
    from nvkr.delivery.pull import pull_release_set
    from nvkr.oci.registry import Reference

    ref = Reference.parse(str(path))
    own_project = click.get_current_context().get_parameter_source("project") not in (
        click.core.ParameterSource.DEFAULT,
        None,
    )
    with tempfile.TemporaryDirectory(prefix="nvkr-verify-") as tmp:
        layout = Path(tmp) / "layout"
        inputs = None
        with registry.client(ref.registry) as client:
            # every blob's digest (and with --key every signature) is checked on the way in
            pulled = pull_release_set(ref, layout, client, keys=public_keys)
            if rebuild and not own_project:  # the set's sources in the registry, if it has them
                from nvkr.verify.registry_sources import fetch_rebuild_inputs

                inputs = fetch_rebuild_inputs(
                    client, ref.repository, pulled.digest, Path(tmp), seed_store
                )
        if inputs is not None:  # no upstream: the closure and --seed-store's blobs only
            project, seed_store, offline = inputs.project, inputs.seed_store, True
        _verify(
            app, layout, public_keys, policy, as_json, rebuild, project, seed_store, jobs, offline,
            sources=inputs.info if inputs is not None else None,
            signing=signing,
            place=RegistryAttestations(registry, ref.registry, ref.repository, str(ref.digest)),
        )  # fmt: skip


def _verify(
    app: App,
    path: Path,
    public_keys: list[Any],
    policy: Path | None,
    as_json: bool,
    rebuild: bool,
    project: Path,
    seed_store: Path | None,
    jobs: int | None,
    offline: bool = False,
    sources: dict[str, Any] | None = None,
    *,
    signing: tuple[PrivateKey, Path | None] | None = None,
    place: AttestationPlace,
) -> None:
    from nvkr.errors import IntegrityError
    from nvkr.verify import load_policy, verify_release_set
    from nvkr.verify import rebuild as rebuild_set
    from nvkr.verify.attest import Attester
    from nvkr.verify.gate import AttestationGate

    rules = load_policy(policy) if policy is not None else None
    gate = AttestationGate.from_policy(rules, str(policy))  # its keys read before a rebuild
    report = verify_release_set(
        path, keys=public_keys, policy=rules, policy_path=str(policy) if policy else None
    )
    if rebuild and report.ok:
        rebuild_set(
            path,
            report,
            project=project,
            seed_store=seed_store,
            config=app.config if app else None,
            jobs=jobs,
            offline=offline,
        )
        if report.rebuild is not None and sources is not None:
            report.rebuild["sources"] = sources
    if signing is not None:  # PASSED or FAILED: either is evidence
        Attester(signing[0], place, signing[1], policy).attest(report, path)
    if gate is not None and report.policy is not None:
        gate.apply(report, place)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        _print(report.to_json())
    if report.problems:
        first = report.problems[0]
        more = len(report.problems) - 1
        raise IntegrityError(
            first.message
            + (f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""),
            hint=first.hint or ("--json lists every problem" if more else None),
        )


def _print(doc: dict[str, Any]) -> None:
    from nvkr.verify.attest import summary_lines

    rs = doc["releaseSet"]
    click.echo(f"release set {rs['name']} {rs['digest']}")
    blobs = doc["blobs"]
    damaged = sum(1 for p in doc["problems"] if p["check"] == "closure")
    if damaged:
        click.echo(f"  closure: FAILED, {damaged} damaged part(s), listed below")
    else:
        click.echo(
            f"  closure: {blobs['count']} blobs ({human_size(blobs['bytes'])}), digests and "
            "sizes checked"
        )
    if rs["signatures"]:
        click.echo(f"  release set index: {_signed(rs['signatures'])}")
    every = {tuple(sorted(v.items())) for a in doc["artifacts"] for v in a["variants"]}
    # the axes whose value differs between the set's variants name a variant here
    axes = [k for k in ("gpu", "kubernetes", "arch") if len({dict(v).get(k) for v in every}) > 1]
    for art in doc["artifacts"]:
        prov = "provenance" if art["provenance"] else "no provenance"
        sboms = f", {len(art['sboms'])} SBOM" if art["sboms"] else ""
        mine = {tuple(sorted(v.items())) for v in art["variants"]}
        where = ""
        if mine and axes:
            labels = ["/".join(v[k] for k in axes) for v in art["variants"]]
            where = "  (all variants)" if mine == every else f"  ({', '.join(labels)})"
        attested = "".join(
            f"; {a['role']} {_signed(a['signatures'])}" for a in art.get("attestations") or []
        )
        click.echo(
            f"  {art['kind']:<13} {art['name']:<24} {art['digest'][:19]}  {prov}{sboms}, "
            f"{_signed(art['signatures'])}{attested}{where}"
        )
    record = doc.get("buildRecord") or {}
    if record.get("checked"):
        signed = ""
        if record.get("signed"):
            verified = sorted(k[:12] for k in record.get("verifiedBy") or [])
            signed = (
                ", signed, verified by key " + ", ".join(verified)
                if verified
                else ", signed (not checked: no --key)"
            )
        span = (
            f"; ran {record['startedOn']} .. {record['finishedOn']}"
            if record.get("startedOn") and record.get("finishedOn")
            else ""
        )
        click.echo(f"  build record {record['path']}: {record['actions']} actions{span}{signed}")
        for w in record.get("warnings") or []:
            click.echo(f"    warning: {w['action']}: {w['message']}")
            if w.get("hint"):
                click.echo(f"      hint: {w['hint']}")
    elif record:
        click.echo(
            f"  build record {record['path']}: "
            + ("not checked" if record.get("present") else "none beside the set, not checked")
        )
    if doc["policy"] is not None:
        policy = doc["policy"]
        click.echo(
            f"  policy {policy['path']}: {', '.join(policy['rules']) or 'no rules'}; "
            f"{policy['violations']} violation(s)"
        )
    if doc["rebuild"] is not None:
        _print_rebuild(doc["rebuild"])
    for line in [*summary_lines(doc), *(f"  warning: {w}" for w in doc["warnings"])]:
        click.echo(line)
    for problem in doc["problems"]:
        click.echo(f"  FAILED ({problem['check']}): {problem['message']}")
    if doc["ok"]:
        rebuilt = (doc["rebuild"] or {}).get("milliseconds", 0)
        click.echo(
            f"verified in {(doc['milliseconds'] + rebuilt) / 1000:.2f} s"
            + (" (the rebuild included)" if rebuilt else "")
        )


def _print_rebuild(rebuilt: dict[str, Any]) -> None:
    same = sum(1 for a in rebuilt["artifacts"] if a["identical"])
    if (src := rebuilt.get("sources")) is not None:
        withheld = ", ".join(f"{w['recipe']}/{w['name']}" for w in src["withheld"])
        click.echo(
            f"  rebuild sources: the registry's source closure {src['closure'][:19]} "
            f"({src['blobs']} blobs, {human_size(src['bytes'])}), offline"
            + (f"; withheld, from --seed-store: {withheld}" if withheld else "")
        )
    signers = sorted(
        {f"{u['signer']} ({str(u['certificate'])[:19]})" for u in rebuilt.get("signatures") or []}
    )
    # the machine images whose signatures were taken from the set (``from``: "IMAGE:PATH")
    images = sorted({str(u["from"]).split(":", 1)[0] for u in rebuilt.get("signatures") or []})
    but = (
        f"; {len(images)} of them, {', '.join(images)}, identical but for signatures by "
        f"{', '.join(signers)}"
        if signers
        else ""
    )
    click.echo(
        f"  rebuild ({rebuilt['milliseconds'] / 1000:.1f} s): {same} of "
        f"{len(rebuilt['artifacts'])} artifacts identical{but}; release set index "
        f"{'identical' if rebuilt['identical'] else 'differs'}"
    )
    for u in rebuilt.get("signatures") or []:
        click.echo(f"    signature not rebuilt (no key), checked: {u['path']} from {u['from']}")


def _signed(signatures: list[dict[str, Any]]) -> str:
    if not signatures:
        return "unsigned"
    verified = sorted({k[:12] for s in signatures for k in s["verifiedBy"]})
    if verified:
        return "signed, verified by key " + ", ".join(verified)
    if any(s["checked"] for s in signatures):
        return "signed, NOT verified"
    return "signed (not checked: no --key)"
