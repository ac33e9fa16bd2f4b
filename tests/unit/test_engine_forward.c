/* test_engine_forward.c - the CPU backend's forward pass on the small preset
 * against a naive reference written straight from the llama equations
 * (double sums, contiguous K/V), and the same logits however the tokens are
 * split into steps or batched with other sequences. */
#include <math.h>

#include "tests/unit/check.h"
#include "tests/unit/test_engine_util.h"
#include "daemon/engine/backend.h"
#include "daemon/engine/gguf.h"
#include "daemon/engine/kernels.h"
#include "daemon/engine/model.h"

static char err[512];
enum { NTOK = 5 };
static const int32_t prompt[NTOK] = { 1, 3 + 'H', 3 + 'i', 3 + '!', 3 + ' ' };

static double W(const struct mtensor *t, int64_t r, int64_t c)
{
	size_t i = (size_t)r * t->cols + c;
	return t->type == GGML_F16 ? f16_to_f32(((const uint16_t *)t->data)[i]) : ((const float *)t->data)[i];
}

static void ref_matvec(double *y, const struct mtensor *w, const double *x)
{
	for (int64_t o = 0; o < w->rows; o++) {
		double s = 0;
		for (int64_t i = 0; i < w->cols; i++)
			s += W(w, o, i) * x[i];
		y[o] = s;
	}
}

static void ref_rmsnorm(double *out, const double *x, const struct mtensor *w, int n, double eps)
{
	double ss = 0;
	for (int i = 0; i < n; i++)
		ss += x[i] * x[i];
	double inv = 1 / sqrt(ss / n + eps);
	for (int i = 0; i < n; i++)
		out[i] = x[i] * inv * W(w, 0, i);
}

static void ref_rope(double *v, int n_heads, int hd, int pos, double base)
{
	for (int h = 0; h < n_heads; h++)
		for (int i = 0; i < hd / 2; i++) {
			double a = pos * pow(base, -2.0 * i / hd), c = cos(a), s = sin(a);
			double x0 = v[h * hd + 2 * i], x1 = v[h * hd + 2 * i + 1];
			v[h * hd + 2 * i] = x0 * c - x1 * s;
			v[h * hd + 2 * i + 1] = x0 * s + x1 * c;
		}
}

/* logits[t][vocab] for every prefix of tokens */
static void ref_forward(const struct model *m, const int32_t *tok, int n, double *logits)
{
	const struct model_info *mi = &m->info;
	int dim = mi->dim, hd = mi->head_dim, nh = mi->n_heads, nkv = mi->n_kv_heads, ffn = mi->ffn_dim;
	int L = mi->n_layers, V = mi->vocab_size;
	double *kc = calloc((size_t)L * n * nkv * hd, sizeof(double)), *vc = calloc((size_t)L * n * nkv * hd, sizeof(double));
	double *x = malloc(sizeof(double) * dim), *xb = malloc(sizeof(double) * dim);
	double *q = malloc(sizeof(double) * nh * hd), *att = malloc(sizeof(double) * nh * hd);
	double *h1 = malloc(sizeof(double) * ffn), *h3 = malloc(sizeof(double) * ffn), *tmp = malloc(sizeof(double) * (dim > ffn ? dim : ffn) * 2);
	double *sc = malloc(sizeof(double) * n);
	for (int t = 0; t < n; t++) {
		for (int i = 0; i < dim; i++)
			x[i] = W(&m->tok_embd, tok[t], i);
		for (int l = 0; l < L; l++) {
			const struct model_layer *ly = &m->layers[l];
			double *K = kc + (size_t)l * n * nkv * hd, *Vv = vc + (size_t)l * n * nkv * hd;
			ref_rmsnorm(xb, x, &ly->attn_norm, dim, m->norm_eps);
			ref_matvec(q, &ly->wq, xb);
			ref_matvec(K + (size_t)t * nkv * hd, &ly->wk, xb);
			ref_matvec(Vv + (size_t)t * nkv * hd, &ly->wv, xb);
			ref_rope(q, nh, hd, t, m->rope_base);
			ref_rope(K + (size_t)t * nkv * hd, nkv, hd, t, m->rope_base);
			/* the KV cache stores F16: so does the reference */
			for (int i = 0; i < nkv * hd; i++) {
				K[(size_t)t * nkv * hd + i] = f16_to_f32(f32_to_f16((float)K[(size_t)t * nkv * hd + i]));
				Vv[(size_t)t * nkv * hd + i] = f16_to_f32(f32_to_f16((float)Vv[(size_t)t * nkv * hd + i]));
			}
			for (int h = 0; h < nh; h++) {
				int g = h / (nh / nkv);
				double mx = -1e300, sum = 0;
				for (int j = 0; j <= t; j++) {
					double d = 0;
					for (int i = 0; i < hd; i++)
						d += q[h * hd + i] * K[((size_t)j * nkv + g) * hd + i];
					sc[j] = d / sqrt(hd);
					mx = sc[j] > mx ? sc[j] : mx;
				}
				for (int j = 0; j <= t; j++)
					sum += sc[j] = exp(sc[j] - mx);
				for (int i = 0; i < hd; i++) {
					double o = 0;
					for (int j = 0; j <= t; j++)
						o += sc[j] / sum * Vv[((size_t)j * nkv + g) * hd + i];
					att[h * hd + i] = o;
				}
			}
			ref_matvec(tmp, &ly->wo, att);
			for (int i = 0; i < dim; i++)
				x[i] += tmp[i];
			ref_rmsnorm(xb, x, &ly->ffn_norm, dim, m->norm_eps);
			ref_matvec(h1, &ly->w_gate, xb);
			ref_matvec(h3, &ly->w_up, xb);
			for (int i = 0; i < ffn; i++)
				h1[i] = h1[i] / (1 + exp(-h1[i])) * h3[i];
			ref_matvec(tmp, &ly->w_down, h1);
			for (int i = 0; i < dim; i++)
				x[i] += tmp[i];
		}
		ref_rmsnorm(xb, x, &m->output_norm, dim, m->norm_eps);
		ref_matvec(logits + (size_t)t * V, &m->output, xb);
	}
	free(kc); free(vc); free(x); free(xb); free(q); free(att); free(h1); free(h3); free(tmp); free(sc);
}

