/* trace.c - read-only access to kpi-agent's trace store: every SQL statement
 * kpitop and kpi-report run lives here; range queries use the time indexes. */
#include "tools/common/trace.h"
#include "tools/common/reqstats.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const trace_phase_name[PH_N] = { "net-in", "queue", "prefill", "decode", "net-out" };
const char *const trace_metric_name[TM_N] = {
	"TTFT", "TPOT", "ITL", "e2e", "net-in", "queue", "prefill", "decode", "net-out", "run-queue",
	"server-wait", "TTFO", "router", "KV transfer", "decode queue",
};
const char *const trace_source_name[TRACE_SRC_N] = { "usdt", "http", "http+libllama",
						      "http (split inferred)" };
const char *const trace_state_name[TRS_N] = {
	"arriving", "queued", "prefill", "decode", "writing", "done", "rejected", "error", "cancelled",
};

/* Makes room for element n of a doubling array of size-byte elements. */
static int grow(void *pv, size_t *cap, size_t n, size_t size)
{
	void **v = pv;
	if (n < *cap) return 0;
	size_t c = *cap ? *cap * 2 : 4096;
	void *p = realloc(*v, c * size);
	if (!p) return -1;
	*v = p;
	*cap = c;
	return 0;
}

#define STR_(x) #x
#define STR(x) STR_(x)

struct trace {
	sqlite3 *db;
	char *path;
	bool has_source;                    /* requests.source (006_http.sql) */
	bool has_engine;                    /* requests.engine_prompt_tokens (007_llama.sql) */
	/* " AND ..." that leaves out a disaggregated request's worker rows (the
	 * decode and prefill workers' hops under the router's row, which stands
	 * for the request: 010_disagg.sql); "" before version 10 */
	const char *top;
	bool has_pd;                        /* requests.pd_role (010_disagg.sql) */
	bool has_ttfo;                      /* requests.ttfo_ns (011_tasks.sql) */
	bool has_weight_type;               /* requests.weight_type (009_weight_type.sql) */
	bool has_split;                     /* requests.split_rule (012_split.sql) */
	int64_t mono_to_wall;
	sqlite3_stmt *q_window, *q_since, *q_samples, *q_inflight, *q_replay, *q_recent,
		*q_slowest, *q_steps, *q_runq_by, *q_losses;
	struct reqstats stats;              /* scratch of the window and series */
	struct trace_stat_rows stat_rows;   /* trace_window_stats's and trace_series's rows */
	int64_t *col_t, *col_v;
	size_t ncol, cap_t, cap_v;
	struct trace_row *rows;
	size_t nrows, caprows;
	sqlite3_stmt *q_rows;
	char col_name[32];
	sqlite3_stmt *q_column;
	/* scalar queries run every frame (span, clock), prepared once */
	const char *scalar_sql[16];
	sqlite3_stmt *scalar_st[16];
	int nscalar;
};

/* The request lists' columns; the last two (server wait, whether the row is
 * an http one) are SQL_SRC_COLS, constants in a store older than version 6. */
#define SQL_REQ_COLS                                                                            \
	"request_id, pid, t_arrive_ns, t_admit_ns, t_sched_ns, t_first_ns, t_last_ns, t_done_ns, " \
	"net_in_ns, queue_ns, prefill_ns, decode_ns, net_out_ns, ttft_ns, tpot_ns, e2e_ns, "     \
	"prompt_tokens, output_tokens, http_status, finish_reason, reject_reason, preemptions, " \
	"runq_ns, itl_max_ns, %s, %s"

/* struct trace_stat_row's columns: 0..TM_N-1 are the metrics in enum order
 * (10, the server wait, and the last, the source, are SQL_SRC_COLS; 11 on,
 * TTFO and the disaggregated phases, sql_more_cols) */
#define SQL_STAT_COLS                                                                           \
	"ttft_ns, tpot_ns, itl_p50_ns, e2e_ns, net_in_ns, queue_ns, prefill_ns, decode_ns, "    \
	"net_out_ns, runq_ns, %s, %s, itl_p99_ns, itl_max_ns, prompt_tokens, output_tokens, "    \
	"http_status, finish_reason, preemptions, t_done_ns, t_arrive_ns"

/* The source code of a row (TRACE_SRC_SQL), as far as the store says. */
static const char *sql_src(const struct trace *t)
{
	return !t->has_source ? "0" : t->has_split ? TRACE_SRC_SQL_SPLIT : TRACE_SRC_SQL;
}

/* server_wait_ns, then the row's source code, where the store has them */
static const char *sql_src_cols(const struct trace *t)
{
	static char cols[2][256];
	char *c = cols[t->has_split];

	snprintf(c, sizeof(cols[0]), "%s, %s", t->has_source ? "server_wait_ns" : "NULL", sql_src(t));
	return c;
}

/* ttfo_ns where the store has it (version 11) */
static const char *sql_ttfo_col(const struct trace *t)
{
	return t->has_ttfo ? "ttfo_ns" : "NULL";
}

/* The metrics after the server wait, TM_TTFO to TM_DECODE_QUEUE, as far as
 * the store has them. */
static const char *sql_more_cols(const struct trace *t)
{
	static char cols[2][2][96];
	char *c = cols[t->has_ttfo][t->has_pd];

	snprintf(c, sizeof(cols[0][0]), "%s, %s", sql_ttfo_col(t),
		 t->has_pd ? "router_ns, kv_transfer_ns, decode_queue_ns" : "NULL, NULL, NULL");
	return c;
}

const char *trace_top_sql(const struct trace *t)
{
	return t->top;
}

/* ---- opening ------------------------------------------------------------- */

static int prep(struct trace *t, sqlite3_stmt **st, const char *sql, char *err, size_t errlen)
{
	if (sqlite3_prepare_v3(t->db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "%s: the trace store lacks what this tool reads (%s): "
			 "was it written by kpi-agent?", t->path, sqlite3_errmsg(t->db));
		return -1;
	}
	return 0;
}

