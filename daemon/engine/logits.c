/* logits.c - lockstep decode of several sequences through the CPU backend,
 * every position's logits kept (logits.h). Each sequence owns a contiguous
 * run of KV blocks; a step is one token of each, as a decode step is. */
#include "daemon/engine/logits.h"

#include <stdio.h>
#include <stdlib.h>

#include "daemon/engine/backend.h"
#include "daemon/engine/model.h"

#define LOGITS_BLOCK 16

struct logits_run {
	struct model *m;
	struct backend *be;
	int n_seqs, max_len, blocks_per_seq;
	int32_t *tables;        /* [n_seqs][blocks_per_seq] */
	const int32_t **table_of; /* [n_seqs] */
	int *start, *pos0, *lrow;
};

struct logits_run *logits_open(const char *path, int n_seqs, int max_len, int threads, char *err,
			       size_t errlen)
{
	struct logits_run *r = calloc(1, sizeof(*r));
	r->m = model_load(path, err, errlen);
	if (!r->m)
		goto fail;
	if (max_len > r->m->info.context_length) {
		snprintf(err, errlen, "%s: %d positions asked, the model's context is %d", path, max_len,
			 r->m->info.context_length);
		goto fail;
	}
	r->n_seqs = n_seqs;
	r->max_len = max_len;
	r->blocks_per_seq = (max_len + LOGITS_BLOCK - 1) / LOGITS_BLOCK;
	struct backend_params bp = { r->m, n_seqs * r->blocks_per_seq, LOGITS_BLOCK, n_seqs, n_seqs,
				     threads > 0 ? threads : 1 };
	r->be = cpu_backend_ops.create(&bp, err, errlen);
	if (!r->be)
		goto fail;
	r->tables = malloc(sizeof(int32_t) * n_seqs * r->blocks_per_seq);
	r->table_of = malloc(sizeof(*r->table_of) * n_seqs);
	r->start = malloc(sizeof(int) * (n_seqs + 1));
	r->pos0 = malloc(sizeof(int) * n_seqs);
	r->lrow = malloc(sizeof(int) * n_seqs);
	if (!r->tables || !r->table_of || !r->start || !r->pos0 || !r->lrow) {
		snprintf(err, errlen, "out of memory for %d sequences", n_seqs);
		goto fail;
	}
	for (int s = 0; s < n_seqs; s++) {
		for (int b = 0; b < r->blocks_per_seq; b++)
			r->tables[s * r->blocks_per_seq + b] = s * r->blocks_per_seq + b;
		r->table_of[s] = r->tables + (size_t)s * r->blocks_per_seq;
		r->start[s] = s;
		r->lrow[s] = s;
	}
	r->start[n_seqs] = n_seqs;
	return r;
fail:
	logits_close(r);
	return NULL;
}

void logits_close(struct logits_run *r)
{
	if (!r)
		return;
	if (r->be)
		cpu_backend_ops.destroy(r->be);
	model_free(r->m);
	free(r->tables);
	free(r->table_of);
	free(r->start);
	free(r->pos0);
	free(r->lrow);
	free(r);
}

const struct model *logits_model(const struct logits_run *r)
{
	return r->m;
}

int logits_step(struct logits_run *r, const int32_t *tokens, int pos, float *logits, char *err,
		size_t errlen)
{
	if (pos < 0 || pos >= r->max_len) {
		snprintf(err, errlen, "position %d is outside the %d opened for", pos, r->max_len);
		return -1;
	}
	for (int s = 0; s < r->n_seqs; s++)
		r->pos0[s] = pos;
	struct backend_batch b = { .n_seqs = r->n_seqs, .n_tokens = r->n_seqs, .tokens = tokens,
				   .seq_start = r->start, .pos0 = r->pos0, .block_tables = r->table_of,
				   .logits_row = r->lrow, .logits = logits };
	return cpu_backend_ops.forward(r->be, &b, err, errlen);
}
