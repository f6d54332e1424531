"""The CLI on small recipes served from a loopback mirror: lock, --locked drift, checksum
failures, offline, mirrors, validation errors and exit codes. No Go toolchain needed here.

The verbs run in this process (:func:`tests.helpers.cli.invoke`: the console script's entry
point, its error rendering and exit codes, from the project's directory), where a retry does not
sleep; what only a process of its own shows (``--version``, ``--help``, global options against
``NVKR_CACHE``, ``NVKR_DEBUG`` and ``COLUMNS`` from the environment, a pipe for stdout, two
concurrent builds) starts ``python -m nvkr`` (:func:`tests.helpers.nvkr.run_nvkr`)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from tests.helpers.cli import invoke
from tests.helpers.nvkr import make_clone, run_nvkr
from tests.helpers.recipes import write_small_recipe


@pytest.fixture
def project(tmp_path, http_dir):
    """A project dir with recipes/small.yaml whose sources a loopback server holds."""
    for arch in ("amd64", "arm64"):
        d = http_dir.root / "release" / "v1.0.0" / "bin" / "linux" / arch
        d.mkdir(parents=True)
        body = f"tool for {arch}\n".encode()
        (d / "tool").write_bytes(body)
        (d / "tool.sha256").write_text(hashlib.sha256(body).hexdigest().upper() + "\r\n")
    (http_dir.root / "README").write_bytes(b"readme\n")
    proj = tmp_path / "proj"
    (proj / "recipes").mkdir(parents=True)
    write_small_recipe(proj, http_dir.url)
    return proj, http_dir


def blobs(store):
    d = store / "blobs" / "sha256"
    return sorted(os.listdir(d)) if d.exists() else []


def test_lock_writes_canonical_lockfile(project, tmp_path):
    proj, http = project
    res = invoke("lock", "recipes/small.yaml", cwd=proj, store=tmp_path / "store")
    assert res.code == 0, res.stderr
    path = proj / "lockfiles" / "small.lock.json"
    text = path.read_text()
    doc = json.loads(text)
    assert (
        text.endswith("}\n")
        and text == json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    )
    assert doc["recipe"]["path"] == "../recipes/small.yaml" and doc["recipe"]["digest"].startswith(
        "sha256:"
    )
    tools = {e["resolved"]["url"]: e for e in doc["sources"] if e["name"] == "tool"}
    amd = tools[f"{http.url}/release/v1.0.0/bin/linux/amd64/tool"]
    assert amd["resolved"]["sha256"] == "sha256:" + hashlib.sha256(b"tool for amd64\n").hexdigest()
    assert amd["resolved"]["size"] == len(b"tool for amd64\n")
    assert amd["variants"] == ["gpu=hopper,kubernetes=1.36,arch=amd64"]
    again = invoke("lock", "recipes/small.yaml", cwd=proj, store=tmp_path / "store2")
    assert again.code == 0 and path.read_text() == text, "locking twice gives the same bytes"


def test_locked_build_then_drift_is_refused_naming_the_source(project, tmp_path):
    proj, http = project
    store = tmp_path / "store"
    assert invoke("lock", "recipes/small.yaml", cwd=proj, store=store).code == 0
    ok = invoke("build", "recipes/small.yaml", "--locked", cwd=proj, store=store)
    assert ok.code == 0, ok.stderr
    assert (proj / "dist" / "small-1.36" / "index.json").is_file()
    (http.root / "README2").write_bytes(b"other\n")
    text = (
        (proj / "recipes" / "small.yaml")
        .read_text()
        .replace('"{{ vars.base }}/README"', '"{{ vars.base }}/README2"')
    )
    text = text.replace(
        hashlib.sha256(b"readme\n").hexdigest(), hashlib.sha256(b"other\n").hexdigest()
    )
    (proj / "recipes" / "small.yaml").write_text(text)
    drift = invoke("build", "recipes/small.yaml", "--locked", cwd=proj, store=store)
    assert drift.code == 2
    assert (
        "NVKR-E-LOCK" in drift.stderr
        and "source 'readme'" in drift.stderr
        and "README2" in drift.stderr
    )
    assert "Traceback" not in drift.stderr
    # Without --locked the build resolves the new pin and warns.
    unlocked = invoke("build", "recipes/small.yaml", cwd=proj, store=store)
    assert unlocked.code == 0, unlocked.stderr
    assert "run `nvkr lock`" in unlocked.stderr


def test_locked_without_lockfile_fails(project, tmp_path):
    proj, _ = project
    res = invoke("build", "recipes/small.yaml", "--locked", cwd=proj, store=tmp_path / "store")
    assert res.code == 2 and "NVKR-E-LOCK" in res.stderr and "no lockfile" in res.stderr


def test_plan_locked_refuses_drift_as_a_locked_build_does(project, tmp_path):
    """`nvkr plan --locked` (a CI step that checks the lock before any runner builds) refuses a
    recipe whose pin drifted from the lockfile, or no lockfile, as `build --locked` does, and
    without a fetch: the plan's keys would otherwise be those of a build that re-resolves."""
    proj, http = project
    store = tmp_path / "store"
    assert invoke("plan", "recipes/small.yaml", "--locked", cwd=proj, store=store).code == 2
    assert invoke("lock", "recipes/small.yaml", cwd=proj, store=store).code == 0
    ok = invoke("plan", "recipes/small.yaml", "--locked", "--json", cwd=proj, store=store)
    assert ok.code == 0, ok.stderr
    assert json.loads(ok.stdout)["actions"]
    fan = invoke("plan", "recipes/small.yaml", "--locked", "--fan-out", cwd=proj, store=store)
    assert fan.code == 0, fan.stderr
    (http.root / "README2").write_bytes(b"other\n")
    text = (proj / "recipes" / "small.yaml").read_text()
    text = text.replace('"{{ vars.base }}/README"', '"{{ vars.base }}/README2"').replace(
        hashlib.sha256(b"readme\n").hexdigest(), hashlib.sha256(b"other\n").hexdigest()
    )
    (proj / "recipes" / "small.yaml").write_text(text)
    for extra in ((), ("--fan-out",)):
        drift = invoke("plan", "recipes/small.yaml", "--locked", *extra, cwd=proj, store=store)
        assert drift.code == 2, (extra, drift.stderr)
        assert "NVKR-E-LOCK" in drift.stderr and "source 'readme'" in drift.stderr, drift.stderr
        assert "Traceback" not in drift.stderr
    assert not (store / "blobs" / "sha256" / hashlib.sha256(b"other\n").hexdigest()).exists()
    assert invoke("plan", "recipes/small.yaml", cwd=proj, store=store).code == 0


