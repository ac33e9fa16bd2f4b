/* trace_rank.c - which hosts, models or pods carry a p99 TTFT change: the
 * split of the change of the p99 band between two windows of a trace, by
 * group, over one SQLite connection (the fleet's scratch copy, or one host's
 * own trace). */
#include "tools/common/trace_rank.h"
#include "tools/common/trace.h"

#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* groups read of one window (the rest not counted: the fleet has at most
 * 500 hosts, and a ranking lists TRACE_RANK_GROUPS) */
#define RANK_MAX 512

/* For the rows of one window (a disaggregated request once, by its router's
 * row): each group's sums over the window's p99 band
 * (the rows ranked at or above the 98th percentile of TTFT), its count of
 * rows with a TTFT, and its own p99. */
static const char BAND_SQL[] =
	"WITH r AS (SELECT coalesce(%s, '(none)') AS g, ttft_ns AS v, coalesce(net_in_ns, 0) AS ni, "
	"coalesce(queue_ns, 0) + coalesce(server_wait_ns, 0) AS qw, coalesce(prefill_ns, 0) AS pf, "
	"ROW_NUMBER() OVER (ORDER BY ttft_ns) - 1 AS rn, COUNT(*) OVER () AS n, "
	"ROW_NUMBER() OVER (PARTITION BY coalesce(%s, '(none)') ORDER BY ttft_ns) - 1 AS grn, "
	"COUNT(*) OVER (PARTITION BY coalesce(%s, '(none)')) AS gn "
	"FROM requests WHERE ttft_ns IS NOT NULL AND t_arrive_ns >= ?1 AND t_arrive_ns < ?2" TRACE_TOP_SQL ") "
	"SELECT g, max(gn), max(CASE WHEN grn = CAST((gn - 1) * 0.99 AS INTEGER) THEN v END), "
	"sum(CASE WHEN rn >= CAST((n - 1) * 0.98 AS INTEGER) THEN v ELSE 0 END), "
	"sum(CASE WHEN rn >= CAST((n - 1) * 0.98 AS INTEGER) THEN ni ELSE 0 END), "
	"sum(CASE WHEN rn >= CAST((n - 1) * 0.98 AS INTEGER) THEN qw ELSE 0 END), "
	"sum(CASE WHEN rn >= CAST((n - 1) * 0.98 AS INTEGER) THEN pf ELSE 0 END), "
	"sum(CASE WHEN rn >= CAST((n - 1) * 0.98 AS INTEGER) THEN 1 ELSE 0 END) "
	"FROM r GROUP BY g";

/* A pod is named NAMESPACE/NAME (NULL, "(none)": a process outside any pod). */
#define POD_KEY "(pod_namespace || '/' || pod_name)"

struct band {
	char name[128];
	int n;
	double p99, sum, ni, qw, pf;
	int in_band;
};

static int read_bands(sqlite3 *db, const char *by, int64_t from, int64_t to, struct band *b, int max,
		      int *band_rows)
{
	char sql[sizeof(BAND_SQL) + 3 * sizeof(POD_KEY)];
	sqlite3_stmt *st;
	int n = 0;
	const char *key = strcmp(by, "pod") ? by : POD_KEY;
	*band_rows = 0;
	snprintf(sql, sizeof(sql), BAND_SQL, key, key, key);
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return -1;
	sqlite3_bind_int64(st, 1, from);
	sqlite3_bind_int64(st, 2, to);
	while (sqlite3_step(st) == SQLITE_ROW && n < max) {
		struct band *x = &b[n++];
		snprintf(x->name, sizeof(x->name), "%s", (const char *)sqlite3_column_text(st, 0));
		x->n = sqlite3_column_int(st, 1);
		x->p99 = sqlite3_column_double(st, 2);
		x->sum = sqlite3_column_double(st, 3);
		x->ni = sqlite3_column_double(st, 4);
		x->qw = sqlite3_column_double(st, 5);
		x->pf = sqlite3_column_double(st, 6);
		x->in_band = sqlite3_column_int(st, 7);
		*band_rows += x->in_band;
	}
	sqlite3_finalize(st);
	return n;
}

static int cmp_share(const void *a, const void *b)
{
	const struct trace_rank_group *x = a, *y = b;
	if (x->share != y->share)
		return x->share < y->share ? 1 : -1;
	return x->delta < y->delta ? 1 : x->delta > y->delta ? -1 : 0;
}

int trace_rank(sqlite3 *db, const char *by, int64_t base_from, int64_t base_to, int64_t inc_from, int64_t inc_to,
	       struct trace_rank_group *out, int max)
{
	struct band bb[RANK_MAX], ib[RANK_MAX];
	int nbb, nib, rb, ri, n = 0;
	if (strcmp(by, "host") && strcmp(by, "model") && strcmp(by, "pod"))
		return -1;
	if ((nbb = read_bands(db, by, base_from, base_to, bb, RANK_MAX, &rb)) < 0 ||
	    (nib = read_bands(db, by, inc_from, inc_to, ib, RANK_MAX, &ri)) < 0)
		return -1;
	struct trace_rank_group g[RANK_MAX * 2];
	/* every group of either window */
	for (int k = 0; k < nbb + nib; k++) {
		const struct band *x = k < nbb ? &bb[k] : &ib[k - nbb];
		int j;
		for (j = 0; j < n && strcmp(g[j].name, x->name); j++)
			;
		if (j == n) {
			memset(&g[n], 0, sizeof(g[n]));
			memcpy(g[n].name, x->name, sizeof(g[n].name));
			n++;
		}
		double w = k < nbb ? (rb ? -1.0 / rb : 0) : (ri ? 1.0 / ri : 0);
		if (k < nbb) {
			g[j].n_base = x->n;
			g[j].p99_base = x->p99;
		} else {
			g[j].n_inc = x->n;
			g[j].p99_inc = x->p99;
		}
		g[j].delta += w * x->sum;
		g[j].phase_delta[0] += w * x->ni;
		g[j].phase_delta[1] += w * x->qw;
		g[j].phase_delta[2] += w * x->pf;
		g[j].phase_delta[3] += w * (x->sum - x->ni - x->qw - x->pf);
	}
	double sum = 0, pos = 0;
	for (int j = 0; j < n; j++)
		sum += g[j].delta;
	double dir = sum >= 0 ? 1 : -1;
	for (int j = 0; j < n; j++)
		pos += fmax(dir * g[j].delta, 0);
	for (int j = 0; j < n; j++) {
		g[j].share = pos > 0 ? fmax(dir * g[j].delta, 0) / pos : 0;
		g[j].top_phase = 0;
		for (int p = 1; p < 4; p++)
			if (dir * g[j].phase_delta[p] > dir * g[j].phase_delta[g[j].top_phase])
				g[j].top_phase = p;
	}
	qsort(g, (size_t)n, sizeof(g[0]), cmp_share);
	if (n > max)
		n = max;
	memcpy(out, g, sizeof(g[0]) * (size_t)n);
	return n;
}
