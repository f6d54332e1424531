"""The cache entry format: one action's result as an OCI artifact, and the checks a reader makes.

An entry lives in a repository of the user's registry (``--cache-to``/``--cache-from``)::

    <repo>:ac-<hex>             the tag, written last (the commit record); <hex> is the action
                                key's hex, or sha256(salt + key) when a salt is set
    manifest (by digest)        application/vnd.oci.image.manifest.v1+json, no annotations:
      artifactType              application/vnd.nvkr.action-result.v1+json
      config                    the same media type: canonical JSON of the deterministic part of
                                the action record, {"key", "builder", "builderVersion", "outputs",
                                "metadata"[, "warnings"]}
      layers                    one per output, in the record's order: exactly its mediaType,
                                digest and size (the local store's blob)
    referrers (subject = the manifest), artifactType application/vnd.dsse.envelope.v1+json:
      signature                 annotation dev.nvkr.attachment=cache-signature, dev.nvkr.keyid;
                                one layer: a DSSE envelope (payloadType SIGNATURE_PAYLOAD) over
                                {"actionKey", "tag", "manifest": {"mediaType", "digest", "size"}}
      run                       annotation dev.nvkr.attachment=cache-run; layers: a DSSE
                                envelope (payloadType ACTION_RUN) over {"actionKey", "name",
                                "manifest", "run", "pushedOn", "nvkrVersion"[, "log"]}, then
                                the build log (text/plain) when the record has one

The config leaves out everything that differs between two honest builds of one key: the record's
``run`` (invocation and times), its ``log``, the metadata keys a builder declares as describing
its run (:func:`run_metadata_keys`, e.g. node-image's ``timings``) and the artifact's name (not
in the action key: two recipes may share an action under different names). So two writers of one
key write byte-identical configs and manifests, and whatever differs travels in the referrers.

This module is pure: it builds bytes and checks documents; :mod:`nvkr.cache.remote` moves them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from nvkr.action import ActionOutput, ActionResult
from nvkr.canonical import DIGEST_RE, canonical_json, sha256_bytes
from nvkr.errors import IntegrityError
from nvkr.jsondoc import JsonValue, load_json_object
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import artifact_manifest, descriptor, manifest_bytes

if TYPE_CHECKING:
    from nvkr.action import Action
    from nvkr.store import Store

#: artifactType of an entry manifest and the media type of its config.
ACTION_RESULT: Final = "application/vnd.nvkr.action-result.v1+json"
#: payloadType of the DSSE envelope that signs an entry.
SIGNATURE_PAYLOAD: Final = "application/vnd.nvkr.action-result.signature.v1+json"
#: payloadType of the run record's DSSE envelope, and the run referrer's artifactType.
ACTION_RUN: Final = "application/vnd.nvkr.action-run.v1+json"
#: DSSE envelope (secure-systems-lab/dsse envelope.md), as nvkr.releaseset.signing uses it.
DSSE_ENVELOPE: Final = "application/vnd.dsse.envelope.v1+json"
#: Media type of the build log layer of a run referrer.
LOG_MEDIA_TYPE: Final = "text/plain"
TAG_PREFIX: Final = "ac-"
#: Annotation saying what a referrer of an entry is, and its two values.
ANN_ATTACHMENT: Final = "dev.nvkr.attachment"
ANN_KEYID: Final = "dev.nvkr.keyid"
CACHE_SIGNATURE: Final = "cache-signature"
CACHE_RUN: Final = "cache-run"
#: Largest config, envelope and run document a reader takes (bytes): an entry is small JSON; a
#: registry that answers more is not serving an nvkr entry.
CONFIG_LIMIT: Final = 8 << 20
ENVELOPE_LIMIT: Final = 1 << 20
_OUTPUT_FIELDS: Final = ("name", "digest", "size", "mediaType", "role")


class EntryProblem(Exception):
    """An entry fails a check: ``str()`` is the one line a reader reports as the miss's reason."""


