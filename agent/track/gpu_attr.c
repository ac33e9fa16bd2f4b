/* gpu_attr.c - per-step GPU busy time and its token-share split across the
 * step's requests; incremental, so records that arrive late still add up. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include "gpu_attr.h"
#include "step_seqs.h"
#include "abi/kpi_gpu_split.h"

/* Key of both tables (uthash hashes its bytes: padding zeroed). */
struct ent_key {
	uint32_t pid;
	uint32_t _pad;
	uint64_t id;            /* step id, or request id */
};

struct step_ent {
	UT_hash_handle hh;
	struct ent_key key;         /* (pid, step) */
	struct step_seqs list;      /* the step's sequences */
	struct kpi_gpu_span *spans;
	uint32_t n_spans, cap_spans;
	uint64_t busy;              /* union of spans, at the last settle */
	uint64_t busy_split;        /* part of busy already split across requests */
	bool changed;               /* spans or list changed since the last settle */
	bool have_busy;             /* busy was computed at least once */
	bool dirty;                 /* busy not yet written */
	uint64_t touched;
};

struct req_ent {
	UT_hash_handle hh;
	struct ent_key key;         /* (pid, request id) */
	uint64_t prefill_ns, decode_ns;
	bool dirty;
	uint64_t touched;
};

/* uthash keeps each table's entries in insertion order: settle, drain and
 * forget walk them oldest first, and may delete the one they stand on. */
struct gpu_attr {
	struct step_ent *steps;
	struct req_ent *reqs;
	uint32_t *tok;              /* split scratch */
	uint64_t *share;
	uint32_t cap_scratch;
	struct gpu_attr_stats st;
};

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n, size);
	if (!p)
		abort();
	return p;
}

static void *xrealloc(void *p, size_t size)
{
	p = realloc(p, size);
	if (!p)
		abort();
	return p;
}

struct gpu_attr *gpu_attr_new(void)
{
	return xcalloc(1, sizeof(struct gpu_attr));
}

/* ---- entries ---------------------------------------------------------- */

static struct step_ent *step_get(struct gpu_attr *a, uint32_t pid, uint64_t step)
{
	struct ent_key k = { .pid = pid, .id = step };
	struct step_ent *s;

	HASH_FIND(hh, a->steps, &k, sizeof(k), s);
	if (s)
		return s;
	s = xcalloc(1, sizeof(*s));
	s->key = k;
	HASH_ADD(hh, a->steps, key, sizeof(s->key), s);
	return s;
}

static void step_del(struct gpu_attr *a, struct step_ent *s)
{
	HASH_DEL(a->steps, s);
	free(s->list.e);
	free(s->spans);
	free(s);
}

static struct req_ent *req_get(struct gpu_attr *a, uint32_t pid, uint64_t id)
{
	struct ent_key k = { .pid = pid, .id = id };
	struct req_ent *r;

	HASH_FIND(hh, a->reqs, &k, sizeof(k), r);
	if (r)
		return r;
	r = xcalloc(1, sizeof(*r));
	r->key = k;
	HASH_ADD(hh, a->reqs, key, sizeof(r->key), r);
	return r;
}

static void req_del(struct gpu_attr *a, struct req_ent *r)
{
	HASH_DEL(a->reqs, r);
	free(r);
}

void gpu_attr_free(struct gpu_attr *a)
{
	struct step_ent *s, *stmp;
	struct req_ent *r, *rtmp;

	if (!a)
		return;
	HASH_ITER(hh, a->steps, s, stmp)
		step_del(a, s);
	HASH_ITER(hh, a->reqs, r, rtmp)
		req_del(a, r);
	free(a->tok);
	free(a->share);
	free(a);
}

/* ---- input ------------------------------------------------------------ */

void gpu_attr_step_seqs(struct gpu_attr *a, uint32_t pid, uint64_t step, uint32_t n_total,
			uint32_t first, const struct kpi_step_seq *e, uint32_t n, uint64_t now)
{
	if (step == 0)
		return;
	struct step_ent *s = step_get(a, pid, step);
	s->touched = now;
	if (step_seqs_add(&s->list, n_total, first, e, n)) {
		s->changed = true; /* the list is complete: records seen so far can be split */
		a->st.step_lists++;
		a->st.seq_entries += s->list.n;
	}
}

void gpu_attr_record(struct gpu_attr *a, uint32_t pid, const struct kpi_gpu_rec *r, uint64_t now)
{
	if (r->step == 0) {
		a->st.no_step++;
		return;
	}
	a->st.records++;
	struct step_ent *s = step_get(a, pid, r->step);
	s->touched = now;
	if (s->n_spans == s->cap_spans) {
		s->cap_spans = s->cap_spans ? 2 * s->cap_spans : 16;
		s->spans = xrealloc(s->spans, s->cap_spans * sizeof(*s->spans));
	}
	s->spans[s->n_spans++] = (struct kpi_gpu_span){ r->start_ns, r->end_ns };
	s->changed = true;
}

/* ---- settle ----------------------------------------------------------- */

