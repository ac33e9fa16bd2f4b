# tools/kpitop/build.mk - build/kpitop: live terminal view of a kpi-agent
# trace (ncursesw), over the shared reader layer in tools/common/.

KPITOP_OBJS := $(patsubst %.c,$(OBJ)/%.o,$(wildcard tools/kpitop/*.c))
PROGRAMS += $(BUILD)/kpitop

$(BUILD)/kpitop: $(KPITOP_OBJS) $(TOOLS_COMMON_OBJS)
	$(call msg,LD,$@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ -lncursesw -ltinfo $(TOOLS_LDLIBS)
