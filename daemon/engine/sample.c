/* sample.c - greedy (lowest id on ties), temperature and top-p sampling. */
#include "daemon/engine/sample.h"

#include <math.h>
#include <stdlib.h>

uint64_t sample_rng_seed(uint64_t seed)
{
	return seed ^ 0x853c49e6748fea9bull;
}

double sample_rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (double)(z >> 11) * 0x1p-53;
}

static const float *cmp_probs;

static int cmp_desc(const void *a, const void *b)
{
	float x = cmp_probs[*(const int32_t *)a], y = cmp_probs[*(const int32_t *)b];
	if (x != y)
		return x > y ? -1 : 1;
	return *(const int32_t *)a < *(const int32_t *)b ? -1 : 1;
}

int32_t sample_token(const float *logits, int vocab, const struct sampling_params *sp,
		     uint64_t *rng, struct sample_scratch *s)
{
	int32_t best = 0;
	for (int i = 1; i < vocab; i++)
		if (logits[i] > logits[best])
			best = i;
	if (!(sp->temperature > 0))
		return best;
	float inv_t = 1.0f / sp->temperature, mx = logits[best];
	double sum = 0;
	for (int i = 0; i < vocab; i++) {
		s->probs[i] = expf((logits[i] - mx) * inv_t);
		sum += s->probs[i];
	}
	double r = sample_rng_next(rng);
	if (sp->top_p > 0 && sp->top_p < 1) {
		for (int i = 0; i < vocab; i++)
			s->order[i] = i;
		cmp_probs = s->probs;
		qsort(s->order, vocab, sizeof(int32_t), cmp_desc);
		double keep = 0, cut = sp->top_p * sum;
		int n = 0;
		while (n < vocab && (n == 0 || keep < cut))
			keep += s->probs[s->order[n++]];
		double acc = 0, target = r * keep;
		for (int i = 0; i < n; i++) {
			acc += s->probs[s->order[i]];
			if (target < acc)
				return s->order[i];
		}
		return s->order[n - 1];
	}
	double acc = 0, target = r * sum;
	for (int i = 0; i < vocab; i++) {
		acc += s->probs[i];
		if (target < acc)
			return i;
	}
	return best;
}
