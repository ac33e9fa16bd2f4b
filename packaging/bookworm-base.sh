#!/bin/sh
# packaging/bookworm-base.sh TAR - a fresh Debian 12 root file system, as
# `debootstrap --variant=minbase bookworm` makes it, packed into TAR (kept:
# make image and make fresh-check both start from it, and a second run needs
# no download). Remove TAR to bootstrap again. Needs root and the mirror.
set -eu
TAR=$1
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
[ -s "$TAR" ] && exit 0
[ "$(id -u)" = 0 ] || { echo "$0: debootstrap needs root (sudo make ...)" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "$0: debootstrap is missing: make deps" >&2; exit 1; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/kpi-bookworm.XXXXXX")
trap 'rm -rf "$dir"' EXIT
echo "debootstrap --variant=minbase bookworm from $MIRROR (a few minutes)"
debootstrap --variant=minbase bookworm "$dir/root" "$MIRROR" > "$dir/log" 2>&1 \
	|| { tail -20 "$dir/log" >&2; echo "$0: debootstrap failed" >&2; exit 1; }
# what a fresh machine has: debootstrap's apt lists are empty, as on any new install
rm -rf "$dir/root/var/cache/apt/archives/"*.deb
mkdir -p "$(dirname "$TAR")"
tar -C "$dir/root" --numeric-owner -cf "$TAR.tmp" . && mv "$TAR.tmp" "$TAR"
echo "wrote $TAR ($(du -m "$TAR" | cut -f1) MiB)"
