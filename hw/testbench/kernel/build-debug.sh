#!/usr/bin/env bash
# Builds the rig's debug kernel (KASAN, lockdep, kmemleak, DMA-API debug,
# UBSAN, KFENCE, DEBUG_OBJECTS) from Debian's linux-source-6.1 package, once
# per source version and configuration: the result is cached outside the work
# tree under $GPUFPGA_CACHE (default /var/cache/gpufpga), keyed by the
# package version and the hash of this script and the config fragment's
# options.
# Prints the build directory, which holds arch/x86/boot/bzImage, vmlinux and
# everything `make -C <dir> M=...` needs for out-of-tree modules.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${GPUFPGA_CACHE:-/var/cache/gpufpga}
srcpkg=linux-source-6.1

ver=$(dpkg-query -W -f='${Version}' "$srcpkg" 2>/dev/null) || {
	echo "debug kernel: $srcpkg is not installed: run make deps" >&2; exit 1; }
# Comments of the fragment do not change the kernel, so they are not keyed.
key=$({ grep -v '^#' "$here/debug.config"; cat "$here/build-debug.sh"; } | sha256sum | cut -c1-12)
out=$cache/kernel/$srcpkg-$ver-$key
if [ -f "$out/.done" ]; then echo "$out"; exit 0; fi

mkdir -p "$cache/kernel"
exec 9>"$cache/kernel/.lock"
flock 9
if [ -f "$out/.done" ]; then echo "$out"; exit 0; fi
rm -rf "$out"
mkdir -p "$out"
start=$(date +%s)
echo "debug kernel: building $srcpkg $ver (config $key) in $out; a fresh machine does this once" >&2
tar -C "$out" -xf /usr/src/$srcpkg.tar.xz --strip-components=1
cd "$out"
log=$out/build.log
{
	make x86_64_defconfig
	make kvm_guest.config
	scripts/kconfig/merge_config.sh -m .config "$here/debug.config"
	make olddefconfig
} >"$log" 2>&1 || { tail -n 30 "$log" >&2; exit 1; }
# Every option of the fragment must have survived olddefconfig.
bad=0
while IFS= read -r line; do
	case $line in ''|'#'*) continue ;; esac
	opt=${line%%=*} val=${line#*=}
	if [ "$val" = n ]; then
		grep -q "^$opt=" .config && { echo "debug kernel: $opt still set" >&2; bad=1; }
	else
		grep -qx "$opt=$val" .config || { echo "debug kernel: $opt=$val did not take ($(grep "^$opt=" .config || echo unset))" >&2; bad=1; }
	fi
done <"$here/debug.config"
[ $bad = 0 ] || exit 1
make -j"$(nproc)" bzImage modules_prepare >>"$log" 2>&1 || { tail -n 40 "$log" >&2; exit 1; }
# Out-of-tree modules want Module.symvers of the tree.
make -j"$(nproc)" modules >>"$log" 2>&1 || { tail -n 40 "$log" >&2; exit 1; }
touch .done
# Trees of earlier sources or configurations are only taking disk space.
for old in "$cache/kernel/$srcpkg"-*; do
	[ "$old" = "$out" ] || rm -rf "$old"
done
echo "debug kernel: built in $(( $(date +%s) - start )) s" >&2
echo "$out"