def test_wrong_digest_exits_3_and_stores_nothing(project, tmp_path):
    proj, http = project
    store = tmp_path / "store"
    wrong = "0" * 64
    write_small_recipe(proj, http.url, readme_sha=wrong)
    res = invoke("build", "recipes/small.yaml", cwd=proj, store=store)
    assert res.code == 3, res.stderr
    assert "warning: no lockfile" in res.stdout + res.stderr  # said before anything is fetched
    assert "NVKR-E-CHECKSUM" in res.stderr and f"{http.url}/README" in res.stderr
    assert f"sha256:{wrong}" in res.stderr and hashlib.sha256(b"readme\n").hexdigest() in res.stderr
    # and where the wrong pin is written
    lines = (proj / "recipes" / "small.yaml").read_text().splitlines()
    line = next(n for n, text in enumerate(lines, 1) if wrong in text)
    assert f"(pinned at recipes/small.yaml:{line}: sources.readme.sha256)" in res.stderr
    assert hashlib.sha256(b"readme\n").hexdigest() not in blobs(store)
    assert os.listdir(store / "tmp") == []
    assert not (proj / "dist").exists()


def test_offline_names_the_missing_source(project, tmp_path):
    proj, _ = project
    res = invoke("build", "recipes/small.yaml", "--offline", cwd=proj, store=tmp_path / "store")
    assert res.code == 1 and "NVKR-E-OFFLINE" in res.stderr and "source 'readme'" in res.stderr


def test_mirror_rewrites_urls_but_lock_keeps_the_upstream(project, tmp_path):
    proj, http = project
    write_small_recipe(proj, "http://upstream.invalid")
    res = invoke(
        "lock",
        "recipes/small.yaml",
        "--mirror",
        f"http://upstream.invalid={http.url}",
        cwd=proj,
        store=tmp_path / "s",
    )
    assert res.code == 0, res.stderr
    doc = json.loads((proj / "lockfiles" / "small.lock.json").read_text())
    assert {e["resolved"]["url"].split("/")[2] for e in doc["sources"]} == {"upstream.invalid"}
    unreachable = invoke("lock", "recipes/small.yaml", cwd=proj, store=tmp_path / "s2")
    assert (
        unreachable.code == 1
        and "NVKR-E-FETCH" in unreachable.stderr
        and "upstream.invalid" in unreachable.stderr
    )


def test_mirror_from_config_file(project, tmp_path):
    proj, http = project
    write_small_recipe(proj, "http://upstream.invalid")
    config = tmp_path / "config.yaml"
    config.write_text(
        f"mirrors:\n  - {{prefix: 'http://upstream.invalid', replacement: '{http.url}'}}\n"
    )
    res = invoke(
        "lock",
        "recipes/small.yaml",
        cwd=proj,
        store=tmp_path / "s",
        env={"NVKR_CONFIG": str(config)},
    )
    assert res.code == 0, res.stderr


def test_plan_json_and_mermaid(project, tmp_path):
    proj, _ = project
    store = tmp_path / "store"
    res = invoke("plan", "recipes/small.yaml", "--json", cwd=proj, store=store)
    assert res.code == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["buildDigest"].startswith("sha256:")
    assert [a["builder"] for a in plan["actions"]] == ["release-set"]
    assert plan["actions"][0]["cached"] is False
    again = invoke("plan", "recipes/small.yaml", "--json", cwd=proj, store=store)
    assert json.loads(again.stdout)["buildDigest"] == plan["buildDigest"]
    mermaid = invoke("plan", "recipes/small.yaml", "--format", "mermaid", cwd=proj, store=store)
    assert mermaid.code == 0 and mermaid.stdout.startswith("flowchart LR")


def test_variant_selection_errors_are_usage_errors(project, tmp_path):
    proj, _ = project
    res = invoke(
        "build", "recipes/small.yaml", "--variant", "gpu=ampere", cwd=proj, store=tmp_path / "s"
    )
    assert res.code == 2 and "ampere" in res.stderr and "hopper" in res.stderr


