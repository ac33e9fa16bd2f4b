/* hop_graph.c - recent hops by parent and by connection ends: the walk from a
 * top-level request down its calls to its model hop, done as it is written. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include "hop_graph.h"

#define KEY_LEN (2 * HOP_END_LEN + 2)   /* "local|peer" */
#define MAX_DEPTH 8

struct gbucket;

struct gent {
	struct gent *fifo;                      /* the next one kept after it */
	struct { struct gent *next; struct gbucket *b; } link[2];  /* [0] by parent, [1] by ends */
	bool out, open, engine, completions;
	char hop_id[HOP_ID_LEN];
	struct hop_ends ends;
	uint64_t t0, t1;                        /* first byte, end */
	int64_t e2e;
};

struct gbucket {
	UT_hash_handle hh;
	char key[KEY_LEN];
	struct gent *head;
};

/* A top-level request waiting for the other ends of its calls. */
struct gwait {
	struct gwait *next;
	struct kpi_integration_record rec;
	char hop_id[HOP_ID_LEN];
	uint64_t t0, t1, since;         /* its first byte and end; when it began to wait */
	bool engine;                    /* itself traced through an engine's probes */
};

struct hop_graph {
	struct gbucket *by_parent, *out_by_ends, *in_by_ends;
	struct gent *oldest, *newest;
	struct gwait *waiting;
	void (*on_integration)(void *ctx, const struct kpi_integration_record *r);
	void *ctx;
};

struct hop_graph *hop_graph_new(void (*on_integration)(void *ctx, const struct kpi_integration_record *r),
				void *ctx)
{
	struct hop_graph *g = calloc(1, sizeof(*g));

	if (g) {
		g->on_integration = on_integration;
		g->ctx = ctx;
	}
	return g;
}

static void ends_key(char *key, const char *a, const char *b)
{
	snprintf(key, KEY_LEN, "%s|%s", a, b);
}

static struct gbucket *bucket(struct gbucket **map, const char *key, bool create)
{
	struct gbucket *b;

	HASH_FIND_STR(*map, key, b);
	if (b || !create)
		return b;
	if (!(b = calloc(1, sizeof(*b))))
		return NULL;
	snprintf(b->key, sizeof(b->key), "%s", key);
	HASH_ADD_STR(*map, key, b);
	return b;
}

static void link_add(struct gbucket **map, const char *key, struct gent *e, int k)
{
	struct gbucket *b = bucket(map, key, true);

	if (!b)
		return;
	e->link[k].b = b;
	e->link[k].next = b->head;
	b->head = e;
}

static void link_del(struct gbucket **map, struct gent *e, int k)
{
	struct gbucket *b = e->link[k].b;
	struct gent **p;

	if (!b)
		return;
	for (p = &b->head; *p && *p != e; p = &(*p)->link[k].next)
		;
	if (*p)
		*p = e->link[k].next;
	if (!b->head) {
		HASH_DEL(*map, b);
		free(b);
	}
}

static struct gent *ent_new(struct hop_graph *g)
{
	struct gent *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	if (g->newest)
		g->newest->fifo = e;
	else
		g->oldest = e;
	g->newest = e;
	return e;
}

void hop_graph_out_open(struct hop_graph *g, const char *hop_id, const char *parent,
			const struct hop_ends *ends, uint64_t t0)
{
	struct gent *e;
	char key[KEY_LEN];

	if (!ends->local[0] || !(e = ent_new(g)))
		return;         /* no ends: nothing on the other side can be found */
	e->out = e->open = true;
	snprintf(e->hop_id, sizeof(e->hop_id), "%s", hop_id);
	e->ends = *ends;
	e->t0 = t0;
	e->t1 = UINT64_MAX;
	if (parent[0])
		link_add(&g->by_parent, parent, e, 0);
	ends_key(key, ends->local, ends->peer);
	link_add(&g->out_by_ends, key, e, 1);
}

