/* cuda_backend.c - the forward pass on an NVIDIA GPU (--backend cuda): the
 * model's tensors uploaded once, paged fp16/bf16 KV, cuBLAS GEMMs batched over
 * the step's tokens, the kernels of daemon/cuda/kernels.cu in between. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "daemon/cuda/kernels.h"
#include "daemon/engine/backend.h"
#include "daemon/engine/gguf.h"
#include "daemon/engine/kernels.h"
#include "daemon/engine/model.h"

/* ---- cuBLAS, loaded at create ----------------------------------------------
 * dlopen'd rather than linked: a CPU-only run of kpi-infer should not map
 * ~600 MB of cuBLAS. */

struct cublas_api {
	void *lib;
	cublasStatus_t (*create)(cublasHandle_t *);
	cublasStatus_t (*destroy)(cublasHandle_t);
	cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
	cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
				  const void *, const void *, cudaDataType, int, const void *, cudaDataType,
				  int, const void *, void *, cudaDataType, int, cublasComputeType_t,
				  cublasGemmAlgo_t);
	const char *(*status_string)(cublasStatus_t);
};

static int cublas_load(struct cublas_api *a, char *err, size_t errlen)
{
	static const char *names[] = { "libcublas.so.13", "libcublas.so" };
	for (size_t i = 0; i < 2 && !a->lib; i++)
		a->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (!a->lib) {
		snprintf(err, errlen, "cannot load cuBLAS (libcublas.so.13): %s; install the CUDA 13 toolkit's cuBLAS or use --backend cpu",
			 dlerror());
		return -1;
	}
	*(void **)&a->create = dlsym(a->lib, "cublasCreate_v2");
	*(void **)&a->destroy = dlsym(a->lib, "cublasDestroy_v2");
	*(void **)&a->set_stream = dlsym(a->lib, "cublasSetStream_v2");
	*(void **)&a->gemm_ex = dlsym(a->lib, "cublasGemmEx");
	*(void **)&a->status_string = dlsym(a->lib, "cublasGetStatusString");
	if (!a->create || !a->destroy || !a->set_stream || !a->gemm_ex || !a->status_string) {
		snprintf(err, errlen, "libcublas.so lacks cublasCreate_v2/cublasGemmEx: install the CUDA 13 cuBLAS or use --backend cpu");
		return -1;
	}
	return 0;
}

/* ---- state ---------------------------------------------------------------- */

struct dtensor {
	void *p;        /* device copy of the GGUF tensor */
	uint32_t type;  /* GGML_F32 or GGML_F16 */
	int rows, cols;
};

struct dlayer {
	struct dtensor attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
};

struct backend {
	const struct model *m;
	int dim, q_dim, kv_dim, ffn, hd, n_heads, n_kv, ctx, vocab, n_layers;
	int kv_blocks, block_size, max_tokens, max_seqs, bt_stride, n_sm;
	enum kpi_kv_dtype kv_dtype;
	cudaStream_t st;
	struct cublas_api blas;
	cublasHandle_t h;
	int have_h;

	struct dtensor tok_embd, output_norm, output;
	struct dlayer *layers;       /* [n_layers] */
	void *kcache, *vcache;       /* (n_layers, kv_blocks, n_kv, block_size, hd) 16-bit */
	size_t layer_elems;          /* elements of one layer's K (or V) pool */
	float *rope_cs;              /* (ctx, hd / 2, 2) */

	/* scratch, sized for max_tokens at create */
	float *x, *xb;               /* (T, dim) residual stream, normed input */
	void *xb16;                  /* (T, max(dim, q_dim, ffn)) fp16 copy for F16 GEMMs */
	float *q, *k, *v, *att;      /* (T, q_dim), (T, kv_dim) x2, (T, q_dim) */
	float *h1, *h3;              /* (T, ffn) */
	float *xl;                   /* (max_seqs, dim) last hidden of sequences wanting logits */
	float *logits;               /* (max_seqs, vocab) */
	float *part;                 /* partitioned attention scratch */
	int32_t *d_meta;             /* tokens, tok_seq, tok_pos, lrow_src, decode list, tiles, block tables */
	int32_t *h_meta;             /* pinned host staging of the same */
	size_t meta_ints;
};

size_t backend_kv_bytes_per_token(const struct model *m);

