/* pct.c - percentiles by quickselect (O(n), no full sort), interpolated
 * between closest ranks: value at (n-1)*p/100, as SQLite's percentile(). */
#include "schema/pct.h"

#include <math.h>
#include <stddef.h>

/* Wirth's selection: after it, v[k] is the kth smallest, v[0..k-1] <= v[k]
 * and v[k+1..n-1] >= v[k]. */
#define DEFINE_SELECT(name, T)                                                     \
	static T name(T *v, size_t n, size_t k)                                    \
	{                                                                          \
		ptrdiff_t l = 0, m = (ptrdiff_t)n - 1, kk = (ptrdiff_t)k;          \
		while (l < m) {                                                    \
			T x = v[kk];                                               \
			ptrdiff_t i = l, j = m;                                    \
			do {                                                       \
				while (v[i] < x) i++;                              \
				while (x < v[j]) j--;                              \
				if (i <= j) {                                      \
					T t = v[i]; v[i] = v[j]; v[j] = t;         \
					i++; j--;                                  \
				}                                                  \
			} while (i <= j);                                          \
			if (j < kk) l = i;                                         \
			if (kk < i) m = j;                                         \
		}                                                                  \
		return v[kk];                                                      \
	}

DEFINE_SELECT(select_i64, int64_t)
DEFINE_SELECT(select_f64, double)

static double clamp_p(double p)
{
	if (!(p >= 0)) return 0;
	return p > 100 ? 100 : p;
}

double pct_select_i64(int64_t *v, size_t n, double p)
{
	if (n == 0) return 0;
	double ix = (double)(n - 1) * clamp_p(p) / 100.0;
	size_t k = (size_t)ix;
	double frac = ix - (double)k;
	double lo = (double)select_i64(v, n, k);
	if (frac == 0 || k + 1 >= n) return lo;
	/* after the select, everything right of k is >= v[k]: its minimum is rank k+1 */
	int64_t hi = v[k + 1];
	for (size_t i = k + 2; i < n; i++)
		if (v[i] < hi) hi = v[i];
	return lo + ((double)hi - lo) * frac;
}

double pct_select_f64(double *v, size_t n, double p)
{
	if (n == 0) return 0;
	double ix = (double)(n - 1) * clamp_p(p) / 100.0;
	size_t k = (size_t)ix;
	double frac = ix - (double)k;
	double lo = select_f64(v, n, k);
	if (frac == 0 || k + 1 >= n) return lo;
	double hi = v[k + 1];
	for (size_t i = k + 2; i < n; i++)
		if (v[i] < hi) hi = v[i];
	return lo + (hi - lo) * frac;
}

double pct_sorted_f64(const double *v, size_t n, double p)
{
	if (n == 0) return 0;
	double ix = (double)(n - 1) * clamp_p(p) / 100.0;
	size_t k = (size_t)ix;
	double frac = ix - (double)k;
	if (frac == 0 || k + 1 >= n) return v[k];
	return v[k] + (v[k + 1] - v[k]) * frac;
}

size_t pct_rank(size_t n, double p)
{
	if (n == 0) return 0;
	size_t k = (size_t)llround((double)(n - 1) * clamp_p(p) / 100.0);
	return k >= n ? n - 1 : k;
}