@pytest.mark.parametrize(
    ("edit", "code", "needles"),
    [
        (
            lambda t: t.replace('kubernetes: ["1.36"]', "kubernetes: [1.30]"),
            "NVKR-E-RECIPE",
            ["small.yaml:7", "1.30", "quote"],
        ),
        (
            lambda t: t.replace(
                "artifacts: {}", "artifacts: {a: {builder: go-bnary, source: tool}}"
            ),
            "NVKR-E-BUILDER",
            ["go-bnary", "go-binary"],
        ),
        (lambda t: t.replace("epoch:", "colour: red\nepoch:"), "NVKR-E-RECIPE", ["colour"]),
        (
            lambda t: t.replace(
                "artifacts: {}", "artifacts: {a: {builder: go-binary, source: nope}}"
            ),
            "NVKR-E-REF",
            ["nope"],
        ),
        (lambda t: t + "  oops: [\n", "NVKR-E-RECIPE", ["small.yaml:"]),
        (  # no compatibility rules apply to this recipe: the version is checked all the same
            lambda t: t + "  clusterRelease: {kubernetes: vv1.36.4}\n",
            "NVKR-E-RECIPE",
            [
                "small.yaml:21: releaseSet.clusterRelease.kubernetes:",
                "'vv1.36.4' is not an exact Kubernetes release",
            ],
        ),
        (
            lambda t: t.replace(
                "artifacts: {}",
                "artifacts: {i: {builder: container-image, files: {/x: {artifact: i, source: tool}}}}",
            ),
            "NVKR-E-RECIPE",
            ["small.yaml:", "files./x: an image file needs exactly one of artifact or source"],
        ),
        (  # a source named where an artifact is wanted: how to name it as a source
            lambda t: t.replace(
                "artifacts: {}", "artifacts: {i: {builder: container-image, files: {/x: readme}}}"
            ),
            "NVKR-E-REF",
            [
                "no artifact named 'readme' ('readme' is a source: name it as one where the field "
                "takes one, e.g. {source: readme})"
            ],
        ),
        (  # an entry of a list of files is named by its index, the union's other members unsaid
            lambda t: t.replace(
                "artifacts: {}",
                "artifacts: {i: {builder: container-image, files: {/x: [{source: tool}, {artifact: i, source: tool}]}}}",
            ),
            "NVKR-E-RECIPE",
            ["small.yaml:", "files./x[1]: an image file needs exactly one of artifact or source"],
        ),
    ],
)
def test_invalid_recipes_exit_2_with_place_and_hint(project, tmp_path, edit, code, needles):
    proj, _ = project
    path = proj / "recipes" / "small.yaml"
    path.write_text(edit(path.read_text()))
    res = invoke("validate", "recipes/small.yaml", cwd=proj, store=tmp_path / "s")
    assert res.code == 2, res.stderr
    assert f"error[{code}]" in res.stderr
    for needle in needles:
        assert needle in res.stderr
    assert "Traceback" not in res.stderr
    assert "function-after" not in res.stderr and "got a mapping" not in res.stderr
    assert "got a list" not in res.stderr and "list[" not in res.stderr


def test_schema_command_matches_committed_schema(repo_root, tmp_path):
    res = invoke("schema", cwd=repo_root, store=tmp_path / "s")
    assert res.code == 0
    assert res.stdout == (repo_root / "schema" / "recipe.schema.json").read_text(), (
        "the committed schema is stale: run `nvkr schema --out schema/recipe.schema.json`"
    )


def test_version_and_default_recipe_validates(repo_root, tmp_path):
    res = run_nvkr("--version", cwd=repo_root, store=tmp_path / "s")
    assert res.code == 0 and "nvkr" in res.stdout
    ok = invoke("validate", cwd=repo_root, store=tmp_path / "s")
    assert ok.code == 0, ok.stderr
    assert "4 variants" in ok.stdout


@pytest.mark.parametrize(
    ("config", "needle", "verb"),
    [
        ("mirrors: {prefix: x}\n", "'mirrors' must be a list of {prefix, replacement}", "plan"),
        ("snapshots:\n  - {repository: http://r/, archive: ftp://a/}\n",
         "snapshots[0].archive: 'ftp://a/' is not an http://, https:// or file:// URL", "plan"),
        ("cache: {form: registry.example/c}\n", "cache.form is not a cache setting", "build"),
        ("[not, a, map]\n", "expected a map at the top level", "plan"),
    ],
)  # fmt: skip
def test_validate_reads_the_config_file_plan_and_build_read(
    repo_root, tmp_path, config, needle, verb
):
    """A config file plan or build would refuse is refused by validate too, by name (the
    trial: a malformed ``snapshots:`` passed validate, then stopped plan)."""
    path = tmp_path / "config.yaml"
    path.write_text(config)
    res = invoke("--config", path, "validate", cwd=repo_root, store=tmp_path / "s")
    assert res.code == 2, res.stdout + res.stderr
    assert f"nvkr config {path}" in res.stderr and needle in res.stderr, res.stderr
    other = invoke("--config", path, verb, "--offline", cwd=repo_root, store=tmp_path / "s")
    assert other.code == 2 and needle in other.stderr, f"validate refuses what {verb} refuses"


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ("snapshot:\n  - {repository: http://r/, archive: http://a/}\n",
         "'snapshot' is no key of the config (did you mean 'snapshots'?)"),
        ("mirror: []\n", "'mirror' is no key of the config (did you mean 'mirrors'?)"),
        ("registries: {}\n", "'registries' is no key of the config\n"),
    ],
)  # fmt: skip
def test_validate_names_a_config_key_no_reader_reads(repo_root, tmp_path, config, needle):
    """A fresh user's trial: ``snapshot:`` (for ``snapshots:``) was silently ignored, validate
    reporting 0 snapshot archives and exit 0."""
    path = tmp_path / "config.yaml"
    path.write_text(config)
    res = invoke("--config", path, "validate", cwd=repo_root, store=tmp_path / "s")
    assert res.code == 2, res.stdout + res.stderr
    assert f"nvkr config {path}: {needle}" in res.stderr, res.stderr
    assert "the config holds cache, mirrors, snapshots" in res.stderr


