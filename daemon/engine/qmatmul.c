/* qmatmul.c - the quantized matmul of qmatmul.h: repacking into panels,
 * activation quantization (as llama.cpp quantizes for the same weights), the
 * plain-C reference kernel and the run-time choice among the x86 kernels
 * (qmatmul_x86.h, compiled once per instruction set). */
#include "daemon/engine/qmatmul.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "daemon/engine/gguf.h"
#include "daemon/engine/quant.h"

/* Fetch this far ahead in a panel's stream. */
#ifndef QMM_PF
#define QMM_PF 1024
#endif

static inline int32_t ld32(const void *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return v;
}

/* ---- instruction sets -------------------------------------------------- */

static const char *const isa_names[QMM_ISA_COUNT] = { "scalar", "avx2", "avx-vnni", "avx512-vnni" };

const char *qmm_isa_name(enum qmm_isa isa)
{
	return isa < QMM_ISA_COUNT ? isa_names[isa] : "unknown";
}

int qmm_isa_parse(const char *name)
{
	for (int i = 0; i < QMM_ISA_COUNT; i++)
		if (!strcmp(name, isa_names[i]))
			return i;
	return -1;
}

#if defined(__x86_64__)
#include <cpuid.h>

/* The instruction sets the CPU has and the OS saves the registers of:
 * cpuid leaves 1 and 7, and XCR0 for the AVX (bits 1-2) and AVX-512
 * (bits 5-7) state. */
static unsigned cpu_isas(void)
{
	unsigned a, b, c, d, lo = 0, hi = 0, isas = 1u << QMM_SCALAR;
	if (!__get_cpuid_count(1, 0, &a, &b, &c, &d))
		return isas;
	bool fma = c & (1u << 12), osxsave = c & (1u << 27), f16c = c & (1u << 29);
	if (!osxsave)
		return isas;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	bool ymm = (lo & 0x6) == 0x6, zmm = (lo & 0xe6) == 0xe6;
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return isas;
	bool avx2 = b & (1u << 5), avx512 = (b & (1u << 16)) && (b & (1u << 30)) && (b & (1u << 31));
	bool vnni512 = c & (1u << 11);
	unsigned a1 = 0, b1, c1, d1;
	__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1);
	bool avxvnni = a1 & (1u << 4);
	if (ymm && avx2 && fma && f16c) {
		isas |= 1u << QMM_AVX2;
		if (avxvnni)
			isas |= 1u << QMM_AVXVNNI;
		if (zmm && avx512 && vnni512)
			isas |= 1u << QMM_AVX512VNNI;
	}
	return isas;
}
#else
static unsigned cpu_isas(void)
{
	return 1u << QMM_SCALAR;
}
#endif

bool qmm_isa_supported(enum qmm_isa isa)
{
	static unsigned isas;
	if (!isas)
		isas = cpu_isas();
	return isa < QMM_ISA_COUNT && (isas & (1u << isa));
}

enum qmm_isa qmm_isa_best(void)
{
	for (int i = QMM_ISA_COUNT - 1; i > 0; i--)
		if (qmm_isa_supported(i))
			return i;
	return QMM_SCALAR;
}

static int isa_cur = -1;

enum qmm_isa qmm_isa_get(void)
{
	if (isa_cur < 0)
		isa_cur = qmm_isa_best();
	return isa_cur;
}

int qmm_isa_set(enum qmm_isa isa, char *err, size_t errlen)
{
	if (isa >= QMM_ISA_COUNT || !qmm_isa_supported(isa)) {
		snprintf(err, errlen, "this CPU cannot run the %s kernels (the best it runs: %s)",
			 qmm_isa_name(isa), qmm_isa_name(qmm_isa_best()));
		return -1;
	}
	isa_cur = isa;
	return 0;
}

/* ---- packing ----------------------------------------------------------- */

static size_t block_bytes(uint32_t type)
{
	return type == GGML_Q8_0 ? QMM_Q8_0_BLOCK : type == GGML_Q4_0 ? QMM_Q4_0_BLOCK
	       : type == GGML_Q4_K ? QMM_Q4_K_BLOCK : 0;
}

