/* prom_native.h - a Prometheus native histogram of durations: exponential
 * buckets of schema s (PROM_NATIVE_SCHEMA), bucket i holding the values in
 * (2^((i-1)/2^s), 2^(i/2^s)] seconds, kept densely between the lowest and the
 * highest bucket a value fell in; a zero bucket for values up to
 * PROM_NATIVE_ZERO_S. Prometheus interpolates a quantile linearly inside the
 * bucket that holds its rank, so its answer is within a relative
 * 2^(2^-s) - 1 (0.54 % at schema 7) of the value at that rank. A histogram
 * whose values would need more than PROM_NATIVE_MAX_BUCKETS buckets (a span
 * over 2^16 at schema 7) halves its schema, merging bucket pairs, as
 * Prometheus' own client does: its memory stays bounded, and the schema it
 * sends states its coarser error. docs/fleet.md, "Native histograms". */
#ifndef KPI_PROM_NATIVE_H
#define KPI_PROM_NATIVE_H

#include <stdint.h>
#include "prom_proto.h"

#define PROM_NATIVE_SCHEMA 7
#define PROM_NATIVE_MAX_BUCKETS 2048        /* 16 KiB of counts a histogram at most */
#define PROM_NATIVE_ZERO_S 1e-9         /* a value of 0 ns lands here */
/* bucket indexes kept: 2^-30 s (under 1 ns) .. 2^14 s (4.5 h); beyond, the end ones */
#define PROM_NATIVE_MIN_INDEX (-30 * (1 << PROM_NATIVE_SCHEMA))
#define PROM_NATIVE_MAX_INDEX (14 << PROM_NATIVE_SCHEMA)

struct prom_native {
	int32_t halved;         /* times its schema was halved: PROM_NATIVE_SCHEMA - halved */
	int32_t lo;             /* index of c[0] */
	uint32_t n;             /* buckets in c */
	uint64_t *c;
	uint64_t zero;          /* values <= PROM_NATIVE_ZERO_S */
};

/* The bucket of v seconds (> PROM_NATIVE_ZERO_S) at PROM_NATIVE_SCHEMA,
 * clamped to the kept range. */
int prom_native_index(double v_s);
/* Bucket i of schema s as a bucket of schema s - 1 (ceil(i / 2)). */
static inline int32_t prom_native_halve(int32_t i)
{
	return (i + 1) >> 1;    /* arithmetic shift: floor, so ceil of i / 2 */
}
static inline int32_t prom_native_schema(const struct prom_native *h)
{
	return PROM_NATIVE_SCHEMA - h->halved;
}
/* Counts a duration of v_ns >= 0; false when out of memory (not counted). */
bool prom_native_add(struct prom_native *h, int64_t v_ns);
void prom_native_free(struct prom_native *h);
/* The Histogram message's native fields: schema, zero_threshold, zero_count,
 * positive_span and positive_delta. */
void prom_native_encode(const struct prom_native *h, struct pbuf *b);

#endif
