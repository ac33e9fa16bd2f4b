/* kernels.c - matmul over weights repacked into column-interleaved panels
 * (one vector load = one input's weights for 16 outputs, broadcast against
 * up to 12 batch rows), RMSNorm, RoPE, SwiGLU and paged attention. */
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

const char *matmul_kernels_name(void)
{
#if defined(KPI_AVX2) && defined(__AVX512F__)
	return "avx512-fma";
#elif defined(KPI_AVX2)
	return "avx2-fma";
#else
	return "scalar";
#endif
}

size_t pack_bytes(uint32_t type, int rows, int cols)
{
	size_t panels = ((size_t)rows + KPI_PANEL - 1) / KPI_PANEL;
	return panels * KPI_PANEL * (size_t)cols * ggml_type_bytes(type);
}

void pack_matrix(struct packed_mat *p, void *dst, const void *w, uint32_t type, int rows, int cols)
{
	int panels = (rows + KPI_PANEL - 1) / KPI_PANEL;
	for (int pn = 0; pn < panels; pn++)
		for (int r = 0; r < KPI_PANEL; r++) {
			int o = pn * KPI_PANEL + r;
			size_t at = (size_t)pn * KPI_PANEL * cols + r;
			for (int i = 0; i < cols; i++, at += KPI_PANEL) {
				size_t from = (size_t)o * cols + i;
				if (type == GGML_F16)
					((uint16_t *)dst)[at] = o < rows ? ((const uint16_t *)w)[from] : 0;
				else
					((float *)dst)[at] = o < rows ? ((const float *)w)[from] : 0;
			}
		}
	*p = (struct packed_mat){ dst, type, rows, cols };
}

#ifdef KPI_AVX2
/* 16 lanes with AVX-512 (32 registers), else 8 lanes of AVX2 (16). Output o
 * of a panel lives in lane o % VL of vector o / VL, and sums its inputs in
 * order with one FMA per input whatever the micro-kernel shape: batching,
 * row splits and threading never change a bit. */
#ifndef PF_BYTES
#define PF_BYTES 2048 /* fetch this far ahead in each panel's stream: measured best of 1K..8K */
#endif
#ifdef __AVX512F__
#define VL 16
typedef __m512 vf;
#define vzero() _mm512_setzero_ps()
#define vload(p) _mm512_loadu_ps(p)
#define vstore(p, v) _mm512_storeu_ps(p, v)
#define vload_h(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define vbcast(p) _mm512_set1_ps(*(p))
#define vfma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define vadd(a, b) _mm512_add_ps(a, b)
#define RMAX 4  /* panels per micro-kernel */
#define BMAX 12 /* batch rows per micro-kernel: 12 x 2 accumulators */
#else
#define VL 8
typedef __m256 vf;
#define vzero() _mm256_setzero_ps()
#define vload(p) _mm256_loadu_ps(p)
#define vstore(p, v) _mm256_storeu_ps(p, v)
#define vload_h(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define vbcast(p) _mm256_broadcast_ss(p)
#define vfma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define vadd(a, b) _mm256_add_ps(a, b)
#define RMAX 1 /* 4 accumulators a batch row, 4 weight registers */
#define BMAX 2
#endif
#define NV (KPI_PANEL / VL)

static inline float hsum8(__m256 v)
{
	__m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
	lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
	return _mm_cvtss_f32(lo);
}

/* Stores lanes [lo, hi) of a (added onto d when accumulating). */
static inline void store_part(float *d, vf a, int lo, int hi, bool accumulate)
{
	if (lo == 0 && hi == VL) {
		vstore(d, accumulate ? vadd(vload(d), a) : a);
		return;
	}
	float t[VL];
	vstore(t, a);
	for (int l = lo; l < hi; l++)
		d[l] = accumulate ? d[l] + t[l] : t[l];
}

/* R panels from pn x B batch rows from b, outputs stored for rows [o0, o1)
 * only; R, B and F16 are constants after inlining, so the accumulators live
 * in registers and the inner loop is R * NV weight loads, B broadcasts and
 * R * NV * B FMAs, with no horizontal sums. */
