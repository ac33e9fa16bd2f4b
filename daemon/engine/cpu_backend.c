/* cpu_backend.c - the forward pass on CPU: matmul weights repacked once at
 * create into panels (kernels.h for F32/F16, qmatmul.h for the quantized
 * types), one pass over them per step for the whole batch (each matmul is
 * split by panels over the worker pool; a quantized one reads its input
 * quantized once before), paged K/V in one F16 pool. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "abi/kpi_kv_wire.h"
#include "daemon/engine/backend.h"
#include "daemon/engine/gguf.h"
#include "daemon/engine/kernels.h"
#include "daemon/engine/model.h"
#include "daemon/engine/pool.h"
#include "daemon/engine/qmatmul.h"
#include "daemon/engine/quant.h"

/* Batch rows per tile inside a matmul task: a tile of activations stays in
 * L2 while the task's weight rows are reused across it. */
#define MM_TILE 24
/* Token-wise ops (embed, norm) on at most this many tokens run on the
 * calling thread: cheaper than a pool region (wake-up and barrier). */
#define TOK_SERIAL_MAX 32
/* From this many tokens a fused head's Q/K/V projections are compute-bound
 * and fetch the head's cached K/V into L2 as they go, at most this much of
 * it (what L2 keeps until attention reads it). */
#ifndef FETCH_MIN_TOKENS
#define FETCH_MIN_TOKENS 8
#endif
#ifndef FETCH_MAX_BYTES
#define FETCH_MAX_BYTES (512 << 10)
#endif

/* A layer's matrices as matmul_rows reads them. */
struct packed_layer {
	struct packed_mat wq, wk, wv, wo, w_gate, w_up, w_down;
};

struct backend {
	const struct model *m;
	struct packed_layer *pl; /* [n_layers] */
	struct packed_mat output;
	void *packed;            /* every packed matrix, one allocation */
	size_t packed_bytes;
	struct pool *pool;
	int kv_blocks, block_size, max_tokens, max_seqs;
	int dim, q_dim, kv_dim, ffn, hd, n_heads, n_kv, group, ctx, vocab;

	uint16_t *kcache, *vcache; /* F16 (n_layers, kv_blocks, n_kv, block_size, hd) */
	size_t layer_elems;        /* elements of one layer's K (or V) pool */
	size_t kv_map_bytes;       /* of each mapping (huge_map) */
	float *rope_cs;         /* (ctx, hd / 2, 2) */

	/* scratch, sized for max_tokens at create */
	float *x;      /* (T, dim) residual stream */
	float *xb;     /* (T, dim) normed input of a sublayer */
	float *q;      /* (T, q_dim) */
	float *k, *v;  /* (T, kv_dim) */
	float *att;    /* (T, q_dim) attention output */
	float *h1, *h3;/* (T, ffn) */
	float *xl;     /* (max_seqs, dim) normed last hidden of sequences wanting logits */
	float *scores; /* (threads, group * ctx) */
	const char **fetch_ptr; /* (threads, fetch_max) K/V segments a fused head fetches */
	int fetch_max;
	int *tok_seq;  /* (T) sequence index of each token */
	int *tok_pos;  /* (T) */
	int *lrow_tok; /* (max_seqs) token index of each logits row */
	/* the input of the current matmul job quantized for its quantized
	 * weights (qmatmul.h), (max_tokens, widest input) */
	void *xq_buf;
	struct qmm_act xq;
};

size_t backend_kv_bytes_per_token(const struct model *m)
{
	return (size_t)2 * m->info.n_layers * m->info.n_kv_heads * m->info.head_dim * sizeof(uint16_t);
}

/* ---- parallel jobs ----------------------------------------------------- */

/* One product of a matmul job: Y (nb, ldy) from the packed W. */
struct mm_seg {
	const struct packed_mat *w;
	float *y;
	int ldy;
};

/* What a matmul job does after its products. */
enum mm_epilogue {
	MM_PLAIN,  /* nothing: each segment's Y is its product */
	MM_SWIGLU, /* seg[0] gate, seg[1] up, equal rows: each task does the same rows of
		    * both while they are in cache, then seg[0].y = silu(gate) * up */
};

