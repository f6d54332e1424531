"""The owner's Secure Boot key and certificate (nvkr.secureboot.owner) and kernel module
signatures (nvkr.secureboot.modsig), on modules signed as the kernel's sign-file signs them:
``openssl cms -sign -binary -noattr -nocerts`` (sign-file's CMS_NOATTR | CMS_NOCERTS |
CMS_DETACHED | CMS_BINARY), the PKCS#7 appended with struct module_signature and the magic.
The real sign-file signs in tests/integration/test_dkms_rootfs.py, on a DKMS-built module."""

from __future__ import annotations

import datetime
import hashlib
import lzma
import stat
import struct
import subprocess
import tarfile
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID

from nvkr.builders.signed_modules.builder import _published, compress_module
from nvkr.errors import BuildError, IntegrityError, UsageError
from nvkr.secureboot import modsig
from nvkr.secureboot.owner import (
    OwnerKey,
    load_owner_key,
    owner_key_for,
    parse_certificate,
    provide_owner_key,
)
from nvkr.secureboot.published import PublishedSignatures


def _cert(key: object, cn: str = "Test owner") -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime(2025, 12, 1, tzinfo=datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())  # type: ignore[attr-defined]
        .serial_number(1234567)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=3650))
    )
    algorithm = None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    return builder.sign(key, algorithm)  # type: ignore[arg-type]


def _pem_key(key: object) -> bytes:
    return key.private_bytes(  # type: ignore[attr-defined, no-any-return]
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@pytest.fixture(scope="module")
def owner(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """An RSA-2048 key and its self-signed certificate (PEM files)."""
    d = tmp_path_factory.mktemp("owner")
    key = rsa.generate_private_key(65537, 2048)
    (d / "owner.key").write_bytes(_pem_key(key))
    (d / "owner.key").chmod(0o600)
    (d / "owner.crt").write_bytes(_cert(key).public_bytes(serialization.Encoding.PEM))
    return d / "owner.key", d / "owner.crt"


def _sign_like_sign_file(module: bytes, key: Path, cert: Path, tmp: Path) -> bytes:
    (tmp / "m.ko").write_bytes(module)
    subprocess.run(
        ["openssl", "cms", "-sign", "-binary", "-noattr", "-nocerts", "-nosmimecap",
         "-md", "sha256", "-signer", cert, "-inkey", key, "-in", tmp / "m.ko",
         "-outform", "DER", "-out", tmp / "m.p7"],
        check=True, capture_output=True,
    )  # fmt: skip
    p7 = (tmp / "m.p7").read_bytes()
    return module + p7 + struct.pack(">BBBBB3xI", 0, 0, 2, 0, 0, len(p7)) + modsig.MAGIC


MODULE = b"\x7fELF" + bytes(range(256)) * 40


def test_a_module_signed_as_sign_file_signs_verifies_and_keeps_its_payload(
    owner: tuple[Path, Path], tmp_path: Path
) -> None:
    key, crt = owner
    cert = parse_certificate(crt.read_bytes(), str(crt))
    signed = _sign_like_sign_file(MODULE, key, crt, tmp_path)
    sig = modsig.verify_module(signed, cert, "m.ko")
    assert sig.digest == "sha256" and sig.serial == 1234567
    assert modsig.unsigned_payload(signed) == MODULE
    # compressed as the kernel build compresses modules: the same checks through xz
    packed = compress_module(signed)
    assert packed.startswith(modsig.XZ_MAGIC)
    assert modsig.verify_module(packed, cert, "m.ko.xz") == sig
    assert modsig.unsigned_payload(packed) == MODULE
    # and byte for byte what xz(1) writes with the kernel's module options, one thread
    (tmp_path / "s.ko").write_bytes(signed)
    xz = subprocess.run(
        ["xz", "--check=crc32", "--lzma2=dict=1MiB", "-T1", "-c", tmp_path / "s.ko"],
        check=True, capture_output=True,
    )  # fmt: skip
    assert xz.stdout == packed
    assert lzma.decompress(packed) == signed


def test_a_changed_module_another_signer_or_no_signature_is_refused(
    owner: tuple[Path, Path], tmp_path: Path
) -> None:
    key, crt = owner
    cert = parse_certificate(crt.read_bytes(), str(crt))
    signed = bytearray(_sign_like_sign_file(MODULE, key, crt, tmp_path))
    signed[100] ^= 1  # a byte of the module, after signing
    with pytest.raises(IntegrityError, match="changed after it was signed"):
        modsig.verify_module(bytes(signed), cert, "m.ko")
    with pytest.raises(IntegrityError, match=r"m\.ko is not signed"):
        modsig.verify_module(MODULE, cert, "m.ko")
    other = rsa.generate_private_key(65537, 2048)
    (tmp_path / "o.key").write_bytes(_pem_key(other))
    (tmp_path / "o.crt").write_bytes(
        _cert(other, "Someone else").public_bytes(serialization.Encoding.PEM)
    )
    by_other = _sign_like_sign_file(MODULE, tmp_path / "o.key", tmp_path / "o.crt", tmp_path)
    with pytest.raises(IntegrityError, match="signed by another key"):
        modsig.verify_module(by_other, cert, "m.ko")
    # a trailer whose length runs past the module's start
    bad = MODULE[:10] + struct.pack(">BBBBB3xI", 0, 0, 2, 0, 0, 999) + modsig.MAGIC
    with pytest.raises(IntegrityError, match="claims 999 bytes"):
        modsig.split_module(bad, "m.ko")


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda: ec.generate_private_key(ec.SECP256R1()), "ECDSA key makes randomized"),
        (ed25519.Ed25519PrivateKey.generate, "EdDSA key"),
        (lambda: rsa.generate_private_key(65537, 1024), "1024 bits is too short"),
    ],
)
def test_keys_that_cannot_sign_reproducibly_are_refused_saying_why(
    make: object, reason: str, tmp_path: Path
) -> None:
    key = make()  # type: ignore[operator]
    (tmp_path / "k.pem").write_bytes(_pem_key(key))
    with pytest.raises(UsageError, match=reason) as e:
        load_owner_key(tmp_path / "k.pem")
    assert str(tmp_path / "k.pem") in str(e.value)
    der = _cert(key).public_bytes(serialization.Encoding.DER)
    with pytest.raises(UsageError, match=reason):
        parse_certificate(der, "owner.der")


