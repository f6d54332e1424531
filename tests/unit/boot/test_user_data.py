"""``nvkr boot-test --user-data`` without a real guest: the user-data refused before any boot
(not cloud-config, cloud-init's schema, a missing file, a template that does not render), the
Jinja header Cluster API writes, the NoCloud seed (same inputs, same bytes; labelled CIDATA), and
the probe's report read from a fake QEMU's console (the seed on QEMU's command line, every check
in ``--json``, a failed check failing the image)."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from nvkr.errors import UsageError
from nvkr.machine import qemu
from nvkr.machine.cloudinit import parse_report
from nvkr.machine.seed import make_seed, meta_data, probe_vendor_data
from nvkr.machine.userdata import load_user_data
from tests.helpers.cli import invoke
from tests.helpers.fake_qemu import calls, fake_qemu

pytestmark = pytest.mark.skipif(shutil.which("cloud-init") is None, reason="cloud-init missing")

META = {"instance-id": "i-1", "local-hostname": "node-a"}
GOOD = """#cloud-config
write_files:
  - path: /etc/nvkr-test/hello.conf
    permissions: '0640'
    content: |
      hello
runcmd:
  - echo success > /run/cluster-api/bootstrap-success.complete
"""


def _write(tmp_path: Path, text: str, name: str = "user-data.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_user_data_that_is_not_cloud_config_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "#!/bin/sh\necho hi\n")
    with pytest.raises(UsageError) as e:
        load_user_data(path, META)
    assert e.value.message == (
        f"{path}:1: expected '#cloud-config' or '## template: jinja' as its first line, found "
        "'#!/bin/sh'"
    )
    # after the Jinja header, the rendering must start with #cloud-config
    path = _write(tmp_path, "## template: jinja\nruncmd: []\n")
    with pytest.raises(UsageError, match="2: expected '#cloud-config' after the '## template"):
        load_user_data(path, META)


def test_a_schema_error_names_the_file_the_line_and_the_key(tmp_path: Path) -> None:
    text = GOOD.replace("    content: |", "    contnt: |").replace(
        "runcmd:\n  - echo", "runcmd: 5\n#"
    )
    path = _write(tmp_path, text)
    with pytest.raises(UsageError) as e:
        load_user_data(path, META)
    assert e.value.message.startswith(f"{path}:3: the cloud-config fails cloud-init's schema: ")
    assert (
        "line 3: write_files.0: Additional properties are not allowed ('contnt'" in e.value.message
    )
    assert "line 7: runcmd: 5 is not of type 'array'" in e.value.message


def test_a_top_level_key_no_module_defines_is_refused_with_the_closest(tmp_path: Path) -> None:
    """cloud-init 22.4's schema allows any further top-level key, so ``write_file:`` would boot
    and write nothing; a key of no module's schema is refused with the one meant."""
    path = _write(tmp_path, GOOD.replace("write_files:", "write_file:"))
    with pytest.raises(UsageError) as e:
        load_user_data(path, META)
    assert e.value.message == (
        f"{path}:2: top-level key 'write_file' is defined by no cloud-init module's schema: "
        "did you mean 'write_files'?"
    )
    far = _write(tmp_path, GOOD + "zzqx: 1\nruncmd2: []\n")
    with pytest.raises(UsageError, match=r":9: top-level key 'zzqx' .* \(and 1 more: runcmd2\)$"):
        load_user_data(far, META)


