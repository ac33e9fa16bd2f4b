/* cost_attr.c - each sample interval's time and energy to the batch steps in it
 * (by their time in it), each step's share to its requests (by weighted tokens). */
#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include "cost_attr.h"
#include "step_seqs.h"
#include "abi/kpi_gpu_split.h"

struct key {
	uint32_t pid, pad;      /* hashed as bytes: pad stays 0 */
	uint64_t id;
};

struct step {
	struct key k;
	uint64_t t_probe;           /* step__seqs: the step began about then */
	uint64_t t_start, t_end;    /* from its record; t_end 0: still open */
	struct step_seqs list;
	UT_hash_handle hh;
};

struct req {
	struct key k;
	uint64_t machine_ns, energy_uj;
	uint64_t t_done;            /* 0: no row yet */
	uint64_t touched;
	bool http;                  /* keyed COST_HTTP_KEY: its row by these two */
	int64_t t_arrive, stream;
	UT_hash_handle hh;
};

struct interval {
	struct cost_interval c;
	bool settled;
	struct interval *next;
};

struct cost_attr {
	uint32_t w_prefill, w_decode;
	struct step *steps;
	struct req *reqs;
	struct interval *head, *tail;  /* closed intervals, oldest first */
	bool started;                  /* a first sample was seen */
	uint64_t t_last;               /* the latest sample */
	uint64_t settled_to;           /* everything up to here is split */
	bool measured;                 /* energy counted in every interval so far */
	bool http_in_flight;           /* cost_attr_hold: rows still to come */
	/* scratch of a settle */
	struct step **in;
	uint64_t *w, *share, *e_share, *t_tok, *e_tok;
	struct kpi_gpu_span *spans;
	size_t cap;
	struct cost_attr_stats st;
};

static void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		abort();
	return p;
}

struct cost_attr *cost_attr_new(uint32_t prefill_weight, uint32_t decode_weight)
{
	struct cost_attr *a = calloc(1, sizeof(*a));
	if (!a)
		abort();
	a->w_prefill = prefill_weight;
	a->w_decode = decode_weight;
	a->measured = true;
	return a;
}

static void step_del(struct cost_attr *a, struct step *s)
{
	HASH_DEL(a->steps, s);
	free(s->list.e);
	free(s);
}

void cost_attr_free(struct cost_attr *a)
{
	struct step *s, *st;
	struct req *r, *rt;

	if (!a)
		return;
	HASH_ITER(hh, a->steps, s, st)
		step_del(a, s);
	HASH_ITER(hh, a->reqs, r, rt) {
		HASH_DEL(a->reqs, r);
		free(r);
	}
	while (a->head) {
		struct interval *i = a->head;
		a->head = i->next;
		free(i);
	}
	free(a->in);
	free(a->w);
	free(a->share);
	free(a->e_share);
	free(a->t_tok);
	free(a->e_tok);
	free(a->spans);
	free(a);
}

/* ---- the split ------------------------------------------------------------ */

void cost_split(uint64_t total, const uint64_t *w, int n, uint64_t *out)
{
	uint32_t stack[64], *w32 = n <= 64 ? stack : xrealloc(NULL, (size_t)n * sizeof(*w32));
	uint64_t max = 0;
	int shift = 0;

	/* the shared arithmetic takes 32-bit weights: large ones lose their low
	 * bits alike, the split stays exact */
	for (int i = 0; i < n; i++)
		if (w[i] > max)
			max = w[i];
	while ((max >> shift) > UINT32_MAX)
		shift++;
	for (int i = 0; i < n; i++)
		w32[i] = (uint32_t)(w[i] >> shift);
	kpi_gpu_split_by_tokens(total, w32, n, out);
	if (w32 != stack)
		free(w32);
}

/* ---- input ---------------------------------------------------------------- */

/* The entry of (pid, id) in table head, added zeroed when missing. */
#define FIND_OR_ADD(head, pid_, id_, out)                                         \
	do {                                                                    \
		struct key k_ = { .pid = (pid_), .id = (id_) };                 \
		HASH_FIND(hh, head, &k_, sizeof(k_), out);                      \
		if (!(out)) {                                                   \
			if (!((out) = calloc(1, sizeof(*(out)))))                  \
				abort();                                        \
			(out)->k = k_;                                          \
			HASH_ADD(hh, head, k, sizeof(k_), out);                 \
		}                                                               \
	} while (0)

static struct step *step_get(struct cost_attr *a, uint32_t pid, uint64_t id)
{
	struct step *s;
	FIND_OR_ADD(a->steps, pid, id, s);
	return s;
}

static struct req *req_get(struct cost_attr *a, uint32_t pid, uint64_t id)
{
	struct req *r;
	FIND_OR_ADD(a->reqs, pid, id, r);
	return r;
}

