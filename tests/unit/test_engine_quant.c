/* test_engine_quant.c - llama.cpp's Q8_0, Q4_0 and Q4_K in kpi-infer: its
 * dequantization bit for bit against a reference written here from the block
 * formats' definitions; its activation quantization against llama.cpp's
 * definition of q8_0 and q8_K; every kernel set (AVX-512 VNNI, AVX-VNNI,
 * AVX2, plain C) identical to the others to the bit and within float rounding
 * of a double-precision product of the dequantized operands, whatever the
 * batch or row split; the quantizers within what each format allows; files of
 * every type written, loaded, and refused when truncated or mis-sized. */
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/unit/check.h"
#include "tests/unit/test_engine_util.h"
#include "daemon/engine/backend.h"
#include "daemon/engine/gguf.h"
#include "daemon/engine/model.h"
#include "daemon/engine/qmatmul.h"
#include "daemon/engine/quant.h"

/* The reference computes d * q and d * sc * q - dmin * m as the formats
 * define them: one rounding per operation, as quant.c (no fused multiply-add). */
#pragma GCC optimize("fp-contract=off")

static char err[512];
static const uint32_t types[] = { GGML_Q8_0, GGML_Q4_0, GGML_Q4_K };

static uint64_t rng = 0x1234567;
static uint32_t rnd32(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(rng >> 32);
}
static float rndf(void) /* uniform in [-1, 1) */
{
	return (float)((double)rnd32() / 2147483648.0 - 1.0);
}

/* ---- the reference, from the formats' definitions ------------------------ */

/* IEEE half: sign, 5-bit exponent (bias 15), 10-bit fraction. */
static float ref_half(uint16_t h)
{
	int sign = h >> 15, e = (h >> 10) & 31, f = h & 1023;
	double v = e == 0 ? ldexp(f, -24) : ldexp(1024 + f, e - 25);
	return (float)(sign ? -v : v);
}

static uint16_t rd16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

/* Element e of a row of blocks of type t, from the raw bytes. */
static float ref_value(uint32_t t, const uint8_t *row, int e)
{
	if (t == GGML_Q8_0) { /* 34 bytes: fp16 d, 32 int8 */
		const uint8_t *b = row + (e / 32) * 34;
		return ref_half(rd16(b)) * (float)(int8_t)b[2 + e % 32];
	}
	if (t == GGML_Q4_0) { /* 18 bytes: fp16 d, byte j = value j (low nibble), j + 16 (high) */
		const uint8_t *b = row + (e / 32) * 18;
		int j = e % 32, q = j < 16 ? b[2 + j] & 15 : b[2 + j - 16] >> 4;
		return ref_half(rd16(b)) * (float)(q - 8);
	}
	/* Q4_K, 144 bytes: fp16 d, fp16 dmin, 12 bytes of 6-bit scales and
	 * mins, 128 nibble bytes in 4 chunks of 32: chunk c's low nibbles are
	 * sub-block 2c, its high ones sub-block 2c + 1 */
	const uint8_t *b = row + (e / 256) * 144, *s = b + 4, *qs = b + 16;
	int i = e % 256, c = i / 64, l = i % 64, j = 2 * c + (l >= 32);
	int q = l < 32 ? qs[32 * c + l] & 15 : qs[32 * c + l - 32] >> 4;
	int sc, m;
	if (j < 4) {
		sc = s[j] & 0x3f;
		m = s[j + 4] & 0x3f;
	} else {
		sc = (s[j + 4] & 0x0f) | (s[j - 4] & 0xc0) >> 2;
		m = (s[j + 4] & 0xf0) >> 4 | (s[j] & 0xc0) >> 2;
	}
	float d1 = ref_half(rd16(b)) * (float)sc, m1 = ref_half(rd16(b + 2)) * (float)m;
	return d1 * (float)q - m1;
}

/* The size of what element e sums: |value|, and for Q4_K both of its parts
 * (the float rounding of a kernel is relative to them, not to their
 * difference). */
static double ref_magnitude(uint32_t t, const uint8_t *row, int e)
{
	if (t != GGML_Q4_K)
		return fabs(ref_value(t, row, e));
	const uint8_t *b = row + (e / 256) * 144;
	return fabs(ref_value(t, row, e)) + 2 * fabs(ref_half(rd16(b + 2))) * 63;
}

