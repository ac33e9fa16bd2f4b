/* kernels.c - matmul micro-kernels (4 weight rows x 3 batch rows of
 * accumulators, so each weight load feeds three sequences), RMSNorm, RoPE,
 * SwiGLU and paged attention. */
#include "daemon/engine/kernels.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/engine/gguf.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define KPI_AVX2 1
#endif

float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, x;
	if (exp == 0) {
		if (man == 0) {
			x = sign;
		} else { /* subnormal: normalise */
			exp = 127 - 15 + 1;
			while (!(man & 0x400)) {
				man <<= 1;
				exp--;
			}
			x = sign | (exp << 23) | ((man & 0x3ff) << 13);
		}
	} else if (exp == 31) {
		x = sign | 0x7f800000 | (man << 13);
	} else {
		x = sign | ((exp + 127 - 15) << 23) | (man << 13);
	}
	float f;
	memcpy(&f, &x, 4);
	return f;
}

/* ---- matmul ------------------------------------------------------------ */

#ifdef KPI_AVX2
static inline float hsum8(__m256 v)
{
	__m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
	lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
	return _mm_cvtss_f32(lo);
}

/* The matmul vector: 16 lanes with AVX-512 (32 registers: 4 x 6
 * accumulators + 4 weights + 1 input), else 8 lanes of AVX2 (16 registers:
 * 4 x 3 accumulators, the weights read from L1 as FMA operands). Each output
 * accumulates column i in lane i % VL whatever the batch, so every
 * micro-kernel shape gives the same bits. */
#ifndef PF_HINT
#define PF_HINT _MM_HINT_NTA /* the stream is read once per step: keep it out of L2/L3 */
#endif
#ifndef B1_ROWS
#define B1_ROWS 4 /* weight rows per block with one batch row: measured 1, 2, 4 alike */
#endif
#ifndef PF_ROWS
#define PF_ROWS 4 /* rows ahead in the one-sequence weight stream (the next block): measured best of 2..16 */
#endif
#ifdef __AVX512F__
#define MB 6
#define VL 16
typedef __m512 vf;
#define vzero() _mm512_setzero_ps()
#define vload(p) _mm512_loadu_ps(p)
#define vload_h(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define vfma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define vhsum(v) _mm512_reduce_add_ps(v)
#define in_reg(v) __asm__("" : "+v"(v)) /* no reload folded into each FMA */
#else
#define MB 3
#define VL 8
typedef __m256 vf;
#define vzero() _mm256_setzero_ps()
#define vload(p) _mm256_loadu_ps(p)
#define vload_h(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define vfma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define vhsum(v) hsum8(v)
#define in_reg(v) ((void)0) /* 12 accumulators leave too few registers */
#endif

/* R weight rows x B batch rows; R, B, F16 are constants after inlining, so
 * the accumulators live in registers. */
static inline __attribute__((always_inline)) void
mk(float *y, int ldy, const void *w, const int F16, const float *x, int ldx, int cols, int o, int b,
   const int R, const int B, bool accumulate)
{
	vf a[4][MB];
	for (int r = 0; r < R; r++)
		for (int j = 0; j < B; j++)
			a[r][j] = vzero();
	const float *xr[MB];
	for (int j = 0; j < B; j++)
		xr[j] = x + (size_t)(b + j) * ldx;
	const uint16_t *wh = (const uint16_t *)w + (size_t)o * cols;
	const float *wf = (const float *)w + (size_t)o * cols;
	int i = 0;
	for (; i + VL <= cols; i += VL) {
		if (B == 1) {
			vf xv = vload(xr[0] + i);
			for (int r = 0; r < R; r++) {
				/* a weight stream: fetch the same line of the row
				 * PF_ROWS rows on, ahead of the hardware prefetcher
				 * (which does not follow 4 interleaved row streams) */
				if (F16 && (i & 31) == 0)
					_mm_prefetch((const char *)(wh + (size_t)(r + PF_ROWS) * cols + i), PF_HINT);
				vf wv = F16 ? vload_h(wh + (size_t)r * cols + i) : vload(wf + (size_t)r * cols + i);
				a[r][0] = vfma(wv, xv, a[r][0]);
			}
		} else {
			/* R weight and then B input vectors loaded once each into
			 * registers for R x B FMAs: in_reg keeps the compiler
			 * from folding a reload into every FMA, which made the
			 * loop load-bound (1.4x slower at 16 sequences) */
			vf wv[4];
			for (int r = 0; r < R; r++) {
				wv[r] = F16 ? vload_h(wh + (size_t)r * cols + i) : vload(wf + (size_t)r * cols + i);
				in_reg(wv[r]);
			}
			for (int j = 0; j < B; j++) {
				vf xv = vload(xr[j] + i);
				in_reg(xv);
				for (int r = 0; r < R; r++)
					a[r][j] = vfma(wv[r], xv, a[r][j]);
			}
		}
	}
	for (int r = 0; r < R; r++)
		for (int j = 0; j < B; j++) {
			float s = vhsum(a[r][j]);
			for (int t = i; t < cols; t++)
				s = fmaf(F16 ? f16_to_f32(wh[(size_t)r * cols + t]) : wf[(size_t)r * cols + t],
					 xr[j][t], s);
			float *dst = y + (size_t)(b + j) * ldy + o + r;
			*dst = accumulate ? *dst + s : s;
		}
}

