/* trace.c - read-only access to kpi-agent's trace store: every SQL statement
 * kpitop and kpi-report run lives here; range queries use the time indexes. */
#include "tools/common/trace.h"
#include "schema/pct.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *const trace_phase_name[PH_N] = { "net-in", "queue", "prefill", "decode", "net-out" };
const char *const trace_metric_name[TM_N] = {
	"TTFT", "TPOT", "ITL", "e2e", "net-in", "queue", "prefill", "decode", "net-out", "run-queue",
};
const char *const trace_state_name[TRS_N] = {
	"arriving", "queued", "prefill", "decode", "writing", "done", "rejected", "error", "cancelled",
};

/* Growable int64 arrays reused from frame to frame: no allocation per frame. */
struct vec {
	int64_t *v;
	size_t n, cap;
};

static int vec_push(struct vec *a, int64_t x)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 4096;
		int64_t *v = realloc(a->v, cap * sizeof(*v));
		if (!v) return -1;
		a->v = v;
		a->cap = cap;
	}
	a->v[a->n++] = x;
	return 0;
}

#define STR_(x) #x
#define STR(x) STR_(x)

enum { V_ITL_P99 = TM_N, V_ITL_MAX, V_ROW_E2E, V_ROW_PH0, V_N = V_ROW_PH0 + PH_N };