/* Y_s (+)= X W_s^T for up to three weight matrices sharing the input X
 * (nb, ldx); the segments used are those before the first NULL w. xq is X
 * quantized for the quantized segments (quantize_input). */
struct matmul_job {
	const float *x;
	int ldx, nb;
	const struct qmm_act *xq;
	struct mm_seg seg[3];
	bool accumulate;
	enum mm_epilogue epilogue;
};

/* A matmul_job split into pool tasks of chunk rows each. */
struct mm_run {
	const struct matmul_job *j;
	int n_seg, chunk, n_tasks;
	int first_task[3]; /* of each segment, cumulative */
};

static void mm_rows(const struct matmul_job *j, const struct mm_seg *sg, int o0, int o1,
		    struct fetch_list *side)
{
	bool quant = ggml_type_is_quant(sg->w->type);
	for (int b0 = 0; b0 < j->nb; b0 += MM_TILE) {
		int nb = j->nb - b0 < MM_TILE ? j->nb - b0 : MM_TILE;
		if (quant)
			qmm_rows(sg->y + (size_t)b0 * sg->ldy, sg->ldy, sg->w, j->xq, b0, nb, o0, o1,
				 j->accumulate, side);
		else
			matmul_rows_fetch(sg->y + (size_t)b0 * sg->ldy, sg->ldy, sg->w,
					  j->x + (size_t)b0 * j->ldx, j->ldx, nb, o0, o1, j->accumulate, side);
	}
}

struct quant_job {
	struct qmm_act *a;
	unsigned forms;
	const float *x;
	int ldx, nb, per_task;
};

static void quant_task(void *arg, int task, int thread)
{
	const struct quant_job *q = arg;
	int r0 = task * q->per_task, r1 = r0 + q->per_task < q->nb ? r0 + q->per_task : q->nb;
	qmm_act_quantize(q->a, q->forms, q->x, q->ldx, r0, r1);
}

/* Quantizes X (nb, ldx) of cols values a row once for the quantized weights
 * in w[0..n) that read it, as llama.cpp quantizes a matmul's input; returns
 * the quantized rows, or NULL when no weight needs them. */
static const struct qmm_act *quantize_input(struct backend *b, const float *x, int ldx, int nb,
					    const struct packed_mat *const *w, int n)
{
	unsigned forms = 0;
	for (int i = 0; i < n; i++)
		forms |= qmm_form(w[i]->type);
	if (!forms)
		return NULL;
	struct quant_job q = { &b->xq, forms, x, ldx, nb, nb };
	b->xq.nb = nb;
	b->xq.cols = w[0]->cols;
	/* a decode step's few rows cost less than waking the pool */
	if (nb <= TOK_SERIAL_MAX) {
		quant_task(&q, 0, 0);
	} else {
		q.per_task = (nb + pool_threads(b->pool) * 4 - 1) / (pool_threads(b->pool) * 4);
		pool_run(b->pool, quant_task, &q, (nb + q.per_task - 1) / q.per_task);
	}
	return &b->xq;
}

static void mm_task(void *arg, int task, int thread)
{
	const struct mm_run *r = arg;
	const struct matmul_job *j = r->j;
	if (j->epilogue == MM_SWIGLU) {
		const struct mm_seg *gate = &j->seg[0], *up = &j->seg[1];
		int rows = gate->w->rows, o0 = task * r->chunk;
		int o1 = o0 + r->chunk < rows ? o0 + r->chunk : rows;
		mm_rows(j, gate, o0, o1, NULL);
		mm_rows(j, up, o0, o1, NULL);
		for (int b = 0; b < j->nb; b++)
			swiglu(gate->y + (size_t)b * gate->ldy + o0, up->y + (size_t)b * up->ldy + o0, o1 - o0);
		return;
	}
	int s = 0;
	while (s + 1 < r->n_seg && task >= r->first_task[s + 1])
		s++;
	const struct mm_seg *sg = &j->seg[s];
	int o0 = (task - r->first_task[s]) * r->chunk;
	int o1 = o0 + r->chunk < sg->w->rows ? o0 + r->chunk : sg->w->rows;
	mm_rows(j, sg, o0, o1, NULL);
}

