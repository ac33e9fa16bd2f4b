/* attn_check.c - build/cuda-attn-check: the paged-attention kernels against the
 * naive kernel on random shapes (default), or their decode bandwidth against
 * the GPU's HBM peak (--bench FILE.json, run by make bench-gpu). GPU only. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "daemon/cuda/kernels.h"

#define DIE(...) do { fprintf(stderr, "cuda-attn-check: " __VA_ARGS__); fputc('\n', stderr); exit(2); } while (0)
#define CU(call) do { cudaError_t _e = (call); if (_e != cudaSuccess) \
	DIE("%s: %s", #call, cudaGetErrorString(_e)); } while (0)

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (uint32_t)rng;
}

struct shape {
	int hd, bs, n_kv, group, dtype;
	int n_seqs;
	int ctx[8];  /* context of each sequence's query token (its position + 1) */
	int chunk;   /* tokens per sequence in the step (a prefill chunk when > 1) */
};

/* Builds a step (tokens, positions, block tables over a shuffled pool), fills
 * the KV pool and queries at random, runs the paged kernel with the
 * partitioned variant forced on or off, and compares with the naive kernel. */
static double run_shape(const struct shape *sh, int partitioned, char *desc, size_t dlen)
{
	int n_heads = sh->n_kv * sh->group, stride = 0, T = 0, max_ctx = 0;
	for (int s = 0; s < sh->n_seqs; s++) {
		int b = (sh->ctx[s] + sh->bs - 1) / sh->bs;
		stride = b > stride ? b : stride;
		max_ctx = sh->ctx[s] > max_ctx ? sh->ctx[s] : max_ctx;
		T += sh->chunk < sh->ctx[s] ? sh->chunk : sh->ctx[s];
	}
	int blocks = stride * sh->n_seqs + 7;
	int32_t *perm = malloc(sizeof(int32_t) * blocks);
	for (int i = 0; i < blocks; i++)
		perm[i] = i;
	for (int i = blocks - 1; i > 0; i--) {
		int j = (int)(rnd() % (uint32_t)(i + 1));
		int32_t t = perm[i];
		perm[i] = perm[j], perm[j] = t;
	}
	int32_t *h_seq = malloc(4 * T), *h_pos = malloc(4 * T), *h_bt = malloc(4 * (size_t)stride * sh->n_seqs);
	int t = 0;
	for (int s = 0; s < sh->n_seqs; s++) {
		int n = sh->chunk < sh->ctx[s] ? sh->chunk : sh->ctx[s];
		for (int i = 0; i < n; i++, t++)
			h_seq[t] = s, h_pos[t] = sh->ctx[s] - n + i;
		for (int b = 0; b < stride; b++)
			h_bt[s * stride + b] = perm[s * stride + b];
	}
	size_t kv_elems = (size_t)blocks * sh->n_kv * sh->bs * sh->hd;
	void *k, *v;
	float *q, *out, *ref, *part;
	int32_t *d_seq, *d_pos, *d_bt;
	long part_floats = kpi_cuda_attn_scratch_floats(T, n_heads, sh->hd, max_ctx);
	CU(cudaMalloc(&k, 2 * kv_elems));
	CU(cudaMalloc(&v, 2 * kv_elems));
	CU(cudaMalloc((void **)&q, 4 * (size_t)T * n_heads * sh->hd));
	CU(cudaMalloc((void **)&out, 4 * (size_t)T * n_heads * sh->hd));
	CU(cudaMalloc((void **)&ref, 4 * (size_t)T * n_heads * sh->hd));
	CU(cudaMalloc((void **)&part, 4 * (size_t)part_floats + 4));
	CU(cudaMalloc((void **)&d_seq, 4 * T));
	CU(cudaMalloc((void **)&d_pos, 4 * T));
	CU(cudaMalloc((void **)&d_bt, 4 * (size_t)stride * sh->n_seqs));
	CU(cudaMemcpy(d_seq, h_seq, 4 * T, cudaMemcpyHostToDevice));
	CU(cudaMemcpy(d_pos, h_pos, 4 * T, cudaMemcpyHostToDevice));
	CU(cudaMemcpy(d_bt, h_bt, 4 * (size_t)stride * sh->n_seqs, cudaMemcpyHostToDevice));
	uint64_t seed = rnd();
	CU((cudaError_t)kpi_cuda_fill_random(k, (long)kv_elems, sh->dtype, seed, 1.0f, 0));
	CU((cudaError_t)kpi_cuda_fill_random(v, (long)kv_elems, sh->dtype, seed + 1, 1.0f, 0));
	/* queries large enough that the softmax is peaked, not flat */
	CU((cudaError_t)kpi_cuda_fill_random(q, (long)T * n_heads * sh->hd, 2, seed + 2, 3.0f, 0));

	struct kpi_kv_dev kv = { k, v, sh->dtype, sh->n_kv, sh->hd, sh->bs };
	struct kpi_step_dev sd = { NULL, d_seq, d_pos, d_bt, stride, T };
	/* the backend's plan: one-token sequences decode, longer chunks are tiled */
	int *seq_start = malloc(sizeof(int) * (sh->n_seqs + 1));
	int32_t *h_dec = malloc(4 * T), *h_tiles = malloc(8 * (size_t)(T + sh->n_seqs)), *d_dec, *d_tiles;
	int n_decode, n_tiles;
	seq_start[0] = 0;
	for (int s = 0; s < sh->n_seqs; s++)
		seq_start[s + 1] = seq_start[s] + (sh->chunk < sh->ctx[s] ? sh->chunk : sh->ctx[s]);
	kpi_cuda_plan_attention(seq_start, sh->n_seqs, sh->group, h_dec, &n_decode, h_tiles, &n_tiles);
	CU(cudaMalloc((void **)&d_dec, 4 * T));
	CU(cudaMalloc((void **)&d_tiles, 8 * (size_t)(T + sh->n_seqs)));
	CU(cudaMemcpy(d_dec, h_dec, 4 * T, cudaMemcpyHostToDevice));
	CU(cudaMemcpy(d_tiles, h_tiles, 8 * (size_t)(T + sh->n_seqs), cudaMemcpyHostToDevice));
	/* n_sm steers the selection rule: huge forces partitions, 0 forbids them */
	int n_sm = partitioned ? 1 << 28 : 0;
	int rc = kpi_cuda_attention(out, q, &kv, &sd, n_heads, max_ctx, d_dec, n_decode, d_tiles, n_tiles,
				    part, n_sm, 0);
	if (rc)
		DIE("kpi_cuda_attention: %d", rc);
	CU((cudaError_t)kpi_cuda_attention_naive(ref, q, &kv, &sd, n_heads, 0));
	CU(cudaDeviceSynchronize());
	size_t n = (size_t)T * n_heads * sh->hd;
	float *a = malloc(4 * n), *r = malloc(4 * n);
	CU(cudaMemcpy(a, out, 4 * n, cudaMemcpyDeviceToHost));
	CU(cudaMemcpy(r, ref, 4 * n, cudaMemcpyDeviceToHost));
	double worst = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - r[i]);
		worst = isnan(a[i]) ? INFINITY : d > worst ? d : worst;
	}
	snprintf(desc, dlen, "hd=%d bs=%d kv_heads=%d group=%d %s seqs=%d chunk=%d ctx=%d..%d decode=%d%s tiles=%d",
		 sh->hd, sh->bs, sh->n_kv, sh->group, sh->dtype == KPI_KV_BF16 ? "bf16" : "f16", sh->n_seqs,
		 sh->chunk, sh->ctx[0], max_ctx, n_decode, partitioned ? " (partitioned)" : "", n_tiles);
	cudaFree(k), cudaFree(v), cudaFree(q), cudaFree(out), cudaFree(ref), cudaFree(part);
	cudaFree(d_seq), cudaFree(d_pos), cudaFree(d_bt), cudaFree(d_dec), cudaFree(d_tiles);
	free(seq_start), free(h_dec), free(h_tiles);
	free(perm), free(h_seq), free(h_pos), free(h_bt), free(a), free(r);
	return worst;
}

