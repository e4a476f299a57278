#!/usr/bin/env bash
# Prints the path of the ELF vmlinux (with .BTF) of Debian kernel VER under
# DIR, taking it out of /boot/vmlinuz-VER the first time: Debian ships none.
#   vmlinux-for.sh VER DIR
set -euo pipefail
ver=${1:-} dir=$2
[ -n "$ver" ] || { echo "no kernel headers for the kernel asked for: run make deps" >&2; exit 1; }
out=$dir/vmlinux-$ver
if [ ! -f "$out" ]; then
	[ -f "/boot/vmlinuz-$ver" ] || { echo "no /boot/vmlinuz-$ver: run make deps" >&2; exit 1; }
	mkdir -p "$dir"
	"$(dirname "$0")/extract-vmlinux.sh" "/boot/vmlinuz-$ver" "$out"
fi
echo "$out"
