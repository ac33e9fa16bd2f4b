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

/* One metric (TTFT or e2e) of the successful requests sent in one third of
 * a run: its median, and the standard error of that median from the third's
 * interquartile range (0.93 IQR / sqrt(n): a normal spread's), so that a
 * rise between thirds is told from the spread within them. */
struct third {
	double median, se;      /* ms; median -1: fewer than STEADY_MIN_THIRD answers */
};

static struct third third_of(const struct run *run, bool e2e, double lo, double hi, double *v)
{
	size_t k = 0;
	for (size_t i = 0; i < run->n_res; i++) {
		const struct result *r = &run->res[i];
		double x = e2e ? r->e2e : r->ttft;
		if (!r->error && x >= 0 && r->t_sent >= lo && r->t_sent < hi)
			v[k++] = x;
	}
	if (k < STEADY_MIN_THIRD)
		return (struct third){ -1, 0 };
	qsort(v, k, sizeof(*v), cmp_double);
	double iqr = pct_sorted_f64(v, k, 75) - pct_sorted_f64(v, k, 25);
	return (struct third){ pct_sorted_f64(v, k, 50), 0.93 * iqr / sqrt((double)k) };
}

/* Whether the median rose from the first third to the last beyond the noise
 * of a few answers: by more than STEADY_TREND_SIGMAS standard errors of the
 * difference. */
static bool significant(struct third first, struct third last)
{
	return first.median >= 0 && last.median >= 0 &&
	       last.median - first.median > STEADY_TREND_SIGMAS * hypot(first.se, last.se);
}

/* TTFT climbing: a significant rise, by more than half the first third's,
 * and by more than a tenth of the bound the queue eats into (TTFT, else
 * e2e; at least 1 ms), so that a few ms of a shared machine's noise under a
 * bound of hundreds is not called a trend. */
static bool climbing(const struct config *cfg, struct third first, struct third last)
{
	double bound = cfg->slo_ttft > 0 ? cfg->slo_ttft : cfg->slo_e2e;
	double floor = bound > 0 ? fmax(STEADY_TREND_MIN_MS, STEADY_TREND_SLO_SHARE * bound) : STEADY_TREND_MIN_MS;
	return significant(first, last) && last.median - first.median > fmax(STEADY_TREND_SHARE * first.median, floor);
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
	struct third tf = { -1, 0 }, tl = tf, ef = tf, el = tf;
	double *v = malloc((run->n_res ? run->n_res : 1) * sizeof(*v));
	if (v && hi > lo) {
		double third = (hi - lo) / 3;
		tf = third_of(run, false, lo, lo + third, v);
		tl = third_of(run, false, hi - third, hi + 1e-9, v);
		ef = third_of(run, true, lo, lo + third, v);
		el = third_of(run, true, hi - third, hi + 1e-9, v);
	}
	st->ttft_first = tf.median;
	st->ttft_last = tl.median;
	st->e2e_first = ef.median;
	st->e2e_last = el.median;
	free(v);
	/* Answers come back at the rate sent, times the share answered, over
	 * 1 + the slope of e2e against the time sent: a request sent a second
	 * later that takes b s longer comes back 1 + b s later. The slope runs
	 * between the thirds' medians (their centres lie two thirds of the
	 * point apart), which the spread of e2e does not move as it moves the
	 * first and last answers; a rise within the spread of a few answers is
	 * none: in a point a few e2e long, a few ms of it would read as 10% behind. */
	double slope = significant(ef, el) && hi > lo ?
		       (st->e2e_last - st->e2e_first) / (2.0 / 3 * (hi - lo)) : 0;
	st->achieved_rps = sent ? st->sent_rps * ok / sent / (1 + slope) : 0;
	/* a single request has no rate: it kept up if it was answered */
	bool keeps_up = sent > 1 ? st->achieved_rps >= STEADY_KEEP_UP * st->sent_rps : ok == sent;

	bool rising = climbing(cfg, tf, tl);

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
