/* engine_bench.c - measurements of the engine for tests/bench/bench_engine.py
 * and bench_quant.py: one measurement per run, one JSON object on stdout.
 * Modes: make (write a preset, any weight type), bandwidth (memory-read GB/s
 * with the engine's thread pool), fma (FMA peak), kernel (one quantized
 * matmul kernel alone), decode (aggregate tok/s at N concurrent sequences,
 * resident memory), prefill (tok/s of one long prompt), burst (requests/s on
 * a burst, continuous or static batching), generate (greedy token ids, for
 * the comparison with llama.cpp). */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/engine.h"
#include "daemon/engine/backend.h"
#include "daemon/engine/model.h"
#include "daemon/engine/model_make.h"
#include "daemon/engine/pool.h"
#include "daemon/engine/qmatmul.h"
#include "daemon/engine/quant.h"
#include "daemon/engine/gguf.h"
#include "daemon/engine/logits.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

/* CPU time of every thread of this process: the work, whatever else the
 * machine runs (wall time on a busy machine measures the machine). */
static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* VmRSS and VmHWM of this process, in bytes. */
static void rss(long long *now_b, long long *peak_b)
{
	char line[256];
	FILE *f = fopen("/proc/self/status", "r");
	*now_b = *peak_b = 0;
	while (f && fgets(line, sizeof(line), f)) {
		long long kb;
		if (sscanf(line, "VmRSS: %lld kB", &kb) == 1)
			*now_b = kb << 10;
		else if (sscanf(line, "VmHWM: %lld kB", &kb) == 1)
			*peak_b = kb << 10;
	}
	if (f)
		fclose(f);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: engine-bench MODE [options]  (prints one JSON object)\n"
		"modes:\n"
		"  make       --out PATH --preset tiny|small [--seed N] [--type T]\n"
		"             [--dequantized]  write a model (T: F32, F16 (default), Q8_0, Q4_0,\n"
		"             Q4_K); --dequantized: as F32, the values T's file holds\n"
		"  bandwidth  [--mib N] [--threads N]                    memory-read GB/s\n"
		"  fma        [--threads N]                              FMA peak GFLOP/s, the\n"
		"             engine's vector width, every thread\n"
		"  kernel     --type T [--rows N] [--cols N] [--seqs N] [--reps N]\n"
		"             one quantized matmul alone, one thread: GMAC/s, GB/s\n"
		"  decode     --model PATH --seqs N [--prompt N] [--gen N] aggregate decode tok/s\n"
		"             and resident memory\n"
		"  prefill    --model PATH [--prompt N]                  prefill tok/s\n"
		"  burst      --model PATH [--requests N] [--prompt N] [--mean N] [--max N]\n"
		"             [--batching continuous|static] [--seqs N]  requests/s\n"
		"  generate   --model PATH --prompt-ids ID,ID,... [--gen N] greedy token ids\n"
		"             and each choice's margin over the runner-up logit\n"
		"  logits     --model PATH --prompt-ids ID,ID,...        the logits after every\n"
		"             position (teacher forcing)\n"
		"  first      --model PATH --prompt-ids ID,ID,...        the logits of each id\n"
		"             alone at position 0\n"
		"options:\n"
		"  --threads N   worker threads (default: online CPUs)\n"
		"  --kernels K   quantized kernels: avx512-vnni, avx-vnni, avx2, scalar\n"
		"                (default: the best this CPU runs)\n"
		"  --reps N      repetitions inside one run (bandwidth, fma; default 3)\n"
		"  -h, --help    this text\n");
}

/* ---- bandwidth --------------------------------------------------------- */

struct bw_job {
	const float *buf;
	size_t n, chunk;
	double sums[256];
};