def test_cluster_api_user_data_with_keys_read_outside_the_modules_passes(tmp_path: Path) -> None:
    """CABPK's bootstrap data (with users, ntp, mounts and bootcmd), plus keys cloud-init reads
    outside its module schemas (the mergers' merge_how, the logging's _log and output, the
    datasource list), is accepted."""
    from nvkr.delivery.export import cabpk

    spec = {
        "files": [{"path": "/etc/x.conf", "content": "x", "permissions": "0600"}],
        "bootCommands": ["echo boot"],
        "preKubeadmCommands": ["echo pre"],
        "users": [{"name": "ops", "sudo": "ALL=(ALL) NOPASSWD:ALL", "lockPassword": True}],
        "ntp": {"enabled": True, "servers": ["ntp.example"]},
        "mounts": [["/dev/vdb", "/var/lib/etcd"]],
        "joinConfiguration": {"nodeRegistration": {}},
    }
    doc = {"kind": "KubeadmConfigTemplate", "spec": {"template": {"spec": spec}}}
    extra = (
        "merge_how: 'list(append)+dict(recurse_array)+str()'\n"
        "_log: ['[loggers]']\noutput: {all: '| tee -a /var/log/cloud-init-output.log'}\n"
        "datasource_list: [NoCloud, None]\n"
    )
    loaded = load_user_data(_write(tmp_path, cabpk.user_data(doc, "1.36") + extra), META)
    assert loaded.jinja and loaded.runcmd and {"users", "mounts", "merge_how"} <= set(loaded.config)


def test_yaml_that_does_not_parse_names_its_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "#cloud-config\nruncmd: [\n  - a\n")
    with pytest.raises(UsageError, match=rf"^{path}:3: the user-data is not valid YAML"):
        load_user_data(path, META)


def test_a_missing_user_data_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such user-data file"):
        load_user_data(tmp_path / "nope.yaml", META)


def test_a_jinja_template_is_rendered_with_the_seeds_meta_data(tmp_path: Path) -> None:
    """Cluster API's kubeadm bootstrap data starts ``## template: jinja`` and names the node by
    ``ds.meta_data.local_hostname`` (cloud-init offers meta-data keys with - as _)."""
    text = "## template: jinja\n" + GOOD.replace(
        "hello\n", "name: {{ ds.meta_data.local_hostname }}\n"
    )
    loaded = load_user_data(_write(tmp_path, text), META)
    assert loaded.jinja and loaded.runcmd
    (entry,) = loaded.files
    assert (entry.path, entry.mode, entry.owner, entry.line) == (
        "/etc/nvkr-test/hello.conf", 0o640, "root:root", 4,
    )  # fmt: skip
    import hashlib

    assert entry.sha256 == hashlib.sha256(b"name: node-a\n").hexdigest()
    bad = _write(tmp_path, "## template: jinja\n#cloud-config\nhostname: {{ ds.meta_data.zone }}\n")
    with pytest.raises(UsageError, match="has no attribute 'zone'"):
        load_user_data(bad, META)
    broken = _write(tmp_path, "## template: jinja\n#cloud-config\nhostname: {{ x \n")
    with pytest.raises(UsageError, match=rf"^{broken}:3: Jinja template error"):
        load_user_data(broken, META)


@pytest.mark.parametrize(
    ("os_release", "want"),
    [
        (
            'PRETTY_NAME="Debian GNU/Linux 13 (trixie)"\nVERSION_CODENAME=trixie\nID=debian\n',
            "debian trixie",
        ),
        ('VERSION_CODENAME="bookworm"\nID=debian\n', "debian bookworm"),
        ("", "None None"),  # the image does not say: nor would cloud-init know
    ],
    ids=["trixie", "bookworm", "unknown"],
)
def test_a_template_sees_the_os_the_image_boots(tmp_path: Path, os_release: str, want: str) -> None:
    """cloud-init's ``v1.distro`` and ``v1.distro_release`` in a template are the image's (its
    /etc/os-release, a link to /usr/lib/os-release as on Debian, read without a mount from a
    QCOW2 as from a raw disk), not an OS nvkr assumes."""
    import hashlib

    from tests.helpers.disk import make_disk

    tree = tmp_path / "tree"
    (tree / "etc").mkdir(parents=True)
    if os_release:
        (tree / "usr" / "lib").mkdir(parents=True)
        (tree / "usr" / "lib" / "os-release").write_text(os_release)
        (tree / "etc" / "os-release").symlink_to("../usr/lib/os-release")
    raw, qcow2 = make_disk(tmp_path / "disk", tree)
    text = (
        "## template: jinja\n#cloud-config\nwrite_files:\n  - path: /etc/nvkr-test/release\n"
        '    content: "{{ v1.distro }} {{ v1.distro_release }}"\n'
    )
    path = _write(tmp_path, text)
    for disk in (qcow2, raw):
        (entry,) = load_user_data(path, META, image=disk).files
        assert entry.sha256 == hashlib.sha256(want.encode()).hexdigest(), disk


