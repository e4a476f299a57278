#!/usr/bin/env bash
# Builds the rig's QEMU: Debian's own QEMU source, the version of the
# installed qemu-system-x86 package with Debian's patches, plus one device,
# xdma-model (xdma-model.c here), which gives the simulated FPGA a real PCI
# function: trapped BARs served by the device model, MSI-X, MSI and INTx.
# Stock QEMU 7.2 cannot do that under TCG (x-pci-proxy-dev raises INTx only
# through KVM and has no MSI).
#
# x86_64 only, with the devices the rig uses (rig.mak) and no optional
# features but 9p (VirtFS), which the guest tests need. Firmware comes from
# Debian's packages (seabios, ipxe), as for Debian's own QEMU.
#
# The result is cached outside the work tree under $GPUFPGA_CACHE (default
# /var/cache/gpufpga), keyed by the source version and the hash of this
# directory's files; the three most recently used builds are kept. Prints
# the path of qemu-system-x86_64.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${GPUFPGA_CACHE:-/var/cache/gpufpga}

ver=$(dpkg-query -W -f='${source:Version}' qemu-system-x86 2>/dev/null) || {
	echo "qemu: qemu-system-x86 is not installed: run make deps" >&2; exit 1; }
key=$(cd "$here" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12)
out=$cache/qemu/qemu-${ver#*:}-$key
bin=$out/bin/qemu-system-x86_64
if [ -f "$out/.done" ]; then touch "$out"; echo "$bin"; exit 0; fi

mkdir -p "$cache/qemu"
exec 9>"$cache/qemu/.lock"
flock 9
if [ -f "$out/.done" ]; then echo "$bin"; exit 0; fi
rm -rf "$out"
mkdir -p "$out"
start=$(date +%s)
echo "qemu: building Debian's qemu $ver with xdma-model (key $key) in $out; a fresh machine does this once" >&2
log=$out/build.log
cd "$out"
# Needs a deb-src line for bookworm (make deps adds it).
apt-get source --download-only "qemu=$ver" >"$log" 2>&1 || {
	tail -n 20 "$log" >&2; echo "qemu: cannot fetch the source of qemu $ver: run make deps" >&2; exit 1; }
dpkg-source -x qemu_"${ver#*:}".dsc src >>"$log" 2>&1 || { tail -n 20 "$log" >&2; exit 1; }
rm -f qemu_*
cd src
cp "$here/xdma-model.c" hw/misc/
echo "softmmu_ss.add(when: 'CONFIG_PCI', if_true: files('xdma-model.c'))" >>hw/misc/meson.build
cp "$here/rig.mak" configs/devices/x86_64-softmmu/rig.mak
# The dfsg tarball carries no EDK2 images: do not try to unpack them.
grep -q 'unpack_edk2_blobs = bzip2.found()' meson.build || {
	echo "qemu: meson.build no longer unpacks EDK2 images as expected: update build-qemu.sh" >&2; exit 1; }
sed -i 's/unpack_edk2_blobs = bzip2.found()/unpack_edk2_blobs = false/' meson.build
mkdir build
cd build
../configure --target-list=x86_64-softmmu --prefix=/usr \
	--firmwarepath=/usr/share/qemu:/usr/share/seabios:/usr/lib/ipxe/qemu \
	--without-default-features --without-default-devices --with-devices-x86_64=rig \
	--enable-virtfs --enable-attr --enable-cap-ng \
	--disable-docs --disable-install-blobs --disable-werror >>"$log" 2>&1 || {
	tail -n 30 "$log" >&2; exit 1; }
ninja -j"$(nproc)" qemu-system-x86_64 >>"$log" 2>&1 || { tail -n 40 "$log" >&2; exit 1; }
# Keep the binary only: the tree is 1 GiB. QEMU looks for its firmware
# relative to its binary (bin/../share/...): there, Debian's.
mkdir -p "$out/bin" "$out/share" "$out/lib/ipxe"
mv qemu-system-x86_64 "$bin"
cd "$out"
rm -rf src
ln -s /usr/share/qemu /usr/share/seabios share/
ln -s /usr/lib/ipxe/qemu lib/ipxe/qemu
touch .done
# Other worktrees may use other builds: keep the three last used.
ls -dt "$cache/qemu"/qemu-*/ | tail -n +4 | while IFS= read -r old; do rm -rf "$old"; done
echo "qemu: built in $(( $(date +%s) - start )) s" >&2
echo "$bin"
