#!/usr/bin/env bash
# ram_device.sh: a block device served from RAM (a loop device over a file on its own tmpfs), to
# measure what nvmeio and fio cost per I/O without a disk's (or a VM host cache's) noise.
# O_DIRECT and libaio/io_uring work on it as on any block device. Needs root.
#
#   scripts/ram_device.sh [--size SIZE] [--dir DIR]    set up (or find) the device, print its path
#   scripts/ram_device.sh --remove [--dir DIR]         detach it, delete the image, unmount
#
# SIZE is what truncate and mount accept (default 2G); DIR is the tmpfs mount point (default
# /mnt/nvmeio-ram). The tmpfs is given SIZE plus 64 MiB; its pages are only used once written.
# Running the setup twice prints the same device.
set -euo pipefail

size=2G
dir=/mnt/nvmeio-ram
remove=0

usage() {
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --size)
            [[ $# -ge 2 ]] || { echo "ram_device.sh: --size needs a value" >&2; exit 2; }
            size=$2
            shift 2
            ;;
        --dir)
            [[ $# -ge 2 ]] || { echo "ram_device.sh: --dir needs a value" >&2; exit 2; }
            dir=$2
            shift 2
            ;;
        --remove)
            remove=1
            shift
            ;;
        -h | --help)
            usage
            exit 0
            ;;
        *)
            echo "ram_device.sh: unknown argument '$1'" >&2
            usage >&2
            exit 2
            ;;
    esac
done

if [[ $(id -u) -ne 0 ]]; then
    echo "ram_device.sh: needs root (mount, losetup)" >&2
    exit 1
fi

image="$dir/nvmeio-ram.img"

# Loop devices currently backed by our image, one per line.
attached() {
    [[ -e "$image" ]] || return 0
    losetup -j "$image" -O NAME --noheadings 2>/dev/null || losetup -j "$image" | cut -d: -f1
}

if [[ $remove -eq 1 ]]; then
    for device in $(attached); do
        losetup -d "$device"
        echo "detached $device" >&2
    done
    rm -f "$image"
    if mountpoint -q "$dir"; then
        umount "$dir"
        echo "unmounted $dir" >&2
    fi
    rmdir "$dir" 2>/dev/null || true
    exit 0
fi

bytes=$(numfmt --from=iec "${size%B}" 2>/dev/null) || {
    echo "ram_device.sh: cannot read size '$size' (say e.g. 512M, 2G)" >&2
    exit 2
}
if [[ $bytes -lt 1048576 ]]; then
    echo "ram_device.sh: size '$size' is below 1 MiB" >&2
    exit 2
fi

mkdir -p "$dir"
if ! mountpoint -q "$dir"; then
    mount -t tmpfs -o "size=$((bytes + 67108864))" nvmeio-ram "$dir"
elif [[ $(stat -f -c %T "$dir") != tmpfs ]]; then
    echo "ram_device.sh: $dir is a mount point but not a tmpfs; choose another --dir" >&2
    exit 1
fi

existing=$(attached | head -n 1)
if [[ -n "$existing" ]]; then
    echo "$existing"
    exit 0
fi
truncate -s "$bytes" "$image"
losetup -f --show "$image"