static void bw_task(void *arg, int task, int thread)
{
	struct bw_job *j = arg;
	const float *p = j->buf + (size_t)task * j->chunk;
	size_t n = j->chunk;
	if ((size_t)task * j->chunk + n > j->n)
		n = j->n - (size_t)task * j->chunk;
	double s = 0;
#if defined(__AVX2__)
	__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	size_t i = 0;
	for (; i + 32 <= n; i += 32) {
		/* the same software prefetch distance as the matmul's weight streams */
		_mm_prefetch((const char *)(p + i) + 4096, _MM_HINT_T0);
		a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
		a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
		a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
		a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
	}
	float t[8];
	_mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
	for (int k = 0; k < 8; k++)
		s += t[k];
	for (; i < n; i++)
		s += p[i];
#else
	for (size_t i = 0; i < n; i++)
		s += p[i];
#endif
	j->sums[thread & 255] += s;
}

static int run_bandwidth(int mib, int threads, int reps)
{
	size_t n = (size_t)mib << 18; /* floats */
	float *buf = malloc(n * sizeof(float));
	if (!buf) {
		fprintf(stderr, "engine-bench: cannot allocate %d MiB (lower --mib)\n", mib);
		return 1;
	}
	for (size_t i = 0; i < n; i++)
		buf[i] = (float)(i & 7);
	struct pool *p = pool_create(threads);
	struct bw_job j = { .buf = buf, .n = n, .chunk = 1 << 18 };
	int tasks = (int)((n + j.chunk - 1) / j.chunk);
	pool_run(p, bw_task, &j, tasks); /* warm: page tables, TLB */
	double best = 0, sum = 0;
	for (int r = 0; r < reps; r++) {
		double t0 = now();
		pool_run(p, bw_task, &j, tasks);
		double gbs = n * sizeof(float) / (now() - t0) / 1e9;
		best = gbs > best ? gbs : best;
		sum += gbs;
	}
	printf("{\"mode\":\"bandwidth\",\"mib\":%d,\"threads\":%d,\"gbs_best\":%.3f,\"gbs_mean\":%.3f,\"checksum\":%.1f}\n",
	       mib, pool_threads(p), best, sum / reps, j.sums[0]);
	pool_destroy(p);
	free(buf);
	return 0;
}

/* ---- FMA peak ---------------------------------------------------------- */

/* The arithmetic ceiling a compute-bound step is measured against: 12
 * independent chains of fused multiply-adds (enough to cover FMA latency on
 * two pipes) at the vector width the engine's kernels are compiled for, one
 * task per thread. */
#define FMA_CHAINS 12
#define FMA_ITERS 20000000L
#if defined(__AVX512F__)
#define FMA_WIDTH 16
typedef __m512 fvec;
#define FV_SET(v) _mm512_set1_ps(v)
#define FV_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#elif defined(__AVX2__) && defined(__FMA__)
#define FMA_WIDTH 8
typedef __m256 fvec;
#define FV_SET(v) _mm256_set1_ps(v)
#define FV_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#else
#define FMA_WIDTH 1
typedef float fvec;
#define FV_SET(v) (v)
#define FV_FMA(a, b, c) fmaf(a, b, c)
#endif

static void fma_task(void *arg, int task, int thread)
{
	fvec x[FMA_CHAINS], m = FV_SET(1.0000001f), c = FV_SET(1e-7f);
	(void)task;
	for (int i = 0; i < FMA_CHAINS; i++)
		x[i] = FV_SET((float)i);
	for (long k = 0; k < FMA_ITERS; k++)
		for (int i = 0; i < FMA_CHAINS; i++)
			x[i] = FV_FMA(x[i], m, c);
	float s = 0;
	for (int i = 0; i < FMA_CHAINS; i++)
		s += ((const float *)&x[i])[0];
	((float *)arg)[thread & 255] += s; /* keeps the chains alive */
}

static int run_fma(int threads, int reps)
{
	struct pool *p = pool_create(threads);
	float sink[256] = { 0 };
	int n = pool_threads(p);
	double best = 0, sum = 0;
	for (int r = 0; r < reps; r++) {
		double t0 = now();
		pool_run(p, fma_task, sink, n);
		double gf = 2.0 * FMA_WIDTH * FMA_CHAINS * FMA_ITERS * n / (now() - t0) / 1e9;
		best = gf > best ? gf : best;
		sum += gf;
	}
	printf("{\"mode\":\"fma\",\"threads\":%d,\"width\":%d,\"gflops_best\":%.2f,"
	       "\"gflops_mean\":%.2f,\"sink\":%.1f}\n", n, FMA_WIDTH, best, sum / reps, (double)sink[0]);
	pool_destroy(p);
	return 0;
}

