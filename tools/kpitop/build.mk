# tools/kpitop/build.mk - build/kpitop: live terminal view of a kpi-agent
# trace (ncursesw), over the shared reader layer in tools/common/.

KPITOP_OBJS := $(patsubst %.c,$(OBJ)/%.o,$(wildcard tools/kpitop/*.c))
PROGRAMS += $(BUILD)/kpitop

$(BUILD)/kpitop: $(KPITOP_OBJS) $(TOOLS_COMMON_OBJS)
	$(call msg,LD,$@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ -lncursesw -ltinfo $(TOOLS_LDLIBS)

# The data layer alone (no terminal): the rows it keeps between frames
# against every frame computed from scratch.
UNIT_TESTS += $(BUILD)/tests/test_kpitop_data
$(BUILD)/tests/test_kpitop_data: $(OBJ)/tests/unit/test_kpitop_data.o $(OBJ)/tools/kpitop/data.o $(TOOLS_COMMON_OBJS)
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(TOOLS_LDLIBS)
