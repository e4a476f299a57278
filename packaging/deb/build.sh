#!/usr/bin/env bash
# Builds the Debian packages gpufpga-dkms (module sources for DKMS, the udev
# rule), p2pctl (the CLI, its man pages and bash completion) and gpufpga-dev
# (the uapi headers and the C example) into OUTDIR with dpkg-deb.
#   build.sh OUTDIR
# The version is kmod/gpufpga/dkms.conf's PACKAGE_VERSION, at a tag
# v<version>; elsewhere a snapshot before it, <version>~git<date>.<rev>, from
# the commit (DEB_VERSION overrides). Files and man pages take the commit's
# time, so one revision builds the same packages.
set -euo pipefail
umask 022
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
GO=${GO:-go}
cd "$root"

modver=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' kmod/gpufpga/dkms.conf)
[ -n "$modver" ] || { echo "deb: no PACKAGE_VERSION in kmod/gpufpga/dkms.conf" >&2; exit 1; }
if [ -z "${DEB_VERSION:-}" ]; then
	if git describe --exact-match --tags --match "v$modver" >/dev/null 2>&1; then
		DEB_VERSION=$modver
	elif snap=$(TZ=UTC git log -1 --date=format-local:%Y%m%d%H%M%S --format=%cd.%h 2>/dev/null) && [ -n "$snap" ]; then
		DEB_VERSION=$modver~git$snap
	else
		DEB_VERSION=$modver
	fi
fi
if [ -z "${SOURCE_DATE_EPOCH:-}" ] && t=$(git log -1 --format=%ct 2>/dev/null); then
	export SOURCE_DATE_EPOCH=$t
fi
maintainer=${DEB_MAINTAINER:-$(git log -1 --format='%an <%ae>' 2>/dev/null || echo 'gpufpga <root@localhost>')}
goarch=$($GO env GOARCH)
case $goarch in
amd64 | arm64) arch=$goarch ;; # Go's and Debian's names agree
*) echo "deb: no Debian architecture for GOARCH=$goarch" >&2; exit 1 ;;
esac

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# One package of each name in OUTDIR, so that the README's globs match one.
rm -f "$out"/gpufpga-dkms_*.deb "$out"/p2pctl_*.deb "$out"/gpufpga-dev_*.deb

# pack DIR: DEBIAN/md5sums and Installed-Size, then the .deb.
pack() {
	local dir=$1 name arch
	(cd "$dir" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | sort -z | xargs -0r md5sum) >"$dir/DEBIAN/md5sums"
	echo "Installed-Size: $(du -sk --apparent-size --exclude=DEBIAN "$dir" | cut -f1)" >>"$dir/DEBIAN/control"
	name=$(sed -n 's/^Package: //p' "$dir/DEBIAN/control")
	arch=$(sed -n 's/^Architecture: //p' "$dir/DEBIAN/control")
	dpkg-deb --root-owner-group -Zxz --build "$dir" "$out/${name}_${DEB_VERSION}_${arch}.deb"
}

# gpufpga-dkms: what dkms.conf builds from, as hw/testbench/kernel/dkms-check.sh checks it.
pkg=$stage/gpufpga-dkms
mkdir -p "$pkg/DEBIAN"
packaging/dkms-source.sh "$pkg/usr/src" >/dev/null
install -D -m 644 kmod/gpufpga/99-gpufpga.rules "$pkg/usr/lib/udev/rules.d/99-gpufpga.rules"
for s in postinst prerm; do
	sed "s/@MODULE_VERSION@/$modver/g" "packaging/deb/gpufpga-dkms.$s" >"$pkg/DEBIAN/$s"
	chmod 755 "$pkg/DEBIAN/$s"
