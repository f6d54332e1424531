"""The helm-chart builder, checked against real Helm (helm-python-sdk embeds Helm v4).

Every chart the builder packages here is loaded, linted (strict) and rendered by Helm; the archive
layout, Chart.yaml, Chart.lock and the OCI config blob are compared with what Helm itself writes.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
import time
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

helm = pytest.importorskip("helm_python")

from nvkr.builders import api  # noqa: E402
from nvkr.builders.helm_chart.artifact import HelmChartArtifact  # noqa: E402
from nvkr.builders.helm_chart.builder import HelmChartBuilder  # noqa: E402
from nvkr.errors import BuildError, RecipeError, ToolError  # noqa: E402
from nvkr.helm.ignore import HelmIgnore  # noqa: E402
from nvkr.helm.metadata import go_float, go_json, go_time, hash_req, read_lock, read_metadata  # noqa: E402
from nvkr.helm.package import oci_tag  # noqa: E402
from nvkr.store import Store  # noqa: E402
from tests.helpers.charts import (  # noqa: E402
    CHART_MEDIA,
    CONFIG_MEDIA,
    DIGEST,
    EPOCH,
    build_chart,
    helm_checks,
    members,
    output,
    plan_chart,
    write_chart,
)

DEMO = {
    "Chart.yaml": "apiVersion: v2\nname: demo\ndescription: A demo chart\n"
    'version: 0.0.1  # replaced by the recipe\nappVersion: "0.0.1"\n',
    "values.yaml": "# -- the image\nimage:\n  # -- repository\n  repository: example.org/old\n"
    '  tag: ""  # unused with a digest\nreplicas: 1\n',
    "templates/_helpers.tpl": '{{- define "demo.image" -}}\n'
    "{{ .Values.image.repository }}{{ with .Values.image.digest }}@{{ . }}{{ end }}\n{{- end }}\n",
    "templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n"
    'data:\n  image: {{ include "demo.image" . | quote }}\n'
    "  replicas: {{ .Values.replicas | quote }}\n",
    "README.md": "# demo\n",
    "docs/notes.txt": "notes\n",
    ".helmignore": "*.bak\n",
    "scratch.bak": "ignored\n",
}


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    api.get_builder("go-binary")  # fill the registry first
    monkeypatch.setitem(api.REGISTRY, "helm-chart", HelmChartBuilder())


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "store")


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return write_chart(tmp_path / "demo", DEMO)


# -- the happy path ------------------------------------------------------------------------------
def test_packages_a_chart_helm_loads_lints_and_renders(
    store: Store, demo: Path, tmp_path: Path
) -> None:
    result = build_chart(
        store,
        demo,
        version="1.2.3",
        appVersion="1.0",
        images={"image": {"artifact": "agent-image", "repository": "registry.example/nvkr/agent"}},
    )
    primary, config = (
        next(o for o in result["outputs"] if o["role"] == r) for r in ("primary", "config")
    )
    assert primary["name"] == "demo-1.2.3.tgz" and primary["mediaType"] == CHART_MEDIA
    assert config["mediaType"] == CONFIG_MEDIA
    assert result["metadata"] == {
        "chartName": "demo",
        "version": "1.2.3",
        "appVersion": "1.0",
        "tag": "1.2.3",
        "images": {"image": f"registry.example/nvkr/agent@{DIGEST}"},
    }
    tgz = tmp_path / primary["name"]
    tgz.write_bytes(output(store, result, "primary"))
    rendered = helm_checks(tgz)
    cm = yaml.safe_load(rendered["demo/templates/cm.yaml"])
    assert cm["data"]["image"] == f"registry.example/nvkr/agent@{DIGEST}"
    with helm.Chart.load(str(tgz)) as chart:
        assert chart.metadata["version"] == "1.2.3"
        assert chart.metadata["appVersion"] == "1.0"  # a string, never the float 1.0
        assert chart.values["image"] == {
            "repository": "registry.example/nvkr/agent",
            "tag": "",
            "digest": DIGEST,
        }


def test_values_yaml_keeps_comments_and_other_keys(store: Store, demo: Path) -> None:
    result = build_chart(
        store, demo, images={"image": {"artifact": "a", "repository": "example.org/new"}}
    )
    values = members(output(store, result, "primary"))["demo/values.yaml"].decode()
    assert values == (
        "# -- the image\nimage:\n  # -- repository\n  repository: example.org/new\n"
        f'  tag: ""  # unused with a digest\n  digest: {DIGEST}\nreplicas: 1\n'
    )


def test_nested_image_key_is_created(store: Store, demo: Path) -> None:
    result = build_chart(
        store,
        demo,
        images={
            "image": {"artifact": "a", "repository": "example.org/main"},
            "sidecar.image": {"artifact": "b", "repository": "example.org/side"},
        },
    )
    values = yaml.safe_load(members(output(store, result, "primary"))["demo/values.yaml"])
    assert values["sidecar"] == {"image": {"repository": "example.org/side", "digest": DIGEST}}


def test_config_blob_is_byte_identical_to_helms_json_marshal(
    store: Store, demo: Path, tmp_path: Path
) -> None:
    from helm_python import _native

    (demo / "Chart.yaml").write_text(
        "apiVersion: v2\nname: demo\nversion: 0.0.1\ndescription: a <b> & c\n"
        "keywords: [gpu, '1.0']\nmaintainers: [{name: Ops, email: ops@example.org}]\n"
        "annotations: {z: last, a: first}\nkubeVersion: '>=1.34.0-0'\ntype: application\n"
    )
    result = build_chart(store, demo, version="2.0.0-rc.1+b.7", appVersion="v2")
    tgz = tmp_path / "c.tgz"
    tgz.write_bytes(output(store, result, "primary"))
    with helm.Chart.load(str(tgz)) as chart:
        # helm_chart_metadata is json.Marshal(chart.Metadata), what Helm pushes as the config
        assert (
            output(store, result, "config")
            == _native.call_string("helm_chart_metadata", chart._raw()).encode()
        )


def test_archive_layout_is_helms(store: Store, demo: Path, tmp_path: Path) -> None:
    """Same members, same order, same bytes as `helm package` (Chart.yaml included)."""
    helm_tgz = Path(helm.package(str(demo), destination=str(tmp_path / "helm"), version="0.1.0"))
    ours = members(output(store, build_chart(store, demo), "primary"))
    theirs = members(helm_tgz.read_bytes())
    assert list(ours) == list(theirs)
    assert ours == theirs
    assert next(iter(ours)) == "demo/Chart.yaml" and "demo/scratch.bak" not in ours
    assert "demo/.helmignore" in ours, "Helm packages .helmignore itself"


def test_tar_and_gzip_headers_are_normalised(store: Store, demo: Path) -> None:
    tgz = output(store, build_chart(store, demo), "primary")
    assert tgz[:4] == b"\x1f\x8b\x08\x00", "gzip: deflate, no FNAME/FEXTRA/FCOMMENT"
    assert tgz[4:8] == b"\0\0\0\0", "gzip mtime 0"
    with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
        for m in tar.getmembers():
            assert m.isfile(), "Helm's layout has files only, no directory entries"
            assert (m.mode, m.uid, m.gid, m.uname, m.gname, m.mtime) == (0o644, 0, 0, "", "", EPOCH)
    assert gzip.decompress(tgz)  # a complete stream


def _build_in(tmp_path: Path, tag: str, chart: Path, umask: int, tz: str) -> str:
    """Copy ``chart`` (new mtimes, modes from ``umask``) and build it into a fresh store under
    ``umask`` and time zone ``tz``; return the archive's digest."""
    old_umask, old_tz = os.umask(umask), os.environ.get("TZ")
    os.environ["TZ"] = tz
    time.tzset()
    try:
        copy = tmp_path / tag / "demo"
        shutil.copytree(chart, copy)
        for i, path in enumerate(sorted(copy.rglob("*"))):
            os.utime(path, (1_000_000_000 + i * 7919, 1_000_000_000 + i * 7919))
            if path.is_file():
                os.chmod(path, 0o666 & ~umask)
        store = Store(tmp_path / tag / "store")
        result = build_chart(
            store, copy, images={"image": {"artifact": "a", "repository": "example.org/x"}}
        )
        (primary,) = [o for o in result["outputs"] if o["role"] == "primary"]
        data = output(store, result, "primary")
        assert primary["digest"] == "sha256:" + hashlib.sha256(data).hexdigest()
        return str(primary["digest"])
    finally:
        os.umask(old_umask)
        if old_tz is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old_tz
        time.tzset()


