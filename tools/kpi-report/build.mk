# tools/kpi-report/build.mk - build/kpi-report: post-incident report (markdown
# or HTML with inline SVG) over the shared reader layer in tools/common/.

KPI_REPORT_OBJS := $(patsubst %.c,$(OBJ)/%.o,$(wildcard tools/kpi-report/*.c))
PROGRAMS += $(BUILD)/kpi-report

$(BUILD)/kpi-report: $(KPI_REPORT_OBJS) $(TOOLS_COMMON_OBJS)
	$(call msg,LD,$@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(TOOLS_LDLIBS)
