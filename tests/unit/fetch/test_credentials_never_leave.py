"""Credentials never leave (issue 27): a password in a source URL's user info
(``https://user:pw@host/...``, which the README documents) reaches the server that asked for it
and nothing else: not the lockfile, the store, the release set and its signed provenance, the
build record, ``plan --json``, the ``--json`` event stream or an error message.

A small recipe fetches a file and its checksum file from a loopback server that answers 401
without the right Basic credentials; every file the commands write and every stream they print
is then searched for the password (as written in the URL and percent-decoded)."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.helpers.nvkr import Result, run_nvkr

RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {{name: creds}}
epoch: "1700000000"
matrix: {{gpu: [hopper], kubernetes: ["1.36"], arch: [amd64]}}
sources:
  tool: {{url: "{base}/files/{file}", checksumUrl: "{base}/files/{file}.sha256"}}
artifacts:
  image:
    builder: container-image
    base: scratch
    revisionSource: tool
    files: {{/usr/bin/tool: {{source: tool, mode: "0755"}}}}
releaseSet:
  name: creds
  clusterRelease: {{kubernetes: "1.36.4", images: [image]}}
"""
BODY = b"#!/bin/sh\necho tool\n"
USER = "builder"


def _write(proj: Path, name: str, base: str, file: str) -> Path:
    recipe = proj / "recipes" / f"{name}.yaml"
    recipe.parent.mkdir(parents=True, exist_ok=True)
    recipe.write_text(RECIPE.format(base=base, file=file))
    return recipe


def _leaks(root: Path, secrets: list[bytes], skip: Path) -> list[str]:
    """Every file under ``root`` (but ``skip``, the user's own recipes) holding a secret."""
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and not path.is_relative_to(skip):
            data = path.read_bytes()
            found += [f"{path.relative_to(root)}: {s!r}" for s in secrets if s in data]
    return found


@pytest.mark.slow  # seconds: out of the fast tier (pyproject's markers)
@pytest.mark.parametrize(
    "password",
    ["s3cr3t-Pa55word", "p%40ss%3Aw0rd%2Fx%25"],  # the second decodes to p@ss:w0rd/x%
    ids=["plain", "percent-encoded"],
)
def test_a_password_in_a_url_is_written_nowhere(tmp_path, http_server, password):
    plain = unquote(password)
    token = base64.b64encode(f"{USER}:{plain}".encode()).decode()
    need = f"Basic {token}"
    http_server.add("/files/tool", BODY, require_auth=need)
    digest = hashlib.sha256(BODY).hexdigest()
    http_server.add("/files/tool.sha256", f"{digest}  tool\n".encode(), require_auth=need)
    base = f"http://{USER}:{password}@127.0.0.1:{http_server.port}"
    proj, store = tmp_path / "proj", tmp_path / "store"
    _write(proj, "creds", base, "tool")
    _write(proj, "missing", base, "gone")  # a 404 behind the same credentials

    streams: list[tuple[str, Result]] = []

    def nvkr(*args: str, code: int = 0) -> Result:
        res = run_nvkr(*args, cwd=proj, store=store)
        streams.append((" ".join(args), res))
        assert res.code == code, res.output
        return res

    nvkr("lock", "recipes/creds.yaml")
    nvkr("build", "recipes/creds.yaml", "--locked", "--json")
    nvkr("plan", "recipes/creds.yaml", "--json")
    nvkr("plan", "recipes/creds.yaml")
    nvkr("build", "recipes/creds.yaml", "--locked")  # a no-op, in plain lines
    nvkr("--debug", "lock", "recipes/missing.yaml", code=1)  # log lines and a traceback
    nvkr("build", "recipes/missing.yaml", "--json", code=1)
    wrong = _write(proj, "wrong", base.replace(password, password + "x"), "tool")
    nvkr("lock", str(wrong.relative_to(proj)), code=1)  # a 401

    assert http_server.routes["/files/tool"].auth[-1] == need, "the server saw the password"
    assert (proj / "dist").is_dir() and (proj / "lockfiles" / "creds.lock.json").is_file()
    secrets = sorted({password.encode(), plain.encode()})
    leaks = _leaks(tmp_path, secrets, skip=proj / "recipes")
    for what, res in streams:
        leaks += [
            f"`nvkr {what}` {name}"
            for name, text in res._asdict().items()
            if name != "code" and any(s.decode() in text for s in secrets)
        ]
    assert not leaks, "the password was written to:\n" + "\n".join(leaks)
    lock = (proj / "lockfiles" / "creds.lock.json").read_text()
    assert f"http://127.0.0.1:{http_server.port}/files/tool" in lock, "the URL stays, the user goes"
    assert USER + "@" not in lock


@pytest.mark.slow  # seconds: out of the fast tier (pyproject's markers)
def test_a_rotated_password_moves_no_digest(tmp_path, http_server):
    """The recipe digest (the lockfile's checksum, provenance's externalParameters) is taken
    with every URL's user info stripped: a new password is neither a drift for ``--locked``
    nor a new action key or release set, and the published digest gives no offline test of a
    guessed password. The same holds for a new user name and for an overlay's or extended
    file's URLs, which the digest takes from the same merged document."""
    digest = hashlib.sha256(BODY).hexdigest()
    proj, store = tmp_path / "proj", tmp_path / "store"
    builds = {}
    for user, password in (("builder", "old-Pa55"), ("builder", "new-Pa55"), ("ci", "new-Pa55")):
        need = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        http_server.add("/files/tool", BODY, require_auth=need)
        http_server.add("/files/tool.sha256", f"{digest}  tool\n".encode(), require_auth=need)
        _write(proj, "creds", f"http://{user}:{password}@127.0.0.1:{http_server.port}", "tool")
        if not builds:
            assert run_nvkr("lock", "recipes/creds.yaml", cwd=proj, store=store).code == 0
        plan = run_nvkr("plan", "recipes/creds.yaml", "--json", cwd=proj, store=store)
        assert plan.code == 0, plan.output
        built = run_nvkr("build", "recipes/creds.yaml", "--locked", "--json", cwd=proj, store=store)
        assert built.code == 0, built.output  # not "the recipe changed since the lock"
        result = built.json_events()[-1]
        builds[user, password] = (json.loads(plan.stdout)["buildDigest"], result["releaseSets"])
    assert len(set(map(json.dumps, builds.values()))) == 1, builds
