# cupti/build.mk - libkpi_cupti.so (CUDA_INJECTION64_PATH library), its USDT
# probes (abi/kpi_cupti_probes.d) and the unit tests tests/unit/test_cupti_*.c.
# The parts without CUDA (clock, step log, names, token split) build everywhere.

CUPTI_CORE_OBJS := $(OBJ)/cupti/clock.o $(OBJ)/cupti/steplog.o $(OBJ)/cupti/names.o
CUPTI_CUDA_OBJS := $(OBJ)/cupti/convert.o $(OBJ)/cupti/injection.o
$(CUPTI_CORE_OBJS): CFLAGS += -fPIC -fvisibility=hidden

CUPTI_PURE_TESTS := $(BUILD)/tests/test_cupti_clock $(BUILD)/tests/test_cupti_steplog \
	$(BUILD)/tests/test_cupti_split
UNIT_TESTS += $(CUPTI_PURE_TESTS)
$(CUPTI_PURE_TESTS): $(BUILD)/tests/%: $(OBJ)/tests/unit/%.o $(CUPTI_CORE_OBJS)
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(LDLIBS_COMMON)

ifeq ($(HAVE_CUDA),1)
CUPTI_LIB := $(BUILD)/libkpi_cupti.so
PROGRAMS += $(CUPTI_LIB)
# CUPTI's headers only; libcupti itself is linked by the library alone.
$(CUPTI_CUDA_OBJS) $(OBJ)/tests/unit/test_cupti_convert.o: \
	CFLAGS += -fPIC -fvisibility=hidden -isystem $(CUDA_HOME)/include

$(BUILD)/include/kpi_cupti_probes.h: abi/kpi_cupti_probes.d | deps
	$(call msg,DTRACE,$@)
	@mkdir -p $(@D)
	$(Q)$(DTRACE) -h -s $< -o $@
$(OBJ)/cupti/kpi_cupti_probes.o: abi/kpi_cupti_probes.d | deps
	$(call msg,DTRACE,$@)
	@mkdir -p $(@D)
	$(Q)$(DTRACE) -G -s $< -o $@
$(OBJ)/cupti/injection.o: | $(BUILD)/include/kpi_cupti_probes.h

# -z defs: an unresolved symbol fails here, not inside someone's CUDA process.
$(CUPTI_LIB): $(CUPTI_CORE_OBJS) $(CUPTI_CUDA_OBJS) $(OBJ)/cupti/kpi_cupti_probes.o cupti/libkpi_cupti.map
	$(call msg,LD,$@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -shared -Wl,-soname,libkpi_cupti.so -Wl,-z,defs \
		-Wl,--version-script=cupti/libkpi_cupti.map $(filter %.o,$^) -o $@ \
		-L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcupti -ldl $(LDLIBS_COMMON)

UNIT_TESTS += $(BUILD)/tests/test_cupti_convert $(BUILD)/tests/test_cupti_lib
$(BUILD)/tests/test_cupti_convert: $(OBJ)/tests/unit/test_cupti_convert.o $(CUPTI_CORE_OBJS) $(OBJ)/cupti/convert.o
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(LDLIBS_COMMON)
# Loads the built library the way the CUDA driver does (dlopen + InitializeInjection).
$(BUILD)/tests/test_cupti_lib: $(OBJ)/tests/unit/test_cupti_lib.o | $(CUPTI_LIB)
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ -Wl,--export-dynamic-symbol=kpi_cupti_step_slot -ldl $(LDLIBS_COMMON)
endif
