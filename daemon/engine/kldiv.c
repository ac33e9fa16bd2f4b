/* kldiv.c - kpi-infer --kl-divergence (kldiv.h): the reference model's
 * log-probabilities at every scored position are kept, then the measured
 * model runs the same chunks and each position's KL divergence, top-1
 * agreement and probability of the true next token are compared. */
#include "daemon/engine/kldiv.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/engine/logits.h"
#include "daemon/engine/model.h"

#define KL_DEFAULT_CTX 256
#define KL_DEFAULT_CHUNKS 8

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The token stream: the text file tokenized, or seeded draws from the
 * vocabulary's ordinary and byte tokens. Returns the count, or -1. */
static int read_tokens(const struct kldiv_opts *o, const struct model *m, int want, int32_t **out, char *err,
		       size_t errlen)
{
	const struct tokenizer *t = &m->tok;
	if (!o->text) {
		int32_t *ok = malloc(sizeof(int32_t) * t->n_vocab), n_ok = 0;
		for (int i = 0; i < t->n_vocab; i++)
			if (t->kinds[i] == TOK_NORMAL || t->kinds[i] == TOK_BYTE)
				ok[n_ok++] = i;
		if (!n_ok) {
			free(ok);
			snprintf(err, errlen, "the vocabulary has no ordinary tokens to draw from: pass --kl-text FILE");
			return -1;
		}
		*out = malloc(sizeof(int32_t) * want);
		uint64_t s = 0;
		for (int i = 0; i < want; i++)
			(*out)[i] = ok[splitmix64(&s) % (uint64_t)n_ok];
		free(ok);
		return want;
	}
	FILE *f = fopen(o->text, "rb");
	if (!f) {
		snprintf(err, errlen, "--kl-text %s: %s", o->text, strerror(errno));
		return -1;
	}
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap);
	for (size_t r; (r = fread(buf + n, 1, cap - n, f)) > 0;) {
		n += r;
		if (n == cap)
			buf = realloc(buf, cap *= 2);
	}
	fclose(f);
	int count = tokenizer_encode(t, buf, n, NULL, 0);
	*out = malloc(sizeof(int32_t) * (count > 0 ? count : 1));
	tokenizer_encode(t, buf, n, *out, count);
	free(buf);
	return count;
}

