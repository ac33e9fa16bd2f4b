/* dist.h - length distributions for kpi-bench (--prompt-len, --max-tokens)
 * and the seeded PRNG that makes a workload reproducible. */
#ifndef KPI_BENCH_DIST_H
#define KPI_BENCH_DIST_H

#include <stddef.h>
#include <stdint.h>

/* xoshiro256** seeded through splitmix64: fast, and the same sequence on
 * every machine for the same --seed. */
struct rng {
	uint64_t s[4];
};

/* Formats a message into err and returns -1: the parsers' one way to fail. */
int bench_fail(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

void rng_seed(struct rng *r, uint64_t seed);
uint64_t rng_next(struct rng *r);
double rng_unit(struct rng *r);                     /* [0, 1) */
long rng_range(struct rng *r, long lo, long hi);    /* [lo, hi] inclusive */
double rng_exp(struct rng *r, double mean);
/* Gamma(shape, scale): mean shape * scale, coefficient of variation
 * 1 / sqrt(shape). Arrival gaps with shape b and scale 1 / (rate * b) are
 * gamma arrivals of burstiness b (b = 1: exponential, i.e. Poisson). */
double rng_gamma(struct rng *r, double shape, double scale);
/* The gap before the next open-loop arrival, in seconds: exponential when
 * burstiness is 1 (Poisson), else gamma of that burstiness; mean 1 / rate. */
double rng_arrival_gap(struct rng *r, double rate, double burstiness);

enum dist_kind { DIST_CONST, DIST_UNIFORM, DIST_EXP, DIST_FILE };

struct dist {
	enum dist_kind kind;
	long a, b;          /* CONST: a; UNIFORM: [a, b]; EXP: cap b (0 = none) */
	double mean;        /* EXP */
	long *vals;         /* FILE: the values, drawn uniformly */
	size_t n_vals;
	char spec[256];     /* as given, for reports */
};

/* Parse "N", "uniform:A:B", "exp:MEAN[:MAX]" or "file:PATH". Every value
 * must be >= 1. On error returns -1 and writes a message saying what is
 * wrong into err (without the flag or the spec, which the caller names). */
int dist_parse(struct dist *d, const char *spec, char *err, size_t err_len);
long dist_sample(const struct dist *d, struct rng *r);
double dist_mean(const struct dist *d);
void dist_free(struct dist *d);

#define DIST_FORMS "N, uniform:A:B, exp:MEAN[:MAX] or file:PATH"

#endif
