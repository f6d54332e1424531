#!/bin/sh
# nvkr-growroot: grow the root partition (the last one on its disk) to the end of the disk and
# the ext4 on it, online. Run once by nvkr-growroot.service; the stamp file keeps it from running
# again. A root that is not on a partition, or a partition already at the end, is not an error.
# growpart grows a partition only up to the next one: a config-2 partition (the config drive
# Metal3/Ironic add at the disk's end) behind the root stays where it is, bytes and all.
set -eu

stamp=/var/lib/nvkr/growroot.done
log() { echo "nvkr-growroot: $*"; }
finish() {
    mkdir -p "${stamp%/*}"
    : > "$stamp"
    exit 0
}

# The root file system's device number, from the kernel's mount table.
majmin=
while read -r _ _ mm _ mnt _; do
    if [ "$mnt" = / ]; then majmin=$mm; fi
done < /proc/self/mountinfo
sys=/sys/dev/block/$majmin
if [ -z "$majmin" ] || [ ! -r "$sys/partition" ]; then
    log "the root file system is not on a partition; nothing to grow"
    finish
fi
part=$(cat "$sys/partition")
node=$(readlink -f "$sys")
partdev=/dev/${node##*/}
parent=${node%/*}
disk=/dev/${parent##*/}

if command -v growpart > /dev/null 2>&1; then
    if out=$(growpart "$disk" "$part" 2>&1); then
        log "$out"
    else
        case $out in
            # the disk's end, or a partition behind it (a config drive Ironic added)
            NOCHANGE*) log "partition $part of $disk already ends at the end of the disk or at the next partition" ;;
            *) log "growpart $disk $part failed: $out"; exit 1 ;;
        esac
    fi
else
    # No cloud-guest-utils: move the backup GPT to the end of a grown disk, extend the last
    # partition as far as it goes, and tell the kernel the new size (the partition is in use,
    # so a re-read of the whole table would fail).
    sfdisk --relocate gpt-bak-std "$disk" > /dev/null 2>&1 || true
    echo ", +" | sfdisk --force --no-reread --no-tell-kernel -N "$part" "$disk" > /dev/null
    partx -u --nr "$part" "$disk"
    log "extended partition $part of $disk with sfdisk"
fi
if ! out=$(resize2fs "$partdev" 2>&1); then
    log "resize2fs $partdev failed: $out"
    exit 1
fi
log "$(printf '%s\n' "$out" | tail -n 1)"
finish
