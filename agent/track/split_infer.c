/* split_infer.c - queue and prefill of a streamed request inferred from the
 * times its server wrote the tokens of all its streams (docs/agent.md, "The
 * inferred split"); the rules and what they assume are there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include "schema/pct.h"
#include "bus.h"
#include "split_infer.h"

/* The writes of one step are those within this share of a step of each other
 * (and a step's first write is at least this far from the last step's last). */
#define SPLIT_CLUSTER_SHARE 0.3
/* Streams keep the pace of the steps: of a stream's consecutive writes, at
 * least this share are in consecutive steps (one engine steps them all). */
#define SPLIT_PACE_MIN 0.8
/* Of the streams running through a step, at least this share wrote in it. */
#define SPLIT_PARTICIPATION_MIN 0.85
/* The percentile of the gaps between steps (and between a stream's writes)
 * taken for a decode step: low, since many steps may carry prompts. */
#define SPLIT_SHORT_PCT 10
/* The percentile of the steps that finished no prompt taken for a decode step
 * where every step had a prompt pending (middle chunks among them). */
#define SPLIT_DECODE_PCT 25
/* A step this much longer than the short steps around it carried prompt work. */
#define SPLIT_LENGTHENED 1.25
/* A step this close to the window's full chunk steps was full: a prompt's
 * last chunk and the next prompt's first shared its budget. */
#define SPLIT_FULL_MIN 0.85
#define SPLIT_FULL_MAX 1.2
/* A step this many decode steps long that gave no first token ran a chunk of
 * a prompt, whatever the window shows of the full chunk step. */
#define SPLIT_CHUNK_MIN 3.0
/* A full chunk step seen is taken for the windows this soon after that show none. */
#define SPLIT_FULL_KEEP_NS (10ULL * 1000000000ULL)
/* Steps this close to the longest of the window's were capped by its budget. */
#define SPLIT_FULL_TOP 0.92
/* The step of a prompt is no shorter than this share of a decode step. */
#define SPLIT_STEP_MIN 0.75
/* Events carrying this many tokens each on average are speculative decoding
 * (or a server that packs tokens): their steps are not one token a stream. */
#define SPLIT_TOKENS_PER_EVENT 1.5
/* How far around a request its process's writes are looked at: this many of
 * its own gaps between tokens, at least ..._MIN_NS, at most ..._MAX_NS. */
#define SPLIT_WINDOW_STEPS 8
#define SPLIT_WINDOW_MIN_NS (100ULL * 1000000ULL)
#define SPLIT_WINDOW_MAX_NS (2000ULL * 1000000ULL)
/* Emissions kept at most per process; beyond, the oldest are dropped. */
#define SPLIT_MAX_EMISSIONS (1u << 20)

struct stream {
	UT_hash_handle hh;
	uint64_t key;
	uint64_t t_open;                /* the request read */
	uint64_t t_first, t_last;       /* its first and last token event, 0 none */
	uint64_t t_done;                /* its exchange ended, 0 still open */
	uint32_t n_tok;                 /* token events */
	bool model_call;
	bool dup;                       /* two token events at one time: one write */
	bool decided;
	bool released;                  /* its record went out */
	enum split_rule rule;
	enum split_decline why;
	uint64_t t_sched, t_first_est, step;
	/* scratch of one analysis */
	int loc;
	int first_cl;
};

struct emission {
	uint64_t ts;
	struct stream *s;
};

struct held {
	struct bus_held h;              /* h.r: the record */
	struct stream *s;
};

struct proc {
	UT_hash_handle hh;
	uint32_t pid;
	struct stream *streams;
	struct emission *ev;
	size_t n_ev, cap_ev;
	struct held *held;
	size_t n_held, cap_held;
	/* the full chunk step last seen (chunk_step), and the first token of
	 * the request whose window showed it: a server's budget outlives one
	 * window that happens to hold no long prompt */
	int64_t full;
	uint64_t full_at;
};

struct cluster {
	uint64_t first, last;
};

/* scratch reused by every analysis, grown to the largest window seen */
struct scratch {
	struct emission *ev;            /* the window's emissions */
	int *cl_of;                     /* each one's cluster */
	struct cluster *cl;             /* at most one per emission */
	struct stream **loc;            /* the window's streams, by local index */
	uint64_t *prev;                 /* per local stream: its last emission seen */
	int *last_cl;                   /* per local stream: the last cluster it wrote in */
	uint8_t *member;                /* n_cl x n_loc: who wrote in which cluster */
	int64_t *v;                     /* gaps, intervals */
	const struct stream **pend;     /* requests whose prompt may be pending in the window */
	size_t cap_ev, cap_cl_of, cap_cl, cap_loc, cap_prev, cap_last_cl, cap_member, cap_v, cap_pend;
	size_t n_pend;
};

/* sc's array `a`, room for n */
#define FIT(sc, a, n) ((sc)->a = grow((sc)->a, &(sc)->cap_##a, (n), sizeof(*(sc)->a)))

