# daemon/build.mk - kpi-infer: engine (daemon/engine/), HTTP server
# (daemon/server/), prefill/decode disaggregation (daemon/pd/), USDT probes
# (kpi_probes.d), CUDA backend (daemon/cuda/).

ENGINE_SRCS := $(wildcard daemon/engine/*.c)
# the server's objects include daemon/pd/'s: one program, two rooms
SERVER_SRCS := $(filter-out daemon/server/main.c,$(wildcard daemon/server/*.c)) \
	$(wildcard daemon/pd/*.c)
ENGINE_OBJS := $(ENGINE_SRCS:%.c=$(OBJ)/%.o) $(OBJ)/daemon/kpi_probes.o
SERVER_OBJS := $(SERVER_SRCS:%.c=$(OBJ)/%.o)
DAEMON_LDLIBS := -ljansson -lxxhash $(LDLIBS_COMMON)

# dtrace -h: the probe macros and their *_ENABLED() semaphores;
# dtrace -G: the object that defines the semaphores.
$(BUILD)/include/kpi_probes.h: abi/kpi_probes.d | deps
	$(call msg,DTRACE,$@)
	@mkdir -p $(@D)
	$(Q)$(DTRACE) -h -s $< -o $@
$(OBJ)/daemon/kpi_probes.o: abi/kpi_probes.d | deps
	$(call msg,DTRACE,$@)
	@mkdir -p $(@D)
	$(Q)$(DTRACE) -G -s $< -o $@

# Every daemon object may include the generated probe header.
$(ENGINE_SRCS:%.c=$(OBJ)/%.o) $(SERVER_OBJS) $(OBJ)/daemon/server/main.o: | $(BUILD)/include/kpi_probes.h

ifneq ($(wildcard daemon/server/main.c),)
PROGRAMS += $(BUILD)/kpi-infer
# The step slot is exported so that libkpi_cupti.so finds it (abi/kpi_step.h).
$(BUILD)/kpi-infer: $(OBJ)/daemon/server/main.o $(SERVER_OBJS) $(ENGINE_OBJS) $(DAEMON_CUDA_OBJS)
	$(call msg,LD,$@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ -Wl,--export-dynamic-symbol=kpi_cupti_step_slot \
		$(DAEMON_LDLIBS) $(DAEMON_CUDA_LDLIBS)
endif

# Unit tests of the daemon: tests/unit/test_engine_*.c and test_server_*.c.
DAEMON_TESTS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,\
	$(wildcard tests/unit/test_engine_*.c tests/unit/test_server_*.c))
UNIT_TESTS += $(DAEMON_TESTS)
$(filter $(BUILD)/tests/test_engine_%,$(DAEMON_TESTS)): $(BUILD)/tests/%: $(OBJ)/tests/unit/%.o $(ENGINE_OBJS)
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(DAEMON_LDLIBS)
$(filter $(BUILD)/tests/test_server_%,$(DAEMON_TESTS)): $(BUILD)/tests/%: $(OBJ)/tests/unit/%.o $(SERVER_OBJS) $(ENGINE_OBJS)
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(DAEMON_LDLIBS)
$(OBJ)/tests/unit/test_engine_%.o $(OBJ)/tests/unit/test_server_%.o: | $(BUILD)/include/kpi_probes.h