void cost_attr_step_seqs(struct cost_attr *a, uint32_t pid, uint64_t step, uint32_t n_total,
			 uint32_t first, const struct kpi_step_seq *e, uint32_t n, uint64_t t_probe)
{
	if (!a->started || t_probe < a->settled_to)
		return; /* before the clock started, or too late to count */
	struct step *s = step_get(a, pid, step);
	if (!s->t_probe || t_probe < s->t_probe)
		s->t_probe = t_probe;
	step_seqs_add(&s->list, n_total, first, e, n);
}

void cost_attr_step(struct cost_attr *a, uint32_t pid, uint64_t step, uint64_t t_start, uint64_t t_end)
{
	struct key k = { .pid = pid, .id = step };
	struct step *s;

	HASH_FIND(hh, a->steps, &k, sizeof(k), s);
	/* an open one always closes; a new one only if some of it is still to split */
	if (!s && (!a->started || t_end <= a->settled_to || t_end < t_start))
		return;
	if (!s)
		s = step_get(a, pid, step);
	s->t_start = t_start;
	s->t_end = t_end;
}

void cost_attr_request(struct cost_attr *a, uint32_t pid, uint64_t seq_id, uint64_t t_done)
{
	struct req *r = req_get(a, pid, seq_id);
	r->t_done = t_done ? t_done : 1;
	r->touched = t_done;
	a->st.requests++;
}

void cost_attr_http_request(struct cost_attr *a, uint32_t pid, uint64_t t_arrive, uint64_t t_start,
			    int64_t stream, uint64_t t_done)
{
	uint64_t key = COST_HTTP_KEY(t_arrive);
	struct key k = { .pid = pid, .id = key };
	struct req *r;

	if (t_start < t_arrive || t_start > t_done)
		t_start = t_arrive;
	if (!a->started || t_done <= a->settled_to || t_done < t_arrive) {
		a->st.http_late += a->started;
		return;
	}
	/* streams that arrived in one read: the next free key */
	for (;;) {
		HASH_FIND(hh, a->reqs, &k, sizeof(k), r);
		if (!r)
			break;
		k.id++;
	}
	key = k.id;
	struct kpi_step_seq e = { .id = key, .n_tokens = 1 };
	struct step *s = step_get(a, pid, key);
	/* what was already split it does not get */
	s->t_start = s->t_probe = t_start > a->settled_to ? t_start : a->settled_to;
	s->t_end = t_done;
	step_seqs_add(&s->list, 1, 0, &e, 1);
	a->st.http_requests++;
	a->st.http_inferred += t_start > t_arrive;
	cost_attr_request(a, pid, key, t_done);
	r = req_get(a, pid, key);
	r->http = true;
	r->t_arrive = (int64_t)t_arrive;
	r->stream = stream;
}

void cost_attr_hold(struct cost_attr *a, bool in_flight)
{
	a->http_in_flight = in_flight;
}

void cost_attr_interval(struct cost_attr *a, uint64_t t, int64_t energy_uj)
{
	if (!a->started) {
		a->started = true;
		a->t_last = a->settled_to = t;
		return;
	}
	if (t <= a->t_last)
		return;
	struct interval *i = calloc(1, sizeof(*i));
	if (!i)
		abort();
	i->c.t_end = t;
	i->c.interval_ns = t - a->t_last;
	i->c.energy_uj = energy_uj;
	if (a->tail)
		a->tail->next = i;
	else
		a->head = i;
	a->tail = i;
	a->t_last = t;
}

/* ---- settle --------------------------------------------------------------- */

static void grow(struct cost_attr *a, size_t n)
{
	if (n <= a->cap)
		return;
	a->cap = n * 2;
	a->in = xrealloc(a->in, a->cap * sizeof(*a->in));
	a->w = xrealloc(a->w, a->cap * sizeof(*a->w));
	a->share = xrealloc(a->share, a->cap * sizeof(*a->share));
	a->e_share = xrealloc(a->e_share, a->cap * sizeof(*a->e_share));
	a->t_tok = xrealloc(a->t_tok, a->cap * sizeof(*a->t_tok));
	a->e_tok = xrealloc(a->e_tok, a->cap * sizeof(*a->e_tok));
	a->spans = xrealloc(a->spans, a->cap * sizeof(*a->spans));
}

/* A step's part of (t0, t1]: an open one counts from its probe to t1. */
static uint64_t overlap(const struct step *s, uint64_t t0, uint64_t t1, uint64_t *from)
{
	uint64_t b = s->t_end ? s->t_start : s->t_probe, e = s->t_end ? s->t_end : t1;
	if (b < t0)
		b = t0;
	if (e > t1)
		e = t1;
	*from = b;
	return e > b ? e - b : 0;
}