/* log-softmax of logits into lp; returns the argmax (lowest id on ties). */
static int log_softmax(const float *logits, double *lp, int n)
{
	int best = 0;
	for (int i = 1; i < n; i++)
		best = logits[i] > logits[best] ? i : best;
	double sum = 0;
	for (int i = 0; i < n; i++)
		sum += exp((double)logits[i] - logits[best]);
	double lse = logits[best] + log(sum);
	for (int i = 0; i < n; i++)
		lp[i] = logits[i] - lse;
	return best;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* pth percentile of sorted v: linear interpolation between the closest
 * ranks, the definition schema/pct.h gives every figure of the trace. */
static double pct(const double *v, size_t n, double p)
{
	if (!n)
		return 0;
	double r = p / 100 * (n - 1);
	size_t lo = (size_t)r;
	return lo + 1 < n ? v[lo] + (r - lo) * (v[lo + 1] - v[lo]) : v[n - 1];
}

static void mean_se(const double *v, size_t n, double *mean, double *se)
{
	double s = 0, s2 = 0;
	for (size_t i = 0; i < n; i++)
		s += v[i];
	*mean = n ? s / n : 0;
	for (size_t i = 0; i < n; i++)
		s2 += (v[i] - *mean) * (v[i] - *mean);
	*se = n > 1 ? sqrt(s2 / (n - 1) / n) : 0;
}

/* Feeds the chunks through one model; for every scored position calls
 * visit with the log-probabilities (lp) and the token that follows. */
struct pass {
	const char *path;
	const int32_t *chunks; /* [n_chunks][ctx] */
	int n_chunks, ctx, first, threads;
};

typedef void (*visit_fn)(void *arg, int chunk, int j, const double *lp, int top, int next);

static int run_pass(const struct pass *p, int vocab_want, visit_fn visit, void *arg, char *err, size_t errlen)
{
	struct logits_run *r = logits_open(p->path, p->n_chunks, p->ctx, p->threads, err, errlen);
	if (!r)
		return -1;
	int vocab = logits_model(r)->info.vocab_size, rc = 0;
	if (vocab_want && vocab != vocab_want) {
		snprintf(err, errlen, "%s has %d tokens in its vocabulary, the other model %d: they must share one",
			 p->path, vocab, vocab_want);
		logits_close(r);
		return -1;
	}
	float *logits = malloc(sizeof(float) * vocab * p->n_chunks);
	double *lp = malloc(sizeof(double) * vocab);
	int32_t *tok = malloc(sizeof(int32_t) * p->n_chunks);
	for (int j = 0; j < p->ctx - 1 && !rc; j++) {
		for (int c = 0; c < p->n_chunks; c++)
			tok[c] = p->chunks[(size_t)c * p->ctx + j];
		if (logits_step(r, tok, j, logits, err, errlen)) {
			rc = -1;
			break;
		}
		if (j < p->first)
			continue;
		for (int c = 0; c < p->n_chunks; c++) {
			int top = log_softmax(logits + (size_t)c * vocab, lp, vocab);
			visit(arg, c, j - p->first, lp, top, p->chunks[(size_t)c * p->ctx + j + 1]);
		}
	}
	free(logits);
	free(lp);
	free(tok);
	logits_close(r);
	return rc;
}

struct kl_state {
	int vocab, scored; /* positions scored per chunk */
	float *ref_lp;     /* [chunk][scored][vocab] the reference's log-probabilities */
	int *ref_top;      /* [chunk][scored] */
	double *kld, *dp, *nll_q, *nll_ref, *ln_ratio;
	long same_top, n;
};

static void visit_ref(void *arg, int c, int j, const double *lp, int top, int next)
{
	struct kl_state *s = arg;
	size_t at = (size_t)c * s->scored + j;
	for (int i = 0; i < s->vocab; i++)
		s->ref_lp[at * s->vocab + i] = (float)lp[i];
	s->ref_top[at] = top;
	(void)next;
}

static void visit_q(void *arg, int c, int j, const double *lp, int top, int next)
{
	struct kl_state *s = arg;
	size_t at = (size_t)c * s->scored + j;
	const float *ref = s->ref_lp + at * s->vocab;
	double kl = 0;
	/* both sides rounded to float as the reference was kept: a model
	 * against itself is 0 to the bit */
	for (int i = 0; i < s->vocab; i++)
		kl += exp(ref[i]) * (ref[i] - (float)lp[i]);
	double lq = (float)lp[next];
	s->kld[s->n] = kl;
	s->nll_q[s->n] = -lq;
	s->nll_ref[s->n] = -ref[next];
	s->ln_ratio[s->n] = ref[next] - lq;
	s->dp[s->n] = exp(lq) - exp(ref[next]);
	s->same_top += top == s->ref_top[at];
	s->n++;
}

static void report(FILE *out, const struct kldiv_opts *o, const struct kl_state *s, int n_chunks, int ctx,
		   const char *wt_q, const char *wt_ref)
{
	size_t n = (size_t)s->n;
	double *kld = malloc(sizeof(double) * n), *dp = malloc(sizeof(double) * n);
	memcpy(kld, s->kld, sizeof(double) * n);
	memcpy(dp, s->dp, sizeof(double) * n);
	qsort(kld, n, sizeof(double), cmp_double);
	qsort(dp, n, sizeof(double), cmp_double);
	double kl_mean, kl_se, nq, nq_se, nr, nr_se, lr, lr_se, dp_mean, dp_se;
	mean_se(s->kld, n, &kl_mean, &kl_se);
	mean_se(s->nll_q, n, &nq, &nq_se);
	mean_se(s->nll_ref, n, &nr, &nr_se);
	mean_se(s->ln_ratio, n, &lr, &lr_se);
	mean_se(s->dp, n, &dp_mean, &dp_se);
	double rms2 = 0;
	for (size_t i = 0; i < n; i++)
		rms2 += s->dp[i] * s->dp[i];
	/* the RMS's standard error by the delta method, as llama-perplexity's */
	double rms = sqrt(rms2 / n), var2 = 0;
	for (size_t i = 0; i < n; i++)
		var2 += (s->dp[i] * s->dp[i] - rms2 / n) * (s->dp[i] * s->dp[i] - rms2 / n);
	double rms_se = n > 1 && rms > 0 ? sqrt(var2 / (n - 1) / n) / (2 * rms) : 0;
	double top = (double)s->same_top / n, top_se = sqrt(top * (1 - top) / (n > 1 ? n - 1 : 1));
	double ppl_q = exp(nq), ppl_r = exp(nr);
	if (o->json) {
		fprintf(out,
			"{\"model\":\"%s\",\"reference\":\"%s\",\"weight_type\":\"%s\",\"reference_weight_type\":\"%s\","
			"\"chunks\":%d,\"ctx\":%d,\"positions\":%zu,\"ppl\":%.6g,\"ppl_se\":%.6g,\"ppl_base\":%.6g,"
			"\"ppl_base_se\":%.6g,\"ln_ppl_ratio\":%.6g,\"ln_ppl_ratio_se\":%.6g,"
			"\"kld_mean\":%.6g,\"kld_se\":%.6g,\"kld_max\":%.6g,\"kld_p999\":%.6g,\"kld_p99\":%.6g,"
			"\"kld_p90\":%.6g,\"kld_median\":%.6g,\"kld_p10\":%.6g,\"kld_p5\":%.6g,\"kld_p1\":%.6g,"
			"\"kld_min\":%.6g,\"dp_mean\":%.6g,\"dp_rms\":%.6g,\"dp_max\":%.6g,\"dp_min\":%.6g,"
			"\"same_top\":%.6g,\"same_top_se\":%.6g}\n",
			o->model, o->reference, wt_q, wt_ref, n_chunks, ctx, n, ppl_q, ppl_q * nq_se, ppl_r,
			ppl_r * nr_se, lr, lr_se, kl_mean, kl_se, kld[n - 1], pct(kld, n, 99.9), pct(kld, n, 99),
			pct(kld, n, 90), pct(kld, n, 50), pct(kld, n, 10), pct(kld, n, 5), pct(kld, n, 1), kld[0],
			dp_mean, rms, dp[n - 1], dp[0], top, top_se);
	} else {
		fprintf(out, "kl-divergence: %s (%s) against %s (%s): %d chunks of %d tokens, %zu positions scored\n\n",
			o->model, wt_q, o->reference, wt_ref, n_chunks, ctx, n);
		fprintf(out, "====== Perplexity statistics ======\n");
		fprintf(out, "Mean PPL(Q)                   : %10.6f ± %10.6f\n", ppl_q, ppl_q * nq_se);
		fprintf(out, "Mean PPL(base)                : %10.6f ± %10.6f\n", ppl_r, ppl_r * nr_se);
		fprintf(out, "Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", lr, lr_se);
		fprintf(out, "Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", exp(lr), exp(lr) * lr_se);
		fprintf(out, "\n====== KL divergence statistics ======\n");
		fprintf(out, "Mean    KLD: %10.6f ± %10.6f\n", kl_mean, kl_se);
		fprintf(out, "Maximum KLD: %10.6f\n", kld[n - 1]);
		fprintf(out, "99.9%%   KLD: %10.6f\n", pct(kld, n, 99.9));
		fprintf(out, "99.0%%   KLD: %10.6f\n", pct(kld, n, 99));
		fprintf(out, "90.0%%   KLD: %10.6f\n", pct(kld, n, 90));
		fprintf(out, "Median  KLD: %10.6f\n", pct(kld, n, 50));
		fprintf(out, "10.0%%   KLD: %10.6f\n", pct(kld, n, 10));
		fprintf(out, " 5.0%%   KLD: %10.6f\n", pct(kld, n, 5));
		fprintf(out, " 1.0%%   KLD: %10.6f\n", pct(kld, n, 1));
		fprintf(out, "Minimum KLD: %10.6f\n", kld[0]);
		fprintf(out, "\n====== Token probability statistics ======\n");
		fprintf(out, "Mean    Δp: %7.3f ± %5.3f %%\n", 100 * dp_mean, 100 * dp_se);
		fprintf(out, "Maximum Δp: %7.3f%%\n", 100 * dp[n - 1]);
		fprintf(out, "99.0%%   Δp: %7.3f%%\n", 100 * pct(dp, n, 99));
		fprintf(out, "Median  Δp: %7.3f%%\n", 100 * pct(dp, n, 50));
		fprintf(out, " 1.0%%   Δp: %7.3f%%\n", 100 * pct(dp, n, 1));
		fprintf(out, "Minimum Δp: %7.3f%%\n", 100 * dp[0]);
		fprintf(out, "RMS Δp    : %7.3f ± %5.3f %%\n", 100 * rms, 100 * rms_se);
		fprintf(out, "Same top p: %7.3f ± %5.3f %%\n", 100 * top, 100 * top_se);
	}
	free(kld);
	free(dp);
}

int kldiv_run(const struct kldiv_opts *o, FILE *out, char *err, size_t errlen)
{
	int rc = -1, threads = o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
	int32_t *stream = NULL, *chunks = NULL;
	struct kl_state s = { 0 };
	char wt_q[32] = "", wt_ref[32] = "";
	/* the measured model's tokenizer and context, then its vocabulary must
	 * be the reference's (run_pass checks the size) */
	struct model *m = model_load(o->model, err, errlen);
	if (!m)
		return -1;
	snprintf(wt_q, sizeof(wt_q), "%s", m->info.weight_type);
	int ctx = o->ctx > 0 ? o->ctx : KL_DEFAULT_CTX;
	ctx = ctx > m->info.context_length ? m->info.context_length : ctx;
	if (ctx < 8) {
		snprintf(err, errlen, "--kl-ctx %d is too short: each chunk needs at least 8 tokens", ctx);
		model_free(m);
		return -1;
	}
	int want_chunks = o->chunks > 0 ? o->chunks : KL_DEFAULT_CHUNKS;
	int n_tok = read_tokens(o, m, want_chunks * (ctx - 1), &stream, err, errlen);
	int bos = m->info.bos_id;
	s.vocab = m->info.vocab_size;
	model_free(m);
	if (n_tok < 0)
		return -1;
	int n_chunks = n_tok / (ctx - 1);
	n_chunks = o->chunks > 0 && n_chunks > o->chunks ? o->chunks : n_chunks;
	if (n_chunks < 1) {
		snprintf(err, errlen, "--kl-text %s gives %d tokens, fewer than one chunk of %d: lower --kl-ctx or give more text",
			 o->text, n_tok, ctx);
		goto out;
	}
	chunks = malloc(sizeof(int32_t) * n_chunks * ctx);
	for (int c = 0; c < n_chunks; c++) {
		chunks[(size_t)c * ctx] = bos;
		memcpy(chunks + (size_t)c * ctx + 1, stream + (size_t)c * (ctx - 1), sizeof(int32_t) * (ctx - 1));
	}
	struct pass p = { o->reference, chunks, n_chunks, ctx, ctx / 2, threads };
	s.scored = ctx - 1 - p.first;
	size_t n_pos = (size_t)n_chunks * s.scored;
	s.ref_lp = malloc(sizeof(float) * n_pos * s.vocab);
	s.ref_top = malloc(sizeof(int) * n_pos);
	s.kld = malloc(sizeof(double) * n_pos);
	s.dp = malloc(sizeof(double) * n_pos);
	s.nll_q = malloc(sizeof(double) * n_pos);
	s.nll_ref = malloc(sizeof(double) * n_pos);
	s.ln_ratio = malloc(sizeof(double) * n_pos);
	if (!s.ref_lp || !s.ref_top || !s.kld || !s.dp || !s.nll_q || !s.nll_ref || !s.ln_ratio) {
		snprintf(err, errlen, "out of memory for %zu positions of %d log-probabilities: lower --kl-chunks or --kl-ctx",
			 n_pos, s.vocab);
		goto out;
	}
	if (run_pass(&p, s.vocab, visit_ref, &s, err, errlen))
		goto out;
	{
		struct model *r = model_load(o->reference, err, errlen);
		if (!r)
			goto out;
		snprintf(wt_ref, sizeof(wt_ref), "%s", r->info.weight_type);
		model_free(r);
	}
	p.path = o->model;
	if (run_pass(&p, s.vocab, visit_q, &s, err, errlen))
		goto out;
	report(out, o, &s, n_chunks, ctx, wt_q, wt_ref);
	rc = 0;
out:
	free(stream);
	free(chunks);
	free(s.ref_lp);
	free(s.ref_top);
	free(s.kld);
	free(s.dp);
	free(s.nll_q);
	free(s.nll_ref);
	free(s.ln_ratio);
	return rc;
}
