/* test_agent_store.c - the SQLite writer: file modes, migrations and
 * user_version, one flush writing rows and rewriting inflight, refusing a
 * database from a newer agent. */
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tests/unit/check.h"
#include "tests/unit/sql_util.h"
#include "agent/sinks/store.h"
#include "agent/track/assemble.h"
#include "agent/track/bus.h"
#include "tests/unit/event_util.h"

static char dir[64];

static void setup(void)
{
	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/kpi-store-test-XXXXXX");
		if (!mkdtemp(dir))
			abort();
	}
}

static void creates_dirs_and_modes(void)
{
	char path[128], sub[96], err[512];
	struct stat st;
	setup();
	snprintf(sub, sizeof(sub), "%s/a/b", dir);
	snprintf(path, sizeof(path), "%s/trace.db", sub);
	mode_t old = umask(022);
	struct trace_store *s = trace_store_open(path, false, err, sizeof(err));
	umask(old);
	CHECK(s, "%s", err);
	CHECK(stat(sub, &st) == 0 && (st.st_mode & 0777) == 0750, "dir mode %o", st.st_mode & 0777);
	CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0640, "file mode %o", st.st_mode & 0777);
	trace_store_close(s);
	CHECK(q(path, "PRAGMA user_version") == trace_store_schema_version(), "version");
	CHECK(q(path, "SELECT count(*) FROM sqlite_master WHERE type = 'view' AND name = "
		   "'latency_percentiles_minute'") == 1, "views created");
	CHECK(q(path, "SELECT count(*) FROM agent_runs WHERE ended_wall_ns IS NOT NULL") == 1, "run row");
}

static void flush_writes_rows_and_inflight(void)
{
	char path[128], err[512];
	setup();
	snprintf(path, sizeof(path), "%s/flush.db", dir);
	struct trace_store *s = trace_store_open(path, true, err, sizeof(err));
	CHECK(s, "%s", err);
	struct bus *bus = bus_new();
	struct assembler *a = assemble_new(bus);
	struct kpi_sink sink = trace_store_sink(s);
	bus_add(bus, &sink);
	union kpi_event e[] = {
		mkev(7, KPI_EV_ARRIVE, 100, 0, 3, 0, 0, NULL),
		mkev(7, KPI_EV_ADMIT, 110, 1, 3, 4, 2, "one"),
		mkev(7, KPI_EV_SCHED, 120, 1, -1, 0, 0, NULL),
		mkev(7, KPI_EV_FIRST, 130, 1, -1, 0, 0, NULL),
		mkev(7, KPI_EV_WRITE, 131, 0, 3, 0, 0, NULL),
		mkev(7, KPI_EV_FINISH, 140, 1, -1, 2, 1, NULL),
		mkev(7, KPI_EV_WRITE, 141, 0, 3, 0, 0, NULL),
		mkev(7, KPI_EV_RESP_END, 142, 1, 3, 200, 0, NULL),
		mkev(7, KPI_EV_ARRIVE, 150, 0, 4, 0, 0, NULL),
		mkev(7, KPI_EV_ADMIT, 160, 2, 4, 4, 2, "two"),
		mkev(7, KPI_EV_STEP_BEGIN, 161, 5, -1, 4, 0, NULL),
		mkev(7, KPI_EV_STEP_END, 170, 5, -1, 0, 0, NULL),
	};
	e[10].step_begin.kv_used = 1;
	e[10].step_begin.kv_free = 9;
	for (size_t i = 0; i < sizeof(e) / sizeof(e[0]); i++)
		assemble_ev(a, e[i]);
	CHECK(trace_store_pending(s) == 2, "%zu pending", trace_store_pending(s));
	struct kpi_inflight_view live = assemble_inflight_view(a);
	CHECK(trace_store_flush(s, &live, 200, 5, err, sizeof(err)) == 0, "%s", err);
	CHECK(trace_store_pending(s) == 0, "flushed");
	CHECK(q(path, "SELECT e2e_ns FROM requests WHERE request_id = 'one'") == 41, "e2e");
	CHECK(q(path, "SELECT count(*) FROM tokens WHERE request_id = 'one'") == 2, "tokens");
	CHECK(q(path, "SELECT count(*) FROM steps WHERE t_end_ns = 170") == 1, "steps");
	CHECK(q(path, "SELECT count(*) FROM inflight WHERE request_id = 'two' AND state = 'queued'") == 1,
	      "inflight");
	CHECK(q(path, "SELECT value FROM meta WHERE key = 'drops_total'") == 5, "drops in meta");
	/* the next flush rewrites inflight: 'two' is gone once it completes */
	union kpi_event end = mkev(7, KPI_EV_REJECT, 300, 0, 4, 429, 1, "three");
	assemble_ev(a, end);
	live = assemble_inflight_view(a);
	CHECK(trace_store_flush(s, &live, 400, 5, err, sizeof(err)) == 0, "%s", err);
	CHECK(q(path, "SELECT count(*) FROM inflight") == 1, "one in flight");
	CHECK(q(path, "SELECT count(*) FROM requests") == 2, "two rows");
	assemble_free(a);
	bus_free(bus);
	trace_store_close(s);
	CHECK(q(path, "SELECT count(*) FROM inflight") == 0, "closed store has nothing in flight");
}

static void refuses_newer_schema(void)
{
	char path[128], err[512];
	sqlite3 *db;
	setup();
	snprintf(path, sizeof(path), "%s/newer.db", dir);
	CHECK(sqlite3_open(path, &db) == SQLITE_OK, "open");
	sqlite3_exec(db, "PRAGMA user_version = 999", NULL, NULL, NULL);
	sqlite3_close(db);
	struct trace_store *s = trace_store_open(path, false, err, sizeof(err));
	CHECK(!s, "opened a newer database");
	CHECK(strstr(err, "schema version 999") && strstr(err, "newer kpi-agent"), "%s", err);
}

int main(void)
{
	RUN(creates_dirs_and_modes);
	RUN(flush_writes_rows_and_inflight);
	RUN(refuses_newer_schema);
	if (dir[0]) {
		char cmd[96];
		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		CHECK(system(cmd) == 0, "cleanup");
	}
	return CHECK_DONE();
}