/* One step's time and energy to its sequences by weighted tokens. */
static void split_step(struct cost_attr *a, struct step *s, uint64_t ns, uint64_t uj,
		       struct cost_interval *c, uint64_t now)
{
	uint32_t n = s->list.n;
	uint64_t *w = xrealloc(NULL, (n ? n : 1) * sizeof(*w)), tokens = 0;

	grow(a, n);
	for (uint32_t i = 0; i < n; i++) {
		uint64_t t = s->list.e[i].n_tokens > 0 ? (uint64_t)s->list.e[i].n_tokens : 0;
		w[i] = t * (s->list.e[i].is_prefill ? a->w_prefill : a->w_decode);
		tokens += t;
	}
	cost_split(ns, w, (int)n, a->t_tok);
	cost_split(uj, w, (int)n, a->e_tok);
	for (uint32_t i = 0; i < n; i++) {
		struct req *r = req_get(a, s->k.pid, s->list.e[i].id);
		r->machine_ns += a->t_tok[i];
		r->energy_uj += a->e_tok[i];
		if (!r->t_done)
			r->touched = now;
	}
	c->step_tokens += tokens;
	free(w);
}

/* The requests in flight of targets with no steps share the instants of the
 * interval that no step covers, each instant equally (processor sharing): a
 * span's weight is the sum, over the pieces between consecutive starts and
 * ends, of the piece's length over the spans in flight in it, 0 where a step
 * runs (a gateway waiting on a model server's steps is charged nothing for
 * them).  Steps keep their time in the interval. */
struct share_ev {
	uint64_t t;
	int d_http, d_step;     /* +1 a span (or a step) starts, -1 it ends */
};

static int cmp_ev(const void *x, const void *y)
{
	const struct share_ev *a = x, *b = y;
	return a->t < b->t ? -1 : a->t > b->t;
}

/* F(t): the time a request in flight alone would have had by t, so that a
 * span's share is F(end) - F(start); one sweep over the starts and ends,
 * sorted (n log n for the interval's n spans and steps). */
static double share_at(const uint64_t *t, const double *f, size_t n, uint64_t x)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (t[mid] < x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n ? f[lo] : f[n - 1];
}

static void http_shares(struct cost_attr *a, size_t n)
{
	size_t m = 0, ne = 0, nt = 0;

	for (size_t i = 0; i < n; i++)
		m += COST_KEY_IS_HTTP(a->in[i]->k.id);
	if (!m || (m == 1 && n == 1))
		return;         /* alone: its time in the interval */
	struct share_ev *ev = xrealloc(NULL, 2 * n * sizeof(*ev));
	uint64_t *t = xrealloc(NULL, 2 * n * sizeof(*t));
	double *f = xrealloc(NULL, 2 * n * sizeof(*f)), acc = 0;
	for (size_t i = 0; i < n; i++) {
		bool http = COST_KEY_IS_HTTP(a->in[i]->k.id);
		ev[ne++] = (struct share_ev){ a->spans[i].start_ns, http, !http };
		ev[ne++] = (struct share_ev){ a->spans[i].end_ns, -(int)http, -(int)!http };
	}
	qsort(ev, ne, sizeof(*ev), cmp_ev);
	int k_http = 0, k_step = 0;
	for (size_t j = 0; j < ne; j++) {
		if (nt && ev[j].t != t[nt - 1] && k_http > 0 && !k_step)
			acc += (double)(ev[j].t - t[nt - 1]) / (double)k_http;
		if (!nt || ev[j].t != t[nt - 1]) {
			t[nt] = ev[j].t;
			nt++;
		}
		f[nt - 1] = acc;
		k_http += ev[j].d_http;
		k_step += ev[j].d_step;
	}
	for (size_t i = 0; i < n; i++)
		if (COST_KEY_IS_HTTP(a->in[i]->k.id))
			a->w[i] = (uint64_t)(share_at(t, f, nt, a->spans[i].end_ns) -
					     share_at(t, f, nt, a->spans[i].start_ns) + 0.5);
	free(ev);
	free(t);
	free(f);
}