def test_validate_names_the_config_file_and_what_it_sets(repo_root, tmp_path):
    path = tmp_path / "config.yaml"
    missing = invoke("--config", path, "validate", cwd=repo_root, store=tmp_path / "s")
    assert missing.code == 0, missing.stderr
    assert f"config {path}: none (no such file)" in missing.stdout
    path.write_text(
        "mirrors:\n  - {prefix: 'https://dl.k8s.io/', replacement: 'http://m/k8s/'}\n"
        "  - {prefix: 'https://pypi.org/', replacement: 'http://m/pypi/'}\n"
        "snapshots:\n  - {repository: 'http://r/', archive: 'https://s/archive/r'}\n"
        "cache: {from: registry.example/c, mode: max}\n"
    )
    ok = invoke("--config", path, "validate", cwd=repo_root, store=tmp_path / "s")
    assert ok.code == 0, ok.stderr
    assert f"config {path}: 2 mirrors, 1 snapshot archive, cache settings: from, mode" in ok.stdout


def test_debug_adds_a_traceback_but_keeps_the_exit_code(project, tmp_path):
    proj, _ = project
    res = invoke(
        "--debug",
        "build",
        "recipes/small.yaml",
        "--variant",
        "gpu=ampere",
        cwd=proj,
        store=tmp_path / "s",
    )
    assert res.code == 2
    assert "Traceback" in res.stderr and "error[NVKR-E-USAGE]" in res.stderr
    assert "hint:" in res.stderr


def test_click_usage_errors_use_the_same_format(project, tmp_path):
    proj, _ = project
    res = invoke("build", "recipes/small.yaml", "--jobs", "0", cwd=proj, store=tmp_path / "s")
    assert res.code == 2
    assert res.stderr.startswith("error[NVKR-E-USAGE]:") and "nvkr build --help" in res.stderr


def test_drift_is_one_line_per_difference_with_the_recipe_in_the_hint(project, tmp_path):
    proj, _ = project
    store = tmp_path / "store"
    assert invoke("lock", "recipes/small.yaml", cwd=proj, store=store).code == 0
    recipe = proj / "recipes" / "small.yaml"
    recipe.write_text(recipe.read_text().replace("v1.0.0", "v1.0.1"))
    res = invoke("build", "recipes/small.yaml", "--locked", cwd=proj, store=store)
    assert res.code == 2
    lines = [line for line in res.stderr.splitlines() if "source 'tool' changed" in line]
    assert len(lines) == 2, res.stderr  # url and checksumUrl differ per arch: one line per cell
    assert "v1.0.0" in lines[0] and "v1.0.1" in lines[0]
    assert "nvkr lock recipes/small.yaml" in res.stderr


def test_json_result_names_the_release_sets(project, tmp_path):
    proj, _ = project
    res = invoke("build", "recipes/small.yaml", "--json", cwd=proj, store=tmp_path / "s")
    assert res.code == 0, res.stderr
    events = res.json_events()
    assert events[-1]["event"] == "result" and events[-1]["releaseSets"][0]["name"] == "small-1.36"


def test_concurrent_builds_on_one_store_both_succeed(project, tmp_path):
    import subprocess
    import sys

    proj, _ = project
    store = tmp_path / "store"
    env = {**os.environ, "NVKR_CACHE": str(store), "NVKR_CONFIG": str(proj / "none.yaml")}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nvkr",
                "build",
                "recipes/small.yaml",
                "--json",
                "--out",
                f"out{n}",
            ],
            cwd=proj,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    digests = {json.loads(out.splitlines()[-1])["releaseSets"][0]["digest"] for out, _ in results}
    assert len(digests) == 1
    assert os.listdir(store / "tmp") == []


def test_release_set_show_reads_the_metadata(project, tmp_path):
    proj, _ = project
    store = tmp_path / "store"
    built = invoke("build", "recipes/small.yaml", "--json", cwd=proj, store=store)
    assert built.code == 0, built.stderr
    digest = built.json_events()[-1]["releaseSets"][0]["digest"]
    shown = invoke("release-set", "show", "dist/small-1.36", "--json", cwd=proj, store=store)
    assert shown.code == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["digest"] == digest and doc["metadata"]["name"] == "small-1.36"
    human = invoke("release-set", "show", "dist/small-1.36", cwd=proj, store=store)
    assert human.code == 0 and "small-1.36" in human.stdout


