"""The ``apt`` source kind against a real, signed apt repository on loopback (tests/helpers/aptrepo.py):
lock resolves the closure from the signed indexes and keeps every .deb; build never resolves,
takes the store's copies without network and names the package when one is missing; bad
signatures, unknown versions, replaced .debs and edited lock entries are clear errors."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from nvkr.errors import AptError, ChecksumError, FetchError, IntegrityError, LockError, OfflineError
from nvkr.fetch.apt import ensure, read_manifest, resolve
from nvkr.fetch.context import FetchContext
from nvkr.recipe.sources import AptSource
from nvkr.store import Store
from tests.helpers import aptrepo, lock_entry
from tests.helpers.aptrepo import DRIVER_VERSION, TOOLKIT_VERSION, AptRepo


def _source(repo: AptRepo, packages: dict[str, str], arch: str = "amd64") -> AptSource:
    assert repo.url is not None
    return AptSource.model_validate(
        {
            "apt": {
                "gpu": {
                    "url": repo.url,
                    "suite": repo.suite,
                    "components": list(repo.components),
                    "keyring": str(repo.keyring),
                }
            },
            "arch": arch,
            "base": "none",
            "packages": packages,
        },
        strict=False,
    )


TOOLKIT = {"nvidia-container-toolkit": TOOLKIT_VERSION}


def test_lock_resolves_closure_from_signed_indexes(
    gpu_apt_repo: AptRepo, store: Store, tmp_path: Path
) -> None:
    src = _source(gpu_apt_repo, TOOLKIT)
    entry = resolve("gpu-stack", src, FetchContext(store=store), base_dir=tmp_path)
    names = {p["name"]: p for p in entry["packages"]}
    # the toolkit pulls its tools and library through Depends
    assert set(names) == {
        "nvidia-container-toolkit",
        "libnvidia-container-tools",
        "libnvidia-container1",
    }
    for name, pkg in names.items():
        built = gpu_apt_repo.deb(name, arch="amd64")
        data = (gpu_apt_repo.root / built.path).read_bytes()
        assert pkg["sha256"] == "sha256:" + hashlib.sha256(data).hexdigest()
        assert pkg["size"] == len(data)
        assert pkg["version"] == TOOLKIT_VERSION and pkg["arch"] == "amd64"
        assert pkg["url"].startswith(gpu_apt_repo.url + "/pool/main/")
        assert store.has_blob(pkg["sha256"])
    assert entry["kind"] == "apt" and entry["arch"] == "amd64"
    assert entry["keyrings"]["gpu"].startswith("sha256:")
    manifest = read_manifest(store.read_blob(entry["digest"]))
    assert manifest["packages"] == entry["packages"]


def test_lock_is_repeatable_and_per_arch(
    gpu_apt_repo: AptRepo, store: Store, tmp_path: Path
) -> None:
    ctx = FetchContext(store=store)
    one = resolve("g", _source(gpu_apt_repo, TOOLKIT), ctx, base_dir=tmp_path)
    two = resolve("g", _source(gpu_apt_repo, TOOLKIT), ctx, base_dir=tmp_path)
    arm = resolve("g", _source(gpu_apt_repo, TOOLKIT, "arm64"), ctx, base_dir=tmp_path)
    # the lock's time (the snapshot member: when, not what) is the only member that may move
    assert one.pop("snapshot")["archives"] == two.pop("snapshot")["archives"] == {}
    assert one == two
    assert {p["arch"] for p in arm["packages"]} == {"arm64"}
    assert arm["digest"] != one["digest"]


def test_meta_package_pins_driver_exactly(
    gpu_apt_repo: AptRepo, store: Store, tmp_path: Path
) -> None:
    src = _source(gpu_apt_repo, {"nvidia-driver-570": DRIVER_VERSION})
    entry = resolve("g", src, FetchContext(store=store), base_dir=tmp_path)
    got = {p["name"]: (p["version"], p["arch"]) for p in entry["packages"]}
    assert got["nvidia-driver-570"] == (DRIVER_VERSION, "all")
    assert got["nvidia-utils-570"] == (DRIVER_VERSION, "amd64")


def test_unknown_version_names_package(gpu_apt_repo: AptRepo, store: Store, tmp_path: Path) -> None:
    src = _source(gpu_apt_repo, {"nvidia-container-toolkit": "9.9.9-1"})
    with pytest.raises(AptError) as err:
        resolve("gpu-stack", src, FetchContext(store=store), base_dir=tmp_path)
    assert (
        "nvidia-container-toolkit version 9.9.9-1 is not in the repositories" in err.value.message
    )
    assert f"they have: {TOOLKIT_VERSION}" in err.value.message
    assert err.value.exit_code == 1


def test_unknown_version_of_a_second_package_lists_its_versions(
    gpu_apt_repo: AptRepo, store: Store, tmp_path: Path
) -> None:
    src = _source(gpu_apt_repo, {**TOOLKIT, "nvidia-driver-570": "570.1-1"}, "arm64")
    with pytest.raises(AptError) as err:
        resolve("gpu-stack", src, FetchContext(store=store), base_dir=tmp_path)
    assert "nvidia-driver-570 version 570.1-1 is not in the repositories" in err.value.message
    assert f"they have: {DRIVER_VERSION}" in err.value.message
    assert TOOLKIT_VERSION not in err.value.message


def test_unknown_package_names_it(gpu_apt_repo: AptRepo, store: Store, tmp_path: Path) -> None:
    src = _source(gpu_apt_repo, {"nvidia-fabricmanager-570": "1-1"})
    with pytest.raises(AptError, match="nvidia-fabricmanager-570"):
        resolve("gpu-stack", src, FetchContext(store=store), base_dir=tmp_path)


def test_bad_release_signature_is_an_integrity_failure(
    gpu_apt_repo: AptRepo, store: Store, tmp_path: Path
) -> None:
    gpu_apt_repo.resign_with_other_key()
    with pytest.raises(IntegrityError) as err:
        resolve(
            "gpu-stack",
            _source(gpu_apt_repo, TOOLKIT),
            FetchContext(store=store),
            base_dir=tmp_path,
        )
    assert "Release signature does not verify" in err.value.message
    assert err.value.exit_code == 3


def test_missing_keyring_is_named(gpu_apt_repo: AptRepo, store: Store, tmp_path: Path) -> None:
    src = _source(gpu_apt_repo, TOOLKIT).model_copy(
        update={
            "apt": {
                "gpu": _source(gpu_apt_repo, TOOLKIT)
                .apt["gpu"]
                .model_copy(update={"keyring": "keys/missing.gpg"})
            }
        }
    )
    with pytest.raises(AptError, match=r"keyring .*keys/missing.gpg does not exist"):
        resolve("g", src, FetchContext(store=store), base_dir=tmp_path)


def test_replaced_deb_fails_checksum_and_stores_nothing(
    gpu_apt_repo: AptRepo, store: Store, tmp_path: Path
) -> None:
    gpu_apt_repo.replace_deb("libnvidia-container1", b"not the indexed package", arch="amd64")
    with pytest.raises(ChecksumError) as err:
        resolve("g", _source(gpu_apt_repo, TOOLKIT), FetchContext(store=store), base_dir=tmp_path)
    assert "libnvidia-container1" in err.value.message
    assert err.value.exit_code == 3


def _locked(repo: AptRepo, store: Store, tmp_path: Path) -> tuple[AptSource, dict[str, Any]]:
    src = _source(repo, TOOLKIT)
    return src, resolve("g", src, FetchContext(store=store), base_dir=tmp_path)


def test_ensure_uses_the_store_without_network(
    gpu_apt_repo: AptRepo, store: Store, tmp_path: Path
) -> None:
    src, entry = _locked(gpu_apt_repo, store, tmp_path)
    gpu_apt_repo.close()  # the repository is gone: only the store can answer
    digest = ensure("g", src, entry, FetchContext(store=store, offline=True), base_dir=tmp_path)
    assert digest == entry["digest"]


def test_ensure_refetches_exactly_the_locked_files(gpu_apt_repo: AptRepo, tmp_path: Path) -> None:
    src, entry = _locked(gpu_apt_repo, Store(tmp_path / "s1"), tmp_path)
    fresh = Store(tmp_path / "s2")
    before = len(gpu_apt_repo.requests)
    digest = ensure("g", src, entry, FetchContext(store=fresh), base_dir=tmp_path)
    assert digest == entry["digest"]
    asked = gpu_apt_repo.requests[before:]
    # no index is read at build time: only the three .debs
    assert len(asked) == 3 and all(p.endswith(".deb") for p in asked)
    assert all(fresh.has_blob(p["sha256"]) for p in entry["packages"])


def test_ensure_offline_names_missing_package(gpu_apt_repo: AptRepo, tmp_path: Path) -> None:
    src, entry = _locked(gpu_apt_repo, Store(tmp_path / "s1"), tmp_path)
    with pytest.raises(OfflineError, match=r"package libnvidia-container-tools 1.17.8-1 \(http"):
        ensure(
            "g",
            src,
            entry,
            FetchContext(store=Store(tmp_path / "s2"), offline=True),
            base_dir=tmp_path,
        )


def test_ensure_names_package_the_mirror_no_longer_serves(
    gpu_apt_repo: AptRepo, tmp_path: Path
) -> None:
    src, entry = _locked(gpu_apt_repo, Store(tmp_path / "s1"), tmp_path)
    (gpu_apt_repo.root / gpu_apt_repo.deb("nvidia-container-toolkit", arch="amd64").path).unlink()
    with pytest.raises(FetchError) as err:
        ensure("g", src, entry, FetchContext(store=Store(tmp_path / "s2")), base_dir=tmp_path)
    assert "package nvidia-container-toolkit 1.17.8-1 (amd64)" in err.value.message
    assert "is not in the store and the mirror does not serve it" in err.value.message


def test_ensure_downloads_the_debs_at_once(
    gpu_apt_repo: AptRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The three locked .debs are downloaded concurrently: each download waits until all three
    have started (one at a time, the first would wait in vain and the barrier break)."""
    import threading

    from nvkr.fetch import debs

    src, entry = _locked(gpu_apt_repo, Store(tmp_path / "s1"), tmp_path)
    assert len(entry["packages"]) == 3
    started = threading.Barrier(3, timeout=10)
    real = debs.download

    def download(*args: Any, **kwargs: Any) -> Any:
        started.wait()
        return real(*args, **kwargs)

    monkeypatch.setattr(debs, "download", download)
    fresh = Store(tmp_path / "s2")
    sizes: list[int] = []
    from nvkr.monitor import transfer

    with transfer.reporting(sizes.append):
        assert (
            ensure("g", src, entry, FetchContext(store=fresh), base_dir=tmp_path)
            == (entry["digest"])
        )
    assert all(fresh.has_blob(p["sha256"]) for p in entry["packages"])
    # the listener sees the bytes of all three as one count, which only grows
    assert sizes == sorted(sizes) and sizes[-1] == sum(p["size"] for p in entry["packages"])