#define MK_CASE(R, B)                                                                           \
	case (R) * 8 + (B):                                                                     \
		if (f16)                                                                        \
			mk(y, ldy, w, 1, x, ldx, cols, o, b, R, B, accumulate);                 \
		else                                                                            \
			mk(y, ldy, w, 0, x, ldx, cols, o, b, R, B, accumulate);                 \
		break;

/* With several batch rows, each block of 4 F16 weight rows is converted once
 * into an F32 copy on the stack that then feeds every batch block from L1,
 * instead of costing a conversion (on the FMA ports) per use. Conversion is
 * exact, so the sums are the same bits as the direct F16 path. */
#define WROWS_MAX_COLS 16384 /* 256 KiB of stack; wider rows take the direct path */
#ifndef PF_BATCH_BYTES
#define PF_BATCH_BYTES 16384 /* weight bytes fetched ahead by the batched path: measured best of 8K..64K */
#endif

void matmul_rows(float *y, int ldy, const void *w, uint32_t wtype, const float *x, int ldx,
		 int cols, int nb, int o0, int o1, bool accumulate)
{
	if (wtype == GGML_F16 && nb > 1 && cols <= WROWS_MAX_COLS) {
		float wrows[4 * cols] __attribute__((aligned(64)));
		/* the first PF_BATCH_BYTES: the stream below starts that far ahead */
		const char *first = (const char *)((const uint16_t *)w + (size_t)o0 * cols);
		size_t total = (size_t)(o1 - o0) * cols * 2;
		for (size_t off = 0; off < total && off < PF_BATCH_BYTES; off += 64)
			_mm_prefetch(first + off, _MM_HINT_T0);
		for (int o = o0; o < o1; o += 4) {
			int R = o1 - o < 4 ? o1 - o : 4;
			const uint16_t *src = (const uint16_t *)w + (size_t)o * cols;
			int n = R * cols, i = 0;
			/* fetch PF_BATCH_BYTES ahead in the task's contiguous
			 * rows, one line per line converted (a burst per block
			 * leaves the loads below waiting on DRAM) */
			for (; i + 8 <= n; i += 8) {
				if ((i & 31) == 0)
					_mm_prefetch((const char *)(src + i) + PF_BATCH_BYTES, _MM_HINT_T0);
				_mm256_storeu_ps(wrows + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
			}
			for (; i < n; i++)
				wrows[i] = f16_to_f32(src[i]);
			/* rows o..o+R of y are rows 0..R of this block: shift y by o */
			matmul_rows(y + o, ldy, wrows, GGML_F32, x, ldx, cols, nb, 0, R, accumulate);
		}
		return;
	}
	const int f16 = wtype == GGML_F16;
	const int RB = nb == 1 ? B1_ROWS : 4;
	for (int o = o0; o < o1; o += RB) {
		int R = o1 - o < RB ? o1 - o : RB;
		for (int b = 0; b < nb; b += MB) {
			int B = nb - b < MB ? nb - b : MB;
			switch (R * 8 + B) {
				MK_CASE(1, 1) MK_CASE(1, 2) MK_CASE(1, 3)
				MK_CASE(2, 1) MK_CASE(2, 2) MK_CASE(2, 3)
				MK_CASE(3, 1) MK_CASE(3, 2) MK_CASE(3, 3)
				MK_CASE(4, 1) MK_CASE(4, 2) MK_CASE(4, 3)
#if MB == 6
				MK_CASE(1, 4) MK_CASE(1, 5) MK_CASE(1, 6)
				MK_CASE(2, 4) MK_CASE(2, 5) MK_CASE(2, 6)
				MK_CASE(3, 4) MK_CASE(3, 5) MK_CASE(3, 6)
				MK_CASE(4, 4) MK_CASE(4, 5) MK_CASE(4, 6)
#endif
			}
		}
	}
}
#else
/* Scalar fallback: the same contract (fixed per-output order). */
void matmul_rows(float *y, int ldy, const void *w, uint32_t wtype, const float *x, int ldx,
		 int cols, int nb, int o0, int o1, bool accumulate)
{
	for (int o = o0; o < o1; o++)
		for (int b = 0; b < nb; b++) {
			const float *xr = x + (size_t)b * ldx;
			float s = 0;
			if (wtype == GGML_F16) {
				const uint16_t *wr = (const uint16_t *)w + (size_t)o * cols;
				for (int i = 0; i < cols; i++)
					s += f16_to_f32(wr[i]) * xr[i];
			} else {
				const float *wr = (const float *)w + (size_t)o * cols;
				for (int i = 0; i < cols; i++)
					s += wr[i] * xr[i];
			}
			float *dst = y + (size_t)b * ldy + o;
			*dst = accumulate ? *dst + s : s;
		}
}
#endif

/* ---- elementwise ------------------------------------------------------- */

void rmsnorm(float *out, const float *x, const float *weight, int n, float eps)
{
	float ss = 0;
	for (int i = 0; i < n; i++)
		ss += x[i] * x[i];
	float inv = 1.0f / sqrtf(ss / n + eps);
	for (int i = 0; i < n; i++)
		out[i] = x[i] * inv * weight[i];
}

void rope_table(float *cs, int n_pos, int head_dim, float base)
{
	int half = head_dim / 2;
	for (int i = 0; i < half; i++) {
		double freq = pow((double)base, -2.0 * i / head_dim);
		for (int p = 0; p < n_pos; p++) {
			double a = p * freq;
			cs[((size_t)p * half + i) * 2] = (float)cos(a);
			cs[((size_t)p * half + i) * 2 + 1] = (float)sin(a);
		}
	}
}

void rope(float *x, int n_heads, int head_dim, const float *cs)
{
	for (int h = 0; h < n_heads; h++) {
		float *v = x + (size_t)h * head_dim;
		for (int i = 0; i < head_dim / 2; i++) {
			float c = cs[2 * i], s = cs[2 * i + 1];
			float a = v[2 * i], b = v[2 * i + 1];
			v[2 * i] = a * c - b * s;
			v[2 * i + 1] = a * s + b * c;
		}
	}
}

void swiglu(float *h1, const float *h3, int n)
{
	for (int i = 0; i < n; i++)
		h1[i] = h1[i] / (1.0f + expf(-h1[i])) * h3[i];
}

/* ---- attention --------------------------------------------------------- */

static inline float dot(const float *a, const float *b, int n)
{
#ifdef KPI_AVX2
	if (n % 16 == 0) {
		__m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
		for (int i = 0; i < n; i += 16) {
			s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
			s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
		}
		return hsum8(_mm256_add_ps(s0, s1));
	}
#endif
	float s = 0;
	for (int i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

static inline void axpy(float *y, float a, const float *x, int n)
{
#ifdef KPI_AVX2
	if (n % 8 == 0) {
		__m256 av = _mm256_set1_ps(a);
		for (int i = 0; i < n; i += 8)
			_mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
		return;
	}
#endif
	for (int i = 0; i < n; i++)
		y[i] += a * x[i];
}

void attention_paged(float *out, const float *q, int n_q, const struct kv_layer_view *c, int g,
		     const int32_t *block_table, int pos, float *scores)
{
	int hd = c->head_dim, bs = c->block_size, n = pos + 1;
	float scale = 1.0f / sqrtf((float)hd);
	/* scores[h * n + j] = q_h . k_j / sqrt(hd), block by block */
	for (int j0 = 0; j0 < n; j0 += bs) {
		const float *kb = c->k + kv_offset(c, block_table[j0 / bs], g, 0);
		int m = n - j0 < bs ? n - j0 : bs, t = 0;
#ifdef KPI_AVX2
		/* 8 keys at a time: 8 accumulators reduced together, one
		 * horizontal reduction per 8 scores instead of one per score */
		if (hd % 8 == 0)
			for (; t + 8 <= m; t += 8)
				for (int h = 0; h < n_q; h++) {
					const float *qh = q + (size_t)h * hd;
					__m256 acc[8];
					for (int k = 0; k < 8; k++)
						acc[k] = _mm256_setzero_ps();
					for (int i = 0; i < hd; i += 8) {
						__m256 qv = _mm256_loadu_ps(qh + i);
						for (int k = 0; k < 8; k++)
							acc[k] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kb + (size_t)(t + k) * hd + i), acc[k]);
					}
					__m256 s01 = _mm256_hadd_ps(acc[0], acc[1]), s23 = _mm256_hadd_ps(acc[2], acc[3]);
					__m256 s45 = _mm256_hadd_ps(acc[4], acc[5]), s67 = _mm256_hadd_ps(acc[6], acc[7]);
					__m256 s0123 = _mm256_hadd_ps(s01, s23), s4567 = _mm256_hadd_ps(s45, s67);
					__m256 sum = _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20),
								   _mm256_permute2f128_ps(s0123, s4567, 0x31));
					_mm256_storeu_ps(scores + (size_t)h * n + j0 + t,
							 _mm256_mul_ps(sum, _mm256_set1_ps(scale)));
				}
#endif
		for (; t < m; t++)
			for (int h = 0; h < n_q; h++)
				scores[(size_t)h * n + j0 + t] = dot(q + (size_t)h * hd, kb + (size_t)t * hd, hd) * scale;
	}
	for (int h = 0; h < n_q; h++) {
		float *s = scores + (size_t)h * n, mx = s[0], sum = 0;
		for (int j = 1; j < n; j++)
			mx = s[j] > mx ? s[j] : mx;
		for (int j = 0; j < n; j++) {
			s[j] = expf(s[j] - mx);
			sum += s[j];
		}
		float inv = 1.0f / sum;
		for (int j = 0; j < n; j++)
			s[j] *= inv;
		memset(out + (size_t)h * hd, 0, sizeof(float) * hd);
	}
