#!/bin/sh
# packaging/mkdeb.sh BUILD VERSION - `make deb`: BUILD/kpiscope_VERSION_ARCH.deb
# from the programs already built in BUILD, with dpkg-deb (no debhelper: the
# tree is small and laid out here, in one place). Depends: from dpkg-shlibdeps
# on the programs, plus adduser (postinst makes the kpiscope user).
#
#   /usr/sbin/kpi-agent               the host daemon (section 8)
#   /usr/bin/kpi-infer kpitop kpi-report kpi-bench kpi-ship
#   /usr/lib/kpiscope/                libkpi_cupti.so (CUDA_INJECTION64_PATH; only
#                                     where the build found CUDA), libkpi_sqlite.so
#                                     (sqlite3 .load), bpf/*.bpf.o (the agent embeds
#                                     the same objects; these are for bpftool)
#   /usr/share/kpiscope/schema/       the trace's SQL, ClickHouse tables, alert rules
#   /lib/systemd/system/kpi-agent.service
#   /usr/share/man/man{1,8}/          the six pages of docs/man
#   /usr/share/doc/kpiscope/          README.md, docs/*, copyright, changelog
#   /var/lib/kpiscope                 made by postinst (0750 kpiscope), the trace
set -eu
B=$1
VERSION=$2
ARCH=$(dpkg --print-architecture)
# who answers for the package: set it for one you give to others
MAINTAINER=${DEB_MAINTAINER:-kpiscope developers <kpiscope@example.org>}
PKG=$B/pkg/kpiscope
OUT=$B/kpiscope_${VERSION}_${ARCH}.deb

for p in kpi-agent kpi-infer kpitop kpi-report kpi-bench kpi-ship libkpi_sqlite.so; do
	[ -e "$B/$p" ] || { echo "make deb: $B/$p is not built (run make and read its errors)" >&2; exit 1; }
done

rm -rf "$B/pkg"
mkdir -p "$PKG/DEBIAN" "$PKG/usr/bin" "$PKG/usr/sbin" "$PKG/usr/lib/kpiscope/bpf" \
	"$PKG/usr/share/kpiscope/schema" "$PKG/lib/systemd/system" "$PKG/usr/share/man/man1" \
	"$PKG/usr/share/man/man8" "$PKG/usr/share/doc/kpiscope/docs" \
	"$PKG/usr/share/lintian/overrides"

# Programs stripped of their debug sections (lintian: unstripped-binary-or-object).
install -m 0755 "$B/kpi-agent" "$PKG/usr/sbin/kpi-agent"
for p in kpi-infer kpitop kpi-report kpi-bench kpi-ship; do
	install -m 0755 "$B/$p" "$PKG/usr/bin/$p"
done
for f in "$PKG/usr/sbin/kpi-agent" "$PKG"/usr/bin/*; do
	# the USDT notes (.note.stapsdt) stay: they are kpi-infer's probes
	objcopy --strip-debug --strip-unneeded --remove-section=.comment "$f"
done
install -m 0644 "$B/libkpi_sqlite.so" "$PKG/usr/lib/kpiscope/"
objcopy --strip-debug --strip-unneeded --remove-section=.comment "$PKG/usr/lib/kpiscope/libkpi_sqlite.so"
if [ -e "$B/libkpi_cupti.so" ]; then
	install -m 0644 "$B/libkpi_cupti.so" "$PKG/usr/lib/kpiscope/"
	objcopy --strip-debug --strip-unneeded --remove-section=.comment "$PKG/usr/lib/kpiscope/libkpi_cupti.so"
fi
install -m 0644 "$B"/bpf/*.bpf.o "$PKG/usr/lib/kpiscope/bpf/"

cp -r schema/*.sql schema/clickhouse schema/prometheus "$PKG/usr/share/kpiscope/schema/"
install -m 0644 packaging/kpi-agent.service "$PKG/lib/systemd/system/"
for m in docs/man/*.[18]; do
	s=${m##*.}
	gzip -9n < "$m" > "$PKG/usr/share/man/man$s/$(basename "$m").gz"
done
install -m 0644 README.md "$PKG/usr/share/doc/kpiscope/"
install -m 0644 docs/*.md docs/*.bt docs/*.json "$PKG/usr/share/doc/kpiscope/docs/"
install -m 0644 packaging/copyright "$PKG/usr/share/doc/kpiscope/copyright"
sed "s/@VERSION@/$VERSION/; s|@MAINTAINER@|$MAINTAINER|; s/@DATE@/$(date -R -d @"${SOURCE_DATE_EPOCH:-$(stat -c %Y VERSION)}")/" \
	packaging/changelog | gzip -9n > "$PKG/usr/share/doc/kpiscope/changelog.gz"
install -m 0644 packaging/lintian-overrides "$PKG/usr/share/lintian/overrides/kpiscope"
find "$PKG" -type d -exec chmod 0755 {} +
find "$PKG/usr/share" "$PKG/lib" -type f -exec chmod 0644 {} +

# Depends: what the programs link, as dpkg-shlibdeps finds it (it wants a
# debian/control to read; libkpi_cupti.so is left out: its libcupti is
# NVIDIA's, in the CUDA process it is injected into, not a Debian package).
sd=$B/pkg/shlibdeps
mkdir -p "$sd/debian"
printf 'Source: kpiscope\n\nPackage: kpiscope\nArchitecture: any\n' > "$sd/debian/control"
abs=$(cd "$PKG" && pwd)
deps=$(cd "$sd" && dpkg-shlibdeps -O "$abs/usr/sbin/kpi-agent" "$abs"/usr/bin/* \
	"$abs/usr/lib/kpiscope/libkpi_sqlite.so" 2>"$abs/../shlibdeps.log" | sed -n 's/^shlibs:Depends=//p') \
	|| { cat "$B/pkg/shlibdeps.log" >&2; exit 1; }
[ -n "$deps" ] || { echo "make deb: dpkg-shlibdeps found no dependency" >&2; cat "$B/pkg/shlibdeps.log" >&2; exit 1; }

install -m 0755 packaging/postinst packaging/postrm "$PKG/DEBIAN/"
(cd "$PKG" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) \
	> "$PKG/DEBIAN/md5sums"
size=$(du -sk --exclude=DEBIAN "$PKG" | cut -f1)
sed -e "s/@VERSION@/$VERSION/" -e "s|@MAINTAINER@|$MAINTAINER|" -e "s/@ARCH@/$ARCH/" -e "s/@SIZE@/$size/" -e "s/@DEPENDS@/adduser, $deps/" \
	packaging/control > "$PKG/DEBIAN/control"
# xz, as Debian's own; DEB_COMPRESS="-Zgzip -z1" for a quick one (tests/test_package.py:
# xz takes a minute of a loaded 2-core machine, gzip -1 a second)
dpkg-deb --root-owner-group ${DEB_COMPRESS:--Zxz} --build "$PKG" "$OUT" >/dev/null
echo "built $OUT"