def test_build_sign_then_verify_and_show(project, tmp_path):
    proj, _ = project
    store = tmp_path / "store"
    keys = invoke(
        "keys", "generate", "--type", "ed25519", "--out", str(tmp_path / "k"), cwd=proj, store=store
    )
    assert keys.code == 0, keys.stderr
    built = invoke(
        "build", "recipes/small.yaml", "--sign", str(tmp_path / "k.key"), cwd=proj, store=store
    )
    assert built.code == 0, built.stderr
    ok = invoke(
        "verify", "dist/small-1.36", "--key", str(tmp_path / "k.pub"), cwd=proj, store=store
    )
    assert ok.code == 0, ok.stderr
    shown = invoke("release-set", "show", "dist/small-1.36", cwd=proj, store=store)
    assert shown.code == 0, shown.stderr
    missing = invoke(
        "build", "recipes/small.yaml", "--sign", str(tmp_path / "nope.key"), cwd=proj, store=store
    )
    assert missing.code == 2 and "nope.key" in missing.stderr and "Traceback" not in missing.stderr


def test_the_release_set_does_not_depend_on_the_working_directory(project, tmp_path):
    # Release sets record the recipe and lockfile relative to the project (the directory that
    # holds recipes/), never to the working directory or the checkout's location.
    proj, _ = project
    store = tmp_path / "store"
    assert invoke("lock", "recipes/small.yaml", cwd=proj, store=store).code == 0
    here = invoke("build", "recipes/small.yaml", "--locked", cwd=proj, store=store)
    assert here.code == 0, here.stderr
    below = invoke(
        "build", "small.yaml", "--locked", "--out", "../dist-b", cwd=proj / "recipes", store=store
    )
    assert below.code == 0, below.stderr
    absolute = invoke(
        "build", str(proj / "recipes" / "small.yaml"), "--locked", "--out", str(tmp_path / "c"),
        cwd=tmp_path, store=store,
    )  # fmt: skip
    assert absolute.code == 0, absolute.stderr
    index = (proj / "dist" / "small-1.36" / "index.json").read_bytes()
    assert (proj / "dist-b" / "small-1.36" / "index.json").read_bytes() == index
    assert (tmp_path / "c" / "small-1.36" / "index.json").read_bytes() == index
    assert "up to date" in below.stdout + below.stderr  # the release-set action too


def test_verbs_load_lazily_and_help_lists_them_all(repo_root, tmp_path):
    """`nvkr publish` imports only its own verb module (start-up is part of its benchmark), while
    `nvkr --help` still lists every verb, and every verb module is in the table."""
    import subprocess
    import sys

    from nvkr.cli import VERBS

    modules = {
        p.stem
        for p in (repo_root / "nvkr" / "cli").glob("*.py")
        if "\ncommand = " in p.read_text() or "\ndef command(" in p.read_text()
    }
    assert modules - {"release_set_export"} == set(VERBS.values())  # export hangs off release-set
    probe = (
        "import sys\n"
        "from nvkr.cli import cli\n"
        "import click\n"
        "ctx = click.Context(cli)\n"
        "assert cli.get_command(ctx, 'publish').name == 'publish'\n"
        "print(sorted(m for m in sys.modules if m.startswith('nvkr.cli.')))\n"
        "print(cli.list_commands(ctx))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=repo_root
    ).stdout.splitlines()
    assert out[0] == "['nvkr.cli.common', 'nvkr.cli.publish']"
    assert out[1] == str(list(VERBS))
    help_text = run_nvkr("--help", cwd=repo_root, store=tmp_path / "store").stdout
    for verb in VERBS:
        assert f"\n  {verb} " in help_text


def test_lock_offline_works_from_the_store_when_build_offline_does(project, tmp_path):
    """Item 12 of the hardening issue: `lock --offline` failed for checksumUrl sources
    (the checksum file is not in the store) although `build --offline` worked."""
    proj, http = project
    store = tmp_path / "store"
    assert invoke("lock", "recipes/small.yaml", cwd=proj, store=store).code == 0
    assert invoke("build", "recipes/small.yaml", cwd=proj, store=store).code == 0
    lockfile = proj / "lockfiles" / "small.lock.json"
    before = lockfile.read_bytes()
    for f in http.root.rglob("*"):  # the upstream is gone
        if f.is_file():
            f.unlink()
    assert invoke("build", "recipes/small.yaml", "--offline", cwd=proj, store=store).code == 0
    res = invoke("lock", "recipes/small.yaml", "--offline", cwd=proj, store=store)
    assert res.code == 0, res.stderr
    assert lockfile.read_bytes() == before
    assert "changed: nothing" in res.stdout
    # what the store lacks is named, as build --offline names it
    empty = invoke("lock", "recipes/small.yaml", "--offline", cwd=proj, store=tmp_path / "s2")
    assert empty.code == 1 and "NVKR-E-OFFLINE" in empty.stderr, empty.stderr
    assert "source 'readme'" in empty.stderr or "source 'tool'" in empty.stderr


def test_global_options_are_accepted_after_the_verb(project, tmp_path):
    proj, _ = project
    store = tmp_path / "store"
    res = run_nvkr(
        "lock", "recipes/small.yaml", "--store", str(store), "--debug",
        cwd=proj, store=tmp_path / "not-this-one",
    )  # fmt: skip
    assert res.code == 0, res.stderr
    assert (store / "blobs" / "sha256").is_dir()
    assert not (tmp_path / "not-this-one").exists()
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("mirrors: [{prefix: 'https://nowhere.invalid/', replacement: 'http://x/'}]\n")
    plan = run_nvkr(
        "plan", "recipes/small.yaml", "--json", "--config", str(cfg), "--store", str(store),
        cwd=proj, store=tmp_path / "not-this-one",
    )  # fmt: skip
    assert plan.code == 0, plan.stderr
    assert not (tmp_path / "not-this-one").exists()


