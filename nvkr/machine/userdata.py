"""User-data for ``nvkr boot-test --user-data``: read, rendered as cloud-init will, validated.

:func:`load_user_data` turns a user-data file (and the meta-data the NoCloud seed gives the
guest) into a :class:`UserData`: the cloud-config as cloud-init will read it, and what it asks
for that a boot can check (:class:`FileExpectation` per ``write_files`` entry, whether it has a
``runcmd``). :mod:`nvkr.machine.seed` puts the files on the seed; :mod:`nvkr.machine.cloudinit`
checks the guest's report against the expectations.

What is validated, before any boot:

* the first line: ``#cloud-config``, or cloud-init's ``## template: jinja`` header (Cluster API's
  kubeadm bootstrap provider writes one) followed by a template whose rendering starts with
  ``#cloud-config``. Other user-data (shell scripts, MIME multipart, ``#include``) is refused:
  boot-test checks cloud-config.
* the file is at most ``nvkr.bounds.MAX_FILE_BYTES``, its aliases expand to at most
  ``MAX_YAML_NODES`` values, and a template renders within :mod:`nvkr.bounds.jinja`'s bounds
  (a :class:`~nvkr.errors.LimitError` otherwise, naming the file and the limit).
* a Jinja template is rendered as cloud-init renders it at boot (cloud-init's options:
  ``trim_blocks``, the ``do`` extension) with the instance data the guest will have from the
  seed's meta-data (``ds.meta_data`` with ``-`` also as ``_`` in its keys, ``v1`` and its keys at
  the top level, as cloud-init's instance-data.json holds them). A variable the instance data
  lacks is an error here (cloud-init would write ``CI_MISSING_JINJA_VAR/<name>`` into the file).
* the rendered text is YAML holding a mapping, then cloud-init's own JSON schema check
  (``cloudinit.config.schema.validate_cloudconfig_schema`` with ``strict=True``, run by the
  interpreter of the host's ``cloud-init`` command, which is what ``cloud-init schema
  --config-file`` runs; the library gives each error's key path, which this module maps to the
  line of the file); then a top-level key no module's schema defines (the schema allows any)
  is refused with the closest known key, unless cloud-init reads it elsewhere (``merge_how``,
  ``_log``, ``datasource_list``, ...: :data:`KEYS_OUTSIDE_THE_SCHEMA`).

Every problem is a :class:`~nvkr.errors.UsageError` naming the file, the line and what was
expected (exit 2), with no boot.
"""

from __future__ import annotations

import base64
import difflib
import gzip
import hashlib
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import jinja2
import yaml

from nvkr.bounds import read_limited
from nvkr.bounds.jinja import BoundedSandbox, TemplateLimit, render
from nvkr.bounds.yamldata import compose, construct
from nvkr.errors import LimitError, ToolError, UsageError
from nvkr.run import FIXED_PATH, pinned_env, run

#: cloud-init's template header (cloudinit/handlers/jinja_template.py: ``## template: jinja``).
JINJA_HEADER: Final = re.compile(r"^##\s*template:\s*jinja\s*$", re.IGNORECASE)
CLOUD_CONFIG: Final = "#cloud-config"

#: Run by the interpreter of the host's cloud-init: validate the cloud-config on stdin (JSON)
#: with cloud-init's schema, print {"errors": [[path, message], ...], "keys": [...]}: the keys
#: are the top-level keys the schema defines (the properties of each module's $defs entry its
#: allOf references, and its own; 22.4.2's schema-cloud-config-v1.json has no others).
_SCHEMA_CHECK: Final = """
import json, sys
from cloudinit.config.schema import SchemaValidationError, get_schema, validate_cloudconfig_schema
config, schema = json.load(sys.stdin), get_schema()
keys = set(schema.get("properties", {}))
for part in schema.get("allOf", ()):
    ref = part.get("$ref", "")
    entry = schema.get("$defs", {}).get(ref.rpartition("/")[2], {}) if ref else part
    keys.update(entry.get("properties", {}))
try:
    validate_cloudconfig_schema(config, schema, strict=True, log_details=False)
except SchemaValidationError as e:
    errors = [list(p) for p in e.schema_errors or ()]
else:
    errors = []
print(json.dumps({"errors": errors, "keys": sorted(keys)}))
"""