void hop_graph_out_done(struct hop_graph *g, const char *hop_id, const struct hop_ends *ends,
			uint64_t t1)
{
	char key[KEY_LEN];
	struct gbucket *b;

	ends_key(key, ends->local, ends->peer);
	if (!(b = bucket(&g->out_by_ends, key, false)))
		return;
	for (struct gent *e = b->head; e; e = e->link[1].next)
		if (e->open && !strcmp(e->hop_id, hop_id)) {
			e->open = false;
			e->t1 = t1;
			return;
		}
}

void hop_graph_out_link(struct hop_graph *g, const char *hop_id, const struct hop_ends *ends, const char *parent)
{
	char key[KEY_LEN];
	struct gbucket *b;

	ends_key(key, ends->local, ends->peer);
	if (!parent[0] || !(b = bucket(&g->out_by_ends, key, false)))
		return;
	for (struct gent *e = b->head; e; e = e->link[1].next)
		if (!strcmp(e->hop_id, hop_id)) {
			if (!e->link[0].b)
				link_add(&g->by_parent, parent, e, 0);
			return;
		}
}

/* The inbound hop on the other end of out's connection, arrived while it was open. */
static const struct gent *served_by(const struct hop_graph *g, const struct gent *out)
{
	char key[KEY_LEN];
	struct gbucket *b;

	ends_key(key, out->ends.peer, out->ends.local);
	HASH_FIND_STR(g->in_by_ends, key, b);
	for (const struct gent *e = b ? b->head : NULL; e; e = e->link[1].next)
		if (e->t0 >= out->t0 && e->t0 <= out->t1)
			return e;
	return NULL;
}

/* The model hop the view would choose, among hop's descendants: traced
 * through an engine's probes first, then the deepest, then the latest.
 * *missing counts calls still open or whose other end is not known. */
static void model_walk(const struct hop_graph *g, const char *hop_id, int depth,
		       const struct gent **best, int *best_depth, int *missing)
{
	struct gbucket *b;

	if (depth >= MAX_DEPTH)
		return;
	HASH_FIND_STR(g->by_parent, hop_id, b);
	for (const struct gent *o = b ? b->head : NULL; o; o = o->link[0].next) {
		const struct gent *in = served_by(g, o);
		if (!in || o->open)
			(*missing)++;
		if (!in)
			continue;
		const struct gent *m = *best;
		if ((in->engine || in->completions) &&
		    (!m || in->engine > m->engine ||
		     (in->engine == m->engine && (depth + 1 > *best_depth ||
		      (depth + 1 == *best_depth && in->t0 > m->t0))))) {
			*best = in;
			*best_depth = depth + 1;
		}
		model_walk(g, in->hop_id, depth + 1, best, best_depth, missing);
	}
}

static bool ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), k = strlen(tail);

	return n >= k && !strcmp(s + n - k, tail);
}

/* w's trace as known now: false while a call's other end is missing (and
 * not final); else sent, when its model hop is another's. */
static bool wait_done(struct hop_graph *g, struct gwait *w, bool final)
{
	const struct gent *best = NULL;
	int best_depth = 0, missing = 0;

	model_walk(g, w->hop_id, 0, &best, &best_depth, &missing);
	if (missing && !final)
		return false;
	if (best && !(w->engine && !best->engine) && g->on_integration) {
		w->rec.model_e2e = best->e2e;
		w->rec.before_model = (int64_t)(best->t0 - w->t0);
		w->rec.after_model = (int64_t)(w->t1 - best->t1);
		w->rec.overhead = w->rec.e2e - best->e2e;
		g->on_integration(g->ctx, &w->rec);
	}
	return true;
}

/* Looks at every waiting request again; final: those that waited long enough
 * before now go with what is known. */
static void waits_check(struct hop_graph *g, uint64_t now, bool final)
{
	struct gwait **p = &g->waiting, *w;

	while ((w = *p)) {
		if (wait_done(g, w, final && now >= w->since + HOP_GRAPH_WAIT_NS)) {
			*p = w->next;
			free(w);
		} else {
			p = &w->next;
		}
	}
}

