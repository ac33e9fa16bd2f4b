/* kernels.h - the CUDA backend's device math, callable from C: each function
 * launches its kernel(s) on `stream` and returns the launch's cudaError_t as
 * an int (0 on success). Pointers are device pointers. The CPU twins are in
 * daemon/engine/kernels.h; these must agree with them. */
#ifndef KPI_CUDA_KERNELS_H
#define KPI_CUDA_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *kpi_stream_t;

enum kpi_kv_dtype { KPI_KV_F16 = 0, KPI_KV_BF16 = 1 };
enum kpi_wtype { KPI_W_F32 = 0, KPI_W_F16 = 1 }; /* = GGML_F32 / GGML_F16 */

/* Tokens of one step, on the device. Token t belongs to sequence tok_seq[t]
 * at position tok_pos[t]; sequence s's block table is
 * block_tables[s * bt_stride .. + ceil((pos + 1) / block_size)]. */
struct kpi_step_dev {
	const int32_t *tokens;       /* [T] */
	const int32_t *tok_seq;      /* [T] */
	const int32_t *tok_pos;      /* [T] */
	const int32_t *block_tables; /* [n_seqs][bt_stride] */
	int bt_stride;
	int n_tokens;
};

/* Paged KV cache of one layer, the CPU layout: element (block, g, slot, d) at
 * ((block * n_kv + g) * block_size + slot) * head_dim + d; K and V separate. */
struct kpi_kv_dev {
	void *k, *v;                 /* __half or __nv_bfloat16 */
	enum kpi_kv_dtype dtype;
	int n_kv, head_dim, block_size;
};

/* x[t] = embedding row tokens[t] (F32 or F16 table) */
int kpi_cuda_embed(float *x, const void *table, enum kpi_wtype wt, const int32_t *tokens, int T,
		   int dim, kpi_stream_t st);
/* out[t] = x[t] / rms(x[t]) * w; out16 (if not NULL) gets the same as __half for F16 GEMMs */
int kpi_cuda_rmsnorm(float *out, void *out16, const float *x, const float *w, int T, int dim,
		     float eps, kpi_stream_t st);
/* f32 -> f16 copy (activations for F16-weight GEMMs) */
int kpi_cuda_to_f16(void *out16, const float *x, long n, kpi_stream_t st);
/* Rotates q (T, n_heads, hd) and k (T, n_kv, hd) by their tokens' positions;
 * cs is the rope table (ctx, hd / 2, 2) as in rope_table(). */
int kpi_cuda_rope(float *q, float *k, const float *cs, const int32_t *tok_pos, int T, int n_heads,
		  int n_kv, int hd, kpi_stream_t st);
/* Writes k, v (T, n_kv, hd) into the cache at each token's (block, slot). */
int kpi_cuda_kv_write(const struct kpi_kv_dev *kv, const float *k, const float *v,
		      const struct kpi_step_dev *s, kpi_stream_t st);
/* h1 = silu(h1) * h3, n elements; h16 (if not NULL) gets the result as __half */
int kpi_cuda_swiglu(float *h1, void *h16, const float *h3, long n, kpi_stream_t st);
/* rows[r] = x[src[r]] (dim floats each) */
int kpi_cuda_gather_rows(float *rows, const float *x, const int32_t *src, int n, int dim,
			 kpi_stream_t st);

/* Paged attention for every token of the step: token t's n_heads query heads
 * attend over positions [0, tok_pos[t]] of its sequence through its block
 * table, causal and aware of chunked prefill (a chunk sees every earlier token
 * of its sequence and its own up to itself; kv_write runs first). out is
 * (T, n_heads, hd). Tokens come in two lists (kpi_cuda_plan_attention):
 * - decode_tok[n_decode]: single tokens, the paged decode kernel (grid over KV
 *   heads, so each K/V row is read once per GQA group), split into
 *   KPI_CUDA_PARTITION-token partitions plus a reduce kernel when
 *   kpi_cuda_attn_use_partitions() says so;
 * - prefill_tiles[n_tiles][2] = (first token, count <= kpi_cuda_tile_tokens):
 *   consecutive tokens of one sequence, the query-tiled prefill kernel.
 * part_scratch holds kpi_cuda_attn_scratch_floats() floats. Returns -1 for a
 * shape without a kernel (see kpi_cuda_attn_supported), else the launch's error. */