def test_an_rsa_pss_certificate_is_refused_for_its_random_salt(tmp_path: Path) -> None:
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa-pss", "-pkeyopt", "rsa_keygen_bits:2048",
         "-nodes", "-subj", "/CN=pss/", "-keyout", tmp_path / "k", "-out", tmp_path / "c"],
        check=True, capture_output=True,
    )  # fmt: skip
    with pytest.raises(UsageError, match="RSASSA-PSS key: PSS draws a random salt"):
        parse_certificate((tmp_path / "c").read_bytes(), "pss.crt")


def test_certificates_are_read_as_pem_or_der_and_garbage_is_named(
    owner: tuple[Path, Path],
) -> None:
    _, crt = owner
    pem = parse_certificate(crt.read_bytes(), "a.crt")
    der = parse_certificate(pem.der, "a.der")
    assert pem.digest == der.digest and pem.subject == "CN=Test owner"
    with pytest.raises(UsageError, match=r"not-a-cert: is not an X\.509 certificate"):
        parse_certificate(b"hello", "not-a-cert:")
    with pytest.raises(UsageError, match=r"is not an X\.509 certificate"):
        parse_certificate(b"-----BEGIN PUBLIC KEY-----\n", "pub.pem")


def test_the_key_is_matched_to_the_certificate_and_never_shown(
    owner: tuple[Path, Path], tmp_path: Path
) -> None:
    key_path, crt = owner
    key = load_owner_key(key_path)
    cert = parse_certificate(crt.read_bytes(), str(crt))
    assert key.matches(cert) and str(key_path) in repr(key)
    pem = key_path.read_text()
    assert "PRIVATE" not in repr(key)
    other = OwnerKey("other.key", rsa.generate_private_key(65537, 2048))
    with pytest.raises(UsageError, match=r"other\.key does not match the certificate") as e:
        other.check_matches(cert)
    assert pem.splitlines()[1] not in str(e.value)
    # no key given: the action and the certificate are named, with the option to pass
    provide_owner_key(None)
    with pytest.raises(UsageError, match="signed-modules/x signs with the owner key") as e:
        owner_key_for(cert, "signed-modules/x")
    assert e.value.hint is not None and "--secure-boot-key" in e.value.hint
    provide_owner_key(key)
    try:
        assert owner_key_for(cert, "signed-modules/x") is key
    finally:
        provide_owner_key(None)
    # the file a tool reads the key from: 0600 while used, gone afterwards, even on failure
    with pytest.raises(RuntimeError), key.pem_file(tmp_path) as f:
        assert stat.S_IMODE(f.stat().st_mode) == 0o600
        assert load_owner_key(f).matches(cert)
        raise RuntimeError
    assert not f.exists()