/* ---- engine runs ------------------------------------------------------- */

static struct engine *open_engine(const char *model, int seqs, int tokens, int threads,
				  enum engine_batching batching, int kv_blocks)
{
	struct engine_config c = { .model_path = model, .max_seqs = seqs, .max_batched_tokens = tokens,
				   .threads = threads, .batching = batching, .kv_blocks = kv_blocks };
	char err[512];
	struct engine *e = engine_create(&c, err, sizeof(err));
	if (!e)
		fprintf(stderr, "engine-bench: %s\n", err);
	return e;
}

static void make_prompt(int32_t *p, int n, int salt, const struct model_info *mi)
{
	for (int i = 0; i < n; i++)
		p[i] = 3 + (int32_t)((i * 31 + salt * 17) % (mi->vocab_size - 3));
}

/* Steps until the engine is idle; returns the tokens sampled.  rows, when
 * given, adds up the rows every forward pass computed: prefill and decode
 * tokens, static batching's padding rows included. */
static long drain(struct engine *e, struct engine_event *ev, int max_ev, int *finished, long *rows)
{
	long toks = 0;
	struct engine_stats st;
	engine_stats(e, &st);
	uint64_t steps = st.steps;
	while (engine_has_work(e)) {
		int n = engine_step(e, ev, max_ev);
		if (rows) {
			engine_stats(e, &st);
			if (st.steps != steps)
				*rows += st.last_step_tokens;
			steps = st.steps;
		}
		for (int i = 0; i < n; i++) {
			if (ev[i].kind == ENGINE_EV_TOKEN)
				toks++;
			else if (ev[i].kind == ENGINE_EV_FINISHED && finished)
				(*finished)++;
		}
	}
	return toks;
}

static int run_decode(const char *model, int seqs, int prompt, int gen, int threads)
{
	struct engine *e = open_engine(model, seqs < 1 ? 1 : seqs, 2048 > seqs ? 2048 : seqs, threads,
				       ENGINE_BATCH_CONTINUOUS, 0);
	if (!e)
		return 1;
	const struct model_info *mi = engine_model(e);
	int32_t *pr = malloc(sizeof(int32_t) * prompt);
	int max_ev = engine_events_max(e) + seqs * 4;
	struct engine_event *ev = malloc(sizeof(*ev) * max_ev);
	char err[256];
	for (int s = 0; s < seqs; s++) {
		make_prompt(pr, prompt, s, mi);
		struct sampling_params sp = { .temperature = 0, .top_p = 1, .seed = s, .max_tokens = gen + 1,
					      .ignore_eos = true };
		if (engine_submit(e, s, pr, prompt, &sp, err, sizeof(err))) {
			fprintf(stderr, "engine-bench: %s\n", err);
			return 1;
		}
	}
	/* prefill until every sequence has its first token: those steps are not timed */
	int firsts = 0;
	while (firsts < seqs) {
		int n = engine_step(e, ev, max_ev);
		for (int i = 0; i < n; i++)
			firsts += ev[i].kind == ENGINE_EV_TOKEN && ev[i].first;
	}
	struct engine_stats st0, st1;
	engine_stats(e, &st0);
	double t0 = now(), c0 = cpu_now();
	long toks = drain(e, ev, max_ev, NULL, NULL);
	double dt = now() - t0, cpu = cpu_now() - c0;
	engine_stats(e, &st1);
	long steps = (long)(st1.steps - st0.steps);
	/* bytes read per decode step: every weight once, plus each sequence's K/V
	 * over its average context during the timed window */
	struct model *m = NULL;
	char e2[256];
	m = model_load(model, e2, sizeof(e2));
	double kv_tok = m ? (double)backend_kv_bytes_per_token(m) : 0;
	double wbytes = m ? (double)m->weight_bytes : 0;
	double avg_ctx = prompt + 1 + gen / 2.0;
	double bytes_per_step = wbytes + seqs * avg_ctx * kv_tok;
	/* arithmetic per decode step: a multiply-add per matmul weight per
	 * sequence, and attention's QK and PV over the average context */
	double flops_per_step = 0;
	if (m) {
		const struct model_info *i = &m->info;
		double params = (double)m->output.rows * m->output.cols;
		for (int l = 0; l < i->n_layers; l++) {
			const struct model_layer *L = &m->layers[l];
			const struct mtensor *w[] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down };
			for (size_t k = 0; k < sizeof(w) / sizeof(w[0]); k++)
				params += (double)w[k]->rows * w[k]->cols;
		}
		flops_per_step = seqs * (2 * params + 4.0 * i->n_layers * i->n_heads * i->head_dim * avg_ctx);
	}
	long long rss_now, rss_peak;
	rss(&rss_now, &rss_peak);
	printf("{\"mode\":\"decode\",\"seqs\":%d,\"prompt\":%d,\"gen\":%d,\"threads\":%d,\"tokens\":%ld,"
	       "\"steps\":%ld,\"seconds\":%.4f,\"tok_s\":%.2f,\"step_ms\":%.3f,\"weight_bytes\":%.0f,"
	       "\"bytes_per_step\":%.0f,\"gbs\":%.3f,\"flops_per_step\":%.0f,\"gflops\":%.2f,"
	       "\"weight_type\":\"%s\",\"kernels\":\"%s\",\"rss_bytes\":%lld,\"rss_peak_bytes\":%lld,"
	       "\"cpu_seconds\":%.4f,\"cpu_ms_per_token\":%.4f}\n",
	       seqs, prompt, gen, threads, toks, steps, dt, toks / dt, dt / steps * 1e3, wbytes,
	       bytes_per_step, bytes_per_step * steps / dt / 1e9, flops_per_step,
	       flops_per_step * steps / dt / 1e9, mi->weight_type, engine_kernels(e), rss_now, rss_peak, cpu,
	       cpu / toks * 1e3);
	model_free(m);
	free(pr);
	free(ev);
	engine_destroy(e);
	return 0;
}