struct trace {
	sqlite3 *db;
	char *path;
	int64_t mono_to_wall;
	sqlite3_stmt *q_window, *q_samples, *q_series_req, *q_inflight, *q_replay, *q_recent,
		*q_slowest, *q_steps, *q_runq_by;
	struct vec v[V_N];
	struct vec col_t, col_v;
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

static const char *SQL_REQ_COLS =
	"request_id, pid, t_arrive_ns, t_admit_ns, t_sched_ns, t_first_ns, t_last_ns, t_done_ns, "
	"net_in_ns, queue_ns, prefill_ns, decode_ns, net_out_ns, ttft_ns, tpot_ns, e2e_ns, "
	"prompt_tokens, output_tokens, http_status, finish_reason, reject_reason, preemptions, "
	"runq_ns, itl_max_ns";

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

struct trace *trace_open(const char *path, char *err, size_t errlen)
{
	if (access(path, F_OK) != 0) {
		snprintf(err, errlen, "%s: no trace store there (%s). Start the agent to record one "
			 "(sudo build/kpi-agent --db %s), or pass --db PATH of an existing trace",
			 path, strerror(errno), path);
		return NULL;
	}
	if (access(path, R_OK) != 0) {
		snprintf(err, errlen, "%s: cannot read the trace store (%s): run as root or as its owner",
			 path, strerror(errno));
		return NULL;
	}
	struct trace *t = calloc(1, sizeof(*t));
	if (!t) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	t->path = strdup(path);
	if (sqlite3_open_v2(path, &t->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "%s: cannot open the trace store: %s", path, sqlite3_errmsg(t->db));
		goto fail;
	}
	/* the agent holds write transactions briefly; wait rather than fail */
	sqlite3_busy_timeout(t->db, 2000);
	/* reads through the page cache without a copy per page (read-only, so
	 * safe), and a page cache that holds a frame's working set */
	sqlite3_exec(t->db, "PRAGMA mmap_size = 1073741824; PRAGMA cache_size = -65536", NULL, NULL, NULL);
	sqlite3_stmt *st;
	int rc = sqlite3_prepare_v2(t->db, "PRAGMA user_version", -1, &st, NULL);
	if (rc == SQLITE_OK) rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		snprintf(err, errlen, "%s: not a readable SQLite database (%s): pass --db with the path "
			 "kpi-agent writes", path, sqlite3_errmsg(t->db));
		sqlite3_finalize(st);
		goto fail;
	}
	int ver = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	if (ver == 0) {
		snprintf(err, errlen, "%s: not a kpiscope trace store (schema version 0: no kpi-agent "
			 "tables): pass --db with the path kpi-agent writes", path);
		goto fail;
	}
	if (ver < TRACE_SCHEMA_VERSION_MIN || ver > TRACE_SCHEMA_VERSION) {
		snprintf(err, errlen, "%s: trace schema version %d, but this build reads version %d up to version %d: "
			 "use the kpitop/kpi-report built with the kpi-agent that wrote it",
			 path, ver, TRACE_SCHEMA_VERSION_MIN, TRACE_SCHEMA_VERSION);
		goto fail;
	}
	char sql[1024];
	if (prep(t, &t->q_window,
		 "SELECT ttft_ns, tpot_ns, itl_p50_ns, e2e_ns, net_in_ns, queue_ns, prefill_ns, "
		 "decode_ns, net_out_ns, runq_ns, itl_p99_ns, itl_max_ns, prompt_tokens, "
		 "output_tokens, http_status, finish_reason, preemptions, t_done_ns "
		 "FROM requests WHERE t_arrive_ns >= ?1 AND t_arrive_ns < ?2", err, errlen) ||
	    (snprintf(sql, sizeof(sql), "SELECT pid, t_ns, queue_depth, running, kv_usage, requests_per_s, "
		      "output_tokens_per_s, preemptions, rejections, errors, drops, runq_ns, %s "
		      "FROM samples WHERE t_ns >= ?1 AND t_ns < ?2 ORDER BY t_ns",
		      ver >= 3 ? "runq_self_ns" : "NULL") < 0 || prep(t, &t->q_samples, sql, err, errlen)) ||
	    (ver >= 3 && prep(t, &t->q_runq_by,
		 "SELECT other_pid, other_comm, SUM(runq_ns) AS ns FROM runq_by "
		 "WHERE t_ns >= ?1 AND t_ns < ?2 AND other_pid IS NOT NULL "
		 "GROUP BY other_pid ORDER BY ns DESC, other_pid LIMIT " STR(TRACE_RUNQ_BY_MAX), err, errlen)) ||
	    prep(t, &t->q_series_req,
		 "SELECT t_arrive_ns, ttft_ns, e2e_ns FROM requests "
		 "WHERE t_arrive_ns >= ?1 AND t_arrive_ns < ?2", err, errlen) ||
	    prep(t, &t->q_inflight,
		 "SELECT request_id, pid, state, t_arrive_ns, t_admit_ns, t_sched_ns, t_first_ns, "
		 "prompt_tokens, output_writes FROM inflight ORDER BY t_arrive_ns", err, errlen))
		goto fail;
	snprintf(sql, sizeof(sql), "SELECT %s FROM requests WHERE t_arrive_ns >= ?1 AND t_arrive_ns <= ?2 "
		 "AND (t_done_ns IS NULL OR t_done_ns > ?2) AND http_status IS NOT 429 "
		 "ORDER BY t_arrive_ns LIMIT ?3", SQL_REQ_COLS);
	if (prep(t, &t->q_replay, sql, err, errlen)) goto fail;
	snprintf(sql, sizeof(sql), "SELECT %s FROM requests WHERE t_arrive_ns < ?1 AND t_arrive_ns >= ?3 "
		 "AND coalesce(t_done_ns, t_arrive_ns) <= ?1 ORDER BY t_arrive_ns DESC LIMIT ?2", SQL_REQ_COLS);
	if (prep(t, &t->q_recent, sql, err, errlen)) goto fail;
	snprintf(sql, sizeof(sql), "SELECT %s FROM requests WHERE t_arrive_ns >= ?1 AND t_arrive_ns < ?2 "
		 "ORDER BY coalesce(e2e_ns, ttft_ns, 0) DESC LIMIT ?3", SQL_REQ_COLS);
	if (prep(t, &t->q_slowest, sql, err, errlen)) goto fail;
	if (prep(t, &t->q_rows,
		 "SELECT t_arrive_ns, ttft_ns, e2e_ns, net_in_ns, queue_ns, prefill_ns, decode_ns, "
		 "net_out_ns FROM requests WHERE t_arrive_ns >= ?1 AND t_arrive_ns < ?2 "
		 "AND e2e_ns IS NOT NULL AND http_status IS NOT 429", err, errlen))
		goto fail;
	if (prep(t, &t->q_steps,
		 "SELECT t_start_ns, t_end_ns, prefill_tokens FROM steps "
		 "WHERE t_start_ns >= ?1 AND t_start_ns < ?2", err, errlen))
		goto fail;
	load_clock(t);
	return t;
fail:
	trace_close(t);
	return NULL;
}

