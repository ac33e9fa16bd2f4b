/* sample.h - next-token choice from logits: greedy, or temperature and
 * top-p (nucleus) with the request's own seeded generator, so the same seed
 * gives the same tokens whatever else shares the batch. */
#ifndef KPI_ENGINE_SAMPLE_H
#define KPI_ENGINE_SAMPLE_H

#include <stdint.h>

#include "daemon/engine.h"

struct sample_scratch {
	float *probs;   /* [vocab] */
	int32_t *order; /* [vocab] */
};

uint64_t sample_rng_seed(uint64_t seed);
/* Uniform in [0, 1). */
double sample_rng_next(uint64_t *state);
int32_t sample_token(const float *logits, int vocab, const struct sampling_params *sp,
		     uint64_t *rng, struct sample_scratch *s);

#endif
