/* kpi_gpu_split.h - a step's GPU time per request: the busy time of the step's
 * kernels and its split across the step's sequences by token share. Header-only
 * so that agent/ uses the same arithmetic as the tests of cupti/. */
#ifndef KPI_GPU_SPLIT_H
#define KPI_GPU_SPLIT_H

#include <stdint.h>
#include <stdlib.h>

struct kpi_gpu_span {
	uint64_t start_ns, end_ns; /* one kernel (or copy) on the GPU; end >= start */
};

static int kpi_gpu_span_cmp(const void *a, const void *b)
{
	const struct kpi_gpu_span *x = a, *y = b;
	return x->start_ns < y->start_ns ? -1 : x->start_ns > y->start_ns;
}

/* GPU busy time of a set of spans: the length of their union, so kernels that
 * overlap on concurrent streams count once. Sorts spans in place. */
static inline uint64_t kpi_gpu_busy_ns(struct kpi_gpu_span *spans, int n)
{
	uint64_t busy = 0, cur_s = 0, cur_e = 0;
	int open = 0;

	if (n <= 0)
		return 0;
	qsort(spans, (size_t)n, sizeof(*spans), kpi_gpu_span_cmp);
	for (int i = 0; i < n; i++) {
		uint64_t s = spans[i].start_ns, e = spans[i].end_ns;
		if (e < s)
			continue; /* malformed: ignore rather than count negative time */
		if (open && s <= cur_e) {
			if (e > cur_e)
				cur_e = e;
			continue;
		}
		if (open)
			busy += cur_e - cur_s;
		cur_s = s, cur_e = e, open = 1;
	}
	if (open)
		busy += cur_e - cur_s;
	return busy;
}

/* Splits gpu_ns across n sequences in proportion to the tokens each had in the
 * step (prompt-chunk length for a prefilling sequence, 1 for a decoding one).
 * Cumulative rounding: out[i] is within 1 ns of the exact share and the out[]
 * sum to gpu_ns exactly, so per-request GPU time adds up to the step's. With
 * no tokens at all the time is split evenly. Returns 0, or -1 when n <= 0. */
static inline int kpi_gpu_split_by_tokens(uint64_t gpu_ns, const uint32_t *tokens, int n,
					  uint64_t *out)
{
	unsigned __int128 total = 0, cum = 0;
	uint64_t prev = 0;

	if (n <= 0)
		return -1;
	for (int i = 0; i < n; i++)
		total += tokens[i];
	for (int i = 0; i < n; i++) {
		cum += total ? tokens[i] : 1;
		uint64_t upto = (uint64_t)((unsigned __int128)gpu_ns * cum / (total ? total : (unsigned)n));
		out[i] = upto - prev;
		prev = upto;
	}
	return 0;
}

#endif