static int run_prefill(const char *model, int prompt, int threads)
{
	struct engine *e = open_engine(model, 1, prompt, threads, ENGINE_BATCH_CONTINUOUS, 0);
	if (!e)
		return 1;
	const struct model_info *mi = engine_model(e);
	int32_t *pr = malloc(sizeof(int32_t) * prompt);
	struct engine_event ev[64];
	char err[256];
	double best = 1e30;
	for (int r = 0; r < 2; r++) {
		make_prompt(pr, prompt, r, mi);
		struct sampling_params sp = { .top_p = 1, .max_tokens = 1, .ignore_eos = true };
		if (engine_submit(e, r, pr, prompt, &sp, err, sizeof(err))) {
			fprintf(stderr, "engine-bench: %s\n", err);
			return 1;
		}
		double t0 = now();
		drain(e, ev, 64, NULL, NULL);
		double dt = now() - t0;
		best = dt < best ? dt : best;
	}
	printf("{\"mode\":\"prefill\",\"prompt\":%d,\"threads\":%d,\"seconds\":%.4f,\"tok_s\":%.2f}\n", prompt,
	       threads, best, prompt / best);
	free(pr);
	engine_destroy(e);
	return 0;
}

static int run_burst(const char *model, int requests, int prompt, int mean, int maxlen,
		     enum engine_batching batching, int seqs, int threads)
{
	struct engine *e = open_engine(model, seqs, 2048, threads, batching, 0);
	if (!e)
		return 1;
	const struct model_info *mi = engine_model(e);
	int32_t *pr = malloc(sizeof(int32_t) * prompt);
	int max_ev = engine_events_max(e) + requests;
	struct engine_event *ev = malloc(sizeof(*ev) * max_ev);
	char err[256];
	uint64_t rng = 12345; /* the same lengths for both batching modes */
	long want = 0;
	double t0 = now();
	for (int r = 0; r < requests; r++) {
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		double u = ((rng >> 11) + 0.5) * 0x1p-53;
		int len = (int)ceil(-log(u) * mean);
		len = len < 1 ? 1 : len > maxlen ? maxlen : len;
		want += len;
		make_prompt(pr, prompt, r, mi);
		struct sampling_params sp = { .top_p = 1, .seed = r, .max_tokens = len, .ignore_eos = true };
		if (engine_submit(e, r, pr, prompt, &sp, err, sizeof(err))) {
			fprintf(stderr, "engine-bench: %s\n", err);
			return 1;
		}
	}
	int finished = 0;
	long rows = 0;
	long toks = drain(e, ev, max_ev, &finished, &rows);
	double dt = now() - t0;
	struct engine_stats st;
	engine_stats(e, &st);
	printf("{\"mode\":\"burst\",\"batching\":\"%s\",\"requests\":%d,\"finished\":%d,\"prompt\":%d,"
	       "\"mean\":%d,\"max\":%d,\"seqs\":%d,\"threads\":%d,\"tokens\":%ld,\"want_tokens\":%ld,"
	       "\"seconds\":%.3f,\"req_s\":%.3f,\"tok_s\":%.2f,\"steps\":%llu,\"rows\":%ld,"
	       "\"prompt_tokens\":%llu,\"preemptions\":%llu}\n",
	       batching == ENGINE_BATCH_STATIC ? "static" : "continuous", requests, finished, prompt, mean,
	       maxlen, seqs, threads, toks, want, dt, finished / dt, toks / dt,
	       (unsigned long long)st.steps, rows, (unsigned long long)st.prompt_tokens,
	       (unsigned long long)st.preemptions);
	free(pr);
	free(ev);
	engine_destroy(e);
	return 0;
}

