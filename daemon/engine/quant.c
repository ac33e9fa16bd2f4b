/* quant.c - dequantization and quantization of llama.cpp's Q8_0, Q4_0 and
 * Q4_K blocks (quant.h). Written from the formats' definitions; the
 * quantizers follow the ideas of llama.cpp's reference ones. */
#include "daemon/engine/quant.h"

#include <math.h>
#include <string.h>

#include "daemon/engine/gguf.h"
#include "daemon/engine/kernels.h"

/* The bytes a quantizer writes must not depend on whether the compiler may
 * fuse a multiply and an add on this machine. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC optimize("fp-contract=off")
#endif

/* ---- dequantization ---------------------------------------------------- */

static void dequant_q8_0(const struct block_q8_0 *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, y += QK8_0) {
		float d = f16_to_f32(b[i].d);
		for (int j = 0; j < QK8_0; j++)
			y[j] = d * b[i].qs[j];
	}
}

static void dequant_q4_0(const struct block_q4_0 *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, y += QK4_0) {
		float d = f16_to_f32(b[i].d);
		for (int j = 0; j < QK4_0 / 2; j++) {
			y[j] = d * ((b[i].qs[j] & 0xF) - 8);
			y[j + QK4_0 / 2] = d * ((b[i].qs[j] >> 4) - 8);
		}
	}
}

static void dequant_q4_K(const struct block_q4_K *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++) {
		float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
		const uint8_t *q = b[i].qs;
		for (int c = 0; c < 4; c++, q += 32) {
			uint8_t sc, m;
			q4k_scale_min(b[i].scales, 2 * c, &sc, &m);
			float d1 = d * sc, m1 = dmin * m;
			q4k_scale_min(b[i].scales, 2 * c + 1, &sc, &m);
			float d2 = d * sc, m2 = dmin * m;
			for (int l = 0; l < 32; l++)
				*y++ = d1 * (q[l] & 0xF) - m1;
			for (int l = 0; l < 32; l++)
				*y++ = d2 * (q[l] >> 4) - m2;
		}
	}
}

void quant_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n)
{
	switch (type) {
	case GGML_F32:
		memcpy(dst, src, sizeof(float) * n);
		break;
	case GGML_F16:
		for (int64_t i = 0; i < n; i++)
			dst[i] = f16_to_f32(((const uint16_t *)src)[i]);
		break;
	case GGML_Q8_0: dequant_q8_0(src, dst, n / QK8_0); break;
	case GGML_Q4_0: dequant_q4_0(src, dst, n / QK4_0); break;
	case GGML_Q4_K: dequant_q4_K(src, dst, n / QK_K); break;
	default: break;
	}
}

/* ---- quantization ------------------------------------------------------ */

static void quant_q8_0(const float *x, struct block_q8_0 *b, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += QK8_0) {
		float amax = 0;
		for (int j = 0; j < QK8_0; j++)
			amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
		float d = amax / 127, id = d ? 1.0f / d : 0;
		b[i].d = f32_to_f16(d);
		for (int j = 0; j < QK8_0; j++)
			b[i].qs[j] = (int8_t)roundf(x[j] * id);
	}
}

static void quant_q4_0(const float *x, struct block_q4_0 *b, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += QK4_0) {
		/* d maps the value of largest magnitude to -8, the end of the
		 * range with a code to spare */
		float amax = 0, max = 0;
		for (int j = 0; j < QK4_0; j++)
			if (fabsf(x[j]) > amax) {
				amax = fabsf(x[j]);
				max = x[j];
			}
		float d = max / -8, id = d ? 1.0f / d : 0;
		b[i].d = f32_to_f16(d);
		for (int j = 0; j < QK4_0 / 2; j++) {
			int q0 = (int)floorf(x[j] * id + 8.5f), q1 = (int)floorf(x[j + 16] * id + 8.5f);
			q0 = q0 < 0 ? 0 : q0 > 15 ? 15 : q0;
			q1 = q1 < 0 ? 0 : q1 > 15 ? 15 : q1;
			b[i].qs[j] = (uint8_t)(q0 | q1 << 4);
		}
	}
}

static int clamp_round(float v, int hi)
{
	int q = (int)lrintf(v);
	return q < 0 ? 0 : q > hi ? hi : q;
}

/* Fits x[0..32) ~ s * L - m with L in 0..15, s >= 0 and m >= 0 (Q4_K's
 * codes: the min is subtracted), each value's squared error weighted by
 * w: for 21 candidate scales around (max - min) / 15, round to codes, solve
 * the weighted least squares for (s, -m) given those codes, keep the fit
 * with the least error. Returns s, writes m. */
