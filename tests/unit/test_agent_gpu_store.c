/* test_agent_gpu_store.c - the GPU side of the trace store on real SQLite:
 * migration 1 -> 2 of an existing version-1 database, gpu_kernels rows, the
 * GPU columns of steps and requests written by gpu_attr_write through
 * agent/sinks/gpu_store.c on the side connection, with rows not yet in the
 * store retried, and the sums test_cuda.py checks. */
#include <inttypes.h>
#include <sqlite3.h>
#include <unistd.h>
#include "tests/unit/check.h"
#include "tests/unit/sql_util.h"
#include "agent/sinks/gpu_store.h"
#include "agent/sinks/side_store.h"
#include "agent/sinks/store.h"
#include "agent/track/gpu_attr.h"
#include "kpi_schema.h"

static char dir[64];

static void setup(void)
{
	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/kpi-gpu-store-test-XXXXXX");
		if (!mkdtemp(dir))
			abort();
	}
}

/* A database written by a version-1 agent, with a request and a step in it,
 * is migrated in place: rows kept, new columns NULL, new table empty. */
static void migrates_v1_database(void)
{
	char path[128], err[512];
	sqlite3 *db;
	setup();
	snprintf(path, sizeof(path), "%s/v1.db", dir);
	unlink(path);
	CHECK(!strcmp(kpi_schema_files[0].name, "001_init.sql"), "first file %s", kpi_schema_files[0].name);
	CHECK(sqlite3_open(path, &db) == SQLITE_OK, "open");
	CHECK(sqlite3_exec(db, kpi_schema_files[0].sql, NULL, NULL, NULL) == SQLITE_OK, "%s", sqlite3_errmsg(db));
	CHECK(sqlite3_exec(db,
		"INSERT INTO requests(request_id, pid, seq_id, run_id, wall_ns, t_arrive_ns, prefill_ns) "
		"VALUES ('old', 5, 1, 1, 10, 10, 77);"
		"INSERT INTO steps(pid, step_id, run_id, wall_ns, t_start_ns, prefill_tokens, decode_seqs, "
		"kv_used, kv_free) VALUES (5, 1, 1, 10, 10, 3, 0, 1, 9);", NULL, NULL, NULL) == SQLITE_OK,
	      "%s", sqlite3_errmsg(db));
	sqlite3_close(db);
	CHECK(q(path, "PRAGMA user_version") == 1, "a version-1 database");
	CHECK(q(path, "SELECT count(*) FROM sqlite_master WHERE name = 'gpu_kernels'") == 0, "no gpu table yet");

	struct trace_store *s = trace_store_open(path, false, err, sizeof(err));
	CHECK(s, "%s", err);
	trace_store_close(s);
	CHECK(trace_store_schema_version() >= 2, "agent knows version %d", trace_store_schema_version());
	CHECK(q(path, "PRAGMA user_version") == trace_store_schema_version(), "migrated");
	CHECK(q(path, "SELECT prefill_ns FROM requests WHERE request_id = 'old'") == 77, "row kept");
	CHECK(q(path, "SELECT prefill_gpu_ns FROM requests WHERE request_id = 'old'") == -3, "new column NULL");
	CHECK(q(path, "SELECT decode_gpu_ns FROM requests WHERE request_id = 'old'") == -3, "new column NULL");
	CHECK(q(path, "SELECT gpu_busy_ns FROM steps WHERE step_id = 1") == -3, "steps column NULL");
	CHECK(q(path, "SELECT count(*) FROM gpu_kernels") == 0, "gpu_kernels empty");
	CHECK(q(path, "SELECT count(*) FROM sqlite_master WHERE name = 'requests_pid_seq'") == 1, "index");
	/* opening again applies nothing twice */
	s = trace_store_open(path, false, err, sizeof(err));
	CHECK(s, "second open: %s", err);
	trace_store_close(s);
	CHECK(q(path, "SELECT count(*) FROM requests") == 1, "still one request");
	/* a fresh database goes straight to the newest version */
	snprintf(path, sizeof(path), "%s/fresh.db", dir);
	unlink(path);
	s = trace_store_open(path, false, err, sizeof(err));
	CHECK(s, "%s", err);
	trace_store_close(s);
	CHECK(q(path, "SELECT count(*) FROM pragma_table_info('requests') WHERE name IN "
		  "('prefill_gpu_ns', 'decode_gpu_ns')") == 2, "request columns");
}