#ifdef KPI_AVX2
	if (hd % 64 == 0) {
		/* out[h] = sum_j p[h][j] v_j with 64 outputs held in 8 registers
		 * across all positions, instead of a load and store per position */
		for (int h = 0; h < n_q; h++)
			for (int c0 = 0; c0 < hd; c0 += 64) {
				__m256 acc[8];
				for (int k = 0; k < 8; k++)
					acc[k] = _mm256_setzero_ps();
				const float *ph = scores + (size_t)h * n;
				for (int j0 = 0; j0 < n; j0 += bs) {
					const float *vb = c->v + kv_offset(c, block_table[j0 / bs], g, 0) + c0;
					int m = n - j0 < bs ? n - j0 : bs;
					for (int t = 0; t < m; t++) {
						__m256 pv = _mm256_set1_ps(ph[j0 + t]);
						const float *vr = vb + (size_t)t * hd;
						for (int k = 0; k < 8; k++)
							acc[k] = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vr + 8 * k), acc[k]);
					}
				}
				for (int k = 0; k < 8; k++)
					_mm256_storeu_ps(out + (size_t)h * hd + c0 + 8 * k, acc[k]);
			}
		return;
	}
#endif
	for (int j0 = 0; j0 < n; j0 += bs) {
		const float *vb = c->v + kv_offset(c, block_table[j0 / bs], g, 0);
		int m = n - j0 < bs ? n - j0 : bs;
		for (int t = 0; t < m; t++)
			for (int h = 0; h < n_q; h++)
				axpy(out + (size_t)h * hd, scores[(size_t)h * n + j0 + t], vb + (size_t)t * hd, hd);
	}
}
