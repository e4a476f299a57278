#!/usr/bin/env bash
# Builds kmod/gpufpga with DKMS, as a user's machine would from its
# dkms.conf, for each kernel release given, in a private DKMS tree.
#   dkms-check.sh KVER...
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
src=$("$root/packaging/dkms-source.sh" "$tmp/src")
ver=${src##*/gpufpga-}
mkdir -p "$tmp/dkms"
opts=(--sourcetree "$tmp/src" --dkmstree "$tmp/dkms" -m gpufpga -v "$ver")
dkms add "${opts[@]}" >/dev/null
for k in "$@"; do
	if ! dkms build "${opts[@]}" -k "$k" >"$tmp/log" 2>&1; then
		cat "$tmp/log" "$tmp/dkms/gpufpga/$ver/build/make.log" 2>/dev/null >&2
		echo "dkms: gpufpga does not build for $k" >&2
		exit 1
	fi
	for m in gpufpga gpufpga_nv; do
		ls "$tmp/dkms/gpufpga/$ver/$k/"*/module/$m.ko* >/dev/null 2>&1 || {
			echo "dkms: no $m.ko built for $k" >&2; exit 1; }
	done
	echo "dkms: gpufpga $ver builds for $k"
done
