# tools/common/build.mk - the reader layer kpitop and kpi-report share
# (tools/common/*.c: trace, reqstats, timefmt; with the percentile of
# schema/pct.c, and the histogram layout of schema/lhist.c); the tools link $(TOOLS_COMMON_OBJS).

TOOLS_COMMON_OBJS := $(patsubst %.c,$(OBJ)/%.o,$(wildcard tools/common/*.c)) $(OBJ)/schema/pct.o $(OBJ)/schema/lhist.o
TOOLS_LDLIBS := -lsqlite3 -lcurl $(LDLIBS_COMMON)

# Unit tests of the reader layer and the percentile code: tests/unit/test_tools_*.c
TOOLS_TESTS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(wildcard tests/unit/test_tools_*.c))
UNIT_TESTS += $(TOOLS_TESTS)
$(TOOLS_TESTS): $(BUILD)/tests/%: $(OBJ)/tests/unit/%.o $(TOOLS_COMMON_OBJS)
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(TOOLS_LDLIBS)

# The fleet reader builds its scratch trace with the agent's own schema.
$(OBJ)/tools/common/trace_fleet.o: $(BUILD)/include/kpi_schema.h
# test_tools_trace writes a trace with the agent's schema, and its every loss cause.
$(OBJ)/tests/unit/test_tools_trace.o: $(BUILD)/include/kpi_schema.h
