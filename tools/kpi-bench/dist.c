/* dist.c - parsing and sampling of kpi-bench length distributions, and the
 * PRNG behind --seed. */
#include "tools/kpi-bench/dist.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- PRNG ---------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void rng_seed(struct rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t rng_next(struct rng *r)
{
	uint64_t *s = r->s;
	uint64_t res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return res;
}

double rng_unit(struct rng *r)
{
	return (rng_next(r) >> 11) * 0x1.0p-53;
}

long rng_range(struct rng *r, long lo, long hi)
{
	if (hi <= lo)
		return lo;
	return lo + (long)(rng_next(r) % (uint64_t)(hi - lo + 1));
}

double rng_exp(struct rng *r, double mean)
{
	return -mean * log1p(-rng_unit(r));
}

/* Box-Muller; 1 - u keeps log() away from 0. */
static double rng_normal(struct rng *r)
{
	double u = 1.0 - rng_unit(r), v = rng_unit(r);
	return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

/* Marsaglia and Tsang (2000); a shape below 1 is boosted to shape + 1 and
 * scaled back by U^(1/shape), their own remedy. */
double rng_gamma(struct rng *r, double shape, double scale)
{
	if (shape < 1.0) {
		double u = 1.0 - rng_unit(r);
		return rng_gamma(r, shape + 1.0, scale) * pow(u, 1.0 / shape);
	}
	double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
	for (;;) {
		double x = rng_normal(r), v = 1.0 + c * x;
		if (v <= 0)
			continue;
		v = v * v * v;
		double u = 1.0 - rng_unit(r);
		if (u < 1.0 - 0.0331 * x * x * x * x || log(u) < 0.5 * x * x + d * (1.0 - v + log(v)))
			return d * v * scale;
	}
}

double rng_arrival_gap(struct rng *r, double rate, double burstiness)
{
	if (burstiness == 1)
		return rng_exp(r, 1.0 / rate);   /* the draws of a plain --rate run, unchanged */
	return rng_gamma(r, burstiness, 1.0 / (rate * burstiness));
}

/* ---- parsing ------------------------------------------------------------- */

int bench_fail(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
	return -1;
}

/* A whole, positive integer: "12" yes; "", "0", "-3", "1.5", "12x" no. */
static int parse_pos_long(const char *s, long *out)
{
	char *end;
	if (!*s || *s == '-' || *s == '+')
		return -1;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end || v < 1)
		return -1;
	*out = v;
	return 0;
}

static int parse_file(struct dist *d, const char *path, char *err, size_t len)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return bench_fail(err, len, "cannot open '%s': %s", path, strerror(errno));
	char line[256];
	size_t cap = 0, lineno = 0;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		char *p = line + strspn(line, " \t");
		p[strcspn(p, " \t\r\n#")] = '\0';
		if (!*p)
			continue;       /* blank lines and # comments */
		long v;
		if (parse_pos_long(p, &v)) {
			fclose(f);
			return bench_fail(err, len, "%s:%zu: '%s' is not a positive integer "
				    "(the file holds one length per line)", path, lineno, p);
		}
		if (d->n_vals == cap) {
			cap = cap ? cap * 2 : 64;
			long *nv = realloc(d->vals, cap * sizeof(*nv));
			if (!nv) {
				fclose(f);
				return bench_fail(err, len, "out of memory reading '%s'", path);
			}
			d->vals = nv;
		}
		d->vals[d->n_vals++] = v;
	}
	fclose(f);
	if (!d->n_vals)
		return bench_fail(err, len, "'%s' holds no lengths (expected one positive integer per line)", path);
	return 0;
}

int dist_parse(struct dist *d, const char *spec, char *err, size_t len)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->spec, sizeof(d->spec), "%s", spec);

	if (!strncmp(spec, "file:", 5)) {
		d->kind = DIST_FILE;
		if (!spec[5])
			return bench_fail(err, len, "needs a path (file:PATH)");
		return parse_file(d, spec + 5, err, len);
	}

	char buf[256];
	snprintf(buf, sizeof(buf), "%s", spec);
	char *parts[4] = { 0 };
	int n = 0;
	for (char *p = buf, *tok; n < 4 && (tok = strsep(&p, ":")); )
		parts[n++] = tok;

	if (n == 1) {
		d->kind = DIST_CONST;
		if (parse_pos_long(parts[0], &d->a))
			return bench_fail(err, len, "not a positive integer nor a distribution; expected " DIST_FORMS);
		return 0;
	}
	if (!strcmp(parts[0], "uniform")) {
		d->kind = DIST_UNIFORM;
		if (n != 3 || parse_pos_long(parts[1], &d->a) || parse_pos_long(parts[2], &d->b))
			return bench_fail(err, len, "expected uniform:A:B with positive integers A <= B");
		if (d->a > d->b)
			return bench_fail(err, len, "A (%ld) is greater than B (%ld); expected uniform:A:B with A <= B",
				    d->a, d->b);
		return 0;
	}
	if (!strcmp(parts[0], "exp")) {
		d->kind = DIST_EXP;
		char *end;
		if (n < 2 || n > 3)
			return bench_fail(err, len, "expected exp:MEAN or exp:MEAN:MAX");
		errno = 0;
		d->mean = strtod(parts[1], &end);
		if (!*parts[1] || *end || errno || !(d->mean >= 1.0) || isinf(d->mean))
			return bench_fail(err, len, "MEAN must be a number >= 1; expected exp:MEAN[:MAX]");
		if (n == 3) {
			if (parse_pos_long(parts[2], &d->b))
				return bench_fail(err, len, "MAX must be a positive integer; expected exp:MEAN[:MAX]");
			if (d->b < d->mean)
				return bench_fail(err, len, "MAX (%ld) is below MEAN (%g); expected exp:MEAN[:MAX] with MAX >= MEAN",
					    d->b, d->mean);
		}
		return 0;
	}
	return bench_fail(err, len, "unknown distribution '%s'; expected " DIST_FORMS, parts[0]);
}

/* ---- sampling ------------------------------------------------------------ */

long dist_sample(const struct dist *d, struct rng *r)
{
	switch (d->kind) {
	case DIST_CONST:
		return d->a;
	case DIST_UNIFORM:
		return rng_range(r, d->a, d->b);
	case DIST_EXP: {
		long v = lround(rng_exp(r, d->mean));
		if (v < 1)
			v = 1;
		if (d->b && v > d->b)
			v = d->b;
		return v;
	}
	case DIST_FILE:
		return d->vals[rng_range(r, 0, (long)d->n_vals - 1)];
	}
	return 1;
}

double dist_mean(const struct dist *d)
{
	switch (d->kind) {
	case DIST_CONST:
		return d->a;
	case DIST_UNIFORM:
		return (d->a + d->b) / 2.0;
	case DIST_EXP:
		return d->mean;
	case DIST_FILE: {
		double s = 0;
		for (size_t i = 0; i < d->n_vals; i++)
			s += d->vals[i];
		return s / d->n_vals;
	}
	}
	return 0;
}

void dist_free(struct dist *d)
{
	free(d->vals);
	d->vals = NULL;
	d->n_vals = 0;
}