static void request_row(struct kpi_sink *sink, uint32_t pid, int64_t seq, const char *rid, int64_t t)
{
	struct kpi_request_record r;
	memset(&r, 0, sizeof(r));
	snprintf(r.request_id, sizeof(r.request_id), "%s", rid);
	r.pid = pid;
	r.seq_id = seq;
	int64_t *f[] = { &r.t_admit, &r.t_sched, &r.t_first, &r.t_last, &r.t_first_write, &r.t_done,
			 &r.net_in, &r.queue, &r.prefill, &r.decode, &r.net_out, &r.ttft, &r.tpot,
			 &r.e2e, &r.itl_p50, &r.itl_p99, &r.itl_max, &r.prompt_tokens, &r.output_tokens,
			 &r.srtt_us, &r.runq_ns };
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		*f[i] = KPI_NULL;
	r.t_arrive = t;
	r.http_status = 200;
	r.finish_reason = "length";
	sink->request(sink->ctx, &r);
}

static void step_row(struct kpi_sink *sink, uint32_t pid, uint64_t step, uint64_t t0, uint64_t t1)
{
	struct kpi_step_record s = { .pid = pid, .step_id = step, .t_start = t0, .t_end = t1 };
	sink->step(sink->ctx, &s);
}

static struct gpu_store_row kern(uint32_t pid, uint64_t step, uint64_t s, uint64_t e, const char *name)
{
	return (struct gpu_store_row){ pid, { .step = step, .start_ns = s, .end_ns = e, .kind = KPI_GPU_REC_KERNEL,
					      .name_id = 1, .stream_id = 7, .grid_x = 4, .grid_y = 1,
					      .grid_z = 1, .block_x = 128, .block_y = 1, .block_z = 1 },
				       name };
}

/* Three requests over two steps; the third is still in flight at the first
 * flush, so its columns come one flush later. */
