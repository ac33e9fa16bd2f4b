/* lhist.c - the bucket layout of schema/lhist.h and percentiles over it. */
#include "lhist.h"

#include <math.h>

static double log_gamma(void)
{
	static double lg;
	if (!lg)
		lg = log((1.0 + LHIST_ALPHA) / (1.0 - LHIST_ALPHA));
	return lg;
}

int lhist_index(int64_t ns)
{
	if (ns < LHIST_MIN_NS)
		return 0;
	double i = floor(log((double)ns / LHIST_MIN_NS) / log_gamma());
	return i >= LHIST_BUCKETS - 2 ? LHIST_BUCKETS - 1 : 1 + (int)i;
}

double lhist_lower(int i)
{
	return i <= 0 ? 0 : LHIST_MIN_NS * exp((double)(i - 1) * log_gamma());
}

double lhist_upper(int i)
{
	return i >= LHIST_BUCKETS - 1 ? INFINITY : i <= 0 ? LHIST_MIN_NS : LHIST_MIN_NS * exp((double)i * log_gamma());
}

double lhist_value(int i)
{
	if (i <= 0)
		return 0;
	if (i >= LHIST_BUCKETS - 1)
		return lhist_lower(LHIST_BUCKETS - 1);
	double g = exp(log_gamma());
	return 2 * lhist_lower(i) * g / (g + 1);
}

uint64_t lhist_count(const uint64_t *counts, size_t n_buckets)
{
	uint64_t n = 0;
	for (size_t i = 0; i < n_buckets; i++)
		n += counts[i];
	return n;
}

/* The bucket holding the value of 0-based rank r. */
static int bucket_of_rank(const uint64_t *counts, size_t n_buckets, uint64_t r)
{
	uint64_t seen = 0;
	for (size_t i = 0; i < n_buckets; i++) {
		seen += counts[i];
		if (seen > r)
			return (int)i;
	}
	return (int)n_buckets - 1;
}

double lhist_quantile(const uint64_t *counts, size_t n_buckets, double p)
{
	uint64_t n = lhist_count(counts, n_buckets);
	if (!n)
		return 0;
	double ix = (double)(n - 1) * p / 100.0;
	uint64_t lo = (uint64_t)ix;
	uint64_t hi = lo + 1 < n ? lo + 1 : lo;
	double vlo = lhist_value(bucket_of_rank(counts, n_buckets, lo));
	double vhi = lhist_value(bucket_of_rank(counts, n_buckets, hi));
	return vlo + (vhi - vlo) * (ix - (double)lo);
}