/* Runs j over the pool, split by whole panels of rows. */
static void matmul_par(struct backend *b, struct matmul_job *j)
{
	struct mm_run r = { .j = j };
	int64_t rows = 0;
	const struct packed_mat *ws[3];
	while (r.n_seg < 3 && j->seg[r.n_seg].w) {
		ws[r.n_seg] = j->seg[r.n_seg].w;
		rows += j->seg[r.n_seg++].w->rows;
	}
	j->xq = quantize_input(b, j->x, j->ldx, j->nb, ws, r.n_seg);
	assert(j->epilogue == MM_PLAIN || (r.n_seg == 2 && j->seg[0].w->rows == j->seg[1].w->rows));
	/* ~8 tasks per thread for balance on a shared machine, whole panels */
	int chunk = (int)(rows / (pool_threads(b->pool) * 8));
	chunk = chunk > 128 ? 128 : chunk;
	chunk = (chunk + KPI_PANEL - 1) / KPI_PANEL * KPI_PANEL;
	chunk = chunk < KPI_PANEL ? KPI_PANEL : chunk;
	if (j->epilogue == MM_SWIGLU) {
		/* half the chunk: a task's rows of gate and of up together */
		chunk = (chunk / 2 + KPI_PANEL - 1) / KPI_PANEL * KPI_PANEL;
		r.n_tasks = (j->seg[0].w->rows + chunk - 1) / chunk;
	} else {
		for (int s = 0; s < r.n_seg; s++) {
			r.first_task[s] = r.n_tasks;
			r.n_tasks += (j->seg[s].w->rows + chunk - 1) / chunk;
		}
	}
	r.chunk = chunk;
	pool_run(b->pool, mm_task, &r, r.n_tasks);
}

struct attn_job {
	struct backend *b;
	struct kv_layer_view view;
	const struct backend_batch *batch;
	const struct packed_layer *layer;
	const struct qmm_act *xq; /* the normed input quantized for Q/K/V, or NULL */
};

static void attn_task(void *arg, int task, int thread)
{
	struct attn_job *j = arg;
	struct backend *b = j->b;
	int t = task / b->n_kv, g = task % b->n_kv;
	int s = b->tok_seq[t];
	size_t off = (size_t)t * b->q_dim + (size_t)g * b->group * b->hd;
	attention_paged(b->att + off, b->q + off, b->group, &j->view, g, j->batch->block_tables[s],
			b->tok_pos[t], b->scores + (size_t)thread * b->group * b->ctx);
}

/* Rotates token t's queries and key, and stores its key and value in the
 * cache, for KV heads [g0, g1). */
static void rope_store(struct backend *b, const struct attn_job *j, int t, int g0, int g1)
{
	const float *cs = b->rope_cs + (size_t)b->tok_pos[t] * b->hd;
	int pos = b->tok_pos[t], bs = b->block_size;
	int32_t blk = j->batch->block_tables[b->tok_seq[t]][pos / bs];
	rope(b->q + (size_t)t * b->q_dim + (size_t)g0 * b->group * b->hd, (g1 - g0) * b->group, b->hd, cs);
	rope(b->k + (size_t)t * b->kv_dim + (size_t)g0 * b->hd, g1 - g0, b->hd, cs);
	for (int g = g0; g < g1; g++) {
		size_t off = kv_offset(&j->view, blk, g, pos % bs);
		f32_to_f16_row(j->view.k + off, b->k + (size_t)t * b->kv_dim + g * b->hd, b->hd);
		f32_to_f16_row(j->view.v + off, b->v + (size_t)t * b->kv_dim + g * b->hd, b->hd);
	}
}

/* The whole attention of KV head g (task) for every token in one region: its
 * rows of Q, K and V, RoPE, the cache write, then attention. Every output is
 * the same fixed-order computation as the unfused path. */