def test_ensure_names_the_first_package_in_lock_order_that_fails(
    gpu_apt_repo: AptRepo, tmp_path: Path
) -> None:
    """Two .debs gone from the mirror, downloaded at once: the error names the first in the
    lock's order whichever fails first, and nothing partial is left in the store."""
    src, entry = _locked(gpu_apt_repo, Store(tmp_path / "s1"), tmp_path)
    gone = entry["packages"][1:]
    for p in gone:
        (gpu_apt_repo.root / gpu_apt_repo.deb(p["name"], arch="amd64").path).unlink()
    fresh = Store(tmp_path / "s2")
    with pytest.raises(FetchError) as err:
        ensure("g", src, entry, FetchContext(store=fresh), base_dir=tmp_path)
    assert f"package {gone[0]['name']} {gone[0]['version']} (amd64)" in err.value.message
    assert gone[1]["name"] not in err.value.message
    assert not any(fresh.has_blob(p["sha256"]) for p in gone)
    assert list((fresh.root / "tmp").iterdir()) == []


def test_ensure_refuses_an_edited_lock_entry(gpu_apt_repo: AptRepo, tmp_path: Path) -> None:
    src, entry = _locked(gpu_apt_repo, Store(tmp_path / "s1"), tmp_path)
    edited = dict(entry, packages=[dict(p) for p in entry["packages"]])
    edited["packages"][0]["sha256"] = "sha256:" + "0" * 64
    with pytest.raises(LockError, match="hashes to"):
        ensure("g", src, edited, FetchContext(store=Store(tmp_path / "s2")), base_dir=tmp_path)
    pinned = _source(gpu_apt_repo, {"nvidia-container-toolkit": "1.17.9-1"})
    with pytest.raises(
        LockError,
        match=re.escape(
            "has nvidia-container-toolkit 1.17.8-1, the recipe says nvidia-container-toolkit 1.17.9-1"
        ),
    ):
        ensure("g", pinned, entry, FetchContext(store=Store(tmp_path / "s2")), base_dir=tmp_path)


