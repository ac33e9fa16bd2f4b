/* engine.c - the engine API of daemon/engine.h: request bookkeeping, the
 * iteration-level scheduler (continuous batching with chunked prefill and
 * preemption by recompute, or static batches), sampling and the USDT probes
 * of the request lifecycle. One thread calls in; the backend does the math. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
/* XXH3 inlined, built for this CPU (-march=native): the KV digests run over
 * every block a prefill worker computes. Same digests as the library's. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "abi/kpi_kv_wire.h"
#include "daemon/engine.h"
#include "daemon/engine/backend.h"
#include "daemon/engine/gguf.h"
#include "daemon/engine/kv.h"
#include "daemon/engine/kernels.h"
#include "daemon/engine/model.h"
#include "daemon/engine/qmatmul.h"
#include "daemon/engine/sample.h"
#include "abi/kpi_step_seq.h"
#include "abi/kpi_step.h"
#include "kpi_probes.h"

/* The batch step libkpi_cupti.so ties GPU launches to (abi/kpi_step.h); one
 * store at each end of the forward pass, whether the library is loaded or not. */
KPI_CUPTI_STEP_DEFINE();

/* Default KV pool: max_seqs full contexts, but no more than this. */
#define KV_DEFAULT_CAP_BYTES (1ull << 30)

enum seq_state { SEQ_WAITING, SEQ_RUNNING };

struct seq {
	uint64_t id;
	uint64_t arrival;      /* submit order: running is kept sorted by it */
	int32_t *tokens;       /* prompt then outputs, [n_prompt + max_out] */
	int n_prompt, n_out, max_out;
	int n_cached;          /* positions whose K/V are in the cache */
	int hwm;               /* most positions ever cached (prompt-token stats) */
	struct block_table bt;
	struct sampling_params sp;
	uint64_t rng;
	enum seq_state state;
	bool static_member;    /* part of the current static batch */
	uint64_t preempted_at; /* step of the last preemption, +1 (0: never) */
	bool export_kv;        /* prefill-only: its KV goes out layer by layer (kv_layer) */
	struct engine_kv_import *import; /* KV computed elsewhere, copied in at admission */
	int n_exported;        /* prefill-only: positions whose KV went out at admission */
	int n_keyed;           /* leading full blocks given a prefix-cache key */
	uint64_t key;          /* the key of block n_keyed - 1 (0: none) */
	struct seq *prev, *next;
};

struct seq_list {
	struct seq *head, *tail;
	int n;
};

struct engine {
	struct engine_config cfg;
	struct model *model;
	const struct backend_ops *ops;
	struct backend *be;
	struct kv_pool kv;
	int blocks_per_seq; /* table capacity: a full context */

	struct seq_list waiting, running;
	uint64_t next_arrival;
	int live;          /* requests submitted and not yet reported finished */
	int static_open;   /* members of the current static batch still unfinished */
	int static_size;   /* members the current static batch started with */
	/* Static batches are fixed-shape: a member that finished keeps its slot
	 * and the batch still computes a padding row for it every step, as a
	 * request-level batching server does. The padding rows' K/V go to
	 * these blocks (row j at position j), held while a batch runs. */
	struct block_table pad_bt;

	/* events: produced by a step, handed out over one or more engine_step calls */
	struct engine_event *ev;
	int ev_n, ev_cap, ev_out;
	/* requests ended by engine_finish, reported by the next step */
	struct engine_event *fin;
	int fin_n, fin_cap;

	/* per-step batch, sized at create */
	struct seq **b_seq;
	int *b_take;
	int32_t *b_tokens;
	int *b_start, *b_pos0, *b_lrow;
	const int32_t **b_tables;
	struct kpi_step_seq *b_probe; /* kpi:step__seqs entries, [max_seqs] */
	struct seq **b_export;  /* prefill-only sequences whose prefill ends this step */
	int n_export;
	int imports_admitted;   /* this step: admitted with their KV copied in, no compute */
	struct kv_hold *holds;  /* blocks held for KV being received (engine_kv_reserve) */
	int b_n;                /* sequences in this step's batch */
	/* config.kv_digests: [n_layers][n_blocks] each full block's KV digest, and
	 * the kv.gen it was taken at (0: none) */
	uint64_t *kv_digest;
	uint32_t *kv_digest_gen;
	uint64_t fingerprint;
	float *logits;
	struct sample_scratch ss;

	struct engine_stats st;
	char kernels[48]; /* engine_kernels */
	uint64_t weight_bytes; /* engine_weight_bytes, counted once */
};

/* ---- lists ------------------------------------------------------------- */

static void list_remove(struct seq_list *l, struct seq *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		l->head = s->next;
	if (s->next)
		s->next->prev = s->prev;
	else
		l->tail = s->prev;
	s->prev = s->next = NULL;
	l->n--;
}

static void list_push_tail(struct seq_list *l, struct seq *s)
{
	s->next = NULL;
	s->prev = l->tail;
	if (l->tail)
		l->tail->next = s;
	else
		l->head = s;
	l->tail = s;
	l->n++;
}

static void list_push_head(struct seq_list *l, struct seq *s)
{
	s->prev = NULL;
	s->next = l->head;
	if (l->head)
		l->head->prev = s;
	else
		l->tail = s;
	l->head = s;
	l->n++;
}

/* Keeps the running list oldest-first, so "newest" (the preemption victim)
 * is always the tail, and a re-admitted old request keeps its priority. */
static void list_insert_by_arrival(struct seq_list *l, struct seq *s)
{
	struct seq *at = l->tail;
	while (at && at->arrival > s->arrival)
		at = at->prev;
	if (!at) {
		list_push_head(l, s);
		return;
	}
	s->prev = at;
	s->next = at->next;
	if (at->next)
		at->next->prev = s;
	else
		l->tail = s;
	at->next = s;
	l->n++;
}

/* ---- create / destroy -------------------------------------------------- */

static int online_cpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

