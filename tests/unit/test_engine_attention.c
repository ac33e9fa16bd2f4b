/* test_engine_attention.c - paged attention equals contiguous attention
 * (random shapes, partial last blocks, GQA, scattered block ids), the
 * matmul kernel equals a naive loop and is batch-invariant bit for bit, and
 * RMSNorm's scale is llama.cpp's bit for bit. */
#include <math.h>

#include "tests/unit/check.h"
#include "daemon/engine/gguf.h"
#include "daemon/engine/kernels.h"

static uint64_t rs = 42;
static float frand(void)
{
	rs = rs * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((rs >> 40) * 0x1p-24) * 2.0f - 1.0f;
}
static int irand(int n)
{
	rs = rs * 6364136223846793005ull + 1442695040888963407ull;
	return (int)((rs >> 33) % n);
}

/* The textbook version: K/V as (pos, n_kv, hd) arrays, head h uses KV head h / group. */
static void attention_contiguous(float *out, const float *q, int n_heads, int n_kv, int hd,
				 const float *k, const float *v, int pos)
{
	int group = n_heads / n_kv;
	double *s = malloc(sizeof(double) * (pos + 1));
	for (int h = 0; h < n_heads; h++) {
		int g = h / group;
		double mx = -1e300, sum = 0;
		for (int j = 0; j <= pos; j++) {
			double d = 0;
			for (int i = 0; i < hd; i++)
				d += (double)q[h * hd + i] * k[((size_t)j * n_kv + g) * hd + i];
			s[j] = d / sqrt((double)hd);
			mx = s[j] > mx ? s[j] : mx;
		}
		for (int j = 0; j <= pos; j++)
			sum += s[j] = exp(s[j] - mx);
		for (int i = 0; i < hd; i++) {
			double o = 0;
			for (int j = 0; j <= pos; j++)
				o += s[j] / sum * v[((size_t)j * n_kv + g) * hd + i];
			out[h * hd + i] = (float)o;
		}
	}
	free(s);
}

static void test_paged_equals_contiguous(void)
{
	double worst = 0;
	for (int trial = 0; trial < 300; trial++) {
		int n_kv = 1 + irand(4), group = 1 + irand(4), n_heads = n_kv * group;
		static const int hds[] = { 4, 8, 12, 16, 64, 128 };
		int hd = hds[irand(6)];
		static const int bss[] = { 1, 2, 3, 7, 16, 32 };
		int bs = bss[irand(6)];
		int pos = irand(trial < 100 ? 40 : 300); /* attends to pos + 1 positions */
		int n_pos = pos + 1, n_blocks = (n_pos + bs - 1) / bs, pool_blocks = n_blocks + 5;
		/* scattered block ids: a permutation of the pool */
		int32_t *perm = malloc(sizeof(int32_t) * pool_blocks);
		for (int i = 0; i < pool_blocks; i++)
			perm[i] = i;
		for (int i = pool_blocks - 1; i > 0; i--) {
			int j = irand(i + 1);
			int32_t t = perm[i];
			perm[i] = perm[j];
			perm[j] = t;
		}
		size_t pool_floats = (size_t)pool_blocks * n_kv * bs * hd;
		uint16_t *pk = malloc(sizeof(uint16_t) * pool_floats), *pv = malloc(sizeof(uint16_t) * pool_floats);
		for (size_t i = 0; i < pool_floats; i++)
			pk[i] = pv[i] = 0x7e00; /* NaN: unwritten slots must never be read */
		float *ck = malloc(sizeof(float) * n_pos * n_kv * hd), *cv = malloc(sizeof(float) * n_pos * n_kv * hd);
		struct kv_layer_view view = { pk, pv, n_kv, hd, bs };
		for (int j = 0; j < n_pos; j++)
			for (int g = 0; g < n_kv; g++)
				for (int i = 0; i < hd; i++) {
					/* the cache holds F16: the reference reads the same values */
					size_t off = kv_offset(&view, perm[j / bs], g, j % bs) + i;
					pk[off] = f32_to_f16(frand() * 2);
					pv[off] = f32_to_f16(frand());
					ck[((size_t)j * n_kv + g) * hd + i] = f16_to_f32(pk[off]);
					cv[((size_t)j * n_kv + g) * hd + i] = f16_to_f32(pv[off]);
				}
		float *q = malloc(sizeof(float) * n_heads * hd), *ref = malloc(sizeof(float) * n_heads * hd);
		float *out = malloc(sizeof(float) * n_heads * hd), *scores = malloc(sizeof(float) * group * n_pos);
		for (int i = 0; i < n_heads * hd; i++)
			q[i] = frand();
		attention_contiguous(ref, q, n_heads, n_kv, hd, ck, cv, pos);
		for (int g = 0; g < n_kv; g++)
			attention_paged(out + (size_t)g * group * hd, q + (size_t)g * group * hd, group, &view, g,
					perm, pos, scores);
		for (int i = 0; i < n_heads * hd; i++) {
			double d = fabs((double)out[i] - ref[i]);
			CHECK(d <= 1e-5, "trial %d (kv %d group %d hd %d bs %d pos %d): [%d] %g vs %g", trial, n_kv,
			      group, hd, bs, pos, i, out[i], ref[i]);
			worst = d > worst ? d : worst;
		}
		free(perm); free(pk); free(pv); free(ck); free(cv); free(q); free(ref); free(out); free(scores);
	}
	printf("     max abs diff %.3g over 300 shapes\n", worst);
}