static struct model *small;
static struct backend *be;
static double ref[NTOK][512];

static void setup(void)
{
	small = model_load(preset_path("small"), err, sizeof(err));
	CHECK(small != NULL, "%s", err);
	struct backend_params p = { small, 8, 4, 16, 4, 2 };
	be = cpu_backend_ops.create(&p, err, sizeof(err));
	CHECK(be != NULL, "%s", err);
	CHECK(small->info.vocab_size <= 512, "vocab");
	double *l = malloc(sizeof(double) * NTOK * small->info.vocab_size);
	ref_forward(small, prompt, NTOK, l);
	for (int t = 0; t < NTOK; t++)
		for (int v = 0; v < small->info.vocab_size; v++)
			ref[t][v] = l[(size_t)t * small->info.vocab_size + v];
	free(l);
}

static void check_logits(const float *got, int t, const char *what)
{
	int V = small->info.vocab_size;
	double mx = 0, worst = 0;
	for (int v = 0; v < V; v++)
		mx = fabs(ref[t][v]) > mx ? fabs(ref[t][v]) : mx;
	for (int v = 0; v < V; v++) {
		double d = fabs(got[v] - ref[t][v]);
		worst = d > worst ? d : worst;
		CHECK(d <= 2e-3 * (1 + mx), "%s: position %d logit %d: %g vs reference %g", what, t, v, got[v], ref[t][v]);
	}
	CHECK(mx > 0.1, "degenerate logits (max |logit| %g)", mx);
	if (t == NTOK - 1 && !strcmp(what, "prefill of 5"))
		printf("     max |diff| %.3g with max |logit| %.3g\n", worst, mx);
}

/* Runs prompt positions [p0, p1) of one sequence as one step with block table bt. */
static void step1(const int32_t *bt, int p0, int p1, float *logits)
{
	int start[2] = { 0, p1 - p0 }, pos0 = p0, lrow = 0;
	const int32_t *tables[1] = { bt };
	struct backend_batch b = { 1, p1 - p0, prompt + p0, start, &pos0, tables, &lrow, logits, NULL, NULL };
	CHECK(cpu_backend_ops.forward(be, &b, err, sizeof(err)) == 0, "%s", err);
}

static void test_small_prefill_matches_reference(void)
{
	setup();
	float logits[512];
	int32_t bt[2] = { 5, 2 }; /* 4 positions a block: positions 4.. in block 2 */
	step1(bt, 0, NTOK, logits);
	check_logits(logits, NTOK - 1, "prefill of 5");
}

