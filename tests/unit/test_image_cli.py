"""``nvkr image ls|cat|diff`` on small real disks (mkfs.ext4, sfdisk, qemu-img; made in the
test): a QCOW2 given as is, a release set holding two machine images of one name (ARTIFACT and
--variant, the ambiguity error), the same set in a loopback registry, and the errors (a path not
in the image, a directory given to cat, an ARTIFACT with a disk file)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from nvkr.delivery.publish import publish_layout
from nvkr.oci.registry import RegistryClient
from tests.helpers.cli import invoke
from tests.helpers.disk import make_disk, make_tree, needs_tools
from tests.helpers.machine_sets import make_disk_set
from tests.helpers.registry import Registry

pytestmark = needs_tools
HOPPER = {"gpu": "hopper", "kubernetes": "1.36", "arch": "amd64"}
BLACKWELL = {"gpu": "blackwell", "kubernetes": "1.36", "arch": "amd64"}


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Disk A (:func:`make_tree`) and disk B (A with a file added, one removed, one changed in
    content, one in mode, a symlink retargeted), and a release set holding both as
    ``node-image`` for hopper (A) and blackwell (B)."""
    base = tmp_path_factory.mktemp("image-cli")
    tree_a = make_tree(base / "a")
    tree_b = make_tree(base / "b")
    (tree_b / "etc" / "added.conf").write_text("added = 1\n")
    (tree_b / "etc" / "hostname").unlink()
    (tree_b / "usr" / "bin" / "tool").write_bytes(b"#!/bin/bash\n")  # also tool-link's bytes
    os.chmod(tree_b / "srv" / "odd dir" / "-dash", 0o600)
    (tree_b / "usr" / "bin" / "short-link").unlink()
    os.symlink("tool-link", tree_b / "usr" / "bin" / "short-link")
    _, qa = make_disk(base / "disk-a", tree_a)
    _, qb = make_disk(base / "disk-b", tree_b)
    layout = make_disk_set(base / "set", [(HOPPER, qa), (BLACKWELL, qb)])
    return {"a": qa, "b": qb, "set": layout}


def test_ls_lists_a_directory_long_and_as_json(images: dict[str, Path]) -> None:
    code, out, err = invoke("image", "ls", images["a"], "/usr/bin", "-l")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "lrwxrwxrwx 0:0        107 /usr/bin/long-link -> /" + "long/" * 20 + "target",
        "lrwxrwxrwx 0:0          4 /usr/bin/short-link -> tool",
        "-rwsr-xr-x 0:0         10 /usr/bin/tool",
        "-rwsr-xr-x 0:0         10 /usr/bin/tool-link",
    ]
    code, out, _ = invoke("image", "ls", images["a"], "/srv/odd dir")
    assert code == 0 and "/srv/odd dir/new\\nline" in out.splitlines()
    assert "/srv/odd dir/latin1-\\xff" in out.splitlines()
    code, out, _ = invoke("image", "ls", images["a"], "/etc", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["dir"] == "/etc" and doc["image"] == str(images["a"])
    assert doc["entries"] == [
        {"path": "/etc/hostname", "type": "file", "mode": "0644", "uid": 0, "gid": 0, "size": 5}
    ]
    code, out, _ = invoke("image", "ls", images["a"], "-R")
    assert code == 0 and "/usr/lib/grub/i386-pc -> /usr/lib/grub/i386-pc" in out
    assert "/usr/bin/tool" in out.splitlines() and "/" not in out.splitlines()


def test_ls_recursive_on_a_file_lists_the_file(images: dict[str, Path]) -> None:
    """-R on a file lists it, as without -R (``ls -R FILE``); a symlink as such."""
    for path, line in (
        ("/etc/hostname", "/etc/hostname"),
        ("/usr/bin/short-link", "/usr/bin/short-link -> tool"),
    ):
        code, out, err = invoke("image", "ls", images["a"], path, "-R")
        assert (code, err) == (0, ""), err
        assert out.splitlines() == [line]


def test_cat_writes_the_bytes_and_names_what_is_missing(images: dict[str, Path]) -> None:
    code, out, _ = invoke("image", "cat", images["a"], "/etc/hostname")
    assert (code, out) == (0, "node\n")
    code, out, _ = invoke("image", "cat", images["a"], "/usr/bin/short-link")  # followed
    assert (code, out) == (0, "#!/bin/sh\n")
    code, _, err = invoke("image", "cat", images["a"], "/etc/nope")
    assert code == 1
    assert f"error[NVKR-E-IMAGE-PATH]: /etc/nope: no such file in {images['a']}" in err
    code, _, err = invoke("image", "cat", images["a"], "/etc")
    assert code == 1 and "/etc: is a directory in" in err and "not a regular file" in err
    code, _, err = invoke("image", "ls", images["a"], "/nowhere")
    assert code == 1 and "/nowhere: no such file or directory in" in err
    code, _, err = invoke("image", "cat", images["a"])
    assert code == 2 and "needs a FILE" in err


def test_a_release_set_needs_the_artifact_and_a_variant_when_ambiguous(
    images: dict[str, Path],
) -> None:
    layout = images["set"]
    code, _, err = invoke("image", "ls", layout)
    assert code == 2 and "is a release set: name the machine image" in err and "node-image" in err
    code, _, err = invoke("image", "ls", layout, "node-image")
    assert code == 2 and "2 machine images named 'node-image'" in err
    assert "gpu=hopper,kubernetes=1.36,arch=amd64" in err
    assert "gpu=blackwell,kubernetes=1.36,arch=amd64" in err
    code, _, err = invoke("image", "ls", layout, "other-image")
    assert code == 2 and "holds no machine image named 'other-image'" in err
    code, _, err = invoke("image", "ls", layout, "node-image", "--variant", "gpu=ampere")
    assert code == 2 and "no machine image 'node-image' for --variant gpu=ampere" in err
    code, out, _ = invoke("image", "cat", layout, "node-image", "/etc/added.conf",
                          "--variant", "gpu=blackwell")  # fmt: skip
    assert (code, out) == (0, "added = 1\n")
    code, _, err = invoke("image", "cat", layout, "node-image", "/etc/added.conf",
                          "--variant", "gpu=hopper")  # fmt: skip
    assert code == 1
    assert f"no such file in node-image [hopper k8s1.36 amd64] of {layout}" in err
    code, _, err = invoke("image", "ls", images["a"], "node-image", "/etc")
    assert code == 2 and "is a disk image file: it takes no ARTIFACT" in err
    # SOURCE a release set and one more argument: that is the FILE (or DIR), ARTIFACT is missing
    code, _, err = invoke("image", "cat", layout, "/etc/hostname")
    assert code == 2 and "needs a FILE" not in err, err
    assert f"{layout} is a release set: give ARTIFACT before FILE /etc/hostname" in err
    assert f"hint: nvkr image cat {layout} node-image /etc/hostname (its machine images: " in err
    code, _, err = invoke("image", "ls", layout, "/etc")
    assert code == 2 and f"{layout} is a release set: give ARTIFACT before DIR /etc" in err
    code, _, err = invoke("image", "ls", images["a"], "/etc", "--variant", "gpu=hopper")
    assert code == 2 and "is a disk image file: it takes no ARTIFACT or --variant" in err


def _diff_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if not line.startswith(("A: ", "B: "))]