static void test_matmul_matches_naive_and_is_batch_invariant(void)
{
	for (int trial = 0; trial < 60; trial++) {
		/* up to 5 panels (R = 4 and tails), up to 3 passes of batch rows */
		int rows = 1 + irand(150), cols = 1 + irand(300), nb = 1 + irand(30);
		int f16 = trial & 1;
		float *wf = malloc(sizeof(float) * rows * cols);
		uint16_t *wh = malloc(sizeof(uint16_t) * rows * cols);
		for (int i = 0; i < rows * cols; i++) {
			wf[i] = (float)(irand(512) - 256) / 256.0f;
			wh[i] = f32_to_f16(wf[i]); /* exact: multiples of 1/256 in [-1, 1] */
			CHECK(f16_to_f32(wh[i]) == wf[i], "f16 round trip of %g", wf[i]);
		}
		float *x = malloc(sizeof(float) * nb * cols), *y = malloc(sizeof(float) * nb * rows);
		float *y1 = malloc(sizeof(float) * rows);
		for (int i = 0; i < nb * cols; i++)
			x[i] = frand();
		uint32_t type = f16 ? GGML_F16 : GGML_F32;
		void *buf = aligned_alloc(64, (pack_bytes(type, rows, cols) + 63) & ~(size_t)63);
		struct packed_mat pw, *w = &pw;
		pack_matrix(&pw, buf, f16 ? (const void *)wh : wf, type, rows, cols);
		matmul_rows(y, rows, w, x, cols, nb, 0, rows, false);
		for (int b = 0; b < nb; b++) {
			/* one row of the batch alone, split at an odd row: identical bits */
			int split = irand(rows + 1);
			matmul_rows(y1, rows, w, x + (size_t)b * cols, cols, 1, 0, split, false);
			matmul_rows(y1, rows, w, x + (size_t)b * cols, cols, 1, split, rows, false);
			for (int o = 0; o < rows; o++) {
				double ref = 0;
				for (int i = 0; i < cols; i++)
					ref += (double)wf[(size_t)o * cols + i] * x[(size_t)b * cols + i];
				float got = y[(size_t)b * rows + o];
				CHECK(fabs(got - ref) <= 1e-4 * (1 + fabs(ref)), "rows %d cols %d nb %d: y[%d][%d] %g vs %g",
				      rows, cols, nb, b, o, got, ref);
				CHECK(memcmp(&got, &y1[o], 4) == 0, "batch %d vs alone differ at [%d][%d]: %.9g vs %.9g",
				      nb, b, o, got, y1[o]);
			}
		}
		/* a second stream fetched on the side changes no bit; the cursor
		 * moves a line per input column and stops at the stream's end */
		const char *segs[3] = { (const char *)x, (const char *)x + 256, (const char *)y1 };
		struct fetch_list side = { segs, 3, 128, 0, 0 };
		float *y2 = malloc(sizeof(float) * nb * rows);
		matmul_rows_fetch(y2, rows, w, x, cols, nb, 0, rows, false, &side);
		CHECK(memcmp(y, y2, sizeof(float) * nb * rows) == 0, "fetching on the side changed y");
		CHECK(side.i <= 3 && (side.i < 3 || side.off == 0), "cursor past the end: %d/%d", side.i, side.off);
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
		int lines = side.i * 2 + side.off / 64;
		CHECK(lines == 6 || (cols < 6 && lines >= cols), "cols %d: %d lines fetched", cols, lines);
#endif
		free(y2);
		/* accumulate adds onto y */
		matmul_rows(y, rows, w, x, cols, nb, 0, rows, true);
		for (int o = 0; o < rows; o++)
			CHECK(y[o] == 2 * y1[o] || nb > 1, "accumulate");
		free(wf); free(wh); free(x); free(y); free(y1); free(buf);
	}
}

