# tools/kpi-ship/build.mk - build/kpi-ship: ships a kpi-agent trace into
# ClickHouse over its HTTP interface (libcurl), a process of its own.

KPI_SHIP_OBJS := $(patsubst %.c,$(OBJ)/%.o,$(wildcard tools/kpi-ship/*.c))
PROGRAMS += $(BUILD)/kpi-ship

$(BUILD)/kpi-ship: $(KPI_SHIP_OBJS) $(TOOLS_COMMON_OBJS)
	$(call msg,LD,$@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(TOOLS_LDLIBS)