static float fit_scale_min(const float *x, const float *w, float *m_out)
{
	float lo = x[0], hi = x[0];
	for (int l = 1; l < 32; l++) {
		lo = x[l] < lo ? x[l] : lo;
		hi = x[l] > hi ? x[l] : hi;
	}
	lo = lo > 0 ? 0 : lo; /* the offset can only lower values */
	if (hi <= lo) {
		*m_out = -lo;
		return 0;
	}
	float best_s = 0, best_b = lo;
	double best_err = 0;
	for (int l = 0; l < 32; l++)
		best_err += (double)w[l] * (x[l] - lo) * (x[l] - lo);
	for (int k = 0; k <= 20; k++) {
		float iscale = (14.0f + 0.1f * k) / (hi - lo);
		double sw = 0, sl = 0, sll = 0, sx = 0, slx = 0;
		int L[32];
		for (int l = 0; l < 32; l++) {
			L[l] = clamp_round(iscale * (x[l] - lo), 15);
			sw += w[l];
			sl += (double)w[l] * L[l];
			sll += (double)w[l] * L[l] * L[l];
			sx += (double)w[l] * x[l];
			slx += (double)w[l] * L[l] * x[l];
		}
		double det = sw * sll - sl * sl, s, b;
		if (det <= 0)
			continue;
		s = (sw * slx - sx * sl) / det;
		b = (sll * sx - sl * slx) / det;
		if (b > 0) { /* a positive offset is not representable: refit through 0 */
			b = 0;
			s = sll > 0 ? slx / sll : 0;
		}
		if (s <= 0)
			continue;
		double err = 0;
		for (int l = 0; l < 32; l++) {
			double e = s * L[l] + b - x[l];
			err += w[l] * e * e;
		}
		if (err < best_err) {
			best_err = err;
			best_s = (float)s;
			best_b = (float)b;
		}
	}
	*m_out = -best_b;
	return best_s;
}

static void quant_q4_K(const float *x, struct block_q4_K *b, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += QK_K) {
		float scale[8], min[8], max_scale = 0, max_min = 0;
		for (int j = 0; j < 8; j++) {
			/* weigh large values more: their errors move the output most */
			const float *xs = x + 32 * j;
			float w[32], ss = 0;
			for (int l = 0; l < 32; l++)
				ss += xs[l] * xs[l];
			float rms = sqrtf(ss / 32);
			for (int l = 0; l < 32; l++)
				w[l] = rms + fabsf(xs[l]);
			scale[j] = fit_scale_min(xs, w, &min[j]);
			max_scale = scale[j] > max_scale ? scale[j] : max_scale;
			max_min = min[j] > max_min ? min[j] : max_min;
		}
		/* the 8 scales and mins as 6-bit multiples of two fp16 steps */
		uint8_t sc[8], mn[8];
		float isc = max_scale > 0 ? 63 / max_scale : 0, imn = max_min > 0 ? 63 / max_min : 0;
		for (int j = 0; j < 8; j++) {
			sc[j] = (uint8_t)clamp_round(isc * scale[j], 63);
			mn[j] = (uint8_t)clamp_round(imn * min[j], 63);
		}
		memset(b[i].scales, 0, sizeof(b[i].scales));
		for (int j = 0; j < 8; j++) {
			if (j < 4) {
				b[i].scales[j] = sc[j];
				b[i].scales[j + 4] = mn[j];
			} else {
				b[i].scales[j + 4] = (uint8_t)((sc[j] & 0xF) | (mn[j] & 0xF) << 4);
				b[i].scales[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
				b[i].scales[j] |= (uint8_t)((mn[j] >> 4) << 6);
			}
		}
		b[i].d = f32_to_f16(max_scale / 63);
		b[i].dmin = f32_to_f16(max_min / 63);
		/* codes against the scales as stored */
		float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
		uint8_t L[QK_K];
		for (int j = 0; j < 8; j++) {
			uint8_t s, m;
			q4k_scale_min(b[i].scales, j, &s, &m);
			float dj = d * s, mj = dmin * m;
			for (int l = 0; l < 32; l++)
				L[32 * j + l] = dj ? (uint8_t)clamp_round((x[32 * j + l] + mj) / dj, 15) : 0;
		}
		for (int c = 0; c < 4; c++)
			for (int l = 0; l < 32; l++)
				b[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + 32 + l] << 4);
	}
}

void quant_quantize_row(uint32_t type, const float *src, void *dst, int64_t n)
{
	switch (type) {
	case GGML_F32:
		memcpy(dst, src, sizeof(float) * n);
		break;
	case GGML_F16:
		for (int64_t i = 0; i < n; i++)
			((uint16_t *)dst)[i] = f32_to_f16(src[i]);
		break;
	case GGML_Q8_0: quant_q8_0(src, dst, n / QK8_0); break;
	case GGML_Q4_0: quant_q4_0(src, dst, n / QK4_0); break;
	case GGML_Q4_K: quant_q4_K(src, dst, n / QK_K); break;
	default: break;
	}
}
