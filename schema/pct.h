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

#endif