#define CU(call, what) do { cudaError_t _e = (call); if (_e != cudaSuccess) { \
	snprintf(err, errlen, "%s: %s (%s)", what, cudaGetErrorString(_e), cudaGetErrorName(_e)); \
	return -1; } } while (0)

static void cuda_destroy(struct backend *b)
{
	if (!b)
		return;
	if (b->layers) {
		for (int l = 0; l < b->n_layers; l++) {
			struct dtensor *t = &b->layers[l].attn_norm;
			for (int i = 0; i < 9; i++)
				cudaFree(t[i].p);
		}
		free(b->layers);
	}
	void *dev[] = { b->tok_embd.p, b->output_norm.p, b->output.p, b->kcache, b->vcache, b->rope_cs,
			b->x, b->xb, b->xb16, b->q, b->k, b->v, b->att, b->h1, b->h3, b->xl, b->logits,
			b->part, b->d_meta };
	for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
		cudaFree(dev[i]);
	if (b->h_meta)
		cudaFreeHost(b->h_meta);
	if (b->have_h)
		b->blas.destroy(b->h);
	if (b->st)
		cudaStreamDestroy(b->st);
	if (b->blas.lib)
		dlclose(b->blas.lib);
	free(b);
}

static int upload(struct dtensor *d, const struct mtensor *t, char *err, size_t errlen, const char *name)
{
	size_t bytes = mtensor_bytes(t);
	d->type = t->type;
	d->rows = (int)t->rows;
	d->cols = (int)t->cols;
	char what[96];
	snprintf(what, sizeof(what), "uploading %s (%zu MiB)", name, bytes >> 20);
	CU(cudaMalloc(&d->p, bytes), what);
	CU(cudaMemcpy(d->p, t->data, bytes, cudaMemcpyHostToDevice), what);
	return 0;
}

static int dalloc(void **p, size_t bytes, const char *what, char *err, size_t errlen)
{
	char w[128];
	snprintf(w, sizeof(w), "allocating %s (%zu MiB) on the GPU", what, bytes >> 20);
	CU(cudaMalloc(p, bytes ? bytes : 1), w);
	return 0;
}

static enum kpi_kv_dtype kv_dtype_from_env(void)
{
	const char *s = getenv("KPI_CUDA_KV_DTYPE");
	return s && !strcmp(s, "bf16") ? KPI_KV_BF16 : KPI_KV_F16;
}

static struct backend *cuda_create(const struct backend_params *p, char *err, size_t errlen)
{
	const struct model *m = p->model;
	const struct model_info *mi = &m->info;
	int ndev = 0;
	cudaError_t ce = cudaGetDeviceCount(&ndev);
	if (ce != cudaSuccess || ndev == 0) {
		/* without a driver cudart says "driver version is insufficient": name the real cause */
		const char *why = access("/dev/nvidiactl", F_OK) ? "no NVIDIA driver is loaded: /dev/nvidiactl is missing"
			: ce != cudaSuccess ? cudaGetErrorString(ce) : "no CUDA device found";
		snprintf(err, errlen, "no GPU: --backend cuda needs an NVIDIA GPU and its driver (%s); use --backend cpu",
			 why);
		return NULL;
	}
	const char *kv_env = getenv("KPI_CUDA_KV_DTYPE");
	if (kv_env && strcmp(kv_env, "f16") && strcmp(kv_env, "bf16")) {
		snprintf(err, errlen, "KPI_CUDA_KV_DTYPE='%s': expected f16 or bf16", kv_env);
		return NULL;
	}
	if (model_matrix_kinds(m) & MODEL_QUANT_MATRICES) {
		snprintf(err, errlen,
			 "the CUDA backend reads F32 and F16 weights; this model's are %s: serve it with --backend cpu (its integer kernels) or use the model's F16 file",
			 mi->weight_type);
		return NULL;
	}
	int group = mi->n_heads / mi->n_kv_heads;
	if (mi->n_heads % mi->n_kv_heads || !kpi_cuda_attn_supported(mi->head_dim, p->block_size, group)) {
		snprintf(err, errlen,
			 "the CUDA attention kernels need head dim 64 or 128, block size 8/16/32 and at most 8 query heads per KV head; this model has head dim %d, %d/%d heads, and --block-size is %d: use --backend cpu",
			 mi->head_dim, mi->n_heads, mi->n_kv_heads, p->block_size);
		return NULL;
	}

