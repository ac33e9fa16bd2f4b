#!/bin/sh
# packaging/mkimage.sh BUILD VERSION DEB - make image: localhost/kpiscope-agent:VERSION
# and :latest, the package DEB installed with apt on a debootstrapped Debian 12
# root (packaging/bookworm-base.sh), imported with podman import (no registry,
# no Containerfile build: the root is made here, with this host's network and
# apt), kpi-agent the entry point. Run it privileged, in the host's pid
# namespace (deploy/kubernetes/kpi-agent.yaml; docs/install.md).
set -eu
B=$1
VERSION=$2
DEB=$3
IMAGE=localhost/kpiscope-agent
[ "$(id -u)" = 0 ] || { echo "make image: needs root (debootstrap, chroot, podman)" >&2; exit 1; }
command -v podman >/dev/null || { echo "make image: podman is missing: make deps" >&2; exit 1; }
sh packaging/bookworm-base.sh "$B/bookworm-minbase.tar"

dir=$(mktemp -d "${TMPDIR:-/tmp}/kpi-image.XXXXXX")
trap 'rm -rf "$dir"' EXIT
R=$dir/root
mkdir "$R"
tar -C "$R" -xf "$B/bookworm-minbase.tar"
cp "$DEB" "$R/tmp/kpiscope.deb"
cp /etc/resolv.conf "$R/etc/resolv.conf"
# apt in the new root, in a mount namespace of its own (its /proc goes with it)
unshare --mount --propagation private sh -c '
	set -e
	mount -t proc proc "$1/proc"
	chroot "$1" sh -c "export DEBIAN_FRONTEND=noninteractive;
		apt-get update -qq && apt-get install -y -qq --no-install-recommends /tmp/kpiscope.deb" > "$1/../apt.log" 2>&1 \
		|| { tail -20 "$1/../apt.log" >&2; exit 1; }
' sh "$R"
rm -rf "$R/tmp/kpiscope.deb" "$R"/var/lib/apt/lists/* "$R"/var/cache/apt/*.bin "$R"/var/cache/apt/archives/*.deb
: > "$R/etc/resolv.conf"
tar -C "$R" --numeric-owner -cf "$dir/root.tar" .
podman import -q \
	--change 'ENTRYPOINT ["/usr/sbin/kpi-agent"]' \
	--change 'CMD ["--db", "/var/lib/kpiscope/trace.db"]' \
	--change "LABEL org.opencontainers.image.version=$VERSION" \
	--change 'LABEL org.opencontainers.image.title=kpiscope-agent' \
	"$dir/root.tar" "$IMAGE:$VERSION" >/dev/null
podman tag "$IMAGE:$VERSION" "$IMAGE:latest"
echo "built $IMAGE:$VERSION and $IMAGE:latest ($(podman image inspect --format '{{.Size}}' "$IMAGE:$VERSION" | awk '{printf "%.0f MB", $1/1e6}'))"