/* One quantized matmul (rows x cols of type, seeded weights) over seqs
 * activation rows, on this thread, repeated: multiply-adds per second and
 * the packed weights' bytes per second. */
static int run_kernel(const char *type_name, int rows, int cols, int seqs, int reps)
{
	int type = model_make_parse_type(type_name);
	if (type < 0 || !ggml_type_is_quant((uint32_t)type) || cols % 256) {
		fprintf(stderr, "engine-bench kernel: --type must be Q8_0, Q4_0 or Q4_K and --cols a multiple of 256\n");
		return 2;
	}
	size_t rb = ggml_row_bytes(type, cols);
	float *wf = malloc(sizeof(float) * cols), *x = malloc(sizeof(float) * (size_t)seqs * cols);
	float *y = malloc(sizeof(float) * (size_t)seqs * rows);
	char *wq = malloc(rb * rows);
	void *packed = aligned_alloc(64, (qmm_pack_bytes(type, rows, cols) + 63) & ~(size_t)63);
	void *abuf = malloc(qmm_act_bytes(seqs, cols));
	uint64_t s = 42;
	for (int r = 0; r < rows; r++) {
		for (int i = 0; i < cols; i++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			wf[i] = (float)((double)(s >> 11) * 0x1p-53 - 0.5);
		}
		quant_quantize_row(type, wf, wq + (size_t)r * rb, cols);
	}
	for (size_t i = 0; i < (size_t)seqs * cols; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		x[i] = (float)((double)(s >> 11) * 0x1p-53 - 0.5);
	}
	struct packed_mat pm;
	qmm_pack(&pm, packed, wq, type, rows, cols);
	struct qmm_act a;
	qmm_act_init(&a, abuf, seqs, cols);
	a.nb = seqs;
	a.cols = cols;
	qmm_act_quantize(&a, qmm_form(type), x, cols, 0, seqs);
	qmm_rows(y, rows, &pm, &a, 0, seqs, 0, rows, false, NULL); /* warm */
	double best = 1e30;
	for (int r = 0; r < reps; r++) {
		double t0 = now();
		for (int b0 = 0; b0 < seqs; b0 += 24)
			qmm_rows(y + (size_t)b0 * rows, rows, &pm, &a, b0, seqs - b0 < 24 ? seqs - b0 : 24, 0, rows,
				 false, NULL);
		double dt = now() - t0;
		best = dt < best ? dt : best;
	}
	double macs = (double)rows * cols * seqs;
	printf("{\"mode\":\"kernel\",\"type\":\"%s\",\"kernels\":\"%s\",\"rows\":%d,\"cols\":%d,"
	       "\"seqs\":%d,\"seconds\":%.6f,\"gmacs\":%.2f,\"gbs\":%.2f,\"check\":%.6g}\n",
	       ggml_type_name(type), qmm_isa_name(qmm_isa_get()), rows, cols, seqs, best, macs / best / 1e9,
	       (double)qmm_pack_bytes(type, rows, cols) / best / 1e9, (double)y[0]);
	free(wf);
	free(x);
	free(y);
	free(wq);
	free(packed);
	free(abuf);
	return 0;
}