struct split_infer {
	struct proc *procs;
	struct scratch sc;
	struct split_stats st;
};

static void *grow(void *p, size_t *cap, size_t need, size_t size)
{
	if (need <= *cap)
		return p;
	size_t n = *cap ? *cap : 64;
	while (n < need)
		n *= 2;
	p = realloc(p, n * size);
	if (!p)
		abort();
	*cap = n;
	return p;
}

struct split_infer *split_infer_new(void)
{
	struct split_infer *s = calloc(1, sizeof(*s));

	if (!s)
		abort();
	return s;
}

static void proc_free(struct split_infer *s, struct proc *p)
{
	struct stream *x, *tmp;

	HASH_ITER(hh, p->streams, x, tmp) {
		HASH_DEL(p->streams, x);
		free(x);
	}
	for (size_t i = 0; i < p->n_held; i++)
		bus_held_free(&p->held[i].h);
	free(p->held);
	free(p->ev);
	HASH_DEL(s->procs, p);
	free(p);
}

void split_infer_free(struct split_infer *s)
{
	struct proc *p, *tmp;

	if (!s)
		return;
	HASH_ITER(hh, s->procs, p, tmp)
		proc_free(s, p);
	free(s->sc.ev);
	free(s->sc.cl_of);
	free(s->sc.loc);
	free(s->sc.prev);
	free(s->sc.last_cl);
	free(s->sc.cl);
	free(s->sc.member);
	free(s->sc.v);
	free(s->sc.pend);
	free(s);
}

bool split_infer_holding(const struct split_infer *s)
{
	for (const struct proc *p = s->procs; p; p = p->hh.next)
		if (p->n_held)
			return true;
	return false;
}

const struct split_stats *split_infer_stats(const struct split_infer *s)
{
	return &s->st;
}

const char *split_rule_name(enum split_rule r)
{
	static const char *const names[SPLIT_RULE__COUNT] = { NULL, "idle", "step", "chunked",
								 "shared" };
	return r >= 0 && r < SPLIT_RULE__COUNT ? names[r] : NULL;
}

const char *split_decline_name(enum split_decline d)
{
	static const char *const names[SPLIT_D__COUNT] = {
		"no_read", "buffered", "multi_token", "few_writes", "pace", "participation",
		"spread", "unseen", "wait", "too_long", "chunks",
	};
	return d >= 0 && d < SPLIT_D__COUNT ? names[d] : "unknown";
}

void split_infer_summary(const struct split_stats *st, char *buf, size_t len)
{
	uint64_t inferred = st->rules[SPLIT_IDLE] + st->rules[SPLIT_STEP] + st->rules[SPLIT_CHUNKED] +
			    st->rules[SPLIT_SHARED];
	size_t n;

	buf[0] = 0;
	if (!inferred && !st->rules[SPLIT_NONE])
		return;
	n = (size_t)snprintf(buf, len, "split: %llu streamed requests of HTTP-mode targets, %llu "
			     "inferred (%llu idle, %llu step, %llu shared, %llu chunked), %llu declined",
			     (unsigned long long)(inferred + st->rules[SPLIT_NONE]),
			     (unsigned long long)inferred, (unsigned long long)st->rules[SPLIT_IDLE],
			     (unsigned long long)st->rules[SPLIT_STEP],
			     (unsigned long long)st->rules[SPLIT_SHARED],
			     (unsigned long long)st->rules[SPLIT_CHUNKED],
			     (unsigned long long)st->rules[SPLIT_NONE]);
	const char *sep = " (";
	for (int d = 0; d < SPLIT_D__COUNT && n < len; d++)
		if (st->declined[d]) {
			n += (size_t)snprintf(buf + n, len - n, "%s%llu %s", sep,
					      (unsigned long long)st->declined[d], split_decline_name(d));
			sep = ", ";
		}
	if (*sep == ',' && n < len)
		snprintf(buf + n, len - n, ")");
}

static struct proc *proc_get(struct split_infer *s, uint32_t pid, bool create)
{
	struct proc *p;

	HASH_FIND(hh, s->procs, &pid, sizeof(pid), p);
	if (p || !create)
		return p;
	p = calloc(1, sizeof(*p));
	if (!p)
		abort();
	p->pid = pid;
	HASH_ADD(hh, s->procs, pid, sizeof(p->pid), p);
	return p;
}

static struct stream *stream_get(struct proc *p, uint64_t key)
{
	struct stream *x;

	HASH_FIND(hh, p->streams, &key, sizeof(key), x);
	return x;
}

void split_infer_open(struct split_infer *s, uint32_t pid, uint64_t key, uint64_t t,
		      bool model_call)
{
	struct proc *p = proc_get(s, pid, true);
	struct stream *x = stream_get(p, key);

	if (x)
		return;
	x = calloc(1, sizeof(*x));
	if (!x)
		abort();
	x->key = key;
	x->t_open = t;
	x->model_call = model_call;
	HASH_ADD(hh, p->streams, key, sizeof(x->key), x);
}