/* Random blocks: any bytes, except scales that are not finite. */
static void random_blocks(uint32_t t, uint8_t *dst, int n_values)
{
	size_t bytes = ggml_row_bytes(t, n_values), bb = ggml_block_bytes(t);
	for (size_t i = 0; i < bytes; i++)
		dst[i] = (uint8_t)rnd32();
	for (size_t b = 0; b < bytes; b += bb)
		for (int h = 0; h < (t == GGML_Q4_K ? 2 : 1); h++) {
			/* |d| in [2^-8, 2^-4): products stay normal floats */
			uint16_t v = (uint16_t)((rnd32() & 0x83ff) | (7 + rnd32() % 4) << 10);
			dst[b + 2 * h] = v & 0xff;
			dst[b + 2 * h + 1] = v >> 8;
		}
}

static void test_dequantize_matches_the_format(void)
{
	enum { N = 4096 };
	static uint8_t raw[N * 2];
	static float got[N];
	for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
		uint32_t t = types[k];
		for (int round = 0; round < 20; round++) {
			random_blocks(t, raw, N);
			quant_dequantize_row(t, raw, got, N);
			for (int e = 0; e < N; e++) {
				float want = ref_value(t, raw, e);
				CHECK(memcmp(&want, &got[e], 4) == 0, "%s element %d: %.9g, the format says %.9g",
				      ggml_type_name(t), e, got[e], want);
			}
		}
	}
}

/* The quantizers' error on uniform values, against what each format's
 * step allows. Uniform rounding to a step s errs by s / sqrt(12) RMS, and
 * uniform values in [-a, a] have an RMS of a / sqrt(3): Q8_0's codes -127..127
 * over [-amax, amax] give 1 / 254 of the RMS value; Q4_0's and Q4_K's 16
 * codes span 15 steps of a block's range, 1 / 15 (Q4_0 places them
 * around the value of largest magnitude, Q4_K fits them to each 32 values). */
static void test_quantizers_error_within_the_format(void)
{
	enum { N = 768 * 8 };
	static float x[N], y[N];
	static uint8_t q[N * 2];
	const double bound[] = { 1.0 / 254, 1.0 / 15, 1.0 / 15 };
	for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
		uint32_t t = types[k];
		double se = 0, sx = 0;
		for (int i = 0; i < N; i++)
			x[i] = rndf() * (float)(1 + (i / 768)); /* rows of different scales */
		quant_quantize_row(t, x, q, N);
		quant_dequantize_row(t, q, y, N);
		for (int i = 0; i < N; i++) {
			se += (double)(x[i] - y[i]) * (x[i] - y[i]);
			sx += (double)x[i] * x[i];
		}
		double rel = sqrt(se / sx);
		printf("     %s: RMS error %.4f of the RMS value (format's step allows %.4f)\n", ggml_type_name(t),
		       rel, bound[k]);
		CHECK(rel <= bound[k], "%s: relative RMS error %.5f over %.5f", ggml_type_name(t), rel, bound[k]);
		CHECK(rel > bound[k] / 4, "%s: error %.5f implausibly small: is it quantizing?", ggml_type_name(t), rel);
	}
}

/* llama.cpp's activation quantization, from its definition: q8_0 per 32
 * values (scale amax / 127 stored as fp16, codes rint(x * 127 / amax)),
 * q8_K per 256 (the value of largest magnitude maps to -127, codes
 * rint(x * -127 / max) capped at 127, scale its inverse in f32). */
static void ref_q8_0(const float *x, int n, int8_t *q, float *d, int *sum)
{
	for (int b = 0; b < n / 32; b++) {
		float amax = 0;
		for (int i = 0; i < 32; i++)
			amax = fmaxf(amax, fabsf(x[32 * b + i]));
		float id = amax != 0 ? 127.0f / amax : 0;
		sum[b] = 0;
		for (int i = 0; i < 32; i++) {
			q[32 * b + i] = (int8_t)rintf(x[32 * b + i] * id);
			sum[b] += q[32 * b + i];
		}
		d[b] = ref_half(f32_to_f16(amax / 127.0f));
	}
}

