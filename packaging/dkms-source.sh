#!/usr/bin/env bash
# Copies what kmod/gpufpga/dkms.conf builds from (sources, Kbuild and
# dkms.conf) into DIR/gpufpga-VERSION, DKMS's source layout, and prints
# that directory. For the gpufpga-dkms package and the DKMS check alike.
#   dkms-source.sh DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ver=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' "$root/kmod/gpufpga/dkms.conf")
[ -n "$ver" ] || { echo "dkms-source: no PACKAGE_VERSION in kmod/gpufpga/dkms.conf" >&2; exit 1; }
src=$(mkdir -p "$1/gpufpga-$ver" && cd "$1/gpufpga-$ver" && pwd)
(cd "$root/kmod/gpufpga" && find . \( -name '*.[ch]' -o -name Kbuild -o -name dkms.conf \) -print0 |
	cpio -0pdm --quiet "$src")
echo "$src"
