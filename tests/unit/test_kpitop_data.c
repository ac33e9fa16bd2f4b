/* test_kpitop_data.c - kpitop's data layer keeps a span's request rows from
 * frame to frame: as rows arrive and the window grows, moves and jumps, each
 * frame must equal the one computed from scratch (trace_window_stats). */
#include "tests/unit/check.h"
#include "tests/unit/tracedb_util.h"
#include "tools/kpitop/kpitop.h"

#include <math.h>
#include <sqlite3.h>
#include <stdint.h>
#include <unistd.h>

/* n requests arriving in [from_s, to_s), written in a shuffled order (the
 * agent writes a request when it finishes): unknown values, 429s, errors,
 * cancellations and preemptions among them. */
static void add_requests(sqlite3 *db, unsigned *seed, double from_s, double to_s, int n)
{
	static int next_id;
	sqlite3_stmt *st;
	sqlite3_prepare_v2(db, "INSERT INTO requests (request_id, pid, wall_ns, t_arrive_ns, t_done_ns, ttft_ns, "
			   "tpot_ns, itl_p50_ns, itl_p99_ns, itl_max_ns, e2e_ns, net_in_ns, queue_ns, prefill_ns, "
			   "decode_ns, net_out_ns, runq_ns, prompt_tokens, output_tokens, http_status, finish_reason, "
			   "preemptions) VALUES (?1, 1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, "
			   "?16, ?17, ?18, ?19, ?20, ?21)", -1, &st, NULL);
	sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
	for (int i = 0; i < n; i++) {
		char id[32];
		snprintf(id, sizeof(id), "r%d", next_id++);
		int64_t arr = (int64_t)((from_s + (to_s - from_s) * (rand_r(seed) % 100000) / 100000.0) * NS_PER_S);
		int64_t e2e = (50 + rand_r(seed) % 3000) * NS_PER_MS;
		int kind = rand_r(seed) % 20;   /* 0: 429, 1: error, 2: cancelled, 3: unfinished values */
		sqlite3_reset(st);
		sqlite3_clear_bindings(st);
		sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 2, 1000 * NS_PER_S + arr);
		sqlite3_bind_int64(st, 3, arr);
		sqlite3_bind_int64(st, 4, arr + e2e);
		sqlite3_bind_int(st, 19, kind == 0 ? 429 : kind == 1 ? 500 : 200);
		if (kind != 0) {
			/* ttft .. runq: columns 5..17, some left unknown */
			for (int c = 5; c <= 17; c++)
				if (kind != 3 || rand_r(seed) % 2)
					sqlite3_bind_int64(st, c, c == 10 ? e2e : (int64_t)(rand_r(seed) % 500) * NS_PER_MS);
			sqlite3_bind_int(st, 17, 10 + rand_r(seed) % 500);
			sqlite3_bind_int(st, 18, rand_r(seed) % 200);
			sqlite3_bind_text(st, 20, kind == 1 ? "error" : kind == 2 ? "cancelled" : "stop", -1, SQLITE_STATIC);
		}
		sqlite3_bind_int(st, 21, rand_r(seed) % 10 == 0);
		sqlite3_step(st);
	}
	sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
	sqlite3_finalize(st);
}

/* One sample a second in [from_s, to_s). */
static void add_samples(sqlite3 *db, int from_s, int to_s)
{
	for (int s = from_s; s < to_s; s++) {
		char q[512];
		snprintf(q, sizeof(q), "INSERT INTO samples (pid, wall_ns, t_ns, queue_depth, running, kv_usage, "
			 "requests_per_s, output_tokens_per_s, preemptions, rejections, errors, drops, runq_ns) "
			 "VALUES (1, %lld, %lld, %d, 4, 0.5, 50, 900, 0, %d, 0, 0, 1000000)",
			 (long long)(1000LL + s) * NS_PER_S, (long long)s * NS_PER_S + NS_PER_S / 2, s % 7, s % 3);
		sqlite3_exec(db, q, NULL, NULL, NULL);
	}
}