void trace_close(struct trace *t)
{
	if (!t) return;
	sqlite3_finalize(t->q_window);
	sqlite3_finalize(t->q_samples);
	sqlite3_finalize(t->q_series_req);
	sqlite3_finalize(t->q_inflight);
	sqlite3_finalize(t->q_replay);
	sqlite3_finalize(t->q_recent);
	sqlite3_finalize(t->q_slowest);
	sqlite3_finalize(t->q_steps);
	sqlite3_finalize(t->q_runq_by);
	sqlite3_finalize(t->q_column);
	sqlite3_finalize(t->q_rows);
	for (int i = 0; i < t->nscalar; i++) sqlite3_finalize(t->scalar_st[i]);
	free(t->rows);
	sqlite3_close(t->db);
	for (int i = 0; i < V_N; i++) free(t->v[i].v);
	free(t->col_t.v);
	free(t->col_v.v);
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

/* ---- window statistics --------------------------------------------------- */

static void dist_fill(struct trace_dist *d, struct vec *a, struct vec *hi_tail, struct vec *maxv)
{
	memset(d, 0, sizeof(*d));
	d->n = (int)a->n;
	if (!a->n) return;
	double sum = 0;
	int64_t mx = a->v[0];
	for (size_t i = 0; i < a->n; i++) {
		sum += (double)a->v[i];
		if (a->v[i] > mx) mx = a->v[i];
	}
	d->mean = sum / (double)a->n;
	d->max = (double)mx;
	d->p50 = pct_select_i64(a->v, a->n, 50);
	struct vec *tail = hi_tail && hi_tail->n ? hi_tail : a;
	d->p99 = pct_select_i64(tail->v, tail->n, 99);
	d->p95 = pct_select_i64(tail->v, tail->n, 95);
	if (maxv && maxv->n) {
		int64_t m2 = maxv->v[0];
		for (size_t i = 1; i < maxv->n; i++)
			if (maxv->v[i] > m2) m2 = maxv->v[i];
		d->max = (double)m2;
	}
}

static int col_null(sqlite3_stmt *st, int c) { return sqlite3_column_type(st, c) == SQLITE_NULL; }

int trace_window_stats(struct trace *t, int64_t from_ns, int64_t to_ns, bool while_served,
		       struct trace_window *w)
{
	memset(w, 0, sizeof(*w));
	w->from_ns = from_ns;
	w->to_ns = to_ns;
	w->kv_usage = w->kv_usage_max = -1;
	for (int i = 0; i < V_N; i++) t->v[i].n = 0;

	double runq_sum = 0;
	int runq_n = 0;
	sqlite3_stmt *st = t->q_window;
	sqlite3_reset(st);
	sqlite3_bind_int64(st, 1, from_ns);
	sqlite3_bind_int64(st, 2, to_ns);
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		w->requests++;
		if (!col_null(st, 17) && sqlite3_column_int64(st, 17) > w->served_to_ns)
			w->served_to_ns = sqlite3_column_int64(st, 17);
		int status = col_null(st, 14) ? 0 : sqlite3_column_int(st, 14);
		const char *fin = (const char *)sqlite3_column_text(st, 15);
		if (status == 429) {
			w->rejected++;
			continue;
		}
		if (status >= 400 || (fin && !strcmp(fin, "error"))) w->errors++;
		if (fin && !strcmp(fin, "cancelled")) w->cancelled++;
		if (sqlite3_column_int(st, 16) > 0) w->preempted++;
		w->prompt_tokens += sqlite3_column_int64(st, 12);
		w->output_tokens += sqlite3_column_int64(st, 13);
		/* columns 0..9 map to metrics TTFT..RUNQ in order */
		for (int m = 0; m < TM_N; m++)
			if (!col_null(st, m) && vec_push(&t->v[m], sqlite3_column_int64(st, m)))
				return -1;
		if (!col_null(st, 10)) vec_push(&t->v[V_ITL_P99], sqlite3_column_int64(st, 10));
		if (!col_null(st, 11)) vec_push(&t->v[V_ITL_MAX], sqlite3_column_int64(st, 11));
		if (!col_null(st, 3) && !col_null(st, 9) && sqlite3_column_int64(st, 3) > 0) {
			runq_sum += (double)sqlite3_column_int64(st, 9) / (double)sqlite3_column_int64(st, 3);
			runq_n++;
		}
		if (!col_null(st, 3)) {
			w->done++;
			vec_push(&t->v[V_ROW_E2E], sqlite3_column_int64(st, 3));
			for (int p = 0; p < PH_N; p++)
				vec_push(&t->v[V_ROW_PH0 + p], col_null(st, 4 + p) ? 0 : sqlite3_column_int64(st, 4 + p));
		}
	}
	if (rc != SQLITE_DONE) return -1;
	w->runq_share = runq_n ? runq_sum / runq_n : 0;

	/* the median and p99 requests: rows nearest to those e2e values,
	 * found before quickselect reorders the e2e column */
	struct vec *e2e = &t->v[V_ROW_E2E];
	for (int m = 0; m < TM_N; m++)
		dist_fill(&w->m[m], &t->v[m], m == TM_ITL ? &t->v[V_ITL_P99] : NULL,
			  m == TM_ITL ? &t->v[V_ITL_MAX] : NULL);
	dist_fill(&w->itl_max, &t->v[V_ITL_MAX], NULL, NULL);
	if (e2e->n) {
		double targets[2] = { w->m[TM_E2E].p50, w->m[TM_E2E].p99 };
		int64_t *outs[2] = { w->phase_p50, w->phase_p99 };
		int64_t *rows[2] = { &w->e2e_p50_row, &w->e2e_p99_row };
		for (int k = 0; k < 2; k++) {
			size_t best = 0;
			double bd = INFINITY;
			for (size_t i = 0; i < e2e->n; i++) {
				double d = fabs((double)e2e->v[i] - targets[k]);
				if (d < bd) { bd = d; best = i; }
			}
			*rows[k] = e2e->v[best];
			for (int p = 0; p < PH_N; p++) outs[k][p] = t->v[V_ROW_PH0 + p].v[best];
		}
	}

	/* samples: latest per target, maxima and sums over the window */
	struct { int pid, q, r; double kv; } last[16];
	int nlast = 0;
	double sreq = 0, stok = 0;
	int64_t self_ns = 0;
	bool self_known = false;
	w->samples_to_ns = to_ns;
	if (while_served && w->served_to_ns + NS_PER_S >= to_ns)
		w->samples_to_ns = w->served_to_ns + NS_PER_S + 1;
	st = t->q_samples;
	sqlite3_reset(st);
	sqlite3_bind_int64(st, 1, from_ns);
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
		sreq += sqlite3_column_double(st, 5);
		stok += sqlite3_column_double(st, 6);
		w->preemptions += sqlite3_column_int64(st, 7);
		w->rejections += sqlite3_column_int64(st, 8);
		w->sample_errors += sqlite3_column_int64(st, 9);
		w->drops += sqlite3_column_int64(st, 10);
		w->runq_ns += sqlite3_column_int64(st, 11);
		if (!col_null(st, 12))
			self_ns += sqlite3_column_int64(st, 12), self_known = true;
	}
	if (rc != SQLITE_DONE) return -1;
	w->runq_self_ns = self_known ? self_ns : -1;
	w->n_runq_by = 0;
	if ((st = t->q_runq_by)) {
		sqlite3_reset(st);
		sqlite3_bind_int64(st, 1, from_ns);
		sqlite3_bind_int64(st, 2, w->samples_to_ns);
		while ((rc = sqlite3_step(st)) == SQLITE_ROW && w->n_runq_by < TRACE_RUNQ_BY_MAX) {
			struct trace_runq_by *b = &w->runq_by[w->n_runq_by++];
			const unsigned char *comm = sqlite3_column_text(st, 1);
			b->pid = sqlite3_column_int(st, 0);
			snprintf(b->comm, sizeof(b->comm), "%s", comm ? (const char *)comm : "?");
			b->ns = sqlite3_column_int64(st, 2);
		}
		if (rc != SQLITE_DONE && rc != SQLITE_ROW) return -1;
	}
	for (int i = 0; i < nlast; i++) {
		w->queue_depth += last[i].q;
		w->running += last[i].r;
		if (last[i].kv > w->kv_usage) w->kv_usage = last[i].kv;
	}
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