static void ref_q8_K(const float *x, int n, int8_t *q, float *d, int *sum32)
{
	for (int b = 0; b < n / 256; b++) {
		const float *v = x + 256 * b;
		float max = 0;
		for (int i = 0; i < 256; i++)
			if (fabsf(v[i]) > fabsf(max))
				max = v[i];
		float is = max != 0 ? -127.0f / max : 0;
		for (int i = 0; i < 256; i++) {
			int c = (int)rintf(is * v[i]);
			q[256 * b + i] = (int8_t)(c > 127 ? 127 : c);
		}
		d[b] = max != 0 ? 1 / is : 0;
		for (int j = 0; j < 8; j++) {
			sum32[8 * b + j] = 0;
			for (int i = 0; i < 32; i++)
				sum32[8 * b + j] += q[256 * b + 32 * j + i];
		}
	}
}

enum { COLS = 768, ROWS = 37, NB = 13 };
static float xf[NB][COLS];
static struct qmm_act act;
static void *act_buf;

static void make_activations(void)
{
	for (int b = 0; b < NB; b++)
		for (int i = 0; i < COLS; i++) /* a few outliers, and an all-zero block */
			xf[b][i] = b == 3 && i < 256 ? 0 : rndf() * (rnd32() % 37 == 0 ? 20.0f : 1.0f);
	if (!act_buf)
		act_buf = malloc(qmm_act_bytes(NB, COLS));
	qmm_act_init(&act, act_buf, NB, COLS);
	act.nb = NB;
	act.cols = COLS;
	qmm_act_quantize(&act, QMM_FORM_Q8_0 | QMM_FORM_Q8_K, &xf[0][0], COLS, 0, NB);
}

static void test_activations_quantized_as_llama_cpp(void)
{
	make_activations();
	int8_t q[COLS];
	float d[COLS / 32];
	int sum[COLS / 32];
	for (int b = 0; b < NB; b++) {
		ref_q8_0(xf[b], COLS, q, d, sum);
		CHECK(memcmp(q, act.q0 + b * COLS, COLS) == 0, "row %d: q8_0 codes differ", b);
		for (int k = 0; k < COLS / 32; k++) {
			CHECK(d[k] == act.d0[b * (COLS / 32) + k], "row %d block %d: q8_0 scale", b, k);
			CHECK(act.n8[b * (COLS / 32) + k] == -8 * sum[k] && act.n128[b * (COLS / 32) + k] == -128 * sum[k],
			      "row %d block %d: code sums", b, k);
		}
		ref_q8_K(xf[b], COLS, q, d, sum);
		CHECK(memcmp(q, act.qk + b * COLS, COLS) == 0, "row %d: q8_K codes differ", b);
		for (int k = 0; k < COLS / 256; k++)
			CHECK(d[k] == act.dk[b * (COLS / 256) + k], "row %d block %d: q8_K scale", b, k);
		for (int k = 0; k < COLS / 32; k++)
			CHECK(sum[k] == act.sk[b * (COLS / 32) + k], "row %d: q8_K sum of 32 #%d", b, k);
	}
}

/* Y for every row and batch row in double, from the dequantized operands. */
static void ref_matmul(uint32_t t, const uint8_t *w, double *y, double *mag)
{
	size_t rb = ggml_row_bytes(t, COLS);
	int8_t q[COLS];
	float d[COLS / 32];
	int sum[COLS / 32];
	for (int b = 0; b < NB; b++) {
		float xd[COLS];
		if (t == GGML_Q4_K) {
			ref_q8_K(xf[b], COLS, q, d, sum);
			for (int i = 0; i < COLS; i++)
				xd[i] = d[i / 256] * q[i];
		} else {
			ref_q8_0(xf[b], COLS, q, d, sum);
			for (int i = 0; i < COLS; i++)
				xd[i] = d[i / 32] * q[i];
		}
		for (int o = 0; o < ROWS; o++) {
			double s = 0, a = 0;
			for (int i = 0; i < COLS; i++) {
				double v = (double)ref_value(t, w + o * rb, i) * xd[i];
				s += v;
				a += ref_magnitude(t, w + o * rb, i) * fabs(xd[i]);
			}
			y[b * ROWS + o] = s;
			mag[b * ROWS + o] = a;
		}
	}
}