# -- flat repositories and keyrings pinned by fingerprint ------------------------------------------
def _flat_source(repo: AptRepo, keyring: object, packages: dict[str, str]) -> AptSource:
    assert repo.url is not None
    return AptSource.model_validate(
        {
            "apt": {"cuda": {"url": repo.url + "/", "suite": "/", "keyring": keyring}},
            "arch": "amd64",
            "base": "none",
            "packages": packages,
        },
        strict=False,
    )


@pytest.fixture
def flat_repo(apt_repos: Any) -> AptRepo:
    """NVIDIA's layout: ``deb URL /`` with Packages and a signed Release at the root, and the
    public key published beside them (``/repo.pub``, as ``3bf863cc.pub`` is)."""
    repo: AptRepo = apt_repos(
        "flat", suite="/", components=(), packages=aptrepo.gpu_stack_repo_packages()
    )
    (repo.root / "repo.pub").write_bytes(repo.keyring.read_bytes())
    return repo


def _fingerprint(repo: AptRepo) -> str:
    assert repo._gpg is not None
    return repo._gpg.fingerprint


def test_flat_repository_with_a_fetched_keyring_locks_and_builds_offline(
    flat_repo: AptRepo, tmp_path: Path
) -> None:
    key = {"url": f"{flat_repo.url}/repo.pub", "fingerprint": _fingerprint(flat_repo).lower()}
    src = _flat_source(flat_repo, key, TOOLKIT)
    assert src.apt["cuda"].components == [] and src.apt["cuda"].flat
    store = Store(tmp_path / "store")
    entry = resolve("gpu", src, FetchContext(store=store), base_dir=tmp_path)
    assert {p["name"] for p in entry["packages"]} == {
        "nvidia-container-toolkit",
        "libnvidia-container-tools",
        "libnvidia-container1",
    }
    key_digest = "sha256:" + hashlib.sha256(flat_repo.keyring.read_bytes()).hexdigest()
    assert entry["keyrings"] == {"cuda": key_digest}
    assert store.has_blob(key_digest)
    # a fresh store offline lacks the keyring: named
    fresh = Store(tmp_path / "fresh")
    with pytest.raises(OfflineError, match="keyring of apt repository 'cuda'"):
        ensure("gpu", src, entry, FetchContext(store=fresh, offline=True), base_dir=tmp_path)
    # online it fetches exactly the locked key and packages
    assert (
        ensure("gpu", src, entry, FetchContext(store=fresh), base_dir=tmp_path) == entry["digest"]
    )
    assert fresh.has_blob(key_digest)