def test_two_builds_in_two_stores_give_the_same_archive(demo: Path, tmp_path: Path) -> None:
    a = _build_in(tmp_path, "a", demo, 0o022, "UTC")
    b = _build_in(tmp_path, "b", demo, 0o077, "Asia/Kolkata")
    assert a == b


def test_plan_names_the_image_index_actions(store: Store, demo: Path) -> None:
    spec, _action, refs = plan_chart(
        store,
        demo,
        subdir=".",
        images={"image": {"artifact": "agent-image", "repository": "example.org/a"}},
    )
    index = refs.indexes["agent-image"]
    assert spec.params == {
        "version": "0.1.0",
        "appVersion": None,
        "subdir": None,
        "images": {"image": {"repository": "example.org/a", "index": index.key}},
    }
    assert spec.deps == (index.key,) and set(spec.inputs) == {"chart"} == set(spec.sources)
    assert set(spec.tools) == {"pyyaml", "ruamel.yaml"}, "the emitters enter the action key"


UPSTREAM = "otel/opentelemetry-collector-contrib@sha256:" + "5" * 64


def test_an_image_nvkr_does_not_build_is_pinned_by_its_reference(
    store: Store, demo: Path, tmp_path: Path
) -> None:
    """A ``reference`` pins an upstream image by the recipe's digest: no image-index action,
    the digest in the action key, in values.yaml, in the metadata and in what Helm renders."""
    images = {"image": {"reference": UPSTREAM}}
    spec, _action, _refs = plan_chart(store, demo, images=images)
    assert spec.deps == ()
    assert spec.params["images"] == {
        "image": {
            "repository": "otel/opentelemetry-collector-contrib",
            "digest": "sha256:" + "5" * 64,
        }
    }
    other, _, _ = plan_chart(store, demo, images={"image": {"reference": UPSTREAM[:-1] + "6"}})
    assert other.params != spec.params, "another digest is another action"
    result = build_chart(store, demo, images=images)
    assert result["metadata"]["images"] == {"image": UPSTREAM}
    tgz = tmp_path / "demo.tgz"
    tgz.write_bytes(output(store, result, "primary"))
    cm = yaml.safe_load(helm_checks(tgz)["demo/templates/cm.yaml"])
    assert cm["data"]["image"] == UPSTREAM