static void test_small_decode_matches_reference_each_position(void)
{
	float logits[512], prefill[512];
	int32_t bt[2] = { 1, 7 };
	for (int t = 0; t < NTOK; t++) {
		step1(bt, t, t + 1, logits);
		check_logits(logits, t, "token by token");
	}
	/* chunks 0-2, 3-4 in another pair of blocks: bit-identical to token by token */
	int32_t bt2[2] = { 3, 0 };
	step1(bt2, 0, 3, prefill);
	step1(bt2, 3, NTOK, prefill);
	CHECK(memcmp(prefill, logits, sizeof(float) * small->info.vocab_size) == 0, "chunked prefill changes bits");
}

static void test_small_batched_two_sequences(void)
{
	/* sequence A: full prompt; sequence B: its first 3 tokens, in one step */
	int32_t toks[NTOK + 3];
	memcpy(toks, prompt, sizeof(prompt));
	memcpy(toks + NTOK, prompt, sizeof(int32_t) * 3);
	int32_t bta[2] = { 4, 6 }, btb[1] = { 1 };
	int start[3] = { 0, NTOK, NTOK + 3 }, pos0[2] = { 0, 0 }, lrow[2] = { 1, 0 };
	const int32_t *tables[2] = { bta, btb };
	float logits[2 * 512];
	struct backend_batch b = { 2, NTOK + 3, toks, start, pos0, tables, lrow, logits, NULL, NULL };
	CHECK(cpu_backend_ops.forward(be, &b, err, sizeof(err)) == 0, "%s", err);
	int V = small->info.vocab_size;
	check_logits(logits + V, NTOK - 1, "batched A");
	check_logits(logits, 2, "batched B");
	cpu_backend_ops.destroy(be);
	model_free(small);
}

/* kv_copy (copy-on-write for prefix sharing): a sequence continuing from a
 * copied block sees exactly the K/V of the original. */
static void test_kv_copy_block(void)
{
	struct model *m = model_load(preset_path("tiny"), err, sizeof(err));
	CHECK(m != NULL, "%s", err);
	struct backend_params p = { m, 4, 8, 8, 2, 2 };
	struct backend *b = cpu_backend_ops.create(&p, err, sizeof(err));
	CHECK(b != NULL, "%s", err);
	int32_t toks[5] = { 1, 50, 60, 70, 80 };
	int32_t bt0[1] = { 0 }, bt3[1] = { 3 };
	int start[2] = { 0, 4 }, pos0 = 0, lrow = 0;
	const int32_t *tables[1] = { bt0 };
	float a[512], c[512];
	struct backend_batch bb = { 1, 4, toks, start, &pos0, tables, &lrow, a, NULL, NULL };
	CHECK(cpu_backend_ops.forward(b, &bb, err, sizeof(err)) == 0, "%s", err);
	cpu_backend_ops.kv_copy(b, 3, 0);
	int start1[2] = { 0, 1 }, pos4 = 4;
	struct backend_batch d0 = { 1, 1, toks + 4, start1, &pos4, tables, &lrow, a, NULL, NULL };
	CHECK(cpu_backend_ops.forward(b, &d0, err, sizeof(err)) == 0, "%s", err);
	tables[0] = bt3;
	struct backend_batch d3 = { 1, 1, toks + 4, start1, &pos4, tables, &lrow, c, NULL, NULL };
	CHECK(cpu_backend_ops.forward(b, &d3, err, sizeof(err)) == 0, "%s", err);
	CHECK(memcmp(a, c, sizeof(float) * m->info.vocab_size) == 0, "copied block gives other logits");
	/* a token id outside the vocabulary is an error, not a crash */
	int32_t bad = 100000;
	struct backend_batch e = { 1, 1, &bad, start1, &pos4, tables, &lrow, c, NULL, NULL };
	CHECK(cpu_backend_ops.forward(b, &e, err, sizeof(err)) == -1 && strstr(err, "100000"), "%s", err);
	cpu_backend_ops.destroy(b);
	model_free(m);
}

int main(void)
{
	RUN(test_small_prefill_matches_reference);
	RUN(test_small_decode_matches_reference_each_position);
	RUN(test_small_batched_two_sequences);
	RUN(test_kv_copy_block);
	return CHECK_DONE();
}