void split_infer_token(struct split_infer *s, uint32_t pid, uint64_t key, uint64_t ts,
		       uint64_t t_read)
{
	struct proc *p = proc_get(s, pid, false);
	struct stream *x = p ? stream_get(p, key) : NULL;

	if (!x)
		return;
	if (!x->t_first && t_read > x->t_open && t_read <= ts)
		x->t_open = t_read;     /* its body came after its head */
	if (x->t_last == ts)
		x->dup = true;  /* a second event in the same write */
	if (!x->t_first)
		x->t_first = ts;
	x->t_last = ts;
	x->n_tok++;
	if (p->n_ev == SPLIT_MAX_EMISSIONS) {
		size_t drop = SPLIT_MAX_EMISSIONS / 4;
		memmove(p->ev, p->ev + drop, (p->n_ev - drop) * sizeof(*p->ev));
		p->n_ev -= drop;
	}
	p->ev = grow(p->ev, &p->cap_ev, p->n_ev + 1, sizeof(*p->ev));
	/* writes come in ring order, nearly in time order: insert from the end */
	size_t i = p->n_ev;
	while (i > 0 && p->ev[i - 1].ts > ts)
		i--;
	memmove(p->ev + i + 1, p->ev + i, (p->n_ev - i) * sizeof(*p->ev));
	p->ev[i] = (struct emission){ .ts = ts, .s = x };
	p->n_ev++;
}

/* ---- the analysis --------------------------------------------------------- */

static size_t lower_bound(const struct emission *ev, size_t n, uint64_t ts)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (ev[mid].ts < ts)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int64_t median(int64_t *v, size_t n)
{
	return n ? (int64_t)pct_select_i64(v, n, 50) : 0;
}

/* The median gap between x's own token events (0: fewer than two). */
static int64_t own_step(struct split_infer *s, const struct proc *p, const struct stream *x)
{
	size_t i = lower_bound(p->ev, p->n_ev, x->t_first), n = 0;
	uint64_t prev = 0;

	for (; i < p->n_ev && p->ev[i].ts <= x->t_last; i++) {
		if (p->ev[i].s != x)
			continue;
		if (prev) {
			FIT(&s->sc, v, n + 1);
			s->sc.v[n++] = (int64_t)(p->ev[i].ts - prev);
		}
		prev = p->ev[i].ts;
	}
	return median(s->sc.v, n);
}

/* Another request the engine may be running while x waits for its first token. */
static bool in_flight_with(const struct stream *o, const struct stream *x)
{
	return o != x && o->model_call && o->t_open < x->t_first &&
	       (!o->t_done || o->t_done > x->t_open);
}

/* o runs through cluster c: it wrote before and after it. */
static bool spans(const struct stream *o, const struct cluster *c)
{
	return o->t_first && o->t_first < c->first && o->t_last > c->last;
}

struct window {
	size_t n_ev;
	int n_loc, n_cl;
	int64_t th;
};

#define MEMBER(sc, w, c, l) ((sc)->member[(size_t)(c) * (size_t)(w)->n_loc + (size_t)(l)])

/* A cluster whose writes are one step's: tight, apart from its neighbours,
 * and every stream running through it wrote in it, or wrote in both
 * neighbours (a token with no text sends no event on some servers). */
static bool cluster_ok(const struct scratch *sc, const struct window *w, int i)
{
	const struct cluster *c = &sc->cl[i];

	if ((int64_t)(c->last - c->first) > w->th)
		return false;
	if (i > 0 && (int64_t)(c->first - sc->cl[i - 1].last) < w->th)
		return false;
	if (i + 1 < w->n_cl && (int64_t)(sc->cl[i + 1].first - c->last) < w->th)
		return false;
	for (int l = 0; l < w->n_loc; l++) {
		if (MEMBER(sc, w, i, l) || !spans(sc->loc[l], c))
			continue;
		if (!(i > 0 && i + 1 < w->n_cl && MEMBER(sc, w, i - 1, l) && MEMBER(sc, w, i + 1, l)))
			return false;
	}
	return true;
}

/* The window [a - span, f + span] of p's emissions into the scratch, each
 * stream in it given a local index; false when a stream wrote two token events
 * at one time (several events in one write: a buffering server). */
static bool window_fill(struct scratch *sc, const struct proc *p, uint64_t from, uint64_t to,
			struct window *w)
{
	size_t lo = lower_bound(p->ev, p->n_ev, from), hi = lower_bound(p->ev, p->n_ev, to + 1);