def test_recipe_values_are_written_into_the_packaged_values(store: Store, demo: Path) -> None:
    """``values`` edit the packaged values.yaml in place like the pins (comments stay, a
    missing key is added) and enter the action key; a key that is also a pin is refused."""
    result = build_chart(
        store,
        demo,
        images={"image": {"reference": UPSTREAM}},
        values={"replicas": "3", "otlp.endpoint": "gateway.example:4317"},
    )
    values = members(output(store, result, "primary"))["demo/values.yaml"].decode()
    assert values.startswith("# -- the image\nimage:\n  # -- repository\n")
    loaded = yaml.safe_load(values)
    assert loaded["replicas"] == "3" and loaded["otlp"] == {"endpoint": "gateway.example:4317"}
    assert loaded["image"]["digest"] == UPSTREAM.rpartition("@")[2]
    spec, _, _ = plan_chart(store, demo, values={"replicas": "3"})
    assert spec.params["values"] == {"replicas": "3"}
    assert "values" not in plan_chart(store, demo)[0].params, "no values: the key it had"
    with pytest.raises(BuildError, match=r"values key image\.digest is also 'image'"):
        build_chart(
            store, demo, images={"image": {"reference": UPSTREAM}}, values={"image.digest": "x"}
        )


@pytest.mark.parametrize(
    ("image", "message"),
    [
        ({"reference": "otel/c:0.115.0@sha256:" + "5" * 64}, "the tag '0.115.0' beside the digest"),
        ({"reference": "otel/c"}, r"expected an image pinned by digest, REPOSITORY@sha256"),
        ({"reference": "otel/c@sha256:abc"}, "expected an image pinned by digest"),
        (
            {"reference": UPSTREAM, "artifact": "a"},
            "an artifact with its repository, or a reference",
        ),
        ({"artifact": "a"}, "needs artifact and repository"),
        ({}, "needs artifact and repository"),
    ],
)
def test_a_chart_image_is_an_artifact_or_a_pinned_reference(
    image: dict[str, str], message: str
) -> None:
    with pytest.raises(pydantic.ValidationError, match=message):
        _chart_model(images={"image": image})