const struct trace_runq_by *trace_runq_culprit(const struct trace_window *w)
{
	if (w->runq_self_ns < 0)
		return NULL;
	for (int k = 0; k < w->n_runq_by; k++)
		if (w->runq_by[k].pid > 0)      /* 0: an idle CPU, not a process */
			return w->runq_by[k].ns > w->runq_self_ns ? &w->runq_by[k] : NULL;
	return NULL;
}

int trace_series(struct trace *t, int64_t from_ns, int64_t to_ns, int nb, struct trace_point *out)
{
	if (nb <= 0 || to_ns <= from_ns) return -1;
	memset(out, 0, sizeof(*out) * nb);
	double bw = (double)(to_ns - from_ns) / nb;
	for (int i = 0; i < nb; i++) {
		out[i].t_ns = from_ns + (int64_t)(bw * i);
		out[i].kv_usage_max = -1;
	}
	/* requests: bucket index + ttft/e2e, grouped with one counting sort */
	struct vec *bi = &t->v[V_ROW_PH0], *tt = &t->v[V_ROW_PH0 + 1], *ee = &t->v[V_ROW_PH0 + 2];
	bi->n = tt->n = ee->n = 0;
	sqlite3_stmt *st = t->q_series_req;
	sqlite3_reset(st);
	sqlite3_bind_int64(st, 1, from_ns);
	sqlite3_bind_int64(st, 2, to_ns);
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int b = (int)((double)(sqlite3_column_int64(st, 0) - from_ns) / bw);
		if (b < 0 || b >= nb) continue;
		out[b].n++;
		if (vec_push(bi, b) || vec_push(tt, col_null(st, 1) ? -1 : sqlite3_column_int64(st, 1)) ||
		    vec_push(ee, col_null(st, 2) ? -1 : sqlite3_column_int64(st, 2)))
			return -1;
	}
	if (rc != SQLITE_DONE) return -1;
	size_t total = bi->n;
	int64_t *start = calloc((size_t)nb + 1, sizeof(int64_t));
	int64_t *sorted = malloc((total ? total : 1) * 2 * sizeof(int64_t));
	if (!start || !sorted) {
		free(start);
		free(sorted);
		return -1;
	}
	for (size_t i = 0; i < total; i++) start[bi->v[i] + 1]++;
	for (int b = 0; b < nb; b++) start[b + 1] += start[b];
	int64_t *fill = calloc((size_t)nb, sizeof(int64_t));
	int64_t *tbuf = sorted, *ebuf = sorted + (total ? total : 1);
	for (int b = 0; b < nb && fill; b++) fill[b] = start[b];
	for (size_t i = 0; i < total && fill; i++) {
		int b = (int)bi->v[i];
		tbuf[fill[b]] = tt->v[i];
		ebuf[fill[b]] = ee->v[i];
		fill[b]++;
	}
	for (int b = 0; b < nb && fill; b++) {
		/* drop unknowns (-1) in place, then take p99 */
		int64_t *tv = tbuf + start[b], *ev = ebuf + start[b];
		size_t n = (size_t)(start[b + 1] - start[b]), nt = 0, ne = 0;
		for (size_t i = 0; i < n; i++) {
			if (tv[i] >= 0) tv[nt++] = tv[i];
			if (ev[i] >= 0) ev[ne++] = ev[i];
		}
		out[b].ttft_p99 = pct_select_i64(tv, nt, 99);
		out[b].e2e_p99 = pct_select_i64(ev, ne, 99);
	}
	free(fill);
	free(start);
	free(sorted);

	st = t->q_samples;
	sqlite3_reset(st);
	sqlite3_bind_int64(st, 1, from_ns);
	sqlite3_bind_int64(st, 2, to_ns);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int b = (int)((double)(sqlite3_column_int64(st, 1) - from_ns) / bw);
		if (b < 0 || b >= nb) continue;
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
	return rc == SQLITE_DONE ? 0 : -1;
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
	r->tpot_ns = r->e2e_ns = -1;
	if (r->state < TRS_WRITING) r->output_tokens = 0;
}