struct engine *engine_create(const struct engine_config *cfg, char *err, size_t errlen)
{
	struct engine *e = calloc(1, sizeof(*e));
	e->cfg = *cfg;
	struct engine_config *c = &e->cfg;
	if (c->max_seqs <= 0)
		c->max_seqs = 64;
	if (c->max_batched_tokens <= 0)
		c->max_batched_tokens = 2048;
	if (c->block_size <= 0)
		c->block_size = 16;
	if (c->threads <= 0)
		c->threads = online_cpus();
	if (c->max_seqs > 4096 || c->max_batched_tokens > 1 << 16 || c->block_size > 4096 ||
	    c->threads > 1024) {
		snprintf(err, errlen,
			 "engine limits out of range: max-seqs %d (1..4096), max-batched-tokens %d (1..65536), block size %d (1..4096), threads %d (1..1024)",
			 c->max_seqs, c->max_batched_tokens, c->block_size, c->threads);
		goto fail;
	}
	if (c->max_batched_tokens < c->max_seqs) {
		snprintf(err, errlen,
			 "--max-batched-tokens %d is below --max-seqs %d: every running sequence needs one token a step; raise it or lower --max-seqs",
			 c->max_batched_tokens, c->max_seqs);
		goto fail;
	}
	if (c->backend == ENGINE_BACKEND_CUDA) {
		if (!&cuda_backend_ops) {
			snprintf(err, errlen, "this kpi-infer was built without CUDA: use the CPU backend or rebuild where nvcc is found");
			goto fail;
		}
		e->ops = &cuda_backend_ops;
	} else {
		e->ops = &cpu_backend_ops;
	}
	if (!c->model_path || !*c->model_path) {
		snprintf(err, errlen, "no model path given");
		goto fail;
	}
	e->model = model_load(c->model_path, err, errlen);
	if (!e->model)
		goto fail;
	const struct model_info *mi = &e->model->info;
	e->blocks_per_seq = (mi->context_length + c->block_size - 1) / c->block_size;
	if (c->kv_blocks <= 0) {
		size_t per_block = backend_kv_bytes_per_token(e->model) * c->block_size;
		size_t want = (size_t)c->max_seqs * e->blocks_per_seq;
		size_t cap = KV_DEFAULT_CAP_BYTES / per_block;
		if (cap < (size_t)e->blocks_per_seq)
			cap = e->blocks_per_seq;
		c->kv_blocks = (int)(want < cap ? want : cap);
	}
	if (kv_pool_init(&e->kv, c->kv_blocks) || (c->prefix_cache && kv_pool_enable_cache(&e->kv))) {
		snprintf(err, errlen, "out of memory for %d KV block ids", c->kv_blocks);
		goto fail;
	}
	if (c->fingerprint) /* before the backend repacks and releases the pages */
		e->fingerprint = XXH3_64bits(e->model->gguf->map, e->model->gguf->size);
	struct backend_params bp = { e->model, c->kv_blocks, c->block_size, c->max_batched_tokens,
				     c->max_seqs, c->threads };
	e->be = e->ops->create(&bp, err, errlen);
	if (!e->be)
		goto fail;
	e->weight_bytes = model_matrix_bytes(e->model);
	unsigned kinds = model_matrix_kinds(e->model);
	if (e->ops != &cpu_backend_ops)
		snprintf(e->kernels, sizeof(e->kernels), "%s", e->ops->name);
	else if (kinds == (MODEL_QUANT_MATRICES | MODEL_FLOAT_MATRICES))
		snprintf(e->kernels, sizeof(e->kernels), "%s+%s", qmm_isa_name(qmm_isa_get()), matmul_kernels_name());
	else
		snprintf(e->kernels, sizeof(e->kernels), "%s",
			 kinds & MODEL_QUANT_MATRICES ? qmm_isa_name(qmm_isa_get()) : matmul_kernels_name());
	int ms = c->max_seqs, vocab = mi->vocab_size;
	e->pad_bt.cap = (ms + c->block_size - 1) / c->block_size;
	e->pad_bt.ids = malloc(sizeof(int32_t) * e->pad_bt.cap);
	e->b_seq = calloc(ms, sizeof(*e->b_seq));
	e->b_take = calloc(ms, sizeof(int));
	e->b_tokens = calloc(c->max_batched_tokens, sizeof(int32_t));
	e->b_start = calloc(ms + 1, sizeof(int));
	e->b_pos0 = calloc(ms, sizeof(int));
	e->b_lrow = calloc(ms, sizeof(int));
	e->b_tables = calloc(ms, sizeof(*e->b_tables));
	e->b_probe = calloc(ms, sizeof(*e->b_probe));
	e->b_export = calloc(ms, sizeof(*e->b_export));
	if (!e->b_probe || !e->b_export) {
		snprintf(err, errlen, "out of memory for %d step__seqs entries", ms);
		goto fail;
	}
	e->logits = calloc((size_t)ms * vocab, sizeof(float));
	e->ss.probs = calloc(vocab, sizeof(float));
	e->ss.order = calloc(vocab, sizeof(int32_t));
	e->ev_cap = 4 * ms + 16;
	e->ev = calloc(e->ev_cap, sizeof(*e->ev));
	e->fin_cap = 16;
	e->fin = calloc(e->fin_cap, sizeof(*e->fin));
	e->st.kv_blocks_total = c->kv_blocks;
	if (c->kv_digests && e->ops->kv_rows) {
		size_t n = (size_t)mi->n_layers * c->kv_blocks;
		e->kv_digest = malloc(sizeof(uint64_t) * n);
		e->kv_digest_gen = calloc(n, sizeof(uint32_t));
		if (!e->kv_digest || !e->kv_digest_gen) {
			snprintf(err, errlen, "out of memory for %zu KV digests", n);
			goto fail;
		}
	}
	return e;
fail:
	engine_destroy(e);
	return NULL;
}

/* Blocks held for a request's KV on its way in, until its submit. */
struct kv_hold {
	uint64_t id;
	struct block_table bt;
	struct kv_hold *next;
};

static struct kv_hold *hold_take(struct engine *e, uint64_t id)
{
	for (struct kv_hold **h = &e->holds; *h; h = &(*h)->next)
		if ((*h)->id == id) {
			struct kv_hold *got = *h;
			*h = got->next;
			return got;
		}
	return NULL;
}

static void hold_free(struct engine *e, struct kv_hold *h)
{
	if (!h)
		return;
	kv_table_release(&e->kv, &h->bt);
	free(h->bt.ids);
	free(h);
}

static void seq_free(struct seq *s)
{
	if (s->import) {
		engine_kv_buffer_free(s->import->data);
		free(s->import);
	}
	free(s->tokens);
	free(s->bt.ids);
	free(s);
}

void engine_destroy(struct engine *e)
{
	if (!e)
		return;
	while (e->holds) {
		struct kv_hold *h = e->holds;
		e->holds = h->next;
		hold_free(e, h);
	}
	struct seq_list *lists[2] = { &e->waiting, &e->running };
	for (int i = 0; i < 2; i++)
		while (lists[i]->head) {
			struct seq *s = lists[i]->head;
			list_remove(lists[i], s);
			seq_free(s);
		}
	if (e->be)
		e->ops->destroy(e->be);
	free(e->pad_bt.ids);
	kv_pool_free(&e->kv);
	model_free(e->model);
	free(e->b_seq);
	free(e->b_take);
	free(e->kv_digest);
	free(e->kv_digest_gen);
	free(e->b_tokens);
	free(e->b_start);
	free(e->b_pos0);
	free(e->b_lrow);
	free(e->b_tables);
	free(e->b_probe);
	free(e->b_export);
	free(e->logits);
	free(e->ss.probs);
	free(e->ss.order);
	free(e->ev);
	free(e->fin);
	free(e);
}

