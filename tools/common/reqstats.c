/* reqstats.c - a window's statistics and a timeline's buckets computed from
 * request rows in memory; percentiles exact (pct.c), as SQLite's. */
#include "tools/common/reqstats.h"
#include "schema/pct.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int col_reserve(struct reqstats_col *a, size_t n)
{
	if (n <= a->cap) return 0;
	size_t cap = a->cap ? a->cap : 4096;
	while (cap < n) cap *= 2;
	int64_t *v = realloc(a->v, cap * sizeof(*v));
	if (!v) return -1;
	a->v = v;
	a->cap = cap;
	return 0;
}

static int col_push(struct reqstats_col *a, int64_t x)
{
	if (a->n == a->cap && col_reserve(a, a->n + 1)) return -1;
	a->v[a->n++] = x;
	return 0;
}

void reqstats_free(struct reqstats *s)
{
	for (int i = 0; i < RS_N; i++) free(s->c[i].v);
	memset(s, 0, sizeof(*s));
}

int reqstats_bucket(int64_t t_ns, int64_t from_ns, double bw, int nb)
{
	if (t_ns < from_ns) return -1;
	int b = (int)((double)(t_ns - from_ns) / bw);
	return b < nb ? b : -1;
}

/* ---- window -------------------------------------------------------------- */

/* p50 over a; p95/p99 over hi_tail when given (ITL: each request's p99
 * gap); max over maxv when given. Reorders the columns. */
static void dist_fill(struct trace_dist *d, struct reqstats_col *a, struct reqstats_col *hi_tail,
		      struct reqstats_col *maxv)
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
	struct reqstats_col *tail = hi_tail && hi_tail->n ? hi_tail : a;
	d->p99 = pct_select_i64(tail->v, tail->n, 99);
	d->p95 = pct_select_i64(tail->v, tail->n, 95);
	if (maxv && maxv->n) {
		int64_t m2 = maxv->v[0];
		for (size_t i = 1; i < maxv->n; i++)
			if (maxv->v[i] > m2) m2 = maxv->v[i];
		d->max = (double)m2;
	}
}

/* A row's values into the columns the percentiles are taken over. */
static int push_values(struct reqstats *s, const struct trace_stat_row *r, size_t idx)
{
	int bad = 0;
	for (int m = 0; m < TM_N; m++)
		if (r->m[m] != TRACE_NULL) bad |= col_push(&s->c[m], r->m[m]);
	if (r->itl_p99_ns != TRACE_NULL) bad |= col_push(&s->c[RS_ITL_P99], r->itl_p99_ns);
	if (r->itl_max_ns != TRACE_NULL) bad |= col_push(&s->c[RS_ITL_MAX], r->itl_max_ns);
	if (r->m[TM_E2E] != TRACE_NULL)
		bad |= col_push(&s->c[RS_ROW_E2E], r->m[TM_E2E]) | col_push(&s->c[RS_ROW_IDX], (int64_t)idx);
	return bad ? -1 : 0;
}

/* Counts, sums and value columns of the rows that arrived in the window. */
static int window_rows(struct reqstats *s, const struct trace_stat_row *rows, size_t n, struct trace_window *w)
{
	double runq_sum = 0;
	int runq_n = 0;
	for (size_t i = 0; i < n; i++) {
		const struct trace_stat_row *r = &rows[i];
		if (r->t_arrive_ns < w->from_ns || r->t_arrive_ns >= w->to_ns) continue;
		w->requests++;
		w->by_source[r->flags & TSR_HTTP ? TRACE_SRC_HTTP : r->flags & TSR_LIBLLAMA ? TRACE_SRC_LIBLLAMA :
			     r->flags & TSR_INFERRED ? TRACE_SRC_INFERRED : TRACE_SRC_USDT]++;
		if (r->t_done_ns != TRACE_NULL && r->t_done_ns > w->served_to_ns) w->served_to_ns = r->t_done_ns;
		if (r->http_status == 429) {
			w->rejected++;
			continue;
		}
		if (r->http_status >= 400 || (r->flags & TSR_ERROR)) w->errors++;
		if (r->flags & TSR_CANCELLED) w->cancelled++;
		if (r->flags & TSR_PREEMPTED) w->preempted++;
		w->prompt_tokens += r->prompt_tokens;
		w->output_tokens += r->output_tokens;
		if (push_values(s, r, i)) return -1;
		int64_t e2e = r->m[TM_E2E], runq = r->m[TM_RUNQ];
		if (e2e != TRACE_NULL && runq != TRACE_NULL && e2e > 0) {
			runq_sum += (double)runq / (double)e2e;
			runq_n++;
		}
		if (e2e != TRACE_NULL) w->done++;
	}
	w->runq_share = runq_n ? runq_sum / runq_n : 0;
	return 0;
}

/* The finished row whose e2e is nearest to target; of equally near ones
 * the earliest arrival, whatever order the rows came in. */