def test_subdir_selects_the_chart(store: Store, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_chart(repo / "charts" / "demo", DEMO)
    (repo / "other.txt").write_text("not in the chart\n")
    result = build_chart(store, repo, subdir="charts/demo")
    assert "demo/README.md" in members(output(store, result, "primary"))


# -- versions and tags ---------------------------------------------------------------------------
def test_plus_in_version_becomes_underscore_in_the_oci_tag(store: Store, demo: Path) -> None:
    assert oci_tag("1.2.3+build.5") == "1.2.3_build.5"
    assert oci_tag("1.2.3") == "1.2.3"
    result = build_chart(store, demo, version="1.2.3-rc.1+build.5")
    assert result["metadata"]["tag"] == "1.2.3-rc.1_build.5"
    (primary,) = [o for o in result["outputs"] if o["role"] == "primary"]
    assert primary["name"] == "demo-1.2.3-rc.1+build.5.tgz", "Helm keeps '+' in the file name"


@pytest.mark.parametrize("version", ["1.0", "v1.0.0", "01.2.3", "1.2.3-", "latest", ""])
def test_non_semver_version_is_refused_by_the_model(version: str) -> None:
    with pytest.raises(pydantic.ValidationError, match="is not a SemVer 2 version"):
        _chart_model(version=version)


def _chart_model(**fields: Any) -> HelmChartArtifact:
    return HelmChartArtifact.model_validate(
        {"builder": "helm-chart", "source": "s", "version": "0.1.0", **fields}
    )


def test_bad_recipe_fields_are_refused_by_the_model() -> None:
    with pytest.raises(pydantic.ValidationError, match="non-empty printable string"):
        _chart_model(appVersion="two\nlines")
    with pytest.raises(pydantic.ValidationError, match="relative path inside the source"):
        _chart_model(subdir="../elsewhere")
    with pytest.raises(pydantic.ValidationError, match=r"key 'a\.\.b' is not a dotted values path"):
        _chart_model(images={"a..b": {"artifact": "x", "repository": "r/x"}})
    with pytest.raises(pydantic.ValidationError, match=r"key 'otlp\.' is not a dotted values path"):
        _chart_model(values={"otlp.": "x"})
    with pytest.raises(pydantic.ValidationError, match="without tag or digest"):
        _chart_model(images={"image": {"artifact": "x", "repository": "r/x:1.0"}})
    with pytest.raises(pydantic.ValidationError, match="in lower case"):
        _chart_model(images={"image": {"artifact": "x", "repository": "example.org/Img"}})


# -- bad charts ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("target", "problem"),
    [("/etc/passwd", "an absolute path"), ("../../../outside", "which leads out of the source")],
)
def test_a_link_out_of_the_chart_names_the_link_and_its_target(
    store: Store, demo: Path, target: str, problem: str
) -> None:
    """A link's target is not part of the source's digest: refused, as the recipe's problem
    (exit 2), naming the link inside the chart and its target as written, no store path."""
    os.symlink(target, demo / "templates" / "linked.yaml")
    with pytest.raises(RecipeError) as e:
        build_chart(store, demo)
    assert e.value.exit_code == 2
    assert e.value.message.endswith(
        f"failed: chart charts/demo: templates/linked.yaml is a link to {target!r}, {problem}"
    )
    assert str(store.root) not in e.value.message and "internal" not in e.value.message


@pytest.mark.parametrize("name", ["Demo", "my_chart", "my.chart", "-demo", "a/b", "x" * 251])
def test_invalid_chart_name(store: Store, demo: Path, name: str) -> None:
    text = (demo / "Chart.yaml").read_text().replace("name: demo", f"name: {json.dumps(name)}")
    (demo / "Chart.yaml").write_text(text)
    with pytest.raises(BuildError, match=r"charts/demo/Chart.yaml: field 'name'") as e:
        build_chart(store, demo)
    assert e.value.hint