static int64_t scalar_i64(struct trace *t, const char *sql, int64_t dflt)
{
	sqlite3_stmt *st = NULL;
	int i;
	for (i = 0; i < t->nscalar; i++)
		if (t->scalar_sql[i] == sql) {
			st = t->scalar_st[i];
			break;
		}
	if (!st) {
		if (sqlite3_prepare_v3(t->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK) return dflt;
		if (t->nscalar < 16) {
			t->scalar_sql[t->nscalar] = sql;
			t->scalar_st[t->nscalar++] = st;
		}
	}
	int64_t v = dflt;
	if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
		v = sqlite3_column_int64(st, 0);
	sqlite3_reset(st);
	if (i >= 16) sqlite3_finalize(st);
	return v;
}

static void load_clock(struct trace *t)
{
	/* the latest run's offset; a store without runs (a copy, a test) falls
	 * back to any row that carries both clocks */
	int64_t off = scalar_i64(t, "SELECT mono_to_wall_ns FROM agent_runs ORDER BY run_id DESC LIMIT 1", INT64_MIN);
	if (off == INT64_MIN)
		off = scalar_i64(t, "SELECT wall_ns - t_arrive_ns FROM requests ORDER BY t_arrive_ns DESC LIMIT 1", INT64_MIN);
	if (off == INT64_MIN)
		off = scalar_i64(t, "SELECT wall_ns - t_ns FROM samples ORDER BY t_ns DESC LIMIT 1", 0);
	t->mono_to_wall = off;
}

/* Opens the file read-only, with messages for the ways it can be missing. */
static int open_db(struct trace *t, const char *path, char *err, size_t errlen)
{
	if (access(path, F_OK) != 0) {
		snprintf(err, errlen, "%s: no trace store there (%s). Start the agent to record one "
			 "(sudo build/kpi-agent --db %s), or pass --db PATH of an existing trace",
			 path, strerror(errno), path);
		return -1;
	}
	if (access(path, R_OK) != 0) {
		snprintf(err, errlen, "%s: cannot read the trace store (%s): run as root or as its owner",
			 path, strerror(errno));
		return -1;
	}
	t->path = strdup(path);
	if (sqlite3_open_v2(path, &t->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "%s: cannot open the trace store: %s", path, sqlite3_errmsg(t->db));
		return -1;
	}
	/* the agent holds write transactions briefly; wait rather than fail */
	sqlite3_busy_timeout(t->db, 2000);
	/* reads through the page cache without a copy per page (read-only, so
	 * safe), and a page cache that holds a frame's working set */
	sqlite3_exec(t->db, "PRAGMA mmap_size = 1073741824; PRAGMA cache_size = -65536", NULL, NULL, NULL);
	return 0;
}

/* The store's schema version, or -1 (with the message) when this build
 * cannot read it. */
static int schema_version(struct trace *t, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc = sqlite3_prepare_v2(t->db, "PRAGMA user_version", -1, &st, NULL);
	if (rc == SQLITE_OK) rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		snprintf(err, errlen, "%s: not a readable SQLite database (%s): pass --db with the path "
			 "kpi-agent writes", t->path, sqlite3_errmsg(t->db));
		sqlite3_finalize(st);
		return -1;
	}
	int ver = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	if (ver == 0) {
		snprintf(err, errlen, "%s: not a kpiscope trace store (schema version 0: no kpi-agent "
			 "tables): pass --db with the path kpi-agent writes", t->path);
		return -1;
	}
	if (ver < TRACE_SCHEMA_VERSION_MIN || ver > TRACE_SCHEMA_VERSION) {
		snprintf(err, errlen, "%s: trace schema version %d, but this build reads version %d up to version %d: "
			 "use the kpitop/kpi-report built with the kpi-agent that wrote it",
			 t->path, ver, TRACE_SCHEMA_VERSION_MIN, TRACE_SCHEMA_VERSION);
		return -1;
	}
	return ver;
}

/* Whether table has column: by what the store holds, not its version (a
 * store migrated by hand, as the tests' synthetic ones, may lag in it). */
static bool has_column(struct trace *t, const char *table, const char *column)
{
	char sql[128];
	sqlite3_stmt *st;
	bool found = false;
	snprintf(sql, sizeof(sql), "SELECT 1 FROM pragma_table_info('%s') WHERE name = ?1", table);
	if (sqlite3_prepare_v2(t->db, sql, -1, &st, NULL) != SQLITE_OK) return false;
	sqlite3_bind_text(st, 1, column, -1, SQLITE_STATIC);
	found = sqlite3_step(st) == SQLITE_ROW;
	sqlite3_finalize(st);
	return found;
}

/* The window and timeline statements; what a version-ver store has. */
static int prep_window_queries(struct trace *t, int ver, char *err, size_t errlen)
{
	char sql[1024], win[1536], since[1536], rows[1536];
	const char *wait = t->has_source ? "server_wait_ns" : "NULL", *http = sql_src(t);
	snprintf(win, sizeof(win), "SELECT " SQL_STAT_COLS ", %s FROM requests "
		 "WHERE t_arrive_ns >= ?1 AND t_arrive_ns < ?2%s", wait, sql_more_cols(t), http, t->top);
	snprintf(since, sizeof(since), "SELECT " SQL_STAT_COLS ", %s FROM requests "
		 "WHERE rowid > ?3 AND +t_arrive_ns >= ?1 AND +t_arrive_ns < ?2%s", wait, sql_more_cols(t), http,
		 t->top);
	snprintf(rows, sizeof(rows), "SELECT t_arrive_ns, ttft_ns, e2e_ns, net_in_ns, queue_ns, prefill_ns, "
		 "decode_ns, net_out_ns, %s FROM requests WHERE t_arrive_ns >= ?1 AND t_arrive_ns < ?2 "
		 "AND e2e_ns IS NOT NULL AND http_status IS NOT 429%s", sql_src_cols(t), t->top);
	snprintf(sql, sizeof(sql), "SELECT pid, t_ns, queue_depth, running, kv_usage, requests_per_s, "
		 "output_tokens_per_s, preemptions, rejections, errors, drops, runq_ns, %s "
		 "FROM samples WHERE t_ns >= ?1 AND t_ns < ?2 ORDER BY t_ns",
		 ver >= 3 ? "runq_self_ns" : "NULL");
	/* the unary + keeps the planner on the rowid range, off the time index */
	return prep(t, &t->q_window, win, err, errlen) || prep(t, &t->q_since, since, err, errlen) ||
	       prep(t, &t->q_samples, sql, err, errlen) ||
	       (ver >= 3 && prep(t, &t->q_runq_by,
		    "SELECT other_pid, other_comm, SUM(runq_ns) AS ns FROM runq_by "
		    "WHERE t_ns >= ?1 AND t_ns < ?2 AND other_pid IS NOT NULL "
		    "GROUP BY other_pid ORDER BY ns DESC, other_pid LIMIT " STR(TRACE_RUNQ_BY_MAX), err, errlen)) ||
	       (ver >= 4 && prep(t, &t->q_losses,
		    "SELECT cause, SUM(n) AS lost FROM losses WHERE t_ns >= ?1 AND t_ns < ?2 "
		    "GROUP BY cause ORDER BY lost DESC, cause", err, errlen)) ||
	       prep(t, &t->q_rows, rows, err, errlen) ||
	       prep(t, &t->q_steps,
		    "SELECT t_start_ns, t_end_ns, prefill_tokens FROM steps "
		    "WHERE t_start_ns >= ?1 AND t_start_ns < ?2", err, errlen) ? -1 : 0;
}