static int check(int rounds)
{
	static const int ctxs[] = { 1, 2, 15, 16, 17, 100, 511, 512, 513, 1000, 1024, 2047, 4096 };
	static const int hds[] = { 64, 128 }, bss[] = { 8, 16, 32 }, groups[] = { 1, 2, 4, 8 };
	const double tol = 2e-3;
	int failed = 0;
	for (int i = 0; i < rounds; i++) {
		struct shape sh = { hds[i % 2], bss[(i / 2) % 3], 1 + (int)(rnd() % 4), groups[(i / 6) % 4],
				    (i / 24) % 2 ? KPI_KV_BF16 : KPI_KV_F16, 1 + (int)(rnd() % 8), { 0 }, 1 };
		for (int s = 0; s < sh.n_seqs; s++)
			sh.ctx[s] = rnd() % 3 ? ctxs[rnd() % (sizeof(ctxs) / sizeof(ctxs[0]))] : 1 + (int)(rnd() % 4096);
		if (i % 5 == 4)
			sh.chunk = 1 + (int)(rnd() % 40); /* a prefill chunk after earlier tokens */
		for (int part = 0; part < 2; part++) {
			char desc[256];
			double err = run_shape(&sh, part, desc, sizeof(desc));
			int ok = err <= tol;
			printf("%s paged_attention %s: max |diff| %.2e (tol %.0e)\n", ok ? "PASS" : "FAIL", desc, err, tol);
			failed += !ok;
		}
	}
	printf("%d failed\n", failed);
	return failed ? 1 : 0;
}

