# agent/build.mk - kpi-agent: BPF programs (bpf/*.bpf.c -> skeletons), the
# agent (agent/main.c, agent/<stage>/*.c), the schema embedded from schema/*.sql, its unit tests and
# the small USDT test target (tests/agent_target.c).

# The multiarch include directory (asm/ headers) is asked of gcc when a BPF
# object is compiled, not when this file is read: on a fresh machine make deps
# installs gcc after the read (hence '=', and the rule's '| deps').
BPF_CFLAGS = -g -O2 -target bpf -D__TARGET_ARCH_$(ARCH) -Ivmlinux/$(ARCH) -Ibpf -I. \
	-I/usr/include/$(shell $(CC) -dumpmachine) -Wall -Wno-unused-function
AGENT_SRCS := $(wildcard agent/*/*.c agent/*/*/*.c)
AGENT_OBJS := $(AGENT_SRCS:%.c=$(OBJ)/%.o) $(OBJ)/schema/pct.o
AGENT_LDLIBS := -lbpf -lelf -lz -lsqlite3 -lcurl -ljansson -lcrypto -lnghttp2 -lcapstone $(LDLIBS_COMMON)
AGENT_GEN := $(BUILD)/include/kpi.skel.h $(BUILD)/include/kpi_schema.h

$(BUILD)/bpf/%.bpf.o: bpf/%.bpf.c bpf/kpi_event.h abi/kpi_request_id.h vmlinux/$(ARCH)/vmlinux.h | deps
	$(call msg,BPF,$@)
	@mkdir -p $(@D)
	$(Q)$(CLANG) $(BPF_CFLAGS) -c $< -o $@

$(BUILD)/include/%.skel.h: $(BUILD)/bpf/%.bpf.o
	$(call msg,GEN-SKEL,$@)
	@mkdir -p $(@D)
	$(Q)$(BPFTOOL) gen skeleton $< > $@.tmp && mv $@.tmp $@

# Every schema/*.sql becomes a C string, in file-name order: NNN_*.sql are the
# versioned migrations, views.sql and then views_split.sql are re-applied at
# every start.
$(BUILD)/include/kpi_schema.h: $(sort $(wildcard schema/*.sql)) agent/build.mk
	$(call msg,GEN,$@)
	@mkdir -p $(@D)
	$(Q)awk 'BEGIN { print "/* generated from the schema/ SQL files by agent/build.mk */"; \
		print "static const struct kpi_schema_file { const char *name; const char *sql; } kpi_schema_files[] = {" } \
		FNR == 1 { if (NR > 1) print "\t},"; n = FILENAME; sub(".*/", "", n); printf "\t{ \"%s\",\n", n } \
		{ gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); printf "\t  \"%s\\n\"\n", $$0 } \
		END { print "\t},"; print "};" }' $(sort $(wildcard schema/*.sql)) > $@.tmp && mv $@.tmp $@

$(AGENT_OBJS) $(OBJ)/agent/main.o: $(AGENT_GEN)

PROGRAMS += $(BUILD)/kpi-agent
$(BUILD)/kpi-agent: $(OBJ)/agent/main.o $(AGENT_OBJS)
	$(call msg,LD,$@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(AGENT_LDLIBS)

# A tiny OpenAI-style server that fires every kpi probe: lets the agent's
# tests run without the real daemon.
PROGRAMS += $(BUILD)/tests/agent-target
$(OBJ)/tests/agent_target.o: | $(BUILD)/include/kpi_probes.h
$(BUILD)/tests/agent-target: $(OBJ)/tests/agent_target.o $(OBJ)/daemon/kpi_probes.o
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(LDLIBS_COMMON)

AGENT_TESTS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(wildcard tests/unit/test_agent_*.c))
UNIT_TESTS += $(AGENT_TESTS)
$(OBJ)/tests/unit/test_agent_%.o: $(AGENT_GEN)
$(AGENT_TESTS): $(BUILD)/tests/%: $(OBJ)/tests/unit/%.o $(AGENT_OBJS)
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(AGENT_LDLIBS)

# Keep the BPF object: bpftool and people (bpftool prog, llvm-objdump) use it.
.SECONDARY: $(BUILD)/bpf/kpi.bpf.o

# SQLite ingest rate of the writer (make bench: tests/bench/bench_store.py).
PROGRAMS += $(BUILD)/store-bench
$(OBJ)/tests/bench/store_bench.o: $(AGENT_GEN)
$(BUILD)/store-bench: $(OBJ)/tests/bench/store_bench.o $(AGENT_OBJS)
	$(call msg,LD,$@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(AGENT_LDLIBS)