	w->n_ev = hi - lo;
	FIT(sc, ev, w->n_ev);
	FIT(sc, cl_of, w->n_ev);
	FIT(sc, cl, w->n_ev);
	memcpy(sc->ev, p->ev + lo, w->n_ev * sizeof(*sc->ev));
	for (size_t i = 0; i < w->n_ev; i++)
		sc->ev[i].s->loc = -1;
	w->n_loc = 0;
	for (size_t i = 0; i < w->n_ev; i++) {
		struct stream *e = sc->ev[i].s;
		if (e->loc >= 0)
			continue;
		FIT(sc, loc, (size_t)w->n_loc + 1);
		e->loc = w->n_loc;
		e->first_cl = -1;
		sc->loc[w->n_loc++] = e;
	}
	FIT(sc, prev, (size_t)w->n_loc);
	FIT(sc, last_cl, (size_t)w->n_loc);
	memset(sc->prev, 0, (size_t)w->n_loc * sizeof(*sc->prev));
	for (size_t i = 0; i < w->n_ev; i++) {
		int l = sc->ev[i].s->loc;
		if (sc->prev[l] == sc->ev[i].ts)
			return false;
		sc->prev[l] = sc->ev[i].ts;
	}
	return true;
}

/* A short gap between consecutive writes of one stream in the window (the
 * SPLIT_SHORT_PCT percentile over all of them): a decode step, as the streams
 * see it, whatever share of the steps carried prompts; 0 with fewer than 3. */
static int64_t window_step(struct scratch *sc, const struct window *w)
{
	size_t n = 0;

	memset(sc->prev, 0, (size_t)w->n_loc * sizeof(*sc->prev));
	FIT(sc, v, w->n_ev);
	for (size_t i = 0; i < w->n_ev; i++) {
		int l = sc->ev[i].s->loc;
		if (sc->prev[l])
			sc->v[n++] = (int64_t)(sc->ev[i].ts - sc->prev[l]);
		sc->prev[l] = sc->ev[i].ts;
	}
	return n >= 3 ? (int64_t)pct_select_i64(sc->v, n, SPLIT_SHORT_PCT) : 0;
}

/* Steps: writes within w->th of the last one, each stream once. */
static void window_cluster(struct scratch *sc, struct window *w)
{
	w->n_cl = 0;
	for (int l = 0; l < w->n_loc; l++)
		sc->last_cl[l] = -1;
	for (size_t i = 0; i < w->n_ev; i++) {
		const struct emission *e = &sc->ev[i];
		int l = e->s->loc;
		struct cluster *c = w->n_cl ? &sc->cl[w->n_cl - 1] : NULL;
		if (!c || (int64_t)(e->ts - c->last) > w->th || sc->last_cl[l] == w->n_cl - 1) {
			c = &sc->cl[w->n_cl++];
			c->first = e->ts;
		}
		c->last = e->ts;
		sc->cl_of[i] = w->n_cl - 1;
		sc->last_cl[l] = w->n_cl - 1;
		if (e->ts == e->s->t_first)
			e->s->first_cl = w->n_cl - 1;
	}
	size_t need = (size_t)w->n_cl * (size_t)w->n_loc;
	FIT(sc, member, need ? need : 1);
	memset(sc->member, 0, need);
	for (size_t i = 0; i < w->n_ev; i++)
		MEMBER(sc, w, sc->cl_of[i], sc->ev[i].s->loc) = 1;
}

/* The streams keep the steps' pace (a stream's next write is in the next
 * step, or the one after when a token had no text), and most of those
 * running through a step wrote in it: else they are not stepped together by
 * one engine. */
static enum split_decline window_consistent(struct scratch *sc, const struct window *w)
{
	size_t pairs = 0, next = 0, want = 0, have = 0;

	for (int l = 0; l < w->n_loc; l++)
		sc->last_cl[l] = -1;
	for (size_t i = 0; i < w->n_ev; i++) {
		int l = sc->ev[i].s->loc;
		if (sc->last_cl[l] >= 0) {
			pairs++;
			next += sc->cl_of[i] - sc->last_cl[l] == 1;
		}
		sc->last_cl[l] = sc->cl_of[i];
	}
	if (w->n_cl < 2 || !pairs)
		return SPLIT_D_FEW;
	if ((double)next < SPLIT_PACE_MIN * (double)pairs)
		return SPLIT_D_PACE;
	for (int i = 0; i < w->n_cl; i++)
		for (int l = 0; l < w->n_loc; l++) {
			bool in = MEMBER(sc, w, i, l);
			if (in || spans(sc->loc[l], &sc->cl[i])) {
				want++;
				have += in;
			}
		}
	if ((double)have < SPLIT_PARTICIPATION_MIN * (double)want)
		return SPLIT_D_PARTICIPATION;
	return SPLIT_D__COUNT;
}

/* The model calls of p that may have had a prompt pending in [from, to]:
 * read before it ends, their first token (or their end, for one that streams
 * none) not before it begins. */
static void pending_fill(struct scratch *sc, const struct proc *p, uint64_t from, uint64_t to)
{
	sc->n_pend = 0;
	for (const struct stream *o = p->streams; o; o = o->hh.next) {
		uint64_t until = o->t_first ? o->t_first : o->t_done ? o->t_done : UINT64_MAX;
		if (!o->model_call || o->t_open > to || until < from)
			continue;
		FIT(sc, pend, sc->n_pend + 1);
		sc->pend[sc->n_pend++] = o;
	}
}