/* Splits delta ns of step s across its sequences by token share. */
static void split(struct gpu_attr *a, struct step_ent *s, uint64_t delta, uint64_t now)
{
	uint32_t n = s->list.n;
	if (n > a->cap_scratch) {
		a->tok = xrealloc(a->tok, n * sizeof(*a->tok));
		a->share = xrealloc(a->share, n * sizeof(*a->share));
		a->cap_scratch = n;
	}
	for (uint32_t i = 0; i < n; i++)
		a->tok[i] = s->list.e[i].n_tokens > 0 ? (uint32_t)s->list.e[i].n_tokens : 0;
	kpi_gpu_split_by_tokens(delta, a->tok, (int)n, a->share);
	for (uint32_t i = 0; i < n; i++) {
		struct req_ent *r = req_get(a, s->key.pid, s->list.e[i].id);
		if (s->list.e[i].is_prefill)
			r->prefill_ns += a->share[i];
		else
			r->decode_ns += a->share[i];
		r->dirty = true;
		r->touched = now;
	}
	a->st.attributed_ns += delta;
}

void gpu_attr_settle(struct gpu_attr *a)
{
	struct step_ent *s, *tmp;

	HASH_ITER(hh, a->steps, s, tmp) {
		if (!s->changed)
			continue;
		s->changed = false;
		uint64_t busy = kpi_gpu_busy_ns(s->spans, (int)s->n_spans);
		if (s->n_spans && (busy != s->busy || !s->have_busy)) {
			s->busy = busy;
			s->have_busy = true;
			s->dirty = true;
		}
		/* the union only grows as records arrive, so each delta is >= 0 */
		if (step_seqs_complete(&s->list) && busy > s->busy_split) {
			split(a, s, busy - s->busy_split, s->touched);
			s->busy_split = busy;
		}
	}
}

/* ---- output ----------------------------------------------------------- */

void gpu_attr_drain(struct gpu_attr *a, uint64_t now,
		    bool (*step_fn)(void *ctx, const struct gpu_attr_step *s),
		    bool (*req_fn)(void *ctx, const struct gpu_attr_req *r), void *ctx)
{
	struct step_ent *s, *stmp;
	struct req_ent *r, *rtmp;

	HASH_ITER(hh, a->steps, s, stmp) {
		if (s->dirty && s->n_spans) {
			struct gpu_attr_step o = { s->key.pid, s->key.id, s->busy };
			if (step_fn(ctx, &o))
				s->dirty = false;
		}
		if (now - s->touched > GPU_ATTR_KEEP_NS && !s->changed) {
			if (s->dirty && s->n_spans)
				a->st.unwritten++;
			if (s->busy > s->busy_split)
				a->st.unattributed_ns += s->busy - s->busy_split;
			step_del(a, s);
		}
	}
	HASH_ITER(hh, a->reqs, r, rtmp) {
		if (r->dirty) {
			struct gpu_attr_req o = { r->key.pid, r->key.id, r->prefill_ns, r->decode_ns };
			if (req_fn(ctx, &o))
				r->dirty = false;
		}
		if (now - r->touched > GPU_ATTR_KEEP_NS) {
			if (r->dirty)
				a->st.unwritten++;
			req_del(a, r);
		}
	}
}

void gpu_attr_forget_pid(struct gpu_attr *a, uint32_t pid)
{
	struct step_ent *s, *stmp;
	struct req_ent *r, *rtmp;

	HASH_ITER(hh, a->steps, s, stmp)
		if (s->key.pid == pid)
			step_del(a, s);
	HASH_ITER(hh, a->reqs, r, rtmp)
		if (r->key.pid == pid)
			req_del(a, r);
}

void gpu_attr_stats(const struct gpu_attr *a, struct gpu_attr_stats *out)
{
	*out = a->st;
}

/* ---- into the store ----------------------------------------------------------- */

struct write_ctx {
	struct gpu_store *s;
	int rc;
};

static bool write_step(void *ctx, const struct gpu_attr_step *x)
{
	struct write_ctx *c = ctx;
	int r = gpu_store_step_busy(c->s, x->pid, x->step, x->busy_ns);
	if (r < 0)
		c->rc = -1;
	return r > 0; /* 0: the step's row is not written yet */
}

static bool write_req(void *ctx, const struct gpu_attr_req *x)
{
	struct write_ctx *c = ctx;
	int r = gpu_store_request_gpu(c->s, x->pid, x->id, x->prefill_ns, x->decode_ns);
	if (r < 0)
		c->rc = -1;
	return r > 0; /* 0: the request is still in flight */
}

int gpu_attr_write(struct gpu_attr *a, struct gpu_store *store, uint64_t now,
		   const struct gpu_store_row *rows, size_t n, char *err, size_t errlen)
{
	struct write_ctx c = { store, 0 };
	const char *what = "BEGIN";

	if (gpu_store_begin(store))
		goto fail;
	what = "insert into gpu_kernels";
	for (size_t i = 0; i < n; i++)
		if (gpu_store_kernel(store, &rows[i]))
			goto fail;
	what = "update the GPU columns of steps and requests";
	gpu_attr_drain(a, now, write_step, write_req, &c);
	if (c.rc)
		goto fail;
	what = "COMMIT";
	if (gpu_store_commit(store))
		goto fail;
	return 0;
fail:
	snprintf(err, errlen, "writing GPU records failed (%s: %s); %zu kernel rows kept for the "
		 "next flush", what, gpu_store_errmsg(store), n);
	gpu_store_rollback(store);
	return -1;
}