@pytest.mark.parametrize(
    ("template", "reads"),
    [
        ("hostname: {{ v1.distro_release }}", True),
        ("hostname: {{ distro }}", True),
        ('hostname: {{ v1["distro"] }}', True),
        ("hostname: {{ v1[key] }}", True),  # a key not known before rendering
        ("hostname: {{ v1 | tojson }}", True),  # the whole of v1
        ("{% if v1.distro == 'debian' %}hostname: a{% endif %}", True),
        ("hostname: {{ v1.local_hostname }}", False),
        ("hostname: {{ ds.meta_data.local_hostname }}", False),
        ("hostname: {{ 'x' * 10 }}", False),
        ("hostname: {{ x ", False),  # does not parse: the render says so, the image is not read
    ],
)
def test_the_image_is_read_only_for_a_template_that_asks_what_it_boots(
    template: str, reads: bool
) -> None:
    from nvkr.machine.userdata import _reads_os

    assert _reads_os("#cloud-config\n" + template + "\n") is reads


def test_the_default_meta_data_names_the_instance_by_the_user_datas_digest(tmp_path: Path) -> None:
    one, meta = meta_data(b"#cloud-config\n", None)
    two, _ = meta_data(b"#cloud-config\nruncmd: []\n", None)
    assert one != two and meta["local-hostname"] == "nvkr-boot-test"
    assert one.decode().startswith(f"instance-id: {meta['instance-id']}\n")
    with pytest.raises(UsageError, match=r":1: expected a mapping"):
        meta_data(b"", _write(tmp_path, "- a\n", "meta.yaml"))


def test_the_seed_is_the_same_bytes_for_the_same_inputs(tmp_path: Path) -> None:
    files = {"user-data": GOOD.encode(), "meta-data": b"instance-id: i-1\n",
             "vendor-data": probe_vendor_data(["/a"])}  # fmt: skip
    images = []
    for n in range(2):
        work = tmp_path / f"w{n}"
        work.mkdir()
        make_seed(work / "seed.img", files, workdir=work)
        images.append((work / "seed.img").read_bytes())
    assert images[0] == images[1]
    other = tmp_path / "other"
    other.mkdir()
    make_seed(other / "seed.img", {**files, "user-data": b"#cloud-config\n"}, workdir=other)
    assert (other / "seed.img").read_bytes() != images[0]
    label = subprocess.run(
        ["blkid", "-o", "value", "-s", "LABEL", str(tmp_path / "w0" / "seed.img")],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert label == "CIDATA"
    listing = subprocess.run(
        ["mtype", "-i", str(tmp_path / "w0" / "seed.img"), "::/user-data"],
        capture_output=True, check=True, env={"MTOOLS_SKIP_CHECK": "1"},
    ).stdout  # fmt: skip
    assert listing == GOOD.encode()


def _boot_script(report: list[str], hostname: str = "nvkr-boot-test") -> dict[str, Any]:
    """A console: the probe's report before the agent's readiness line and labels."""
    lines = [
        "[    0.000000] Linux version 6.1.0-test-amd64",
        *[f"[   90.1] sh[433]: {line}" for line in report],
        "[   95.0] node-agent[9]: nvkr-node-agent: ready gpus=0 generation=none",
    ]
    script = [("say", line + "\r\n") for line in lines]
    return {"tcg": script}


def _report(sha: str, status: str = "done", hostname: str = "nvkr-boot-test") -> list[str]:
    return [
        f"nvkr-probe: file sha256={sha} mode=640 owner=root:root path=/etc/nvkr-test/hello.conf",
        "nvkr-probe: file sha256=81b2 mode=644 owner=root:root "
        "path=/run/cluster-api/bootstrap-success.complete",
        "nvkr-probe: runcmd script=present ran=yes",
        f"nvkr-probe: hostname {hostname}",
        'nvkr-probe: cloud-init {  "status": "' + status + '",  "errors": [],  "detail": "x"}',
        "nvkr-probe: end checks=5",
    ]


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: dict[str, Any]) -> Any:
    fake = fake_qemu(tmp_path / "q", script)
    monkeypatch.setitem(qemu.QEMU, "amd64", (str(fake), "qemu-system-x86"))
    image = tmp_path / "node.qcow2"
    image.write_bytes(b"QFI\xfb" + bytes(508))
    ud = _write(tmp_path, GOOD)
    res = invoke(
        "boot-test", str(image), "--no-labels", "--accel", "tcg", "--timeout", "20",
        "--user-data", str(ud), "--expect-file", "/run/cluster-api/bootstrap-success.complete",
        "--console-log", str(tmp_path / "logs"), "--json",
    )  # fmt: skip
    return fake, res


