#!/usr/bin/env bash
# Builds gpufpga.ko, gpufpga_nv.ko and the rig's nvp2p_sim.ko and rigpm.ko for
# one kernel, out of the source tree, W=1 and sparse (C=2) clean or not at
# all, then adds module BTF split against that kernel's vmlinux.
#   build-modules.sh KDIR VMLINUX OUT [NVIDIA_SRC]
# KDIR: the kernel's build directory; OUT: where the .ko files go.
set -euo pipefail
kdir=$1 vmlinux=$2 out=$3 nvidia_src=${4:-}
root=$(cd "$(dirname "$0")/../../.." && pwd)
[ -f "$kdir/Makefile" ] || { echo "kmod: no kernel build tree at $kdir: run make deps" >&2; exit 1; }
[ -f "$vmlinux" ] || { echo "kmod: no vmlinux at $vmlinux" >&2; exit 1; }

# Up to date when nothing that goes into the modules changed: their
# sources, this script, the kernel tree, its vmlinux and NVIDIA's tree.
stamp=$( { (cd "$root" && find kmod/gpufpga hw/testbench/nvp2p_sim hw/testbench/rigpm \( -name '*.[ch]' -o -name Kbuild \) \
	-print0 | LC_ALL=C sort -z | xargs -0 sha256sum); sha256sum "$0";
	stat -c '%n %s %Y' "$kdir/Makefile" "$kdir/Module.symvers" "$vmlinux" 2>/dev/null; echo "$nvidia_src"; } |
	sha256sum | cut -c1-16)
if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$stamp" ] && ls "$out"/gpufpga.ko >/dev/null 2>&1; then
	exit 0
fi
rm -f "$out/.stamp"
src=$out/src
rm -rf "$src"
mkdir -p "$src/kmod" "$src/hw/testbench"
# The sources only, in the layout their include paths expect.
(cd "$root" && find kmod/gpufpga hw/testbench/nvp2p_sim hw/testbench/rigpm \
	\( -name '*.[ch]' -o -name Kbuild \) -print0 | cpio -0pdm --quiet "$src")

log=$out/kmod.log
: >"$log"
build() { # dir, extra make arguments
	local dir=$1
	shift
	make -s -C "$kdir" M="$src/$dir" W=1 C=2 "$@" modules >>"$log" 2>&1 || {
		cat "$log" >&2; echo "kmod: $dir does not build against $kdir" >&2; exit 1; }
}
# The simulated GPU in each of its variants; the default one at the top.
# A kernel with lock debugging takes only the open one: a proprietary module
# cannot call lockdep's GPL-only entry points, and loading one would turn
# lockdep off.
variants="open old"
default=
if grep -q '^CONFIG_DEBUG_LOCK_ALLOC=y' "$kdir/.config"; then
	variants=open
	default=NVP2P_SIM_VARIANT=open
fi
for v in $variants; do
	cp -r "$src/hw/testbench/nvp2p_sim" "$src/hw/testbench/nvp2p_sim-$v"
	build "hw/testbench/nvp2p_sim-$v" NVP2P_SIM_VARIANT=$v
done
build hw/testbench/nvp2p_sim $default
build hw/testbench/rigpm
symvers=${nvidia_src:+$nvidia_src/Module.symvers}
build kmod/gpufpga KBUILD_EXTRA_SYMBOLS="${symvers:-$src/hw/testbench/nvp2p_sim/Module.symvers}" \
	${nvidia_src:+NVIDIA_SRC=$nvidia_src}
if grep -E 'warning:|error:' "$log" | grep -v 'Skipping BTF generation'; then
	echo "kmod: not W=1/sparse clean against $kdir (log: $log)" >&2
	exit 1
fi
rm -rf "$out"/*.ko "$out/open" "$out/old"
cp "$src"/hw/testbench/nvp2p_sim/*.ko "$src"/hw/testbench/rigpm/*.ko "$src"/kmod/gpufpga/*.ko "$out/"
for v in $variants; do
	mkdir -p "$out/$v"
	cp "$src/hw/testbench/nvp2p_sim-$v/nvp2p_sim.ko" "$out/$v/"
done
# Module BTF, split against the kernel's, so fentry/fexit reach our functions;
# a kernel without BTF gets modules without it. (grep reads all of
# readelf's output: -q would stop early, and pipefail see readelf's SIGPIPE.)
if readelf -S "$vmlinux" | grep '\.BTF' >/dev/null; then
	for ko in "$out"/*.ko "$out"/*/*.ko; do
		pahole -J --btf_gen_floats -j --lang_exclude=rust --btf_base "$vmlinux" "$ko"
	done
fi
echo "$stamp" >"$out/.stamp"