/* F32 -> F16 for the KV cache: exact on every F16 value, ties to even, the
 * vector row path equal to the scalar one (which the fallback build uses). */
static void test_f16_store_rounding(void)
{
	for (uint32_t h = 0; h < 0x10000; h++) {
		if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
			continue; /* NaN payloads */
		CHECK(f32_to_f16(f16_to_f32((uint16_t)h)) == h, "round trip of 0x%04x", h);
		/* the midpoint to the next value up in magnitude rounds to the even one */
		if ((h & 0x7fff) < 0x7bff) {
			double a = f16_to_f32((uint16_t)h), b = f16_to_f32((uint16_t)(h + 1));
			uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
			CHECK(f32_to_f16((float)((a + b) / 2)) == even, "tie between 0x%04x and 0x%04x", h, h + 1);
		}
	}
	float src[1000];
	uint16_t row[1000];
	for (int i = 0; i < 1000; i++)
		src[i] = frand() * (i % 7 == 0 ? 1e-5f : i % 5 == 0 ? 6e4f : 4.0f);
	f32_to_f16_row(row, src, 1000);
	for (int i = 0; i < 1000; i++)
		CHECK(row[i] == f32_to_f16(src[i]), "row[%d] of %g: 0x%04x vs 0x%04x", i, src[i], row[i],
		      f32_to_f16(src[i]));
	CHECK(f32_to_f16(1e6f) == 0x7c00 && f32_to_f16(-1e6f) == 0xfc00, "overflow to infinity");
}

/* RMSNorm's scale as llama.cpp's ggml_compute_forward_rms_norm_f32 makes it:
 * float squares summed in double, the mean rounded to float, 1 / sqrtf(mean +
 * eps).  Bit for bit: a row of a Q4_0 embedding holds values at exactly half
 * its block's largest, so 8-bit activation quantization lands on x.5 up to
 * the scale's last bit, and a scale one bit off flips those codes (the Q4_0
 * logits against llama.cpp's, docs/engine.md). */
