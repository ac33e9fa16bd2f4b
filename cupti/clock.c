/* clock.c - CUPTI timestamp to CLOCK_MONOTONIC conversion (see clock.h).
 * Integer arithmetic relative to a point, so ns since the epoch keep ns precision. */
#include "cupti/clock.h"

#include <time.h>

void kpi_clock_init(struct kpi_clock *c)
{
	c->head = 0;
	c->n = 0;
}

static const struct kpi_clock_point *pt_at(const struct kpi_clock *c, int i)
{
	return &c->pt[(c->head + i) % KPI_CLOCK_POINTS];
}

int kpi_clock_add(struct kpi_clock *c, uint64_t cupti_ns, uint64_t mono_ns)
{
	if (c->n) {
		const struct kpi_clock_point *last = pt_at(c, c->n - 1);
		if (cupti_ns <= last->cupti_ns || mono_ns <= last->mono_ns)
			return -1;
	}
	if (c->n == KPI_CLOCK_POINTS) {
		c->head = (c->head + 1) % KPI_CLOCK_POINTS;
		c->n--;
	}
	struct kpi_clock_point *p = &c->pt[(c->head + c->n) % KPI_CLOCK_POINTS];
	p->cupti_ns = cupti_ns;
	p->mono_ns = mono_ns;
	c->n++;
	return 0;
}

/* mono = a.mono + (t - a.cupti) * rate of segment a->b (or rate 1). */
static uint64_t map_from(const struct kpi_clock_point *a, const struct kpi_clock_point *b,
			 uint64_t t)
{
	__int128 dt = (__int128)t - (__int128)a->cupti_ns, dm;

	if (b) {
		__int128 sc = (__int128)b->cupti_ns - a->cupti_ns;
		__int128 sm = (__int128)b->mono_ns - a->mono_ns;
		double rate = (double)sm / (double)sc;
		if (rate < 1 - KPI_CLOCK_MAX_SKEW || rate > 1 + KPI_CLOCK_MAX_SKEW)
			dm = dt;
		else
			dm = dt * sm / sc; /* rounds toward zero: within 1 ns */
	} else {
		dm = dt;
	}
	__int128 m = (__int128)a->mono_ns + dm;
	return m < 0 ? 0 : (uint64_t)m;
}

uint64_t kpi_clock_to_mono(const struct kpi_clock *c, uint64_t t)
{
	if (c->n == 0)
		return 0;
	if (c->n == 1)
		return map_from(pt_at(c, 0), NULL, t);
	/* last segment whose start is <= t (first segment before the first point) */
	int lo = 0, hi = c->n - 1;
	while (hi - lo > 1) {
		int mid = (lo + hi) / 2;
		if (pt_at(c, mid)->cupti_ns <= t)
			lo = mid;
		else
			hi = mid;
	}
	if (lo == c->n - 2 && pt_at(c, c->n - 1)->cupti_ns <= t) {
		/* past the newest point: extrapolate from it with the last rate */
		const struct kpi_clock_point *a = pt_at(c, c->n - 2), *b = pt_at(c, c->n - 1);
		struct kpi_clock_point rev_a = *b, rev_b = { b->cupti_ns + (b->cupti_ns - a->cupti_ns),
							     b->mono_ns + (b->mono_ns - a->mono_ns) };
		return map_from(&rev_a, &rev_b, t);
	}
	return map_from(pt_at(c, lo), pt_at(c, lo + 1), t);
}

uint64_t kpi_clock_mono_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int kpi_clock_sample(int (*read_cupti)(void *arg, uint64_t *ns), void *arg, int tries,
		     struct kpi_clock_point *out, uint64_t *window_ns)
{
	uint64_t best = UINT64_MAX;

	for (int i = 0; i < tries; i++) {
		uint64_t m0 = kpi_clock_mono_now(), cu;
		if (read_cupti(arg, &cu))
			continue;
		uint64_t m1 = kpi_clock_mono_now();
		if (m1 - m0 < best) {
			best = m1 - m0;
			out->cupti_ns = cu;
			out->mono_ns = m0 + (m1 - m0) / 2;
		}
	}
	if (best == UINT64_MAX)
		return -1;
	if (window_ns)
		*window_ns = best;
	return 0;
}
