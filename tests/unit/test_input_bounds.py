"""Bounds on every untrusted input (issue 27): a billion-laughs YAML, a Jinja string repetition or
format-width bomb, and a 100 MB file, given as ``boot-test --user-data``/``--meta-data``, in a
recipe field a template reaches, or as a chart's values.yaml, are each refused with exit 2
naming the file and the limit (``nvkr.bounds``), before they cost minutes and gigabytes.

Each case runs in a subprocess under a timeout and an address-space cap: before the bounds, these
ran for minutes at gigabytes, and a test must not hang the suite or the host when it fails. When
they pass they allocate nothing large (the 100 MB files are sparse-free but written in chunks and
never read whole)."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from nvkr.bounds import MAX_FILE_BYTES, MAX_TEMPLATE_STRING, MAX_YAML_NODES
from tests.helpers import REPO
from tests.helpers.recipes import MINIMAL

#: seconds: a refusal takes well under one; running past this is the failure these tests catch
GUARD = 15
#: bytes of address space the subprocess may use: enough for nvkr, not for the bombs
ADDRESS_SPACE = 2 << 30

#: nine levels of nine aliases: 9**9 (387 million) strings once the aliases are expanded
LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True)
)
REPEAT = "{{ 'x' * 10**9 }}"
FORMAT = "{{ '%999999999s' % 'x' }}"
RANGE = "{{ range(10**9)|length }}"
META = "instance-id: i-1\nlocal-hostname: node-a\n"


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _run(argv: list[str], cwd: Path) -> tuple[int, str]:
    """Exit code and stderr of ``argv``; (-1, ...) when it ran past :data:`GUARD`."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "NVKR_CACHE": str(cwd / "store"),
           "NVKR_CONFIG": str(cwd / "no-config.yaml"), "PYTHONPATH": str(REPO)}  # fmt: skip
    try:
        proc = subprocess.run(
            argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=GUARD,
            preexec_fn=_limit,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return -1, f"still running after {GUARD} s"
    return proc.returncode, proc.stderr


def _nvkr(cwd: Path, *args: str) -> tuple[int, str]:
    return _run([sys.executable, "-m", "nvkr", *args], cwd)


def _big(path: Path, line: bytes = b"key: value\n", size: int = 100 << 20) -> Path:
    """A ``size``-byte YAML file of ``line`` repeated, written 1 MiB at a time."""
    chunk = line * ((1 << 20) // len(line))
    with path.open("wb") as f:
        f.write(line)
        for _ in range(size // len(chunk)):
            f.write(chunk)
    return path


@pytest.fixture
def image(tmp_path: Path) -> Path:
    path = tmp_path / "node.qcow2"
    path.write_bytes(b"QFI\xfb" + bytes(508))
    return path


def _boot_test(tmp_path: Path, image: Path, user_data: str | Path, meta: str | Path = META):
    ud = user_data if isinstance(user_data, Path) else tmp_path / "user-data.yaml"
    if not isinstance(user_data, Path):
        ud.write_text(user_data)
    md = meta if isinstance(meta, Path) else tmp_path / "meta-data.yaml"
    if not isinstance(meta, Path):
        md.write_text(meta)
    code, err = _nvkr(tmp_path, "boot-test", str(image), "--no-labels", "--user-data", str(ud),
                      "--meta-data", str(md))  # fmt: skip
    return code, err, ud, md


@pytest.mark.parametrize(
    ("name", "text", "limit"),
    [
        ("laughs", "#cloud-config\n" + LAUGHS, f"{MAX_YAML_NODES}"),
        ("repeat", f"## template: jinja\n#cloud-config\nhostname: \"{REPEAT}\"\n", f"{MAX_TEMPLATE_STRING}"),
        ("format", f"## template: jinja\n#cloud-config\nhostname: \"{FORMAT}\"\n", "format width"),
        # Jinja's own sandbox raised OverflowError here: an internal error, exit 1 (the trial)
        ("range", f"## template: jinja\n#cloud-config\nhostname: \"{RANGE}\"\n", "MAX_RANGE"),
    ],
)  # fmt: skip
def test_boot_test_refuses_a_user_data_bomb(tmp_path, image, name, text, limit) -> None:
    code, err, ud, _ = _boot_test(tmp_path, image, text)
    assert code == 2, err
    assert f"{ud}" in err and limit in err, err


def test_boot_test_refuses_a_100_mb_meta_data(tmp_path, image) -> None:
    md = _big(tmp_path / "meta-data.yaml", b"local-hostname: node-a\n")
    code, err, _, _ = _boot_test(tmp_path, image, '#cloud-config\nruncmd: ["true"]\n', md)
    assert code == 2, err
    assert f"{md}" in err and f"{MAX_FILE_BYTES}" in err, err


def test_boot_test_refuses_a_100_mb_user_data(tmp_path, image) -> None:
    ud = _big(tmp_path / "user-data.yaml", b"#cloud-config\n" + b"#" * 63 + b"\n")
    code, err, _, _ = _boot_test(tmp_path, image, ud)
    assert code == 2, err
    assert f"{ud}" in err and f"{MAX_FILE_BYTES}" in err, err


def test_boot_test_refuses_a_billion_laughs_meta_data(tmp_path, image) -> None:
    code, err, _, md = _boot_test(
        tmp_path, image, '## template: jinja\n#cloud-config\nruncmd: ["true"]\n', LAUGHS
    )
    assert code == 2, err
    assert f"{md}" in err and f"{MAX_YAML_NODES}" in err, err


@pytest.mark.parametrize(
    ("template", "limit"),
    [(REPEAT, f"{MAX_TEMPLATE_STRING}"), (FORMAT, "format width"), (RANGE, "MAX_RANGE")],
)
def test_validate_refuses_a_template_bomb_in_a_recipe_field(tmp_path, template, limit) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(MINIMAL + f'vars:\n  big: "{template}"\n')
    code, err = _nvkr(tmp_path, "validate", str(recipe))
    assert code == 2, err
    assert f"{recipe}" in err and "vars.big" in err and limit in err, err
    assert "NVKR-E-LIMIT" in err, err  # the README's exit-code table: an input over a bound


def test_validate_refuses_a_100_mb_recipe(tmp_path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(MINIMAL)
    with recipe.open("ab") as f:
        f.write(b"#" * (100 << 20) + b"\n")
    code, err = _nvkr(tmp_path, "validate", str(recipe))
    assert code == 2, err
    assert f"{recipe}" in err and f"{MAX_FILE_BYTES}" in err, err


_SET_IMAGES = """
import sys
from pathlib import Path
from nvkr.errors import NvkrError
from nvkr.helm.values import set_images
try:
    set_images(Path(sys.argv[1]).read_bytes(), {"image": ("r", "sha256:" + "0" * 64)}, sys.argv[1])
except NvkrError as e:
    print(e.render(), file=sys.stderr)
    sys.exit(e.exit_code)
"""


@pytest.mark.parametrize("kind", ["laughs", "huge"])
def test_a_values_file_bomb_is_refused(tmp_path, kind) -> None:
    values = tmp_path / "values.yaml"
    if kind == "laughs":
        values.write_text(LAUGHS)
    else:
        _big(values, b"replicas: 1\n", MAX_FILE_BYTES * 2)
    code, err = _run([sys.executable, "-c", _SET_IMAGES, str(values)], tmp_path)
    assert code == 2, err
    limit = MAX_YAML_NODES if kind == "laughs" else MAX_FILE_BYTES
    assert f"{values}" in err and f"{limit}" in err, err


def test_a_100_mb_rules_file_is_named_as_the_rules_file(tmp_path) -> None:
    """``--rules FILE`` over the size bound: the message calls it the rules file it is, not a
    recipe (found by the fresh-user trial)."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(MINIMAL)
    rules = _big(tmp_path / "rules.yaml")
    code, err = _nvkr(tmp_path, "validate", str(recipe), "--rules", str(rules))
    assert code == 2, err
    assert f"{rules}: the rules file is" in err and f"{MAX_FILE_BYTES}" in err, err