/* Whether a request had its prompt pending through the step [from, to]: read
 * before it began, its first token not before it ended. */
static bool pending_through(const struct scratch *sc, uint64_t from, uint64_t to)
{
	for (size_t i = 0; i < sc->n_pend; i++) {
		const struct stream *o = sc->pend[i];
		uint64_t until = o->t_first ? o->t_first : o->t_done ? o->t_done : UINT64_MAX;
		if (o->t_open <= from && until >= to)
			return true;
	}
	return false;
}

/* Whether a stream other than x got its first token in step i: the step ran
 * that stream's prompt (its last chunk), x == NULL: any stream's. */
static bool closed_by_other(const struct scratch *sc, const struct window *w,
			    const struct stream *x, int i)
{
	for (int l = 0; l < w->n_loc; l++)
		if (sc->loc[l] != x && sc->loc[l]->first_cl == i)
			return true;
	return false;
}

/* A decode step around x: the median length of the window's steps during
 * which no request's prompt was pending (nothing but decodes to run). Where
 * none was (a queue that never empties: requests waiting for a slot have a
 * prompt pending through every step), a low percentile of the steps that
 * gave no stream its first token (they finished no prompt: in an engine that
 * runs prompts whole, decodes alone), where it is shorter than nearly all
 * the steps that did (the SPLIT_SHORT_PCT percentile: an engine chunking
 * prompts through every step has no decode step to see); else 0. */
static int64_t decode_step(struct scratch *sc, const struct proc *p, const struct window *w)
{
	size_t n = 0;

	if (!w->n_cl)
		return 0;
	pending_fill(sc, p, sc->cl[0].first, sc->cl[w->n_cl - 1].first);
	FIT(sc, v, 2 * (size_t)w->n_cl);
	for (int i = 1; i < w->n_cl; i++)
		if (!pending_through(sc, sc->cl[i - 1].first, sc->cl[i].first))
			sc->v[n++] = (int64_t)(sc->cl[i].first - sc->cl[i - 1].first);
	if (n)
		return median(sc->v, n);
	size_t c = 0;
	int64_t *closed = sc->v + w->n_cl;
	for (int i = 1; i < w->n_cl; i++) {
		int64_t d = (int64_t)(sc->cl[i].first - sc->cl[i - 1].first);
		if (closed_by_other(sc, w, NULL, i))
			closed[c++] = d;
		else
			sc->v[n++] = d;
	}
	if (n < 3 || !c)
		return 0;
	int64_t dec = (int64_t)pct_select_i64(sc->v, n, SPLIT_DECODE_PCT);
	return dec < (int64_t)pct_select_i64(closed, c, SPLIT_SHORT_PCT) ? dec : 0;
}

/* A full chunk step of the window, 0 where it shows no sign of an engine that
 * chunks prompts: the median length of its lengthened steps that gave no
 * stream a first token (the middle chunks of long prompts, each filling the
 * step's budget), where at least 2 lie within SPLIT_FULL_MAX of each other;
 * else the steps the budget capped: at least 3 lengthened steps within
 * SPLIT_FULL_TOP of the longest (prompts taken whole make steps as long as
 * each prompt, rarely several alike at the top). None where a step that
 * gave a first token ran longer than SPLIT_FULL_MAX of it: decode steps the
 * machine lengthened alike do not make an engine that chunks. *whole: such
 * a step ran longer than SPLIT_FULL_MAX of every lengthened step that gave
 * none (those cannot be full chunks: the engine took that prompt whole, and
 * they are steps the machine lengthened). */
static int64_t chunk_step(struct scratch *sc, const struct window *w, int64_t base, bool *whole)
{
	size_t n = 0, m = 0;
	int64_t top = 0, closed = 0, open = 0, full = 0;

	*whole = false;
	if (!base)
		return 0;
	FIT(sc, v, 2 * (size_t)w->n_cl);
	int64_t *all = sc->v + w->n_cl;
	for (int i = 1; i < w->n_cl; i++) {
		int64_t d = (int64_t)(sc->cl[i].first - sc->cl[i - 1].first);
		if ((double)d <= SPLIT_LENGTHENED * (double)base)
			continue;
		all[m++] = d;
		top = d > top ? d : top;
		if (closed_by_other(sc, w, NULL, i)) {
			closed = d > closed ? d : closed;
		} else {
			sc->v[n++] = d;
			open = d > open ? d : open;
		}
	}
	*whole = closed && (!n || (double)closed > SPLIT_FULL_MAX * (double)open);
	if (n >= 2) {
		int64_t lo = (int64_t)pct_select_i64(sc->v, n, 25), hi = (int64_t)pct_select_i64(sc->v, n, 75);
		if ((double)hi <= SPLIT_FULL_MAX * (double)lo)
			full = median(sc->v, n);
	}
	if (!full) {
		n = 0;
		for (size_t i = 0; i < m; i++)
			if ((double)all[i] >= SPLIT_FULL_TOP * (double)top)
				sc->v[n++] = all[i];
		full = n >= 3 ? median(sc->v, n) : 0;
	}
	/* a prompt's last chunk is no longer than a full step: a step that
	 * finished one and ran longer shows prompts taken whole (the "full"
	 * steps were decode steps the machine lengthened) */
	return (double)closed > SPLIT_FULL_MAX * (double)full ? 0 : full;
}

