"""ELF machine and interpreter: what tells a static binary from one that needs ld.so and libc."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from nvkr.elf import read_elf
from nvkr.errors import BuildError


def _elf(*, is64: bool, big: bool, machine: int, interp: bytes | None) -> bytes:
    """A minimal ELF executable: header, one or two program headers, the interpreter path."""
    o = ">" if big else "<"
    ident = b"\x7fELF" + bytes([2 if is64 else 1, 2 if big else 1, 1]) + bytes(9)
    ehsize, phentsize = (64, 56) if is64 else (52, 32)
    phdrs = [(1, ehsize, 0)]  # PT_LOAD
    blob_at = ehsize + phentsize * 2
    if interp is not None:
        phdrs.insert(0, (3, blob_at, len(interp)))  # PT_INTERP first, as linkers write it
    if is64:
        header = struct.pack(o + "HHIQQQIHHHHHH", 2, machine, 1, 0, ehsize, 0, 0, ehsize,
                             phentsize, len(phdrs), 0, 0, 0)  # fmt: skip
    else:
        header = struct.pack(o + "HHIIIIIHHHHHH", 2, machine, 1, 0, ehsize, 0, 0, ehsize,
                             phentsize, len(phdrs), 0, 0, 0)  # fmt: skip
    data = ident + header
    for p_type, offset, size in phdrs:
        if is64:
            data += struct.pack(o + "IIQQQQQQ", p_type, 4, offset, 0, 0, size, size, 1)
        else:
            data += struct.pack(o + "IIIIIIII", p_type, offset, 0, 0, size, size, 4, 1)
    data = data.ljust(blob_at, b"\0")
    return data + (interp or b"")


def test_a_dynamic_arm64_binary(tmp_path: Path) -> None:
    path = tmp_path / "hello"
    path.write_bytes(
        _elf(is64=True, big=False, machine=0xB7, interp=b"/lib/ld-linux-aarch64.so.1\0")
    )
    info = read_elf(path)
    assert (info.machine, info.interpreter, info.linkage) == (
        "arm64",
        "/lib/ld-linux-aarch64.so.1",
        "dynamic",
    )


def test_a_static_binary_and_other_classes(tmp_path: Path) -> None:
    path = tmp_path / "static"
    path.write_bytes(_elf(is64=True, big=False, machine=0x3E, interp=None))
    assert read_elf(path).linkage == "static" and read_elf(path).machine == "amd64"
    path.write_bytes(_elf(is64=False, big=True, machine=0x08, interp=b"/lib/ld.so.1\0"))
    assert (read_elf(path).machine, read_elf(path).interpreter) == ("em-8", "/lib/ld.so.1")


def test_the_hosts_own_ls_is_dynamic() -> None:
    info = read_elf(Path("/bin/ls"))
    assert info.linkage == "dynamic" and info.interpreter and "ld-linux" in info.interpreter


def test_not_elf_and_truncated(tmp_path: Path) -> None:
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(BuildError, match="script is not an ELF file"):
        read_elf(script)
    cut = tmp_path / "cut"
    cut.write_bytes(_elf(is64=True, big=False, machine=0x3E, interp=b"/x\0")[:80])
    with pytest.raises(BuildError, match="program header 0 lies outside the file"):
        read_elf(cut)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            '#include <dlfcn.h>\nint main(void){return dlopen("libnvidia-ml.so.1", RTLD_NOW)!=0;}',
            True,
        ),
        ('#include <stdio.h>\nint main(void){puts("hi");return 0;}', False),
    ],
)
def test_a_binary_that_calls_dlopen_loads_libraries_at_run_time(
    tmp_path: Path, source: str, expected: bool
) -> None:
    import shutil
    import subprocess

    assert shutil.which("cc"), "install.sh installs gcc and libc6-dev for this test"
    (tmp_path / "m.c").write_text(source)
    out = tmp_path / "m"
    subprocess.run(["cc", "-o", str(out), str(tmp_path / "m.c"), "-ldl"], check=True)
    info = read_elf(out)
    assert info.linkage == "dynamic" and info.loads_libraries is expected


def test_a_file_without_sections_loads_nothing(tmp_path: Path) -> None:
    path = tmp_path / "bare"
    path.write_bytes(_elf(is64=True, big=False, machine=0x3E, interp=b"/lib64/ld.so\0"))
    assert read_elf(path).loads_libraries is False


def test_set_interpreter_rewrites_pt_interp_in_place_and_refuses_a_longer_path(
    tmp_path: Path,
) -> None:
    from nvkr.elf import set_interpreter

    path = tmp_path / "tool"
    original = _elf(is64=True, big=False, machine=0x3E, interp=b"/lib64/ld-linux-x86-64.so.2\0")
    path.write_bytes(original)
    set_interpreter(path, "/lib/x86_64-linux-gnu/ld.so")
    assert read_elf(path).interpreter == "/lib/x86_64-linux-gnu/ld.so"
    assert len(path.read_bytes()) == len(original)  # nothing moved
    set_interpreter(path, "/l")  # shorter: NUL padded
    assert read_elf(path).interpreter == "/l"
    with pytest.raises(BuildError, match="longer than its PT_INTERP segment"):
        set_interpreter(path, "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
    static = tmp_path / "static"
    static.write_bytes(_elf(is64=False, big=True, machine=0x08, interp=None))
    with pytest.raises(BuildError, match="static"):
        set_interpreter(static, "/l")
