/* backend.h - the forward-pass interface the engine drives: one batch step over
 * many sequences, K/V addressed through the engine's block tables.
 *
 * The engine owns scheduling and the block tables (which KV block holds which
 * 16 positions of which sequence); a backend owns everything the math needs:
 * its copy or view of the weights, the KV storage for kv_blocks blocks, and
 * its scratch. The CPU backend (cpu_backend.c) reads the mmap'd GGUF in place;
 * a CUDA backend (daemon/cuda/) uploads the same tensors from struct model.
 * The one host pointer into backend memory is kv_rows, where the KV pool is
 * in host memory. */
#ifndef KPI_ENGINE_BACKEND_H
#define KPI_ENGINE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct model;
struct backend;

/* Sizes fixed at create: the backend allocates KV storage and all scratch
 * up front, so forward never allocates. */
struct backend_params {
	const struct model *model; /* host view of the loaded GGUF (weights, shapes) */
	int kv_blocks;             /* KV pool size, in blocks */
	int block_size;            /* positions per block */
	int max_tokens;            /* most tokens in one step (prefill + decode) */
	int max_seqs;              /* most sequences in one step */
	int threads;               /* CPU worker threads (>= 1) */
};

/* One step. Tokens are grouped by sequence: sequence s owns tokens
 * [seq_start[s], seq_start[s+1]) at consecutive positions starting at
 * pos0[s]. The backend writes their K/V into the blocks named by the
 * sequence's block table (position p lives in block_table[p / block_size],
 * slot p % block_size; the engine has allocated every block up to the last
 * position), then attends over positions [0, p] through the same table.
 * For every sequence with logits_row[s] >= 0 it writes the logits of the
 * sequence's last token to logits + logits_row[s] * vocab_size (host memory). */
struct backend_batch {
	int n_seqs;
	int n_tokens;
	const int32_t *tokens;      /* [n_tokens] */
	const int *seq_start;       /* [n_seqs + 1] */
	const int *pos0;            /* [n_seqs] position of each sequence's first token here */
	const int32_t *const *block_tables; /* [n_seqs] -> [ceil((pos0 + n) / block_size)] block ids */
	const int *logits_row;      /* [n_seqs] row in logits, or -1 */
	float *logits;              /* [rows][vocab_size], host */
	/* When set, called on the calling thread after each layer's K/V of every
	 * token of the step are in the cache (and before the next layer starts):
	 * the engine streams a finished prefill's KV layer by layer from here. */
	void (*layer_done)(void *ctx, int layer);
	void *layer_ctx;
};

struct backend_ops {
	const char *name; /* "cpu", "cuda" */
	/* Returns NULL and one line in err on failure (what and what to do). */
	struct backend *(*create)(const struct backend_params *p, char *err, size_t errlen);
	void (*destroy)(struct backend *b);
	/* Returns 0, or -1 with err set; never allocates. */
	int (*forward)(struct backend *b, const struct backend_batch *batch, char *err, size_t errlen);
	/* Copies every layer's K/V of block src into block dst (copy-on-write
	 * for prefix sharing). */
	void (*kv_copy)(struct backend *b, int32_t dst, int32_t src);
	/* The cache's element type: enum kpi_kv_wire_dtype (abi/kpi_kv_wire.h). */
	int (*kv_dtype)(const struct backend *b);
	/* Copy n positions from slot0 of one layer's block, K and V of every KV
	 * head, out of the cache into host memory (kv_read) or into the cache
	 * from host memory (kv_write). Host layout: head h's n rows of head_dim
	 * elements start at k + h * head_stride elements (likewise v). Only
	 * between steps or from layer_done. */
	void (*kv_read)(struct backend *b, int layer, int32_t block, int slot0, int n, void *k, void *v,
			size_t head_stride);
	void (*kv_write)(struct backend *b, int layer, int32_t block, int slot0, int n, const void *k,
			 const void *v, size_t head_stride);
	/* Where KV head g's rows of one layer's block stand (K, or V when v):
	 * block_size rows of head_dim elements, slot 0 first, in host memory
	 * that stays put for the backend's life. NULL op: the pool is not in
	 * host memory (kv_read copies it out). A transfer sends and receives
	 * KV from here without a copy. */
	void *(*kv_rows)(struct backend *b, int layer, int32_t block, int g, bool v);
};

/* Bytes of KV storage per cached position for this model, the same for every
 * backend (F32 K and V, all layers): the engine sizes the default pool with it. */
size_t backend_kv_bytes_per_token(const struct model *m);

extern const struct backend_ops cpu_backend_ops;
/* Defined by daemon/cuda/ when CUDA is built; NULL otherwise. */
extern const struct backend_ops cuda_backend_ops __attribute__((weak));

#endif