static int parse_ids(const char *s, int32_t *out, int max);

/* Greedy tokens after the prompt ids (EOS ignored): what llama.cpp's
 * greedy run of the same file is compared with. */
static int run_generate(const char *model, const char *ids, int gen, int threads)
{
	struct engine *e = open_engine(model, 1, 2048, threads, ENGINE_BATCH_CONTINUOUS, 0);
	if (!e)
		return 1;
	int32_t prompt[1024];
	int n = parse_ids(ids, prompt, 1024);
	if (n <= 0) {
		fprintf(stderr, "engine-bench generate: --prompt-ids wants comma-separated token ids, not '%s'\n", ids);
		engine_destroy(e);
		return 2;
	}
	char err[256];
	struct sampling_params sp = { .temperature = 0, .top_p = 1, .max_tokens = gen, .ignore_eos = true };
	if (engine_submit(e, 1, prompt, n, &sp, err, sizeof(err))) {
		fprintf(stderr, "engine-bench: %s\n", err);
		engine_destroy(e);
		return 1;
	}
	int max_ev = engine_events_max(e) + 8;
	struct engine_event *ev = malloc(sizeof(*ev) * max_ev);
	printf("{\"mode\":\"generate\",\"weight_type\":\"%s\",\"kernels\":\"%s\",\"tokens\":[",
	       engine_model(e)->weight_type, engine_kernels(e));
	int out = 0;
	int32_t *seq = malloc(sizeof(int32_t) * (n + gen));
	memcpy(seq, prompt, sizeof(int32_t) * n);
	while (engine_has_work(e)) {
		int k = engine_step(e, ev, max_ev);
		for (int i = 0; i < k; i++)
			if (ev[i].kind == ENGINE_EV_TOKEN) {
				printf("%s%d", out ? "," : "", ev[i].token);
				seq[n + out++] = ev[i].token;
			}
	}
	/* how close each choice was: the top logit minus the runner-up, from
	 * the same model fed the same tokens (a near-tie is where another
	 * engine's rounding may choose the other token) */
	printf("],\"margins\":[");
	struct logits_run *lr = logits_open(model, 1, n + out, threads, err, sizeof(err));
	int vocab = engine_model(e)->vocab_size, rc = 0;
	float *lg = malloc(sizeof(float) * vocab);
	for (int p = 0; lr && p < n + out - 1; p++) {
		if (logits_step(lr, seq + p, p, lg, err, sizeof(err))) {
			rc = 1;
			break;
		}
		if (p < n - 1)
			continue;
		int best = 0, second = -1;
		for (int v = 1; v < vocab; v++)
			if (lg[v] > lg[best]) {
				second = best;
				best = v;
			} else if (second < 0 || lg[v] > lg[second]) {
				second = v;
			}
		if (best != seq[p + 1])
			fprintf(stderr, "engine-bench generate: position %d: the engine chose %d, its logits' top is %d\n",
				p + 1, seq[p + 1], best);
		printf("%s%.6g", p > n - 1 ? "," : "", (double)(lg[best] - lg[second]));
	}
	printf("]}\n");
	if (!lr || rc)
		fprintf(stderr, "engine-bench: %s\n", err);
	logits_close(lr);
	free(lg);
	free(seq);
	free(ev);
	engine_destroy(e);
	return !lr || rc;
}