static enum trace_req_state state_from_text(const char *s)
{
	for (int i = 0; i < TRS_N; i++)
		if (s && !strcmp(s, trace_state_name[i])) return (enum trace_req_state)i;
	return TRS_ARRIVING;
}

int trace_inflight(struct trace *t, int64_t now_ns, int live, struct trace_req *out, int max)
{
	int n = 0, rc;
	sqlite3_stmt *st;
	if (live) {
		st = t->q_inflight;
		sqlite3_reset(st);
		while (n < max && (rc = sqlite3_step(st)) == SQLITE_ROW) {
			struct trace_req *r = &out[n++];
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
			r->tpot_ns = r->e2e_ns = r->runq_ns = r->itl_max_ns = -1;
		}
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
	while (n < max && (rc = sqlite3_step(st)) == SQLITE_ROW) req_from_row(st, now_ns, &out[n++]);
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
	return n;
}

int trace_column(struct trace *t, const char *column, int64_t from_ns, int64_t to_ns,
		 const int64_t **t_arrive, const int64_t **values)
{
	static const char *const allowed[] = {
		"ttft_ns", "tpot_ns", "e2e_ns", "queue_ns", "prefill_ns", "decode_ns", "net_in_ns",
		"net_out_ns", "runq_ns", "itl_max_ns", "itl_p99_ns",
	};
	int ok = 0;
	for (size_t i = 0; i < sizeof(allowed) / sizeof(*allowed); i++)
		ok |= !strcmp(column, allowed[i]);
	if (!ok) return -1;
	if (strcmp(t->col_name, column)) {
		char sql[256];
		sqlite3_finalize(t->q_column);
		t->q_column = NULL;
		snprintf(sql, sizeof(sql), "SELECT t_arrive_ns, %s FROM requests WHERE t_arrive_ns >= ?1 "
			 "AND t_arrive_ns < ?2 AND %s IS NOT NULL ORDER BY t_arrive_ns", column, column);
		if (sqlite3_prepare_v2(t->db, sql, -1, &t->q_column, NULL) != SQLITE_OK) return -1;
		snprintf(t->col_name, sizeof(t->col_name), "%s", column);
	}
	t->col_t.n = t->col_v.n = 0;
	sqlite3_stmt *st = t->q_column;
	sqlite3_reset(st);
	sqlite3_bind_int64(st, 1, from_ns);
	sqlite3_bind_int64(st, 2, to_ns);
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		if (vec_push(&t->col_t, sqlite3_column_int64(st, 0)) ||
		    vec_push(&t->col_v, sqlite3_column_int64(st, 1)))
			return -1;
	if (rc != SQLITE_DONE) return -1;
	*t_arrive = t->col_t.v;
	*values = t->col_v.v;
	return (int)t->col_t.n;
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
		if (t->nrows == t->caprows) {
			size_t cap = t->caprows ? t->caprows * 2 : 4096;
			struct trace_row *r = realloc(t->rows, cap * sizeof(*r));
			if (!r) return -1;
			t->rows = r;
			t->caprows = cap;
		}
		struct trace_row *r = &t->rows[t->nrows++];
		r->t_arrive_ns = sqlite3_column_int64(st, 0);
		r->ttft_ns = col_null(st, 1) ? -1 : sqlite3_column_int64(st, 1);
		r->e2e_ns = sqlite3_column_int64(st, 2);
		for (int p = 0; p < PH_N; p++) r->phase[p] = sqlite3_column_int64(st, 3 + p);
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

int trace_parse_duration(const char *s, int64_t *ns, char *err, size_t errlen)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || errno || !(v >= 0)) goto bad;
	double mul = NS_PER_S;
	if (!*end || !strcmp(end, "s")) mul = NS_PER_S;
	else if (!strcmp(end, "ms")) mul = NS_PER_MS;
	else if (!strcmp(end, "us") || !strcmp(end, "µs")) mul = 1e3;
	else if (!strcmp(end, "m") || !strcmp(end, "min")) mul = 60.0 * NS_PER_S;
	else if (!strcmp(end, "h")) mul = 3600.0 * NS_PER_S;
	else goto bad;
	*ns = (int64_t)(v * mul);
	return 0;
bad:
	snprintf(err, errlen, "'%s' is not a duration: use a number with s, ms, m or h (10s, 1m, 500ms)", s);
	return -1;
}