IMAGE_RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {{name: img}}
epoch: "1700000000"
matrix: {{gpu: [hopper], kubernetes: ["1.36"], arch: [amd64]}}
sources:
  readme: {{url: "{base}/README", sha256: "{sha}"}}
artifacts:
  a-container-image-with-a-long-name:
    builder: container-image
    base: scratch
    files: {{/README: {{source: readme}}}}
releaseSet:
  name: img
  clusterRelease: {{kubernetes: "1.36.4", images: [a-container-image-with-a-long-name]}}
"""


def test_tables_are_not_cut_to_80_columns_when_stdout_is_not_a_terminal(project, tmp_path):
    proj, http = project
    (proj / "recipes" / "img.yaml").write_text(
        IMAGE_RECIPE.format(base=http.url, sha=hashlib.sha256(b"readme\n").hexdigest())
    )
    store = tmp_path / "store"
    built = invoke("build", "recipes/img.yaml", cwd=proj, store=store)
    assert built.code == 0, built.stderr
    meta = json.loads(
        invoke("release-set", "show", "dist/img", "--json", cwd=proj, store=store).stdout
    )["metadata"]
    # the table in a process of its own, whose stdout is a pipe and COLUMNS unset
    digest = meta["artifacts"][0]["index"]["digest"]
    shown = run_nvkr("release-set", "show", "dist/img", cwd=proj, store=store, env={"COLUMNS": ""})
    assert shown.code == 0, shown.stderr
    rows = [line for line in shown.stdout.splitlines() if "hopper/amd64" in line]
    assert len(rows) == 1, shown.stdout  # the table's one row, whole on one line
    assert "a-container-image-with-a-long-name" in rows[0] and digest in rows[0], shown.stdout


def test_nvkr_debug_in_the_environment_shows_the_traceback_and_the_argv(project, tmp_path):
    proj, _ = project
    res = run_nvkr(
        "build",
        "recipes/small.yaml",
        "--variant",
        "gpu=ampere",
        cwd=proj,
        store=tmp_path / "s",
        env={"NVKR_DEBUG": "1"},
    )
    assert res.code == 2
    assert "Traceback" in res.stderr and "error[NVKR-E-USAGE]" in res.stderr
    ok = run_nvkr(
        "lock", "recipes/small.yaml", cwd=proj, store=tmp_path / "s", env={"NVKR_DEBUG": "1"}
    )
    assert ok.code == 0, ok.stderr
    assert "DEBUG" in ok.stderr or "nvkr." in ok.stderr, "debug logging is on"
    quiet = run_nvkr(
        "build",
        "recipes/small.yaml",
        "--variant",
        "gpu=ampere",
        cwd=proj,
        store=tmp_path / "s",
        env={"NVKR_DEBUG": "0"},
    )
    assert quiet.code == 2 and "Traceback" not in quiet.stderr


@pytest.mark.parametrize(
    ("env", "edit", "needles"),
    [
        (
            {"SOURCE_DATE_EPOCH": "99999999999999999999"},
            None,
            ["error[NVKR-E-USAGE]: SOURCE_DATE_EPOCH is '99999999999999999999'", "0 .. 4294967295"],
        ),
        (
            {},
            lambda t: t.replace('epoch: "1700000000"', 'epoch: "4294967296"'),
            ["error[NVKR-E-RECIPE]: recipes/small.yaml:4: epoch:", "0 .. 4294967295"],
        ),
    ],
)
def test_an_epoch_out_of_range_is_a_usage_or_recipe_error(project, tmp_path, env, edit, needles):
    proj, _ = project
    path = proj / "recipes" / "small.yaml"
    if edit is not None:
        path.write_text(edit(path.read_text()))
    res = invoke("build", "recipes/small.yaml", cwd=proj, store=tmp_path / "s", env=env)
    assert res.code == 2, res.stderr
    for needle in needles:
        assert needle in res.stderr
    assert "Overflow" not in res.stderr and "INTERNAL" not in res.stderr


@pytest.mark.parametrize(
    ("setup", "args", "code", "needles"),
    [
        (  # a lockfile path that is a directory
            lambda proj: (proj / "lockfiles" / "small.lock.json").mkdir(parents=True),
            ["plan", "recipes/small.yaml"],
            "NVKR-E-LOCK",
            ["lockfiles/small.lock.json", "is a directory"],
        ),
        (  # a lockfile that is not UTF-8
            lambda proj: (
                (proj / "lockfiles").mkdir(),
                (proj / "lockfiles" / "small.lock.json").write_bytes(b'{"a": "\xff"}'),
            ),
            ["plan", "recipes/small.yaml"],
            "NVKR-E-LOCK",
            ["lockfiles/small.lock.json", "not UTF-8"],
        ),
        (  # a store path that is a file
            lambda proj: (proj / "store-file").write_text("x"),
            ["--store", "store-file", "plan", "recipes/small.yaml"],
            "NVKR-E-USAGE",
            ["store-file", "not a directory"],
        ),
        (  # a config file that is not UTF-8
            lambda proj: (proj / "cfg.yaml").write_bytes(b"mirrors: \xff\n"),
            ["--config", "cfg.yaml", "plan", "recipes/small.yaml"],
            "NVKR-E-USAGE",
            ["cfg.yaml", "not UTF-8"],
        ),
        (  # an output file in a directory that does not exist
            lambda proj: None,
            ["schema", "--out", "no-such-dir/recipe.schema.json"],
            "NVKR-E-USAGE",
            ["no-such-dir/recipe.schema.json: No such file or directory"],
        ),
        (  # an output directory that is a file
            lambda proj: (proj / "out-file").write_text("x"),
            ["build", "recipes/small.yaml", "--out", "out-file"],
            "NVKR-E-USAGE",
            ["out-file: File exists"],
        ),
    ],
)
def test_unusable_files_are_nvkr_errors_not_internal_ones(
    project, tmp_path, setup, args, code, needles
):
    proj, _ = project
    setup(proj)
    res = invoke(*args, cwd=proj, store=tmp_path / "s")
    assert res.code == 2, res.stderr
    assert f"error[{code}]: " in res.stderr, res.stderr
    for needle in needles:
        assert needle in res.stderr
    assert "INTERNAL" not in res.stderr


def test_plan_text_marks_what_is_not_hermetic(tmp_path):
    """A Dockerfile build's key misses the daemon and its base images: the text plan says so."""
    (tmp_path / "recipes").mkdir()
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "recipes" / "d.yaml").write_text(
        "apiVersion: nvkr.dev/v1alpha1\nkind: Recipe\nmetadata: {name: d}\n"
        'matrix: {gpu: [hopper], kubernetes: ["1.36"], arch: [amd64]}\n'
        "sources: {ctx: {path: ../ctx}}\n"
        "artifacts: {img: {builder: container-image, backend: docker, context: ctx}}\n"
        "releaseSet: {name: d}\n"
    )
    res = invoke("plan", "recipes/d.yaml", cwd=tmp_path, store=tmp_path / "store")
    assert res.code == 0, res.stderr
    lines = {line.split()[2]: line for line in res.stdout.splitlines() if line.startswith("  ")}
    assert lines["img"].endswith("to build, not hermetic"), lines
    assert lines["release"].endswith("to build, not hermetic")


