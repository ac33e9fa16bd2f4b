#!/bin/sh
# tests/fresh_check.sh BUILD - make fresh-check: the README's set-up on a really
# fresh Debian 12. A `debootstrap --variant=minbase bookworm` root
# (packaging/bookworm-base.sh) imported into podman, a clean clone of this
# repository's HEAD copied in, and in a privileged container (the host's pid
# namespace, as the agent requires; the host's network, for the mirror) the
# README's lines run as a new user would: its one apt-get line, then `make demo`,
# which must pass on its first run. Writes BUILD/fresh-check/result.txt: the
# time to the first demo frame, packages before and after, what apt
# downloaded. Minutes (it builds kpiscope from nothing): outside make test.
set -eu
B=$1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$B/fresh-check
BASE=localhost/kpiscope-fresh:bookworm
NAME=kpiscope-fresh-check-$$
[ "$(id -u)" = 0 ] || { echo "fresh-check: needs root (debootstrap, podman --privileged)" >&2; exit 1; }
for t in podman git; do
	command -v $t >/dev/null || { echo "fresh-check: $t is missing: make deps" >&2; exit 1; }
done
rm -rf "$OUT"
mkdir -p "$OUT"
sh "$ROOT/packaging/bookworm-base.sh" "$B/bookworm-minbase.tar"
podman import -q "$B/bookworm-minbase.tar" "$BASE" >/dev/null

# the clone: what is committed, nothing of this tree's build/ or changes
# (outside build/: make reads every *.d file under it, and abi/*.d are dtrace's)
CLONE=$(mktemp -d "${TMPDIR:-/tmp}/kpi-fresh-clone.XXXXXX")
git clone -q --no-local "$ROOT" "$CLONE/kpiscope"
rm -rf "$CLONE/kpiscope/.git/hooks"
[ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no)" ] &&
	echo "fresh-check: note: uncommitted changes are not in the clone (HEAD $(git -C "$ROOT" rev-parse --short HEAD))"

# The README's set-up, word for word from its first sh block (its comments cut),
# up to make demo; timestamps around it.
setup=$(awk '/^```sh$/ { on = 1; next } on && /^```$/ { exit } on' "$ROOT/README.md" |
	sed 's/[[:space:]]*#.*$//' | grep -v '^make test' | grep -v '^$')
printf '%s\n' "$setup" | grep -q '^make demo$' || { echo "fresh-check: the README's first sh block has no 'make demo' line" >&2; exit 1; }
{
	cat <<'EOF'
set -eo pipefail
# each line of make demo's output passes; the first kpitop frame is stamped
stamp() { while IFS= read -r l; do case "$l" in *"kpitop --once"*) echo "t_frame $(date +%s.%N)";; esac; printf '%s\n' "$l"; done; }
installed() { dpkg-query -W -f '${Status}\n' | grep -c 'install ok installed'; }
cd /root/kpiscope
echo "packages before: $(installed)"
echo "t_start $(date +%s.%N)"
EOF
	printf '%s\n' "$setup" | sed 's/^make demo$/make demo 2>\&1 | stamp/'
	cat <<'EOF'
echo "t_end $(date +%s.%N)"
echo "packages after: $(installed)"
echo "apt downloaded: $(du -sm /var/cache/apt/archives | cut -f1) MB"
dpkg-query -W -f '${Package}\n' | sort > /root/packages-after.txt
EOF
} > "$OUT/run.sh"
# runc, and this shell's own limits: on hosts with cgroups v1 and v2 mounted
# together crun refuses ("cgroups in hybrid mode not supported"), and podman's
# default limits (nofile 1048576) are above what a root without
# CAP_SYS_RESOURCE may set: this shell's open files, and 32768 processes (what
# conmon runs with here; runc fails above it).
lim() { awk -v k="$1" '$0 ~ k { print $(NF-2) ":" $(NF-1) }' /proc/self/limits; }
podman create -q --name "$NAME" --privileged --pid=host --network=host --runtime runc \
	--ulimit nofile="$(lim 'Max open files')" --ulimit nproc=32768:32768 "$BASE" \
	bash /root/run.sh >/dev/null
trap 'podman rm -f "$NAME" >/dev/null 2>&1 || true; rm -rf "$CLONE"' EXIT
podman cp "$CLONE/kpiscope" "$NAME:/root/kpiscope"
podman cp "$OUT/run.sh" "$NAME:/root/run.sh"
echo "fresh-check: the README's set-up in a fresh bookworm container (logs: $OUT/log.txt)"
rc=0
podman start -a "$NAME" > "$OUT/log.txt" 2>&1 || rc=$?
podman cp "$NAME:/root/packages-after.txt" "$OUT/packages-after.txt" 2>/dev/null || true
tar -tf "$B/bookworm-minbase.tar" ./var/lib/dpkg/status >/dev/null 2>&1 && \
	tar -xOf "$B/bookworm-minbase.tar" ./var/lib/dpkg/status | sed -n 's/^Package: //p' | sort > "$OUT/packages-before.txt"
start=$(sed -n 's/^t_start //p' "$OUT/log.txt")
frame=$(sed -n 's/^t_frame //p' "$OUT/log.txt" | head -1)
{
	echo "fresh-check $(date -u +%FT%TZ), the clone at $(git -C "$CLONE/kpiscope" rev-parse --short=12 HEAD), exit $rc"
	grep '^packages \|^apt downloaded' "$OUT/log.txt" || true
	[ -n "$start" ] && [ -n "$frame" ] &&
		echo "time to the first demo frame: $(awk "BEGIN { printf \"%.0f\", $frame - $start }") s (from the README's first line)"
	grep -o 'the trace holds [0-9]* requests' "$OUT/log.txt" || true
	if [ -s "$OUT/packages-after.txt" ] && [ -s "$OUT/packages-before.txt" ]; then
		echo "installed by the set-up: $(comm -13 "$OUT/packages-before.txt" "$OUT/packages-after.txt" | tr '\n' ' ')"
	fi
} > "$OUT/result.txt"
cat "$OUT/result.txt"
if [ "$rc" != 0 ]; then
	echo "fresh-check FAILED (exit $rc); the end of $OUT/log.txt:" >&2
	tail -25 "$OUT/log.txt" >&2
	exit 1
fi
