/* logits.h - a model's full next-token logits at every position of a set of
 * token sequences fed in lockstep (teacher forcing), straight through the
 * backend: what kpi-infer --kl-divergence and the greedy comparison with
 * llama.cpp read. The engine's own steps give logits only where it samples. */
#ifndef KPI_ENGINE_LOGITS_H
#define KPI_ENGINE_LOGITS_H

#include <stddef.h>
#include <stdint.h>

struct model;
struct logits_run;

/* Loads path and a CPU backend for n_seqs sequences of up to max_len
 * tokens each; NULL with one line in err. */
struct logits_run *logits_open(const char *path, int n_seqs, int max_len, int threads, char *err,
			       size_t errlen);
void logits_close(struct logits_run *r);
const struct model *logits_model(const struct logits_run *r);

/* Feeds tokens[s] at position pos of every sequence s (positions go
 * 0, 1, 2, ... in order) and writes each one's logits for the next
 * position to logits + s * vocab_size. Returns 0, or -1 with err set. */
int logits_step(struct logits_run *r, const int32_t *tokens, int pos, float *logits, char *err,
		size_t errlen);

#endif