@pytest.mark.parametrize("verb", ["plan", "build"])
def test_plan_warns_of_what_it_resolves_as_build_does(project, tmp_path, verb):
    """A fresh user's trial: plan re-resolved a source the lockfile lacks without a word,
    where build warns. Both say it: without a lockfile (once), and for a source added since."""
    proj, http = project
    store = tmp_path / "store"
    res = invoke(verb, "recipes/small.yaml", cwd=proj, store=store)
    assert res.code == 0, res.stderr
    assert res.stderr.count("warning: no lockfile") == 1 and " lacks " not in res.stderr
    assert invoke("lock", "recipes/small.yaml", cwd=proj, store=store).code == 0
    recipe = proj / "recipes" / "small.yaml"
    readme = hashlib.sha256(b"readme\n").hexdigest()
    added = f'  notes: {{url: "{http.url}/README", sha256: "{readme}"}}\n'  # a source added
    recipe.write_text(recipe.read_text().replace("artifacts: {}", added + "artifacts: {}"))
    res = invoke(verb, "recipes/small.yaml", cwd=proj, store=store)
    assert res.code == 0, res.stderr
    assert (
        "small.lock.json lacks notes; resolved now — run `nvkr lock` to pin it\n" in res.stderr
    ), res.stderr
    assert "no lockfile" not in res.stderr


def test_a_build_without_a_lockfile_says_so_once(project, tmp_path):
    proj, _ = project
    res = invoke("build", "recipes/small.yaml", cwd=proj, store=tmp_path / "store")
    assert res.code == 0, res.stderr
    assert "warning: no lockfile" in res.stderr
    assert " lacks " not in res.stderr  # was: '… lacks readme, …; resolved now' after it


@pytest.mark.parametrize(
    ("tamper", "member"),
    [
        pytest.param(lambda e: e.update(url=e["url"] + ".old"), "url", id="url"),
        pytest.param(lambda e: e.update(sha256="sha256:" + "0" * 64), "sha256", id="pin"),
    ],
)
def test_a_lock_entry_at_odds_with_its_recipe_source_is_refused_though_all_is_cached(
    project, tmp_path, tamper, member
):
    """A lock entry edited so that it disagrees with the recipe's source (its URL, its pin) is
    refused by a locked build, a plan and an offline lock, naming the lockfile, the source and
    the member, though no action fetches it (every one cached, or none using it): before, only
    a fetch checked it."""
    proj, _ = project
    store = tmp_path / "store"
    assert invoke("lock", "recipes/small.yaml", cwd=proj, store=store).code == 0
    assert invoke("build", "--locked", "recipes/small.yaml", cwd=proj, store=store).code == 0
    path = proj / "lockfiles" / "small.lock.json"
    doc = json.loads(path.read_bytes())
    (readme,) = [s for s in doc["sources"] if s["name"] == "readme"]
    tamper(readme["resolved"])
    path.write_text(json.dumps(doc))
    for args in (("build", "--locked"), ("plan", "--offline"), ("lock", "--offline")):
        res = invoke(*args, "recipes/small.yaml", cwd=proj, store=store)
        assert res.code == 2, (args, res.stderr)
        assert f"{path}: lock entry for source 'readme' has {member}=" in res.stderr, res.stderr
        assert "the recipe says" in res.stderr and "without --offline" in res.stderr