/* ---- bandwidth ----------------------------------------------------------- */

static int cmp_f(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return x < y ? -1 : x > y;
}

static int bench(const char *path, int quick)
{
	int dev_clock_khz = 0, bus_bits = 0, l2 = 0, n_sm = 0;
	CU(cudaDeviceGetAttribute(&dev_clock_khz, cudaDevAttrMemoryClockRate, 0));
	CU(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0));
	CU(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
	CU(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0));
	struct cudaDeviceProp prop;
	CU(cudaGetDeviceProperties(&prop, 0));
	double peak = 2.0 * dev_clock_khz * 1e3 * bus_bits / 8; /* DDR: bytes/s */
	/* Llama-3-8B-like decode: 32 query heads over 8 KV heads, head dim 128, fp16, block 16 */
	const int n_kv = 8, group = 4, hd = 128, bs = 16, n_heads = n_kv * group;
	static const int batches[] = { 1, 4, 16, 64, 128, 256 }, ctxs[] = { 128, 512, 1024, 2048, 4096, 8192 };
	int nb = quick ? 3 : 6, nc = quick ? 3 : 6, reps = quick ? 3 : 7;
	size_t max_pos = (size_t)batches[nb - 1] * ctxs[nc - 1];
	/* the pool: the largest case, at least 4 GiB of K+V, far beyond L2 */
	size_t blocks = max_pos / bs, per_block = (size_t)n_kv * bs * hd * 2;
	if (blocks * per_block * 2 < (4ull << 30))
		blocks = (4ull << 30) / (per_block * 2);
	void *k, *v, *flush;
	float *q, *out, *part;
	int32_t *d_seq, *d_pos, *d_bt;
	size_t flush_bytes = (size_t)l2 * 4;
	CU(cudaMalloc(&k, blocks * per_block));
	CU(cudaMalloc(&v, blocks * per_block));
	CU(cudaMalloc(&flush, flush_bytes));
	CU((cudaError_t)kpi_cuda_fill_random(k, (long)(blocks * per_block / 2), KPI_KV_F16, 1, 1.f, 0));
	CU((cudaError_t)kpi_cuda_fill_random(v, (long)(blocks * per_block / 2), KPI_KV_F16, 2, 1.f, 0));
	int maxB = batches[nb - 1], maxC = ctxs[nc - 1], stride = maxC / bs;
	CU(cudaMalloc((void **)&q, 4 * (size_t)maxB * n_heads * hd));
	CU(cudaMalloc((void **)&out, 4 * (size_t)maxB * n_heads * hd));
	CU(cudaMalloc((void **)&part, 4 * (size_t)kpi_cuda_attn_scratch_floats(maxB, n_heads, hd, maxC)));
	CU(cudaMalloc((void **)&d_seq, 4 * maxB));
	CU(cudaMalloc((void **)&d_pos, 4 * maxB));
	CU(cudaMalloc((void **)&d_bt, 4 * (size_t)maxB * stride));
	int32_t *d_dec;
	CU(cudaMalloc((void **)&d_dec, 4 * maxB));
	CU((cudaError_t)kpi_cuda_fill_random(q, (long)maxB * n_heads * hd, 2, 3, 1.f, 0));
	int32_t *h_bt = malloc(4 * (size_t)maxB * stride), *h_seq = malloc(4 * maxB), *h_pos = malloc(4 * maxB);
	for (size_t i = 0; i < (size_t)maxB * stride; i++)
		h_bt[i] = (int32_t)(rnd() % blocks); /* scattered over the pool, like a busy server */
	CU(cudaMemcpy(d_bt, h_bt, 4 * (size_t)maxB * stride, cudaMemcpyHostToDevice));
	cudaEvent_t e0, e1;
	CU(cudaEventCreate(&e0));
	CU(cudaEventCreate(&e1));

	FILE *f = fopen(path, "w");
	if (!f)
		DIE("cannot write %s", path);
	fprintf(f, "{\"gpu\": \"%s\", \"hbm_peak_gbs\": %.1f, \"l2_bytes\": %d, \"sms\": %d,\n"
		   " \"shape\": {\"kv_heads\": %d, \"group\": %d, \"head_dim\": %d, \"block_size\": %d, \"kv\": \"f16\"},\n"
		   " \"results\": [", prop.name, peak / 1e9, l2, n_sm, n_kv, group, hd, bs);
	printf("## GPU decode attention bandwidth (%s, HBM peak %.0f GB/s)\n\n", prop.name, peak / 1e9);
	printf("| batch | context | variant | µs (median) | GB/s | %% of peak |\n|---|---|---|---|---|---|\n");
	int first = 1;
	for (int bi = 0; bi < nb; bi++)
		for (int ci = 0; ci < nc; ci++) {
			int B = batches[bi], C = ctxs[ci];
			for (int s = 0; s < B; s++)
				h_seq[s] = s, h_pos[s] = C - 1;
			CU(cudaMemcpy(d_seq, h_seq, 4 * B, cudaMemcpyHostToDevice));
			CU(cudaMemcpy(d_dec, h_seq, 4 * B, cudaMemcpyHostToDevice)); /* token s is decode token s */
			CU(cudaMemcpy(d_pos, h_pos, 4 * B, cudaMemcpyHostToDevice));
			struct kpi_kv_dev kv = { k, v, KPI_KV_F16, n_kv, hd, bs };
			struct kpi_step_dev sd = { NULL, d_seq, d_pos, d_bt, stride, B };
			float us[16];
			for (int r = 0; r < reps; r++) {
				CU(cudaMemset(flush, r, flush_bytes)); /* evict the previous run's K/V from L2 */
				CU(cudaEventRecord(e0, 0));
				if (kpi_cuda_attention(out, q, &kv, &sd, n_heads, C, d_dec, B, NULL, 0, part, n_sm, 0))
					DIE("attention launch failed");
				CU(cudaEventRecord(e1, 0));
				CU(cudaEventSynchronize(e1));
				float ms;
				CU(cudaEventElapsedTime(&ms, e0, e1));
				us[r] = ms * 1000;
			}
			qsort(us, reps, sizeof(float), cmp_f);
			double bytes = (double)B * C * n_kv * hd * 2 * 2; /* K and V, fp16 */
			double gbs = bytes / (us[reps / 2] * 1e-6) / 1e9;
			const char *variant = kpi_cuda_attn_use_partitions(B, n_kv, C, n_sm) ? "partitioned" : "single-pass";
			fprintf(f, "%s\n  {\"batch\": %d, \"context\": %d, \"variant\": \"%s\", \"us_median\": %.2f, \"us_min\": %.2f, \"us_max\": %.2f, \"gbs\": %.1f, \"frac_peak\": %.3f}",
				first ? "" : ",", B, C, variant, us[reps / 2], us[0], us[reps - 1], gbs, gbs * 1e9 / peak);
			printf("| %d | %d | %s | %.1f | %.0f | %.0f%% |\n", B, C, variant, us[reps / 2], gbs, 100 * gbs * 1e9 / peak);
			first = 0;
		}
	fprintf(f, "\n]}\n");
	fclose(f);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = { { "bench", required_argument, NULL, 'b' },
					       { "quick", no_argument, NULL, 'q' },
					       { "rounds", required_argument, NULL, 'r' },
					       { "help", no_argument, NULL, 'h' },
					       { 0 } };
	const char *bench_path = NULL;
	int quick = 0, rounds = 96, c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'b': bench_path = optarg; break;
		case 'q': quick = 1; break;
		case 'r': rounds = atoi(optarg); break;
		case 'h':
			printf("usage: cuda-attn-check [--rounds N] | --bench FILE.json [--quick]\n"
			       "  (default)          paged attention vs a naive kernel on N random shapes (96)\n"
			       "  --rounds N         number of random shapes\n"
			       "  --bench FILE.json  decode-attention bandwidth vs HBM peak, batch 1-256 x context 128-8192\n"
			       "  --quick            the bench on a 3 x 3 subset\n");
			return 0;
		default:
			fprintf(stderr, "cuda-attn-check: unknown flag; see --help\n");
			return 2;
		}
	}
	if (rounds < 1)
		DIE("--rounds expects a positive number");
	int ndev = 0;
	cudaError_t e = cudaGetDeviceCount(&ndev);
	if (e != cudaSuccess || ndev == 0) {
		printf("SKIP no GPU: %s\n", e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
		return 77;
	}
	return bench_path ? bench(bench_path, quick) : check(rounds);
}