def test_app_version_number_in_chart_yaml_must_be_quoted(store: Store, demo: Path) -> None:
    text = (demo / "Chart.yaml").read_text().replace('appVersion: "0.0.1"', "appVersion: 1.0")
    (demo / "Chart.yaml").write_text(text)
    with pytest.raises(BuildError, match=r"Chart.yaml: field 'appVersion' is 1.0") as e:
        build_chart(store, demo)
    assert e.value.hint and "quote" in e.value.hint


def test_apiversion_v1_and_unknown_fields_are_refused(store: Store, demo: Path) -> None:
    (demo / "Chart.yaml").write_text("apiVersion: v1\nname: demo\nversion: 0.1.0\n")
    with pytest.raises(BuildError, match="'apiVersion' is 'v1'"):
        build_chart(store, demo)
    (demo / "Chart.yaml").write_text("apiVersion: v2\nname: demo\nversion: 0.1.0\nicno: x\n")
    with pytest.raises(BuildError, match="unknown field"):
        build_chart(store, demo)


def test_template_that_does_not_render_names_the_file(store: Store, demo: Path) -> None:
    (demo / "templates" / "broken.yaml").write_text("x: {{ .Values.nope.deeper }}\n")
    with pytest.raises(BuildError, match=r"demo/templates/broken.yaml:1") as e:
        build_chart(store, demo)
    assert "helm lint --strict" in e.value.message


def test_fail_in_a_template_is_caught_by_rendering(store: Store, demo: Path) -> None:
    # helm lint lets `fail` and `required` pass; rendering with the defaults does not
    (demo / "templates" / "guard.yaml").write_text('{{ fail "set something" }}\n')
    with pytest.raises(
        BuildError, match=r"(?s)helm template failed.*guard\.yaml:1:3.*set something"
    ):
        build_chart(store, demo)


def test_values_key_that_is_not_a_mapping(store: Store, demo: Path) -> None:
    with pytest.raises(BuildError, match=r"values.yaml: replicas is 1, not a mapping"):
        build_chart(store, demo, images={"replicas": {"artifact": "a", "repository": "r/x"}})


def test_missing_image_index_digest(store: Store, demo: Path) -> None:
    with pytest.raises(BuildError, match="gave no sha256 indexDigest"):
        build_chart(
            store,
            demo,
            index_digest="latest",
            images={"image": {"artifact": "a", "repository": "r/x"}},
        )