	struct backend *b = calloc(1, sizeof(*b));
	if (!b) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	b->m = m;
	b->dim = mi->dim, b->hd = mi->head_dim, b->n_heads = mi->n_heads, b->n_kv = mi->n_kv_heads;
	b->q_dim = mi->n_heads * mi->head_dim, b->kv_dim = mi->n_kv_heads * mi->head_dim;
	b->ffn = mi->ffn_dim, b->ctx = mi->context_length, b->vocab = mi->vocab_size;
	b->n_layers = mi->n_layers;
	b->kv_blocks = p->kv_blocks, b->block_size = p->block_size;
	b->max_tokens = p->max_tokens, b->max_seqs = p->max_seqs;
	b->bt_stride = (b->ctx + b->block_size - 1) / b->block_size;
	b->kv_dtype = kv_dtype_from_env();

	if (cudaDeviceGetAttribute(&b->n_sm, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess)
		b->n_sm = 1;
	if (cublas_load(&b->blas, err, errlen))
		goto fail;
	if (cudaStreamCreateWithFlags(&b->st, cudaStreamNonBlocking) != cudaSuccess ||
	    b->blas.create(&b->h) != CUBLAS_STATUS_SUCCESS) {
		snprintf(err, errlen, "cannot create a CUDA stream and cuBLAS handle on GPU 0");
		goto fail;
	}
	b->have_h = 1;
	b->blas.set_stream(b->h, b->st);

	/* weights */
	b->layers = calloc(b->n_layers, sizeof(*b->layers));
	if (!b->layers)
		goto oom;
	if (upload(&b->tok_embd, &m->tok_embd, err, errlen, "token_embd") ||
	    upload(&b->output_norm, &m->output_norm, err, errlen, "output_norm") ||
	    upload(&b->output, &m->output, err, errlen, "output"))
		goto fail;
	for (int l = 0; l < b->n_layers; l++) {
		const struct model_layer *L = &m->layers[l];
		struct dlayer *D = &b->layers[l];
		const struct mtensor *src[9] = { &L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo,
						 &L->ffn_norm, &L->w_gate, &L->w_up, &L->w_down };
		for (int i = 0; i < 9; i++)
			if (upload(&D->attn_norm + i, src[i], err, errlen, "a layer tensor"))
				goto fail;
	}

	/* KV pool: 16-bit elements, same layout as the CPU backend's */
	b->layer_elems = (size_t)p->kv_blocks * b->n_kv * p->block_size * b->hd;
	size_t kv_bytes = b->layer_elems * b->n_layers * 2;
	if (dalloc(&b->kcache, kv_bytes, "the K cache", err, errlen) ||
	    dalloc(&b->vcache, kv_bytes, "the V cache", err, errlen))
		goto fail;

	/* rope table computed by the CPU reference code, so both agree */
	float *cs = malloc(sizeof(float) * b->ctx * b->hd);
	if (!cs)
		goto oom;
	rope_table(cs, b->ctx, b->hd, m->rope_base);
	if (dalloc((void **)&b->rope_cs, sizeof(float) * b->ctx * b->hd, "the RoPE table", err, errlen)) {
		free(cs);
		goto fail;
	}
	ce = cudaMemcpy(b->rope_cs, cs, sizeof(float) * b->ctx * b->hd, cudaMemcpyHostToDevice);
	free(cs);
	if (ce != cudaSuccess) {
		snprintf(err, errlen, "uploading the RoPE table: %s", cudaGetErrorString(ce));
		goto fail;
	}

	size_t T = p->max_tokens, wide = b->dim;
	if ((size_t)b->q_dim > wide)
		wide = b->q_dim;
	if ((size_t)b->ffn > wide)
		wide = b->ffn;
	b->meta_ints = 3 * T + p->max_seqs + T + 2 * (T + p->max_seqs) + (size_t)p->max_seqs * b->bt_stride;
	long part_floats = kpi_cuda_attn_scratch_floats((int)T, b->n_heads, b->hd, b->ctx);
	if (dalloc((void **)&b->x, 4 * T * b->dim, "the residual stream", err, errlen) ||
	    dalloc((void **)&b->xb, 4 * T * b->dim, "scratch", err, errlen) ||
	    dalloc(&b->xb16, 2 * T * wide, "scratch", err, errlen) ||
	    dalloc((void **)&b->q, 4 * T * b->q_dim, "scratch", err, errlen) ||
	    dalloc((void **)&b->k, 4 * T * b->kv_dim, "scratch", err, errlen) ||
	    dalloc((void **)&b->v, 4 * T * b->kv_dim, "scratch", err, errlen) ||
	    dalloc((void **)&b->att, 4 * T * b->q_dim, "scratch", err, errlen) ||
	    dalloc((void **)&b->h1, 4 * T * b->ffn, "scratch", err, errlen) ||
	    dalloc((void **)&b->h3, 4 * T * b->ffn, "scratch", err, errlen) ||
	    dalloc((void **)&b->xl, 4 * (size_t)p->max_seqs * b->dim, "scratch", err, errlen) ||
	    dalloc((void **)&b->logits, 4 * (size_t)p->max_seqs * b->vocab, "the logits", err, errlen) ||
	    dalloc((void **)&b->part, 4 * (size_t)part_floats, "attention partitions", err, errlen) ||
	    dalloc((void **)&b->d_meta, 4 * b->meta_ints, "step metadata", err, errlen))
		goto fail;
	if (cudaMallocHost((void **)&b->h_meta, 4 * b->meta_ints) != cudaSuccess)
		goto oom;
	return b;
oom:
	snprintf(err, errlen, "out of host memory setting up the CUDA backend");
fail:
	cuda_destroy(b);
	return NULL;
}

/* ---- forward -------------------------------------------------------------- */

/* y (T, W.rows) = x (T, W.cols) W^T, += when accumulate. x16 is x as fp16,
 * used when W is F16 (cuBLAS takes one input type). */
static int gemm(struct backend *b, const struct dtensor *w, const float *x, const void *x16, int T,
		float *y, int accumulate, char *err, size_t errlen)
{
	const float one = 1.0f, zero = 0.0f;
	int f16 = w->type == GGML_F16;
	cublasStatus_t s = b->blas.gemm_ex(b->h, CUBLAS_OP_T, CUBLAS_OP_N, w->rows, T, w->cols, &one,
					   w->p, f16 ? CUDA_R_16F : CUDA_R_32F, w->cols,
					   f16 ? x16 : (const void *)x, f16 ? CUDA_R_16F : CUDA_R_32F, w->cols,
					   accumulate ? &one : &zero, y, CUDA_R_32F, w->rows,
					   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	if (s != CUBLAS_STATUS_SUCCESS) {
		snprintf(err, errlen, "cublasGemmEx (%d x %d x %d): %s", w->rows, T, w->cols,
			 b->blas.status_string(s));
		return -1;
	}
	return 0;
}

#define K(call, what) do { int _e = (call); if (_e) { \
	snprintf(err, errlen, "%s kernel: %s", what, _e < 0 ? "unsupported shape" : \
		 cudaGetErrorString((cudaError_t)_e)); return -1; } } while (0)