static void settle_one(struct cost_attr *a, struct interval *iv, uint64_t now)
{
	struct cost_interval *c = &iv->c;
	uint64_t t1 = c->t_end, t0 = t1 - c->interval_ns, from;
	uint64_t e = c->energy_uj >= 0 ? (uint64_t)c->energy_uj : 0;
	size_t n = 0;
	struct step *s, *tmp;

	HASH_ITER(hh, a->steps, s, tmp) {
		uint64_t o = overlap(s, t0, t1, &from);
		if (!o)
			continue;
		grow(a, n + 1);
		a->in[n] = s;
		a->w[n] = o;
		a->spans[n] = (struct kpi_gpu_span){ from, from + o };
		n++;
	}
	/* steps of two targets may run at once: the busy time is their union,
	 * shared by their time in the interval (requests in flight: by
	 * processor sharing) */
	http_shares(a, n);      /* before the union sorts the spans */
	c->busy_ns = kpi_gpu_busy_ns(a->spans, (int)n);
	c->idle_ns = c->interval_ns - c->busy_ns;
	c->steps = n;
	uint64_t two[2] = { c->busy_ns, c->idle_ns }, e2[2];
	cost_split(e, two, 2, e2);
	cost_split(c->busy_ns, a->w, (int)n, a->share);
	cost_split(e2[0], a->w, (int)n, a->e_share);
	uint64_t un_ns = 0, un_uj = 0;
	for (size_t i = 0; i < n; i++) {
		s = a->in[i];
		if (step_seqs_complete(&s->list)) {
			split_step(a, s, a->share[i], a->e_share[i], c, now);
		} else {
			un_ns += a->share[i];
			un_uj += a->e_share[i];
			a->st.unlisted_steps += s->t_end && s->t_end <= t1;
		}
		a->st.steps += s->t_end && s->t_end <= t1;
	}
	c->unattributed_ns = un_ns;
	if (c->energy_uj >= 0) {
		c->idle_energy_uj = (int64_t)e2[1];
		c->unattributed_energy_uj = (int64_t)un_uj;
	} else {
		c->idle_energy_uj = c->unattributed_energy_uj = -1;
		a->measured = false;
	}
	a->st.intervals++;
	a->st.attributed_ns += c->busy_ns - un_ns;
	a->st.idle_ns += c->idle_ns;
	a->st.unattributed_ns += un_ns;
	iv->settled = true;
	a->settled_to = t1;
	/* steps wholly before t1 have given all their time; one open for longer
	 * than COST_KEEP_NS lost its step__end (a drop) and stops counting */
	HASH_ITER(hh, a->steps, s, tmp)
		if ((s->t_end && s->t_end <= t1) || (!s->t_end && !s->t_probe) ||
		    (!s->t_end && now - s->t_probe > COST_KEEP_NS))
			step_del(a, s);
}

void cost_attr_settle(struct cost_attr *a, uint64_t now, bool final)
{
	for (struct interval *iv = a->head; iv; iv = iv->next) {
		if (iv->settled)
			continue;
		if (!final) {
			if (iv == a->tail)
				return;
			bool held = a->http_in_flight;
			struct step *s, *tmp;
			HASH_ITER(hh, a->steps, s, tmp)
				held |= !s->t_end && s->t_probe && s->t_probe <= iv->c.t_end;
			if (held && now - iv->c.t_end < COST_KEEP_NS)
				return;
		}
		settle_one(a, iv, now);
	}
}

/* ---- output --------------------------------------------------------------- */

void cost_attr_drain(struct cost_attr *a, uint64_t now,
		     bool (*interval_fn)(void *ctx, const struct cost_interval *i),
		     bool (*req_fn)(void *ctx, const struct cost_req *r), void *ctx)
{
	while (a->head && a->head->settled) {
		struct interval *iv = a->head;
		if (!interval_fn(ctx, &iv->c))
			break;
		a->head = iv->next;
		if (a->tail == iv)
			a->tail = NULL;
		free(iv);
	}
	struct req *r, *tmp;
	HASH_ITER(hh, a->reqs, r, tmp) {
		if (r->t_done && r->t_done <= a->settled_to) {
			struct cost_req o = { r->k.pid, r->k.id, r->machine_ns,
					      a->measured ? (int64_t)r->energy_uj : -1, r->t_done,
					      r->http, r->t_arrive, r->stream };
			if (!req_fn(ctx, &o)) {
				if (now - r->t_done < COST_KEEP_NS)
					continue; /* its row is not in the store yet */
				a->st.unwritten++;
			}
		} else if (r->t_done || now - r->touched < COST_KEEP_NS) {
			continue;
		} else {
			a->st.orphan_ns += r->machine_ns;
			a->st.orphan_uj += r->energy_uj;
		}
		HASH_DEL(a->reqs, r);
		free(r);
	}
}

void cost_attr_forget_pid(struct cost_attr *a, uint32_t pid, uint64_t now)
{
	struct step *s, *st;
	struct req *r, *rt;

	HASH_ITER(hh, a->steps, s, st)
		if (s->k.pid == pid && !s->t_end) {
			/* it will not end: count it up to now */
			s->t_start = s->t_probe;
			s->t_end = now > s->t_probe ? now : s->t_probe + 1;
		}
	HASH_ITER(hh, a->reqs, r, rt)
		if (r->k.pid == pid && !r->t_done)
			r->touched = 0;     /* expires at the next drain, as an orphan, once settled */
}

void cost_attr_stats(const struct cost_attr *a, struct cost_attr_stats *out)
{
	*out = a->st;
}
