"""Every verb that talks to a registry takes the same ``--insecure``, ``-u/--username`` and
``--password-stdin``: publish, pull, verify REF, release-set show/export REF, build --push. Run
in-process against CNCF distribution 2.8 behind htpasswd (:mod:`tests.helpers.registry`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import click
import pytest

from nvkr.cli import cli
from nvkr.delivery.publish import publish_layout
from nvkr.oci.registry import RegistryClient
from tests.helpers.cli import invoke_output
from tests.helpers.registry import PASSWORD, USER
from tests.helpers.releasesets import NAME, make_set


def commands(group: click.Group, path: str = "nvkr") -> Iterator[tuple[str, click.Command]]:
    ctx = click.Context(group)
    for name in sorted(group.list_commands(ctx)):  # the lazy group loads each verb's module
        command = group.get_command(ctx, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            yield from commands(command, f"{path} {name}")
        else:
            yield f"{path} {name}", command


def test_every_verb_with_insecure_takes_the_credentials_options():
    """A verb that reaches a registry (it has --insecure) takes -u and --password-stdin too."""
    found = []
    for path, command in commands(cli):
        names = {p.name: p for p in command.params}
        if "insecure" not in names:
            continue
        found.append(path)
        assert {"username", "password_stdin"} <= set(names), path
        assert "-u" in names["username"].opts, path
    assert set(found) >= {
        "nvkr build",
        "nvkr publish",
        "nvkr pull",
        "nvkr verify",
        "nvkr release-set show",
        "nvkr release-set export",
    }


@pytest.fixture(scope="module")
def published(auth_registry, tmp_path_factory) -> dict[str, Any]:
    layout = make_set(tmp_path_factory.mktemp("verbs") / "set")
    client = RegistryClient(auth_registry.host, username=USER, password=PASSWORD)
    report = publish_layout(layout, f"{auth_registry.host}/verbs/set", client)
    return {"ref": f"{auth_registry.host}/verbs/set", "digest": report.digest}


@pytest.fixture
def no_credentials(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.delenv("NVKR_REGISTRY_USERNAME", raising=False)
    monkeypatch.delenv("NVKR_REGISTRY_PASSWORD", raising=False)


@pytest.mark.parametrize(
    "verb",
    [
        ("pull", "{ref}@{digest}", "{tmp}/pulled"),
        ("verify", "{ref}@{digest}"),
        ("release-set", "show", "{ref}:" + NAME, "--json"),
        ("release-set", "export", "{ref}:" + NAME, "--format", "json"),
    ],
    ids=["pull", "verify", "show", "export"],
)
def test_registry_verbs_read_a_registry_that_wants_credentials(
    published, tmp_path, no_credentials, verb
):
    args = [a.format(ref=published["ref"], digest=published["digest"], tmp=tmp_path) for a in verb]
    code, text = invoke_output("--store", str(tmp_path / "store"), *args)
    assert code == 1 and "asks for a user name and password" in text, text
    code, text = invoke_output(
        "--store", str(tmp_path / "store"), *args, "-u", USER, "--password-stdin", input=PASSWORD
    )
    assert code == 0, text
    assert published["digest"] in text or (tmp_path / "pulled" / "index.json").is_file()
    code, text = invoke_output(*args, "--username", USER, "--password-stdin", input="wrong\n")
    assert code == 1 and f"refused access for user {USER!r}" in text, text


def test_build_push_reads_the_password_before_building(tmp_path, no_credentials):
    code, text = invoke_output(
        "build", str(tmp_path / "none.yaml"), "--push", "r.example/x", "--password-stdin"
    )
    assert code == 2 and "--password-stdin needs --username" in text, text


def test_password_stdin_needs_a_user_everywhere(published, tmp_path, no_credentials):
    ref = f"{published['ref']}:{NAME}"
    code, text = invoke_output("release-set", "show", ref, "--password-stdin", input="x")
    assert code == 2 and "--password-stdin needs --username" in text
    code, text = invoke_output("release-set", "show", ref, "-u", USER)
    assert code == 2 and "nvkr release-set show ... --password-stdin" in text
    doc = json.loads(
        invoke_output(
            "release-set", "show", ref, "--json", "-u", USER, "--password-stdin", input=PASSWORD
        )[1]
    )
    assert doc["digest"] == published["digest"]


def test_show_of_a_reference_says_it_did_not_read_the_build_warnings(published, tmp_path):
    """The build warnings live in the build record (a referrer), which ``show REF`` does not
    fetch: it says so (``buildWarnings: null``) instead of an empty list that reads as "no
    warnings" (found by the fresh-user trial); a directory's are read (test_build_record)."""
    ref = f"{published['ref']}:{NAME}"
    login = ("-u", USER, "--password-stdin")
    code, text = invoke_output("release-set", "show", ref, "--json", *login, input=PASSWORD)
    assert code == 0, text
    assert json.loads(text)["buildWarnings"] is None
    code, text = invoke_output("release-set", "show", ref, *login, input=PASSWORD)
    assert code == 0 and "build warnings: not read from a registry" in text, text