@pytest.mark.parametrize(
    ("tamper", "says"),
    [
        pytest.param(lambda e: e.pop("digest"), "has no digest", id="malformed"),
        pytest.param(lambda e: e.update(url=e["url"] + ".old"), "has url=", id="at-odds"),
    ],
)
def test_a_bad_entry_of_a_per_arch_source_names_its_variant(project, tmp_path, tamper, says):
    """A fresh user's trial: where a source has one entry per arch, the error named the source
    only. The arm64 entry of ``tool`` edited: the message names its variant, not amd64's."""
    proj, _ = project
    store = tmp_path / "store"
    assert invoke("lock", "recipes/small.yaml", cwd=proj, store=store).code == 0
    path = proj / "lockfiles" / "small.lock.json"
    doc = json.loads(path.read_bytes())
    (arm64,) = [s for s in doc["sources"] if s["name"] == "tool" and "arm64" in s["spec"]["url"]]
    tamper(arm64["resolved"])
    path.write_text(json.dumps(doc))
    res = invoke("plan", "--offline", "recipes/small.yaml", cwd=proj, store=store)
    assert res.code == 2, res.stderr
    assert f"{path}: lock entry for source 'tool'" in res.stderr and says in res.stderr
    assert "(of gpu=hopper,kubernetes=1.36,arch=arm64)" in res.stderr, res.stderr
    assert "arch=amd64" not in res.stderr


def _drop_member(resolved: dict) -> None:
    del resolved["member"]


def _older_containerd(resolved: dict) -> None:
    (pkg,) = [p for p in resolved["packages"] if p["name"] == "containerd"]
    pkg["version"] = "1.6.20~ds1-1"


def _drop_a_deb(resolved: dict) -> None:
    """An unpinned .deb taken out of the list, the entry's digest left alone (a fresh user's
    trial: a locked build with the rootfs cached wrote a release set from it)."""
    resolved["packages"] = [p for p in resolved["packages"] if p["name"] != "bsdutils"]


def _zero_a_debs_sha256(resolved: dict) -> None:
    (runc,) = [p for p in resolved["packages"] if p["name"] == "runc"]
    runc["sha256"] = "sha256:" + "0" * 64


@pytest.mark.parametrize(
    ("source", "edit", "says"),
    [
        ("kubectl", _drop_member, "has no member, the recipe says "),
        ("node-packages", _older_containerd, "has containerd 1.6.20~ds1-1, the recipe says "),
        ("node-packages", _drop_a_deb, ": its package list hashes to sha256:"),
        ("node-packages", _zero_a_debs_sha256, ": its package list hashes to sha256:"),
    ],
)
def test_a_default_lock_entry_at_odds_with_the_recipe_is_refused_at_plan(
    repo_root, tmp_path, source, edit, says
):
    """The default lockfile with a source's entry edited (the trial: the kubectl wheel's
    ``member`` taken out was accepted, as the entry of the whole wheel; an apt entry's pinned
    package at another version): plan refuses it, from an empty store, naming what differs."""
    clone = make_clone(tmp_path / "clone")
    path = clone / "lockfiles" / "default.lock.json"
    doc = json.loads(path.read_bytes())
    for entry in doc["sources"]:
        if entry["name"] == source:
            edit(entry["resolved"])
    path.write_text(json.dumps(doc))
    res = invoke("plan", "--offline", cwd=clone, store=tmp_path / "store")
    assert res.code == 2, res.stderr
    assert f"{path}: lock entry for source {source!r}" in res.stderr and says in res.stderr, (
        res.stderr
    )


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda e: e.update(mirror="https://m.example"), id="unknown-member"),
        pytest.param(lambda e: e.pop("digest"), id="missing-member"),
    ],
)
def test_a_malformed_lock_entry_is_named_and_nvkr_lock_writes_it_anew(project, tmp_path, tamper):
    """A lock entry this nvkr cannot read (a newer nvkr's member, a lost one) stops a locked
    build and an offline lock, naming the lockfile, the source and the member; `nvkr lock`
    (online) resolves every source afresh and writes the lockfile as it was."""
    proj, _ = project
    store = tmp_path / "store"
    assert invoke("lock", "recipes/small.yaml", cwd=proj, store=store).code == 0
    path = proj / "lockfiles" / "small.lock.json"
    good = path.read_bytes()
    doc = json.loads(good)
    (readme,) = [s for s in doc["sources"] if s["name"] == "readme"]
    tamper(readme["resolved"])
    path.write_text(json.dumps(doc))
    for args in (("build", "--locked"), ("lock", "--offline")):
        res = invoke(*args, "recipes/small.yaml", cwd=proj, store=store)
        assert res.code == 2, (args, res.stderr)
        assert f"{path}: lock entry for source 'readme' has " in res.stderr, res.stderr
        assert "without --offline: it resolves every source afresh" in res.stderr
    res = invoke("lock", "recipes/small.yaml", cwd=proj, store=store)
    assert res.code == 0, res.stderr
    assert path.read_bytes() == good
