"""The node image's SPIRE agent (``spireAgent``): the recipe fields, the action key, agent.conf
for each node attestor (parsed as HCL 1, the grammar spire-agent reads), the staged files and the
unit, a recipe template that fails to render, and the release archive stand-in the end-to-end
tests boot."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import hcl  # type: ignore[import-untyped]
import pytest
from pydantic import ValidationError

from nvkr.action import Action
from nvkr.builders.api import ActionContext, ResolvedSource
from nvkr.builders.node_image import builder as node_image
from nvkr.builders.node_image import spire, staging
from nvkr.builders.node_image.artifact import NodeImageArtifact, SpireAgentSettings
from nvkr.builders.node_image.params import SourceFile, SpireAgentParams
from nvkr.errors import BuildError
from nvkr.recipe.matrix import Variant
from tests.helpers import lock_entry
from tests.helpers import spire as standin

IMAGE = {"arch": "amd64", "gpu": "hopper", "kubernetes": "1.36", "kubernetesVersion": "1.36.3"}
MEMBER = f"spire-{standin.VERSION}/bin/spire-agent"


def _params(**fields: Any) -> SpireAgentParams:
    binary = SourceFile(
        path=spire.SPIRE_AGENT_BINARY, mode=None, input="spire:binary", member=MEMBER
    )
    return SpireAgentParams(
        **{"binary": binary, "trustDomain": None, "nodeAttestor": "join_token", "config": None}
        | fields
    )


def _conf(**fields: Any) -> dict[str, Any]:
    values = spire.template_values(_params(**fields), IMAGE)
    env = staging._template_env(spire.SPIRE_ASSETS)
    return cast(
        dict[str, Any], hcl.loads(staging.render_template(env, spire.CONFIG_TEMPLATE, values))
    )


# -- the recipe fields ---------------------------------------------------------------------------
def test_the_settings_default_to_a_join_token_and_the_nodes_trust_domain() -> None:
    s = SpireAgentSettings.model_validate({"binary": {"source": "spire", "path": MEMBER}})
    assert s.nodeAttestor == "join_token" and s.trustDomain is None and s.config is None


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"trustDomain": "Example.org"}, "String should match pattern"),
        ({"trustDomain": "spiffe://example.org"}, "String should match pattern"),
        ({"nodeAttestor": "aws_iid"}, "'join_token', 'tpm_devid' or 'x509pop'"),
        ({"config": {"artifact": "agent"}}, "config is a template from a source"),
        ({"binary": {"source": "spire", "artifact": "agent"}}, "exactly one of artifact or source"),
    ],
)
def test_bad_settings_are_refused(fields: dict[str, Any], expected: str) -> None:
    with pytest.raises(ValidationError) as err:
        SpireAgentSettings.model_validate({"binary": {"source": "spire", "path": MEMBER}} | fields)
    assert expected in str(err.value)


def test_the_settings_name_their_source_and_artifact() -> None:
    art = NodeImageArtifact.model_validate(
        {
            "builder": "node-image",
            "rootfs": "rootfs",
            "kubernetesVersion": "1.36.3",
            "spireAgent": {"binary": "spire-build", "config": {"source": "conf", "path": "a.j2"}},
        }
    )
    refs = art.references()
    assert (("spireAgent", "binary", "artifact"), "artifact", "spire-build") in refs
    assert (("spireAgent", "config", "source"), "source", "conf") in refs


# -- the action key ------------------------------------------------------------------------------
class _Refs:
    def __init__(self) -> None:
        self.rootfs = Action(
            key="sha256:" + "1" * 64, builder="rootfs", builder_version="1", name="rootfs",
            params={"arch": "amd64", "include": []}, inputs={}, tools={}, epoch=0,
        )  # fmt: skip

    def artifact(self, name: str) -> Action:
        assert name == "rootfs"
        return self.rootfs

    def source(self, name: str) -> ResolvedSource:
        return ResolvedSource(
            name=name,
            spec=None,
            entry=lock_entry({"kind": "path", "path": name, "digest": "sha256:" + "2" * 64}),
            base_dir=Path("."),
        )

    def image_index(self, name: str) -> Any:  # pragma: no cover
        raise AssertionError(name)


def _plan(**fields: Any) -> Any:
    art = NodeImageArtifact.model_validate(
        {"builder": "node-image", "rootfs": "rootfs", "kubernetesVersion": "1.36.3", **fields}
    )
    variant = cast(Variant, SimpleNamespace(gpu="hopper", kubernetes="1.36", arch="amd64"))
    return node_image.NodeImageBuilder().plan("img", art, variant, _Refs())


def test_the_agent_enters_the_key_only_when_the_image_carries_it() -> None:
    """An image without ``spireAgent`` keeps the params and inputs it had before the field (the
    golden plan's keys stay); one with it has the settings, the archive and the templates."""
    absent = _plan()
    assert "spireAgent" not in absent.params and "spire-assets" not in absent.inputs
    carried = _plan(spireAgent={"binary": {"source": "spire", "path": MEMBER}})
    assert carried.params["spireAgent"] == {
        "binary": {"path": "/usr/bin/spire-agent", "mode": None, "input": "spire:binary",
                   "member": MEMBER},
        "trustDomain": None, "nodeAttestor": "join_token", "config": None,
    }  # fmt: skip
    assert carried.inputs == {
        **absent.inputs,
        "spire-assets": spire.spire_assets_digest(),
        "spire:binary": "sha256:" + "2" * 64,
    }
    assert carried.sources["spire:binary"].name == "spire"


# -- agent.conf ----------------------------------------------------------------------------------
def test_agent_conf_for_a_join_token_takes_the_nodes_values_from_its_environment() -> None:
    conf = _conf()
    agent = conf["agent"]
    assert agent["server_address"] == "${SPIRE_SERVER_ADDRESS}"
    assert agent["server_port"] == "${SPIRE_SERVER_PORT}"
    assert agent["join_token"] == "${SPIRE_JOIN_TOKEN}"
    assert agent["trust_domain"] == "${SPIRE_TRUST_DOMAIN}"
    assert agent["trust_bundle_path"] == spire.SPIRE_TRUST_BUNDLE
    assert agent["socket_path"] == "/run/spire/agent/public/api.sock"
    plugins = conf["plugins"]
    assert plugins["NodeAttestor"] == {"join_token": {"plugin_data": {}}}
    assert plugins["KeyManager"] == {"disk": {"plugin_data": {"directory": agent["data_dir"]}}}
    assert plugins["WorkloadAttestor"] == {"unix": {"plugin_data": {}}}
    assert spire.env_names(_params()) == [
        "SPIRE_SERVER_ADDRESS", "SPIRE_SERVER_PORT", "SPIRE_JOIN_TOKEN", "SPIRE_TRUST_DOMAIN",
    ]  # fmt: skip


def test_agent_conf_for_tpm_devid_and_x509pop_has_no_join_token() -> None:
    devid = _conf(nodeAttestor="tpm_devid", trustDomain="example.org")
    assert "join_token" not in devid["agent"] and devid["agent"]["trust_domain"] == "example.org"
    assert devid["plugins"]["NodeAttestor"] == {
        "tpm_devid": {"plugin_data": {
            "devid_cert_path": "/etc/spire/agent/devid.crt.pem",
            "devid_priv_path": "/etc/spire/agent/devid.priv.blob",
            "devid_pub_path": "/etc/spire/agent/devid.pub.blob",
        }}
    }  # fmt: skip
    x509 = _conf(nodeAttestor="x509pop")
    assert x509["plugins"]["NodeAttestor"] == {
        "x509pop": {"plugin_data": {
            "certificate_path": "/etc/spire/agent/node.crt.pem",
            "private_key_path": "/etc/spire/agent/node.key.pem",
        }}
    }  # fmt: skip
    assert spire.env_names(_params(nodeAttestor="x509pop", trustDomain="example.org")) == [
        "SPIRE_SERVER_ADDRESS",
        "SPIRE_SERVER_PORT",
    ]


def test_the_unit_starts_only_where_the_user_data_wrote_the_environment() -> None:
    values = spire.template_values(_params(), IMAGE)
    unit = staging.render_template(
        staging._template_env(spire.SPIRE_ASSETS), spire.UNIT_TEMPLATE, values
    )
    lines = unit.splitlines()
    assert "ConditionPathExists=/etc/spire/agent/agent.env" in lines
    assert "EnvironmentFile=/etc/spire/agent/agent.env" in lines
    assert "After=network-online.target cloud-init.service" in lines
    assert (
        "ExecStart=/usr/bin/spire-agent run -config /etc/spire/agent/agent.conf -expandEnv" in lines
    )
    assert "StateDirectory=spire/agent" in lines and "RuntimeDirectory=spire/agent" in lines
    assert "WantedBy=multi-user.target" in lines


# -- staging -------------------------------------------------------------------------------------
def _ctx(tmp_path: Path, inputs: dict[str, Path]) -> ActionContext:
    sources = {
        role: ResolvedSource(
            name=role.split(":")[1],
            spec=None,
            entry=lock_entry({"kind": "path", "path": "p", "digest": "sha256:" + "2" * 64}),
            base_dir=tmp_path,
        )
        for role in inputs
    }
    return cast(
        ActionContext,
        SimpleNamespace(
            input_path=lambda role: inputs[role],
            action=SimpleNamespace(artifact="node-image", sources=sources),
        ),
    )


def test_staging_puts_the_binary_the_conf_and_the_enabled_unit(tmp_path: Path) -> None:
    archive = tmp_path / "spire.tar.gz"
    archive.write_bytes(standin.release_archive(standin.VERSION, "amd64"))
    tree = tmp_path / "tree"
    tree.mkdir()
    st = staging._Staging(tree)
    staging._stage_spire(_ctx(tmp_path, {"spire:binary": archive}), st, _params(), IMAGE)
    staged = {s["path"]: s for s in st.finish()}
    binary = tree / "usr/bin/spire-agent"
    assert binary.read_bytes() == standin.agent_standin(standin.VERSION, "amd64")
    assert binary.stat().st_mode & 0o777 == 0o755 and staged["/usr/bin/spire-agent"]["binary"]
    assert hcl.loads((tree / "etc/spire/agent/agent.conf").read_text())["agent"]["join_token"]
    assert staged["/etc/spire/agent/agent.conf"]["mode"] == "0644"
    link = tree / "etc/systemd/system/multi-user.target.wants/spire-agent.service"
    assert os.readlink(link) == "/etc/systemd/system/spire-agent.service"
    assert "/etc/systemd/system/spire-agent.service" in staged
    manifest = (tree / "etc/nvkr/manifest.json").read_text()
    assert "/usr/bin/spire-agent" in manifest, "the node agent checks the staged binary"


def test_a_recipe_template_replaces_agent_conf(tmp_path: Path) -> None:
    archive = tmp_path / "spire.tar.gz"
    archive.write_bytes(standin.release_archive(standin.VERSION, "amd64"))
    template = tmp_path / "agent.conf.j2"
    template.write_text('agent {\n    trust_domain = "{{ trustDomain }}"\n}\n# {{ gpu }}\n')
    config = SourceFile(path=spire.SPIRE_AGENT_CONF, mode=None, input="spire:config", member=None)
    ctx = _ctx(tmp_path, {"spire:binary": archive, "spire:config": template})
    tree = tmp_path / "tree"
    tree.mkdir()
    staging._stage_spire(
        ctx, staging._Staging(tree), _params(config=config, trustDomain="gpu.example"), IMAGE
    )
    text = (tree / "etc/spire/agent/agent.conf").read_text()
    assert text == 'agent {\n    trust_domain = "gpu.example"\n}\n# hopper\n'


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("agent {\n  x = 1\n}\n{{ trustDomian }}\n", "line 4: template error: 'trustDomian' is undefined"),
        ("agent {\n  x = 1\n  y = \"{{ trustDomain | }}\"\n}\n", "line 3: template syntax error: expected token 'name'"),
        ("\xff\xfe", "not UTF-8 text"),
    ],
)  # fmt: skip
def test_a_recipe_template_that_fails_to_render_names_the_field_source_and_line(
    tmp_path: Path, template: str, expected: str
) -> None:
    archive = tmp_path / "spire.tar.gz"
    archive.write_bytes(standin.release_archive(standin.VERSION, "amd64"))
    conf = tmp_path / "conf.tar"
    conf.write_bytes(template.encode("latin-1"))
    config = SourceFile(path=spire.SPIRE_AGENT_CONF, mode=None, input="spire:config", member=None)
    ctx = _ctx(tmp_path, {"spire:binary": archive, "spire:config": conf})
    tree = tmp_path / "tree"
    tree.mkdir()
    with pytest.raises(BuildError) as err:
        staging._stage_spire(ctx, staging._Staging(tree), _params(config=config), IMAGE)
    message = str(err.value)
    assert message.startswith("artifacts.node-image.spireAgent.config (source config)"), message
    assert expected in message
    assert not (tree / "etc/spire/agent/agent.conf").exists()