const struct model_info *engine_model(const struct engine *e)
{
	return &e->model->info;
}

const char *engine_kernels(const struct engine *e)
{
	return e->kernels;
}

uint64_t engine_weight_bytes(const struct engine *e)
{
	return e->weight_bytes;
}

/* ---- tokenizer --------------------------------------------------------- */

int engine_tokenize(const struct engine *e, const char *text, size_t len, bool add_bos, int32_t *out,
		    int max)
{
	int n = 0;
	if (add_bos) {
		if (max > 0)
			out[0] = e->model->info.bos_id;
		n = 1;
	}
	int r = tokenizer_encode(&e->model->tok, text, len, out + (n <= max ? n : max),
				 max - n > 0 ? max - n : 0);
	return r < 0 ? -1 : n + r;
}

int engine_token_piece(const struct engine *e, int32_t token, char *buf, size_t buflen)
{
	return tokenizer_piece(&e->model->tok, token, buf, buflen);
}

/* ---- requests ---------------------------------------------------------- */

static int ensure_ev_cap(struct engine *e)
{
	int want = 4 * e->cfg.max_seqs + 2 * e->live + 16;
	if (want <= e->ev_cap)
		return 0;
	struct engine_event *ev = realloc(e->ev, sizeof(*ev) * want);
	if (!ev)
		return -1;
	e->ev = ev;
	e->ev_cap = want;
	return 0;
}

/* Checks and queues a request; returns its sequence, or NULL with *rc set. */
static struct seq *seq_submit(struct engine *e, uint64_t id, const int32_t *prompt, int n_prompt,
			      const struct sampling_params *sp, char *err, size_t errlen, int *rc)
{
	const struct model_info *mi = &e->model->info;
	*rc = -EINVAL;
	if (n_prompt <= 0) {
		snprintf(err, errlen, "empty prompt: send at least one token");
		return NULL;
	}
	for (int i = 0; i < n_prompt; i++)
		if (prompt[i] < 0 || prompt[i] >= mi->vocab_size) {
			snprintf(err, errlen, "prompt token %d has id %d, outside the vocabulary [0, %d)", i,
				 prompt[i], mi->vocab_size);
			return NULL;
		}
	int max_out = sp->max_tokens > 0 ? sp->max_tokens : mi->context_length - n_prompt;
	if (n_prompt + max_out > mi->context_length || max_out <= 0) {
		snprintf(err, errlen,
			 "prompt (%d tokens) + max_tokens (%d) exceeds the model's context of %d tokens",
			 n_prompt, sp->max_tokens, mi->context_length);
		*rc = -E2BIG;
		return NULL;
	}
	int need = (n_prompt + max_out + e->cfg.block_size - 1) / e->cfg.block_size;
	if (need > e->kv.n_blocks) {
		snprintf(err, errlen,
			 "prompt (%d tokens) + max_tokens (%d) needs %d KV blocks of %d tokens but the pool has %d: lower max_tokens or start with a larger --kv-blocks",
			 n_prompt, max_out, need, e->cfg.block_size, e->kv.n_blocks);
		*rc = -E2BIG;
		return NULL;
	}
	if (sp->temperature < 0 || sp->top_p < 0 || sp->top_p > 1) {
		snprintf(err, errlen, "temperature must be >= 0 and top_p in [0, 1]");
		return NULL;
	}
	struct seq *s = calloc(1, sizeof(*s));
	s->tokens = malloc(sizeof(int32_t) * (n_prompt + max_out));
	s->bt.cap = e->blocks_per_seq;
	s->bt.ids = malloc(sizeof(int32_t) * s->bt.cap);
	e->live++;
	if (!s->tokens || !s->bt.ids || ensure_ev_cap(e)) {
		e->live--;
		seq_free(s);
		snprintf(err, errlen, "out of memory queueing the request");
		*rc = -ENOMEM;
		return NULL;
	}
	memcpy(s->tokens, prompt, sizeof(int32_t) * n_prompt);
	s->id = id;
	s->arrival = e->next_arrival++;
	s->n_prompt = n_prompt;
	s->max_out = max_out;
	s->sp = *sp;
	s->rng = sample_rng_seed(sp->seed);
	s->state = SEQ_WAITING;
	list_push_tail(&e->waiting, s);
	*rc = 0;
	return s;
}

int engine_submit(struct engine *e, uint64_t id, const int32_t *prompt, int n_prompt,
		  const struct sampling_params *sp, char *err, size_t errlen)
{
	int rc;
	seq_submit(e, id, prompt, n_prompt, sp, err, errlen, &rc);
	return rc;
}

int engine_submit_prefill(struct engine *e, uint64_t id, const int32_t *prompt, int n_prompt,
			  const struct sampling_params *sp, char *err, size_t errlen)
{
	if (!e->cfg.kv_layer || !e->ops->kv_read) {
		snprintf(err, errlen, "this engine cannot stream KV out (no kv_layer callback or a "
			 "backend without kv_read)");
		return -ENOTSUP;
	}
	struct sampling_params one = *sp;
	one.max_tokens = 1;
	int rc;
	struct seq *s = seq_submit(e, id, prompt, n_prompt, &one, err, errlen, &rc);
	if (s)
		s->export_kv = true;
	return rc;
}

int engine_submit_decode(struct engine *e, uint64_t id, const int32_t *prompt, int n_prompt,
			 const struct sampling_params *sp, struct engine_kv_import *kv, char *err,
			 size_t errlen)
{
	const struct model_info *mi = &e->model->info;
	if (!e->ops->kv_write) {
		snprintf(err, errlen, "the %s backend cannot take KV in", e->ops->name);
		return -ENOTSUP;
	}
	/* the blocks held for it: taken when its KV is in them, else given back */
	struct kv_hold *hold = hold_take(e, id);
	if (hold && (!kv || kv->data)) {
		hold_free(e, hold);
		hold = NULL;
	}
	if (!kv || kv->n_tokens != n_prompt || kv->first_token < 0 ||
	    kv->first_token >= mi->vocab_size) {
		hold_free(e, hold);
		snprintf(err, errlen, "the imported KV does not fit the request: %d tokens for a "
			 "prompt of %d, first token %d", kv ? kv->n_tokens : -1, n_prompt,
			 kv ? kv->first_token : -1);
		return -EINVAL;
	}
	if (!kv->data && (!hold || hold->bt.n * e->cfg.block_size < n_prompt)) {
		hold_free(e, hold);
		snprintf(err, errlen, "the imported KV has no data and no blocks hold its %d positions",
			 n_prompt);
		return -EINVAL;
	}
	int rc;
	struct seq *s = seq_submit(e, id, prompt, n_prompt, sp, err, errlen, &rc);
	if (s)
		s->import = malloc(sizeof(*s->import));
	if (!s || !s->import) {
		hold_free(e, hold);
		hold = NULL;
	}
	if (!s)
		return rc;
	if (!s->import) {
		list_remove(&e->waiting, s);
		e->live--;
		seq_free(s);
		snprintf(err, errlen, "out of memory queueing the request");
		return -ENOMEM;
	}
	*s->import = *kv;
	kv->data = NULL;
	if (hold) { /* the prompt's blocks, its KV in them: no copy at admission */
		memcpy(s->bt.ids, hold->bt.ids, sizeof(int32_t) * (size_t)hold->bt.n);
		s->bt.n = hold->bt.n;
		free(hold->bt.ids);
		free(hold);
	}
	/* why it may wait: the slots and blocks as it joins the queue */
	int need = (n_prompt + e->cfg.block_size - 1) / e->cfg.block_size;
	KPI_KV_SLOT_WAIT(id, e->waiting.n - 1, need, e->kv.n_free, e->running.n, e->cfg.max_seqs);
	return 0;
}