def test_the_probes_report_is_checked_and_given_in_json(tmp_path, monkeypatch) -> None:
    import hashlib

    sha = hashlib.sha256(b"hello\n").hexdigest()
    fake, (code, out, err) = _run(tmp_path, monkeypatch, _boot_script(_report(sha)))
    assert code == 0, err
    (argv,) = calls(fake)
    seeds = [a for a in argv if a.endswith(",if=virtio,format=raw,readonly=on")]
    assert len(seeds) == 1 and "nvkr-seed-" in seeds[0]
    events = [json.loads(line) for line in out.splitlines()]
    (result,) = [e for e in events if e["event"] == "image-result"]
    assert [(c["check"], c["ok"]) for c in result["checks"]] == [
        ("cloud-init", True),
        ("file /etc/nvkr-test/hello.conf", True),
        ("file /run/cluster-api/bootstrap-success.complete", True),
        ("runcmd", True),
        ("hostname", True),
    ]


def test_a_check_that_fails_fails_the_image(tmp_path, monkeypatch) -> None:
    report = _report("0" * 64, status="error", hostname="localhost")
    _fake, (code, out, _err) = _run(tmp_path, monkeypatch, _boot_script(report))
    assert code == 1
    (result,) = [e for e in map(json.loads, out.splitlines()) if e["event"] == "image-result"]
    assert not result["ok"]
    assert "cloud-init: status error" in result["error"]
    assert "file /etc/nvkr-test/hello.conf: sha256 0000000000000000… (expected" in result["error"]
    assert "hostname: localhost (meta-data local-hostname nvkr-boot-test)" in result["error"]


def test_bad_user_data_boots_nothing(tmp_path, monkeypatch) -> None:
    fake = fake_qemu(tmp_path / "q", {"tcg": []})
    monkeypatch.setitem(qemu.QEMU, "amd64", (str(fake), "qemu-system-x86"))
    image = tmp_path / "node.qcow2"
    image.write_bytes(b"QFI\xfb" + bytes(508))
    for text, message in (
        ("write_files: []\n", "expected '#cloud-config' or '## template: jinja' as its first"),
        ("#cloud-config\nruncmd: 5\n", "line 2: runcmd: 5 is not of type 'array'"),
    ):
        ud = _write(tmp_path, text)
        code, _out, err = invoke("boot-test", str(image), "--user-data", str(ud),
                                 "--console-log", str(tmp_path / "logs"))  # fmt: skip
        assert code == 2, err
        assert message in err
    code, _out, err = invoke("boot-test", str(image), "--user-data", str(tmp_path / "none.yaml"))
    assert code == 2 and "no such user-data file" in err
    assert not (tmp_path / "q" / "calls.jsonl").exists()
    assert not (tmp_path / "logs").exists()


def test_the_probe_shows_the_bytes_of_the_files_asked_for() -> None:
    """``show``: the probe prints a file's bytes as base64 lines, which parse_report joins."""
    script = probe_vendor_data(["/a"], ["/var/lib/kubelet/config.yaml"]).decode()
    assert "show_file /var/lib/kubelet/config.yaml" in script
    data = bytes(range(256)) * 2
    b64 = base64.encodebytes(data).decode().split()
    lines = [f"nvkr-probe[12]: nvkr-probe: content path=/x y b64={chunk}" for chunk in b64]
    lines.append("nvkr-probe: end checks=4")
    assert parse_report(lines)["contents"] == {"/x y": data}
