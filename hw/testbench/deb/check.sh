#!/usr/bin/env bash
# Follows README.md's "On a real host" on this machine, as root: builds the
# packages, installs them with apt, checks that DKMS built and installed the
# modules for every kernel that has headers and that p2pctl runs, then
# purges both and checks that nothing is left behind. It never loads a
# module. A previous run's packages are purged first.
#   check.sh KVER...   (kernels that must be among those DKMS built for)
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$root"
pkgs=(gpufpga-dkms p2pctl gpufpga-dev)
modules=(gpufpga gpufpga_nv)
modver=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' kmod/gpufpga/dkms.conf)

fail() {
	echo "deb-check: FAIL: $*" >&2
	exit 1
}
step() { echo "== deb-check: $* (${SECONDS}s)"; }
[ "$(id -u)" = 0 ] || fail "run as root: it installs packages"

# The commands the README gives, which this check runs as written (as root,
# so without sudo, and with apt answering yes).
want='make deb
sudo apt install ./build/deb/gpufpga-dkms_*.deb ./build/deb/p2pctl_*.deb ./build/deb/gpufpga-dev_*.deb
p2pctl doctor'
readme=$(awk '/^## On a real host$/ { s = 1; next }
	s && /^## / { exit }
	s && /^```/ { if (b) exit; b = 1; next }
	s && b' README.md)
if [ "$readme" != "$want" ]; then
	fail "README.md's \"On a real host\" commands are not the ones this check follows:
$readme"
fi
mapfile -t cmds <<<"$want"

installed() {
	local p st
	for p in "${pkgs[@]}"; do
		st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
		case $st in "" | *not-installed) ;; *) echo "$p" ;; esac
	done
}
purge() {
	local left
	left=$(installed)
	if [ -n "$left" ]; then
		# shellcheck disable=SC2086 # one word per package
		dpkg --purge $left
	fi
}

# What installing may touch; purging must restore it exactly.
snapshot() {
	local d
	for d in /usr/src /lib/modules; do
		find "$d" -mindepth 1 -maxdepth 2
	done
	for d in /lib/modules/*/updates /var/lib/dkms /usr/lib/udev/rules.d /etc/udev/rules.d \
		/usr/bin /usr/share/bash-completion/completions /usr/share/man/man1 /usr/include /usr/share/doc; do
		if [ -e "$d" ]; then find "$d"; fi
	done
	find /var/lib/dpkg/info -name 'gpufpga*' -o -name 'p2pctl*'
	grep -l gpufpga /lib/modules/*/modules.dep || true
}
# DKMS makes its module signing key on its first build on a machine and
# keeps it: its state, not the packages'.
snapshot_ours() { snapshot | grep -Ev '^/var/lib/dkms/mok\.(key|pub)$'; }

tmp=$(mktemp -d)
group_created=
cleanup() {
	local rc=$?
	if [ "$rc" != 0 ] && [ -n "$(installed)" ]; then
		echo "deb-check: purging after the failure" >&2
		purge >/dev/null 2>&1 || echo "deb-check: purge failed: see dpkg -l 'gpufpga*' p2pctl" >&2
	fi
	# Debian leaves system groups behind on purge; the check does not.
	if [ -n "$group_created" ] && getent group gpufpga >/dev/null; then
		groupdel gpufpga || echo "deb-check: groupdel gpufpga failed" >&2
	fi
	rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT

if [ -n "$(installed)" ]; then
	step "purging a previous run's packages"
	purge
fi
getent group gpufpga >/dev/null || group_created=1
snapshot_ours | sort >"$tmp/before"

# The kernels with headers: DKMS must have built for each.
kernels=()
for d in /lib/modules/*/; do
	if [ -e "$d/build" ]; then kernels+=("$(basename "$d")"); fi
done
for k in "$@"; do
	[[ " ${kernels[*]} " == *" $k "* ]] || fail "no headers for $k under /lib/modules/$k/build"
done
[ "${#kernels[@]}" -gt 0 ] || fail "no kernel has headers here"

step "${cmds[0]}"
eval "${cmds[0]}"

step "${cmds[1]}"
printf 'APT::Get::Assume-Yes "true";\n' >"$tmp/apt.conf"
(
	export APT_CONFIG=$tmp/apt.conf DEBIAN_FRONTEND=noninteractive
	eval "${cmds[1]#sudo }"
) </dev/null

step "checking the installed packages"
for p in "${pkgs[@]}"; do
	st=$(dpkg-query -W -f='${Status}' "$p")
	[ "$st" = "install ok installed" ] || fail "$p: $st"
done
debver=$(dpkg-query -W -f='${Version}' p2pctl)
[ -f "/usr/src/gpufpga-$modver/dkms.conf" ] || fail "no /usr/src/gpufpga-$modver/dkms.conf"
[ -f /usr/lib/udev/rules.d/99-gpufpga.rules ] || fail "no udev rule"
getent group gpufpga >/dev/null || fail "no gpufpga group"
for k in "${kernels[@]}"; do
	st=$(dkms status -m gpufpga -v "$modver" -k "$k")
	[[ $st == *": installed"* ]] || fail "dkms status for $k: ${st:-nothing}"
	for m in "${modules[@]}"; do
		f=$(modinfo -k "$k" -F filename "$m") || fail "modinfo -k $k $m"
		case $f in
		/lib/modules/"$k"/updates/* | /usr/lib/modules/"$k"/updates/*) ;;
		*) fail "$m for $k is $f, not DKMS's" ;;
		esac
		[ -f "$f" ] || fail "$f missing"
		magic=$(modinfo -k "$k" -F vermagic "$m")
		[[ $magic == "$k "* ]] || fail "$m for $k has vermagic $magic"
		echo "deb-check: $k: $f"
	done
done

step "p2pctl"
[ "$(command -v p2pctl)" = /usr/bin/p2pctl ] || fail "p2pctl on PATH is $(command -v p2pctl)"
out=$(p2pctl version) || fail "p2pctl version exited $?"
echo "$out"
[ "$out" = "p2pctl $debver" ] || fail "p2pctl version says \"$out\", the package is $debver"
# What the bash completion script asks p2pctl for.
out=$(p2pctl __complete 'do' 2>/dev/null)
grep -q '^doctor' <<<"$out" || fail "completion does not offer doctor: $out"
out=$(zcat /usr/share/man/man1/p2pctl-doctor.1.gz)
grep -q '^\.SH NAME' <<<"$out" || fail "p2pctl-doctor.1.gz is not a man page"

step "gpufpga-dev"
# The installed example builds against the installed headers alone.
[ -f /usr/include/gpufpga/gpufpga.h ] && [ -f /usr/include/gpufpga/gpufpga_resident.h ] || fail "no /usr/include/gpufpga headers"
gcc -std=c11 -Wall -Wextra -Werror -o "$tmp/c-stream" /usr/share/doc/gpufpga-dev/examples/c-stream.c ||
	fail "the installed C example does not build against the installed headers"
out=$("$tmp/c-stream" -d /nonexistent 2>&1) && fail "c-stream ran without a device"
grep -q '^c-stream: /nonexistent: No such file or directory' <<<"$out" || fail "c-stream without a device: $out"
gcc -std=c11 -Wall -Wextra -Werror -o "$tmp/c-resident" /usr/share/doc/gpufpga-dev/examples/c-resident.c ||
	fail "the installed C resident example does not build against the installed headers"
out=$("$tmp/c-resident" -d /nonexistent 2>&1) && fail "c-resident ran without a device"
grep -q '^c-resident: /nonexistent: No such file or directory' <<<"$out" || fail "c-resident without a device: $out"

step "${cmds[2]}"
rc=0
out=$(eval "${cmds[2]}" 2>&1) || rc=$?
echo "$out"
if [ -e /sys/module/gpufpga ]; then
	grep -Eq '^OK +driver\.module ' <<<"$out" || fail "doctor: no OK line for driver.module"
else
	# Not loaded here: doctor must say so and exit 3.
	[ "$rc" = 3 ] || fail "doctor exited $rc, want 3 (a failed check)"
	grep -Eq '^FAIL +driver\.module +gpufpga +gpufpga module not loaded' <<<"$out" ||
		fail "doctor: no FAIL line for driver.module"
fi

step "dpkg --purge ${pkgs[*]}"
dpkg --purge "${pkgs[@]}"
[ -z "$(installed)" ] || fail "still installed: $(installed)"
[ ! -e /var/lib/dkms/gpufpga ] || fail "/var/lib/dkms/gpufpga left behind"
left=$(find /usr/src -maxdepth 1 -name 'gpufpga-*'; find /lib/modules -name 'gpufpga*.ko*')
[ -z "$left" ] || fail "left behind: $left"
snapshot_ours | sort >"$tmp/after"
if ! diff -u "$tmp/before" "$tmp/after" >"$tmp/diff"; then
	cat "$tmp/diff" >&2
	fail "the purge did not restore the files above"
fi
step "OK: installed, built for ${kernels[*]}, ran, purged without a trace"