/* The request-list statements (SQL_REQ_COLS rows, and the agent's inflight). */
static int prep_list_queries(struct trace *t, char *err, size_t errlen)
{
	char replay[1536], recent[1536], slowest[1536], cols[1024];
	snprintf(cols, sizeof(cols), SQL_REQ_COLS, sql_src_cols(t), sql_ttfo_col(t));
	snprintf(replay, sizeof(replay), "SELECT %s FROM requests WHERE t_arrive_ns >= ?1 AND t_arrive_ns <= ?2 "
		 "AND (t_done_ns IS NULL OR t_done_ns > ?2) AND http_status IS NOT 429%s "
		 "ORDER BY t_arrive_ns LIMIT ?3", cols, t->top);
	snprintf(recent, sizeof(recent), "SELECT %s FROM requests WHERE t_arrive_ns < ?1 AND t_arrive_ns >= ?3 "
		 "AND coalesce(t_done_ns, t_arrive_ns) <= ?1%s ORDER BY t_arrive_ns DESC LIMIT ?2", cols, t->top);
	snprintf(slowest, sizeof(slowest), "SELECT %s FROM requests WHERE t_arrive_ns >= ?1 AND t_arrive_ns < ?2%s "
		 "ORDER BY coalesce(e2e_ns, ttft_ns, 0) DESC LIMIT ?3", cols, t->top);
	return prep(t, &t->q_inflight,
		    "SELECT request_id, pid, state, t_arrive_ns, t_admit_ns, t_sched_ns, t_first_ns, "
		    "prompt_tokens, output_writes FROM inflight ORDER BY t_arrive_ns", err, errlen) ||
	       prep(t, &t->q_replay, replay, err, errlen) || prep(t, &t->q_recent, recent, err, errlen) ||
	       prep(t, &t->q_slowest, slowest, err, errlen) ? -1 : 0;
}

struct trace *trace_open(const char *path, char *err, size_t errlen)
{
	struct trace *t = calloc(1, sizeof(*t));
	if (!t) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	int ver;
	if (open_db(t, path, err, errlen) || (ver = schema_version(t, err, errlen)) < 0 ||
	    (t->has_source = has_column(t, "requests", "source"),
	     t->has_engine = has_column(t, "requests", "engine_prompt_tokens"),
	     t->has_pd = has_column(t, "requests", "pd_role"),
	     t->top = t->has_pd ? TRACE_TOP_SQL : "",
	     t->has_ttfo = has_column(t, "requests", "ttfo_ns"),
	     t->has_weight_type = has_column(t, "requests", "weight_type"),
	     t->has_split = has_column(t, "requests", "split_rule"), 0) ||
	    prep_window_queries(t, ver, err, errlen) || prep_list_queries(t, err, errlen)) {
		trace_close(t);
		return NULL;
	}
	load_clock(t);
	return t;
}

void trace_close(struct trace *t)
{
	if (!t) return;
	sqlite3_stmt *const all[] = {
		t->q_window, t->q_since, t->q_samples, t->q_inflight, t->q_replay, t->q_recent,
		t->q_slowest, t->q_steps, t->q_runq_by, t->q_losses, t->q_column, t->q_rows,
	};
	for (size_t i = 0; i < sizeof(all) / sizeof(*all); i++) sqlite3_finalize(all[i]);
	for (int i = 0; i < t->nscalar; i++) sqlite3_finalize(t->scalar_st[i]);
	sqlite3_close(t->db);
	reqstats_free(&t->stats);
	trace_stat_rows_free(&t->stat_rows);
	free(t->rows);
	free(t->col_t);
	free(t->col_v);
	free(t->path);
	free(t);
}

const char *trace_errmsg(const struct trace *t) { return sqlite3_errmsg(t->db); }
const char *trace_path(const struct trace *t) { return t->path; }

int64_t trace_mono_to_wall(const struct trace *t, int64_t mono_ns) { return mono_ns + t->mono_to_wall; }
int64_t trace_wall_to_mono(const struct trace *t, int64_t wall_ns) { return wall_ns - t->mono_to_wall; }

