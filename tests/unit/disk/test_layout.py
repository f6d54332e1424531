"""Partition layout, derived identifiers and the GPT sfdisk writes."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from nvkr.disk.gpt import sfdisk_script, write_gpt
from nvkr.disk.layout import (
    ESP_SIZE,
    MIB,
    TYPE_BIOS_BOOT,
    TYPE_ESP,
    TYPE_ROOT,
    derive_uuid,
    disk_layout,
    esp_size,
)
from nvkr.errors import DiskError
from tests.helpers.disk import SEED, needs_tools


def test_amd64_layout_bios_esp_root_last():
    layout = disk_layout("amd64", SEED)
    assert [(p.number, p.role, p.type_guid) for p in layout.partitions] == [
        (1, "bios", TYPE_BIOS_BOOT),
        (2, "esp", TYPE_ESP),
        (3, "root", "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709"),
    ]
    assert layout.root_partition == 3
    assert layout.root_partuuid == layout.root.guid == layout.partitions[-1].guid


def test_arm64_layout_has_no_bios_boot_partition():
    layout = disk_layout("arm64", SEED)
    assert [(p.number, p.role) for p in layout.partitions] == [(1, "esp"), (2, "root")]
    assert layout.root.type_guid == TYPE_ROOT["arm64"] == "B921B045-1DF0-41C3-AF44-4C6F280D3FAE"
    assert layout.by_role("bios") is None


def test_identifiers_are_uuid5_of_the_seed_and_all_distinct():
    a, b = disk_layout("amd64", SEED), disk_layout("amd64", SEED)
    assert a == b
    ids = [a.disk_guid, a.fs_uuid, a.fs_hash_seed, *(p.guid for p in a.partitions)]
    assert len(set(ids)) == len(ids)
    for value in ids:
        assert uuid.UUID(value).version == 5
    assert a.fs_uuid == derive_uuid(SEED, "ext4")
    other = disk_layout("amd64", "ff" * 32)
    assert not set(ids) & {other.disk_guid, other.fs_uuid, *(p.guid for p in other.partitions)}
    assert len(a.esp_volume_id) == 8 and int(a.esp_volume_id, 16) >= 0


def test_place_aligns_to_mib_and_keeps_the_backup_gpt_free():
    placed = disk_layout("amd64", SEED).place(2 << 30)
    assert [(pp.start, pp.sectors) for pp in placed] == [
        (2048, 2048),
        (4096, 131072),
        (135168, (2 << 30) // 512 - 135168 - 2048),
    ]
    root = placed[-1]
    assert root.offset == 66 * MIB and root.size % MIB == 0
    assert root.start + root.sectors <= (2 << 30) // 512 - 34


@pytest.mark.parametrize(
    ("size", "match"),
    [
        (100 * MIB + 512, "not a positive multiple of 1 MiB"),
        (0, "not a positive multiple"),
        (67 * MIB, "leaves no room for partition 3"),
        (66 * MIB, "leaves no room for partition 2"),
    ],
)
def test_place_rejects_bad_sizes(size, match):
    with pytest.raises(DiskError, match=match):
        disk_layout("amd64", SEED).place(size)


# The Secure Boot chains built so far, in bytes: shim 16.1, MokManager and the signed UKI of
# Debian 13's 6.12.118 arm64 kernels (cloud: 48 MB; generic, an uncompressed 40 MB Image with an
# initrd of most modules: 74 MB, which a 64 MiB ESP cannot hold: "Disk full").
SHIM_AA64, MM_AA64 = 1_000_000, 900_000
UKI_CLOUD_ARM64, UKI_GENERIC_ARM64 = 48_110_528, 74_339_264


def test_esp_size_keeps_64_mib_for_what_fits_and_grows_in_64_mib_steps():
    assert ESP_SIZE == 64 * MIB
    assert esp_size([]) == esp_size([SHIM_AA64, MM_AA64, UKI_CLOUD_ARM64]) == 64 * MIB
    assert esp_size([SHIM_AA64, MM_AA64, UKI_GENERIC_ARM64]) == 128 * MIB
    assert esp_size([62 * MIB - 4096]) == 64 * MIB  # the FATs (1 MiB) and 1 MiB to spare
    assert esp_size([62 * MIB + 1]) == 128 * MIB
    assert esp_size([200 * MIB]) == 256 * MIB


def test_with_esp_size_changes_the_esp_alone():
    layout = disk_layout("arm64", SEED)
    big = layout.with_esp_size(128 * MIB)
    assert [p.size for p in big.partitions] == [128 * MIB, None]
    assert [p.guid for p in big.partitions] == [p.guid for p in layout.partitions]
    assert (big.fs_uuid, big.disk_guid, big.esp_volume_id) == (
        layout.fs_uuid, layout.disk_guid, layout.esp_volume_id)  # fmt: skip
    root = big.place(1 << 30)[-1]
    assert root.offset == 129 * MIB and layout.place(1 << 30)[-1].offset == 65 * MIB
    amd64 = disk_layout("amd64", SEED).with_esp_size(128 * MIB)
    assert [p.size for p in amd64.partitions] == [MIB, 128 * MIB, None]
    with pytest.raises(DiskError, match="multiple of 1 MiB"):
        layout.with_esp_size(MIB + 1)


def test_bad_arch_and_empty_seed():
    with pytest.raises(DiskError, match="amd64 or arm64"):
        disk_layout("riscv64", SEED)  # type: ignore[arg-type]
    with pytest.raises(DiskError, match="seed"):
        disk_layout("amd64", "")


def test_sfdisk_script_names_every_identifier():
    layout = disk_layout("amd64", SEED)
    script = sfdisk_script(layout, layout.place(256 * MIB))
    assert f"label-id: {layout.disk_guid.upper()}" in script
    assert "first-lba: 2048" in script
    for p in layout.partitions:
        assert f"uuid={p.guid.upper()}" in script
        assert f'name="{p.name}"' in script


@needs_tools
def test_write_gpt_on_a_plain_file(tmp_path):
    layout = disk_layout("arm64", SEED)
    placed = layout.place(128 * MIB)
    raw = tmp_path / "disk.raw"
    raw.write_bytes(b"")
    with open(raw, "r+b") as f:
        f.truncate(128 * MIB)
    mbr = write_gpt(raw, layout, placed)
    assert mbr[0x1FE:] == b"\x55\xaa" and mbr[0x1C2] == 0xEE  # protective MBR
    table = json.loads(subprocess.check_output(["sfdisk", "--json", str(raw)]))["partitiontable"]
    assert table["id"].lower() == layout.disk_guid
    assert [(p["start"], p["size"], p["uuid"].lower()) for p in table["partitions"]] == [
        (pp.start, pp.sectors, pp.partition.guid) for pp in placed
    ]
    assert raw.stat().st_blocks * 512 < 1 * MIB  # still sparse