int kpi_cuda_attention(float *out, const float *q, const struct kpi_kv_dev *kv,
		       const struct kpi_step_dev *s, int n_heads, int max_ctx,
		       const int32_t *decode_tok, int n_decode, const int32_t *prefill_tiles,
		       int n_tiles, float *part_scratch, int n_sm, kpi_stream_t st);
long kpi_cuda_attn_scratch_floats(int T, int n_heads, int hd, int ctx);


/* Naive attention for the tests: one thread per (token, head), reads K/V
 * through the block table, fp32 throughout. */
int kpi_cuda_attention_naive(float *out, const float *q, const struct kpi_kv_dev *kv,
			     const struct kpi_step_dev *s, int n_heads, kpi_stream_t st);

/* Fills n elements with uniform values in [-amp, amp] from seed; kind is
 * KPI_KV_F16, KPI_KV_BF16, or 2 for float. For tests and benchmarks. */
int kpi_cuda_fill_random(void *p, long n, int kind, uint64_t seed, float amp, kpi_stream_t st);

#define KPI_CUDA_PARTITION 512
#define KPI_CUDA_TILE_ROWS 32 /* query rows (tokens x group heads) per prefill CTA */

#define KPI_CUDA_MAX_GROUP 8   /* query heads per KV head the kernels handle */

/* 1 when a shape has a kernel: head dim 64/128, block size 8/16/32, GQA group <= 8 */
static inline int kpi_cuda_attn_supported(int head_dim, int block_size, int group)
{
	return (head_dim == 64 || head_dim == 128) &&
	       (block_size == 8 || block_size == 16 || block_size == 32) && group >= 1 &&
	       group <= KPI_CUDA_MAX_GROUP;
}

/* The documented selection rule (docs/cuda.md): split decode attention into
 * KPI_CUDA_PARTITION-token partitions (+ a reduce) when the longest context
 * exceeds one partition and the plain grid (decode tokens x KV heads) would
 * give fewer than 2 CTAs per SM. */
static inline int kpi_cuda_attn_use_partitions(int n_decode, int n_kv, int max_ctx, int n_sm)
{
	return max_ctx > KPI_CUDA_PARTITION && (long)n_decode * n_kv < 2L * n_sm;
}

static inline int kpi_cuda_tile_tokens(int group)
{
	return KPI_CUDA_TILE_ROWS / group;
}

/* Splits a step's sequences (seq_start[n_seqs + 1], tokens grouped by
 * sequence) into decode tokens (sequences with one token this step) and
 * prefill tiles. decode_tok needs room for seq_start[n_seqs] ints, tiles for
 * 2 * (seq_start[n_seqs] + n_seqs). */
static inline void kpi_cuda_plan_attention(const int *seq_start, int n_seqs, int group,
					   int32_t *decode_tok, int *n_decode, int32_t *tiles,
					   int *n_tiles)
{
	int qt = kpi_cuda_tile_tokens(group);
	*n_decode = *n_tiles = 0;
	for (int s = 0; s < n_seqs; s++) {
		int a = seq_start[s], b = seq_start[s + 1];
		if (b - a == 1) {
			decode_tok[(*n_decode)++] = a;
			continue;
		}
		for (int t = a; t < b; t += qt) {
			tiles[2 * *n_tiles] = t;
			tiles[2 * *n_tiles + 1] = b - t < qt ? b - t : qt;
			(*n_tiles)++;
		}
	}
}

#ifdef __cplusplus
}
#endif

#endif