/* Whether a stream other than x was decoding when x was read: it wrote
 * before a and again at or after cluster j, the first step to end after a. */
static bool decoding_at(const struct scratch *sc, const struct window *w, const struct stream *x,
			uint64_t a, int j)
{
	for (int l = 0; l < w->n_loc; l++) {
		const struct stream *o = sc->loc[l];
		if (o != x && o->t_first && o->t_first < a && o->t_last >= sc->cl[j].first)
			return true;
	}
	return false;
}

/* Whether another model call of p had its prompt pending when x was read. */
static bool pending_at(const struct proc *p, const struct stream *x, uint64_t a)
{
	for (const struct stream *o = p->streams; o; o = o->hh.next)
		if (o != x && o->model_call && o->t_open < a && (!o->t_first || o->t_first >= a) &&
		    (!o->t_done || o->t_done > a))
			return true;
	return false;
}

/* Whether a stream other than x wrote its last token in a cluster of
 * (from, to] and ended: its slot was free for the next step. */
static bool slot_freed(const struct scratch *sc, const struct window *w, const struct stream *x,
		       int from, int to)
{
	uint64_t after = from >= 0 ? sc->cl[from].last : 0;

	for (int l = 0; l < w->n_loc; l++) {
		const struct stream *o = sc->loc[l];
		if (o != x && o->t_done && o->t_last > after && o->t_last <= sc->cl[to].last)
			return true;
	}
	return false;
}

