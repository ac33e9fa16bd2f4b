# tools/sqlite-ext/build.mk - build/libkpi_sqlite.so: percentile(x, p) and
# median(x) for the sqlite3 CLI (.load build/libkpi_sqlite). Position-
# independent objects of its own, apart from the programs' objects.

SQLITE_EXT_SRCS := tools/sqlite-ext/kpi_sqlite.c schema/pct.c
SQLITE_EXT_OBJS := $(SQLITE_EXT_SRCS:%.c=$(OBJ)/pic/%.o)
PROGRAMS += $(BUILD)/libkpi_sqlite.so

$(OBJ)/pic/%.o: %.c | deps
	$(call msg,CC,$< (pic))
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -fPIC -fvisibility=hidden -c $< -o $@

$(BUILD)/libkpi_sqlite.so: $(SQLITE_EXT_OBJS)
	$(call msg,LD,$@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -shared -fPIC $^ -o $@ -lm