int trace_parse_time(struct trace *t, const char *s, int64_t *mono_ns, char *err, size_t errlen)
{
	int64_t first = 0, last = 0, d;
	int have = trace_span(t, &first, &last);
	char sub[128];
	if (!strcmp(s, "end") || !strcmp(s, "now") || !strcmp(s, "start")) {
		if (!have) goto empty;
		*mono_ns = !strcmp(s, "start") ? first : last;
		return 0;
	}
	if (s[0] == '-' || s[0] == '+') {
		if (!have) goto empty;
		if (trace_parse_duration(s + 1, &d, sub, sizeof(sub))) {
			snprintf(err, errlen, "time '%s': %s", s, sub);
			return -1;
		}
		*mono_ns = s[0] == '-' ? last - d : first + d;
		return 0;
	}
	if (s[0] == '@') {
		char *end;
		double sec = strtod(s + 1, &end);
		if (end == s + 1 || *end) goto bad;
		*mono_ns = trace_wall_to_mono(t, (int64_t)(sec * 1e9));
		return 0;
	}
	struct tm tm;
	memset(&tm, 0, sizeof(tm));
	const char *rest;
	double frac = 0;
	if ((rest = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm)) || (rest = strptime(s, "%Y-%m-%d %H:%M:%S", &tm))) {
		/* full date */
	} else if ((rest = strptime(s, "%H:%M:%S", &tm))) {
		if (!have) goto empty;
		struct tm day;
		time_t end_s = (time_t)(trace_mono_to_wall(t, last) / NS_PER_S);
		localtime_r(&end_s, &day);
		tm.tm_year = day.tm_year;
		tm.tm_mon = day.tm_mon;
		tm.tm_mday = day.tm_mday;
	} else {
		goto bad;
	}
	if (*rest == '.') {
		char *end;
		frac = strtod(rest, &end);
		rest = end;
	}
	if (*rest) goto bad;
	tm.tm_isdst = -1;
	time_t secs = mktime(&tm);
	if (secs == (time_t)-1) goto bad;
	*mono_ns = trace_wall_to_mono(t, (int64_t)secs * NS_PER_S + (int64_t)(frac * 1e9));
	return 0;
