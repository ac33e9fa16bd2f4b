/* test_cupti_clock.c - CUPTI timestamp -> CLOCK_MONOTONIC calibration math. */
#include <math.h>
#include <stdint.h>

#include "tests/unit/check.h"
#include "cupti/clock.h"

#define S 1000000000ull
#define EPOCH (1764670000ull * S) /* CUPTI's clock may count from the epoch */

static void test_uncalibrated_is_zero(void)
{
	struct kpi_clock c;
	kpi_clock_init(&c);
	CHECK(kpi_clock_to_mono(&c, EPOCH) == 0, "no point yet must map to 0");
}

static void test_single_point_is_offset(void)
{
	struct kpi_clock c;
	kpi_clock_init(&c);
	CHECK(kpi_clock_add(&c, EPOCH, 5 * S) == 0, "add");
	CHECK(kpi_clock_to_mono(&c, EPOCH + 123) == 5 * S + 123, "offset only");
	CHECK(kpi_clock_to_mono(&c, EPOCH - 7) == 5 * S - 7, "before the point");
	CHECK(kpi_clock_to_mono(&c, EPOCH - 6 * S) == 0, "clamped at 0, got %llu",
	      (unsigned long long)kpi_clock_to_mono(&c, EPOCH - 6 * S));
}

/* CUPTI's clock runs 50 ppm fast against CLOCK_MONOTONIC: interpolation between
 * points and extrapolation past the last keep to 1 ns + the drift model. */
static void test_drift_interpolated_and_extrapolated(void)
{
	struct kpi_clock c;
	kpi_clock_init(&c);
	const double rate = 1.0 / (1.0 + 50e-6); /* mono ns per cupti ns */
	for (int i = 0; i < 5; i++) {
		uint64_t cu = EPOCH + (uint64_t)i * S;
		CHECK(kpi_clock_add(&c, cu, 10 * S + (uint64_t)llround(i * S * rate)) == 0, "add %d", i);
	}
	for (uint64_t off = 0; off < 7 * S; off += S / 3 + 12345) {
		double want = 10.0 * S + off * rate;
		CHECK_NEAR((double)kpi_clock_to_mono(&c, EPOCH + off), want, 2.0);
	}
	/* before the first point: first segment's rate */
	CHECK_NEAR((double)kpi_clock_to_mono(&c, EPOCH - S / 2), 10.0 * S - (S / 2) * rate, 2.0);
}

static void test_rejects_non_monotonic_points(void)
{
	struct kpi_clock c;
	kpi_clock_init(&c);
	CHECK(kpi_clock_add(&c, EPOCH, S) == 0, "first");
	CHECK(kpi_clock_add(&c, EPOCH, 2 * S) == -1, "same cupti time must be refused");
	CHECK(kpi_clock_add(&c, EPOCH + S, S) == -1, "mono going back must be refused");
	CHECK(c.n == 1, "n=%d", c.n);
}

/* A bad sample (a 10% rate) is read with rate 1, not trusted. */
static void test_implausible_rate_ignored(void)
{
	struct kpi_clock c;
	kpi_clock_init(&c);
	kpi_clock_add(&c, EPOCH, S);
	kpi_clock_add(&c, EPOCH + 1000000, S + 1100000);
	CHECK(kpi_clock_to_mono(&c, EPOCH + 500000) == S + 500000, "got %llu",
	      (unsigned long long)kpi_clock_to_mono(&c, EPOCH + 500000));
}

/* The ring keeps the newest points: old times still map through the oldest kept. */
static void test_ring_keeps_newest(void)
{
	struct kpi_clock c;
	kpi_clock_init(&c);
	for (int i = 0; i < 3 * KPI_CLOCK_POINTS; i++)
		CHECK(kpi_clock_add(&c, EPOCH + (uint64_t)i * S, 100 * S + (uint64_t)i * S + 7) == 0, "add");
	CHECK(c.n == KPI_CLOCK_POINTS, "n=%d", c.n);
	for (int i = 0; i < 3 * KPI_CLOCK_POINTS; i += 17)
		CHECK(kpi_clock_to_mono(&c, EPOCH + (uint64_t)i * S + 99) == 100 * S + (uint64_t)i * S + 106,
		      "point %d", i);
}

/* A fake CUPTI clock: CLOCK_MONOTONIC + a fixed offset, like the real one is
 * within its drift. The sample must recover the offset within its window. */
static int fake_cupti(void *arg, uint64_t *ns)
{
	*ns = kpi_clock_mono_now() + *(uint64_t *)arg;
	return 0;
}

static int failing_cupti(void *arg, uint64_t *ns)
{
	return -1;
}

static void test_sample_recovers_offset(void)
{
	uint64_t off = EPOCH, window;
	struct kpi_clock_point p;
	CHECK(kpi_clock_sample(fake_cupti, &off, 7, &p, &window) == 0, "sample");
	double err = (double)(p.cupti_ns - off) - (double)p.mono_ns;
	CHECK(fabs(err) <= (double)window / 2 + 1, "offset error %g ns, window %llu", err,
	      (unsigned long long)window);
	CHECK(window < 1000000, "window %llu ns: clock reads take too long", (unsigned long long)window);
	CHECK(kpi_clock_sample(failing_cupti, NULL, 3, &p, &window) == -1, "failure must be reported");
}

int main(void)
{
	RUN(test_uncalibrated_is_zero);
	RUN(test_single_point_is_offset);
	RUN(test_drift_interpolated_and_extrapolated);
	RUN(test_rejects_non_monotonic_points);
	RUN(test_implausible_rate_ignored);
	RUN(test_ring_keeps_newest);
	RUN(test_sample_recovers_offset);
	return CHECK_DONE();
}