static void attn_fused_task(void *arg, int task, int thread)
{
	struct attn_job *j = arg;
	struct backend *b = j->b;
	const struct packed_layer *L = j->layer;
	int g = task, T = j->batch->n_tokens, qr = b->group * b->hd;
	struct matmul_job mj = { .x = b->xb, .ldx = b->dim, .nb = T, .xq = j->xq };
	struct mm_seg sq = { &L->wq, b->q, b->q_dim }, sk = { &L->wk, b->k, b->kv_dim },
		      sv = { &L->wv, b->v, b->kv_dim };
	struct fetch_list fl = { 0 }, *side = NULL;
	if (T >= FETCH_MIN_TOKENS) {
		/* the projections are compute-bound at this batch: they fetch the
		 * head's cached K/V for the attention that follows */
		side = &fl;
		fl.ptr = b->fetch_ptr + (size_t)thread * b->fetch_max;
		fl.len = (int)((size_t)b->block_size * b->hd * sizeof(uint16_t)) & ~63;
		for (int t = 0; t < T && fl.n + 2 <= b->fetch_max; t++) {
			if (t + 1 < T && b->tok_seq[t + 1] == b->tok_seq[t])
				continue; /* the sequence's last token reads every block */
			const int32_t *bt = j->batch->block_tables[b->tok_seq[t]];
			int nblk = b->tok_pos[t] / b->block_size + 1;
			for (int k = 0; k < 2; k++)
				for (int n = 0; n < nblk && fl.n < b->fetch_max; n++)
					fl.ptr[fl.n++] = (const char *)((k ? j->view.v : j->view.k) +
									kv_offset(&j->view, bt[n], g, 0));
		}
	}
	mm_rows(&mj, &sq, g * qr, (g + 1) * qr, side);
	mm_rows(&mj, &sk, g * b->hd, (g + 1) * b->hd, side);
	mm_rows(&mj, &sv, g * b->hd, (g + 1) * b->hd, side);
	for (int t = 0; t < T; t++)
		rope_store(b, j, t, g, g + 1);
	for (int t = 0; t < T; t++)
		attn_task(arg, t * b->n_kv + g, thread);
}

enum tok_op { TOK_EMBED, TOK_NORM };

struct tok_job {
	struct backend *b;
	enum tok_op op;
	const struct backend_batch *batch;
	const float *norm_w;
	int n_tokens, per_task;
};

static void tok_task(void *arg, int task, int thread)
{
	struct tok_job *j = arg;
	struct backend *b = j->b;
	int t0 = task * j->per_task, t1 = t0 + j->per_task < j->n_tokens ? t0 + j->per_task : j->n_tokens;
	for (int t = t0; t < t1; t++) {
		switch (j->op) {
		case TOK_EMBED: {
			const struct mtensor *e = &b->m->tok_embd;
			size_t row = ggml_row_bytes(e->type, b->dim);
			quant_dequantize_row(e->type, (const char *)e->data + (size_t)j->batch->tokens[t] * row,
					     b->x + (size_t)t * b->dim, b->dim);
			break;
		}
		case TOK_NORM:
			rmsnorm(b->xb + (size_t)t * b->dim, b->x + (size_t)t * b->dim, j->norm_w, b->dim,
				b->m->norm_eps);
			break;
		}
	}
}

static void tok_par(struct backend *b, enum tok_op op, const struct backend_batch *batch,
		    const float *norm_w, int n_tokens)
{
	struct tok_job j = { b, op, batch, norm_w, n_tokens, n_tokens };
	/* a few tokens cost less than waking the pool: run them here */
	if (n_tokens <= TOK_SERIAL_MAX) {
		tok_task(&j, 0, 0);
		return;
	}
	int per = n_tokens / (pool_threads(b->pool) * 4);
	per = per < 1 ? 1 : per;
	j.per_task = per;
	pool_run(b->pool, tok_task, &j, (n_tokens + per - 1) / per);
}

/* ---- packed weights ---------------------------------------------------- */

