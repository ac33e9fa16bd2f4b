# kpiscope: the one entry point. Every part registers its own rules in a
# <dir>/build.mk fragment included below; outputs go to build/.

# As many jobs as CPUs unless the command line says -jN: a fresh build is
# most of a fresh make test's first minutes.
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)

ARCH ?= $(shell uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
BUILD := build
OBJ := $(BUILD)/obj

ifeq ($(wildcard vmlinux/$(ARCH)/vmlinux.h),)
$(error unsupported ARCH '$(ARCH)': no vmlinux/$(ARCH)/vmlinux.h (generate one with: bpftool btf dump file /sys/kernel/btf/vmlinux format c > vmlinux/$(ARCH)/vmlinux.h))
endif

CC ?= gcc
CLANG ?= clang
BPFTOOL ?= bpftool
DTRACE ?= dtrace
PYTHON ?= python3

# -O3 with the host's vector units: the engine's matmuls are the hot path.
OPT ?= -O3 -march=native
CFLAGS ?= $(OPT) -g
CFLAGS += -std=gnu11 -Wall -Wextra -Wno-unused-parameter -D_GNU_SOURCE -pthread \
	-MMD -MP -I$(BUILD)/include -I.
LDFLAGS ?=
LDLIBS_COMMON := -lm -pthread

ifeq ($(V),1)
Q :=
msg :=
else
Q := @
msg = @printf '  %-8s %s\n' "$(1)" "$(2)";
endif

# ---- CUDA: built where nvcc exists, skipped with one line elsewhere --------
CUDA_HOME ?= $(firstword $(wildcard /usr/local/cuda))
NVCC := $(if $(CUDA_HOME),$(wildcard $(CUDA_HOME)/bin/nvcc))
HAVE_CUDA := $(if $(NVCC),1,)
ifeq ($(HAVE_CUDA),)
ifeq ($(filter clean deps,$(MAKECMDGOALS)),)
$(info CUDA not found (no nvcc under CUDA_HOME='$(CUDA_HOME)'): building the CPU-only parts)
endif
endif

# ---- Debian packages everything needs (make deps) ---------------------------
DEB_PKGS := build-essential clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev \
	systemtap-sdt-dev libsqlite3-dev sqlite3 libjansson-dev libncurses-dev \
	pkg-config python3 tmux iproute2 procps bpftrace libclang-rt-14-dev \
	uthash-dev libxxhash-dev libcurl4-openssl-dev libssl-dev nodejs openssl curl
# What only the tests run against (servers, browsers, captures); each
# addition on its own line, with a word on which test needs it.
TEST_PKGS := prometheus chromium tcpdump nginx clickhouse-server clickhouse-client
TEST_PKGS += podman crun runc containerd  # test_agent_pods: real pods and a ctr container

.PHONY: all deps test demo bench clean check-layout
all:

deps:
	@missing=""; for p in $(DEB_PKGS) $(TEST_PKGS); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q '^install ok installed' \
			|| missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "make deps: installing$$missing"; \
		if [ "$$(id -u)" != 0 ]; then echo "make deps: need root to apt-get install$$missing (run: sudo make deps)" >&2; exit 1; fi; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends $$missing >/dev/null \
			|| { echo "make deps: apt-get install$$missing failed" >&2; exit 1; }; \
	fi

# Objects: any source path compiles to build/obj/<path>.o, after deps.
$(OBJ)/%.o: %.c | deps
	$(call msg,CC,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

# Unit tests: each fragment appends build/tests/test_X to UNIT_TESTS and
# gives it a link rule; tests/run.py runs every binary found there.
UNIT_TESTS :=
PROGRAMS :=

include $(sort $(wildcard */build.mk */*/build.mk))

all: deps $(PROGRAMS) $(UNIT_TESTS)

# Fails on an #include that crosses the arrows between the folders and between
# the agent's stages (docs/architecture.md), naming the file and the line, and
# on a circle between two files of agent/ or tools/ (by include, or by call in
# the objects make has built: make test checks after building).
check-layout:
	$(Q)$(PYTHON) tests/check_layout.py

# T=substring selects tests by name; JOBS=N how many run side by side
# (tests/run.py: those that time nothing). The layout is checked once every
# prerequisite of test (other build.mk files add some) is built: it reads
# the objects.
test: all
	$(Q)$(PYTHON) tests/check_layout.py
	$(Q)$(PYTHON) tests/run.py $(if $(T),--filter '$(T)') $(if $(JOBS),--jobs $(JOBS))

demo: all
	$(Q)bash tools/demo.sh

# QUICK=1 runs the short suite.
bench: all
	$(Q)$(PYTHON) tests/bench/run.py $(if $(QUICK),--quick)

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