unsigned qmm_form(uint32_t type)
{
	return type == GGML_Q8_0 || type == GGML_Q4_0 ? QMM_FORM_Q8_0 : type == GGML_Q4_K ? QMM_FORM_Q8_K : 0;
}

size_t qmm_pack_bytes(uint32_t type, int rows, int cols)
{
	size_t panels = ((size_t)rows + QMM_PANEL - 1) / QMM_PANEL;
	return panels * (size_t)(cols / ggml_block_elems(type)) * block_bytes(type);
}

void qmm_pack(struct packed_mat *p, void *dst, const void *w, uint32_t type, int rows, int cols)
{
	const size_t bb = block_bytes(type), row_bytes = ggml_row_bytes(type, cols);
	const int nblk = cols / ggml_block_elems(type), panels = (rows + QMM_PANEL - 1) / QMM_PANEL;
	memset(dst, 0, qmm_pack_bytes(type, rows, cols)); /* padding rows: scale 0 */
	for (int pn = 0; pn < panels; pn++)
		for (int k = 0; k < nblk; k++) {
			uint8_t *blk = (uint8_t *)dst + ((size_t)pn * nblk + k) * bb;
			for (int r = 0; r < QMM_PANEL && pn * QMM_PANEL + r < rows; r++) {
				const uint8_t *src = (const uint8_t *)w + (size_t)(pn * QMM_PANEL + r) * row_bytes;
				if (type == GGML_Q8_0) {
					const struct block_q8_0 *b = (const struct block_q8_0 *)src + k;
					memcpy(blk + 2 * r, &b->d, 2);
					for (int g = 0; g < 8; g++)
						for (int i = 0; i < 4; i++)
							blk[32 + g * 64 + r * 4 + i] = (uint8_t)b->qs[4 * g + i] ^ 0x80;
				} else if (type == GGML_Q4_0) {
					const struct block_q4_0 *b = (const struct block_q4_0 *)src + k;
					memcpy(blk + 2 * r, &b->d, 2);
					for (int g = 0; g < 4; g++)
						memcpy(blk + 32 + g * 64 + r * 4, b->qs + 4 * g, 4);
				} else {
					const struct block_q4_K *b = (const struct block_q4_K *)src + k;
					memcpy(blk + 2 * r, &b->d, 2);
					memcpy(blk + 32 + 2 * r, &b->dmin, 2);
					for (int j = 0; j < 8; j++) {
						uint8_t sc, m;
						q4k_scale_min(b->scales, j, &sc, &m);
						blk[64 + j * 16 + r] = sc;
						blk[192 + (j / 2) * 32 + r * 2 + j % 2] = m;
					}
					for (int c = 0; c < 4; c++)
						for (int g = 0; g < 8; g++)
							memcpy(blk + 320 + (c * 8 + g) * 64 + r * 4, b->qs + 32 * c + 4 * g, 4);
				}
			}
		}
	*p = (struct packed_mat){ dst, type, rows, cols };
}

/* ---- activations ------------------------------------------------------- */

size_t qmm_act_bytes(int nb, int cols)
{
	size_t n = (size_t)nb * cols;
	/* q0, qk; per 32: d0, n8, n128, sk; per 256: dk */
	return 2 * n + n / 32 * (4 + 4 + 4 + 2) + n / 256 * 4 + 64;
}

void qmm_act_init(struct qmm_act *a, void *buf, int nb, int cols)
{
	size_t n = (size_t)nb * cols;
	char *p = buf;
	memset(a, 0, sizeof(*a));
	a->d0 = (float *)p; p += n / 32 * 4;
	a->n8 = (int32_t *)p; p += n / 32 * 4;
	a->n128 = (int32_t *)p; p += n / 32 * 4;
	a->dk = (float *)p; p += n / 256 * 4;
	a->sk = (int16_t *)p; p += n / 32 * 2;
	a->q0 = (int8_t *)p; p += n;
	a->qk = (int8_t *)p;
}

/* llama.cpp's q8_0 for x86 (quantize_row_q8_0): scale amax / 127 stored as
 * fp16, codes round-to-nearest-even of x * 127 / amax. */
