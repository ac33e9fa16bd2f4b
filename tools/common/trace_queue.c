/* trace_queue.c - the queue from the requests' t_admit_ns and t_sched_ns and
 * the engine's steps (schema/001_init.sql): a sweep over their instants, per target. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tools/common/trace_queue.h"

/* A request queued before a window and still queued in it counts there: its
 * arrival is looked for this far back. */
#define QUEUE_LOOKBACK_NS (600 * NS_PER_S)

/* At one instant: a request leaves the queue (scheduled) before a step that
 * begins then is looked at, and one admitted then was not passed over by it. */
enum { EV_SCHED, EV_STEP, EV_ADMIT };

struct qev {
	int pid, kind;
	int64_t t;
	int64_t tokens;             /* EV_STEP: prefill + decode; EV_ADMIT: the prompt */
	int64_t prefill;            /* EV_STEP: of tokens, the prefill ones */
	int64_t until;              /* EV_ADMIT: its t_sched */
};

struct qevs {
	struct qev *v;
	size_t n, cap;
};

static int push(struct qevs *e, struct qev x)
{
	if (e->n == e->cap) {
		size_t cap = e->cap ? e->cap * 2 : 1024;
		struct qev *v = realloc(e->v, cap * sizeof(*v));
		if (!v)
			return -1;
		e->v = v;
		e->cap = cap;
	}
	e->v[e->n++] = x;
	return 0;
}

static int cmp_ev(const void *a, const void *b)
{
	const struct qev *x = a, *y = b;
	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	return (x->kind > y->kind) - (x->kind < y->kind);
}

/* Runs sql with ?1, ?2 bound; each row through fn. */
static int each_row(sqlite3 *db, const char *sql, int64_t a, int64_t b, struct qevs *e,
		    int (*fn)(sqlite3_stmt *, struct qevs *), char *err, size_t errlen)
{
	sqlite3_stmt *st;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "%s: %s", sqlite3_db_filename(db, "main"), sqlite3_errmsg(db));
		return -1;
	}
	sqlite3_bind_int64(st, 1, a);
	sqlite3_bind_int64(st, 2, b);
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		if (fn(st, e)) {
			sqlite3_finalize(st);
			snprintf(err, errlen, "out of memory for the queue's instants");
			return -1;
		}
	if (rc != SQLITE_DONE)
		snprintf(err, errlen, "%s: %s", sqlite3_db_filename(db, "main"), sqlite3_errmsg(db));
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : -1;
}

static int request_row(sqlite3_stmt *st, struct qevs *e)
{
	int pid = sqlite3_column_int(st, 0);
	int64_t admit = sqlite3_column_int64(st, 1), sched = sqlite3_column_int64(st, 2);
	int64_t prompt = sqlite3_column_type(st, 3) == SQLITE_NULL ? 0 : sqlite3_column_int64(st, 3);
	return push(e, (struct qev){ .pid = pid, .kind = EV_ADMIT, .t = admit, .tokens = prompt, .until = sched }) ||
	       push(e, (struct qev){ .pid = pid, .kind = EV_SCHED, .t = sched });
}

static int step_row(sqlite3_stmt *st, struct qevs *e)
{
	int64_t prefill = sqlite3_column_int64(st, 2), decode = sqlite3_column_int64(st, 3);
	return push(e, (struct qev){ .pid = sqlite3_column_int(st, 0), .kind = EV_STEP,
				     .t = sqlite3_column_int64(st, 1), .tokens = prefill + decode, .prefill = prefill });
}

static sqlite3 *open_ro(struct trace *t, char *err, size_t errlen)
{
	sqlite3 *db;
	if (sqlite3_open_v2(trace_path(t), &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "cannot open %s for the queue's instants: %s", trace_path(t),
			 db ? sqlite3_errmsg(db) : "out of memory");
		sqlite3_close(db);
		return NULL;
	}
	sqlite3_busy_timeout(db, 1000);
	return db;
}

/* The queue phases of the requests arriving in [arr_from, arr_to), as
 * admit and sched instants.  A disaggregated request's queue is its prefill
 * worker's (or, prefilled where it decodes, its decode worker's): the rows
 * whose admit and sched are one engine's, one per request; the router's
 * row and a decode worker's fed by a prefill worker join the routing
 * decision or the decode admission to another process's schedule
 * (010_disagg.sql). */
#define PD_OWN_QUEUE " AND (pd_role IS NULL OR pd_role = 'prefill' OR (pd_role = 'decode' AND kv_bytes IS NULL))"
static int load_requests(sqlite3 *db, bool pd, int64_t arr_from, int64_t arr_to, struct qevs *e, char *err,
			 size_t errlen)
{
	return each_row(db, pd ? "SELECT pid, t_admit_ns, t_sched_ns, prompt_tokens FROM requests "
			"WHERE t_arrive_ns >= ?1 AND t_arrive_ns < ?2 AND t_admit_ns IS NOT NULL "
			"AND t_sched_ns IS NOT NULL AND t_sched_ns >= t_admit_ns" PD_OWN_QUEUE :
			"SELECT pid, t_admit_ns, t_sched_ns, prompt_tokens FROM requests "
			"WHERE t_arrive_ns >= ?1 AND t_arrive_ns < ?2 AND t_admit_ns IS NOT NULL "
			"AND t_sched_ns IS NOT NULL AND t_sched_ns >= t_admit_ns", arr_from, arr_to, e,
			request_row, err, errlen);
}