@dataclass(frozen=True)
class Entry:
    """The bytes of one entry: its ``tag``, ``config`` and ``manifest`` (canonical JSON),
    ``digest`` (``sha256:<hex>`` of the manifest) and ``outputs`` (the result's, in order)."""

    key: str
    tag: str
    config: bytes
    manifest: bytes
    digest: str
    outputs: tuple[ActionOutput, ...]

    @property
    def manifest_descriptor(self) -> dict[str, Any]:
        return descriptor(mt.OCI_MANIFEST, self.manifest)


def entry_tag(key: str, salt: str = "") -> str:
    """``ac-<hex>``: the action key's hex, or with a salt the hex of sha256(salt + key) (UTF-8;
    the key's fixed length keeps the two parts apart)."""
    if not DIGEST_RE.match(key):
        raise ValueError(f"malformed action key {key!r}")
    if not salt:
        return TAG_PREFIX + key.split(":", 1)[1]
    return TAG_PREFIX + hashlib.sha256(salt.encode() + key.encode()).hexdigest()


def run_metadata_keys(builder: str) -> tuple[str, ...]:
    """The metadata keys builder ``builder`` declares as describing its run, not its output
    (its ``run_metadata`` attribute): the executor stores them under the record's ``run``, and
    an entry's config never holds them (records of older nvkr still have them in metadata)."""
    from nvkr.builders.api import get_builder
    from nvkr.errors import UnknownBuilderError

    try:
        return tuple(getattr(get_builder(builder), "run_metadata", ()))
    except UnknownBuilderError:
        return ()


def entry_config(action: Action, record: ActionResult) -> dict[str, JsonValue]:
    """The deterministic part of ``record`` (a local action result of ``action``): see the
    module docstring.

    Raises:
        ValueError: the record is not one of ``action``.
    """
    if record.key != action.key:
        raise ValueError(f"the record of {record.key} is not one of action {action.key}")
    drop = set(run_metadata_keys(action.builder))
    metadata = {k: v for k, v in record.metadata.items() if k not in drop}
    config: dict[str, JsonValue] = {
        "key": action.key,
        "builder": action.builder,
        "builderVersion": action.builder_version,
        "outputs": [o.to_json() for o in record.outputs],
        "metadata": metadata,
    }
    if record.warnings:  # what the builder warned about its output, as recorded
        config["warnings"] = [w.to_json() for w in record.warnings]
    return config


def _layers(outputs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"mediaType": o["mediaType"], "digest": o["digest"], "size": o["size"]} for o in outputs
    ]


def manifest_for(config: bytes, outputs: Sequence[Mapping[str, Any]]) -> bytes:
    """The entry manifest (canonical JSON) for ``config`` bytes and its ``outputs``."""
    doc = artifact_manifest(
        ACTION_RESULT, _layers(outputs), config=descriptor(ACTION_RESULT, config)
    )
    return manifest_bytes(doc)


def make_entry(action: Action, record: ActionResult, salt: str = "") -> Entry:
    """The entry of ``record`` (a local action result of ``action``) under ``salt``.

    Raises:
        ValueError: as :func:`entry_config`; TypeError: the record holds floats.
    """
    config = canonical_json(entry_config(action, record))
    manifest = manifest_for(config, [o.descriptor() for o in record.outputs])
    return Entry(
        key=action.key,
        tag=entry_tag(action.key, salt),
        config=config,
        manifest=manifest,
        digest=sha256_bytes(manifest),
        outputs=record.outputs,
    )


def signature_payload(key: str, tag: str, manifest: Mapping[str, Any]) -> bytes:
    """What an entry's signature signs (canonical JSON): the action key, the tag and the entry
    manifest's descriptor (mediaType, digest, size). The tag carries the salt, so an entry
    signed for one salt's generation is refused under another."""
    return canonical_json(
        {
            "actionKey": key,
            "tag": tag,
            "manifest": {
                "mediaType": manifest["mediaType"],
                "digest": manifest["digest"],
                "size": manifest["size"],
            },
        }
    )