done
cat >"$pkg/DEBIAN/control" <<CONTROL
Package: gpufpga-dkms
Version: $DEB_VERSION
Architecture: all
Maintainer: $maintainer
Depends: dkms, adduser
Recommends: linux-headers-amd64 | linux-headers-arm64 | linux-headers-generic
Suggests: p2pctl
Section: kernel
Priority: optional
Description: FPGA XDMA to NVIDIA GPU peer DMA driver (DKMS)
 gpufpga drives a Xilinx XDMA engine (PG195) in an FPGA so that it moves
 data straight into and out of NVIDIA GPU memory over PCIe, pinning GPU
 memory through NVIDIA's P2P API or a CUDA dma-buf.
 .
 This package holds the sources of the gpufpga and gpufpga_nv kernel
 modules, which DKMS builds for each installed kernel with headers, and a
 udev rule that gives /dev/gpufpgaN to the gpufpga group.
CONTROL
pack "$pkg"

# p2pctl: built without cgo, but it loads libcuda through purego, which
# links libc dynamically; the docs come from a build for this machine,
# which may not run the package's GOARCH.
pkg=$stage/p2pctl
mkdir -p "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/usr/share/man/man1" "$pkg/usr/share/bash-completion/completions"
CGO_ENABLED=0 GOARCH=$goarch $GO build -trimpath \
	-ldflags "-s -w -X github.com/gpufpga/gpufpga/cmd/p2pctl/cli.Version=$DEB_VERSION" \
	-o "$pkg/usr/bin/p2pctl" ./cmd/p2pctl
GOARCH=$($GO env GOHOSTARCH) $GO run ./cmd/p2pctl/internal/gendocs "$stage/man" \
	"$pkg/usr/share/bash-completion/completions/p2pctl"
chmod 644 "$pkg/usr/share/bash-completion/completions/p2pctl"
for m in "$stage"/man/*.1; do
	f=${m##*/}
	gzip -9n <"$m" >"$pkg/usr/share/man/man1/$f.gz"
done
cat >"$pkg/DEBIAN/control" <<CONTROL
Package: p2pctl
Version: $DEB_VERSION
Architecture: $arch
Maintainer: $maintainer
Depends: libc6
Recommends: gpufpga-dkms
Section: utils
Priority: optional
Description: control tool for gpufpga FPGA-GPU peer DMA devices
 p2pctl operates gpufpga devices: it pins GPU and host memory, moves and
 verifies data, runs and measures acquisition streams, traces the driver,
 and checks a host for peer DMA (p2pctl doctor: driver, FPGA link, GPU
 BAR1, PCIe path and ACS, IOMMU, memlock).
CONTROL
pack "$pkg"

# gpufpga-dev: the ABI for C, C++ (CUDA) and bindings from other languages,
# as <gpufpga/gpufpga.h> and <gpufpga/gpufpga_resident.h>, which include
# only <linux/ioctl.h> and <linux/types.h>; the device side of a resident
# consumer for CUDA, <gpufpga/gpufpga_resident_cuda.cuh>; and the examples.
pkg=$stage/gpufpga-dev
doc=$pkg/usr/share/doc/gpufpga-dev
mkdir -p "$pkg/DEBIAN"
for h in gpufpga.h gpufpga_resident.h gpufpga_resident_cuda.cuh; do
	install -D -m 644 "kmod/gpufpga/uapi/$h" "$pkg/usr/include/gpufpga/$h"
done
install -D -m 644 examples/c-stream/c-stream.c "$doc/examples/c-stream.c"
install -D -m 644 examples/c-resident/c-resident.c "$doc/examples/c-resident.c"
install -D -m 644 examples/cuda-resident/consumer.cu "$doc/examples/cuda-resident.cu"
cat >"$pkg/DEBIAN/control" <<CONTROL
Package: gpufpga-dev
Version: $DEB_VERSION
Architecture: all
Maintainer: $maintainer
Depends: linux-libc-dev
Suggests: gpufpga-dkms
Section: libdevel
Priority: optional
Description: user-space ABI of the gpufpga FPGA-GPU peer DMA driver
 The headers of /dev/gpufpgaN's ioctls, read() records and GPU-resident
 stream layout, for programs in C, C++ or CUDA C++ (and bindings from other
 languages) that pin memory, run transfers and consume streams without the
 Go library, and a C example that consumes a stream.
CONTROL
pack "$pkg"