struct pack_job {
	struct backend *b;
	const struct mtensor **src; /* [n] */
	struct packed_mat **dst;
	size_t *off;
};

static size_t packed_bytes(const struct mtensor *t)
{
	return ggml_type_is_quant(t->type) ? qmm_pack_bytes(t->type, (int)t->rows, (int)t->cols)
					   : pack_bytes(t->type, (int)t->rows, (int)t->cols);
}

static void pack_task(void *arg, int task, int thread)
{
	struct pack_job *j = arg;
	const struct mtensor *t = j->src[task];
	void *dst = (char *)j->b->packed + j->off[task];
	if (ggml_type_is_quant(t->type))
		qmm_pack(j->dst[task], dst, t->data, t->type, (int)t->rows, (int)t->cols);
	else
		pack_matrix(j->dst[task], dst, t->data, t->type, (int)t->rows, (int)t->cols);
	/* the source is not read again (the embedding table is, per token) */
	if (t != &j->b->m->tok_embd)
		model_release_pages(t);
}

/* A mapping of fresh zero pages, so it costs RSS only as used, on
 * transparent huge pages where the kernel has them (a hint: 4 KiB pages
 * otherwise), for the two big arrays every step streams through: the packed
 * weights, and the KV pool, whose blocks a step's attention reads scattered
 * (and a KV transfer copies out or in). On 4 KiB pages both cost a TLB miss
 * every few rows. NULL when the mapping fails; freed with munmap. */
static void *huge_map(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	madvise(p, bytes, MADV_HUGEPAGE);
	return p;
}

/* Repacks every matmul weight (kernels.h) into one allocation. */
static int pack_weights(struct backend *b, char *err, size_t errlen)
{
	const struct model *m = b->m;
	int nl = m->info.n_layers, n = nl * 7 + 1;
	const struct mtensor **src = calloc(n, sizeof(*src));
	struct packed_mat **dst = calloc(n, sizeof(*dst));
	size_t *off = calloc(n, sizeof(*off));
	b->pl = calloc(nl, sizeof(*b->pl));
	if (!src || !dst || !off || !b->pl)
		goto oom;
	for (int l = 0; l < nl; l++) {
		const struct model_layer *ML = &m->layers[l];
		struct packed_layer *P = &b->pl[l];
		const struct mtensor *s7[7] = { &ML->wq, &ML->wk, &ML->wv, &ML->wo, &ML->w_gate, &ML->w_up,
						&ML->w_down };
		struct packed_mat *d7[7] = { &P->wq, &P->wk, &P->wv, &P->wo, &P->w_gate, &P->w_up, &P->w_down };
		for (int k = 0; k < 7; k++) {
			src[l * 7 + k] = s7[k];
			dst[l * 7 + k] = d7[k];
		}
	}
	src[n - 1] = &m->output;
	dst[n - 1] = &b->output;
	for (int k = 0; k < n; k++) {
		off[k] = b->packed_bytes;
		b->packed_bytes += (packed_bytes(src[k]) + 63) & ~(size_t)63;
	}
	b->packed = huge_map(b->packed_bytes);
	if (!b->packed)
		goto oom;
	struct pack_job j = { b, src, dst, off };
	pool_run(b->pool, pack_task, &j, n);
	free(src);
	free(dst);
	free(off);
	return 0;
oom:
	snprintf(err, errlen, "out of memory repacking the weights (%zu MiB)", b->packed_bytes >> 20);
	free(src);
	free(dst);
	free(off);
	return -1;
}

/* ---- create / destroy -------------------------------------------------- */


static void cpu_destroy(struct backend *b)
{
	if (!b)
		return;
	pool_destroy(b->pool);
	if (b->kcache)
		munmap(b->kcache, b->kv_map_bytes);
	if (b->vcache)
		munmap(b->vcache, b->kv_map_bytes);
	free(b->rope_cs);
	free(b->x);
	free(b->xb);
	free(b->q);
	free(b->k);
	free(b->v);
	free(b->att);
	free(b->h1);
	free(b->h3);
	free(b->xl);
	free(b->scores);
	free(b->fetch_ptr);
	free(b->pl);
	if (b->packed)
		munmap(b->packed, b->packed_bytes);
	free(b->tok_seq);
	free(b->tok_pos);
	free(b->lrow_tok);
	free(b->xq_buf);
	free(b);
}