static void act_q8_0(struct qmm_act *a, const float *x, int r)
{
	const int cols = a->cols, nblk = cols / 32;
	int8_t *q = a->q0 + (size_t)r * cols;
	for (int k = 0; k < nblk; k++) {
		const float *xb = x + 32 * k;
		float amax = 0;
		for (int i = 0; i < 32; i++)
			amax = fabsf(xb[i]) > amax ? fabsf(xb[i]) : amax;
		float d = amax / 127.0f, id = amax != 0 ? 127.0f / amax : 0;
		int sum = 0;
		for (int i = 0; i < 32; i++) {
			int v = (int)nearbyintf(xb[i] * id);
			q[32 * k + i] = (int8_t)v;
			sum += v;
		}
		size_t at = (size_t)r * nblk + k;
		a->d0[at] = f16_to_f32(f32_to_f16(d));
		a->n8[at] = -8 * sum;
		a->n128[at] = -128 * sum;
	}
}

/* llama.cpp's q8_K (quantize_row_q8_K_ref): per 256 values the one of
 * largest magnitude maps to -127, codes round-to-nearest-even; scale in f32. */
static void act_q8_K(struct qmm_act *a, const float *x, int r)
{
	const int cols = a->cols, nsb = cols / 256, n32 = cols / 32;
	int8_t *q = a->qk + (size_t)r * cols;
	for (int k = 0; k < nsb; k++) {
		const float *xb = x + 256 * k;
		float amax = 0, max = 0;
		for (int i = 0; i < 256; i++)
			if (fabsf(xb[i]) > amax) {
				amax = fabsf(xb[i]);
				max = xb[i];
			}
		if (amax == 0) {
			memset(q + 256 * k, 0, 256);
			memset(a->sk + (size_t)r * n32 + 8 * k, 0, 8 * sizeof(int16_t));
			a->dk[(size_t)r * nsb + k] = 0;
			continue;
		}
		float iscale = -127.0f / max;
		for (int i = 0; i < 256; i++) {
			int v = (int)nearbyintf(iscale * xb[i]);
			q[256 * k + i] = (int8_t)(v > 127 ? 127 : v);
		}
		for (int j = 0; j < 8; j++) {
			int s = 0;
			for (int i = 0; i < 32; i++)
				s += q[256 * k + 32 * j + i];
			a->sk[(size_t)r * n32 + 8 * k + j] = (int16_t)s;
		}
		a->dk[(size_t)r * nsb + k] = 1 / iscale;
	}
}

void qmm_act_quantize(struct qmm_act *a, unsigned forms, const float *x, int ldx, int r0, int r1)
{
	for (int r = r0; r < r1; r++) {
		if (forms & QMM_FORM_Q8_0)
			act_q8_0(a, x + (size_t)r * ldx, r);
		if (forms & QMM_FORM_Q8_K)
			act_q8_K(a, x + (size_t)r * ldx, r);
	}
}

/* ---- reference kernel (plain C) ----------------------------------------- */

/* The integer sums and float operations of the vector kernels, one output
 * at a time: fmaf where they use FMA, so the results agree bit for bit. */