/* The logits of each of the ids alone at position 0, one step for all. */
static int run_first(const char *model, const int32_t *ids, int n, int threads)
{
	char err[256];
	struct logits_run *lr = logits_open(model, n, 1, threads, err, sizeof(err));
	if (!lr) {
		fprintf(stderr, "engine-bench: %s\n", err);
		return 1;
	}
	int vocab = logits_model(lr)->info.vocab_size;
	float *lg = malloc(sizeof(float) * vocab * n);
	int rc = logits_step(lr, ids, 0, lg, err, sizeof(err));
	if (rc)
		fprintf(stderr, "engine-bench: %s\n", err);
	printf("{\"mode\":\"first\",\"logits\":[");
	for (int s = 0; !rc && s < n; s++) {
		printf("%s[", s ? "," : "");
		for (int v = 0; v < vocab; v++)
			printf("%s%.9g", v ? "," : "", (double)lg[(size_t)s * vocab + v]);
		printf("]");
	}
	printf("]}\n");
	free(lg);
	logits_close(lr);
	return rc ? 1 : 0;
}

/* The logits after every position of the prompt ids (teacher forcing). */
static int run_logits(const char *model, const int32_t *ids, int n, int threads)
{
	char err[256];
	struct logits_run *lr = logits_open(model, 1, n, threads, err, sizeof(err));
	if (!lr) {
		fprintf(stderr, "engine-bench: %s\n", err);
		return 1;
	}
	int vocab = logits_model(lr)->info.vocab_size;
	float *lg = malloc(sizeof(float) * vocab);
	printf("{\"mode\":\"logits\",\"logits\":[");
	for (int p = 0; p < n; p++) {
		if (logits_step(lr, ids + p, p, lg, err, sizeof(err))) {
			fprintf(stderr, "engine-bench: %s\n", err);
			break;
		}
		printf("%s[", p ? "," : "");
		for (int v = 0; v < vocab; v++)
			printf("%s%.9g", v ? "," : "", (double)lg[v]);
		printf("]");
	}
	printf("]}\n");
	free(lg);
	logits_close(lr);
	return 0;
}

