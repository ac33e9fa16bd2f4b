/* pct.h - percentiles over plain arrays, one definition for every tool:
 * linear interpolation between the closest ranks, p in 0..100, exactly as
 * SQLite's percentile() extension and numpy's default compute it. */
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
 * the row a "median request" or "p99 request" refers to. */
size_t pct_rank(size_t n, double p);

#endif