/* ---- transfer buffers ------------------------------------------------------------- */

/* A transfer buffer is a header (its capacity) and then the bytes. Freed ones
 * (a layer going out, a prompt's KV coming in) are kept, up to KV_BUF_KEEP of
 * them and KV_BUF_KEEP_BYTES in all, for the next transfer: a fresh one costs
 * a page fault and a zeroed page for every 2 MiB it touches, a fifth of a
 * transfer's CPU when each was new. The small ones too (a prefill's last
 * positions, tens of KB): malloc'd and freed each time, they grew and trimmed
 * the engine thread's heap, each regrowth a zeroed huge page. Allocated on
 * one thread and freed on the other (I/O and engine): the kept list is locked. */
#define KV_BUF_HUGE ((size_t)2 << 20)
#define KV_BUF_HDR 64
#define KV_BUF_MAGIC 0x4b564255464652ull /* "KVBUFFR" */
#define KV_BUF_KEEP 32
#define KV_BUF_KEEP_BYTES ((size_t)256 << 20)

struct kv_buf_hdr {
	uint64_t magic;
	size_t cap;              /* bytes after the header */
};

static struct {
	pthread_mutex_t mu;
	char *kept[KV_BUF_KEEP]; /* headers of freed large buffers */
	int n;
	size_t bytes;
} kv_bufs = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* The smallest kept buffer of at least bytes (and not twice as large), taken; or NULL. */
static char *kv_buf_reuse(size_t bytes)
{
	pthread_mutex_lock(&kv_bufs.mu);
	int best = -1;
	for (int i = 0; i < kv_bufs.n; i++) {
		size_t cap = ((struct kv_buf_hdr *)kv_bufs.kept[i])->cap;
		if (cap >= bytes && cap / 2 <= bytes &&
		    (best < 0 || cap < ((struct kv_buf_hdr *)kv_bufs.kept[best])->cap))
			best = i;
	}
	char *h = NULL;
	if (best >= 0) {
		h = kv_bufs.kept[best];
		kv_bufs.bytes -= ((struct kv_buf_hdr *)h)->cap;
		kv_bufs.kept[best] = kv_bufs.kept[--kv_bufs.n];
	}
	pthread_mutex_unlock(&kv_bufs.mu);
	return h;
}

void *engine_kv_buffer(size_t bytes)
{
	if (!bytes)
		bytes = 1;
	char *h = kv_buf_reuse(bytes);
	if (h)
		return h + KV_BUF_HDR;
	size_t total = bytes + KV_BUF_HDR;
	if (total < KV_BUF_HUGE) {
		h = malloc(total);
	} else {
		total = (total + KV_BUF_HUGE - 1) / KV_BUF_HUGE * KV_BUF_HUGE;
		void *p = NULL;
		if (posix_memalign(&p, KV_BUF_HUGE, total))
			return NULL;
		madvise(p, total, MADV_HUGEPAGE); /* a hint: fine if refused */
		h = p;
	}
	if (!h)
		return NULL;
	*(struct kv_buf_hdr *)h = (struct kv_buf_hdr){ KV_BUF_MAGIC, total - KV_BUF_HDR };
	return h + KV_BUF_HDR;
}

void engine_kv_buffer_free(void *p)
{
	if (!p)
		return;
	char *h = (char *)p - KV_BUF_HDR;
	struct kv_buf_hdr *hd = (struct kv_buf_hdr *)h;
	if (hd->magic != KV_BUF_MAGIC) {
		fprintf(stderr, "kpi-infer: engine_kv_buffer_free of a buffer engine_kv_buffer did "
			"not make\n");
		abort();
	}
	pthread_mutex_lock(&kv_bufs.mu);
	bool keep = kv_bufs.n < KV_BUF_KEEP && kv_bufs.bytes + hd->cap <= KV_BUF_KEEP_BYTES;
	if (keep) {
		kv_bufs.kept[kv_bufs.n++] = h;
		kv_bufs.bytes += hd->cap;
	}
	pthread_mutex_unlock(&kv_bufs.mu);
	if (keep)
		return;
	hd->magic = 0;
	free(h);
}

void engine_set_kv_layer(struct engine *e, void (*fn)(void *, struct engine_kv_out *), void *ctx)
{
	e->cfg.kv_layer = fn;
	e->cfg.kv_ctx = ctx;
}

void engine_kv_layout(const struct engine *e, struct engine_kv_layout *l)
{
	const struct model_info *mi = &e->model->info;
	l->fingerprint = e->fingerprint;
	l->n_layers = mi->n_layers;
	l->n_kv_heads = mi->n_kv_heads;
	l->head_dim = mi->head_dim;
	l->dtype = e->ops->kv_dtype ? e->ops->kv_dtype(e->be) : 0;
	l->dtype_bytes = (int)kpi_kv_dtype_bytes((uint32_t)l->dtype);
	l->block_size = e->cfg.block_size;
	l->vocab_size = mi->vocab_size;
	l->context_length = mi->context_length;
}

static void push_event(struct engine *e, enum engine_event_kind kind, const struct seq *s, int32_t token,
		       bool first, enum kpi_finish_reason reason)
{
	/* ev_cap >= 4 * max_seqs + 2 * live: a step cannot overflow it */
	e->ev[e->ev_n++] = (struct engine_event){ kind, s->id, token, first, reason, s->n_out,
						  s->export_kv ? s->rng : 0 };
}

/* A static batch member left: once the last one has, its padding blocks
 * go back to the pool. */
static void static_member_done(struct engine *e)
{
	if (--e->static_open == 0)
		kv_table_release(&e->kv, &e->pad_bt);
}