def check_signature_payload(
    payload: bytes, key: str, tag: str, manifest: Mapping[str, Any]
) -> None:
    """Check a verified signature's payload names this action, this tag and this manifest.

    Raises:
        EntryProblem: it names something else (the reason says what).
    """
    doc = load_json_object(payload, "its signature's payload", error=EntryProblem)
    if doc.get("actionKey") != key:
        raise EntryProblem(f"its signature names action key {doc.get('actionKey')}, not {key}")
    if doc.get("tag") != tag:
        raise EntryProblem(f"its signature is for tag {doc.get('tag')}, not {tag} (another salt)")
    want = {k: manifest[k] for k in ("mediaType", "digest", "size")}
    if doc.get("manifest") != want:
        got = doc.get("manifest")
        named = got.get("digest") if isinstance(got, dict) else got
        raise EntryProblem(f"its signature names manifest {named}, not {manifest['digest']}")


def check_manifest(data: bytes, media_type: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Parse an entry manifest as a reader fetched it.

    Returns:
        ``(config descriptor, layer descriptors)``.
    Raises:
        EntryProblem: it is not an entry manifest of this format.
    """
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise EntryProblem("its manifest is not JSON") from e
    if not isinstance(doc, dict) or media_type != mt.OCI_MANIFEST:
        raise EntryProblem(f"its tag names a {media_type or 'document'}, not an OCI manifest")
    if doc.get("artifactType") != ACTION_RESULT:
        raise EntryProblem(f"its manifest has artifactType {doc.get('artifactType')!r}")
    config, layers = doc.get("config"), doc.get("layers")
    if not isinstance(config, dict) or config.get("mediaType") != ACTION_RESULT:
        raise EntryProblem("its manifest's config is not an action result")
    if not isinstance(layers, list) or not all(isinstance(x, dict) for x in layers):
        raise EntryProblem("its manifest's layers are not descriptors")
    for desc in (config, *layers):
        if not isinstance(desc.get("digest"), str) or not DIGEST_RE.match(desc["digest"]):
            raise EntryProblem(f"its manifest holds a malformed digest {desc.get('digest')!r}")
        size = desc.get("size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise EntryProblem(f"its manifest holds a malformed size {size!r}")
    if not config["digest"].startswith("sha256:") or config["size"] > CONFIG_LIMIT:
        raise EntryProblem(f"its config is {config['size']} bytes, more than an entry holds")
    return dict(config), [dict(x) for x in layers]


def check_config(
    data: bytes, action: Action, manifest: bytes, layers: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """Check an entry's config (its bytes as fetched, digest-checked) against the action it is
    looked up for and against the manifest that names it.

    Returns:
        the config document.
    Raises:
        EntryProblem: not canonical JSON of this format, another action's (key, builder,
            builder version), layers other than its outputs, or a manifest in another form.
    """
    doc = _canonical_config(data)
    if doc.get("key") != action.key:
        raise EntryProblem(f"its config is the result of action {doc.get('key')}, not {action.key}")
    for field, want in (("builder", action.builder), ("builderVersion", action.builder_version)):
        if doc.get(field) != want:
            raise EntryProblem(f"its config names {field} {doc.get(field)!r}, not {want!r}")
    outputs = doc.get("outputs")
    if not isinstance(outputs, list) or not isinstance(doc.get("metadata"), dict):
        raise EntryProblem("its config lacks outputs or metadata")
    for i, out in enumerate(outputs):
        _check_output(i, out)
    expected = _layers(outputs) or [mt.empty_descriptor()]
    if [dict(x) for x in layers] != expected:
        raise EntryProblem(
            f"its layers ({len(layers)}) do not match its config's outputs ({len(outputs)})"
        )
    if manifest_for(data, outputs) != manifest:
        raise EntryProblem("its manifest is not in the form nvkr writes (extra fields)")
    return doc


def _canonical_config(data: bytes) -> dict[str, Any]:
    """``data`` as a JSON object, which must be its canonical JSON.

    Raises:
        EntryProblem: not JSON, not an object, or not in canonical form.
    """
    doc = load_json_object(data, "its config", error=EntryProblem)
    try:
        canonical = canonical_json(doc)
    except TypeError as e:
        raise EntryProblem(f"its config is not canonical JSON ({e})") from e
    if canonical != data:
        raise EntryProblem("its config is not canonical JSON")
    return doc


def _check_output(i: int, out: Any) -> None:
    """Raise :class:`EntryProblem` unless ``out`` (the config's ``outputs[i]``) is an output
    record: every field, a sha256 digest, an integer size, string name, media type and role."""
    if not isinstance(out, dict) or any(f not in out for f in _OUTPUT_FIELDS):
        raise EntryProblem(f"its config's outputs[{i}] is not an output")
    if not isinstance(out["digest"], str) or not out["digest"].startswith("sha256:"):
        raise EntryProblem(f"its config's outputs[{i}] has no sha256 digest")
    if not DIGEST_RE.match(out["digest"]) or not isinstance(out["size"], int):
        raise EntryProblem(f"its config's outputs[{i}] has a malformed digest or size")
    if not all(isinstance(out[f], str) for f in ("name", "mediaType", "role")):
        raise EntryProblem(f"its config's outputs[{i}] has a malformed name or type")


def local_record(
    action: Action,
    config: Mapping[str, Any],
    origin: Mapping[str, JsonValue],
    run: Mapping[str, JsonValue] | None = None,
) -> ActionResult:
    """The local action result of ``action`` made from a checked entry ``config``; ``origin``
    (``{"cache", "manifest", "fetchedOn"}``) says where it came from, under ``remote``; ``run``
    is the entry's run record's, when that verifies.

    Raises:
        EntryProblem: the config's warnings are not what nvkr records.
    """
    record: dict[str, JsonValue] = {
        "key": action.key,
        "builder": action.builder,
        "name": action.name,
        "outputs": [dict(o) for o in config["outputs"]],
        "metadata": dict(config["metadata"]),
        "hermetic": True,  # only results whose key covers every tool are ever shared
        "remote": dict(origin),
    }
    if config.get("warnings"):
        record["warnings"] = list(config["warnings"])
    if run is not None:
        record["run"] = dict(run)
    try:
        return ActionResult.from_json(record, "its config")
    except IntegrityError as e:
        raise EntryProblem(e.message) from e


def missing_closure(store: Store, outputs: Sequence[ActionOutput]) -> list[str]:
    """The digests that the OCI manifests and indexes among ``outputs`` reference, directly or
    through other manifests in the store, and that the store lacks.

    An action's consumers may read more than its outputs: an ``image-index`` output references
    the per-arch manifests, configs and layers its dependencies made, which the release set
    assembly and the image's SBOM read. A result taken from a cache without them is usable only
    once its dependencies' results are there too, so the executor looks at those as well.
    """
    own = {o.digest for o in outputs}
    todo = [(o.digest, o.media_type) for o in outputs if o.media_type in mt.MANIFEST_TYPES]
    seen: set[str] = set()
    missing: list[str] = []
    while todo:
        digest, media_type = todo.pop()
        if digest in seen:
            continue
        seen.add(digest)
        if digest not in own and not store.has_blob(digest):
            missing.append(digest)
            continue
        if media_type not in mt.MANIFEST_TYPES:
            continue
        try:
            doc = json.loads(store.read_blob(digest))
        except (OSError, ValueError, IntegrityError):  # gone or corrupt: read_blob deleted it
            missing.append(digest)
            continue
        if not isinstance(doc, dict):
            continue
        children = [*(doc.get("manifests") or []), doc.get("config"), *(doc.get("layers") or [])]
        for child in children:
            if isinstance(child, dict) and isinstance(child.get("digest"), str):
                todo.append((child["digest"], str(child.get("mediaType"))))
    return sorted(missing)