int trace_span(struct trace *t, int64_t *first_ns, int64_t *last_ns)
{
	/* min/max on indexed columns: two index probes each, not scans */
	static const char *const firsts[] = {
		"SELECT min(t_arrive_ns) FROM requests", "SELECT min(t_ns) FROM samples",
		"SELECT min(t_start_ns) FROM steps",
	};
	static const char *const lasts[] = {
		"SELECT max(t_arrive_ns) FROM requests", "SELECT max(t_ns) FROM samples",
		"SELECT max(t_start_ns) FROM steps", "SELECT max(updated_ns) FROM inflight",
	};
	int64_t lo = INT64_MAX, hi = INT64_MIN;
	for (size_t i = 0; i < sizeof(firsts) / sizeof(*firsts); i++) {
		int64_t v = scalar_i64(t, firsts[i], INT64_MAX);
		if (v < lo) lo = v;
	}
	for (size_t i = 0; i < sizeof(lasts) / sizeof(*lasts); i++) {
		int64_t v = scalar_i64(t, lasts[i], INT64_MIN);
		if (v > hi) hi = v;
	}
	if (lo == INT64_MAX || hi == INT64_MIN) return 0;
	load_clock(t);
	*first_ns = lo;
	*last_ns = hi;
	return 1;
}

int trace_read_begin(struct trace *t)
{
	return sqlite3_exec(t->db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
}

int trace_read_end(struct trace *t)
{
	return sqlite3_exec(t->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
}

/* ---- request rows -------------------------------------------------------- */

static int col_null(sqlite3_stmt *st, int c) { return sqlite3_column_type(st, c) == SQLITE_NULL; }
static int64_t col_or_null(sqlite3_stmt *st, int c)
{
	/* NULL reads as 0: ask for the type only then (a frame reads ~20 of
	 * these per row, on every row of the window) */
	int64_t v = sqlite3_column_int64(st, c);
	return v == 0 && col_null(st, c) ? TRACE_NULL : v;
}

/* One row in SQL_STAT_COLS order. */
static void stat_row_read(sqlite3_stmt *st, struct trace_stat_row *r)
{
	for (int m = 0; m < TM_N; m++) r->m[m] = col_or_null(st, m);
	r->itl_p99_ns = col_or_null(st, TM_N);
	r->itl_max_ns = col_or_null(st, TM_N + 1);
	r->prompt_tokens = sqlite3_column_int64(st, TM_N + 2);
	r->output_tokens = sqlite3_column_int64(st, TM_N + 3);
	r->http_status = col_null(st, TM_N + 4) ? 0 : sqlite3_column_int(st, TM_N + 4);
	const char *fin = (const char *)sqlite3_column_text(st, TM_N + 5);
	r->flags = (fin && !strcmp(fin, "error") ? TSR_ERROR : 0) |
		   (fin && !strcmp(fin, "cancelled") ? TSR_CANCELLED : 0) |
		   (sqlite3_column_int(st, TM_N + 6) > 0 ? TSR_PREEMPTED : 0) |
		   (sqlite3_column_int(st, TM_N + 9) == 1 ? TSR_HTTP : 0) |
		   (sqlite3_column_int(st, TM_N + 9) == 2 ? TSR_LIBLLAMA : 0) |
		   (sqlite3_column_int(st, TM_N + 9) == 3 ? TSR_INFERRED : 0);
	r->t_done_ns = col_or_null(st, TM_N + 7);
	r->t_arrive_ns = sqlite3_column_int64(st, TM_N + 8);
}

/* Appends every row of a bound SQL_STAT_COLS statement to out. */
static int stat_rows_step(sqlite3_stmt *st, struct trace_stat_rows *out)
{
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (grow(&out->v, &out->cap, out->n, sizeof(*out->v))) return -1;
		stat_row_read(st, &out->v[out->n++]);
	}
	sqlite3_reset(st);
	return rc == SQLITE_DONE ? 0 : -1;
}

int trace_stat_rows_fetch(struct trace *t, int64_t from_ns, int64_t to_ns, struct trace_stat_rows *out)
{
	sqlite3_stmt *st = t->q_window;
	sqlite3_reset(st);
	sqlite3_bind_int64(st, 1, from_ns);
	sqlite3_bind_int64(st, 2, to_ns);
	return stat_rows_step(st, out);
}

int trace_stat_rows_since(struct trace *t, int64_t after_rowid, int64_t from_ns, int64_t to_ns,
			  struct trace_stat_rows *out)
{
	sqlite3_stmt *st = t->q_since;
	sqlite3_reset(st);
	sqlite3_bind_int64(st, 1, from_ns);
	sqlite3_bind_int64(st, 2, to_ns);
	sqlite3_bind_int64(st, 3, after_rowid);
	return stat_rows_step(st, out);
}

int64_t trace_last_rowid(struct trace *t)
{
	return scalar_i64(t, "SELECT max(rowid) FROM requests", 0);
}

void trace_stat_rows_free(struct trace_stat_rows *r)
{
	free(r->v);
	memset(r, 0, sizeof(*r));
}

/* ---- window statistics --------------------------------------------------- */

/* Samples of [from_ns, w->samples_to_ns): latest per target, maxima and sums. */
static int window_samples(struct trace *t, struct trace_window *w, double *sreq, double *stok)
{
	struct { int pid, q, r; double kv; } last[16];
	int nlast = 0, rc;
	int64_t self_ns = 0;
	bool self_known = false;
	sqlite3_stmt *st = t->q_samples;
	sqlite3_reset(st);
	sqlite3_bind_int64(st, 1, w->from_ns);
	sqlite3_bind_int64(st, 2, w->samples_to_ns);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		w->samples++;
		int pid = sqlite3_column_int(st, 0);
		int q = sqlite3_column_int(st, 2), r = sqlite3_column_int(st, 3);
		double kv = col_null(st, 4) ? -1 : sqlite3_column_double(st, 4);
		int i;
		for (i = 0; i < nlast && last[i].pid != pid; i++)
			;
		if (i == nlast && nlast < 16) nlast++;
		if (i < 16) {
			last[i].pid = pid;
			last[i].q = q;
			last[i].r = r;
			last[i].kv = kv;
		}
		if (q > w->queue_depth_max) w->queue_depth_max = q;
		if (r > w->running_max) w->running_max = r;
		if (kv > w->kv_usage_max) w->kv_usage_max = kv;
		*sreq += sqlite3_column_double(st, 5);
		*stok += sqlite3_column_double(st, 6);
		w->preemptions += sqlite3_column_int64(st, 7);
		w->rejections += sqlite3_column_int64(st, 8);
		w->sample_errors += sqlite3_column_int64(st, 9);
		w->drops += sqlite3_column_int64(st, 10);
		w->runq_ns += sqlite3_column_int64(st, 11);
		if (!col_null(st, 12))
			self_ns += sqlite3_column_int64(st, 12), self_known = true;
	}
	sqlite3_reset(st);
	if (rc != SQLITE_DONE) return -1;
	w->runq_self_ns = self_known ? self_ns : -1;
	for (int i = 0; i < nlast; i++) {
		w->queue_depth += last[i].q;
		w->running += last[i].r;
		if (last[i].kv > w->kv_usage) w->kv_usage = last[i].kv;
	}
	return 0;
}