def test_an_environment_variable_holds_the_key(
    owner: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    key_path, crt = owner
    monkeypatch.setenv("SB_KEY", key_path.read_text())
    assert load_owner_key("env://SB_KEY").matches(parse_certificate(crt.read_bytes(), "c"))
    with pytest.raises(UsageError, match="is not a PEM private key"):
        load_owner_key(crt)


def _published_with(signed: bytes) -> PublishedSignatures:
    """Published signatures holding ``signed`` (as an image would), no image read."""
    published = PublishedSignatures(images=[])
    payload = modsig.split_module(signed).payload
    digest = "sha256:" + hashlib.sha256(payload).hexdigest()
    published._by_payload = {digest: (signed, "img [amd64]:/usr/lib/modules/k/updates/m.ko.xz")}
    return published


def test_a_rebuild_without_the_key_takes_each_signature_from_the_set_checked(
    owner: tuple[Path, Path], tmp_path: Path
) -> None:
    """verify --rebuild's signing actions: the set's signature over exactly the rebuilt module,
    by the recipe's certificate, compressed as a signing build compresses; a module the set has
    no signature for, or a signature that no longer verifies, fails the action."""
    key, crt = owner
    cert = parse_certificate(crt.read_bytes(), str(crt))
    signed = _sign_like_sign_file(MODULE, key, crt, tmp_path)
    info = tarfile.TarInfo("./usr/lib/modules/k/updates/m.ko.xz")
    published = _published_with(signed)
    assert _published(published, info, MODULE, cert) == compress_module(signed)
    (used,) = published.used
    assert used == {
        "path": "/usr/lib/modules/k/updates/m.ko.xz",
        "from": "img [amd64]:/usr/lib/modules/k/updates/m.ko.xz",
        "signer": "CN=Test owner",
        "certificate": cert.digest,
    }
    with pytest.raises(BuildError, match="no machine image of the release set holds"):
        _published(published, info, MODULE + b"x", cert)  # a module that did not rebuild
    forged = bytearray(signed)
    forged[len(signed) - len(modsig.MAGIC) - 13] ^= 1  # the signature's last byte
    with pytest.raises(IntegrityError):
        _published(_published_with(bytes(forged)), info, MODULE, cert)


def test_verify_says_identical_but_for_signatures(capsys: pytest.CaptureFixture[str]) -> None:
    from nvkr.cli.verify import _print_rebuild

    art = {"identical": True}
    used = {"path": "/usr/lib/modules/k/updates/m.ko.xz", "from": "node [amd64]:/m",
            "signer": "CN=Test owner", "certificate": "sha256:" + "ab" * 32}  # fmt: skip
    _print_rebuild({"artifacts": [art], "identical": True, "milliseconds": 1000,
                    "signatures": [used]})  # fmt: skip
    out = capsys.readouterr().out
    assert (
        "1 of 1 artifacts identical; 1 of them, node [amd64], identical but for signatures by "
        "CN=Test owner (sha256:abababab" in out
    )
    assert "signature not rebuilt (no key), checked: /usr/lib/modules/k/updates/m.ko.xz" in out
    # Only the images whose signatures were taken are said to differ by them (a fresh-user trial
    # read "4 of 4 artifacts identical but for signatures" as four signed artifacts): two
    # signatures of one image count it once, and the other artifacts are plainly identical.
    uki = {**used, "path": "/EFI/BOOT/GRUBX64.EFI"}
    _print_rebuild({"artifacts": [art] * 4, "identical": True, "milliseconds": 1000,
                    "signatures": [used, uki]})  # fmt: skip
    out = capsys.readouterr().out
    assert "4 of 4 artifacts identical; 1 of them, node [amd64], identical but for" in out, out
    _print_rebuild({"artifacts": [art], "identical": True, "milliseconds": 1000})
    assert "identical; release set index identical" in capsys.readouterr().out


def test_node_images_with_secure_boot_name_signed_modules_of_their_own_rootfs() -> None:
    from types import SimpleNamespace
    from typing import cast

    from nvkr.builders.node_image.artifact import NodeImageArtifact
    from nvkr.builders.node_image.builder import NodeImageBuilder
    from nvkr.builders.signed_modules.artifact import SignedModulesArtifact
    from nvkr.recipe.matrix import Variant

    signed = SignedModulesArtifact.model_validate(
        {"builder": "signed-modules", "rootfs": "other", "certificate": {"source": "owner"}}
    )
    artifacts: dict[str, object] = {"mods": signed, "rootfs": SimpleNamespace(builder="rootfs")}
    variant = cast(Variant, SimpleNamespace(gpu="hopper", kubernetes="1.36", arch="amd64",
                   recipe=SimpleNamespace(artifacts=artifacts, sources={})))  # fmt: skip

    def problems(**fields: object) -> list[str]:
        art = NodeImageArtifact.model_validate(
            {"builder": "node-image", "rootfs": "rootfs", "kubernetesVersion": "1.36.3",
             **fields}
        )  # fmt: skip
        return [m for _, m, _ in NodeImageBuilder().check("img", art, variant)]

    assert problems(secureBoot={"modules": "rootfs"}) == [
        "'rootfs' is a rootfs artifact, not a signed-modules"
    ]
    assert problems(secureBoot={"modules": "mods"}) == [
        "'mods' is made from rootfs 'other', the image from 'rootfs'"
    ]
    artifacts["mods"] = signed.model_copy(update={"rootfs": "rootfs"})
    assert problems(secureBoot={"modules": "mods"}) == []
    (dib,) = problems(secureBoot={"modules": "mods"}, backend="diskimage-builder")
    assert "Secure Boot needs the native backend" in dib


def test_a_uki_names_what_the_rootfs_lacks(tmp_path: Path) -> None:
    """The UKI is made from the rootfs's own files: a missing one is named with its packages."""
    from nvkr.builders.uki.builder import _find
    from nvkr.errors import BuildError as Refused

    def tar_of(*names: str) -> Path:
        path = tmp_path / f"t{len(names)}.tar"
        with tarfile.open(path, "w") as tf:
            for name in names:
                info = tarfile.TarInfo(f"./{name}")
                tf.addfile(info, None)
        return path

    with tarfile.open(tar_of()) as tf, pytest.raises(Refused, match="0 kernels"):
        _find(tf, "amd64")
    files = ["boot/vmlinuz-6.12-cloud", "boot/initrd.img-6.12-cloud", "usr/lib/os-release",
             "usr/lib/systemd/boot/efi/linuxx64.efi.stub", "usr/bin/python3"]  # fmt: skip
    with tarfile.open(tar_of(*files)) as tf, pytest.raises(Refused) as e:
        _find(tf, "amd64")
    assert "no /usr/bin/ukify (the UKI's ukify)" in e.value.message
    assert e.value.hint is not None and "systemd-ukify" in e.value.hint
    with tarfile.open(tar_of(*files, "usr/bin/ukify")) as tf:
        found = _find(tf, "amd64")
    assert found["version"] == "6.12-cloud" and found["stub"].endswith("linuxx64.efi.stub")


def test_a_node_image_boots_a_signed_uki_of_its_own_rootfs_with_its_kernel_args() -> None:
    from types import SimpleNamespace
    from typing import cast

    from nvkr.builders.node_image.artifact import NodeImageArtifact
    from nvkr.builders.node_image.builder import NodeImageBuilder
    from nvkr.builders.uki.artifact import SignedUkiArtifact, UkiArtifact
    from nvkr.recipe.matrix import Variant

    uki = UkiArtifact.model_validate({"builder": "uki", "rootfs": "rootfs", "kernelArgs": ["a=1"]})
    signed = SignedUkiArtifact.model_validate(
        {"builder": "signed-uki", "uki": "uki", "certificate": {"source": "owner"}}
    )
    artifacts: dict[str, object] = {
        "uki": uki, "signed": signed, "rootfs": SimpleNamespace(builder="rootfs"),
        "other": SimpleNamespace(builder="rootfs"),
    }  # fmt: skip
    variant = cast(Variant, SimpleNamespace(gpu="hopper", kubernetes="1.36", arch="amd64",
                   recipe=SimpleNamespace(artifacts=artifacts, sources={})))  # fmt: skip

    def problems(**fields: object) -> list[str]:
        art = NodeImageArtifact.model_validate(
            {"builder": "node-image", "rootfs": "rootfs", "kubernetesVersion": "1.36.3",
             **fields}
        )  # fmt: skip
        return [m for _, m, _ in NodeImageBuilder().check("img", art, variant)]

    assert problems(secureBoot={"uki": "signed"}) == []
    assert problems(secureBoot={"uki": "signed"}, kernelArgs=["a=1"]) == []
    assert problems(secureBoot={"uki": "uki"}) == ["'uki' is a uki artifact, not a signed-uki"]
    (args,) = problems(secureBoot={"uki": "signed"}, kernelArgs=["b=2"])
    assert "kernelArgs ['b=2'] are not those of the UKI 'uki' it boots (['a=1'])" in args
    artifacts["uki"] = uki.model_copy(update={"rootfs": "other"})
    assert problems(secureBoot={"uki": "signed"}) == [
        "'signed' is made from rootfs 'other', the image from 'rootfs'"
    ]
    with pytest.raises(ValueError, match="secureBoot names a signed-uki"):
        NodeImageArtifact.model_validate(
            {"builder": "node-image", "rootfs": "r", "kubernetesVersion": "1.36.3",
             "secureBoot": {}}
        )  # fmt: skip


def test_a_uki_of_a_rootfs_without_the_chains_packages_is_refused_before_building() -> None:
    """A lock missing a signed package: validate names what the rootfs's packages lack."""
    from types import SimpleNamespace
    from typing import cast

    from nvkr.builders.uki.artifact import UkiArtifact
    from nvkr.builders.uki.builder import UkiBuilder
    from nvkr.recipe.matrix import Variant
    from nvkr.recipe.sources import AptSource

    def variant(*packages: str) -> Variant:
        source = AptSource.model_validate(
            {"apt": {"debian": {"url": "http://deb.debian.org/debian", "suite": "trixie"}},
             "arch": "amd64", "packages": dict.fromkeys(packages, "1")}
        )  # fmt: skip
        rootfs = SimpleNamespace(builder="rootfs", packages="pkgs")
        recipe = SimpleNamespace(artifacts={"rootfs": rootfs}, sources={"pkgs": source})
        return cast(Variant, SimpleNamespace(arch="amd64", recipe=recipe))

    uki = UkiArtifact.model_validate({"builder": "uki", "rootfs": "rootfs"})
    ((path, message, hint),) = UkiBuilder().check("uki", uki, variant("systemd-ukify"))
    assert path == ("artifacts", "uki", "rootfs") and hint
    assert "made without shim-signed, systemd-boot-efi" in message
    ok = variant("shim-signed", "systemd-boot-efi", "systemd-ukify")
    assert UkiBuilder().check("uki", uki, ok) == []


def test_a_path_source_without_the_certificate_file_is_named(tmp_path: Path) -> None:
    """The trial's case: secure-boot-owner points at a directory without owner.crt."""
    from nvkr.builders.owner_signing import read_certificate

    blob = tmp_path / "tree.tar"
    with tarfile.open(blob, "w") as tf:
        info = tarfile.TarInfo("README")
        tf.addfile(info, None)
    params = {"certificate": {"source": "secure-boot-owner", "path": "owner.crt"}}
    with pytest.raises(UsageError) as e:
        read_certificate(blob, params)  # type: ignore[arg-type]
    assert "source secure-boot-owner (a directory) holds no file 'owner.crt'" in e.value.message
    assert e.value.exit_code == 2 and e.value.hint and "certificate.path" in e.value.hint


def _leaf_project(tmp_path: Path) -> Path:
    """A copy of the repository's recipes with a Secure Boot leaf (the README's) whose owner
    directory keys/ is empty."""
    import shutil

    from tests.helpers import REPO

    shutil.copytree(REPO / "recipes", tmp_path / "recipes")
    (tmp_path / "keys").mkdir()
    (tmp_path / "recipes/sb.yaml").write_text(
        "apiVersion: nvkr.dev/v1alpha1\nkind: Recipe\nmetadata: {name: sb}\n"
        "extends: [default.yaml, secureboot/debian-13.yaml]\n"
        "sources:\n  secure-boot-owner: {path: ../keys}\n"
    )
    return tmp_path


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "no such file (the owner's certificate, PEM or DER)"),
        (b"not a certificate", "is not an X.509 certificate (PEM or DER)"),
        ("ec", "an ECDSA key makes randomized signatures"),
    ],
)
def test_validate_reads_the_owners_certificate_of_a_path_source(
    tmp_path: Path, content: bytes | str | None, said: str
) -> None:
    """``nvkr validate`` (and plan and build, through the same recipe check) reads the
    certificate a signing artifact names in a path source: missing, not a certificate, or of a
    key type that cannot sign reproducibly, each an error naming the recipe line, the field and
    the file, exit 2, before anything is fetched or built."""
    from tests.helpers.cli import invoke

    project = _leaf_project(tmp_path)
    crt = project / "keys/owner.crt"
    if content == "ec":
        crt.write_bytes(_cert(ec.generate_private_key(ec.SECP256R1())).public_bytes(
            serialization.Encoding.PEM))  # fmt: skip
    elif content is not None:
        crt.write_bytes(content)
    res = invoke("validate", "recipes/sb.yaml", cwd=project, store=tmp_path / "store")
    assert res.code == 2, res.output
    # the file's path tidied (the source is recipes/../keys)
    assert "artifacts.signed-uki.certificate.path: keys/owner.crt" in res.output, res.output
    assert said in res.output, res.output
    assert "recipes/secureboot/debian-13.yaml:" in res.output, res.output  # the line that names it
    # a usable certificate: valid
    crt.write_bytes(_cert(rsa.generate_private_key(65537, 2048)).public_bytes(
        serialization.Encoding.PEM))  # fmt: skip
    ok = invoke("validate", "recipes/sb.yaml", cwd=project, store=tmp_path / "store")
    assert ok.code == 0, ok.output


def test_a_missing_key_file_says_how_to_make_an_rsa_key(tmp_path: Path) -> None:
    """Not `nvkr keys generate` (the fresh-user trial's case): its ECDSA and Ed25519 keys are
    refused for Secure Boot signing."""
    with pytest.raises(UsageError) as e:
        load_owner_key(tmp_path / "owner.key")
    assert e.value.message == f"Secure Boot key {tmp_path / 'owner.key'} does not exist"
    assert e.value.hint and "openssl req -new -x509 -newkey rsa:3072" in e.value.hint
    assert "keys generate" not in e.value.hint