static void test_kernels_agree_with_each_other_and_the_reference(void)
{
	make_activations();
	static uint8_t w[ROWS * 2 * COLS];
	static double ref[NB * ROWS], mag[NB * ROWS];
	static float y[QMM_ISA_COUNT][NB * ROWS], part[NB * ROWS];
	enum qmm_isa was = qmm_isa_get();
	int isas = 0;
	for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
		uint32_t t = types[k];
		size_t rb = ggml_row_bytes(t, COLS);
		for (int o = 0; o < ROWS; o++)
			random_blocks(t, w + o * rb, COLS);
		void *packed = aligned_alloc(64, (qmm_pack_bytes(t, ROWS, COLS) + 63) & ~(size_t)63);
		struct packed_mat pm;
		qmm_pack(&pm, packed, w, t, ROWS, COLS);
		ref_matmul(t, w, ref, mag);
		isas = 0;
		for (int isa = 0; isa < QMM_ISA_COUNT; isa++) {
			if (qmm_isa_set(isa, err, sizeof(err)))
				continue; /* this CPU cannot run it */
			isas++;
			qmm_rows(y[isa], ROWS, &pm, &act, 0, NB, 0, ROWS, false, NULL);
			for (int i = 0; i < NB * ROWS; i++)
				CHECK(fabs(y[isa][i] - ref[i]) <= 1e-5 * mag[i] + 1e-30,
				      "%s %s: batch row %d, row %d: %.9g, reference %.9g", ggml_type_name(t),
				      qmm_isa_name(isa), i / ROWS, i % ROWS, y[isa][i], ref[i]);
			CHECK(memcmp(y[isa], y[QMM_SCALAR], sizeof(y[0])) == 0, "%s: %s differs from plain C",
			      ggml_type_name(t), qmm_isa_name(isa));
			/* one batch row at a time, and the rows split at a panel:
			 * the same bits (every output is one fixed computation) */
			for (int b = 0; b < NB; b++) {
				qmm_rows(part + b * ROWS, ROWS, &pm, &act, b, 1, 0, QMM_PANEL, false, NULL);
				qmm_rows(part + b * ROWS, ROWS, &pm, &act, b, 1, QMM_PANEL, ROWS, false, NULL);
			}
			CHECK(memcmp(part, y[isa], sizeof(part)) == 0, "%s %s: batch or row split changes bits",
			      ggml_type_name(t), qmm_isa_name(isa));
			/* accumulate adds the product to what is there */
			for (int i = 0; i < NB * ROWS; i++)
				part[i] = 1.5f;
			qmm_rows(part, ROWS, &pm, &act, 0, NB, 0, ROWS, true, NULL);
			for (int i = 0; i < NB * ROWS; i++)
				CHECK(part[i] == 1.5f + y[isa][i], "%s %s: accumulate", ggml_type_name(t), qmm_isa_name(isa));
		}
		free(packed);
	}
	qmm_isa_set(was, err, sizeof(err));
	printf("     %d kernel sets on this CPU (best: %s)\n", isas, qmm_isa_name(qmm_isa_best()));
	CHECK(isas >= 1, "not even plain C ran");
}

/* ---- files --------------------------------------------------------------- */

static void test_presets_of_every_type_load(void)
{
	static const uint32_t all[] = { GGML_F32, GGML_F16, GGML_Q8_0, GGML_Q4_0, GGML_Q4_K };
	struct model *f32 = NULL;
	for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++) {
		char name[64];
		snprintf(name, sizeof(name), "tiny-%s.gguf", ggml_type_name(all[k]));
		const char *p = tpath(name);
		CHECK(model_make_type(p, "tiny", 0, all[k], err, sizeof(err)) == 0, "%s", err);
		struct model *m = model_load(p, err, sizeof(err));
		CHECK(m != NULL, "%s: %s", name, err);
		CHECK(!strcmp(m->info.weight_type, ggml_type_name(all[k])), "%s: weight type %s", name,
		      m->info.weight_type);
		CHECK(m->layers[0].wq.type == all[k] && m->output.type == all[k] && m->tok_embd.type == all[k] &&
		      m->layers[0].attn_norm.type == GGML_F32, "%s: tensor types", name);
		/* the same weights: each type's first row within its format's error of F32's */
		if (!f32) {
			f32 = m;
			continue;
		}
		float a[256], b[256];
		quant_dequantize_row(GGML_F32, f32->layers[0].w_up.data, a, 256);
		quant_dequantize_row(all[k], m->layers[0].w_up.data, b, 256);
		double se = 0, sx = 0;
		for (int i = 0; i < 256; i++) {
			se += (double)(a[i] - b[i]) * (a[i] - b[i]);
			sx += (double)a[i] * a[i];
		}
		CHECK(sqrt(se / sx) < 0.07, "%s: first row is %.3f of F32's RMS away: other weights?", name,
		      sqrt(se / sx));
		struct stat st;
		stat(p, &st);
		printf("     %s: %lld bytes, %s\n", name, (long long)st.st_size, m->info.weight_type);
		model_free(m);
	}
	model_free(f32);
	char e2[256];
	CHECK(model_make_type(tpath("x.gguf"), "tiny", 0, 14, e2, sizeof(e2)) == -1 && strstr(e2, "Q4_K"),
	      "Q6_K should be refused: %s", e2);
	CHECK(model_make_parse_type("q4_k") == GGML_Q4_K && model_make_parse_type("Q6_K") == -1, "type names");
}

