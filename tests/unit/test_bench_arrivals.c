/* test_bench_arrivals.c - kpi-bench's open-loop arrivals: over 10,000 gaps
 * the rate is the one asked and the gaps' spread the asked burstiness's. */
#include <math.h>

#include "tests/unit/check.h"
#include "tools/kpi-bench/dist.h"

#define DRAWS 10000

struct moments {
	double rate, cv;
};

static struct moments draw(double rate, double burstiness, uint64_t seed)
{
	struct rng r;
	rng_seed(&r, seed);
	double sum = 0, sum2 = 0;
	for (int i = 0; i < DRAWS; i++) {
		double g = rng_arrival_gap(&r, rate, burstiness);
		CHECK(g >= 0 && isfinite(g), "gap %g", g);
		sum += g;
		sum2 += g * g;
	}
	double mean = sum / DRAWS, var = (sum2 - DRAWS * mean * mean) / (DRAWS - 1);
	return (struct moments){ DRAWS / sum, sqrt(var) / mean };
}

/* Gamma gaps of shape b have a coefficient of variation of 1/sqrt(b). */
static void check_burstiness(double rate, double b)
{
	struct moments m = draw(rate, b, 1);
	double cv = 1 / sqrt(b);
	printf("# burstiness %g, rate %g: measured rate %.4f (%+.2f%%), CV %.4f vs %.4f (%+.2f%%)\n", b, rate,
	       m.rate, 100 * (m.rate / rate - 1), m.cv, cv, 100 * (m.cv / cv - 1));
	CHECK(fabs(m.rate / rate - 1) <= 0.02, "burstiness %g: rate %g, asked %g", b, m.rate, rate);
	CHECK(fabs(m.cv / cv - 1) <= 0.05, "burstiness %g: CV %g, want %g", b, m.cv, cv);
}

static void test_gamma_rate_and_cv(void)
{
	check_burstiness(10, 1);
	check_burstiness(10, 2);
	check_burstiness(10, 4);
	check_burstiness(50, 0.5);
	check_burstiness(3, 8);
}

/* The shape < 1 path (boosted shape + 1) keeps the mean too. */
static void test_gamma_small_shape_mean(void)
{
	struct rng r;
	rng_seed(&r, 7);
	double sum = 0;
	int n = 200000;
	for (int i = 0; i < n; i++)
		sum += rng_gamma(&r, 0.3, 2.0);
	CHECK(fabs(sum / n / 0.6 - 1) < 0.02, "mean %g, want 0.6", sum / n);
}

/* Burstiness 1 is the exponential draw a plain --rate run always made, so
 * old seeds give the same arrival times. */
static void test_poisson_unchanged(void)
{
	struct rng a, b;
	rng_seed(&a, 42);
	rng_seed(&b, 42);
	for (int i = 0; i < 100; i++)
		CHECK(rng_arrival_gap(&a, 5, 1) == rng_exp(&b, 0.2), "draw %d differs", i);
}

int main(void)
{
	RUN(test_gamma_rate_and_cv);
	RUN(test_gamma_small_shape_mean);
	RUN(test_poisson_unchanged);
	return CHECK_DONE();
}
