/* lhist.h - kpiscope's one layout of mergeable latency histograms: the
 * per-minute aggregates kpi-ship computes from the trace and ClickHouse keeps
 * (schema/clickhouse/003_minutes.sql), the readers that take percentiles of
 * them (kpitop, kpi-report), and any exporter that wants the same buckets
 * (docs/fleet.md, "Per-minute aggregates").
 *
 * Log-spaced buckets, as DDSketch's: bucket i >= 1 holds the values in
 * [LHIST_MIN_NS * g^(i-1), LHIST_MIN_NS * g^i) with g = (1 + a) / (1 - a),
 * a = LHIST_ALPHA; every value in it is within a relative a of the bucket's
 * representative 2 L g / (g + 1). So is a percentile interpolated between two
 * such values (the interpolation is a convex mix). Bucket 0 holds everything
 * under 1 us (reported as 0: absolute error < 1 us); the last, LHIST_BUCKETS-1,
 * everything from 1000 s on (reported as its lower bound).
 *
 * A histogram is an array of LHIST_BUCKETS counts: two merge by adding them
 * bucket by bucket (ClickHouse's sumForEach, which takes arrays of different
 * lengths: shipped arrays end at their last non-zero bucket). */
#ifndef KPI_LHIST_H
#define KPI_LHIST_H

#include <stddef.h>
#include <stdint.h>

#define LHIST_ALPHA 0.01                /* the stated relative error: 1 % */
#define LHIST_MIN_NS 1000               /* 1 us */
#define LHIST_BUCKETS 1038              /* 0: < 1 us; 1..1036: 1 us .. 1000 s; 1037: >= 1000 s */

/* The bucket of a value in ns (negative values count as 0). */
int lhist_index(int64_t ns);
/* The value a bucket stands for, in ns. */
double lhist_value(int i);
/* Lower and upper bound of bucket i, in ns (the last: upper is +inf). */
double lhist_lower(int i);
double lhist_upper(int i);

/* The pth percentile (0..100) of the n_buckets counts (may be fewer than
 * LHIST_BUCKETS: the rest are 0), as schema/pct.h defines it (interpolated
 * between the closest ranks), each rank taken as its bucket's value:
 * within LHIST_ALPHA of the exact percentile of the same values (values
 * under 1 us: within 1 us). 0 when the histogram is empty. */
double lhist_quantile(const uint64_t *counts, size_t n_buckets, double p);
/* The values counted. */
uint64_t lhist_count(const uint64_t *counts, size_t n_buckets);

#endif