/* d's frame against the window and sparklines computed from scratch. */
static void check_frame(const struct kt_data *d, struct trace *ref, const char *what)
{
	struct trace_window w;
	struct trace_point sp[KT_SPARK];
	CHECK(!trace_window_stats(ref, d->to_ns - d->window_ns, d->to_ns, false, &w), "%s", trace_errmsg(ref));
	CHECK(!trace_series(ref, d->spark_from_ns, d->spark_to_ns, KT_SPARK, sp), "%s", trace_errmsg(ref));
	CHECK(w.requests == d->win.requests && w.done == d->win.done, "%s: %d/%d requests, %d/%d done", what,
	      d->win.requests, w.requests, d->win.done, w.done);
	/* sums over rows in another order may differ in the last bits */
	struct trace_window got = d->win;
	for (int m = 0; m < TM_N; m++) {
		CHECK_NEAR(got.m[m].mean, w.m[m].mean, 1e-9 * fabs(w.m[m].mean) + 1e-6);
		got.m[m].mean = w.m[m].mean;
	}
	CHECK_NEAR(got.itl_max.mean, w.itl_max.mean, 1e-9 * fabs(w.itl_max.mean) + 1e-6);
	CHECK_NEAR(got.runq_share, w.runq_share, 1e-9);
	got.itl_max.mean = w.itl_max.mean;
	got.runq_share = w.runq_share;
	CHECK(!memcmp(&got, &w, sizeof(w)), "%s: the window differs (TTFT p99 %g/%g, e2e p50 row %lld/%lld)", what,
	      got.m[TM_TTFT].p99, w.m[TM_TTFT].p99, (long long)got.e2e_p50_row, (long long)w.e2e_p50_row);
	CHECK(!memcmp(sp, d->spark, sizeof(sp)), "%s: the sparklines differ", what);
}

static void test_kept_rows_match_scratch(void)
{
	char *p = schema_db_v(1);
	if (!p) SKIP("schema/001_init.sql not found: run from the repository root");
	sqlite3 *db;
	sqlite3_open(p, &db);
	sqlite3_exec(db, "PRAGMA journal_mode = WAL", NULL, NULL, NULL);
	unsigned seed = 11;
	add_requests(db, &seed, 1, 121, 6000);
	add_samples(db, 0, 121);
	char err[512];
	struct kt_data d;
	CHECK(!kt_open(&d, p, 10 * NS_PER_S, err, sizeof(err)), "%s", err);
	struct trace *ref = trace_open(p, err, sizeof(err));
	CHECK(ref, "%s", err);

	CHECK(!kt_sample(&d), "%s", kt_errmsg(&d));
	check_frame(&d, ref, "first frame");
	CHECK(d.rows_read > 2500 && d.win.requests > 400, "read %ld rows, %d in the window", d.rows_read,
	      d.win.requests);
	CHECK(!kt_sample(&d) && d.rows_read == 0, "nothing new, yet %ld rows read", d.rows_read);

	/* new arrivals, late finishers of the span kept, and one long before it */
	add_requests(db, &seed, 121, 125, 200);
	add_requests(db, &seed, 100, 121, 30);
	add_requests(db, &seed, 10, 11, 5);
	add_samples(db, 121, 125);
	CHECK(!kt_sample(&d), "%s", kt_errmsg(&d));
	check_frame(&d, ref, "rows added");
	CHECK(d.rows_read == 230, "read %ld rows, 230 were new in the span", d.rows_read);

	d.window_ns = 300 * NS_PER_S;   /* key 3: the span grows back to the start */
	CHECK(!kt_sample(&d), "%s", kt_errmsg(&d));
	check_frame(&d, ref, "window 5m");
	d.window_ns = 60 * NS_PER_S;
	d.live = 0;
	d.to_ns = 90 * NS_PER_S;        /* replay, overlapping the span kept */
	CHECK(!kt_sample(&d), "%s", kt_errmsg(&d));
	check_frame(&d, ref, "back to 90s");
	add_requests(db, &seed, 40, 80, 100);
	d.to_ns = 30 * NS_PER_S;        /* overlapping on the other side, rows added */
	CHECK(!kt_sample(&d), "%s", kt_errmsg(&d));
	check_frame(&d, ref, "back to 30s");
	d.to_ns = 400 * NS_PER_S;       /* past the data: nothing in common */
	CHECK(!kt_sample(&d), "%s", kt_errmsg(&d));
	check_frame(&d, ref, "past the end");
	d.live = 1;
	add_requests(db, &seed, 118, 130, 300);
	add_samples(db, 125, 130);
	CHECK(!kt_sample(&d), "%s", kt_errmsg(&d));
	check_frame(&d, ref, "live again");

	trace_close(ref);
	kt_close(&d);
	sqlite3_close(db);
	unlink(p);
}

int main(void)
{
	RUN(test_kept_rows_match_scratch);
	return CHECK_DONE();
}
