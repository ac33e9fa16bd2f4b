/* test_bench_steady.c - kpi-bench's steady-state rule on runs made up here:
 * a stable load is sustained whatever the spread of its e2e, a queue that
 * grows or answers that do not come back are not, each with its reason. */
#include <math.h>

#include "tests/unit/check.h"
#include "tools/kpi-bench/bench.h"

#define MAXN 20000

static struct result res[MAXN];

/* Poisson sends at rate for secs; a single server of service rate mu
 * (FIFO) answers them: TTFT is the wait plus ttft0, e2e that plus the
 * service time. mu <= 0: no queue, e2e drawn in [e2e_lo, e2e_hi]. */
static struct run make_run(double rate, double secs, double mu, double ttft0, double e2e_lo, double e2e_hi,
			   uint64_t seed)
{
	struct rng r;
	rng_seed(&r, seed);
	struct run run = { .res = res };
	double t = 0, free_at = 0;
	while (run.n_res < MAXN) {
		t += rng_arrival_gap(&r, rate, 1);
		if (t > secs)
			break;
		struct result *x = &res[run.n_res];
		memset(x, 0, sizeof(*x));
		x->idx = (long)run.n_res++;
		x->t_sent = t * 1e3;
		double u = (double)(rng_next(&r) >> 11) / 9007199254740992.0;
		if (mu > 0) {
			double start = fmax(t, free_at);
			free_at = start + 1 / mu;
			x->ttft = (start - t) * 1e3 + ttft0;
			x->e2e = (free_at - t) * 1e3 + ttft0;
		} else {
			x->ttft = ttft0 * (0.5 + u);
			x->e2e = e2e_lo + (e2e_hi - e2e_lo) * u;
		}
		x->tpot = 1;
	}
	return run;
}

static struct config slo_cfg(double ttft_ms)
{
	struct config cfg;
	memset(&cfg, 0, sizeof(cfg));
	cfg.slo_ttft = ttft_ms;
	return cfg;
}

/* 100 req/s for 10 s, answers after 50..1050 ms: the first and last answers
 * stray by up to a second (10% of the point), the rate they come back at
 * does not. */
static void test_stable_load_is_sustained(void)
{
	struct config cfg = slo_cfg(250);
	struct run run = make_run(100, 10, 0, 5, 50, 1050, 1);
	struct steady st;
	steady_judge(&cfg, &run, &st);
	printf("# stable: sent %.2f req/s, answered %.2f, TTFT %.2f -> %.2f ms\n", st.sent_rps, st.achieved_rps,
	       st.ttft_first, st.ttft_last);
	CHECK(st.sustained, "not sustained: %s", st.why);
	CHECK(fabs(st.achieved_rps / st.sent_rps - 1) < 0.02, "answered %g of %g req/s", st.achieved_rps, st.sent_rps);
	CHECK(fabs(st.sent_rps / 100 - 1) < 0.1, "sent %g req/s, asked 100", st.sent_rps);
	CHECK(!st.why[0], "a reason for a sustained load: %s", st.why);
}

/* 100 req/s into a server that serves 80: answers come back at 80/s and
 * TTFT climbs with the queue. */
static void test_overload_is_caught(void)
{
	struct config cfg = slo_cfg(60000);   /* every request within a bound this loose */
	struct run run = make_run(100, 10, 80, 2, 0, 0, 2);
	struct steady st;
	steady_judge(&cfg, &run, &st);
	printf("# overload: sent %.2f req/s, answered %.2f, TTFT %.1f -> %.1f ms: %s\n", st.sent_rps,
	       st.achieved_rps, st.ttft_first, st.ttft_last, st.why);
	CHECK(!st.sustained, "an overload sustained");
	CHECK(fabs(st.achieved_rps - 80) < 80 * 0.05, "answered %g req/s, the server serves 80", st.achieved_rps);
	CHECK(strstr(st.why, "answered") && strstr(st.why, "req/s sent"), "why: %s", st.why);
	CHECK(st.ttft_last > st.ttft_first + 500, "TTFT %g -> %g", st.ttft_first, st.ttft_last);
}

/* A 2% overload over 10 s: the rate stays within 5%, the queue's TTFT does
 * not: 20 ms a second, past a tenth of a 250 ms bound in two thirds of it. */