# -- the stand-in the end-to-end tests boot ------------------------------------------------------
def test_the_stand_in_expands_its_configuration_and_refuses_a_missing_token(
    tmp_path: Path,
) -> None:
    """The stand-in run on this host with nvkr's agent.conf: it writes what ``-expandEnv``
    makes of it and stays up; without the join token it exits 1 naming the field."""
    out = tmp_path / "expanded.conf"
    script = standin.agent_standin(standin.VERSION, "amd64").replace(
        standin.EXPANDED.encode(), str(out).encode()
    )
    agent = tmp_path / "spire-agent"
    agent.write_bytes(script)
    agent.chmod(0o755)
    bundle = tmp_path / "bundle.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    values = spire.template_values(_params(), IMAGE)
    values["paths"]["bundle"] = str(bundle)
    text = staging.render_template(
        staging._template_env(spire.SPIRE_ASSETS), spire.CONFIG_TEMPLATE, values
    )
    conf = tmp_path / "agent.conf"
    conf.write_text(text)
    node = {
        "SPIRE_SERVER_ADDRESS": "spire.example",
        "SPIRE_SERVER_PORT": "8081",
        "SPIRE_JOIN_TOKEN": "7f0e1b5c",
        "SPIRE_TRUST_DOMAIN": "gpu.example",
    }
    argv = [str(agent), "run", "-config", str(conf), "-expandEnv"]
    proc = subprocess.Popen(argv, env={"PATH": os.environ["PATH"], **node}, stdout=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while not out.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the stand-in stays up"
        assert out.read_text() == standin.expand_env(text, node)
        assert hcl.loads(out.read_text())["agent"]["join_token"] == "7f0e1b5c"
    finally:
        proc.kill()
        proc.wait()
    del node["SPIRE_JOIN_TOKEN"]
    res = subprocess.run(
        argv, env={"PATH": os.environ["PATH"], **node}, capture_output=True, text=True, timeout=10
    )
    assert res.returncode == 1
    assert "join_token is empty" in res.stderr