def test_every_apt_repository_whose_keyring_cannot_be_fetched_is_named(
    flat_repo: AptRepo, tmp_path: Path
) -> None:
    # docker's and NVIDIA's keyrings both unreachable: one error names both repositories (a
    # user routing the first one found the second only on the next run).
    fpr = _fingerprint(flat_repo)
    src = AptSource.model_validate(
        {
            "apt": {
                repo: {
                    "url": flat_repo.url + f"/{repo}/",
                    "suite": "/",
                    "keyring": {"url": f"{flat_repo.url}/{repo}.pub", "fingerprint": fpr},
                }
                for repo in ("cuda", "docker")
            },
            "arch": "amd64",
            "base": "none",
            "packages": TOOLKIT,
        },
        strict=False,
    )
    with pytest.raises(FetchError) as err:
        resolve("gpu", src, FetchContext(store=Store(tmp_path / "s")), base_dir=tmp_path)
    message = err.value.message
    assert message.startswith(
        "source 'gpu': the keyrings of 2 apt repositories could not be fetched:"
    ), message
    assert "apt repository 'cuda' keyring" in message and "/cuda.pub" in message
    assert "apt repository 'docker' keyring" in message and "/docker.pub" in message


def test_keyring_with_another_fingerprint_is_refused(flat_repo: AptRepo, tmp_path: Path) -> None:
    other = "0123456789ABCDEF0123456789ABCDEF01234567"
    src = _flat_source(
        flat_repo, {"url": f"{flat_repo.url}/repo.pub", "fingerprint": other}, TOOLKIT
    )
    with pytest.raises(IntegrityError) as err:
        resolve("gpu", src, FetchContext(store=Store(tmp_path / "s")), base_dir=tmp_path)
    assert err.value.exit_code == 3
    assert other in err.value.message and _fingerprint(flat_repo).upper() in err.value.message


def test_a_keyring_that_changed_since_the_lock_is_refused(
    flat_repo: AptRepo, tmp_path: Path
) -> None:
    key = {"url": f"{flat_repo.url}/repo.pub", "fingerprint": _fingerprint(flat_repo)}
    src = _flat_source(flat_repo, key, TOOLKIT)
    entry = resolve("gpu", src, FetchContext(store=Store(tmp_path / "a")), base_dir=tmp_path)
    (flat_repo.root / "repo.pub").write_bytes(flat_repo.keyring.read_bytes() + b"\x00")
    with pytest.raises(ChecksumError):
        ensure("gpu", src, entry, FetchContext(store=Store(tmp_path / "b")), base_dir=tmp_path)