static inline __attribute__((always_inline)) void
mk(float *y, int ldy, const struct packed_mat *w, const int F16, int pn, const float *x, int ldx, int b,
   int o0, int o1, const int R, const int B, bool accumulate, size_t pf, struct fetch_list *side)
{
	const int cols = w->cols;
	const size_t ps = (size_t)KPI_PANEL * cols; /* elements per panel */
	const uint16_t *wh = (const uint16_t *)w->data + (size_t)pn * ps;
	const float *wf = (const float *)w->data + (size_t)pn * ps;
	const float *xr = x + (size_t)b * ldx;
	vf a[RMAX * NV][BMAX];
	for (int r = 0; r < R * NV; r++)
		for (int j = 0; j < B; j++)
			a[r][j] = vzero();
	for (int i = 0; i < cols; i++) {
		vf wv[RMAX * NV];
		if (side && side->i < side->n) {
			_mm_prefetch(side->ptr[side->i] + side->off, _MM_HINT_T1);
			if ((side->off += 64) >= side->len) {
				side->off = 0;
				side->i++;
			}
		}
		for (int p = 0; p < R; p++) {
			size_t at = p * ps + (size_t)i * KPI_PANEL;
			/* one line a step for F16 (64 bytes of a 32-row panel), two for F32 */
			_mm_prefetch((const char *)(F16 ? (const void *)(wh + at) : (const void *)(wf + at)) + pf,
				     _MM_HINT_T0);
			if (!F16)
				_mm_prefetch((const char *)(wf + at) + pf + 64, _MM_HINT_T0);
			for (int v = 0; v < NV; v++)
				wv[p * NV + v] = F16 ? vload_h(wh + at + v * VL) : vload(wf + at + v * VL);
		}
		for (int j = 0; j < B; j++) {
			vf xv = vbcast(xr + (size_t)j * ldx + i);
			for (int r = 0; r < R * NV; r++)
				a[r][j] = vfma(wv[r], xv, a[r][j]);
		}
	}
	for (int p = 0; p < R; p++) {
		int base = (pn + p) * KPI_PANEL;
		int lo = o0 > base ? o0 - base : 0, hi = o1 - base < KPI_PANEL ? o1 - base : KPI_PANEL;
		for (int v = 0; v < NV; v++) {
			int vlo = lo - v * VL, vhi = hi - v * VL;
			vlo = vlo < 0 ? 0 : vlo;
			vhi = vhi > VL ? VL : vhi;
			if (vhi <= vlo)
				continue;
			for (int j = 0; j < B; j++)
				store_part(y + (size_t)(b + j) * ldy + base + v * VL, a[p * NV + v][j], vlo, vhi,
					   accumulate);
		}
	}
}

#define MK_CASE(R, B)                                                                           \
	case (R) * 16 + (B):                                                                    \
		if (f16)                                                                        \
			mk(y, ldy, w, 1, pn, x, ldx, b, o0, o1, R, B, accumulate, pf, side);    \
		else                                                                            \
			mk(y, ldy, w, 0, pn, x, ldx, b, o0, o1, R, B, accumulate, pf, side);    \
		break;

