# tools/kpi-bench/build.mk - kpi-bench, the load generator and client-side
# KPI meter (epoll, one thread; jansson for JSON; the trace reader of
# tools/common for a sweep's --trace-db).

KPI_BENCH_OBJS := $(patsubst %.c,$(OBJ)/%.o,$(wildcard tools/kpi-bench/*.c))

PROGRAMS += $(BUILD)/kpi-bench
$(BUILD)/kpi-bench: $(KPI_BENCH_OBJS) $(TOOLS_COMMON_OBJS)
	$(call msg,LD,$@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ -ljansson $(TOOLS_LDLIBS)

# The parser, SSE splitter and DIST forms, tested without a network.
UNIT_TESTS += $(BUILD)/tests/test_bench_http
$(BUILD)/tests/test_bench_http: $(OBJ)/tests/unit/test_bench_http.o $(OBJ)/tools/kpi-bench/http.o $(OBJ)/tools/kpi-bench/dist.o \
		$(OBJ)/tools/common/buf.o
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(LDLIBS_COMMON)

# Gamma arrivals: the rate and burstiness of many draws.
UNIT_TESTS += $(BUILD)/tests/test_bench_arrivals
$(BUILD)/tests/test_bench_arrivals: $(OBJ)/tests/unit/test_bench_arrivals.o $(OBJ)/tools/kpi-bench/dist.o
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(LDLIBS_COMMON)

# The steady-state rule on runs made up in the test.
UNIT_TESTS += $(BUILD)/tests/test_bench_steady
$(BUILD)/tests/test_bench_steady: $(OBJ)/tests/unit/test_bench_steady.o $(OBJ)/tools/kpi-bench/steady.o \
		$(OBJ)/tools/kpi-bench/dist.o $(OBJ)/schema/pct.o
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(LDLIBS_COMMON)
