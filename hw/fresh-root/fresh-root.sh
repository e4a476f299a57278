#!/usr/bin/env bash
# fresh-root.sh: make targets of a clean clone of HEAD in a new Debian 12
# root that holds only what a new machine holds: a minbase debootstrap, the
# machine image's Debian packages (image-packages.txt beside this script),
# Go (bind-mounted read-only from GOROOT, default /usr/local/go) and the
# host's apt sources and Go settings. A package installed by hand on the
# host, a cache (/var/cache/gpufpga), a file in /root: none is there, so an
# install step missing from `make deps` fails here as on a new machine.
#
#   hw/fresh-root/fresh-root.sh            # make test, phase by phase
#   hw/fresh-root/fresh-root.sh deps lint  # these targets, one make each
#
# Run it from the repository as root (make fresh-root does). `test` stands
# for the Makefile's TEST_PHASES, each run and timed on its own, in order,
# stopping at the first that fails, as make test does. The table at the
# end gives each phase's seconds, building the root included.
#
# The base root (debootstrap and the image's packages: minutes) is built
# once per package list and kept as FRESH_ROOT_CACHE/base-<hash>.tar
# (default /var/cache/fresh-root); later runs unpack it in seconds.
# FRESH_ROOT_KEEP=1 keeps the root afterwards; FRESH_ROOT_PACKAGES names
# another package list.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
list=${FRESH_ROOT_PACKAGES:-$here/image-packages.txt}
cache=${FRESH_ROOT_CACHE:-/var/cache/fresh-root}
goroot=${GOROOT:-/usr/local/go}
suite=bookworm

die() {
	echo "fresh-root: $*" >&2
	exit 1
}

[ "$(id -u)" = 0 ] || die "run as root: it builds a root with debootstrap and chroots into it"
repo=$(git -C "$here" rev-parse --show-toplevel)
[ -x "$goroot/bin/go" ] || die "no Go at $goroot (set GOROOT)"
command -v debootstrap >/dev/null || {
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
} || die "cannot install debootstrap"

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(test)

# The host's Debian mirror, else Debian's own.
mirror=http://deb.debian.org/debian
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
	m=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
	[ -z "$m" ] || mirror=$m
fi

# Rows of the report: phase, seconds, result.
rows=()
timed() { # name command...: runs command, adds a row, returns its status
	local name=$1 s rc=0
	shift
	s=$(date +%s)
	"$@" || rc=$?
	rows+=("$name|$(($(date +%s) - s))|$([ "$rc" = 0 ] && echo ok || echo "failed ($rc)")")
	return "$rc"
}

report() {
	local r name secs result total=0
	echo
	echo "| phase | seconds | result |"
	echo "| --- | --- | --- |"
	for r in "${rows[@]}"; do
		IFS='|' read -r name secs result <<<"$r"
		total=$((total + secs))
		echo "| $name | $secs | $result |"
	done
	echo "| total | $total | |"
}

# The host's apt sources, DNS, certificates and Go settings (a proxy, say):
# what a new machine of the image has.
host_config() {
	local root=$1
	mkdir -p "$root/etc/apt/sources.list.d" "$root/etc/apt/apt.conf.d" "$root/etc/ssl/certs" "$root/root/.config/go"
	if [ -f /etc/apt/sources.list.d/debian.sources ]; then
		rm -f "$root/etc/apt/sources.list"
		cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/"
	fi
	cp -r /etc/apt/apt.conf.d/. "$root/etc/apt/apt.conf.d/"
	cp /etc/resolv.conf /etc/hosts "$root/etc/"
	cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
	if [ -f /root/.config/go/env ]; then
		cp /root/.config/go/env "$root/root/.config/go/env"
	fi
}

# debootstrap, then every package of the list the mirror still has.
build_base() {
	local base=$1 log=$cache/base.log pkgs
	debootstrap --variant=minbase "$suite" "$base" "$mirror" >"$log" 2>&1 || {
		tail -n 20 "$log" >&2
		return 1
	}
	host_config "$base" || return 1
	mapfile -t pkgs < <(grep -v '^[[:space:]]*\(#\|$\)' "$list")
	# In a mount namespace of its own: /proc goes when it ends. The
	# inner shell expands the script's variables.
	# shellcheck disable=SC2016
	unshare -m bash -euo pipefail -c '
		base=$1 log=$2
		shift 2
		mount --make-rprivate /
		mount -t proc proc "$base/proc"
		chroot "$base" apt-get update -qq
		mapfile -t avail < <(chroot "$base" apt-cache policy "$@" 2>/dev/null |
			awk "/^[^ ]/ {n = \$1; sub(/:\$/, \"\", n)} /Candidate:/ && \$2 != \"(none)\" {print n}")
		echo "fresh-root: installing ${#avail[@]} of $# image packages"
		DEBIAN_FRONTEND=noninteractive chroot "$base" apt-get install -y -qq --no-install-recommends \
			"${avail[@]}" >>"$log" 2>&1 || { tail -n 20 "$log" >&2; exit 1; }
		chroot "$base" apt-get clean
	' base "$base" "$log" "${pkgs[@]}"
}

mkdir -p "$cache"
key=$(cat "$list" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)
tarball=$cache/base-$suite-$key.tar
trap report EXIT
if [ ! -f "$tarball" ]; then
	echo "fresh-root: building the base root ($suite minbase and $(grep -c . "$list") image packages), once"
	tmp=$(mktemp -d /var/tmp/fresh-root-base.XXXXXX)
	timed "base root (debootstrap, image packages; cached)" build_base "$tmp" || exit 1
	tar -C "$tmp" -cf "$tarball.part" . && mv "$tarball.part" "$tarball"
	rm -rf "$tmp"
fi

root=$(mktemp -d /var/tmp/fresh-root.XXXXXX)
cleanup() {
	report
	if grep -q " $root/" /proc/mounts; then
		echo "fresh-root: $root still has mounts; left in place" >&2
	elif [ "${FRESH_ROOT_KEEP:-0}" = 1 ]; then
		echo "fresh-root: kept $root"
	else
		rm -rf "$root"
	fi
}
trap cleanup EXIT
echo "fresh-root: $root: make ${targets[*]} on $(git -C "$repo" rev-parse --short HEAD)"
timed "unpack the base root" tar -C "$root" -xf "$tarball" || exit 1
host_config "$root"
mkdir -p "$root/work" "$root/usr/local/go"
timed "clone HEAD" git clone -q --no-local "$repo" "$root/work/gpufpga" || exit 1

# test is the clone's TEST_PHASES, one make each.
phases=()
for t in "${targets[@]}"; do
	if [ "$t" = test ]; then
		read -ra tp <<<"$(make -s -C "$root/work/gpufpga" --no-print-directory test-phases)"
		phases+=("${tp[@]}")
	else
		phases+=("$t")
	fi
done

# Each phase in a mount namespace of its own, so that its mounts go when
# it ends, whatever it leaves running.
in_root() {
	# shellcheck disable=SC2016 # the inner shell expands them
	unshare -m bash -euo pipefail -c '
		root=$1 goroot=$2 target=$3
		mount --make-rprivate /
		mount --bind -o ro "$goroot" "$root/usr/local/go"
		mount -t proc proc "$root/proc"
		mount --rbind /sys "$root/sys"
		mount --rbind /dev "$root/dev"
		mount -t tmpfs tmpfs "$root/tmp"
		exec chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb CI=true LANG=C.UTF-8 \
			PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			make -C /work/gpufpga "$target"
	' in_root "$root" "$goroot" "$1"
}
for p in "${phases[@]}"; do
	timed "make $p" in_root "$p" || exit 1
done