static void test_slow_queue_growth_is_caught_by_ttft(void)
{
	struct config cfg = slo_cfg(250);
	struct run run = make_run(100, 10, 98, 2, 0, 0, 3);
	struct steady st;
	steady_judge(&cfg, &run, &st);
	printf("# 2%% over: answered %.1f%% of the rate sent, TTFT %.1f -> %.1f ms: %s\n",
	       100 * st.achieved_rps / st.sent_rps, st.ttft_first, st.ttft_last, st.why);
	CHECK(!st.sustained && strstr(st.why, "TTFT p50 rose"), "why: %s", st.why);
}

/* TTFT doubling from 2 to 4 ms under a 250 ms bound is noise, not a queue. */
static void test_small_rise_under_the_floor_is_no_trend(void)
{
	struct config cfg = slo_cfg(250);
	struct run run = make_run(100, 10, 0, 2, 20, 40, 4);
	for (size_t i = 0; i < run.n_res; i++)
		if (res[i].t_sent > 5000)
			res[i].ttft *= 2;
	struct steady st;
	steady_judge(&cfg, &run, &st);
	CHECK(st.sustained, "not sustained: %s (TTFT %g -> %g)", st.why, st.ttft_first, st.ttft_last);
	CHECK(st.ttft_last > 1.5 * st.ttft_first, "TTFT %g -> %g", st.ttft_first, st.ttft_last);
	/* the same rise under a 10 ms bound is a trend */
	cfg = slo_cfg(10);
	steady_judge(&cfg, &run, &st);
	CHECK(!st.sustained && strstr(st.why, "TTFT"), "why: %s", st.why);
}

/* A point of 16 requests in 90 ms (--requests 16 at concurrency 4): five
 * answers a third are too few to tell a trend from their spread (4 ms more
 * e2e in the last third would read as 9% behind the rate sent). */
static void test_few_answers_are_no_trend(void)
{
	struct config cfg = slo_cfg(2000);
	struct run run = make_run(180, 0.09, 0, 3, 6, 14, 11);
	for (size_t i = 0; i < run.n_res; i++)
		if (res[i].t_sent > 60)
			res[i].e2e += 4;
	struct steady st;
	steady_judge(&cfg, &run, &st);
	printf("# %zu answers: e2e %.1f -> %.1f ms, answered %.1f%%\n", run.n_res, st.e2e_first, st.e2e_last,
	       100 * st.achieved_rps / st.sent_rps);
	CHECK(run.n_res >= 9 && run.n_res <= 25, "%zu requests", run.n_res);
	CHECK(st.sustained, "not sustained: %s", st.why);
	/* over 16 s and 2,900 answers a rise is no noise: 1 s across the
	 * point, a slope of 9%: the answers come back that much slower */
	run = make_run(180, 16, 0, 3, 6, 14, 7);
	for (size_t i = 0; i < run.n_res; i++)
		if (res[i].t_sent > 10667)
			res[i].e2e += 1000;
	steady_judge(&cfg, &run, &st);
	CHECK(!st.sustained && strstr(st.why, "answered"), "why: %s", st.why);
}

/* A third of the requests refused (429): answered 2/3 of the rate sent. */
static void test_rejections_are_not_sustained(void)
{
	struct config cfg = slo_cfg(250);
	struct run run = make_run(50, 10, 0, 3, 20, 40, 5);
	for (size_t i = 0; i < run.n_res; i += 3) {
		res[i].error = "429";
		res[i].ttft = res[i].e2e = -1;
	}
	struct steady st;
	steady_judge(&cfg, &run, &st);
	printf("# a third refused: %s\n", st.why);
	CHECK(!st.sustained, "sustained with a third refused");
	CHECK(fabs(st.achieved_rps / st.sent_rps - 2.0 / 3) < 0.02, "answered %g of %g", st.achieved_rps, st.sent_rps);
	for (size_t i = 0; i < run.n_res; i++)
		res[i].error = "connect";
	steady_judge(&cfg, &run, &st);
	CHECK(!st.sustained && strstr(st.why, "0 of"), "why: %s", st.why);
}

int main(void)
{
	RUN(test_stable_load_is_sustained);
	RUN(test_overload_is_caught);
	RUN(test_slow_queue_growth_is_caught_by_ttft);
	RUN(test_small_rise_under_the_floor_is_no_trend);
	RUN(test_rejections_are_not_sustained);
	RUN(test_few_answers_are_no_trend);
	return CHECK_DONE();
}
