/* clock.h - maps CUPTI timestamps onto CLOCK_MONOTONIC, the clock of the eBPF
 * side, from calibration points taken at start and periodically. */
#ifndef KPI_CUPTI_CLOCK_H
#define KPI_CUPTI_CLOCK_H

#include <stdint.h>

#define KPI_CLOCK_POINTS 64
/* Two clocks ticking ns must agree on the rate to this much; a segment whose
 * rate is further off comes from a bad sample and is read with rate 1. */
#define KPI_CLOCK_MAX_SKEW 1e-3

struct kpi_clock_point {
	uint64_t cupti_ns, mono_ns;
};

/* Points in increasing time, the newest KPI_CLOCK_POINTS kept (a ring). */
struct kpi_clock {
	struct kpi_clock_point pt[KPI_CLOCK_POINTS];
	int head, n;
};

void kpi_clock_init(struct kpi_clock *c);
/* Adds a point; returns -1 (and ignores it) unless both times are later than
 * those of the newest point. */
int kpi_clock_add(struct kpi_clock *c, uint64_t cupti_ns, uint64_t mono_ns);
/* CLOCK_MONOTONIC ns for a CUPTI timestamp: piecewise linear through the
 * points, extrapolated with the nearest segment's rate; 0 before any point. */
uint64_t kpi_clock_to_mono(const struct kpi_clock *c, uint64_t cupti_ns);

uint64_t kpi_clock_mono_now(void);
/* One calibration point: of `tries` reads of read_cupti bracketed by two
 * CLOCK_MONOTONIC reads, the one with the narrowest bracket, paired with the
 * bracket's midpoint. *window_ns is that bracket (the point's uncertainty).
 * Returns 0, or -1 when read_cupti failed every time. */
int kpi_clock_sample(int (*read_cupti)(void *arg, uint64_t *ns), void *arg, int tries,
		     struct kpi_clock_point *out, uint64_t *window_ns);

#endif
