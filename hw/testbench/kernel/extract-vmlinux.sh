#!/usr/bin/env bash
# Debian ships no vmlinux: takes the ELF image (with .BTF) out of a bzImage,
# whose payload is xz (6.1) or zstd (6.12) compressed.
#   extract-vmlinux.sh BZIMAGE OUT
set -euo pipefail
img=$1 out=$2
try() { # magic, decompressor
	local off
	off=$(LC_ALL=C grep -aboP "$1" "$img" | head -n 1 | cut -d: -f1)
	[ -n "$off" ] || return 1
	tail -c +$((off + 1)) "$img" | $2 >"$out.tmp" 2>/dev/null || true
	[ "$(head -c 4 "$out.tmp" 2>/dev/null)" = $'\x7fELF' ]
}
if try '\xFD7zXZ\x00' 'xz -dc --single-stream' || try '\x28\xb5\x2f\xfd' 'zstd -dcq'; then
	mv "$out.tmp" "$out"
else
	rm -f "$out.tmp"
	echo "no xz or zstd vmlinux in $img" >&2
	exit 1
fi