void matmul_rows_fetch(float *y, int ldy, const struct packed_mat *w, const float *x, int ldx, int nb,
		       int o0, int o1, bool accumulate, struct fetch_list *side)
{
	const int f16 = w->type == GGML_F16;
	/* panels per micro-kernel: several while the batch is too small to hide
	 * FMA latency (8 chains a core), one when batch rows give the chains */
	const int rr = nb <= 2 ? RMAX : nb <= BMAX / 2 && RMAX > 1 ? 2 : 1;
	const int p1 = (o1 + KPI_PANEL - 1) / KPI_PANEL;
	for (int pn = o0 / KPI_PANEL; pn < p1;) {
		int left = p1 - pn, R = left >= rr ? rr : left >= 2 && rr >= 2 ? 2 : 1;
		/* batch rows in passes of at most bmax, split evenly: 2 panels hold
		 * as many accumulators as 1; 4 panels also need 8 weight registers */
		int bmax = R == 1 ? BMAX : R == 2 ? BMAX / 2 : BMAX / 6;
		int passes = (nb + bmax - 1) / bmax;
		for (int q = 0, b = 0; q < passes; q++) {
			int B = (nb - b) / (passes - q);
			/* the last of several passes reads the panel from cache: it
			 * fetches the next panel instead, so the first pass there
			 * does not wait on memory */
			size_t pf = q == passes - 1 && passes > 1 && pn + R < p1
				    ? (size_t)R * KPI_PANEL * w->cols * ggml_type_bytes(w->type) : PF_BYTES;
			switch (R * 16 + B) {
				MK_CASE(1, 1) MK_CASE(1, 2)
#ifdef __AVX512F__
				MK_CASE(1, 3) MK_CASE(1, 4) MK_CASE(1, 5) MK_CASE(1, 6)
				MK_CASE(1, 7) MK_CASE(1, 8) MK_CASE(1, 9) MK_CASE(1, 10)
				MK_CASE(1, 11) MK_CASE(1, 12)
				MK_CASE(2, 1) MK_CASE(2, 2) MK_CASE(2, 3) MK_CASE(2, 4)
				MK_CASE(2, 5) MK_CASE(2, 6)
				MK_CASE(4, 1) MK_CASE(4, 2)
#endif
			}
			b += B;
		}
		pn += R;
	}
}
#else
/* Scalar fallback: the same layout and contract (fixed per-output order);
 * no prefetching. */
void matmul_rows_fetch(float *y, int ldy, const struct packed_mat *w, const float *x, int ldx, int nb,
		       int o0, int o1, bool accumulate, struct fetch_list *side)
{
	(void)side;
	for (int o = o0; o < o1; o++) {
		size_t base = (size_t)(o / KPI_PANEL) * KPI_PANEL * w->cols + o % KPI_PANEL;
		for (int b = 0; b < nb; b++) {
			const float *xr = x + (size_t)b * ldx;
			float s = 0;
			for (int i = 0; i < w->cols; i++) {
				size_t at = base + (size_t)i * KPI_PANEL;
				float wi = w->type == GGML_F16 ? f16_to_f32(((const uint16_t *)w->data)[at])
							       : ((const float *)w->data)[at];
				s += wi * xr[i];
			}
			float *dst = y + (size_t)b * ldy + o;
			*dst = accumulate ? *dst + s : s;
		}
	}
}
#endif

void matmul_rows(float *y, int ldy, const struct packed_mat *w, const float *x, int ldx, int nb, int o0,
		 int o1, bool accumulate)
{
	matmul_rows_fetch(y, ldy, w, x, ldx, nb, o0, o1, accumulate, NULL);
}

/* ---- elementwise ------------------------------------------------------- */

void rmsnorm(float *out, const float *x, const float *weight, int n, float eps)
{
	double ss = 0;
	for (int i = 0; i < n; i++)
		ss += (double)(x[i] * x[i]);
	float mean = (float)(ss / n);
	float inv = 1.0f / sqrtf(mean + eps);
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


/* ---- attention --------------------------------------------------------- */

uint16_t f32_to_f16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	uint32_t sign = (x >> 16) & 0x8000, exp = (x >> 23) & 0xff, man = x & 0x7fffff;
	if (exp == 0xff) /* inf, nan (quiet) */
		return (uint16_t)(sign | 0x7c00 | (man ? 0x200 | (man >> 13) : 0));
	int e = (int)exp - 127 + 15;
	if (e >= 31)
		return (uint16_t)(sign | 0x7c00);
	if (e <= 0) { /* subnormal or zero: shift the implicit 1 in, round to even */
		if (e < -10)
			return (uint16_t)sign;
		man |= 0x800000;
		int shift = 14 - e;
		uint32_t h = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
		h += rem > half || (rem == half && (h & 1));
		return (uint16_t)(sign | h);
	}
	uint32_t h = ((uint32_t)e << 10) | (man >> 13), rem = man & 0x1fff;
	h += rem > 0x1000 || (rem == 0x1000 && (h & 1)); /* a carry into the exponent is right */
	return (uint16_t)(sign | h);
}

