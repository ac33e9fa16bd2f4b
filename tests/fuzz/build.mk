# tests/fuzz/build.mk - libFuzzer targets (build/fuzz/fuzz_*) for the daemon's
# untrusted-input code, and an ASan/UBSan build of kpi-infer
# (build/asan/kpi-infer) for tests/test_hostile.py. Both are clang builds with
# their own object trees, so the -O3 daemon is never instrumented.
#
#   make fuzz FUZZ_S=60     run every target 60 s (default 30) from its corpus
#   make fuzz FUZZ_T=http   just one target
#   make soak               fuzz 600 s each, then 20 rounds of tests/test_hostile.py
#
# `make test` builds both (they are prerequisites of `test`, not of `all`, so
# a plain `make` stays cheap); tests/test_fuzz.py runs each target ~5 s.

SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
SAN_CFLAGS := -O1 -g -march=native -std=gnu11 -Wall -Wno-unused-parameter -D_GNU_SOURCE \
	-pthread -MMD -MP -I$(BUILD)/include -I.
DAEMON_LIB_SRCS := $(ENGINE_SRCS) $(SERVER_SRCS)

# ---- fuzz targets -----------------------------------------------------------
# fuzz_agent_*.c fuzz the agent's parsers: each names the agent objects it
# links (instrumented like the rest), beside libdaemon.a, which they leave unused.
FUZZ_TARGETS := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS := $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%)
FUZZ_OBJ := $(BUILD)/fuzz/obj

$(FUZZ_OBJ)/%.o: %.c | deps $(BUILD)/include/kpi_probes.h
	$(call msg,CC-FUZZ,$<)
	@mkdir -p $(@D)
	$(Q)$(CLANG) $(SAN_CFLAGS) $(SAN_FLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

ASAN_OBJ := $(BUILD)/asan/obj

# The matrix kernels cost the most to compile instrumented (UBSan over each
# ISA's copy: 16-46 s of one core apiece) and no fuzzer's input steers their
# branches: the archive takes kpi-infer's ASan objects of them below instead
# of a second, coverage-instrumented copy.
FUZZ_SHARED_SRCS := daemon/engine/qmatmul.c daemon/engine/kernels.c
FUZZ_LIB_OBJS := $(patsubst %.c,$(FUZZ_OBJ)/%.o,$(filter-out $(FUZZ_SHARED_SRCS),$(DAEMON_LIB_SRCS))) \
	$(FUZZ_SHARED_SRCS:%.c=$(ASAN_OBJ)/%.o)

# one archive, so each target links only the objects it uses
$(BUILD)/fuzz/libdaemon.a: $(FUZZ_LIB_OBJS) $(OBJ)/daemon/kpi_probes.o
	$(call msg,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/fuzz/fuzz_%: $(FUZZ_OBJ)/tests/fuzz/fuzz_%.o $(BUILD)/fuzz/libdaemon.a
	$(call msg,LD,$@)
	$(Q)$(CLANG) $(SAN_FLAGS) -fsanitize=fuzzer $^ -o $@ $(DAEMON_LDLIBS)

$(BUILD)/fuzz/fuzz_agent_http_track $(BUILD)/fuzz/fuzz_agent_http2: $(patsubst %.c,$(FUZZ_OBJ)/%.o,$(wildcard agent/track/http/*.c))
# the HTTP/2 tracker decodes header blocks with libnghttp2 (not instrumented)
$(BUILD)/fuzz/fuzz_agent_http_track $(BUILD)/fuzz/fuzz_agent_http2: DAEMON_LDLIBS += -lnghttp2

# ---- kpi-infer with ASan, LSan and UBSan --------------------------------------

$(ASAN_OBJ)/%.o: %.c | deps $(BUILD)/include/kpi_probes.h
	$(call msg,CC-ASAN,$<)
	@mkdir -p $(@D)
	$(Q)$(CLANG) $(SAN_CFLAGS) $(SAN_FLAGS) -c $< -o $@

$(BUILD)/asan/kpi-infer: $(ASAN_OBJ)/daemon/server/main.o \
		$(DAEMON_LIB_SRCS:%.c=$(ASAN_OBJ)/%.o) $(OBJ)/daemon/kpi_probes.o
	$(call msg,LD,$@)
	$(Q)$(CLANG) $(SAN_FLAGS) $^ -o $@ $(DAEMON_LDLIBS)

test: $(FUZZ_BINS) $(BUILD)/asan/kpi-infer

# keep the target objects make would treat as intermediate
.SECONDARY: $(FUZZ_TARGETS:%=$(FUZZ_OBJ)/tests/fuzz/fuzz_%.o)

# ---- make fuzz ----------------------------------------------------------------
FUZZ_S ?= 30
.PHONY: fuzz
fuzz: $(FUZZ_BINS)
	$(Q)$(PYTHON) tests/fuzz/run.py --seconds $(FUZZ_S) $(if $(FUZZ_T),$(FUZZ_T))

# ---- make soak: the long runs (double-colon: other parts add their own) -------
SOAK_FUZZ_S ?= 600
SOAK_ROUNDS ?= 20
.PHONY: soak
soak:: $(FUZZ_BINS) $(BUILD)/asan/kpi-infer
	$(Q)$(PYTHON) tests/fuzz/run.py --seconds $(SOAK_FUZZ_S)
	$(Q)KPI_HOSTILE_ROUNDS=$(SOAK_ROUNDS) $(PYTHON) tests/run.py --filter test_hostile