/* Removes s from its list, frees its blocks and reports it finished. */
static void seq_finish(struct engine *e, struct seq *s, enum kpi_finish_reason reason)
{
	kv_table_release(&e->kv, &s->bt);
	list_remove(s->state == SEQ_RUNNING ? &e->running : &e->waiting, s);
	if (s->static_member)
		static_member_done(e);
	push_event(e, ENGINE_EV_FINISHED, s, -1, false, reason);
	KPI_REQUEST_FINISHED(s->id, s->n_out, (int)reason);
	e->live--;
	seq_free(s);
}

void engine_finish(struct engine *e, uint64_t id, enum kpi_finish_reason reason)
{
	struct seq_list *lists[2] = { &e->running, &e->waiting };
	for (int i = 0; i < 2; i++)
		for (struct seq *s = lists[i]->head; s; s = s->next) {
			if (s->id != id)
				continue;
			kv_table_release(&e->kv, &s->bt);
			list_remove(lists[i], s);
			if (s->static_member)
				static_member_done(e);
			if (e->fin_n == e->fin_cap) {
				e->fin_cap *= 2;
				e->fin = realloc(e->fin, sizeof(*e->fin) * e->fin_cap);
			}
			e->fin[e->fin_n++] = (struct engine_event){ ENGINE_EV_FINISHED, s->id, -1, false,
								    reason, s->n_out, 0 };
			KPI_REQUEST_FINISHED(s->id, s->n_out, (int)reason);
			seq_free(s);
			return;
		}
}

bool engine_has_work(const struct engine *e)
{
	return e->running.n > 0 || e->waiting.n > 0 || e->fin_n > 0 || e->ev_out < e->ev_n;
}

int engine_events_max(const struct engine *e)
{
	return 4 * e->cfg.max_seqs + e->fin_n + 16;
}

void engine_stats(const struct engine *e, struct engine_stats *st)
{
	*st = e->st;
	st->running = e->running.n;
	st->waiting = e->waiting.n;
	st->kv_blocks_total = e->kv.n_blocks;
	st->kv_blocks_free = e->kv.n_free;
	st->kv_blocks_used = e->kv.n_blocks - e->kv.n_free;
	st->weight_type = e->model->info.weight_type;
	st->kernels = e->kernels;
	st->weight_bytes = e->weight_bytes;
	st->kv_blocks_cached = e->kv.n_cached;
}

/* ---- scheduler --------------------------------------------------------- */

/* Preemption by recompute: drop the sequence's blocks and put it back at
 * the head of the queue. Its prompt and the tokens it already produced stay;
 * when readmitted it prefills all of them again and continues, so greedy
 * output is unchanged (the kernels give bit-identical results whatever the
 * batch). */
static void seq_preempt(struct engine *e, struct seq *s)
{
	kv_table_release(&e->kv, &s->bt);
	s->n_cached = 0;
	s->n_keyed = 0;
	s->key = 0;
	list_remove(&e->running, s);
	s->state = SEQ_WAITING;
	s->preempted_at = e->st.steps + 1;
	list_push_head(&e->waiting, s);
	e->st.preemptions++;
	push_event(e, ENGINE_EV_PREEMPTED, s, -1, false, KPI_FINISH_NONE);
	KPI_REQUEST_PREEMPTED(s->id);
}

static int seq_known(const struct seq *s)
{
	return s->n_prompt + s->n_out;
}

static void batch_add(struct engine *e, int *n, int *budget, struct seq *s, int take)
{
	e->b_seq[*n] = s;
	e->b_take[*n] = take;
	(*n)++;
	*budget -= take;
}

/* ---- prefix cache and KV transfer ------------------------------------- */

/* Takes the cached blocks that begin s's tokens, never the block of its last
 * known token (the step must compute that one to sample). Returns the
 * positions they cover. */
static int prefix_take(struct engine *e, struct seq *s)
{
	const int bs = e->cfg.block_size;
	int max_blocks = (seq_known(s) - 1) / bs, j = 0;
	uint64_t key = 0;
	for (; j < max_blocks; j++) {
		uint64_t k = kv_block_key(key, s->tokens + (size_t)j * bs, bs);
		int32_t id = kv_cache_find(&e->kv, k);
		if (id < 0)
			break;
		kv_cache_take(&e->kv, &s->bt, id);
		key = k;
	}
	s->n_keyed = j;
	s->key = key;
	s->n_cached = j * bs;
	return s->n_cached;
}

/* Gives the full blocks s has computed since the last call their keys. */
static void prefix_insert(struct engine *e, struct seq *s)
{
	const int bs = e->cfg.block_size;
	while ((s->n_keyed + 1) * bs <= s->n_cached) {
		s->key = kv_block_key(s->key, s->tokens + (size_t)s->n_keyed * bs, bs);
		kv_cache_insert(&e->kv, s->bt.ids[s->n_keyed], s->key);
		s->n_keyed++;
	}
}

/* Bytes of one layer's K (or V) for n positions. */
static size_t kv_half_bytes(const struct engine *e, int n)
{
	const struct model_info *mi = &e->model->info;
	int db = (int)kpi_kv_dtype_bytes((uint32_t)e->ops->kv_dtype(e->be));
	return (size_t)mi->n_kv_heads * n * mi->head_dim * db;
}

/* The blocks a kv_layer out's iov points into, each with one reference of
 * its own: a finished request's blocks cannot be handed to another request
 * (nor a cached one evicted) while the socket still reads them. */
struct engine_kv_pin {
	int n;
	int32_t ids[];
};

void engine_kv_unpin(struct engine *e, struct engine_kv_pin *pin)
{
	if (!pin)
		return;
	for (int i = 0; i < pin->n; i++)
		kv_block_unref(&e->kv, pin->ids[i]);
	free(pin);
}

