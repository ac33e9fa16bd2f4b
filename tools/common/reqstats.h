/* reqstats.h - statistics over request rows held in memory, no SQL: a
 * window's percentiles and median/p99 requests, a timeline's bucket p99s. */
#ifndef KPI_REQSTATS_H
#define KPI_REQSTATS_H

#include "tools/common/trace.h"

/* A growable column of values. */
struct reqstats_col {
	int64_t *v;
	size_t n, cap;
};

/* Scratch columns: one per metric, then those the window and series need. */
enum { RS_ITL_P99 = TM_N, RS_ITL_MAX, RS_ROW_E2E, RS_ROW_IDX, RS_SER_TTFT, RS_SER_E2E, RS_N };

/* Reused from call to call: no allocation once the columns are large enough. */
struct reqstats {
	struct reqstats_col c[RS_N];
};
void reqstats_free(struct reqstats *s);

/* Fills w's request part from the rows arriving in [w->from_ns, w->to_ns)
 * (rows in any order; w zeroed but for the window): counts, token sums,
 * served_to_ns, runq_share, every metric's percentiles, and the median and
 * p99 requests by e2e. Returns 0, or -1 when out of memory. */
int reqstats_window(struct reqstats *s, const struct trace_stat_row *rows, size_t n, struct trace_window *w);

/* Each bucket's request count and p99 TTFT and e2e into out[0..nb), nb
 * buckets over [from_ns, to_ns). Returns 0 or -1. */
int reqstats_series(struct reqstats *s, const struct trace_stat_row *rows, size_t n, int64_t from_ns,
		    int64_t to_ns, int nb, struct trace_point *out);

/* Which of nb buckets of bw ns from from_ns holds t_ns; -1: none. */
int reqstats_bucket(int64_t t_ns, int64_t from_ns, double bw, int nb);

#endif