#: Top-level keys cloud-init 22.4 reads outside its module schemas, which its schema therefore
#: does not name: the mergers (cloudinit/mergers: merge_how, merge_type), logging (log.py,
#: util.py, stages.py: _log is where cloud.cfg.d/05_logging.cfg keeps its anchors), the
#: datasource and system settings cloud.cfg holds (stages.py, cmd/main.py), and the legacy apt
#: keys cc_apt_configure still converts (its mapoldkeys).
KEYS_OUTSIDE_THE_SCHEMA: Final = frozenset(
    {
        "merge_how", "merge_type",
        "_log", "log_cfgs", "logcfg", "log_basic", "output", "def_log_file", "syslog_fix_perms",
        "datasource", "datasource_list", "datasource_pkg_list", "di_report", "system_info",
        "network", "manual_cache_clean", "allow_userdata", "disable_network_activation",
        "apt_sources", "apt_mirror", "apt_mirror_search", "apt_mirror_search_dns", "apt_proxy",
        "apt_http_proxy", "apt_ftp_proxy", "apt_https_proxy", "apt_preserve_sources_list",
        "apt_custom_sources_list", "add_apt_repo_match",
    }
)  # fmt: skip


@dataclass(frozen=True)
class FileExpectation:
    """A file the guest should hold after cloud-init: its ``path``, the ``sha256`` hex of its
    content (None: not knowable here, e.g. ``append`` or a ``source`` URL), ``mode`` (an int)
    and ``owner`` (``user:group``); ``line`` in the user-data (0: given by ``--expect-file``)."""

    path: str
    sha256: str | None
    mode: int | None
    owner: str | None
    line: int = 0


@dataclass(frozen=True)
class UserData:
    """A validated user-data file: ``path``, its ``raw`` bytes, the ``config`` (rendered,
    parsed), ``files`` it writes, whether it has a ``runcmd``, and whether it was a ``jinja``
    template."""

    path: Path
    raw: bytes
    config: dict[str, Any]
    files: list[FileExpectation] = field(default_factory=list)
    runcmd: bool = False
    jinja: bool = False


def image_os_release(disk: Path) -> dict[str, str]:
    """The fields of the image ``disk``'s (QCOW2 or raw) /etc/os-release (``ID``,
    ``VERSION_CODENAME``, ...: what cloud-init's ``v1.distro`` and ``v1.distro_release`` come
    from in the guest), quotes removed; empty when it has none. Read without a mount
    (:func:`nvkr.disk.imageread.open_root_fs`).

    Raises:
        DiskError, ToolError, UsageError: as :func:`~nvkr.disk.imageread.open_root_fs`.
    """
    from nvkr.disk.imageread import open_root_fs

    with open_root_fs(disk) as fs:
        entry = fs.lookup(b"/etc/os-release", follow=True)
        text = fs.read(entry).decode(errors="replace") if entry is not None else ""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.startswith("#"):
            fields[key.strip()] = value.strip().strip("\"'")
    return fields


def instance_data(
    meta: dict[str, Any], arch: str = "amd64", os_release: dict[str, str] | None = None
) -> dict[str, Any]:
    """The variables a Jinja user-data sees in a guest booted from a NoCloud seed with meta-data
    ``meta`` (cloud-init's instance-data.json, the keys a template uses); ``os_release`` is the
    image's (:func:`image_os_release`): ``distro`` and ``distro_release`` are None without it."""
    release = os_release or {}
    v1 = {
        "instance_id": meta.get("instance-id"),
        "local_hostname": meta.get("local-hostname"),
        "cloud_name": "nocloud",
        "platform": "nocloud",
        "distro": release.get("ID"),
        "distro_release": release.get("VERSION_CODENAME"),
        "machine": {"amd64": "x86_64", "arm64": "aarch64"}.get(arch, arch),
        "region": None,
        "availability_zone": None,
    }
    return {**v1, "v1": v1, "ds": {"meta_data": _aliased(meta), "_doc": "nvkr boot-test seed"}}