/* The processes the daemon's threads waited behind longest (version 3). */
static int window_runq_by(struct trace *t, struct trace_window *w)
{
	sqlite3_stmt *st = t->q_runq_by;
	w->n_runq_by = 0;
	if (!st) return 0;
	sqlite3_reset(st);
	sqlite3_bind_int64(st, 1, w->from_ns);
	sqlite3_bind_int64(st, 2, w->samples_to_ns);
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW && w->n_runq_by < TRACE_RUNQ_BY_MAX) {
		struct trace_runq_by *b = &w->runq_by[w->n_runq_by++];
		const unsigned char *comm = sqlite3_column_text(st, 1);
		b->pid = sqlite3_column_int(st, 0);
		snprintf(b->comm, sizeof(b->comm), "%s", comm ? (const char *)comm : "?");
		b->ns = sqlite3_column_int64(st, 2);
	}
	sqlite3_reset(st);
	return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : -1;
}

/* What the agent lost in the window, by cause (version 4); lost -1 before. */
static int window_losses(struct trace *t, struct trace_window *w)
{
	sqlite3_stmt *st = t->q_losses;
	int rc;

	w->n_loss = w->n_loss_more = 0;
	w->lost = st ? 0 : -1;
	w->unlinked = 0;
	if (!st) return 0;
	sqlite3_reset(st);
	sqlite3_bind_int64(st, 1, w->from_ns);
	sqlite3_bind_int64(st, 2, w->samples_to_ns);
	/* every cause counts in the total, listed or not; calls no link rule
	 * tied (hops_unlinked) are missing evidence, counted apart */
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const unsigned char *cause = sqlite3_column_text(st, 0);
		int64_t n = sqlite3_column_int64(st, 1);
		if (cause && !strcmp((const char *)cause, "hops_unlinked")) {
			w->unlinked += n;
			continue;
		}
		w->lost += n;
		if (w->n_loss == TRACE_LOSS_MAX) {
			w->n_loss_more++;
			continue;
		}
		struct trace_loss *l = &w->loss[w->n_loss++];
		snprintf(l->cause, sizeof(l->cause), "%s", cause ? (const char *)cause : "?");
		l->n = n;
	}
	sqlite3_reset(st);
	return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : -1;
}

int trace_window_from_rows(struct trace *t, const struct trace_stat_row *rows, size_t n, int64_t from_ns,
			   int64_t to_ns, bool while_served, struct trace_window *w)
{
	memset(w, 0, sizeof(*w));
	w->from_ns = from_ns;
	w->to_ns = to_ns;
	w->kv_usage = w->kv_usage_max = -1;
	if (reqstats_window(&t->stats, rows, n, w)) return -1;

	w->samples_to_ns = to_ns;
	if (while_served && w->served_to_ns + NS_PER_S >= to_ns)
		w->samples_to_ns = w->served_to_ns + NS_PER_S + 1;
	double sreq = 0, stok = 0;
	if (window_samples(t, w, &sreq, &stok) || window_runq_by(t, w) || window_losses(t, w)) return -1;
	double secs = (double)(to_ns - from_ns) / NS_PER_S;
	if (secs <= 0) secs = 1;
	if (w->samples && !while_served) {
		/* each sample counts one second's completions */
		w->req_per_s = sreq / secs;
		w->out_tok_per_s = stok / secs;
	} else {
		w->req_per_s = (w->requests - w->rejected) / secs;
		w->out_tok_per_s = (double)w->output_tokens / secs;
	}
	return 0;
}

int trace_window_stats(struct trace *t, int64_t from_ns, int64_t to_ns, bool while_served,
		       struct trace_window *w)
{
	t->stat_rows.n = 0;
	if (trace_stat_rows_fetch(t, from_ns, to_ns, &t->stat_rows)) return -1;
	return trace_window_from_rows(t, t->stat_rows.v, t->stat_rows.n, from_ns, to_ns, while_served, w);
}

const struct trace_runq_by *trace_runq_culprit(const struct trace_window *w)
{
	if (w->runq_self_ns < 0)
		return NULL;
	for (int k = 0; k < w->n_runq_by; k++)
		if (w->runq_by[k].pid > 0)      /* 0: an idle CPU, not a process */
			return w->runq_by[k].ns > w->runq_self_ns ? &w->runq_by[k] : NULL;
	return NULL;
}

/* ---- timelines ----------------------------------------------------------- */

/* Each bucket's samples: highest queue depth, running and KV usage, sums. */
static int series_samples(struct trace *t, int64_t from_ns, int64_t to_ns, int nb, struct trace_point *out)
{
	double bw = (double)(to_ns - from_ns) / nb;
	sqlite3_stmt *st = t->q_samples;
	sqlite3_reset(st);
	sqlite3_bind_int64(st, 1, from_ns);
	sqlite3_bind_int64(st, 2, to_ns);
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int b = reqstats_bucket(sqlite3_column_int64(st, 1), from_ns, bw, nb);
		if (b < 0) continue;
		struct trace_point *p = &out[b];
		p->samples++;
		int q = sqlite3_column_int(st, 2), r = sqlite3_column_int(st, 3);
		double kv = col_null(st, 4) ? -1 : sqlite3_column_double(st, 4);
		if (q > p->queue_depth_max) p->queue_depth_max = q;
		if (r > p->running_max) p->running_max = r;
		if (kv > p->kv_usage_max) p->kv_usage_max = kv;
		p->preemptions += sqlite3_column_int64(st, 7);
		p->rejections += sqlite3_column_int64(st, 8);
		p->drops += sqlite3_column_int64(st, 10);
		p->runq_ns += sqlite3_column_int64(st, 11);
	}
	sqlite3_reset(st);
	return rc == SQLITE_DONE ? 0 : -1;
}