static const struct trace_stat_row *nearest_row(const struct reqstats *s, const struct trace_stat_row *rows,
						double target)
{
	const struct reqstats_col *e2e = &s->c[RS_ROW_E2E], *idx = &s->c[RS_ROW_IDX];
	const struct trace_stat_row *best = NULL;
	double bd = INFINITY;
	for (size_t i = 0; i < e2e->n; i++) {
		const struct trace_stat_row *r = &rows[idx->v[i]];
		double d = fabs((double)e2e->v[i] - target);
		if (d < bd || (d == bd && r->t_arrive_ns < best->t_arrive_ns)) {
			bd = d;
			best = r;
		}
	}
	return best;
}

int reqstats_window(struct reqstats *s, const struct trace_stat_row *rows, size_t n, struct trace_window *w)
{
	for (int i = 0; i < RS_N; i++) s->c[i].n = 0;
	if (window_rows(s, rows, n, w)) return -1;
	for (int m = 0; m < TM_N; m++)
		dist_fill(&w->m[m], &s->c[m], m == TM_ITL ? &s->c[RS_ITL_P99] : NULL,
			  m == TM_ITL ? &s->c[RS_ITL_MAX] : NULL);
	dist_fill(&w->itl_max, &s->c[RS_ITL_MAX], NULL, NULL);
	w->wait_p50 = w->wait_p99 = -1;
	if (!s->c[RS_ROW_E2E].n) return 0;
	/* the phases of the median and the p99 request (unknown phases -1: an
	 * http row's queue and prefill are not 0, they are not known) */
	double targets[2] = { w->m[TM_E2E].p50, w->m[TM_E2E].p99 };
	int64_t *phases[2] = { w->phase_p50, w->phase_p99 }, *e2e[2] = { &w->e2e_p50_row, &w->e2e_p99_row };
	int64_t *wait[2] = { &w->wait_p50, &w->wait_p99 };
	bool *inferred[2] = { &w->inferred_p50, &w->inferred_p99 };
	for (int k = 0; k < 2; k++) {
		const struct trace_stat_row *r = nearest_row(s, rows, targets[k]);
		*e2e[k] = r->m[TM_E2E];
		*inferred[k] = r->flags & TSR_INFERRED;
		for (int p = 0; p < PH_N; p++)
			phases[k][p] = r->m[TM_NET_IN + p] == TRACE_NULL ? -1 : r->m[TM_NET_IN + p];
		*wait[k] = r->m[TM_SERVER_WAIT] == TRACE_NULL ? -1 : r->m[TM_SERVER_WAIT];
	}
	return 0;
}

/* ---- timeline ------------------------------------------------------------ */

/* Drops the unknown values of v[0..n) in place; returns how many are left. */
static size_t drop_null(int64_t *v, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (v[i] != TRACE_NULL) v[k++] = v[i];
	return k;
}

int reqstats_series(struct reqstats *s, const struct trace_stat_row *rows, size_t n, int64_t from_ns,
		    int64_t to_ns, int nb, struct trace_point *out)
{
	/* the values laid out bucket by bucket (a counting sort), then one
	 * select per bucket */
	double bw = (double)(to_ns - from_ns) / nb;
	struct reqstats_col *tt = &s->c[RS_SER_TTFT], *ee = &s->c[RS_SER_E2E];
	size_t *start = calloc((size_t)nb + 1, sizeof(*start)), *fill = calloc((size_t)nb, sizeof(*fill));
	for (size_t i = 0; i < n; i++) {
		int b = rows[i].t_arrive_ns < to_ns ? reqstats_bucket(rows[i].t_arrive_ns, from_ns, bw, nb) : -1;
		if (b >= 0) out[b].n++;
	}
	int rc = -1;
	if (!start || !fill) goto out;
	for (int b = 0; b < nb; b++) fill[b] = start[b], start[b + 1] = start[b] + (size_t)out[b].n;
	if (col_reserve(tt, start[nb]) || col_reserve(ee, start[nb])) goto out;
	for (size_t i = 0; i < n; i++) {
		int b = rows[i].t_arrive_ns < to_ns ? reqstats_bucket(rows[i].t_arrive_ns, from_ns, bw, nb) : -1;
		if (b < 0) continue;
		tt->v[fill[b]] = rows[i].m[TM_TTFT];
		ee->v[fill[b]++] = rows[i].m[TM_E2E];
	}
	for (int b = 0; b < nb; b++) {
		int64_t *tv = tt->v + start[b], *ev = ee->v + start[b];
		size_t k = start[b + 1] - start[b];
		out[b].ttft_p99 = pct_select_i64(tv, drop_null(tv, k), 99);
		out[b].e2e_p99 = pct_select_i64(ev, drop_null(ev, k), 99);
	}
	rc = 0;
out:
	free(start);
	free(fill);
	return rc;
}
