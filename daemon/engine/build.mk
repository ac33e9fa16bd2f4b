# daemon/engine/build.mk - the engine benchmark program (tests/bench/engine_bench.c),
# driven by tests/bench/bench_engine.py. The engine objects themselves are
# listed in daemon/build.mk (ENGINE_OBJS).

PROGRAMS += $(BUILD)/engine-bench
$(BUILD)/engine-bench: $(OBJ)/tests/bench/engine_bench.o $(ENGINE_OBJS)
	$(call msg,LD,$@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(DAEMON_LDLIBS)