int trace_series_from_rows(struct trace *t, const struct trace_stat_row *rows, size_t n, int64_t from_ns,
			   int64_t to_ns, int nb, struct trace_point *out)
{
	if (nb <= 0 || to_ns <= from_ns) return -1;
	memset(out, 0, sizeof(*out) * nb);
	double bw = (double)(to_ns - from_ns) / nb;
	for (int i = 0; i < nb; i++) {
		out[i].t_ns = from_ns + (int64_t)(bw * i);
		out[i].kv_usage_max = -1;
	}
	if (reqstats_series(&t->stats, rows, n, from_ns, to_ns, nb, out)) return -1;
	return series_samples(t, from_ns, to_ns, nb, out);
}

int trace_series(struct trace *t, int64_t from_ns, int64_t to_ns, int nb, struct trace_point *out)
{
	if (nb <= 0 || to_ns <= from_ns) return -1;
	t->stat_rows.n = 0;
	if (trace_stat_rows_fetch(t, from_ns, to_ns, &t->stat_rows)) return -1;
	return trace_series_from_rows(t, t->stat_rows.v, t->stat_rows.n, from_ns, to_ns, nb, out);
}

/* ---- request lists ------------------------------------------------------- */

static int64_t col_ns(sqlite3_stmt *st, int c) { return col_null(st, c) ? -1 : sqlite3_column_int64(st, c); }

/* One row in SQL_REQ_COLS order; now_ns decides the state of unfinished rows. */
static void req_from_row(sqlite3_stmt *st, int64_t now_ns, struct trace_req *r)
{
	memset(r, 0, sizeof(*r));
	const char *id = (const char *)sqlite3_column_text(st, 0);
	snprintf(r->id, sizeof(r->id), "%s", id ? id : "?");
	r->pid = sqlite3_column_int(st, 1);
	r->t_arrive_ns = sqlite3_column_int64(st, 2);
	int64_t admit = col_ns(st, 3), sched = col_ns(st, 4), first = col_ns(st, 5),
		last = col_ns(st, 6), done = col_ns(st, 7);
	for (int p = 0; p < PH_N; p++) r->phase[p] = col_ns(st, 8 + p);
	r->ttft_ns = col_ns(st, 13);
	r->tpot_ns = col_ns(st, 14);
	r->e2e_ns = col_ns(st, 15);
	r->prompt_tokens = sqlite3_column_int(st, 16);
	r->output_tokens = sqlite3_column_int(st, 17);
	r->http_status = sqlite3_column_int(st, 18);
	const char *fin = (const char *)sqlite3_column_text(st, 19);
	const char *rej = (const char *)sqlite3_column_text(st, 20);
	r->preemptions = sqlite3_column_int(st, 21);
	r->runq_ns = col_ns(st, 22);
	r->itl_max_ns = col_ns(st, 23);
	r->server_wait_ns = col_ns(st, 24);
	r->source = trace_source_of(sqlite3_column_int(st, 25));
	r->ttfo_ns = col_ns(st, 26);
	if (done >= 0 && done <= now_ns) {
		if (r->http_status == 429 || (rej && *rej)) r->state = TRS_REJECTED;
		else if (fin && !strcmp(fin, "cancelled")) r->state = TRS_CANCELLED;
		else if (r->http_status >= 400 || (fin && !strcmp(fin, "error"))) r->state = TRS_ERROR;
		else r->state = TRS_DONE;
		r->age_ns = done - r->t_arrive_ns;
		return;
	}
	/* replay: the state it was in at now_ns, and only what was known then */
	r->age_ns = now_ns - r->t_arrive_ns;
	if (last >= 0 && last <= now_ns) r->state = TRS_WRITING;
	else if (first >= 0 && first <= now_ns) r->state = TRS_DECODE;
	else if (sched >= 0 && sched <= now_ns) r->state = TRS_PREFILL;
	else if (admit >= 0 && admit <= now_ns) r->state = TRS_QUEUED;
	else r->state = TRS_ARRIVING;
	int64_t marks[PH_N + 1] = { r->t_arrive_ns, admit, sched, first, last, done };
	for (int p = 0; p < PH_N; p++) {
		if (marks[p] < 0 || marks[p] > now_ns) r->phase[p] = -1;
		else if (marks[p + 1] < 0 || marks[p + 1] > now_ns) r->phase[p] = now_ns - marks[p];
	}
	if (first < 0 || first > now_ns) r->ttft_ns = -1;
	r->tpot_ns = r->e2e_ns = r->ttfo_ns = -1;
	if (r->state < TRS_WRITING) r->output_tokens = 0;
}

static enum trace_req_state state_from_text(const char *s)
{
	for (int i = 0; i < TRS_N; i++)
		if (s && !strcmp(s, trace_state_name[i])) return (enum trace_req_state)i;
	return TRS_ARRIVING;
}

/* One row of the agent's inflight table: phases up to now_ns. */
static void req_from_inflight(sqlite3_stmt *st, int64_t now_ns, struct trace_req *r)
{
	memset(r, 0, sizeof(*r));
	const char *id = (const char *)sqlite3_column_text(st, 0);
	snprintf(r->id, sizeof(r->id), "%s", id ? id : "?");
	r->pid = sqlite3_column_int(st, 1);
	r->state = state_from_text((const char *)sqlite3_column_text(st, 2));
	r->t_arrive_ns = sqlite3_column_int64(st, 3);
	r->age_ns = now_ns - r->t_arrive_ns;
	int64_t marks[4] = { r->t_arrive_ns, col_ns(st, 4), col_ns(st, 5), col_ns(st, 6) };
	for (int p = 0; p < PH_N; p++) r->phase[p] = -1;
	for (int p = 0; p < 4; p++) {
		if (marks[p] < 0) break;
		int64_t end = p + 1 < 4 && marks[p + 1] >= 0 ? marks[p + 1] : now_ns;
		r->phase[p] = end - marks[p];
	}
	r->prompt_tokens = sqlite3_column_int(st, 7);
	r->output_tokens = sqlite3_column_int(st, 8);
	r->ttft_ns = marks[3] >= 0 ? marks[3] - marks[0] : -1;
	r->tpot_ns = r->e2e_ns = r->runq_ns = r->itl_max_ns = r->ttfo_ns = -1;
}

