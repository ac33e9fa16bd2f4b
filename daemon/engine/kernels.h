/* kernels.h - the CPU math of the forward pass as small pure functions over
 * plain arrays (no threads, no engine state), each easy to check against a
 * naive loop. AVX2+FMA (+F16C) inner loops where the compiler targets them,
 * scalar fallbacks elsewhere. */
#ifndef KPI_ENGINE_KERNELS_H
#define KPI_ENGINE_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

float f16_to_f32(uint16_t h);
/* Round to nearest even, as the F16C instruction does. */
uint16_t f32_to_f16(float f);
void f32_to_f16_row(uint16_t *dst, const float *src, int n);

/* A weight matrix W (rows, cols) repacked for matmul_rows: panels of
 * KPI_PANEL consecutive output rows, each stored input by input
 * (panel[i][KPI_PANEL]), rows padded to whole panels with zeros. One vector
 * load then holds one input's weights for 16 outputs, broadcast against
 * every batch row, and each output sums its inputs in order in one lane. */
#define KPI_PANEL 32
struct packed_mat {
	const void *data;
	uint32_t type; /* as the source: F32 and F16 here, the quantized types in qmatmul.h */
	int rows, cols;
};

/* The instruction set the F32/F16 matmul was compiled for: "avx512-fma",
 * "avx2-fma" or "scalar". */
const char *matmul_kernels_name(void);

/* Bytes pack_matrix writes for a (rows, cols) matrix of this type. */
size_t pack_bytes(uint32_t type, int rows, int cols);
/* Repacks W (row-major, GGML_F32 or GGML_F16) into dst (pack_bytes of it,
 * 64-byte aligned for speed) and describes it in p. */
void pack_matrix(struct packed_mat *p, void *dst, const void *w, uint32_t type, int rows, int cols);

/* Lines of another stream that a compute-bound matmul fetches into L2 while
 * it computes, one line per input column: n segments of len bytes (a
 * multiple of 64) at ptr[0..n).  i and off are the cursor. */
struct fetch_list {
	const char **ptr;
	int n, len;
	int i, off;
};

/* Y[b][o] (+)= sum_i W[o][i] * X[b][i] for rows o in [o0, o1), all nb batch
 * rows. X is (nb, ldx), Y is (nb, ldy). Each output is one fixed-order sum
 * whatever nb, o0 or o1 are: batching and threading never change a result
 * bit. Row ranges that start or end inside a panel compute the whole panel
 * and store only their rows, so split work on panel boundaries. */
void matmul_rows(float *y, int ldy, const struct packed_mat *w, const float *x, int ldx, int nb, int o0,
		 int o1, bool accumulate);
/* The same, fetching side's lines as it goes (side NULL: matmul_rows). */
void matmul_rows_fetch(float *y, int ldy, const struct packed_mat *w, const float *x, int ldx, int nb,
		       int o0, int o1, bool accumulate, struct fetch_list *side);

/* out = x / rms(x) * weight, over n elements. */
void rmsnorm(float *out, const float *x, const float *weight, int n, float eps);

/* RoPE angles: cs[(pos * head_dim/2 + i) * 2 + {0,1}] = cos, sin of
 * pos * base^(-2i/head_dim), for pos in [0, n_pos). */
void rope_table(float *cs, int n_pos, int head_dim, float base);

/* Rotates adjacent pairs (x[2i], x[2i+1]) of each of n_heads heads by the
 * angles of one position (cs = rope_table row, head_dim/2 cos/sin pairs). */
void rope(float *x, int n_heads, int head_dim, const float *cs);

/* h1 = silu(h1) * h3 */
void swiglu(float *h1, const float *h3, int n);

/* Paged KV cache of one layer, F16 elements (half the bytes each decode
 * step reads; the CUDA backend stores the same): block b holds, for each KV
 * head g, block_size positions of head_dim values:
 * k[((b * n_kv_heads + g) * block_size + slot) * head_dim]. */
struct kv_layer_view {
	uint16_t *k, *v;
	int n_kv_heads, head_dim, block_size;
};

static inline size_t kv_offset(const struct kv_layer_view *c, int32_t block, int g, int slot)
{
	return (((size_t)block * c->n_kv_heads + g) * c->block_size + slot) * c->head_dim;
}

/* Attention of the n_q query heads that share KV head g (GQA group) at
 * position pos: each reads keys/values 0..pos through block_table. q is
 * (n_q, head_dim), out is (n_q, head_dim), scores is scratch (n_q * (pos + 1)). */
void attention_paged(float *out, const float *q, int n_q, const struct kv_layer_view *c, int g,
		     const int32_t *block_table, int pos, float *scores);

#endif