static struct backend *cpu_create(const struct backend_params *p, char *err, size_t errlen)
{
	const struct model *m = p->model;
	const struct model_info *mi = &m->info;
	struct backend *b = calloc(1, sizeof(*b));
	b->m = m;
	b->kv_blocks = p->kv_blocks;
	b->block_size = p->block_size;
	b->max_tokens = p->max_tokens;
	b->max_seqs = p->max_seqs;
	b->dim = mi->dim;
	b->hd = mi->head_dim;
	b->n_heads = mi->n_heads;
	b->n_kv = mi->n_kv_heads;
	b->group = mi->n_heads / mi->n_kv_heads;
	b->q_dim = mi->n_heads * mi->head_dim;
	b->kv_dim = mi->n_kv_heads * mi->head_dim;
	b->ffn = mi->ffn_dim;
	b->ctx = mi->context_length;
	b->vocab = mi->vocab_size;
	b->pool = pool_create(p->threads);
	if (!b->pool) {
		snprintf(err, errlen, "cannot start %d worker threads (lower --threads)", p->threads);
		cpu_destroy(b);
		return NULL;
	}
	b->layer_elems = (size_t)p->kv_blocks * b->n_kv * p->block_size * b->hd;
	size_t kv_elems = b->layer_elems * mi->n_layers;
	b->kv_map_bytes = kv_elems * sizeof(uint16_t);
	b->kcache = huge_map(b->kv_map_bytes);
	b->vcache = huge_map(b->kv_map_bytes);
	size_t T = p->max_tokens;
	b->rope_cs = malloc(sizeof(float) * b->ctx * b->hd);
	b->x = malloc(sizeof(float) * T * b->dim);
	b->xb = malloc(sizeof(float) * T * b->dim);
	b->q = malloc(sizeof(float) * T * b->q_dim);
	b->k = malloc(sizeof(float) * T * b->kv_dim);
	b->v = malloc(sizeof(float) * T * b->kv_dim);
	b->att = malloc(sizeof(float) * T * b->q_dim);
	b->h1 = malloc(sizeof(float) * T * b->ffn);
	b->h3 = malloc(sizeof(float) * T * b->ffn);
	b->xl = malloc(sizeof(float) * p->max_seqs * b->dim);
	b->scores = malloc(sizeof(float) * pool_threads(b->pool) * b->group * b->ctx);
	b->fetch_max = (int)(FETCH_MAX_BYTES / ((size_t)b->block_size * b->hd * sizeof(uint16_t))) + 2;
	b->fetch_ptr = malloc(sizeof(*b->fetch_ptr) * pool_threads(b->pool) * b->fetch_max);
	b->tok_seq = malloc(sizeof(int) * T);
	b->tok_pos = malloc(sizeof(int) * T);
	b->lrow_tok = malloc(sizeof(int) * p->max_seqs);
	if (!b->kcache || !b->vcache || !b->rope_cs || !b->x || !b->xb || !b->q || !b->k || !b->v ||
	    !b->att || !b->h1 || !b->h3 || !b->xl || !b->scores || !b->tok_seq || !b->tok_pos ||
	    !b->lrow_tok || !b->fetch_ptr) {
		snprintf(err, errlen,
			 "out of memory allocating the KV pool (%zu MiB) and scratch for %d tokens: lower --kv-blocks or --max-batched-tokens",
			 kv_elems * 2 * sizeof(uint16_t) >> 20, p->max_tokens);
		cpu_destroy(b);
		return NULL;
	}
	if (model_matrix_kinds(m) & MODEL_QUANT_MATRICES) {
		int widest = b->dim > b->q_dim ? b->dim : b->q_dim;
		widest = widest > b->ffn ? widest : b->ffn;
		b->xq_buf = malloc(qmm_act_bytes((int)T, widest));
		if (!b->xq_buf) {
			snprintf(err, errlen, "out of memory for the quantized activations of %d tokens: lower --max-batched-tokens",
				 p->max_tokens);
			cpu_destroy(b);
			return NULL;
		}
		qmm_act_init(&b->xq, b->xq_buf, (int)T, widest);
	}
	rope_table(b->rope_cs, b->ctx, b->hd, m->rope_base);
	if (pack_weights(b, err, errlen)) {
		cpu_destroy(b);
		return NULL;
	}
	return b;
}