/* Comma-separated token ids into out (at most max); the count, or -1. */
static int parse_ids(const char *s, int32_t *out, int max)
{
	int n = 0;
	for (const char *p = s; *p && n < max;) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p)
			return -1;
		out[n++] = (int32_t)v;
		p = *end == ',' ? end + 1 : end;
	}
	return n;
}

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	const char *mode = argv[1], *model = NULL, *out = NULL, *preset = "tiny", *type = "F16";
	const char *ids = NULL;
	int rows = 2048, cols = 768;
	bool dequantized = false;
	int seqs = 1, prompt = 128, gen = 64, threads = 0, mib = 1024, reps = 3, requests = 256;
	int mean = 64, maxlen = 512;
	uint64_t seed = 0;
	enum engine_batching batching = ENGINE_BATCH_CONTINUOUS;
	static const struct option opts[] = {
		{ "model", 1, 0, 'm' }, { "out", 1, 0, 'o' }, { "preset", 1, 0, 'P' },
		{ "seed", 1, 0, 'S' }, { "seqs", 1, 0, 's' }, { "prompt", 1, 0, 'p' },
		{ "gen", 1, 0, 'g' }, { "threads", 1, 0, 't' }, { "mib", 1, 0, 'M' },
		{ "reps", 1, 0, 'r' }, { "requests", 1, 0, 'R' }, { "mean", 1, 0, 'e' },
		{ "max", 1, 0, 'x' }, { "batching", 1, 0, 'b' }, { "help", 0, 0, 'h' },
		{ "type", 1, 0, 'T' }, { "kernels", 1, 0, 'K' }, { "prompt-ids", 1, 0, 'I' },
		{ "rows", 1, 0, 'w' }, { "cols", 1, 0, 'c' }, { "dequantized", 0, 0, 'D' }, { 0 }
	};
	int c;
	optind = 2;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'm': model = optarg; break;
		case 'o': out = optarg; break;
		case 'P': preset = optarg; break;
		case 'S': seed = strtoull(optarg, NULL, 0); break;
		case 's': seqs = atoi(optarg); break;
		case 'p': prompt = atoi(optarg); break;
		case 'g': gen = atoi(optarg); break;
		case 't': threads = atoi(optarg); break;
		case 'M': mib = atoi(optarg); break;
		case 'r': reps = atoi(optarg); break;
		case 'R': requests = atoi(optarg); break;
		case 'e': mean = atoi(optarg); break;
		case 'x': maxlen = atoi(optarg); break;
		case 'b':
			if (!strcmp(optarg, "static"))
				batching = ENGINE_BATCH_STATIC;
			else if (strcmp(optarg, "continuous")) {
				fprintf(stderr, "engine-bench: --batching must be continuous or static, not '%s'\n", optarg);
				return 2;
			}
			break;
		case 'T': type = optarg; break;
		case 'D': dequantized = true; break;
		case 'I': ids = optarg; break;
		case 'w': rows = atoi(optarg); break;
		case 'c': cols = atoi(optarg); break;
		case 'K': {
			char err[256];
			int isa = qmm_isa_parse(optarg);
			if (isa < 0 || qmm_isa_set(isa, err, sizeof(err))) {
				fprintf(stderr, "engine-bench: --kernels %s: %s\n", optarg,
					isa < 0 ? "use avx512-vnni, avx-vnni, avx2 or scalar" : err);
				return 2;
			}
			break;
		}
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (threads <= 0)
		threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (!strcmp(mode, "bandwidth"))
		return run_bandwidth(mib, threads, reps < 1 ? 1 : reps);
	if (!strcmp(mode, "fma"))
		return run_fma(threads, reps < 1 ? 1 : reps);
	if (!strcmp(mode, "make")) {
		char err[512];
		if (!out) {
			fprintf(stderr, "engine-bench make: --out PATH is required\n");
			return 2;
		}
		int t = model_make_parse_type(type);
		if (t < 0) {
			fprintf(stderr, "engine-bench make: --type %s: use F32, F16, Q8_0, Q4_0 or Q4_K\n", type);
			return 2;
		}
		if ((dequantized ? model_make_dequantized : model_make_type)(out, preset, seed, (uint32_t)t, err,
									     sizeof(err))) {
			fprintf(stderr, "engine-bench: %s\n", err);
			return 1;
		}
		printf("{\"mode\":\"make\",\"out\":\"%s\",\"preset\":\"%s\",\"type\":\"%s\",\"dequantized\":%s}\n",
		       out, preset, ggml_type_name(t), dequantized ? "true" : "false");
		return 0;
	}
	if (!strcmp(mode, "kernel"))
		return run_kernel(type, rows, cols, seqs, reps < 1 ? 1 : reps);
	if (strcmp(mode, "decode") && strcmp(mode, "prefill") && strcmp(mode, "burst") && strcmp(mode, "generate") &&
	    strcmp(mode, "logits") && strcmp(mode, "first")) {
		fprintf(stderr, "engine-bench: unknown mode '%s' (see --help)\n", mode);
		return 2;
	}
	if (!model) {
		fprintf(stderr, "engine-bench %s: --model PATH is required\n", mode);
		return 2;
	}
	if (!strcmp(mode, "decode"))
		return run_decode(model, seqs, prompt, gen, threads);
	if (!strcmp(mode, "prefill"))
		return run_prefill(model, prompt, threads);
	if (!strcmp(mode, "logits") || !strcmp(mode, "first")) {
		int32_t pid[2048];
		int n = ids ? parse_ids(ids, pid, 2048) : -1;
		if (n <= 0) {
			fprintf(stderr, "engine-bench logits: --prompt-ids ID,ID,... is required\n");
			return 2;
		}
		return !strcmp(mode, "first") ? run_first(model, pid, n, threads) : run_logits(model, pid, n, threads);
	}
	if (!strcmp(mode, "generate")) {
		if (!ids) {
			fprintf(stderr, "engine-bench generate: --prompt-ids ID,ID,... is required\n");
			return 2;
		}
		return run_generate(model, ids, gen, threads);
	}
	return run_burst(model, requests, prompt, mean, maxlen, batching, seqs, threads);
}