/* The same bytes on every run (the quantizers are deterministic). */
static void test_quantized_files_deterministic(void)
{
	const char *a = tpath("qa.gguf"), *b = tpath("qb.gguf");
	CHECK(model_make_type(a, "tiny", 3, GGML_Q4_K, err, sizeof(err)) == 0, "%s", err);
	CHECK(model_make_type(b, "tiny", 3, GGML_Q4_K, err, sizeof(err)) == 0, "%s", err);
	FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
	int ca, cb, same = 1;
	do {
		ca = fgetc(fa);
		cb = fgetc(fb);
		same &= ca == cb;
	} while (ca != EOF);
	fclose(fa);
	fclose(fb);
	CHECK(same, "two Q4_K files of the same seed differ");
}

static void expect_fail(const char *path, const char *want)
{
	err[0] = 0;
	struct model *m = model_load(path, err, sizeof(err));
	CHECK(m == NULL, "%s loaded but should fail with '%s'", path, want);
	CHECK(strchr(err, '\n') == NULL && strstr(err, want), "error '%s' does not name '%s'", err, want);
}

/* A quantized file cut inside its tensors: the error names the tensor. */
static void test_truncated_quantized_tensor(void)
{
	const char *p = tpath("cut-q4k.gguf");
	CHECK(model_make_type(p, "tiny", 0, GGML_Q4_K, err, sizeof(err)) == 0, "%s", err);
	struct stat st;
	stat(p, &st);
	CHECK(truncate(p, st.st_size - 100) == 0, "truncate");
	expect_fail(p, "truncated");
	expect_fail(p, "output.weight");
}

/* Finds the tensor info of name in a written file and sets its type. */
static void patch_type(const char *path, const char *name, uint32_t type)
{
	FILE *f = fopen(path, "r+b");
	static uint8_t buf[1 << 16];
	size_t n = fread(buf, 1, sizeof(buf), f), len = strlen(name);
	for (size_t i = 8; i + len + 4 + 16 + 4 < n; i++) {
		uint64_t l;
		memcpy(&l, buf + i - 8, 8);
		if (l == len && !memcmp(buf + i, name, len)) {
			uint32_t nd;
			memcpy(&nd, buf + i + len, 4);
			fseek(f, (long)(i + len + 4 + 8 * nd), SEEK_SET);
			fwrite(&type, 4, 1, f);
			break;
		}
	}
	fclose(f);
}

/* Two tensors, the first claimed as a bigger type than its bytes: caught
 * before it is read, naming both tensors. */
static void test_mis_sized_quantized_tensor(void)
{
	const char *p = tpath("missized.gguf");
	FILE *f = fopen(p, "wb");
	struct gguf_writer *w = gguf_w_begin(f);
	gguf_w_kv_str(w, "general.architecture", "llama");
	int64_t ne_a[2] = { 64, 4 }, ne_b[1] = { 8 }, ne_c[1] = { 256 };
	gguf_w_tensor(w, "blk.0.attn_q.weight", GGML_Q4_0, 2, ne_a);
	gguf_w_tensor(w, "blk.0.attn_norm.weight", GGML_F32, 1, ne_b);
	gguf_w_tensor(w, "output_norm.weight", GGML_F32, 1, ne_c);
	gguf_w_header(w);
	uint8_t qa[4 * 2 * 18] = { 0 };
	float nb[256] = { 1 };
	gguf_w_data(w, qa, sizeof(qa));
	gguf_w_data(w, nb, 8 * sizeof(float));
	gguf_w_data(w, nb, sizeof(nb));
	gguf_w_end(w);
	fclose(f);
	/* as Q4_0 it is whole; as Q8_0 (34 bytes a block, not 18) it runs
	 * into the next tensor's bytes, well inside the file */
	struct gguf *g = gguf_open(p, err, sizeof(err));
	CHECK(g != NULL, "%s", err);
	gguf_close(g);
	patch_type(p, "blk.0.attn_q.weight", GGML_Q8_0);
	g = gguf_open(p, err, sizeof(err));
	CHECK(g == NULL, "a Q8_0 shape over Q4_0 bytes loaded");
	CHECK(strstr(err, "blk.0.attn_q.weight") && strstr(err, "Q8_0") && strstr(err, "blk.0.attn_norm.weight"),
	      "%s", err);
	/* rows that are not whole blocks */
	patch_type(p, "blk.0.attn_q.weight", GGML_Q4_K); /* 64 values a row, Q4_K blocks are 256 */
	g = gguf_open(p, err, sizeof(err));
	CHECK(g == NULL && strstr(err, "blk.0.attn_q.weight") && strstr(err, "256-value blocks"), "%s", err);
	/* a type id nobody knows */
	patch_type(p, "blk.0.attn_q.weight", 99);
	g = gguf_open(p, err, sizeof(err));
	CHECK(g != NULL, "an unknown type is the loader's to name: %s", err);
	gguf_close(g);
}