static void writes_kernels_steps_and_requests(void)
{
	char path[128], err[512];
	setup();
	snprintf(path, sizeof(path), "%s/gpu.db", dir);
	unlink(path);
	struct trace_store *ts = trace_store_open(path, false, err, sizeof(err));
	CHECK(ts, "%s", err);
	struct kpi_sink sink = trace_store_sink(ts);
	request_row(&sink, 7, 1, "r1", 100);
	request_row(&sink, 7, 2, "r2", 100);
	step_row(&sink, 7, 1, 900, 5000);
	step_row(&sink, 7, 2, 4900, 9000);
	CHECK(trace_store_flush(ts, NULL, 10, 0, err, sizeof(err)) == 0, "%s", err);

	struct side_store *side = side_store_open(path, trace_store_run_id(ts), err, sizeof(err));
	CHECK(side, "%s", err);
	struct gpu_store *gs = gpu_store_open(side, err, sizeof(err));
	CHECK(gs, "%s", err);
	struct gpu_attr *a = gpu_attr_new();
	struct kpi_step_seq s1[] = { { 1, 24, 1 }, { 2, 10, 1 } };
	struct kpi_step_seq s2[] = { { 1, 1, 0 }, { 2, 1, 0 }, { 3, 30, 1 } };
	gpu_attr_step_seqs(a, 7, 1, 2, 0, s1, 2, 1);
	gpu_attr_step_seqs(a, 7, 2, 3, 0, s2, 3, 1);
	struct gpu_store_row rows[] = {
		kern(7, 1, 1000, 2000, "attn"), kern(7, 1, 2000, 4400, "matmul"),
		kern(7, 2, 5000, 8200, "matmul"),
		{ 7, { .step = 2, .start_ns = 8200, .end_ns = 8300, .kind = KPI_GPU_REC_MEMCPY,
		       .bytes = 4096, .copy_kind = 2 }, NULL },
		kern(7, 0, 10, 20, "init"), /* between steps: stored, not attributed */
	};
	size_t n = sizeof(rows) / sizeof(rows[0]);
	for (size_t i = 0; i < n; i++)
		gpu_attr_record(a, rows[i].pid, &rows[i].r, 2);
	gpu_attr_settle(a);
	CHECK(gpu_attr_write(a, gs, 3, rows, n, err, sizeof(err)) == 0, "%s", err);
	CHECK(q(path, "SELECT count(*) FROM gpu_kernels") == 5, "five rows");
	CHECK(q(path, "SELECT count(*) FROM gpu_kernels WHERE name = 'matmul' AND kind = 'kernel' AND "
		  "grid_x = 4 AND block_x = 128 AND stream = 7 AND bytes IS NULL") == 2, "kernel columns");
	CHECK(q(path, "SELECT bytes FROM gpu_kernels WHERE kind = 'memcpy' AND copy_kind = 2 AND "
		  "name IS NULL AND grid_x IS NULL") == 4096, "memcpy columns");
	CHECK(q(path, "SELECT gpu_busy_ns FROM steps WHERE step_id = 1") == 3400, "step 1 busy");
	CHECK(q(path, "SELECT gpu_busy_ns FROM steps WHERE step_id = 2") == 3300, "step 2 busy");
	/* step 2: 3300 over 32 tokens */
	CHECK(q(path, "SELECT prefill_gpu_ns FROM requests WHERE seq_id = 1") == 2400, "r1 prefill");
	CHECK(q(path, "SELECT decode_gpu_ns FROM requests WHERE seq_id = 1") == 3300 / 32, "r1 decode");
	CHECK(q(path, "SELECT prefill_gpu_ns FROM requests WHERE seq_id = 2") == 1000, "r2 prefill");

	/* r3's row arrives later: written at the next flush */
	request_row(&sink, 7, 3, "r3", 200);
	CHECK(trace_store_flush(ts, NULL, 20, 0, err, sizeof(err)) == 0, "%s", err);
	gpu_attr_settle(a);
	CHECK(gpu_attr_write(a, gs, 4, NULL, 0, err, sizeof(err)) == 0, "%s", err);
	CHECK(q(path, "SELECT prefill_gpu_ns FROM requests WHERE seq_id = 3") > 0, "r3 written later");
	CHECK(q(path, "SELECT decode_gpu_ns FROM requests WHERE seq_id = 3") == 0, "r3 no decode");
	/* test_cuda.py's check: per-request GPU time sums to the stepped kernel time */
	int64_t total = q(path, "SELECT sum(end_ns - start_ns) FROM gpu_kernels WHERE step_id > 0");
	int64_t per_req = q(path, "SELECT sum(prefill_gpu_ns + decode_gpu_ns) FROM requests");
	CHECK(total == 6700 && per_req == total, "attributed %" PRId64 " vs kernels %" PRId64, per_req, total);
	/* a request of another run with the same pid and id is left alone */
	CHECK(q(path, "SELECT count(*) FROM requests WHERE prefill_gpu_ns IS NOT NULL AND run_id != "
		  "(SELECT max(run_id) FROM agent_runs)") == 0, "other runs untouched");
	gpu_attr_free(a);
	gpu_store_close(gs);
	side_store_close(side);
	trace_store_close(ts);
}

/* A store without the version-2 tables is refused with what to do. */
static void refuses_v1_database(void)
{
	char path[128], err[512] = "";
	sqlite3 *db;
	setup();
	snprintf(path, sizeof(path), "%s/only-v1.db", dir);
	unlink(path);
	CHECK(sqlite3_open(path, &db) == SQLITE_OK, "open");
	CHECK(sqlite3_exec(db, kpi_schema_files[0].sql, NULL, NULL, NULL) == SQLITE_OK, "v1");
	sqlite3_close(db);
	struct side_store *side = side_store_open(path, 1, err, sizeof(err));
	CHECK(side, "%s", err);
	struct gpu_store *gs = gpu_store_open(side, err, sizeof(err));
	CHECK(!gs, "opened a version-1 store");
	CHECK(strstr(err, "version 2"), "error: %s", err);
	side_store_close(side);
}

int main(void)
{
	RUN(migrates_v1_database);
	RUN(writes_kernels_steps_and_requests);
	RUN(refuses_v1_database);
	return CHECK_DONE();
}