/* ---- forward ----------------------------------------------------------- */

static int cpu_forward(struct backend *b, const struct backend_batch *bt, char *err, size_t errlen)
{
	const struct model *m = b->m;
	int T = bt->n_tokens, bs = b->block_size;
	if (T < 1 || T > b->max_tokens || bt->n_seqs < 1 || bt->n_seqs > b->max_seqs) {
		snprintf(err, errlen, "batch of %d tokens / %d sequences exceeds the backend's %d / %d", T,
			 bt->n_seqs, b->max_tokens, b->max_seqs);
		return -1;
	}
	for (int s = 0; s < bt->n_seqs; s++)
		for (int t = bt->seq_start[s]; t < bt->seq_start[s + 1]; t++) {
			b->tok_seq[t] = s;
			b->tok_pos[t] = bt->pos0[s] + (t - bt->seq_start[s]);
			if (b->tok_pos[t] >= b->ctx || bt->tokens[t] < 0 || bt->tokens[t] >= b->vocab) {
				snprintf(err, errlen, "token %d (id %d) at position %d is outside the model", t,
					 bt->tokens[t], b->tok_pos[t]);
				return -1;
			}
		}

	/* one region per KV head fuses Q/K/V and attention when the heads split
	 * evenly enough over the threads */
	int nt = pool_threads(b->pool);
	bool fuse_attn = b->n_kv % nt == 0 || b->n_kv >= 4 * nt;
	tok_par(b, TOK_EMBED, bt, NULL, T);
	for (int l = 0; l < m->info.n_layers; l++) {
		const struct model_layer *ML = &m->layers[l];
		const struct packed_layer *L = &b->pl[l];
		struct attn_job aj = { b, { b->kcache + l * b->layer_elems, b->vcache + l * b->layer_elems,
					    b->n_kv, b->hd, bs }, bt, L, NULL };
		/* attention: norm, q/k/v, rotate, cache, attend, project */
		tok_par(b, TOK_NORM, bt, ML->attn_norm.data, T);
		if (fuse_attn) {
			const struct packed_mat *qkv[3] = { &L->wq, &L->wk, &L->wv };
			aj.xq = quantize_input(b, b->xb, b->dim, T, qkv, 3);
			pool_run(b->pool, attn_fused_task, &aj, b->n_kv);
		} else {
			matmul_par(b, &(struct matmul_job){ .x = b->xb, .ldx = b->dim, .nb = T,
							    .seg = { { &L->wq, b->q, b->q_dim },
								     { &L->wk, b->k, b->kv_dim },
								     { &L->wv, b->v, b->kv_dim } } });
			for (int t = 0; t < T; t++)
				rope_store(b, &aj, t, 0, b->n_kv);
			pool_run(b->pool, attn_task, &aj, T * b->n_kv);
		}
		if (bt->layer_done)
			bt->layer_done(bt->layer_ctx, l);
		matmul_par(b, &(struct matmul_job){ .x = b->att, .ldx = b->q_dim, .nb = T,
						    .seg = { { &L->wo, b->x, b->dim } }, .accumulate = true });
		/* feed-forward: norm, gate and up in one pass with SwiGLU, down */
		tok_par(b, TOK_NORM, bt, ML->ffn_norm.data, T);
		matmul_par(b, &(struct matmul_job){ .x = b->xb, .ldx = b->dim, .nb = T,
						    .seg = { { &L->w_gate, b->h1, b->ffn }, { &L->w_up, b->h3, b->ffn } },
						    .epilogue = MM_SWIGLU });
		matmul_par(b, &(struct matmul_job){ .x = b->h1, .ldx = b->ffn, .nb = T,
						    .seg = { { &L->w_down, b->x, b->dim } }, .accumulate = true });
	}
	/* logits for the last token of each sequence that samples */
	int rows = 0;
	for (int s = 0; s < bt->n_seqs; s++) {
		if (bt->logits_row[s] < 0)
			continue;
		int t = bt->seq_start[s + 1] - 1;
		rmsnorm(b->xl + (size_t)bt->logits_row[s] * b->dim, b->x + (size_t)t * b->dim,
			m->output_norm.data, b->dim, m->norm_eps);
		if (bt->logits_row[s] + 1 > rows)
			rows = bt->logits_row[s] + 1;
	}
	if (rows)
		matmul_par(b, &(struct matmul_job){ .x = b->xl, .ldx = b->dim, .nb = rows,
						    .seg = { { &b->output, bt->logits, b->vocab } } });
	return 0;
}