static void test_unknown_type_named_by_the_loader(void)
{
	const char *p = tpath("q99.gguf");
	struct mini_opts o = { .bad_type_tensor = "blk.0.ffn_gate.weight" };
	write_mini(p, &o);
	patch_type(p, "blk.0.ffn_gate.weight", 99);
	expect_fail(p, "blk.0.ffn_gate.weight");
	expect_fail(p, "unknown (99)");
}

/* The quantized forward pass is batch-invariant like the float one: a
 * prompt prefilled in one step or fed token by token gives the same logits. */
static void test_quantized_forward_batch_invariant(void)
{
	const char *p = tpath("tiny-q4k-fwd.gguf");
	CHECK(model_make_type(p, "tiny", 0, GGML_Q4_K, err, sizeof(err)) == 0, "%s", err);
	struct model *m = model_load(p, err, sizeof(err));
	CHECK(m != NULL, "%s", err);
	struct backend_params bp = { m, 8, 4, 16, 4, 2 };
	struct backend *be = cpu_backend_ops.create(&bp, err, sizeof(err));
	CHECK(be != NULL, "%s", err);
	int32_t toks[6] = { 1, 75, 108, 111, 32, 119 };
	int32_t bt_a[2] = { 0, 1 }, bt_b[2] = { 4, 6 };
	const int32_t *tab[1] = { bt_a };
	int start[2] = { 0, 6 }, pos0 = 0, lrow = 0, V = m->info.vocab_size;
	float whole[512], step[512];
	struct backend_batch b = { .n_seqs = 1, .n_tokens = 6, .tokens = toks, .seq_start = start, .pos0 = &pos0,
				   .block_tables = tab, .logits_row = &lrow, .logits = whole };
	CHECK(cpu_backend_ops.forward(be, &b, err, sizeof(err)) == 0, "%s", err);
	tab[0] = bt_b;
	for (int t = 0; t < 6; t++) {
		int s1[2] = { 0, 1 };
		struct backend_batch d = { .n_seqs = 1, .n_tokens = 1, .tokens = toks + t, .seq_start = s1,
					   .pos0 = &t, .block_tables = tab, .logits_row = &lrow, .logits = step };
		CHECK(cpu_backend_ops.forward(be, &d, err, sizeof(err)) == 0, "%s", err);
	}
	CHECK(memcmp(whole, step, sizeof(float) * V) == 0, "prefill and token-by-token differ");
	double mx = 0;
	for (int v = 0; v < V; v++)
		mx = fabs(whole[v]) > mx ? fabs(whole[v]) : mx;
	CHECK(mx > 0.1 && isfinite(mx), "degenerate logits (max |logit| %g)", mx);
	cpu_backend_ops.destroy(be);
	model_free(m);
}

int main(void)
{
	RUN(test_dequantize_matches_the_format);
	RUN(test_quantizers_error_within_the_format);
	RUN(test_activations_quantized_as_llama_cpp);
	RUN(test_kernels_agree_with_each_other_and_the_reference);
	RUN(test_presets_of_every_type_load);
	RUN(test_quantized_files_deterministic);
	RUN(test_truncated_quantized_tensor);
	RUN(test_mis_sized_quantized_tensor);
	RUN(test_unknown_type_named_by_the_loader);
	RUN(test_quantized_forward_batch_invariant);
	free(act_buf);
	return CHECK_DONE();
}