int trace_inflight(struct trace *t, int64_t now_ns, int live, struct trace_req *out, int max)
{
	int n = 0;
	sqlite3_stmt *st;
	if (live) {
		st = t->q_inflight;
		sqlite3_reset(st);
		while (n < max && sqlite3_step(st) == SQLITE_ROW) req_from_inflight(st, now_ns, &out[n++]);
		sqlite3_reset(st);      /* a statement left stepping holds the snapshot */
		return n;
	}
	/* replay: rows that had arrived and not finished by now_ns; requests
	 * living longer than the lookback are rare and left out to keep the
	 * range small */
	st = t->q_replay;
	sqlite3_reset(st);
	sqlite3_bind_int64(st, 1, now_ns - 120 * NS_PER_S);
	sqlite3_bind_int64(st, 2, now_ns);
	sqlite3_bind_int(st, 3, max);
	while (n < max && sqlite3_step(st) == SQLITE_ROW) req_from_row(st, now_ns, &out[n++]);
	sqlite3_reset(st);
	return n;
}

int trace_recent(struct trace *t, int64_t to_ns, struct trace_req *out, int max)
{
	int n = 0;
	sqlite3_stmt *st = t->q_recent;
	sqlite3_reset(st);
	sqlite3_bind_int64(st, 1, to_ns);
	sqlite3_bind_int(st, 2, max);
	sqlite3_bind_int64(st, 3, to_ns - 600 * NS_PER_S);
	while (n < max && sqlite3_step(st) == SQLITE_ROW) req_from_row(st, to_ns, &out[n++]);
	sqlite3_reset(st);
	return n;
}

int trace_slowest(struct trace *t, int64_t from_ns, int64_t to_ns, struct trace_req *out, int max)
{
	int n = 0;
	sqlite3_stmt *st = t->q_slowest;
	sqlite3_reset(st);
	sqlite3_bind_int64(st, 1, from_ns);
	sqlite3_bind_int64(st, 2, to_ns);
	sqlite3_bind_int(st, 3, max);
	while (n < max && sqlite3_step(st) == SQLITE_ROW) req_from_row(st, INT64_MAX, &out[n++]);
	sqlite3_reset(st);
	return n;
}

bool trace_has_prompt_reuse(const struct trace *t)
{
	return t->has_engine;
}

bool trace_has_source(const struct trace *t)
{
	return t->has_source;
}

/* A row's weight type: its own, or, on a router's row (the router maps no
 * model), its decode worker's, the row under it (010_disagg.sql). */
#define SQL_WEIGHT_TYPE_PD                                                                     \
	"COALESCE(weight_type, (SELECT c.weight_type FROM requests AS c "                      \
	"WHERE c.request_id = requests.request_id AND c.weight_type IS NOT NULL "                \
	"AND c.parent_hop_id = COALESCE(requests.hop_id, requests.pid || '.' || requests.t_arrive_ns) " \
	"LIMIT 1))"

int trace_weights(struct trace *t, struct trace_weight *out, int max)
{
	sqlite3_stmt *types = NULL, *rows = NULL;
	char sql[2048], typed[1536];
	int n = 0, rc = -1;
	if (!t->has_weight_type)
		return 0;
	/* each request once, by the row that stands for it, with the weight
	 * type that served it */
	snprintf(typed, sizeof(typed), "WITH typed AS (SELECT *, %s AS wt FROM requests WHERE 1%s) ",
		 t->has_pd ? SQL_WEIGHT_TYPE_PD : "weight_type", t->top);
	snprintf(sql, sizeof(sql), "%sSELECT " SQL_STAT_COLS ", %s FROM typed WHERE wt = ?1", typed,
		 t->has_source ? "server_wait_ns" : "NULL", sql_more_cols(t), sql_src(t));
	char tsql[2048];
	snprintf(tsql, sizeof(tsql), "%sSELECT wt, min(t_arrive_ns), max(coalesce(t_done_ns, t_arrive_ns)) "
		 "FROM typed WHERE wt IS NOT NULL GROUP BY wt ORDER BY min(t_arrive_ns)", typed);
	if (sqlite3_prepare_v2(t->db, tsql, -1, &types, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(t->db, sql, -1, &rows, NULL) != SQLITE_OK)
		goto out;
	while (n < max && sqlite3_step(types) == SQLITE_ROW) {
		struct trace_weight *x = &out[n];
		snprintf(x->type, sizeof(x->type), "%s", (const char *)sqlite3_column_text(types, 0));
		x->from_ns = sqlite3_column_int64(types, 1);
		x->to_ns = sqlite3_column_int64(types, 2) + 1;
		t->stat_rows.n = 0;
		sqlite3_reset(rows);
		sqlite3_bind_text(rows, 1, x->type, -1, SQLITE_STATIC);
		if (stat_rows_step(rows, &t->stat_rows))
			goto out;
		memset(&x->w, 0, sizeof(x->w));
		x->w.from_ns = x->from_ns;
		x->w.to_ns = x->to_ns;
		x->w.kv_usage = x->w.kv_usage_max = -1;
		if (reqstats_window(&t->stats, t->stat_rows.v, t->stat_rows.n, &x->w))
			goto out;
		/* the rates of these requests over their own span (the samples
		 * are the process's, whatever it served) */
		double secs = (double)(x->to_ns - x->from_ns) / NS_PER_S;
		secs = secs > 0 ? secs : 1;
		x->w.req_per_s = (x->w.requests - x->w.rejected) / secs;
		x->w.out_tok_per_s = (double)x->w.output_tokens / secs;
		n++;
	}
	rc = n;
out:
	sqlite3_finalize(types);
	sqlite3_finalize(rows);
	return rc;
}

int trace_column(struct trace *t, const char *column, int64_t from_ns, int64_t to_ns,
		 const int64_t **t_arrive, const int64_t **values)
{
	static const char *const allowed[] = {
		"ttft_ns", "tpot_ns", "e2e_ns", "queue_ns", "prefill_ns", "decode_ns", "net_in_ns",
		"net_out_ns", "runq_ns", "itl_max_ns", "itl_p99_ns",
		"engine_prompt_tokens", "cached_prompt_tokens",     /* version 7: trace_reuse.c */
	};
	int ok = 0;
	for (size_t i = 0; i < sizeof(allowed) / sizeof(*allowed); i++)
		ok |= !strcmp(column, allowed[i]);
	if (!ok) return -1;
	if (strcmp(t->col_name, column)) {
		char sql[384];
		sqlite3_finalize(t->q_column);
		t->q_column = NULL;
		snprintf(sql, sizeof(sql), "SELECT t_arrive_ns, %s FROM requests WHERE t_arrive_ns >= ?1 "
			 "AND t_arrive_ns < ?2 AND %s IS NOT NULL%s ORDER BY t_arrive_ns", column, column, t->top);
		if (sqlite3_prepare_v2(t->db, sql, -1, &t->q_column, NULL) != SQLITE_OK) return -1;
		snprintf(t->col_name, sizeof(t->col_name), "%s", column);
	}
	t->ncol = 0;
	sqlite3_stmt *st = t->q_column;
	sqlite3_reset(st);
	sqlite3_bind_int64(st, 1, from_ns);
	sqlite3_bind_int64(st, 2, to_ns);
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (grow(&t->col_t, &t->cap_t, t->ncol, sizeof(*t->col_t)) ||
		    grow(&t->col_v, &t->cap_v, t->ncol, sizeof(*t->col_v)))
			return -1;
		t->col_t[t->ncol] = sqlite3_column_int64(st, 0);
		t->col_v[t->ncol++] = sqlite3_column_int64(st, 1);
	}
	if (rc != SQLITE_DONE) return -1;
	*t_arrive = t->col_t;
	*values = t->col_v;
	return (int)t->ncol;
}

