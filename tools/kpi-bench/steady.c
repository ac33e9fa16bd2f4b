/* steady.c - whether a sweep point's load was sustained: the server answered
 * at the rate the requests were sent, and TTFT did not climb across the point. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "schema/pct.h"
#include "tools/kpi-bench/bench.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Median of one metric (TTFT or e2e) of the successful requests sent in
 * [lo, hi) ms; -1 when fewer than STEADY_MIN_THIRD of them (too few to tell
 * a trend from noise). */
static double third_median(const struct run *run, bool e2e, double lo, double hi, double *v)
{
	size_t k = 0;
	for (size_t i = 0; i < run->n_res; i++) {
		const struct result *r = &run->res[i];
		double x = e2e ? r->e2e : r->ttft;
		if (!r->error && x >= 0 && r->t_sent >= lo && r->t_sent < hi)
			v[k++] = x;
	}
	if (k < STEADY_MIN_THIRD)
		return -1;
	qsort(v, k, sizeof(*v), cmp_double);
	return pct_sorted_f64(v, k, 50);
}

/* How much the last third's median TTFT may exceed the first's before it is
 * a trend: half the first's, and a tenth of the bound the queue eats into
 * (TTFT, else e2e), so that a few ms of a shared machine's noise under a
 * bound of hundreds is not called a trend. */
static double trend_floor(const struct config *cfg)
{
	double bound = cfg->slo_ttft > 0 ? cfg->slo_ttft : cfg->slo_e2e;
	return bound > 0 ? fmax(STEADY_TREND_MIN_MS, STEADY_TREND_SLO_SHARE * bound) : STEADY_TREND_MIN_MS;
}

void steady_judge(const struct config *cfg, const struct run *run, struct steady *st)
{
	memset(st, 0, sizeof(*st));
	st->ttft_first = st->ttft_last = st->e2e_first = st->e2e_last = -1;
	double lo = -1, hi = -1;
	long sent = 0, ok = 0;
	for (size_t i = 0; i < run->n_res; i++) {
		const struct result *r = &run->res[i];
		if (r->t_sent < 0)
			continue;
		sent++;
		ok += !r->error;
		if (lo < 0 || r->t_sent < lo)
			lo = r->t_sent;
		hi = fmax(hi, r->t_sent);
	}
	st->sent_rps = sent > 1 && hi > lo ? (sent - 1) / ((hi - lo) / 1e3) : 0;
	double *v = malloc((run->n_res ? run->n_res : 1) * sizeof(*v));
	if (v && hi > lo) {
		double third = (hi - lo) / 3;
		st->ttft_first = third_median(run, false, lo, lo + third, v);
		st->ttft_last = third_median(run, false, hi - third, hi + 1e-9, v);
		st->e2e_first = third_median(run, true, lo, lo + third, v);
		st->e2e_last = third_median(run, true, hi - third, hi + 1e-9, v);
	}
	free(v);
	/* Answers come back at the rate sent, times the share answered, over
	 * 1 + the slope of e2e against the time sent: a request sent a second
	 * later that takes b s longer comes back 1 + b s later. The slope runs
	 * between the thirds' medians (their centres lie two thirds of the
	 * point apart), which the spread of e2e does not move as it moves the
	 * first and last answers. */
	double slope = st->e2e_first >= 0 && st->e2e_last >= 0 && hi > lo ?
		       (st->e2e_last - st->e2e_first) / (2.0 / 3 * (hi - lo)) : 0;
	slope = fmax(slope, -0.5);
	st->achieved_rps = sent ? st->sent_rps * ok / sent / (1 + slope) : 0;
	/* a single request has no rate: it kept up if it was answered */
	bool keeps_up = sent > 1 ? st->achieved_rps >= STEADY_KEEP_UP * st->sent_rps : ok == sent;

	double rise = st->ttft_last - st->ttft_first;
	bool rising = st->ttft_first >= 0 && st->ttft_last >= 0 &&
		      rise > fmax(STEADY_TREND_SHARE * st->ttft_first, trend_floor(cfg));

	st->sustained = sent > 0 && ok > 0 && keeps_up && !rising;
	if (!sent || !ok)
		snprintf(st->why, sizeof(st->why), "%ld of %ld requests answered", ok, sent);
	else if (!keeps_up)
		snprintf(st->why, sizeof(st->why), "answered %.4g of %.4g req/s sent (%.0f%%)", st->achieved_rps,
			 st->sent_rps, 100 * st->achieved_rps / st->sent_rps);
	else if (rising)
		snprintf(st->why, sizeof(st->why), "TTFT p50 rose from %.4g ms (first third) to %.4g ms (last)",
			 st->ttft_first, st->ttft_last);
}