def test_diff_names_what_was_added_removed_and_changed(images: dict[str, Path]) -> None:
    code, out, err = invoke("image", "diff", images["a"], images["b"])
    assert (code, err) == (0, "")
    assert _diff_lines(out) == [
        "+ /etc/added.conf (file 0644 0:0)",
        "- /etc/hostname (file 0644 0:0)",
        "~ /srv/odd dir/-dash: mode 0644 -> 0600",
        "~ /usr/bin/short-link: target tool -> tool-link",
        "~ /usr/bin/tool: size 10 -> 12",
        "~ /usr/bin/tool-link: size 10 -> 12",
        "1 added, 1 removed, 4 changed",
    ]
    code, out, _ = invoke("image", "diff", images["a"], images["b"], "--json", "--exit-code")
    doc = json.loads(out)
    assert code == 1
    assert [e["path"] for e in doc["added"]] == ["/etc/added.conf"]
    assert [e["path"] for e in doc["removed"]] == ["/etc/hostname"]
    changes = {c["path"]: c["changes"] for c in doc["changed"]}
    assert changes["/usr/bin/short-link"] == {"target": ["tool", "tool-link"]}
    assert changes["/srv/odd dir/-dash"] == {"mode": ["0644", "0600"]}
    code, out, _ = invoke("image", "diff", images["a"], images["a"], "--exit-code")
    assert code == 0 and out.splitlines()[-1] == "0 added, 0 removed, 0 changed"


def test_diff_of_two_variants_of_one_set_compares_content(images: dict[str, Path]) -> None:
    layout = images["set"]
    code, out, err = invoke("image", "diff", layout, layout, "--artifact", "node-image",
                            "--variant-a", "gpu=hopper", "--variant-b", "gpu=blackwell")  # fmt: skip
    assert code == 0, err
    assert out.splitlines()[:2] == [
        f"A: node-image [hopper k8s1.36 amd64] of {layout}",
        f"B: node-image [blackwell k8s1.36 amd64] of {layout}",
    ]
    assert "~ /usr/bin/tool: size 10 -> 12" in out


@pytest.fixture(scope="module")
def pushed(registry: Registry, images: dict[str, Path]) -> str:
    repo = "image/set"
    report = publish_layout(images["set"], f"{registry.host}/{repo}", RegistryClient(registry.host))
    return f"{registry.host}/{repo}@{report.digest}"


def test_a_release_set_in_a_registry_is_read_through_its_blob(pushed: str) -> None:
    code, out, err = invoke("image", "cat", pushed, "node-image", "/etc/added.conf",
                            "--variant", "gpu=blackwell")  # fmt: skip
    assert (code, out) == (0, "added = 1\n"), err
    code, out, _ = invoke("image", "ls", pushed, "node-image", "/etc", "--variant", "gpu=hopper")
    assert (code, out) == (0, "/etc/hostname\n")


def test_same_size_content_changes_are_found_by_digest(tmp_path: Path) -> None:
    tree_a = make_tree(tmp_path / "a")
    tree_b = make_tree(tmp_path / "b")
    (tree_b / "etc" / "hostname").write_text("edon\n")
    _, qa = make_disk(tmp_path / "da", tree_a)
    _, qb = make_disk(tmp_path / "db", tree_b)
    code, out, _ = invoke("image", "diff", qa, qb, "--json")
    doc: dict[str, Any] = json.loads(out)
    assert code == 0 and [c["path"] for c in doc["changed"]] == ["/etc/hostname"]
    sha = doc["changed"][0]["changes"]["sha256"]
    assert sha == [hashlib.sha256(b"node\n").hexdigest(), hashlib.sha256(b"edon\n").hexdigest()]