static void test_rmsnorm_scale_is_llama_cpps(void)
{
	enum { N = 256, ROWS = 2000 };
	float x[N], w[N], out[N];
	int differ_float = 0;
	for (int i = 0; i < N; i++)
		w[i] = 1;
	for (int r = 0; r < ROWS; r++) {
		/* codes -8..7 times one fp16-representable step, as a Q4_0 row */
		float d = ldexpf(1.0f + (float)irand(1024) / 1024, -4 - irand(6));
		for (int i = 0; i < N; i++)
			x[i] = (float)(irand(16) - 8) * d;
		double ss = 0;
		float fs = 0;
		for (int i = 0; i < N; i++) {
			ss += (double)(x[i] * x[i]);
			fs += x[i] * x[i];
		}
		float mean = (float)(ss / N), inv = 1.0f / sqrtf(mean + 1e-5f);
		differ_float += 1.0f / sqrtf(fs / N + 1e-5f) != inv;
		rmsnorm(out, x, w, N, 1e-5f);
		for (int i = 0; i < N; i++)
			CHECK(out[i] == x[i] * inv, "row %d [%d]: %.9g, llama.cpp's %.9g", r, i, out[i], x[i] * inv);
	}
	/* the float sum would have been off on this many rows */
	printf("     rmsnorm: %d of %d rows' scale bit-identical to llama.cpp's; a float sum differs on %d\n",
	       ROWS, ROWS, differ_float);
	CHECK(differ_float > 0, "no row tells the float sum from the double one: the test shows nothing");
}

static void test_rmsnorm_rope(void)
{
	float x[8] = { 1, 2, 3, 4, -1, -2, -3, -4 }, w[8] = { 1, 1, 1, 1, 2, 2, 2, 2 }, out[8];
	rmsnorm(out, x, w, 8, 0);
	double rms = sqrt((1 + 4 + 9 + 16) * 2 / 8.0);
	for (int i = 0; i < 8; i++)
		CHECK_NEAR(out[i], x[i] / rms * w[i], 1e-6);
	/* RoPE: position 0 is the identity; pair i rotates by pos * base^(-2i/hd) */
	float cs[3 * 4 * 2];
	rope_table(cs, 3, 8, 10000.0f);
	float v[8] = { 1, 0, 1, 0, 1, 0, 1, 0 };
	rope(v, 1, 8, cs);
	CHECK(v[0] == 1 && v[1] == 0, "pos 0 rotates");
	rope(v, 1, 8, cs + 2 * 4 * 2);
	for (int i = 0; i < 4; i++) {
		double a = 2 * pow(10000.0, -2.0 * i / 8);
		CHECK_NEAR(v[2 * i], cos(a), 1e-6);
		CHECK_NEAR(v[2 * i + 1], sin(a), 1e-6);
	}
}

/* SwiGLU against double precision over the whole useful range and past it
 * (the vector exp clamps its argument), relative to max(|result|, 1e-30). */
static void test_swiglu_accuracy(void)
{
	enum { N = 20011 };     /* odd: the scalar tail runs too */
	static float h1[N], h3[N], x[N];
	double worst = 0;
	for (int i = 0; i < N; i++) {
		x[i] = h1[i] = -120.0f + 240.0f * (float)i / (N - 1);
		h3[i] = 1.0f + 0.5f * frand();
	}
	swiglu(h1, h3, N);
	for (int i = 0; i < N; i++) {
		double want = x[i] / (1.0 + exp(-(double)x[i])) * h3[i];
		double err = fabs(h1[i] - want) / fmax(fabs(want), 1e-30);
		CHECK(isfinite(h1[i]), "silu(%g) = %g", x[i], h1[i]);
		if (fabs(want) > 1e-30 && err > worst)
			worst = err;
		CHECK(fabs(want) < 1e-30 ? fabs(h1[i]) < 1e-30 : err < 2e-6,
		      "silu(%g) * %g = %.9g, want %.9g (rel %.2g)", x[i], h3[i], h1[i], want, err);
	}
	printf("     swiglu max relative error %.2g over [-120, 120]\n", worst);
}

int main(void)
{
	RUN(test_paged_equals_contiguous);
	RUN(test_matmul_matches_naive_and_is_batch_invariant);
	RUN(test_f16_store_rounding);
	RUN(test_rmsnorm_rope);
	RUN(test_rmsnorm_scale_is_llama_cpps);
	RUN(test_swiglu_accuracy);
	return CHECK_DONE();
}