/* A top-level request begins to wait for its trace's hops. */
static void wait_add(struct hop_graph *g, const struct kpi_request_record *r, const char *hop_id)
{
	struct gwait *w = calloc(1, sizeof(*w));

	if (!w)
		return;
	memcpy(w->rec.request_id, r->request_id, sizeof(w->rec.request_id));
	w->rec.pid = r->pid;
	memcpy(w->rec.comm, r->comm, sizeof(w->rec.comm));
	w->rec.e2e = r->e2e;
	snprintf(w->hop_id, sizeof(w->hop_id), "%s", hop_id);
	w->t0 = (uint64_t)r->t_arrive;
	w->t1 = (uint64_t)r->t_done;
	w->since = (uint64_t)r->t_done;
	w->engine = !r->source || strcmp(r->source, "http");
	if (wait_done(g, w, false)) {   /* its hops are known already (or it has none) */
		free(w);
		return;
	}
	w->next = g->waiting;
	g->waiting = w;
}

void hop_graph_in(struct hop_graph *g, const struct kpi_request_record *r)
{
	char key[KEY_LEN], hop_id[HOP_ID_LEN];
	struct gbucket *b;
	bool top = true;
	struct gent *e;

	if (!r->sock_local[0])
		return;         /* no ends: nothing can find it, and it finds nothing */
	if (r->hop_id[0])
		snprintf(hop_id, sizeof(hop_id), "%s", r->hop_id);
	else
		hop_link_hop_id(r->pid, (uint64_t)r->t_arrive, hop_id);
	/* a traced call on the other end: not a top-level request */
	ends_key(key, r->sock_peer, r->sock_local);
	HASH_FIND_STR(g->out_by_ends, key, b);
	for (const struct gent *o = b ? b->head : NULL; o && top; o = o->link[1].next)
		top = !((uint64_t)r->t_arrive >= o->t0 && (uint64_t)r->t_arrive <= o->t1);
	if ((e = ent_new(g))) {
		snprintf(e->hop_id, sizeof(e->hop_id), "%s", hop_id);
		memcpy(e->ends.local, r->sock_local, sizeof(e->ends.local));
		memcpy(e->ends.peer, r->sock_peer, sizeof(e->ends.peer));
		e->t0 = (uint64_t)r->t_arrive;
		e->t1 = (uint64_t)r->t_done;
		e->e2e = r->e2e;
		e->engine = !r->source || strcmp(r->source, "http");
		e->completions = ends_with(r->path, "/completions");
		ends_key(key, e->ends.local, e->ends.peer);
		link_add(&g->in_by_ends, key, e, 1);
	}
	if (!top)
		waits_check(g, 0, false);       /* this hop may be the one they waited for */
	else
		wait_add(g, r, hop_id);
}

static void ent_free(struct hop_graph *g, struct gent *e)
{
	link_del(&g->by_parent, e, 0);
	link_del(e->out ? &g->out_by_ends : &g->in_by_ends, e, 1);
	free(e);
}

void hop_graph_expire(struct hop_graph *g, uint64_t now)
{
	struct gent *e;

	waits_check(g, now, true);
	while ((e = g->oldest)) {
		uint64_t end = e->open ? e->t0 + HOP_GRAPH_OPEN_NS : e->t1 + HOP_GRAPH_KEEP_NS;
		if (end > now)
			break;
		if (!(g->oldest = e->fifo))
			g->newest = NULL;
		ent_free(g, e);
	}
}

void hop_graph_free(struct hop_graph *g)
{
	struct gent *e, *next;

	if (!g)
		return;
	for (e = g->oldest; e; e = next) {
		next = e->fifo;
		ent_free(g, e);
	}
	while (g->waiting) {
		struct gwait *w = g->waiting;
		g->waiting = w->next;
		free(w);
	}
	free(g);
}