def test_flat_repository_takes_no_components() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="flat repository"):
        AptSource.model_validate(
            {
                "apt": {"x": {"url": "http://h/", "suite": "/", "components": ["main"]}},
                "arch": "amd64",
            },
            strict=False,
        )
    with pytest.raises(ValidationError, match="at least one component"):
        AptSource.model_validate(
            {
                "apt": {"x": {"url": "http://h/", "suite": "bookworm", "components": []}},
                "arch": "amd64",
            },
            strict=False,
        )


def test_a_repository_url_with_credentials_locks_and_fetches_without_writing_them(
    gpu_apt_repo: AptRepo, tmp_path: Path
) -> None:
    """Issue 27: the password of a repository URL's user info reaches the repository, at lock
    and at build, but never the lock entry or the manifest the store keeps."""
    password = "apt-s3cret%21"  # percent-encoded: the server sees apt-s3cret!
    assert gpu_apt_repo.url is not None
    token = base64.b64encode(b"reader:apt-s3cret!").decode()
    gpu_apt_repo.authorization = f"Basic {token}"
    bare = gpu_apt_repo.url
    gpu_apt_repo.url = bare.replace("http://", f"http://reader:{password}@")
    src = _source(gpu_apt_repo, TOOLKIT)
    store = Store(tmp_path / "s1")
    entry = resolve("g", src, FetchContext(store=store), base_dir=tmp_path)
    text = json.dumps(entry) + store.read_blob(entry["digest"]).decode()
    assert "apt-s3cret" not in text and "reader" not in text
    assert all(p["url"].startswith(bare + "/pool/") for p in entry["packages"])
    fresh = Store(tmp_path / "s2")
    digest = ensure("g", src, entry, FetchContext(store=fresh), base_dir=tmp_path)
    assert digest == entry["digest"]
    assert all(fresh.has_blob(p["sha256"]) for p in entry["packages"])


def test_a_build_names_the_debs_it_lacks_and_counts_their_bytes(
    gpu_apt_repo: AptRepo, tmp_path: Path
) -> None:
    """A store that holds one of the three locked .debs: the build's fetch line says it lacks
    two of them, and its transfer report counts up to their sizes (the live display's total)."""
    import os
    from types import SimpleNamespace

    from nvkr.builders.api import ResolvedSource
    from nvkr.execute import _SourceGate
    from nvkr.monitor.events import Event, SourceFetch, Transfer
    from nvkr.monitor.lines import event_lines

    first = Store(tmp_path / "s1")
    src, entry = _locked(gpu_apt_repo, first, tmp_path)
    fresh = Store(tmp_path / "s2")
    held, *lacking = entry["packages"]
    os.link(first.blob_path(held["sha256"]), fresh.blob_path(held["sha256"]))
    events: list[Event] = []
    gate = _SourceGate(FetchContext(store=fresh), events.append)
    resolved = ResolvedSource("g", src, lock_entry(entry), tmp_path)
    gate.ensure(SimpleNamespace(sources={"g": resolved}))  # type: ignore[arg-type]

    (fetch,) = [e for e in events if isinstance(e, SourceFetch)]
    assert fetch.debs == (2, 3) and fetch.to_json()["debsMissing"] == 2
    assert event_lines(fetch) == ["  fetching g 2 of 3 .debs (amd64)"]
    transfers = [e for e in events if isinstance(e, Transfer)]
    assert {t.total for t in transfers} == {sum(p["size"] for p in lacking)}
    assert transfers[-1].finished and transfers[-1].done == transfers[-1].total

    # the store keeps the source's package list but lost a .deb (store gc, verify --repair):
    # the build fetches it again, and says so, as it does for a source it never had
    lost = lacking[0]
    fresh.blob_path(lost["sha256"]).unlink()
    assert fresh.has_blob(entry["digest"])
    events.clear()
    _SourceGate(FetchContext(store=fresh), events.append).ensure(
        SimpleNamespace(sources={"g": resolved})  # type: ignore[arg-type]
    )
    (fetch,) = [e for e in events if isinstance(e, SourceFetch)]
    assert event_lines(fetch) == ["  fetching g 1 of 3 .debs (amd64)"]
    assert [e.total for e in events if isinstance(e, Transfer)][-1] == lost["size"]
    assert fresh.has_blob(lost["sha256"])