static int cuda_forward(struct backend *b, const struct backend_batch *bt, char *err, size_t errlen)
{
	const struct model *m = b->m;
	const int T = bt->n_tokens, bs = b->block_size;
	if (T < 1 || T > b->max_tokens || bt->n_seqs < 1 || bt->n_seqs > b->max_seqs) {
		snprintf(err, errlen, "batch of %d tokens / %d sequences exceeds the backend's %d / %d", T,
			 bt->n_seqs, b->max_tokens, b->max_seqs);
		return -1;
	}

	/* step metadata: one pinned staging area, one copy */
	int32_t *h_tok = b->h_meta, *h_seq = h_tok + T, *h_pos = h_seq + T, *h_lrow = h_pos + T;
	int32_t *h_dec = h_lrow + bt->n_seqs, *h_tiles = h_dec + T;
	int n_decode, n_tiles;
	kpi_cuda_plan_attention(bt->seq_start, bt->n_seqs, b->n_heads / b->n_kv, h_dec, &n_decode, h_tiles,
				&n_tiles);
	int32_t *h_bt = h_tiles + 2 * n_tiles;
	int max_ctx = 0, rows = 0;
	for (int s = 0; s < bt->n_seqs; s++) {
		int last = bt->pos0[s] + (bt->seq_start[s + 1] - bt->seq_start[s]);
		if (last > b->ctx) {
			snprintf(err, errlen, "sequence %d reaches position %d, past the context of %d", s, last - 1,
				 b->ctx);
			return -1;
		}
		max_ctx = last > max_ctx ? last : max_ctx;
		for (int t = bt->seq_start[s]; t < bt->seq_start[s + 1]; t++) {
			if (bt->tokens[t] < 0 || bt->tokens[t] >= b->vocab) {
				snprintf(err, errlen, "token %d has id %d, outside the vocabulary of %d", t,
					 bt->tokens[t], b->vocab);
				return -1;
			}
			h_tok[t] = bt->tokens[t];
			h_seq[t] = s;
			h_pos[t] = bt->pos0[s] + (t - bt->seq_start[s]);
		}
		memcpy(h_bt + (size_t)s * b->bt_stride, bt->block_tables[s],
		       sizeof(int32_t) * ((last + bs - 1) / bs));
		if (bt->logits_row[s] >= 0) {
			h_lrow[bt->logits_row[s]] = bt->seq_start[s + 1] - 1;
			if (bt->logits_row[s] + 1 > rows)
				rows = bt->logits_row[s] + 1;
		}
	}
	size_t n_meta = (size_t)(h_bt - b->h_meta) + (size_t)bt->n_seqs * b->bt_stride;
	CU(cudaMemcpyAsync(b->d_meta, b->h_meta, 4 * n_meta, cudaMemcpyHostToDevice, b->st),
	   "copying the step's tokens and block tables to the GPU");
	int32_t *d_tok = b->d_meta, *d_seq = d_tok + T, *d_pos = d_seq + T, *d_lrow = d_pos + T;
	int32_t *d_dec = d_lrow + bt->n_seqs, *d_tiles = d_dec + T, *d_bt = d_tiles + 2 * n_tiles;
	struct kpi_step_dev sd = { d_tok, d_seq, d_pos, d_bt, b->bt_stride, T };

	K(kpi_cuda_embed(b->x, b->tok_embd.p, (enum kpi_wtype)b->tok_embd.type, d_tok, T, b->dim, b->st),
	  "embedding");
	for (int l = 0; l < b->n_layers; l++) {
		const struct dlayer *L = &b->layers[l];
		size_t off = (size_t)l * b->layer_elems * 2; /* bytes */
		struct kpi_kv_dev kv = { (char *)b->kcache + off, (char *)b->vcache + off, b->kv_dtype,
					 b->n_kv, b->hd, bs };
		/* attention: norm, q/k/v, rotate, cache, attend, project (+ residual) */
		K(kpi_cuda_rmsnorm(b->xb, b->xb16, b->x, L->attn_norm.p, T, b->dim, m->norm_eps, b->st),
		  "rmsnorm");
		if (gemm(b, &L->wq, b->xb, b->xb16, T, b->q, 0, err, errlen) ||
		    gemm(b, &L->wk, b->xb, b->xb16, T, b->k, 0, err, errlen) ||
		    gemm(b, &L->wv, b->xb, b->xb16, T, b->v, 0, err, errlen))
			return -1;
		K(kpi_cuda_rope(b->q, b->k, b->rope_cs, d_pos, T, b->n_heads, b->n_kv, b->hd, b->st), "rope");
		K(kpi_cuda_kv_write(&kv, b->k, b->v, &sd, b->st), "kv write");
		if (bt->layer_done) {
			/* the engine reads this layer's K/V from the host side now */
			CU(cudaStreamSynchronize(b->st), "finishing a layer's KV write");
			bt->layer_done(bt->layer_ctx, l);
		}
		K(kpi_cuda_attention(b->att, b->q, &kv, &sd, b->n_heads, max_ctx, d_dec, n_decode, d_tiles,
				     n_tiles, b->part, b->n_sm, b->st),
		  "paged attention");
		if (L->wo.type == GGML_F16)
			K(kpi_cuda_to_f16(b->xb16, b->att, (long)T * b->q_dim, b->st), "f16 convert");
		if (gemm(b, &L->wo, b->att, b->xb16, T, b->x, 1, err, errlen))
			return -1;
		/* feed-forward: norm, gate and up, SwiGLU, down (+ residual) */
		K(kpi_cuda_rmsnorm(b->xb, b->xb16, b->x, L->ffn_norm.p, T, b->dim, m->norm_eps, b->st),
		  "rmsnorm");
		if (gemm(b, &L->w_gate, b->xb, b->xb16, T, b->h1, 0, err, errlen) ||
		    gemm(b, &L->w_up, b->xb, b->xb16, T, b->h3, 0, err, errlen))
			return -1;
		K(kpi_cuda_swiglu(b->h1, b->xb16, b->h3, (long)T * b->ffn, b->st), "swiglu");
		if (gemm(b, &L->w_down, b->h1, b->xb16, T, b->x, 1, err, errlen))
			return -1;
	}
	if (rows) {
		/* logits of each sampling sequence's last token */
		K(kpi_cuda_gather_rows(b->xl, b->x, d_lrow, rows, b->dim, b->st), "gather");
		K(kpi_cuda_rmsnorm(b->xl, b->xb16, b->xl, b->output_norm.p, rows, b->dim, m->norm_eps, b->st),
		  "rmsnorm");
		if (gemm(b, &b->output, b->xl, b->xb16, rows, b->logits, 0, err, errlen))
			return -1;
		CU(cudaMemcpyAsync(bt->logits, b->logits, sizeof(float) * rows * b->vocab,
				   cudaMemcpyDeviceToHost, b->st),
		   "copying logits back");
	}
	CU(cudaStreamSynchronize(b->st), "running the step on the GPU");
	return 0;
}