def test_without_helm_python_the_build_fails_with_a_hint(
    store: Store, demo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(__import__("sys").modules, "helm_python", None)
    with pytest.raises(ToolError, match="helm-python-sdk is not installed") as e:
        build_chart(store, demo)
    assert e.value.hint and "pip install helm-python-sdk" in e.value.hint


# -- dependencies --------------------------------------------------------------------------------
@pytest.fixture
def parent(tmp_path: Path) -> Path:
    """A chart with one file:// dependency, locked and vendored by real Helm."""
    write_chart(
        tmp_path / "sub",
        {
            "Chart.yaml": "apiVersion: v2\nname: sub\nversion: 1.0.0\n",
            "templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n"
            "  name: {{ .Release.Name }}-sub\n",
        },
    )
    root = write_chart(
        tmp_path / "parent",
        {
            "Chart.yaml": "apiVersion: v2\nname: parent\nversion: 0.1.0\ndependencies:\n"
            '  - name: sub\n    version: ">=1.0.0"\n    repository: file://../sub\n',
            "templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n"
            "  name: {{ .Release.Name }}\n",
        },
    )
    helm.dependency_update(str(root), skip_refresh=True)
    assert (root / "charts" / "sub-1.0.0.tgz").is_file()
    return root


def test_hash_req_is_helms_chart_lock_digest(parent: Path) -> None:
    meta = read_metadata((parent / "Chart.yaml").read_bytes(), "Chart.yaml")
    lock = read_lock((parent / "Chart.lock").read_bytes(), "Chart.lock")
    assert hash_req(meta["dependencies"], lock["dependencies"]) == lock["digest"]


def test_locked_subchart_is_packaged_like_helm_does(
    store: Store, parent: Path, tmp_path: Path
) -> None:
    result = build_chart(store, parent)
    ours = members(output(store, result, "primary"))
    helm_tgz = Path(helm.package(str(parent), destination=str(tmp_path / "helm")))
    assert ours == members(helm_tgz.read_bytes())  # Chart.lock and the expanded subchart too
    tgz = tmp_path / "p.tgz"
    tgz.write_bytes(output(store, result, "primary"))
    assert set(helm_checks(tgz)) >= {"parent/charts/sub/templates/cm.yaml"}


def test_subchart_version_differing_from_chart_lock(
    store: Store, parent: Path, tmp_path: Path
) -> None:
    other = write_chart(
        tmp_path / "sub2", {"Chart.yaml": "apiVersion: v2\nname: sub\nversion: 1.0.1\n"}
    )
    (parent / "charts" / "sub-1.0.0.tgz").unlink()
    helm.package(str(other), destination=str(parent / "charts"))
    with pytest.raises(
        BuildError,
        match=r"charts/sub-1.0.1.tgz: subchart 'sub' is version 1.0.1, Chart.lock pins 1.0.0",
    ):
        build_chart(store, parent)


def test_missing_subchart_and_stale_lock(store: Store, parent: Path) -> None:
    (parent / "charts" / "sub-1.0.0.tgz").unlink()
    with pytest.raises(BuildError, match=r"subchart 'sub' 1.0.0 .* is missing"):
        build_chart(store, parent)
    text = (parent / "Chart.yaml").read_text().replace(">=1.0.0", "~1.0.0")
    (parent / "Chart.yaml").write_text(text)
    with pytest.raises(BuildError, match=r"Chart.lock: digest sha256:\w+ does not match"):
        build_chart(store, parent)


def test_dependency_without_lock_must_be_vendored(store: Store, parent: Path) -> None:
    (parent / "Chart.lock").unlink()
    build_chart(store, parent)  # present in charts/: fine, as for helm package
    shutil.rmtree(parent / "charts")
    with pytest.raises(
        BuildError, match=r"dependency 'sub' is declared but charts/ holds no chart"
    ):
        build_chart(store, parent)


# -- .helmignore ---------------------------------------------------------------------------------
IGNORE_TREE = [
    "Chart.yaml",
    "values.yaml",
    "templates/cm.yaml",
    "templates/.hidden.yaml",
    "templates/notes.bak",
    "docs/a.md",
    "docs/deep/b.md",
    "README.md",
    "sub/README.md",
    "build/out.txt",
    "logs/x.log",
    "keep.log",
    "data-1.txt",
    "data-22.txt",
]


@pytest.mark.parametrize(
    "rules",
    [
        "",
        "# a comment\n\n*.bak\n",  # no slash: the name in any directory
        "README.md\n",  # both README.md files
        "/README.md\n",  # anchored: the top-level one only
        "docs/*.md\n",  # slash: whole path, '*' stops at '/'
        "docs/\n",  # directory rule: the whole directory
        "build/\nlogs/\n",
        "*.log\n!keep.log\n",  # Helm's '!' keeps nothing an earlier rule ignored...
        "!keep.log\n",  # ...and ignores everything it does not match (Chart.yaml too)
        "!*.yaml\n",  # so this keeps the top-level YAML files only (directories are ignored)
        "data-?.txt\n",
        "data-[0-9][0-9].txt\n",
        "[^dlk]*.md\n",
        ".helmignore\n",  # it can ignore itself
        "README.md/\n",  # a directory rule never matches a file
    ],
)
def test_helmignore_matches_helm_package(tmp_path: Path, rules: str) -> None:
    """Our walk + .helmignore against Helm's own `helm package` of the same tree."""
    root = tmp_path / "ign"
    for name in IGNORE_TREE:
        text = "apiVersion: v2\nname: ign\nversion: 0.1.0\n" if name == "Chart.yaml" else "x: 1\n"
        write_chart(root, {name: text})
    (root / ".helmignore").write_text(rules)
    from nvkr.helm.chart import load_dir
    from nvkr.helm.package import archive_members

    try:
        theirs = list(
            members(Path(helm.package(str(root), destination=str(tmp_path))).read_bytes())
        )
    except helm.HelmError:
        theirs = None  # Helm refuses the chart (e.g. Chart.yaml itself ignored)
    try:
        ours: list[str] | None = [n for n, _ in archive_members(load_dir(root, "ign"))]
    except BuildError:
        ours = None
    assert ours == theirs


def test_helmignore_rules_directly() -> None:
    rules = HelmIgnore.parse("*.swp\n/top.txt\ntemplates/*.bak\ncache/\n")
    assert rules.ignored("a/b/c.swp", False)
    assert rules.ignored("top.txt", False) and not rules.ignored("a/top.txt", False)
    assert rules.ignored("templates/a.bak", False) and not rules.ignored("templates/x/a.bak", False)
    assert rules.ignored("cache", True) and not rules.ignored("cache", False)
    negated = HelmIgnore.parse("!x\n")
    assert not negated.ignored("x", False)
    assert negated.ignored("anything-else", False), "'!x' ignores what it does not match"
    assert HelmIgnore.parse("").ignored("templates/.hidden", False), "Helm's default rule"
    assert not HelmIgnore.parse("").ignored(".helmignore", False)


@pytest.mark.parametrize("bad", ["**/*.bak", "[unclosed", "trailing\\", "[]"])
def test_bad_helmignore_pattern_names_the_line(bad: str) -> None:
    with pytest.raises(BuildError, match=r"\.helmignore:2: pattern"):
        HelmIgnore.parse(f"ok\n{bad}\n")


# -- Go's text forms -----------------------------------------------------------------------------
def test_go_forms() -> None:
    assert [go_float(f) for f in (1.0, 1.1, 1e6, 123456.0, 1e-5)] == [
        "1",
        "1.1",
        "1e+06",
        "123456",
        "1e-05",
    ]
    assert go_time("2026-01-02T03:04:05.120000000+00:00", "l") == "2026-01-02T03:04:05.12Z"
    assert go_time("2026-01-02T03:04:05+02:00", "l") == "2026-01-02T03:04:05+02:00"
    assert go_json({"a": "<&>", "b": [1, None]}) == b'{"a":"\\u003c\\u0026\\u003e","b":[1,null]}'


def test_library_chart_without_values(store: Store, tmp_path: Path) -> None:
    root = write_chart(
        tmp_path / "lib",
        {
            "Chart.yaml": "apiVersion: v2\nname: lib\nversion: 0.1.0\ntype: library\n",
            "templates/_x.tpl": '{{- define "lib.x" -}}x{{- end }}\n',
        },
    )
    result = build_chart(store, root)
    assert list(members(output(store, result, "primary"))) == [
        "lib/Chart.yaml",
        "lib/templates/_x.tpl",
    ]


@pytest.mark.parametrize(
    ("rule", "top", "dropped"),
    [
        # meant for the top-level values files, also drops the subchart's
        ("values-*.yaml", "values-prod.yaml", "charts/sub/values-prod.yaml"),
        # a directory rule: the subchart's ci/ goes whole
        ("ci/", "ci/test-values.yaml", "charts/sub/ci"),
    ],
)
def test_an_unanchored_helmignore_pattern_dropping_a_subcharts_file_warns(
    store: Store, tmp_path: Path, rule: str, top: str, dropped: str
) -> None:
    chart_yaml = DEMO["Chart.yaml"] + "dependencies:\n  - name: sub\n    version: 1.0.0\n"
    files = {**DEMO, "Chart.yaml": chart_yaml, ".helmignore": f"# top-level only\n{rule}\n"}
    files[top] = "x: 1\n"
    sub = "apiVersion: v2\nname: sub\nversion: 1.0.0\n"
    files |= {"charts/sub/Chart.yaml": sub, f"charts/sub/{top}": "x: 2\n"}
    result = build_chart(store, write_chart(tmp_path / "demo", files))
    (warning,) = [w["message"] for w in result["warnings"]]
    assert f"demo/.helmignore:2: pattern {rule!r}" in warning, warning
    assert f"demo/{dropped}" in warning and "charts/" in warning
    assert not any(
        n.startswith("demo/charts/sub/") and top in n
        for n in members(output(store, result, "primary"))
    )
    # anchored, it means the top level only: no warning, and the subchart keeps its file
    files[".helmignore"] = f"/{rule}\n"
    result = build_chart(store, write_chart(tmp_path / "anchored", files))
    assert "warnings" not in result
    assert any(n.endswith(f"charts/sub/{top}") for n in members(output(store, result, "primary")))