bad:
	snprintf(err, errlen, "'%s' is not a time: use 2026-12-02T10:31:00, 10:31:00 (local time), "
		 "@UNIXSECONDS, -90s (before the trace's end), +30s (after its start), start or end", s);
	return -1;
empty:
	snprintf(err, errlen, "time '%s' is relative to the trace, but %s holds no data yet", s, t->path);
	return -1;
}

char *trace_fmt_dur(char *buf, size_t n, double ns)
{
	if (ns < 0 || isnan(ns)) snprintf(buf, n, "-");
	else if (ns < 1e3) snprintf(buf, n, "%.0fns", ns);
	else if (ns < 1e6) snprintf(buf, n, "%.0fµs", ns / 1e3);
	else if (ns < 1e7) snprintf(buf, n, "%.2fms", ns / 1e6);
	else if (ns < 1e9) snprintf(buf, n, "%.1fms", ns / 1e6);
	else if (ns < 60e9 && fmod(ns, 1e9) == 0) snprintf(buf, n, "%.0fs", ns / 1e9);
	else if (ns < 60e9) snprintf(buf, n, "%.2fs", ns / 1e9);
	else snprintf(buf, n, "%dm%02ds", (int)(ns / 60e9), (int)fmod(ns / 1e9, 60));
	return buf;
}

char *trace_fmt_time(const struct trace *t, char *buf, size_t n, int64_t mono_ns, int with_date)
{
	int64_t wall = trace_mono_to_wall(t, mono_ns);
	time_t s = (time_t)(wall / NS_PER_S);
	struct tm tm;
	localtime_r(&s, &tm);
	strftime(buf, n, with_date ? "%Y-%m-%d %H:%M:%S" : "%H:%M:%S", &tm);
	return buf;
}