/* Decides x: its rule and marks, or why none applies. */
static void analyse(struct split_infer *s, struct proc *p, struct stream *x)
{
	struct scratch *sc = &s->sc;
	uint64_t a = x->t_open, f = x->t_first;
	struct window w = { 0 };

	x->decided = true;
	x->rule = SPLIT_NONE;
	if (f - a > SPLIT_MAX_WAIT_NS) {
		x->why = SPLIT_D_TOO_LONG;
		return;
	}
	if (x->dup) {
		x->why = SPLIT_D_BUFFERED;
		return;
	}
	int64_t own = own_step(s, p, x);
	bool alone = true;
	for (struct stream *o = p->streams; o && alone; o = o->hh.next)
		alone = !in_flight_with(o, x);
	if (alone) {
		/* a work-conserving engine with nothing else to do starts at once */
		x->rule = SPLIT_IDLE;
		x->t_sched = a;
		x->t_first_est = f;
		x->step = (uint64_t)own;
		return;
	}

	uint64_t span = (uint64_t)own * SPLIT_WINDOW_STEPS;
	span = span < SPLIT_WINDOW_MIN_NS ? SPLIT_WINDOW_MIN_NS :
	       span > SPLIT_WINDOW_MAX_NS ? SPLIT_WINDOW_MAX_NS : span;
	if (!window_fill(sc, p, a > span ? a - span : 0, f + span, &w)) {
		x->why = SPLIT_D_BUFFERED;
		return;
	}
	int64_t step = window_step(sc, &w);
	if (!step) {
		x->why = SPLIT_D_FEW;
		return;
	}
	w.th = (int64_t)(SPLIT_CLUSTER_SHARE * (double)step);
	window_cluster(sc, &w);
	enum split_decline why = window_consistent(sc, &w);
	if (why != SPLIT_D__COUNT) {
		x->why = why;
		return;
	}

	/* F: the step that gave x its first token */
	int k = x->first_cl;
	if (k < 0) {
		x->why = SPLIT_D_FEW;
		return;
	}
	/* x's prompt starts in a step that began after x was read: at the
	 * earliest the step after j, the first to end after the read. First come,
	 * first served: not before the last step of the prompts read before x
	 * (m: the last step up to F to give such a request its first token),
	 * which x's first chunk shares with the budget that prompt's last chunk
	 * left over (vLLM, SGLang, TGI and kpi-infer chunk prompts; an engine
	 * that takes prompts whole and ran that one alone in its step counts the
	 * step in x's prefill here, docs/agent.md) */
	int j = k, m = -1;
	for (int i = 0; i < w.n_cl; i++)
		if (sc->cl[i].first >= a) {
			j = i;
			break;
		}
	for (int l = 0; l < w.n_loc; l++) {
		const struct stream *o = sc->loc[l];
		if (o != x && o->t_open < a && o->first_cl >= 0 && o->t_first >= a &&
		    o->first_cl <= k && o->first_cl > m)
			m = o->first_cl;
	}
	int from = m - 1 > j ? m - 1 : j;
	if (from > k - 1)
		from = k - 1;
	/* steps show only through the streams decoding in them: with none when x
	 * was read, the steps up to the first one seen left no writes. An engine
	 * with no prompt pending then was idle and started x's at once (from -1:
	 * its read); one busy with other prompts may have started it in any of
	 * the steps unseen, unless those read before it had to finish first */
	if (!decoding_at(sc, &w, x, a, j)) {
		if (!pending_at(p, x, a)) {
			from = -1;
		} else if (from <= j) {
			x->why = SPLIT_D_UNSEEN;
			return;
		}
	}
	/* from there on x's prompt runs in every step up to F. A step in between
	 * no longer than a decode step ran none of it: x started after it. A
	 * lengthened step that gave another stream its first token was that
	 * stream's prompt (its last chunk), not x's: x started after it too,
	 * unless the step was as long as the full chunk steps of the window, its
	 * budget filled by x's first chunk (an engine that chunks prompts) */
	int64_t base = decode_step(sc, p, &w);
	bool whole;
	int64_t full = chunk_step(sc, &w, base, &whole);
	if (full) {
		p->full = full;
		p->full_at = f;
	} else if (!whole && p->full && f > p->full_at && f - p->full_at <= SPLIT_FULL_KEEP_NS) {
		full = p->full;
	}
	int t0 = from;
	bool waited = false;
	for (int i = k - 1; i > from && i > 0; i--) {
		double d = (double)(sc->cl[i].first - sc->cl[i - 1].first);
		bool full_size = full && d >= SPLIT_FULL_MIN * (double)full;
		if (closed_by_other(sc, &w, x, i)) {
			if (full ? !full_size || d > SPLIT_FULL_MAX * (double)full : whole) {
				t0 = i;
				break;
			}
			continue;
		}
		/* x's chunks before its last fill the step's budget: a step
		 * shorter than a full one where the engine chunks ran none */
		if ((base && d <= SPLIT_LENGTHENED * (double)base) || (full && !full_size)) {
			t0 = i;
			waited = true;
			break;
		}
		/* lengthened, no first token in it, and no full chunk step to
		 * hold it to: x's own chunk, or a decode step the machine
		 * lengthened (a server's loop that overran its step); the
		 * latter where the window shows prompts taken whole, the former
		 * where it is SPLIT_CHUNK_MIN decode steps long (a chunk of any
		 * budget worth the name; chunk steps whose length varies with
		 * the decodes beside them and the context show no full one) */
		if (!full && whole) {
			t0 = i;
			waited = true;
			break;
		}
		if (!full && base && d < SPLIT_CHUNK_MIN * (double)base) {
			x->why = SPLIT_D_CHUNKS;
			return;
		}
	}
	for (int i = t0 > 0 ? t0 - 1 : 0; i <= k; i++)
		if (!cluster_ok(sc, &w, i)) {
			x->why = SPLIT_D_SPREAD;
			return;
		}
	/* a work-conserving engine with a free slot starts x's prompt at the
	 * first step it can: x waited through a step that ran no prompt only for
	 * a slot, which a stream that ended there freed */
	if (waited && !slot_freed(sc, &w, x, from, t0)) {
		x->why = SPLIT_D_WAIT;
		return;
	}
	/* the step that finished x's prompt ran the decodes too: not shorter than
	 * one of them (else x's first token came from another engine's step) */
	if (base && k > 0 && (double)(sc->cl[k].first - sc->cl[k - 1].first) <
			     SPLIT_STEP_MIN * (double)base) {
		x->why = SPLIT_D_SPREAD;
		return;
	}
	/* a step that gave several streams their first token ran their prompts
	 * together: each one's prefill is that whole step, as the engine ran it */
	x->rule = t0 < k - 1 ? SPLIT_CHUNKED : closed_by_other(sc, &w, x, k) ? SPLIT_SHARED : SPLIT_STEP;
	x->t_sched = t0 >= 0 && sc->cl[t0].first > a ? sc->cl[t0].first : a;
	x->t_first_est = sc->cl[k].first > x->t_sched ? sc->cl[k].first : x->t_sched;
	x->step = (uint64_t)(base ? base : step);
}

/* ---- records ---------------------------------------------------------------- */

static int64_t opt(uint64_t v)
{
	return v ? (int64_t)v : KPI_NULL;
}

/* r with x's split, where x has one and r can take it: an HTTP row with its
 * read, its content and the engine's split not measured (http+libllama). */