void f32_to_f16_row(uint16_t *dst, const float *src, int n)
{
	int i = 0;
#ifdef KPI_AVX2
	for (; i + 8 <= n; i += 8)
		_mm_storeu_si128((__m128i *)(dst + i),
				 _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
	for (; i < n; i++)
		dst[i] = f32_to_f16(src[i]);
}

#ifdef KPI_AVX2
#define load8h(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))

/* Blocks of the pool are scattered: the hardware prefetcher stops at each
 * block's end, so fetch the next one (n F16 values) while this one computes. */
static inline void prefetch_block(const uint16_t *p, int n)
{
	for (int off = 0; off < n * 2; off += 64)
		_mm_prefetch((const char *)p + off, _MM_HINT_T0);
}
#endif

/* a . b with b in F16 */
static inline float dot_h(const float *a, const uint16_t *b, int n)
{
#ifdef KPI_AVX2
	if (n % 16 == 0) {
		__m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
		for (int i = 0; i < n; i += 16) {
			s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load8h(b + i), s0);
			s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), load8h(b + i + 8), s1);
		}
		return hsum8(_mm256_add_ps(s0, s1));
	}
#endif
	float s = 0;
	for (int i = 0; i < n; i++)
		s += a[i] * f16_to_f32(b[i]);
	return s;
}

/* y += a * x with x in F16 */
static inline void axpy_h(float *y, float a, const uint16_t *x, int n)
{
#ifdef KPI_AVX2
	if (n % 8 == 0) {
		__m256 av = _mm256_set1_ps(a);
		for (int i = 0; i < n; i += 8)
			_mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, load8h(x + i), _mm256_loadu_ps(y + i)));
		return;
	}
#endif
	for (int i = 0; i < n; i++)
		y[i] += a * f16_to_f32(x[i]);
}

#ifdef KPI_AVX2
/* exp of 8 lanes, x clamped to [-87, 88]: range reduction to 2^k * p(r),
 * |r| <= ln2/2, p the Cephes expf polynomial (relative error about 1e-7, as
 * libm's), so softmax and SwiGLU do not call libm per element. */
static inline __m256 exp8(__m256 x)
{
	const __m256 log2e = _mm256_set1_ps(1.44269504089f), ln2hi = _mm256_set1_ps(0.693359375f),
		     ln2lo = _mm256_set1_ps(-2.12194440e-4f);
	x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
	__m256 k = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_fnmadd_ps(k, ln2hi, x);
	r = _mm256_fnmadd_ps(k, ln2lo, r);
	__m256 p = _mm256_set1_ps(1.9875691500e-4f);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
	p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
	/* 2^k in two halves: k = 128 (x near 88) would overflow one exponent */
	__m256i ki = _mm256_cvtps_epi32(k), k1 = _mm256_srai_epi32(ki, 1);
	__m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, _mm256_set1_epi32(127)), 23));
	__m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(
		_mm256_add_epi32(_mm256_sub_epi32(ki, k1), _mm256_set1_epi32(127)), 23));
	return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}
#endif

/* h1 = silu(h1) * h3 = h1 / (1 + exp(-h1)) * h3 */
void swiglu(float *h1, const float *h3, int n)
{
	int i = 0;
#ifdef KPI_AVX2
	const __m256 one = _mm256_set1_ps(1.0f);
	for (; i + 8 <= n; i += 8) {
		__m256 x = _mm256_loadu_ps(h1 + i);
		__m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
		_mm256_storeu_ps(h1 + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)),
						       _mm256_loadu_ps(h3 + i)));
	}
#endif
	for (; i < n; i++)
		h1[i] = h1[i] / (1.0f + expf(-h1[i])) * h3[i];
}

/* s[j] = exp(s[j] - mx), returns the sum. */
static float exp_sum(float *s, int n, float mx)
{
	int j = 0;
	float sum = 0;
#ifdef KPI_AVX2
	__m256 acc = _mm256_setzero_ps(), m = _mm256_set1_ps(mx);
	for (; j + 8 <= n; j += 8) {
		__m256 v = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), m));
		_mm256_storeu_ps(s + j, v);
		acc = _mm256_add_ps(acc, v);
	}
	sum = hsum8(acc);
#endif
	for (; j < n; j++) {
		s[j] = expf(s[j] - mx);
		sum += s[j];
	}
	return sum;
}

