/* test_tools_queue.c - trace_queue.h over a store made here: how many
 * requests were in their queue phase at once (per window and per bucket),
 * which steps passed them over and whether those steps were full. */
#include "tests/unit/check.h"
#include "tests/unit/tracedb_util.h"
#include "tools/common/trace.h"
#include "tools/common/trace_queue.h"

#include <sqlite3.h>
#include <stdint.h>
#include <unistd.h>

#define MS NS_PER_MS

static void req(sqlite3 *db, int pid, int i, int64_t admit, int64_t sched, int prompt)
{
	char q[512];
	snprintf(q, sizeof(q), "INSERT INTO requests (request_id, pid, wall_ns, t_arrive_ns, t_admit_ns, t_sched_ns, "
		 "prompt_tokens, http_status) VALUES ('p%d-%d', %d, %lld, %lld, %lld, %lld, %d, 200)", pid, i, pid,
		 (long long)admit, (long long)(admit - MS), (long long)admit, (long long)sched, prompt);
	CHECK(sqlite3_exec(db, q, NULL, NULL, NULL) == SQLITE_OK, "%s: %s", q, sqlite3_errmsg(db));
}

static void step(sqlite3 *db, int pid, int64_t id, int64_t start, int prefill, int decode)
{
	char q[512];
	snprintf(q, sizeof(q), "INSERT INTO steps (pid, step_id, wall_ns, t_start_ns, t_end_ns, prefill_tokens, "
		 "decode_seqs, kv_used, kv_free) VALUES (%d, %lld, %lld, %lld, %lld, %d, %d, 0, 100)", pid,
		 (long long)id, (long long)start, (long long)start, (long long)(start + 90 * MS), prefill, decode);
	CHECK(sqlite3_exec(db, q, NULL, NULL, NULL) == SQLITE_OK, "%s: %s", q, sqlite3_errmsg(db));
}

static struct trace *open_store(sqlite3 *db, const char *p)
{
	sqlite3_close(db);
	char err[256];
	struct trace *t = trace_open(p, err, sizeof(err));
	CHECK(t, "open: %s", err);
	return t;
}

/* Ten requests admitted at 950..959 ms; steps every 100 ms from 1 s, the
 * first four full at 2048 tokens (2045 prefill + 3 decodes), the fifth
 * not. Three go into the first step, three the second, three the third, the
 * last the fifth: seven were passed over, by four full steps. */
static void test_budget_bound_queue(void)
{
	char *p = schema_db_v(1);
	if (!p) SKIP("schema/001_init.sql not found: run from the repository root");
	sqlite3 *db;
	sqlite3_open(p, &db);
	static const int sched_ms[10] = { 999, 999, 999, 1099, 1099, 1099, 1199, 1199, 1199, 1399 };
	for (int i = 0; i < 10; i++)
		req(db, 1, i, (950 + i) * MS, sched_ms[i] * MS, 100 + i);
	for (int k = 0; k < 5; k++)
		step(db, 1, k + 1, (1000 + 100 * k) * MS, k < 4 ? 2045 : 497, 3);
	struct trace *t = open_store(db, p);
	struct trace_queue q;
	char err[256];
	CHECK(!trace_queue_wait(t, 0, 2 * NS_PER_S, &q, err, sizeof(err)), "%s", err);
	CHECK(q.requests == 10 && q.peak == 10 && q.peak_ns == 959 * MS, "%d requests, peak %d at %lld",
	      q.requests, q.peak, (long long)q.peak_ns);
	CHECK(q.waited == 7 && q.waited_prompt_tokens == 103 + 104 + 105 + 106 + 107 + 108 + 109,
	      "waited %d, %lld prompt tokens", q.waited, (long long)q.waited_prompt_tokens);
	CHECK(q.steps == 4 && q.full_steps == 4 && q.step_tokens_max == 2048, "%lld steps, %lld full of %lld",
	      (long long)q.steps, (long long)q.full_steps, (long long)q.step_tokens_max);
	CHECK(q.prefill_tokens == 4 * 2045 && q.decode_seqs == 12, "prefill %lld, decode %lld",
	      (long long)q.prefill_tokens, (long long)q.decode_seqs);

	/* per 100 ms bucket from 0.9 s: 10 at once, then 7, 4, 1 and 1 (the
	 * last one queued through a bucket with no instant of its own), 0 */
	struct trace_point tl[6];
	memset(tl, 0, sizeof(tl));
	CHECK(!trace_queue_series(t, 900 * MS, 1500 * MS, 6, tl, err, sizeof(err)), "%s", err);
	static const int want[6] = { 10, 7, 4, 1, 1, 0 };
	for (int b = 0; b < 6; b++)
		CHECK(tl[b].queue_depth_max == want[b], "bucket %d: %d, want %d", b, tl[b].queue_depth_max, want[b]);
	/* a window of the first three arrivals: three at once, none passed over */
	CHECK(!trace_queue_wait(t, 0, 951 * MS + 1, &q, err, sizeof(err)), "%s", err);
	CHECK(q.requests == 3 && q.peak == 3 && q.waited == 0 && q.steps == 0, "%d, peak %d, waited %d, %lld steps",
	      q.requests, q.peak, q.waited, (long long)q.steps);
	trace_close(t);
	unlink(p);
}

/* Eight running sequences fill the slots: steps of 8 decodes pass the
 * waiting requests over, and one step that admitted a 64-token prompt
 * carried the most (71): the budget was not what held them. */
static void test_slot_bound_queue(void)
{
	char *p = schema_db_v(1);
	if (!p) SKIP("schema/001_init.sql not found: run from the repository root");
	sqlite3 *db;
	sqlite3_open(p, &db);
	for (int i = 0; i < 4; i++)
		req(db, 2, i, (1000 + i) * MS, (1395 + 100 * i) * MS, 64);
	for (int k = 0; k < 10; k++)
		step(db, 2, k + 1, (1050 + 100 * k) * MS, k == 4 ? 64 : 0, k == 4 ? 7 : 8);
	struct trace *t = open_store(db, p);
	struct trace_queue q;
	char err[256];
	CHECK(!trace_queue_wait(t, 0, 2 * NS_PER_S, &q, err, sizeof(err)), "%s", err);
	CHECK(q.peak == 4 && q.waited == 4, "peak %d, waited %d", q.peak, q.waited);
	/* steps at 1.05 .. 1.65 s began while one waited (the last leaves at 1.695) */
	CHECK(q.steps == 7 && q.step_tokens_max == 71 && q.full_steps == 1, "%lld steps, %lld full at %lld",
	      (long long)q.steps, (long long)q.full_steps, (long long)q.step_tokens_max);
	trace_close(t);
	unlink(p);
}

int main(void)
{
	RUN(test_budget_bound_queue);
	RUN(test_slot_bound_queue);
	return CHECK_DONE();
}