static float dot_row_scalar(const struct packed_mat *w, int o, const struct qmm_act *x, size_t r)
{
	const int cols = w->cols, pn = o / QMM_PANEL, row = o % QMM_PANEL;
	float acc = 0;
	if (w->type == GGML_Q4_K) {
		const int nsb = cols / 256, n32 = cols / 32;
		const uint8_t *pb = (const uint8_t *)w->data + (size_t)pn * nsb * QMM_Q4_K_BLOCK;
		for (int k = 0; k < nsb; k++) {
			const uint8_t *blk = pb + (size_t)k * QMM_Q4_K_BLOCK;
			const int8_t *xq = x->qk + r * cols + 256 * k;
			uint16_t h;
			memcpy(&h, blk + 2 * row, 2);
			float d = f16_to_f32(h);
			memcpy(&h, blk + 32 + 2 * row, 2);
			float dmin = f16_to_f32(h);
			int sumi = 0, summ = 0;
			for (int j = 0; j < 8; j++) {
				int c = j / 2, shift = 4 * (j % 2), dot = 0;
				for (int g = 0; g < 8; g++)
					for (int i = 0; i < 4; i++) {
						uint8_t byte = blk[320 + (c * 8 + g) * 64 + row * 4 + i];
						dot += ((byte >> shift) & 0xF) * xq[64 * c + 32 * (j % 2) + 4 * g + i];
					}
				sumi += blk[64 + j * 16 + row] * dot;
				summ += blk[192 + (j / 2) * 32 + row * 2 + j % 2] * x->sk[r * n32 + 8 * k + j];
			}
			float dx = x->dk[r * nsb + k];
			acc = fmaf((float)sumi, d * dx, acc);
			acc = fmaf(-(float)summ, dmin * dx, acc);
		}
		return acc;
	}
	const int q4 = w->type == GGML_Q4_0, nblk = cols / 32;
	const size_t bb = q4 ? QMM_Q4_0_BLOCK : QMM_Q8_0_BLOCK;
	const uint8_t *pb = (const uint8_t *)w->data + (size_t)pn * nblk * bb;
	for (int k = 0; k < nblk; k++) {
		const uint8_t *blk = pb + (size_t)k * bb;
		const int8_t *xq = x->q0 + r * cols + 32 * k;
		uint16_t h;
		memcpy(&h, blk + 2 * row, 2);
		int s = 0;
		if (q4) {
			for (int g = 0; g < 4; g++)
				for (int i = 0; i < 4; i++) {
					uint8_t byte = blk[32 + g * 64 + row * 4 + i];
					s += ((byte & 0xF) - 8) * xq[4 * g + i] + ((byte >> 4) - 8) * xq[16 + 4 * g + i];
				}
		} else {
			for (int g = 0; g < 8; g++)
				for (int i = 0; i < 4; i++)
					s += (int8_t)(blk[32 + g * 64 + row * 4 + i] ^ 0x80) * xq[4 * g + i];
		}
		acc = fmaf((float)s, f16_to_f32(h) * x->d0[r * nblk + k], acc);
	}
	return acc;
}

static void qmm_rows_scalar(float *y, int ldy, const struct packed_mat *w, const struct qmm_act *x, int xb,
			    int nb, int o0, int o1, bool accumulate)
{
	for (int o = o0; o < o1; o++)
		for (int b = 0; b < nb; b++) {
			float v = dot_row_scalar(w, o, x, (size_t)xb + b), *d = y + (size_t)b * ldy + o;
			*d = accumulate ? *d + v : v;
		}
}

/* ---- x86 kernels ------------------------------------------------------- */

#if defined(__x86_64__)
#include <immintrin.h>

/* Each instruction set's kernels compiled for it, whatever -march says
 * (clang and gcc spell that differently). */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#endif
#define QMM_V 3 /* QMM_AVX512VNNI */
#include "daemon/engine/qmatmul_x86.h"
#undef QMM_V
#if defined(__clang__)
#pragma clang attribute pop
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avxvnni"))), apply_to = function)
#else
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avxvnni")
#endif
#define QMM_V 2 /* QMM_AVXVNNI */
#include "daemon/engine/qmatmul_x86.h"
#undef QMM_V
#if defined(__clang__)
#pragma clang attribute pop
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#define QMM_V 1 /* QMM_AVX2 */
#include "daemon/engine/qmatmul_x86.h"
#undef QMM_V
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

void qmm_rows(float *y, int ldy, const struct packed_mat *w, const struct qmm_act *x, int xb, int nb,
	      int o0, int o1, bool accumulate, struct fetch_list *side)
{
	switch (qmm_isa_get()) {
#if defined(__x86_64__)
	case QMM_AVX512VNNI:
		qmm_rows_avx512vnni(y, ldy, w, x, xb, nb, o0, o1, accumulate, side);
		return;
	case QMM_AVXVNNI:
		qmm_rows_avxvnni(y, ldy, w, x, xb, nb, o0, o1, accumulate, side);
		return;
	case QMM_AVX2:
		qmm_rows_avx2(y, ldy, w, x, xb, nb, o0, o1, accumulate, side);
		return;
#endif
	default:
		(void)side;
		qmm_rows_scalar(y, ldy, w, x, xb, nb, o0, o1, accumulate);
	}
}