def _aliased(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` with every key also under its ``-`` -> ``_`` name, as cloud-init offers it."""
    return {**meta, **{k.replace("-", "_"): v for k, v in meta.items()}}


def load_user_data(
    path: Path, meta: dict[str, Any], *, arch: str = "amd64", image: Path | None = None
) -> UserData:
    """Read and validate ``path`` as the guest will see it with meta-data ``meta``: a Jinja
    template is rendered with the variables the guest's cloud-init gives it, the OS release
    read from ``image`` (only then, and only when given).

    Raises:
        UsageError: the file is missing or unreadable, not cloud-config, a template that does
            not render, not YAML, not a mapping, or fails cloud-init's schema (each with the
            file, the line and what was expected).
        ToolError: the host has no cloud-init (Debian package cloud-init) for the schema check.
        DiskError: a Jinja template's ``image`` has no readable root file system.
    """
    try:
        raw = read_limited(path, "user-data")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such user-data file") from None
    except OSError as e:
        raise UsageError(f"{path}: cannot read the user-data: {e.strerror}") from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{path}: the user-data is not UTF-8 text (byte {e.start})") from e
    first, _, rest = text.partition("\n")
    jinja = bool(JINJA_HEADER.match(first.rstrip("\r")))
    offset = 0  # lines before the text the YAML is parsed from
    if jinja:
        # the image is read only for a template that asks what it boots
        release = image_os_release(image) if image is not None and _reads_os(rest) else None
        text, offset = _render(path, rest, instance_data(meta, arch, release)), 1
        first = text.partition("\n")[0]
    if first.rstrip() != CLOUD_CONFIG:
        what = repr(CLOUD_CONFIG) if jinja else f"{CLOUD_CONFIG!r} or '## template: jinja'"
        where = "after the '## template: jinja' line" if jinja else "as its first line"
        raise UsageError(
            f"{path}:{offset + 1}: expected {what} {where}, found {first[:60]!r}",
            hint="boot-test checks cloud-config user-data (what Cluster API and Metal3 write); "
            "put the commands of a shell script in runcmd",
        )
    try:
        root = compose(text, path)
        config = construct(root)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1 + offset}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise UsageError(f"{path}{line}: the user-data is not valid YAML: {problem}") from e
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise UsageError(
            f"{path}:{offset + 2}: expected a mapping of cloud-config keys, found "
            f"{type(config).__name__}"
        )
    lines = _key_lines(root, offset)
    _schema_check(path, config, lines)
    return UserData(
        path=path,
        raw=raw,
        config=config,
        files=_write_files(path, config, lines),
        runcmd=bool(config.get("runcmd")),
        jinja=jinja,
    )


#: the instance data that comes from the image's /etc/os-release
_OS_KEYS: Final = frozenset({"distro", "distro_release"})


def _reads_os(template: str) -> bool:
    """Whether ``template`` may read :data:`_OS_KEYS` (``distro_release``, ``v1.distro``,
    ``v1["distro"]``, or ``v1`` as a whole); False for one that does not parse (its render
    reports that)."""
    try:
        tree = jinja2.Environment(extensions=["jinja2.ext.do"]).parse(template)
    except jinja2.TemplateSyntaxError:
        return False

    def walk(node: jinja2.nodes.Node) -> bool:
        if isinstance(node, jinja2.nodes.Name):
            return node.name in _OS_KEYS or node.name == "v1"  # v1 whole: it may read them
        if isinstance(node, (jinja2.nodes.Getattr, jinja2.nodes.Getitem)):
            base = node.node
            if isinstance(base, jinja2.nodes.Name) and base.name == "v1":
                if isinstance(node, jinja2.nodes.Getattr):
                    return node.attr in _OS_KEYS
                key = node.arg
                if isinstance(key, jinja2.nodes.Const) and isinstance(key.value, str):
                    return key.value in _OS_KEYS
                return True  # a key known only when rendering
        return any(walk(child) for child in node.iter_child_nodes())

    return walk(tree)


def _render(path: Path, template: str, data: dict[str, Any]) -> str:
    """``template`` rendered as cloud-init renders a ``## template: jinja`` user-data."""
    env = BoundedSandbox(
        undefined=jinja2.StrictUndefined, trim_blocks=True, extensions=["jinja2.ext.do"],
        keep_trailing_newline=True, autoescape=False,
    )  # fmt: skip
    try:
        return render(env.from_string(template), data)
    except TemplateLimit as e:
        raise LimitError(
            f"{path}: Jinja template: {e}",
            hint="a user-data template fills in a few values; it makes nothing this large",
        ) from None
    except jinja2.TemplateSyntaxError as e:
        raise UsageError(f"{path}:{(e.lineno or 0) + 1}: Jinja template error: {e.message}") from e
    except jinja2.UndefinedError as e:
        raise UsageError(
            f"{path}: Jinja template: {e.message}; the guest's instance data holds "
            f"{', '.join(sorted(k for k in data if k != 'v1'))} and v1.* (from the meta-data)",
            hint="give the value in --meta-data (a YAML mapping: instance-id, local-hostname, ...)",
        ) from e
    except jinja2.TemplateError as e:
        raise UsageError(f"{path}: Jinja template error: {e}") from None


def _key_lines(root: yaml.Node | None, offset: int) -> dict[str, int]:
    """Line (1-based, in the file) of each key path cloud-init's schema names
    (``write_files.0.path``)."""
    out: dict[str, int] = {}

    def walk(node: yaml.Node, prefix: str) -> None:
        out.setdefault(prefix, node.start_mark.line + 1 + offset)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = f"{prefix}.{key.value}" if prefix else str(key.value)
                out[name] = key.start_mark.line + 1 + offset
                walk(value, name)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, f"{prefix}.{i}" if prefix else str(i))

    if root is not None:
        walk(root, "")
    return out


def _line_of(lines: dict[str, int], key: str) -> int:
    """The line of ``key``, else of its nearest parent that has one."""
    while key and key not in lines:
        key = key.rpartition(".")[0]
    return lines.get(key, 1)


def _cloud_init_python() -> str:
    """The interpreter of the host's ``cloud-init`` command (its ``#!`` line).

    Raises:
        ToolError: cloud-init is not installed.
    """
    found = shutil.which("cloud-init", path=FIXED_PATH)
    if found is None:
        raise ToolError(
            "cloud-init is not installed: boot-test validates user-data with its schema",
            hint="apt-get install --no-install-recommends cloud-init (as ./install.sh does)",
        )
    first = Path(found).read_bytes().split(b"\n", 1)[0].decode(errors="replace")
    return first[2:].strip().split()[0] if first.startswith("#!") else "/usr/bin/python3"


def _schema_check(path: Path, config: dict[str, Any], lines: dict[str, int]) -> None:
    """cloud-init's schema check of ``config``; the first errors with their lines."""
    try:
        payload = json.dumps(config, default=str).encode()
    except (TypeError, ValueError) as e:  # keys YAML allows and JSON does not
        raise UsageError(f"{path}: the cloud-config has a key JSON cannot hold: {e}") from e
    proc = run(
        [_cloud_init_python(), "-I", "-c", _SCHEMA_CHECK], input=payload, env=pinned_env(),
        check=False,
    )  # fmt: skip
    try:
        result = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        errors, known = result["errors"], set(result["keys"])
    except (ValueError, IndexError, KeyError) as e:
        raise ToolError(
            "cloud-init's schema check printed no result: "
            + (proc.stderr or proc.stdout).decode(errors="replace").strip()[-400:],
            hint="a broken cloud-init installation: apt-get install --reinstall cloud-init",
        ) from e
    if errors:
        problems = sorted((_line_of(lines, p), p, m) for p, m in errors)
        text = "; ".join(f"line {ln}: {p}: {m}" for ln, p, m in problems[:5])
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise UsageError(
            f"{path}:{problems[0][0]}: the cloud-config fails cloud-init's schema: {text}{more}",
            hint="cloud-init's module reference lists each key and its type "
            "(`cloud-init schema --docs all`)",
        )
    _unknown_keys(path, config, lines, known)


def _unknown_keys(
    path: Path, config: dict[str, Any], lines: dict[str, int], known: set[str]
) -> None:
    """Refuse a top-level key no module's schema defines (``known``) and cloud-init does not
    read elsewhere (:data:`KEYS_OUTSIDE_THE_SCHEMA`): 22.4's schema allows additional top-level
    keys, so a misspelt ``write_file:`` would boot and be ignored."""
    unknown = sorted(
        (_line_of(lines, str(k)), str(k))
        for k in config
        if str(k) not in known and str(k) not in KEYS_OUTSIDE_THE_SCHEMA
    )
    if not unknown:
        return
    line, key = unknown[0]
    close = difflib.get_close_matches(key, sorted(known | KEYS_OUTSIDE_THE_SCHEMA), n=1)
    guess = f": did you mean {close[0]!r}?" if close else ""
    rest = [k for _, k in unknown[1:]]
    more = f" (and {len(rest)} more: {', '.join(rest)})" if rest else ""
    raise UsageError(
        f"{path}:{line}: top-level key {key!r} is defined by no cloud-init module's "
        f"schema{guess}{more}",
        hint="cloud-init would ignore it; its module reference lists each key "
        "(`cloud-init schema --docs all`)",
    )


def _content(entry: dict[str, Any]) -> bytes | None:
    """A ``write_files`` entry's bytes as cloud-init writes them (cc_write_files'
    ``extract_contents``); None when unknowable here (a ``source`` URL)."""
    if "source" in entry and "content" not in entry:
        return None
    content = entry.get("content", "")
    data = content.encode() if isinstance(content, str) else bytes(content or b"")
    encoding = str(entry.get("encoding", "text")).lower().strip()
    if encoding in ("gz", "gzip"):
        return gzip.decompress(data)
    if encoding in ("gz+base64", "gzip+base64", "gz+b64", "gzip+b64"):
        return gzip.decompress(base64.b64decode(data))
    if encoding in ("b64", "base64"):
        return base64.b64decode(data)
    return data


def _write_files(
    path: Path, config: dict[str, Any], lines: dict[str, int]
) -> list[FileExpectation]:
    """What each ``write_files`` entry leaves (cloud-init's defaults: mode 0644, root:root)."""
    out = []
    for i, entry in enumerate(config.get("write_files") or []):
        line = _line_of(lines, f"write_files.{i}")
        try:
            data = _content(entry)
        except (ValueError, OSError) as e:
            raise UsageError(f"{path}:{line}: write_files.{i}: content does not decode: {e}") from e
        perms = entry.get("permissions", 0o644)
        try:
            mode = perms if isinstance(perms, int) else int(str(perms), 8)
        except ValueError as e:
            raise UsageError(
                f"{path}:{line}: write_files.{i}.permissions: expected an octal mode such as "
                f"'0644', found {perms!r}"
            ) from e
        digest = None if data is None or entry.get("append") else hashlib.sha256(data).hexdigest()
        owner = str(entry.get("owner", "root:root"))
        out.append(FileExpectation(str(entry["path"]), digest, mode, owner, line))
    return out
