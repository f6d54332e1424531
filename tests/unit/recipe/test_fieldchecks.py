"""Single-value checks the models run (and the builders reuse to normalise)."""

from __future__ import annotations

import pytest

from nvkr.recipe import fieldchecks as fc


@pytest.mark.parametrize(
    ("text", "suggested"),
    [("0.20", "0.20.0"), ("1", "1.0.0"), ("1.2.3", "1.2.3"), ("0.05", "0.5.0"), ("1.2.3.4", None)],
)
def test_semver_suggestion(text: str, suggested: str | None) -> None:
    assert fc.semver_suggestion(text) == suggested


def test_paths_are_normalised_for_the_builders_and_refused_when_they_leave() -> None:
    assert fc.image_path("/usr/bin/") == "usr/bin" and fc.image_path("/") == ""
    assert fc.inner_path("./bin/x") == "bin/x" and fc.inner_path(".") == ""
    assert fc.relative_dir("charts/./x") == "charts/x" and fc.relative_dir(".") is None
    assert fc.archive_member("./crictl") == "crictl"
    for check, bad in (
        (fc.image_path, "usr/bin"),
        (fc.image_path, "/a//b"),
        (fc.inner_path, "../x"),
        (fc.relative_dir, "/abs"),
        (fc.archive_member, "."),
        (fc.dockerfile_path, "."),
    ):
        with pytest.raises(ValueError):
            check(bad)


def test_templates_are_left_for_the_check_after_rendering() -> None:
    assert fc.chart_version("{{ vars.chart }}") == "{{ vars.chart }}"
    assert fc.image_repository("{{ vars.repo }}") == "{{ vars.repo }}"
    with pytest.raises(ValueError, match="in lower case"):
        fc.image_repository("ghcr.io/NVKR/agent")
    with pytest.raises(ValueError, match="OCI tag of at most 128"):
        fc.chart_version("1.0.0-" + "a" * 130)


def test_an_apt_pin_is_one_exact_debian_version() -> None:
    for good in ("252.39-1~deb12u1", "4:12.2.0-3", "1.6.20~ds1-1+deb12u3", "{{ vars.driver }}"):
        assert fc.apt_version(good) == good
    for glob in ("252.*", "252.3?-1", "25[12].39-1"):
        with pytest.raises(ValueError, match="is a glob"):
            fc.apt_version(glob)
    with pytest.raises(ValueError, match="not a Debian version"):
        fc.apt_version("")