void attention_paged(float *out, const float *q, int n_q, const struct kv_layer_view *c, int g,
		     const int32_t *block_table, int pos, float *scores)
{
	int hd = c->head_dim, bs = c->block_size, n = pos + 1;
	float scale = 1.0f / sqrtf((float)hd);
	/* scores[h * n + j] = q_h . k_j / sqrt(hd), block by block */
	for (int j0 = 0; j0 < n; j0 += bs) {
		const uint16_t *kb = c->k + kv_offset(c, block_table[j0 / bs], g, 0);
		int m = n - j0 < bs ? n - j0 : bs, t = 0;
#ifdef KPI_AVX2
		/* 8 keys at a time: 8 accumulators reduced together, one
		 * horizontal reduction per 8 scores instead of one per score */
		if (j0 + bs < n) /* the next block's keys, while this one computes */
			prefetch_block(c->k + kv_offset(c, block_table[j0 / bs + 1], g, 0), bs * hd);
		if (hd % 8 == 0)
			for (; t + 8 <= m; t += 8) {
				for (int h = 0; h < n_q; h++) {
					const float *qh = q + (size_t)h * hd;
					__m256 acc[8];
					for (int k = 0; k < 8; k++)
						acc[k] = _mm256_setzero_ps();
					for (int i = 0; i < hd; i += 8) {
						__m256 qv = _mm256_loadu_ps(qh + i);
						for (int k = 0; k < 8; k++)
							acc[k] = _mm256_fmadd_ps(qv, load8h(kb + (size_t)(t + k) * hd + i), acc[k]);
					}
					__m256 s01 = _mm256_hadd_ps(acc[0], acc[1]), s23 = _mm256_hadd_ps(acc[2], acc[3]);
					__m256 s45 = _mm256_hadd_ps(acc[4], acc[5]), s67 = _mm256_hadd_ps(acc[6], acc[7]);
					__m256 s0123 = _mm256_hadd_ps(s01, s23), s4567 = _mm256_hadd_ps(s45, s67);
					__m256 sum = _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20),
								   _mm256_permute2f128_ps(s0123, s4567, 0x31));
					_mm256_storeu_ps(scores + (size_t)h * n + j0 + t,
							 _mm256_mul_ps(sum, _mm256_set1_ps(scale)));
				}
			}
#endif
		for (; t < m; t++)
			for (int h = 0; h < n_q; h++)
				scores[(size_t)h * n + j0 + t] = dot_h(q + (size_t)h * hd, kb + (size_t)t * hd, hd) * scale;
	}
	for (int h = 0; h < n_q; h++) {
		float *s = scores + (size_t)h * n, mx = s[0];
		for (int j = 1; j < n; j++)
			mx = s[j] > mx ? s[j] : mx;
		float inv = 1.0f / exp_sum(s, n, mx);
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
					const uint16_t *vb = c->v + kv_offset(c, block_table[j0 / bs], g, 0) + c0;
					int m = n - j0 < bs ? n - j0 : bs;
					if (h == 0 && c0 == 0 && j0 + bs < n)
						prefetch_block(c->v + kv_offset(c, block_table[j0 / bs + 1], g, 0), bs * hd);
					for (int t = 0; t < m; t++) {
						__m256 pv = _mm256_set1_ps(ph[j0 + t]);
						const uint16_t *vr = vb + (size_t)t * hd;
						for (int k = 0; k < 8; k++)
							acc[k] = _mm256_fmadd_ps(pv, load8h(vr + 8 * k), acc[k]);
					}
				}
				for (int k = 0; k < 8; k++)
					_mm256_storeu_ps(out + (size_t)h * hd + c0 + 8 * k, acc[k]);
			}
		return;
	}
#endif
	for (int j0 = 0; j0 < n; j0 += bs) {
		const uint16_t *vb = c->v + kv_offset(c, block_table[j0 / bs], g, 0);
		int m = n - j0 < bs ? n - j0 : bs;
		for (int t = 0; t < m; t++)
			for (int h = 0; h < n_q; h++)
				axpy_h(out + (size_t)h * hd, scores[(size_t)h * n + j0 + t], vb + (size_t)t * hd, hd);
	}
}