static void cuda_kv_copy(struct backend *b, int32_t dst, int32_t src)
{
	size_t blk = (size_t)b->n_kv * b->block_size * b->hd * 2; /* bytes */
	for (int l = 0; l < b->n_layers; l++) {
		size_t base = (size_t)l * b->layer_elems * 2;
		cudaMemcpyAsync((char *)b->kcache + base + dst * blk, (char *)b->kcache + base + src * blk,
				blk, cudaMemcpyDeviceToDevice, b->st);
		cudaMemcpyAsync((char *)b->vcache + base + dst * blk, (char *)b->vcache + base + src * blk,
				blk, cudaMemcpyDeviceToDevice, b->st);
	}
	/* ordered before the next step's kernels on the same stream */
}

static int cuda_kv_dtype_wire(const struct backend *b)
{
	return b->kv_dtype == KPI_KV_BF16 ? 2 : 1; /* enum kpi_kv_wire_dtype: BF16, F16 */
}

/* One layer's block, n rows from slot0 of every KV head, device <-> host:
 * synchronous copies on the backend's stream (ordered after its kernels). */
static void cuda_kv_move(struct backend *b, int layer, int32_t blk, int slot0, int n, void *k,
			 void *v, size_t head_stride, bool to_host)
{
	size_t base = (size_t)layer * b->layer_elems * 2, row = (size_t)n * b->hd * 2;
	for (int g = 0; g < b->n_kv; g++) {
		size_t off = base + ((((size_t)blk * b->n_kv + g) * b->block_size + slot0) * b->hd) * 2;
		char *hk = (char *)k + g * head_stride * 2, *hv = (char *)v + g * head_stride * 2;
		if (to_host) {
			cudaMemcpyAsync(hk, (char *)b->kcache + off, row, cudaMemcpyDeviceToHost, b->st);
			cudaMemcpyAsync(hv, (char *)b->vcache + off, row, cudaMemcpyDeviceToHost, b->st);
		} else {
			cudaMemcpyAsync((char *)b->kcache + off, hk, row, cudaMemcpyHostToDevice, b->st);
			cudaMemcpyAsync((char *)b->vcache + off, hv, row, cudaMemcpyHostToDevice, b->st);
		}
	}
	cudaStreamSynchronize(b->st);
}

static void cuda_kv_read(struct backend *b, int layer, int32_t blk, int slot0, int n, void *k,
			 void *v, size_t head_stride)
{
	cuda_kv_move(b, layer, blk, slot0, n, k, v, head_stride, true);
}

static void cuda_kv_write(struct backend *b, int layer, int32_t blk, int slot0, int n,
			  const void *k, const void *v, size_t head_stride)
{
	cuda_kv_move(b, layer, blk, slot0, n, (void *)k, (void *)v, head_stride, false);
}

const struct backend_ops cuda_backend_ops = {
	.name = "cuda",
	.create = cuda_create,
	.destroy = cuda_destroy,
	.forward = cuda_forward,
	.kv_copy = cuda_kv_copy,
	.kv_dtype = cuda_kv_dtype_wire,
	.kv_read = cuda_kv_read,
	.kv_write = cuda_kv_write,
};
