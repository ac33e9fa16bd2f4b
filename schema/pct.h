/* pct.h - the definition of a percentile for the trace's columns and for
 * every query and report over them (kpi-agent's ITL p50/p99 per request,
 * kpitop, kpi-report, kpi-bench, the SQLite percentile() extension): linear
 * interpolation between the closest ranks, p in 0..100, as numpy's default
 * and SQLite's percentile() compute it. See docs/schema.md, "Percentiles". */
#ifndef KPI_PCT_H
#define KPI_PCT_H

#include <stddef.h>
#include <stdint.h>

/* pth percentile (0..100) of v[0..n-1]; reorders v (selection, O(n)).
 * Returns 0 for n == 0. */
double pct_select_i64(int64_t *v, size_t n, double p);
double pct_select_f64(double *v, size_t n, double p);

/* Same over an already sorted array, without touching it. */
double pct_sorted_f64(const double *v, size_t n, double p);

/* Nearest-rank index (0-based) of the pth percentile among n sorted values:
 * for code that shows an actual row ("the p99 request"), not a value
 * interpolated between two. */
size_t pct_rank(size_t n, double p);

/* A distribution-free confidence interval for the pth percentile of what n
 * sorted values were drawn from: the 0-based ranks *lo and *hi such that
 * [v[*lo], v[*hi]] holds it with probability >= level (0.95, say), by the
 * binomial law of order statistics (equal tails). -1 when n values cannot
 * bound it at that level (the interval would run past the largest or the
 * smallest: p99 at 95% needs n >= 368, p90 36, p50 6). */
int pct_ci_ranks(size_t n, double p, double level, size_t *lo, size_t *hi);

#endif
