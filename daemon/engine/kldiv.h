/* kldiv.h - what a model's quantization costs in accuracy: for a fixed token
 * sequence, each position's next-token distribution against a reference
 * model's (the F32 or F16 file the quantized one came from), reported as
 * llama.cpp's `llama-perplexity --kl-divergence` reports it (kpi-infer
 * --kl-divergence). */
#ifndef KPI_ENGINE_KLDIV_H
#define KPI_ENGINE_KLDIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct kldiv_opts {
	const char *model;     /* the model measured (e.g. a Q4_K file) */
	const char *reference; /* the model it is measured against (e.g. its F32 file) */
	const char *text;      /* text file tokenized into the sequence; NULL: seeded tokens */
	int ctx;               /* tokens per chunk (0: 256, capped at the context) */
	int chunks;            /* chunks (0: 8, or as many as the text fills) */
	int threads;           /* backend threads (0: online CPUs) */
	bool json;             /* one JSON object instead of the text report */
};

/* Runs both models over the same chunks and writes the report to out.
 * Each chunk is BOS and ctx - 1 tokens; as in llama-perplexity, the second
 * half of each chunk is scored (every scored token has at least ctx / 2
 * tokens before it). Returns 0, or -1 with one line in err. */
int kldiv_run(const struct kldiv_opts *o, FILE *out, char *err, size_t errlen);

#endif
