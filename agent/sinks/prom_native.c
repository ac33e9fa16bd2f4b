/* prom_native.c - native histogram buckets of durations and their protobuf
 * fields (prom_native.h). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "prom_native.h"

#define PER_OCTAVE (1 << PROM_NATIVE_SCHEMA)
/* A run of at most this many empty buckets stays inside a span (as zero
 * deltas) rather than starting a new one: fewer bytes either way. */
#define SPAN_GAP 2

/* bounds[i] = 2^(i/2^s - 1): the upper bounds of one octave's buckets as
 * frexp's fractions in [0.5, 1) */
static double bounds[PER_OCTAVE];
static pthread_once_t bounds_once = PTHREAD_ONCE_INIT;

static void bounds_init(void)
{
	for (int i = 0; i < PER_OCTAVE; i++)
		bounds[i] = exp2((double)i / PER_OCTAVE - 1);
}

int prom_native_index(double v_s)
{
	int e;
	double frac = frexp(v_s, &e);
	int lo = 0, hi = PER_OCTAVE;

	pthread_once(&bounds_once, bounds_init);
	/* the first bound >= frac; frac == 0.5 exactly is 2^(e-1), bucket
	 * (e-1)*2^s, whose upper bound it is */
	while (lo < hi) {
		int mid = (lo + hi) / 2;
		if (bounds[mid] < frac)
			lo = mid + 1;
		else
			hi = mid;
	}
	long k = (long)(e - 1) * PER_OCTAVE + lo;
	return k < PROM_NATIVE_MIN_INDEX ? PROM_NATIVE_MIN_INDEX : k > PROM_NATIVE_MAX_INDEX ? PROM_NATIVE_MAX_INDEX : (int)k;
}

/* Halves h's schema: each pair of buckets (2j - 1, 2j) becomes bucket j. */
static void halve(struct prom_native *h)
{
	int32_t lo = prom_native_halve(h->lo);
	uint32_t n = 0;

	for (uint32_t k = 0; k < h->n; k++) {
		uint64_t v = h->c[k];
		uint32_t j = (uint32_t)(prom_native_halve(h->lo + (int32_t)k) - lo);
		if (j >= n) {   /* j <= k: every slot up to k was read already */
			h->c[j] = 0;
			n = j + 1;
		}
		h->c[j] += v;
	}
	h->lo = lo;
	h->n = n;
	h->halved++;
}

bool prom_native_add(struct prom_native *h, int64_t v_ns)
{
	double v = (double)v_ns / 1e9;

	if (v <= PROM_NATIVE_ZERO_S) {
		h->zero++;
		return true;
	}
	int32_t k = prom_native_index(v);
	for (int32_t s = 0; s < h->halved; s++)
		k = prom_native_halve(k);
	/* a span past the bound: coarser buckets, fewer of them (the kept
	 * index range needs at most 44 octaves: schema 5 holds it in 1408) */
	while (h->n) {
		int32_t first = k < h->lo ? k : h->lo, last = h->lo + (int32_t)h->n - 1;
		if (k > last)
			last = k;
		if (last - first + 1 <= PROM_NATIVE_MAX_BUCKETS)
			break;
		halve(h);
		k = prom_native_halve(k);
	}
	if (!h->n) {
		h->c = calloc(1, sizeof(*h->c));
		if (!h->c)
			return false;
		h->lo = k;
		h->n = 1;
	} else if (k < h->lo) {
		uint32_t add = (uint32_t)(h->lo - k), n = h->n + add;
		uint64_t *c = realloc(h->c, n * sizeof(*c));
		if (!c)
			return false;
		memmove(c + add, c, h->n * sizeof(*c));
		memset(c, 0, add * sizeof(*c));
		h->c = c;
		h->lo = k;
		h->n = n;
	} else if (k >= h->lo + (int32_t)h->n) {
		uint32_t n = (uint32_t)(k - h->lo) + 1;
		uint64_t *c = realloc(h->c, n * sizeof(*c));
		if (!c)
			return false;
		memset(c + h->n, 0, (n - h->n) * sizeof(*c));
		h->c = c;
		h->n = n;
	}
	h->c[k - h->lo]++;
	return true;
}

void prom_native_free(struct prom_native *h)
{
	free(h->c);
	memset(h, 0, sizeof(*h));
}

/* Histogram fields (io.prometheus.client metrics.proto) */
enum { H_SCHEMA = 5, H_ZERO_THRESHOLD = 6, H_ZERO_COUNT = 7, H_POSITIVE_SPAN = 12, H_POSITIVE_DELTA = 13 };
enum { SPAN_OFFSET = 1, SPAN_LENGTH = 2 };

void prom_native_encode(const struct prom_native *h, struct pbuf *b)
{
	pbuf_sint(b, H_SCHEMA, prom_native_schema(h));
	pbuf_double(b, H_ZERO_THRESHOLD, PROM_NATIVE_ZERO_S);
	pbuf_uint(b, H_ZERO_COUNT, h->zero);
	/* spans: runs of buckets from the first to the last non-empty one,
	 * gaps of up to SPAN_GAP empty buckets kept inside as zero counts;
	 * a span's offset is from the end of the one before (the first's:
	 * its index) */
	int64_t prev_count = 0;
	int32_t end = 0;                /* index after the last span */
	bool any = false;
	struct pbuf deltas = { 0 };

	for (uint32_t i = 0; i < h->n;) {
		if (!h->c[i]) {
			i++;
			continue;
		}
		uint32_t j = i, last = i;
		while (j < h->n && j - last <= SPAN_GAP + 1) {
			if (h->c[j])
				last = j;
			j++;
		}
		struct pbuf span = { 0 };
		int32_t start = h->lo + (int32_t)i;
		pbuf_sint(&span, SPAN_OFFSET, any ? start - end : start);
		pbuf_uint(&span, SPAN_LENGTH, last - i + 1);
		pbuf_message(b, H_POSITIVE_SPAN, &span);
		b->oom |= span.oom;
		pbuf_free(&span);
		for (uint32_t k = i; k <= last; k++) {
			pbuf_sint(&deltas, H_POSITIVE_DELTA, (int64_t)h->c[k] - prev_count);
			prev_count = (int64_t)h->c[k];
		}
		end = h->lo + (int32_t)last + 1;
		any = true;
		i = last + 1;
	}
	/* repeated fields may interleave; spans first, then the deltas */
	pbuf_bytes(b, deltas.p, deltas.len);
	b->oom |= deltas.oom;
	pbuf_free(&deltas);
}