static void cpu_kv_copy(struct backend *b, int32_t dst, int32_t src)
{
	size_t blk = (size_t)b->n_kv * b->block_size * b->hd;
	for (int l = 0; l < b->m->info.n_layers; l++) {
		uint16_t *k = b->kcache + l * b->layer_elems, *v = b->vcache + l * b->layer_elems;
		memcpy(k + dst * blk, k + src * blk, blk * sizeof(uint16_t));
		memcpy(v + dst * blk, v + src * blk, blk * sizeof(uint16_t));
	}
}

static int cpu_kv_dtype(const struct backend *b)
{
	return KPI_KV_WIRE_F16;
}

/* The n rows from slot0 of head g of block blk are contiguous in the pool. */
static void cpu_kv_read(struct backend *b, int layer, int32_t blk, int slot0, int n, void *k,
			void *v, size_t head_stride)
{
	struct kv_layer_view view = { b->kcache + layer * b->layer_elems,
				      b->vcache + layer * b->layer_elems, b->n_kv, b->hd, b->block_size };
	size_t row = (size_t)n * b->hd;
	for (int g = 0; g < b->n_kv; g++) {
		size_t off = kv_offset(&view, blk, g, slot0);
		memcpy((uint16_t *)k + g * head_stride, view.k + off, row * sizeof(uint16_t));
		memcpy((uint16_t *)v + g * head_stride, view.v + off, row * sizeof(uint16_t));
	}
}

static void cpu_kv_write(struct backend *b, int layer, int32_t blk, int slot0, int n, const void *k,
			 const void *v, size_t head_stride)
{
	struct kv_layer_view view = { b->kcache + layer * b->layer_elems,
				      b->vcache + layer * b->layer_elems, b->n_kv, b->hd, b->block_size };
	size_t row = (size_t)n * b->hd;
	for (int g = 0; g < b->n_kv; g++) {
		size_t off = kv_offset(&view, blk, g, slot0);
		memcpy(view.k + off, (const uint16_t *)k + g * head_stride, row * sizeof(uint16_t));
		memcpy(view.v + off, (const uint16_t *)v + g * head_stride, row * sizeof(uint16_t));
	}
}

static void *cpu_kv_rows(struct backend *b, int layer, int32_t blk, int g, bool v)
{
	struct kv_layer_view view = { b->kcache + layer * b->layer_elems,
				      b->vcache + layer * b->layer_elems, b->n_kv, b->hd, b->block_size };
	return (v ? view.v : view.k) + kv_offset(&view, blk, g, 0);
}

const struct backend_ops cpu_backend_ops = {
	.name = "cpu",
	.create = cpu_create,
	.destroy = cpu_destroy,
	.forward = cpu_forward,
	.kv_copy = cpu_kv_copy,
	.kv_dtype = cpu_kv_dtype,
	.kv_read = cpu_kv_read,
	.kv_write = cpu_kv_write,
	.kv_rows = cpu_kv_rows,
};