/* The most tokens a step of one target carried, over its run e->v[a, b):
 * kpi-infer fills a step up to its budget (--max-batched-tokens) whenever
 * the queue holds more than that, cutting the last prompt into a chunk, so
 * a step that carried the budget left the queue waiting for it. */
static int64_t max_step(const struct qevs *e, size_t a, size_t b)
{
	int64_t m = 0;
	for (size_t i = a; i < b; i++)
		if (e->v[i].kind == EV_STEP && e->v[i].tokens > m)
			m = e->v[i].tokens;
	return m;
}

int trace_queue_wait(struct trace *t, int64_t from_ns, int64_t to_ns, struct trace_queue *q, char *err,
		     size_t errlen)
{
	memset(q, 0, sizeof(*q));
	struct qevs e = { 0 };
	sqlite3 *db = open_ro(t, err, errlen);
	if (!db)
		return -1;
	int rc = load_requests(db, trace_top_sql(t)[0] != '\0', from_ns, to_ns, &e, err, errlen);
	int64_t lo = INT64_MAX, hi = INT64_MIN;
	for (size_t i = 0; i < e.n; i++) {
		lo = e.v[i].t < lo ? e.v[i].t : lo;
		hi = e.v[i].t > hi ? e.v[i].t : hi;
	}
	q->requests = (int)(e.n / 2);
	if (!rc && e.n)
		rc = each_row(db, "SELECT pid, t_start_ns, prefill_tokens, decode_seqs FROM steps "
			      "WHERE t_start_ns >= ?1 AND t_start_ns <= ?2", lo, hi, &e, step_row, err, errlen);
	sqlite3_close(db);
	if (rc) {
		free(e.v);
		return -1;
	}
	qsort(e.v, e.n, sizeof(*e.v), cmp_ev);
	for (size_t a = 0, b; a < e.n; a = b) {
		for (b = a; b < e.n && e.v[b].pid == e.v[a].pid; b++)
			;
		int64_t full = max_step(&e, a, b);
		int open = 0;
		for (size_t i = a; i < b; i++) {
			const struct qev *x = &e.v[i];
			if (x->kind == EV_ADMIT) {
				if (++open > q->peak) {
					q->peak = open;
					q->peak_ns = x->t;
				}
				/* passed over: a step of its engine began after it came and before it went */
				for (size_t j = i + 1; j < b && e.v[j].t < x->until; j++)
					if (e.v[j].kind == EV_STEP) {
						q->waited++;
						q->waited_prompt_tokens += x->tokens;
						break;
					}
			} else if (x->kind == EV_SCHED) {
				open--;
			} else if (open > 0) {
				q->steps++;
				q->full_steps += x->tokens == full;
				q->prefill_tokens += x->prefill;
				q->decode_seqs += x->tokens - x->prefill;
			}
		}
		if (full > q->step_tokens_max)
			q->step_tokens_max = full;
	}
	free(e.v);
	return 0;
}

int trace_queue_series(struct trace *t, int64_t from_ns, int64_t to_ns, int nb, struct trace_point *out, char *err,
		       size_t errlen)
{
	if (nb <= 0 || to_ns <= from_ns)
		return 0;
	struct qevs e = { 0 };
	sqlite3 *db = open_ro(t, err, errlen);
	if (!db)
		return -1;
	int rc = load_requests(db, trace_top_sql(t)[0] != '\0', from_ns - QUEUE_LOOKBACK_NS, to_ns, &e, err, errlen);
	sqlite3_close(db);
	int *peak = calloc((size_t)nb, sizeof(int));
	if (rc || !peak) {
		if (!rc)
			snprintf(err, errlen, "out of memory for %d buckets", nb);
		free(e.v);
		free(peak);
		return -1;
	}
	qsort(e.v, e.n, sizeof(*e.v), cmp_ev);
	double bw = (double)(to_ns - from_ns) / nb;
	for (size_t a = 0, b; a < e.n; a = b) {
		for (b = a; b < e.n && e.v[b].pid == e.v[a].pid; b++)
			;
		memset(peak, 0, (size_t)nb * sizeof(int));
		int open = 0, cur = -1;
		for (size_t i = a; i <= b; i++) {
			/* buckets entered before this instant start with the count as it stands */
			int bt = i == b || e.v[i].t >= to_ns ? nb : e.v[i].t < from_ns ? -1 :
				 (int)((double)(e.v[i].t - from_ns) / bw);
			if (bt > nb)
				bt = nb;
			for (int k = cur + 1; k <= bt && k < nb; k++)
				peak[k] = open > peak[k] ? open : peak[k];
			if (bt > cur)
				cur = bt;
			if (i == b)
				break;
			open += e.v[i].kind == EV_ADMIT ? 1 : -1;
			if (bt >= 0 && bt < nb && open > peak[bt])
				peak[bt] = open;
		}
		for (int k = 0; k < nb; k++)
			if (peak[k] > out[k].queue_depth_max)
				out[k].queue_depth_max = peak[k];
	}
	free(e.v);
	free(peak);
	return 0;
}
