# tools/kpi-bench/build.mk - kpi-bench, the load generator and client-side
# KPI meter (epoll, one thread; jansson for JSON).

KPI_BENCH_OBJS := $(patsubst %.c,$(OBJ)/%.o,$(wildcard tools/kpi-bench/*.c)) $(OBJ)/schema/pct.o

PROGRAMS += $(BUILD)/kpi-bench
$(BUILD)/kpi-bench: $(KPI_BENCH_OBJS)
	$(call msg,LD,$@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ -ljansson $(LDLIBS_COMMON)

# The parser, SSE splitter and DIST forms, tested without a network.
UNIT_TESTS += $(BUILD)/tests/test_bench_http
$(BUILD)/tests/test_bench_http: $(OBJ)/tests/unit/test_bench_http.o $(OBJ)/tools/kpi-bench/http.o $(OBJ)/tools/kpi-bench/dist.o
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(LDLIBS_COMMON)