static void apply(struct split_infer *s, struct stream *x, struct kpi_request_record *r)
{
	if (!x || !x->t_first || !r->source || strcmp(r->source, "http") ||
	    r->t_first_write == KPI_NULL || r->decode == KPI_NULL || r->server_wait == KPI_NULL) {
		s->st.passed++;         /* not a stream with content, or its split is measured */
		return;
	}
	enum split_rule rule = x->rule;
	enum split_decline why = x->why;
	if (rule != SPLIT_NONE && r->t_req_read == KPI_NULL) {
		rule = SPLIT_NONE;
		why = SPLIT_D_NO_READ;
	}
	if (rule != SPLIT_NONE && r->output_tokens != KPI_NULL &&
	    (double)r->output_tokens >= SPLIT_TOKENS_PER_EVENT * x->n_tok &&
	    r->output_tokens >= (int64_t)x->n_tok + 2) {
		rule = SPLIT_NONE;
		why = SPLIT_D_MULTI_TOKEN;
	}
	s->st.rules[rule]++;
	if (rule == SPLIT_NONE) {
		s->st.declined[why]++;
		return;
	}
	/* marks in order: read <= scheduled <= first token <= first content */
	int64_t t_sched = (int64_t)x->t_sched, t_first = (int64_t)x->t_first_est;
	if (t_sched < r->t_req_read)
		t_sched = r->t_req_read;
	if (t_first > r->t_first_write)
		t_first = r->t_first_write;
	if (t_first < t_sched)
		t_first = t_sched;
	int64_t last_content = r->t_first_write + r->decode;
	r->t_sched = t_sched;
	r->t_first = t_first;
	r->queue = t_sched - r->t_req_read;
	r->prefill = t_first - t_sched;
	r->decode = last_content - t_first;     /* from the engine's first token, as usdt rows */
	r->server_wait = KPI_NULL;
	r->split_rule = split_rule_name(rule);
	r->step_ns = opt(x->step);
}

static void held_add(struct proc *p, const struct kpi_request_record *rec, struct stream *x)
{
	p->held = grow(p->held, &p->cap_held, p->n_held + 1, sizeof(*p->held));
	struct held *h = &p->held[p->n_held++];
	bus_held_keep(&h->h, rec);
	h->s = x;
}

void split_infer_done(struct split_infer *s, uint32_t pid, uint64_t key,
		      const struct kpi_request_record *rec)
{
	struct proc *p = proc_get(s, pid, false);
	struct stream *x = p ? stream_get(p, key) : NULL;

	if (x)
		x->t_done = (uint64_t)rec->t_done;
	if (!p)
		p = proc_get(s, pid, true);
	held_add(p, rec, x);
}

/* Decides every stream whose first token is SPLIT_SETTLE_NS old, hands out the
 * held records that can go, in the order they came. */
static void proc_release(struct split_infer *s, struct proc *p, uint64_t now, bool final,
			 void (*out)(void *ctx, const struct kpi_request_record *rec), void *ctx)
{
	struct stream *x, *tmp;
	size_t k = 0;

	HASH_ITER(hh, p->streams, x, tmp)
		if (!x->decided && x->t_first && (final || x->t_first + SPLIT_SETTLE_NS <= now))
			analyse(s, p, x);
	for (size_t i = 0; i < p->n_held; i++) {
		struct held *h = &p->held[i];
		bool over = p->n_held - i > SPLIT_MAX_HELD;
		if (h->s && h->s->t_first && !h->s->decided && !final && !over) {
			p->held[k++] = *h;
			continue;
		}
		if (over && h->s && !h->s->decided) {
			s->st.overflow++;
			h->s = NULL;
		}
		apply(s, h->s, &h->h.r);
		if (h->s)
			h->s->released = true;
		out(ctx, &h->h.r);
		bus_held_free(&h->h);
	}
	p->n_held = k;

	/* forget what no analysis can need: streams ended long ago, emissions older */
	uint64_t horizon = now > SPLIT_KEEP_NS ? now - SPLIT_KEEP_NS : 0;
	size_t drop = lower_bound(p->ev, p->n_ev, horizon);
	if (drop) {
		memmove(p->ev, p->ev + drop, (p->n_ev - drop) * sizeof(*p->ev));
		p->n_ev -= drop;
	}
	HASH_ITER(hh, p->streams, x, tmp) {
		uint64_t last = x->t_last > x->t_open ? x->t_last : x->t_open;
		if (last >= horizon || (x->t_done && (!x->released || x->t_done >= horizon)))
			continue;
		HASH_DEL(p->streams, x);
		free(x);
	}
}

void split_infer_release(struct split_infer *s, uint64_t now, bool final,
			 void (*out)(void *ctx, const struct kpi_request_record *rec), void *ctx)
{
	struct proc *p, *tmp;

	HASH_ITER(hh, s->procs, p, tmp)
		proc_release(s, p, now, final, out, ctx);
}

void split_infer_forget_pid(struct split_infer *s, uint32_t pid,
			    void (*out)(void *ctx, const struct kpi_request_record *rec), void *ctx)
{
	struct proc *p = proc_get(s, pid, false);

	if (!p)
		return;
	proc_release(s, p, UINT64_MAX, true, out, ctx);
	proc_free(s, p);
}
