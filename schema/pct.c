/* pct.c - percentiles by selection (O(n), no full sort), interpolated
 * between closest ranks: value at (n-1)*p/100, as SQLite's percentile(). */
#include "schema/pct.h"

#include <math.h>
#include <stddef.h>

/* Floyd and Rivest's selection (CACM 1975, algorithm 489): before each
 * partition of a large range it selects within a small sample around k, so
 * the pivot lands next to the kth value and the range shrinks fast: half
 * the time of a plain quickselect on a frame's 30,000 values.
 * After it, v[k] is the kth smallest, v[left..k-1] <= v[k] <= v[k+1..right]. */
#define DEFINE_SELECT(name, T)                                                       \
	static void name##_range(T *v, ptrdiff_t left, ptrdiff_t right, ptrdiff_t k) \
	{                                                                            \
		while (right > left) {                                               \
			if (right - left > 600) {                                    \
				double n = (double)(right - left + 1), i = (double)(k - left + 1); \
				double z = log(n), s = 0.5 * exp(2 * z / 3);         \
				double sd = 0.5 * sqrt(z * s * (n - s) / n) * (i < n / 2 ? -1 : 1); \
				ptrdiff_t l2 = (ptrdiff_t)fmax((double)left, (double)k - i * s / n + sd); \
				ptrdiff_t r2 = (ptrdiff_t)fmin((double)right, (double)k + (n - i) * s / n + sd); \
				name##_range(v, l2, r2, k);                          \
			}                                                            \
			T t = v[k], x;                                               \
			ptrdiff_t i = left, j = right;                               \
			x = v[left]; v[left] = v[k]; v[k] = x;                       \
			if (v[right] > t) { x = v[right]; v[right] = v[left]; v[left] = x; } \
			while (i < j) {                                              \
				x = v[i]; v[i] = v[j]; v[j] = x;                     \
				i++; j--;                                            \
				while (v[i] < t) i++;                                \
				while (v[j] > t) j--;                                \
			}                                                            \
			if (v[left] == t) { x = v[left]; v[left] = v[j]; v[j] = x; } \
			else { j++; x = v[j]; v[j] = v[right]; v[right] = x; }       \
			if (j <= k) left = j + 1;                                    \
			if (k <= j) right = j - 1;                                   \
		}                                                                    \
	}                                                                            \
	static T name(T *v, size_t n, size_t k)                                      \
	{                                                                            \
		name##_range(v, 0, (ptrdiff_t)n - 1, (ptrdiff_t)k);                  \
		return v[k];                                                         \
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

int pct_ci_ranks(size_t n, double p, double level, size_t *lo, size_t *hi)
{
	/* B, the count of draws below the percentile, is Binomial(n, q): the
	 * 1-based ranks l, u hold it (v[l-1] <= it < v[u-1]) exactly when
	 * l <= B <= u - 1. l is the largest with P(B < l) <= tail, u the
	 * smallest with P(B < u) >= 1 - tail; both must be ranks of the n. */
	double q = clamp_p(p) / 100.0, tail = (1 - level) / 2;
	if (n == 0 || q <= 0 || q >= 1 || !(tail > 0 && tail < 0.5))
		return -1;
	double nd = (double)n, sd = sqrt(nd * q * (1 - q));
	/* the terms more than 12 standard deviations below the mean add
	 * nothing a double holds: start there */
	size_t k = nd * q - 12 * sd > 0 ? (size_t)(nd * q - 12 * sd) : 0, l = 0, u = 0;
	double below = 0;           /* P(B < k) */
	for (; k <= n; k++) {
		if (k >= 1 && below <= tail)
			l = k;
		below += exp(lgamma(nd + 1) - lgamma((double)k + 1) - lgamma(nd - (double)k + 1) +
			     (double)k * log(q) + (nd - (double)k) * log1p(-q));
		if (below >= 1 - tail) {
			u = k + 1;
			break;
		}
	}
	if (!l || !u || u > n)
		return -1;
	*lo = l - 1;
	*hi = u - 1;
	return 0;
}
