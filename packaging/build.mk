# packaging/build.mk - make deb: $(BUILD)/kpiscope_VERSION_ARCH.deb from the
# programs of $(BUILD) (packaging/mkdeb.sh lays it out); make image: the
# localhost/kpiscope-agent image from that .deb on a debootstrapped Debian 12
# (packaging/mkimage.sh); make fresh-check: the README's set-up on a fresh
# Debian 12 root (tests/fresh_check.sh). docs/install.md.

DEB_ARCH = $(shell dpkg --print-architecture)
DEB_FILE = $(BUILD)/kpiscope_$(VERSION)_$(DEB_ARCH).deb
.PHONY: deb deb-lint image fresh-check

deb: all
	$(Q)sh packaging/mkdeb.sh $(BUILD) $(VERSION)

image: deb
	$(Q)sh packaging/mkimage.sh $(BUILD) $(VERSION) $(DEB_FILE)

# Minutes, and the Debian mirror: not part of make test (docs/install.md).
fresh-check: deps
	$(Q)sh tests/fresh_check.sh $(BUILD)

# lintian on make deb's package: passes, or packaging/lintian-overrides says
# why not (a minute of a loaded 2-core machine: outside make test).
deb-lint: deb
	$(Q)lintian --fail-on error,warning $(DEB_FILE) && echo "lintian: $(DEB_FILE) passes"