int trace_rows(struct trace *t, int64_t from_ns, int64_t to_ns, const struct trace_row **rows)
{
	sqlite3_stmt *st = t->q_rows;
	sqlite3_reset(st);
	sqlite3_bind_int64(st, 1, from_ns);
	sqlite3_bind_int64(st, 2, to_ns);
	t->nrows = 0;
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (grow(&t->rows, &t->caprows, t->nrows, sizeof(*t->rows))) return -1;
		struct trace_row *r = &t->rows[t->nrows++];
		r->t_arrive_ns = sqlite3_column_int64(st, 0);
		r->ttft_ns = col_null(st, 1) ? -1 : sqlite3_column_int64(st, 1);
		r->e2e_ns = sqlite3_column_int64(st, 2);
		for (int p = 0; p < PH_N; p++) r->phase[p] = sqlite3_column_int64(st, 3 + p);
		r->server_wait_ns = sqlite3_column_int64(st, 8);
		r->source = trace_source_of(sqlite3_column_int(st, 9));
	}
	if (rc != SQLITE_DONE) return -1;
	*rows = t->rows;
	return (int)t->nrows;
}

int trace_step_stats(struct trace *t, int64_t from_ns, int64_t to_ns, int min_prefill, struct trace_steps *s)
{
	memset(s, 0, sizeof(*s));
	sqlite3_stmt *st = t->q_steps;
	sqlite3_reset(st);
	sqlite3_bind_int64(st, 1, from_ns);
	sqlite3_bind_int64(st, 2, to_ns);
	int64_t busy = 0;
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		s->steps++;
		int64_t d = col_null(st, 1) ? 0 : sqlite3_column_int64(st, 1) - sqlite3_column_int64(st, 0);
		int pf = sqlite3_column_int(st, 2);
		busy += d;
		if (d > s->max_step_ns) s->max_step_ns = d;
		if (pf > 0) s->prefill_steps++;
		if (pf > s->max_prefill_tokens) s->max_prefill_tokens = pf;
		if (pf >= min_prefill && pf > 0) {
			s->long_prefill_steps++;
			s->long_prefill_ns += d;
		}
	}
	s->busy_frac = to_ns > from_ns ? (double)busy / (double)(to_ns - from_ns) : 0;
	return rc == SQLITE_DONE ? 0 : -1;
}

/* ---- time ---------------------------------------------------------------- */

int trace_parse_time(struct trace *t, const char *s, int64_t *mono_ns, char *err, size_t errlen)
{
	struct timefmt_point p;
	if (timefmt_parse_point(s, &p, err, errlen)) return -1;
	if (p.anchor == TF_WALL) {
		*mono_ns = trace_wall_to_mono(t, p.ns);
		return 0;
	}
	int64_t first = 0, last = 0;
	if (!trace_span(t, &first, &last)) {
		snprintf(err, errlen, "time '%s' is relative to the trace, but %s holds no data yet", s, t->path);
		return -1;
	}
	if (p.anchor == TF_START) *mono_ns = first + p.ns;
	/* just past the last instant: a window that ends at "end" holds the last row */
	else if (p.anchor == TF_END) *mono_ns = last + 1 + p.ns;
	else {
		int64_t wall = timefmt_on_day(trace_mono_to_wall(t, last), p.ns);
		if (wall < 0) {
			snprintf(err, errlen, "'%s' is not a time on the day the trace ends", s);
			return -1;
		}
		*mono_ns = trace_wall_to_mono(t, wall);
	}
	return 0;
}

char *trace_fmt_time(const struct trace *t, char *buf, size_t n, int64_t mono_ns, int with_date)
{
	return timefmt_wall(buf, n, trace_mono_to_wall(t, mono_ns), with_date);
}