struct engine_kv_in *engine_kv_reserve(struct engine *e, uint64_t id, int n_tokens, char *err,
				       size_t errlen)
{
	const int bs = e->cfg.block_size, nl = e->model->info.n_layers, nkv = e->model->info.n_kv_heads;
	if (!e->ops->kv_rows) {
		snprintf(err, errlen, "the %s backend's KV pool is not in host memory", e->ops->name);
		return NULL;
	}
	for (struct kv_hold *h = e->holds; h; h = h->next)
		if (h->id == id) {
			snprintf(err, errlen, "request %llu holds blocks already", (unsigned long long)id);
			return NULL;
		}
	int nb = (n_tokens + bs - 1) / bs;
	if (n_tokens <= 0 || nb > e->blocks_per_seq || nb > e->kv.n_free) {
		snprintf(err, errlen, "%d blocks for %d positions; %d free", nb, n_tokens, e->kv.n_free);
		return NULL;
	}
	struct kv_hold *h = calloc(1, sizeof(*h));
	struct engine_kv_in *in = malloc(sizeof(*in) + sizeof(void *) * (size_t)nl * nb * 2 * nkv);
	if (h)
		h->bt.ids = malloc(sizeof(int32_t) * (size_t)nb);
	if (!h || !h->bt.ids || !in) {
		if (h)
			free(h->bt.ids);
		free(h);
		free(in);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	h->id = id;
	h->bt.cap = nb;
	kv_table_reserve(&e->kv, &h->bt, n_tokens, bs); /* fits: checked above */
	h->next = e->holds;
	e->holds = h;
	*in = (struct engine_kv_in){ id, n_tokens, nb, bs, nl, nkv };
	void **r = in->rows;
	for (int l = 0; l < nl; l++)
		for (int b = 0; b < nb; b++)
			for (int v = 0; v < 2; v++)
				for (int g = 0; g < nkv; g++)
					*r++ = e->ops->kv_rows(e->be, l, h->bt.ids[b], g, v);
	return in;
}

void engine_kv_release(struct engine *e, uint64_t id)
{
	hold_free(e, hold_take(e, id));
}

/* XXH3-64 of one layer's block's first slots rows, K of every head then V:
 * a chunk's digest in the KV stream (abi/kpi_kv_wire.h). */
static uint64_t block_digest(struct engine *e, int layer, int32_t blk, int slots)
{
	size_t len = (size_t)slots * (kv_half_bytes(e, 1) / e->model->info.n_kv_heads);
	XXH3_state_t st;
	XXH3_64bits_reset(&st);
	for (int v = 0; v < 2; v++)
		for (int g = 0; g < e->model->info.n_kv_heads; g++)
			XXH3_64bits_update(&st, e->ops->kv_rows(e->be, layer, blk, g, v), len);
	return XXH3_64bits_digest(&st);
}

/* A block's digest: the one kept since the forward pass filled it
 * (config.kv_digests), else taken now. */
static uint64_t chunk_digest(struct engine *e, int layer, int32_t blk, int slots)
{
	size_t at = (size_t)layer * e->kv.n_blocks + blk;
	if (e->kv_digest && slots == e->cfg.block_size && e->kv_digest_gen[at] == e->kv.gen[blk])
		return e->kv_digest[at];
	return block_digest(e, layer, blk, slots);
}

/* The step just wrote layer's K/V: every block it filled gets its digest,
 * read while the rows are still in cache (config.kv_digests). */
static void keep_digests(struct engine *e, int layer)
{
	const int bs = e->cfg.block_size;
	for (int i = 0; i < e->b_n; i++) {
		struct seq *s = e->b_seq[i];
		int p0 = e->b_pos0[i], p1 = p0 + e->b_take[i];
		for (int b = p0 / bs; b < p1 / bs; b++) { /* its last slot written now */
			int32_t blk = s->bt.ids[b];
			size_t at = (size_t)layer * e->kv.n_blocks + blk;
			e->kv_digest[at] = block_digest(e, layer, blk, bs);
			e->kv_digest_gen[at] = e->kv.gen[blk];
		}
	}
}

/* out's positions where they stand in the pool, in the wire's order
 * (abi/kpi_kv_wire.h): block by block, K then V, head by head, a run of
 * rows each, a run that follows the one before in memory joining it (a
 * full block's heads, on the CPU backend); each block's digest; the blocks
 * pinned. False when out of memory. */
static bool kv_out_runs(struct engine *e, struct seq *s, struct engine_kv_out *out)
{
	const int bs = e->cfg.block_size, n_kv = e->model->info.n_kv_heads;
	const int b0 = out->first_pos / bs, b1 = (out->first_pos + out->n_pos + bs - 1) / bs;
	size_t row = kv_half_bytes(e, 1) / n_kv; /* one position of one head */
	struct engine_kv_pin *pin = malloc(sizeof(*pin) + sizeof(int32_t) * (size_t)(b1 - b0));
	struct iovec *iov = malloc(sizeof(*iov) * 2 * (size_t)n_kv * (size_t)(b1 - b0));
	uint64_t *dig = malloc(sizeof(uint64_t) * (size_t)(b1 - b0));
	if (!pin || !iov || !dig) {
		free(pin);
		free(iov);
		free(dig);
		return false;
	}
	int k = 0, end = out->first_pos + out->n_pos;
	for (int b = b0; b < b1; b++) {
		int slots = end - b * bs < bs ? end - b * bs : bs;
		size_t len = (size_t)slots * row;
		for (int v = 0; v < 2; v++)
			for (int g = 0; g < n_kv; g++) {
				char *at = e->ops->kv_rows(e->be, out->layer, s->bt.ids[b], g, v);
				if (k && (char *)iov[k - 1].iov_base + iov[k - 1].iov_len == at)
					iov[k - 1].iov_len += len;
				else
					iov[k++] = (struct iovec){ at, len };
			}
		dig[b - b0] = chunk_digest(e, out->layer, s->bt.ids[b], slots);
	}
	pin->n = b1 - b0;
	for (int b = b0; b < b1; b++) {
		pin->ids[b - b0] = s->bt.ids[b];
		kv_block_ref(&e->kv, s->bt.ids[b]);
	}
	out->iov = iov;
	out->n_iov = k;
	out->pin = pin;
	out->digests = dig;
	out->n_chunks = b1 - b0;
	return true;
}

/* Sends one layer's K/V of positions [p0, p1) of s (p0 a block boundary):
 * from where it stands in the pool when the backend's pool is host memory,
 * else copied out in the same order. */
static void kv_export_range(struct engine *e, struct seq *s, int layer, int p0, int p1)
{
	const int bs = e->cfg.block_size, hd = e->model->info.head_dim, n = p1 - p0;
	size_t half = kv_half_bytes(e, n);
	struct engine_kv_out out = { .id = s->id, .layer = layer, .first_pos = p0, .n_pos = n,
				     .len = 2 * half };
	if (e->ops->kv_rows && !e->cfg.kv_out_copy && kv_out_runs(e, s, &out)) {
		e->cfg.kv_layer(e->cfg.kv_ctx, &out);
		return;
	}
	int chunks = (n + bs - 1) / bs;
	char *buf = engine_kv_buffer(2 * half);
	uint64_t *dig = malloc(sizeof(uint64_t) * (size_t)(chunks ? chunks : 1));
	if (buf && dig)
		for (int p = p0; p < p1; p += bs) { /* a block: K of every head, then V */
			int slots = p1 - p < bs ? p1 - p : bs;
			char *k = buf + 2 * kv_half_bytes(e, p - p0);
			e->ops->kv_read(e->be, layer, s->bt.ids[p / bs], 0, slots, k,
					k + kv_half_bytes(e, slots), (size_t)slots * hd);
			dig[(p - p0) / bs] = XXH3_64bits(k, 2 * kv_half_bytes(e, slots));
		}
	if (!buf || !dig) { /* no memory for it: the server fails that transfer */
		engine_kv_buffer_free(buf);
		free(dig);
		buf = NULL;
		dig = NULL;
		out.len = 0;
	}
	out.data = buf;
	out.digests = dig;
	out.n_chunks = dig ? chunks : 0;
	e->cfg.kv_layer(e->cfg.kv_ctx, &out);
}

/* backend_batch.layer_done: the layer is computed for the whole step, so the
 * blocks it filled get their digests (config.kv_digests), and the
 * prefill-only sequences finishing their prefill in it send it now (the
 * positions the cache did not already send at admission). */
static void kv_export_layer(void *ctx, int layer)
{
	struct engine *e = ctx;
	if (e->kv_digest)
		keep_digests(e, layer);
	for (int i = 0; i < e->n_export; i++)
		kv_export_range(e, e->b_export[i], layer, e->b_export[i]->n_exported,
				e->b_export[i]->n_prompt);
}

/* Copies an imported prompt's KV into s's blocks (reserved for n_prompt). */
static void kv_import(struct engine *e, struct seq *s)
{
	const int bs = e->cfg.block_size, hd = e->model->info.head_dim, n = s->n_prompt;
	size_t half = kv_half_bytes(e, n), row = kv_half_bytes(e, 1) / e->model->info.n_kv_heads;
	const char *data = s->import->data;
	for (int l = 0; l < e->model->info.n_layers; l++) {
		const char *k = data + 2 * half * l, *v = k + half;
		for (int j = 0; j * bs < n; j++) {
			int slots = n - j * bs < bs ? n - j * bs : bs;
			e->ops->kv_write(e->be, l, s->bt.ids[j], 0, slots, k + (size_t)j * bs * row,
					 v + (size_t)j * bs * row, (size_t)n * hd);
		}
	}
}

/* Admits a sequence whose KV was computed elsewhere: its blocks, its KV, its
 * first token; no compute this step. False when the blocks are not there yet. */
static bool admit_import(struct engine *e, struct seq *s)
{
	const int bs = e->cfg.block_size;
	if (kv_blocks_needed(&s->bt, s->n_prompt, bs) > e->kv.n_free)
		return false;
	kv_table_reserve(&e->kv, &s->bt, s->n_prompt, bs);
	struct engine_kv_import *kv = s->import;
	if (kv->data)
		kv_import(e, s); /* else received into its blocks already */
	s->n_cached = s->hwm = s->n_prompt;
	s->tokens[s->n_prompt] = kv->first_token;
	s->n_out = 1;
	s->rng = kv->sampler_state;
	engine_kv_buffer_free(kv->data);
	free(kv);
	s->import = NULL;
	list_remove(&e->waiting, s);
	s->state = SEQ_RUNNING;
	list_insert_by_arrival(&e->running, s);
	push_event(e, ENGINE_EV_SCHEDULED, s, -1, false, KPI_FINISH_NONE);
	KPI_REQUEST_SCHEDULED(s->id);
	int32_t tok = s->tokens[s->n_prompt];
	e->st.generation_tokens++;
	push_event(e, ENGINE_EV_TOKEN, s, tok, true, KPI_FINISH_NONE);
	KPI_REQUEST_FIRST_TOKEN(s->id);
	if (e->kv.hash)
		prefix_insert(e, s);
	e->imports_admitted++;
	if (tok == e->model->info.eos_id && !s->sp.ignore_eos)
		seq_finish(e, s, KPI_FINISH_STOP);
	else if (s->n_out >= s->max_out || seq_known(s) >= e->model->info.context_length)
		seq_finish(e, s, KPI_FINISH_LENGTH);
	return true;
}

/* Padding rows this step: one per finished member of a running static batch. */
static int static_pad_rows(const struct engine *e)
{
	return e->pad_bt.n ? e->static_size - e->static_open : 0;
}

/* Decides this step's batch: running decodes first (oldest first, each may
 * preempt the newest running sequence for a block), then running chunked
 * prefills, then admissions from the queue head while slots, tokens and
 * blocks allow. Returns the number of sequences. */
static int schedule(struct engine *e)
{
	const int bs = e->cfg.block_size;
	int n = 0, budget = e->cfg.max_batched_tokens - static_pad_rows(e);

	/* 1. decodes: one token each */
	for (struct seq *s = e->running.head, *next; s && budget > 0; s = next) {
		next = s->next;
		if (seq_known(s) - s->n_cached != 1)
			continue;
		bool preempted_self = false;
		while (kv_blocks_needed(&s->bt, s->n_cached + 1, bs) > e->kv.n_free) {
			struct seq *victim = e->running.tail;
			if (victim == next)
				next = next->next;
			seq_preempt(e, victim);
			if (victim == s) {
				preempted_self = true;
				break;
			}
		}
		if (preempted_self)
			break; /* s was the newest: nothing after it is running */
		kv_table_reserve(&e->kv, &s->bt, s->n_cached + 1, bs);
		batch_add(e, &n, &budget, s, 1);
	}

	/* 2. running prefills (new or recomputing), as much as fits */
	for (struct seq *s = e->running.head; s && budget > 0; s = s->next) {
		int need = seq_known(s) - s->n_cached;
		if (need <= 1)
			continue;
		int take = need < budget ? need : budget;
		int fit = (s->bt.n + e->kv.n_free) * bs - s->n_cached;
		take = take < fit ? take : fit;
		if (take <= 0)
			continue;
		kv_table_reserve(&e->kv, &s->bt, s->n_cached + take, bs);
		batch_add(e, &n, &budget, s, take);
	}

	/* 3. admissions */
	if (e->cfg.batching == ENGINE_BATCH_STATIC && e->static_open == 0 && e->running.n == 0) {
		int k = 0;
		for (struct seq *s = e->waiting.head; s && k < e->cfg.max_seqs; s = s->next, k++)
			s->static_member = true;
		e->static_open = e->static_size = k;
		/* no blocks for padding: the batch runs unpadded */
		if (k && kv_table_reserve(&e->kv, &e->pad_bt, k, bs) != 0)
			kv_table_release(&e->kv, &e->pad_bt);
	}
	while (e->waiting.head && budget > 0 && e->running.n < e->cfg.max_seqs) {
		struct seq *s = e->waiting.head;
		if (e->cfg.batching == ENGINE_BATCH_STATIC && !s->static_member)
			break;
		if (s->preempted_at == e->st.steps + 1)
			break; /* just preempted for lack of blocks: do not thrash */
		if (s->import) {
			if (!admit_import(e, s))
				break;
			continue;
		}
		int hit = e->kv.hash ? prefix_take(e, s) : 0;
		int need = seq_known(s) - s->n_cached;
		int take = need < budget ? need : budget;
		if (kv_blocks_needed(&s->bt, s->n_cached + take, bs) > e->kv.n_free) {
			kv_table_release(&e->kv, &s->bt); /* the cached blocks wait in the cache */
			s->n_cached = s->n_keyed = 0;
			s->key = 0;
			break;
		}
		if (e->kv.hash) {
			e->st.prefix_queries += (uint64_t)seq_known(s);
			e->st.prefix_hits += (uint64_t)hit;
			if (hit)
				KPI_REQUEST_PREFIX_HIT(s->id, hit);
		}
		kv_table_reserve(&e->kv, &s->bt, s->n_cached + take, bs);
		if (s->export_kv && hit && !s->n_exported) {
			/* the cached prefix is final: it leaves now, ahead of any compute */
			for (int l = 0; l < e->model->info.n_layers; l++)
				kv_export_range(e, s, l, 0, hit);
			s->n_exported = hit;
		}
		list_remove(&e->waiting, s);
		s->state = SEQ_RUNNING;
		list_insert_by_arrival(&e->running, s);
		push_event(e, ENGINE_EV_SCHEDULED, s, -1, false, KPI_FINISH_NONE);
		KPI_REQUEST_SCHEDULED(s->id);
		batch_add(e, &n, &budget, s, take);
	}
	/* then imports whose KV is in blocks they hold (engine_kv_reserve) need
	 * nothing more: admitted even behind a head waiting for blocks, which
	 * they would otherwise keep from it for good */
	for (struct seq *s = e->waiting.head, *next; s && e->running.n < e->cfg.max_seqs &&
	     e->cfg.batching != ENGINE_BATCH_STATIC; s = next) {
		next = s->next;
		if (s->import && !s->import->data && s->preempted_at != e->st.steps + 1)
			admit_import(e, s);
	}
	return n;
}

/* Runs one step: schedule, forward, sample, finish. */
static void step_run(struct engine *e)
{
	e->imports_admitted = 0;
	int n = schedule(e);
	if (n == 0 && e->running.n > 0 && !e->imports_admitted) {
		/* every running sequence is mid-prefill and the pool is dry: free the
		 * newest so the others progress */
		seq_preempt(e, e->running.tail);
		n = schedule(e);
	}
	if (n == 0)
		return;

	int T = 0, rows = 0, prefill = 0, decodes = 0;
	e->n_export = 0;
	for (int i = 0; i < n; i++) {
		struct seq *s = e->b_seq[i];
		int take = e->b_take[i];
		if (s->export_kv && s->n_cached + take == seq_known(s))
			e->b_export[e->n_export++] = s;
		e->b_start[i] = T;
		e->b_pos0[i] = s->n_cached;
		e->b_tables[i] = s->bt.ids;
		memcpy(e->b_tokens + T, s->tokens + s->n_cached, sizeof(int32_t) * take);
		T += take;
		e->b_lrow[i] = s->n_cached + take == seq_known(s) ? rows++ : -1;
		if (take == 1 && s->n_cached == seq_known(s) - 1 && s->n_out > 0)
			decodes++;
		else
			prefill += take;
	}
	int pad = static_pad_rows(e);
	for (int j = 0; j < pad; j++) {
		int i = n + j;
		e->b_start[i] = T;
		e->b_pos0[i] = j;
		e->b_tables[i] = e->pad_bt.ids;
		e->b_lrow[i] = -1;
		e->b_tokens[T++] = e->model->info.bos_id;
	}
	e->b_start[n + pad] = T;

	e->b_n = n;
	e->st.last_step_tokens = T;
	e->st.last_step_seqs = n + pad;
	uint64_t step = ++e->st.steps;
	KPI_STEP_BEGIN(step, prefill, decodes, e->kv.n_blocks - e->kv.n_free, e->kv.n_free);
	if (KPI_STEP_SEQS_ENABLED()) {
		/* membership and token counts: how the agent splits the step's GPU time */
		for (int i = 0; i < n; i++) {
			e->b_probe[i].id = e->b_seq[i]->id;
			e->b_probe[i].n_tokens = e->b_take[i];
			e->b_probe[i].is_prefill = e->b_seq[i]->n_out == 0;
		}
		KPI_STEP_SEQS(step, n, e->b_probe);
	}
	struct backend_batch batch = { n + pad, T, e->b_tokens, e->b_start, e->b_pos0, e->b_tables, e->b_lrow,
				       e->logits, e->n_export || e->kv_digest ? kv_export_layer : NULL, e };
	char err[256];
	kpi_cupti_step_begin(step);
	int rc = e->ops->forward(e->be, &batch, err, sizeof(err));
	kpi_cupti_step_end();
	KPI_STEP_END(step);
	if (rc) {
		fprintf(stderr, "kpi-infer: forward pass failed: %s\n", err);
		for (int i = 0; i < n; i++)
			seq_finish(e, e->b_seq[i], KPI_FINISH_ERROR);
		return;
	}

	const int vocab = e->model->info.vocab_size, ctx = e->model->info.context_length;
	for (int i = 0; i < n; i++) {
		struct seq *s = e->b_seq[i];
		s->n_cached += e->b_take[i];
		if (e->kv.hash)
			prefix_insert(e, s);
		if (s->n_cached > s->hwm) {
			int p_new = (s->n_cached < s->n_prompt ? s->n_cached : s->n_prompt) -
				    (s->hwm < s->n_prompt ? s->hwm : s->n_prompt);
			e->st.prompt_tokens += p_new > 0 ? p_new : 0;
			s->hwm = s->n_cached;
		}
		if (e->b_lrow[i] < 0)
			continue;
		int32_t tok = sample_token(e->logits + (size_t)e->b_lrow[i] * vocab, vocab, &s->sp, &s->rng, &e->ss);
		s->tokens[seq_known(s)] = tok;
		s->n_out++;
		e->st.generation_tokens++;
		bool first = s->n_out == 1;
		push_event(e, ENGINE_EV_TOKEN, s, tok, first, KPI_FINISH_NONE);
		if (first)
			KPI_REQUEST_FIRST_TOKEN(s->id);
		if (tok == e->model->info.eos_id && !s->sp.ignore_eos)
			seq_finish(e, s, KPI_FINISH_STOP);
		else if (s->n_out >= s->max_out || seq_known(s) >= ctx)
			seq_finish(e, s, KPI_FINISH_LENGTH);
	}
}

int engine_step(struct engine *e, struct engine_event *events, int max)
{
	if (e->ev_out == e->ev_n) {
		e->ev_n = e->ev_out = 0;
		/* finishes requested since the last step come first */
		for (int i = 0; i < e->fin_n; i++) {
			e->ev[e->ev_n++] = e->fin[i];
			e->live--;
		}
		e->fin_n = 0;
		step_run(e);
	}
	int k = e->ev_n - e->ev_out < max ? e->ev_n - e->ev_out : max;
	memcpy(events, e->ev + e->ev_out, sizeof(*events) * (k > 0 ? k : 0));
	e->ev_out += k > 0 ? k : 0;
	return k;
}
