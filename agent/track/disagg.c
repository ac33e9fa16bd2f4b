/* disagg.c - one disaggregated request's rows (router, decode worker, prefill
 * worker) found by their x-request-id, held until all are in, split into the
 * phases across the three processes and linked as hops (disagg.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include "disagg.h"
#include "bus.h"
#include "hop_link.h"
#include "marks.h"

/* A row held until its request's other rows come. */
struct held {
	struct kpi_request_record rec;
	uint64_t *writes;       /* its response's writes (the router's: all of them) */
	size_t n_writes;
	uint64_t *tok;          /* its own token writes (--token-detail) */
};

/* One routed (or fetched) request: the rows expected and those in. */
struct flight {
	struct flight *prev, *next;     /* every flight, oldest first */
	struct flight *id_next;         /* the bucket's, same request id */
	struct fbucket *b;
	uint64_t created;               /* the first event that expected it */
	uint64_t ended;                 /* the row that ends it came (0: not yet) */
	uint64_t t_route;               /* the router's decision (0: none seen) */
	uint32_t router_pid, decode_pid;
	char decode_addr[KPI_PD_ADDR_LEN], prefill_addr[KPI_PD_ADDR_LEN];
	bool want_router, want_decode, want_prefill;
	struct held *router, *decode, *prefill;
};

struct fbucket {
	UT_hash_handle hh;
	char id[KPI_REQID_LEN];
	struct flight *head;
};

struct disagg {
	struct bus *bus;
	struct fbucket *by_id;
	struct flight *oldest, *newest;
	struct disagg_stats st;
};

struct disagg *disagg_new(struct bus *bus)
{
	struct disagg *d = calloc(1, sizeof(*d));

	if (d)
		d->bus = bus;
	return d;
}

const struct disagg_stats *disagg_stats(const struct disagg *d)
{
	return &d->st;
}

/* ---- flights -------------------------------------------------------------------- */

static struct fbucket *bucket(struct disagg *d, const char *id, bool create)
{
	struct fbucket *b;

	HASH_FIND_STR(d->by_id, id, b);
	if (b || !create)
		return b;
	if (!(b = calloc(1, sizeof(*b))))
		abort();
	snprintf(b->id, sizeof(b->id), "%s", id);
	HASH_ADD_STR(d->by_id, id, b);
	return b;
}

static struct flight *flight_new(struct disagg *d, const char *id, uint64_t ts)
{
	struct flight *f = calloc(1, sizeof(*f));
	struct fbucket *b = bucket(d, id, true);

	if (!f)
		abort();
	f->created = ts;
	f->b = b;
	/* the bucket's list in creation order: a repeated id finds its oldest first */
	struct flight **p = &b->head;
	while (*p)
		p = &(*p)->id_next;
	*p = f;
	f->prev = d->newest;
	if (d->newest)
		d->newest->next = f;
	else
		d->oldest = f;
	d->newest = f;
	return f;
}

static void held_free(struct held *h)
{
	if (!h)
		return;
	free(h->writes);
	free(h->tok);
	free(h);
}

static void flight_free(struct disagg *d, struct flight *f)
{
	struct flight **p = &f->b->head;

	while (*p && *p != f)
		p = &(*p)->id_next;
	if (*p)
		*p = f->id_next;
	if (!f->b->head) {
		HASH_DEL(d->by_id, f->b);
		free(f->b);
	}
	if (f->prev)
		f->prev->next = f->next;
	else
		d->oldest = f->next;
	if (f->next)
		f->next->prev = f->prev;
	else
		d->newest = f->prev;
	held_free(f->router);
	held_free(f->decode);
	held_free(f->prefill);
	free(f);
}

void disagg_free(struct disagg *d)
{
	if (!d)
		return;
	while (d->oldest)
		flight_free(d, d->oldest);
	free(d);
}

/* The port of "host:port" ("[v6]:port"), 0 when none. */
static int port_of(const char *addr)
{
	const char *c = strrchr(addr, ':');

	return c ? atoi(c + 1) : 0;
}

/* Whether a row served on local end `local` can be the worker at addr:
 * the ports agree, or one of them is not known. */
static bool same_worker(const char *addr, const char *local)
{
	int a = port_of(addr), l = port_of(local);

	return !a || !l || a == l;
}

void disagg_routed(struct disagg *d, uint32_t pid, const char *request_id, uint64_t ts,
		   const char *decode, const char *prefill)
{
	struct flight *f = flight_new(d, request_id, ts);

	f->t_route = ts;
	f->router_pid = pid;
	f->want_router = f->want_decode = true;
	f->want_prefill = prefill[0] != 0;
	snprintf(f->decode_addr, sizeof(f->decode_addr), "%s", decode);
	snprintf(f->prefill_addr, sizeof(f->prefill_addr), "%s", prefill);
}

/* The flight of request id whose decode worker pid at local end `local`
 * (not known: "") began at or after t and has no decode row yet.  One whose
 * KV fetch that worker already began (decode_pid, from kv__recv_start after
 * the decision) is its own whatever t says: an arrival before the decision
 * is a segment the agent saw but not its read (one that came while it
 * attached, on a keep-alive connection the router's /load polls use), and
 * the row still belongs here. */
static struct flight *decode_flight(struct disagg *d, const char *id, uint32_t pid, const char *local,
				    uint64_t t)
{
	struct fbucket *b = bucket(d, id, false);

	for (struct flight *f = b ? b->head : NULL; f; f = f->id_next) {
		if (!f->want_decode || f->decode)
			continue;
		if (f->decode_pid ? f->decode_pid == pid : (!f->t_route || f->t_route <= t) &&
							 same_worker(f->decode_addr, local))
			return f;
	}
	return NULL;
}

void disagg_fetching(struct disagg *d, uint32_t pid, const char *request_id, uint64_t ts)
{
	/* the decode worker admitted it before this: its arrival is earlier
	 * than ts, and after the decision; the decision's time is the bound */
	struct flight *f = decode_flight(d, request_id, pid, "", ts);

	if (!f) {
		f = flight_new(d, request_id, ts);
		f->want_decode = true;
	}
	f->decode_pid = pid;
	f->want_prefill = true;
}

/* ---- the join -------------------------------------------------------------------- */

static uint64_t raw(int64_t v)
{
	return v == KPI_NULL ? 0 : (uint64_t)v;
}

static int64_t opt(uint64_t t)
{
	return t ? (int64_t)t : KPI_NULL;
}

bool disagg_phases(uint64_t m[DISAGG_MARKS], struct kpi_request_record *rec)
{
	int64_t *ph[DISAGG_MARKS - 1] = { &rec->net_in, &rec->router_ns, &rec->queue, &rec->prefill,
					  &rec->kv_transfer_ns, &rec->decode_queue_ns, &rec->decode,
					  &rec->net_out };
	bool clamped = marks_clamp(m, DISAGG_MARKS);

	marks_phases(m, DISAGG_MARKS, ph);
	rec->e2e = (int64_t)(m[DISAGG_MARKS - 1] - m[0]);
	return clamped;
}

/* The marks of row x (the router's or the decode worker's) from the
 * flight's rows as they came: d0 is the decode worker's row before the join
 * changed it.  A request the decode worker prefilled itself has no transfer
 * and no slot wait: its decode starts at its first token (m[6]), and true
 * is returned. */
static bool marks_of(const struct flight *f, const struct kpi_request_record *x,
		     const struct kpi_request_record *d0, uint64_t m[DISAGG_MARKS])
{
	bool local = false;

	const struct kpi_request_record *p = f->prefill ? &f->prefill->rec : NULL;
	bool router = f->router && x == &f->router->rec;

	memset(m, 0, sizeof(uint64_t) * DISAGG_MARKS);
	m[0] = raw(x->t_arrive);
	m[1] = router ? raw(x->t_admit) : 0;
	if (d0 && d0->reject_reason) {
		m[2] = raw(d0->t_admit);        /* answered with an error before its engine finished */
	} else if (d0) {
		m[2] = raw(d0->t_admit);
		if (d0->kv_bytes != KPI_NULL) {         /* its prefill ran on the prefill worker */
			m[3] = p ? raw(p->t_sched) : 0;
			m[4] = p ? raw(p->t_first) : 0;
			m[5] = raw(d0->t_kv_end);
			m[6] = raw(d0->t_sched);
		} else {                                /* prefilled where it decodes */
			m[3] = raw(d0->t_sched);
			m[6] = raw(d0->t_first);
			local = true;
		}
		m[7] = raw(d0->t_last);
	}
	m[8] = raw(x->t_done);
	return local;
}

/* Row x's marks, phases and e2e from m (router: x is the router's row;
 * local: marks_of said so). */
static bool split(struct kpi_request_record *x, uint64_t m[DISAGG_MARKS], bool router, bool local)
{
	bool clamped = disagg_phases(m, x);

	x->t_arrive = (int64_t)m[0];
	x->t_admit = opt(router ? m[1] : m[2]);
	x->t_pd_admit = opt(router ? m[2] : 0);
	x->t_sched = opt(m[3]);
	x->t_first = opt(m[4]);
	x->t_kv_end = opt(m[5]);
	x->t_pd_sched = opt(m[6]);
	x->t_last = opt(m[7]);
	x->t_done = (int64_t)m[8];
	if (local) {
		x->t_first = opt(m[6]);
		x->t_pd_sched = KPI_NULL;
	}
	return clamped;
}

/* What the decode worker (and the prefill worker) know that the router's
 * row carries too. */
static void copy_worker_fields(struct kpi_request_record *to, const struct kpi_request_record *d0,
			       const struct kpi_request_record *p)
{
	to->prompt_tokens = d0->prompt_tokens;
	to->output_tokens = d0->output_tokens;
	to->finish_reason = d0->finish_reason;
	to->preemptions = d0->preemptions;
	to->operation = d0->operation;
	to->kv_bytes = d0->kv_bytes;
	to->kv_blocks = d0->kv_blocks;
	to->kv_stream_ns = d0->kv_stream_ns;
	to->t_kv_start = d0->t_kv_start;
	to->kv_status = d0->kv_status;
	memcpy(to->kv_peer, d0->kv_peer, sizeof(to->kv_peer));
	to->slot_wait = d0->slot_wait;
	to->slot_waiting_ahead = d0->slot_waiting_ahead;
	const struct kpi_request_record *pc = p && p->prefix_cache ? p : d0->prefix_cache ? d0 : NULL;
	if (pc) {
		to->prefix_cache = true;
		to->cached_prompt_tokens = pc->cached_prompt_tokens;
	}
}

/* The router's TTFT, TPOT and inter-token gaps: its first write at or after
 * the decode worker's first token, the writes after it. */
static void router_tokens(struct held *r, const struct kpi_request_record *d0)
{
	struct kpi_request_record *x = &r->rec;
	uint64_t t_tok = d0 ? raw(d0->t_first) : 0;
	size_t i = 0;

	x->ttft = x->tpot = x->itl_p50 = x->itl_p99 = x->itl_max = x->t_first_write = KPI_NULL;
	x->token_writes = NULL;
	x->n_token_writes = 0;
	if (!t_tok)
		return;
	while (i < r->n_writes && r->writes[i] < t_tok)
		i++;
	if (i == r->n_writes)
		return;
	const uint64_t *tok = r->writes + i;
	size_t n_tok = r->n_writes - i;
	x->t_first_write = (int64_t)tok[0];
	x->ttft = (int64_t)tok[0] - x->t_arrive;
	x->token_writes = tok;
	x->n_token_writes = n_tok;
	int64_t out = x->output_tokens;
	if (out != KPI_NULL && out > 1) {
		if (n_tok > 1)          /* streamed: from the relayed token writes */
			x->tpot = (x->t_done - x->t_first_write) / (out - 1);
		else if (d0->t_last != KPI_NULL)        /* one write: the decode worker's pace */
			x->tpot = (d0->t_last - d0->t_first) / (out - 1);
	}
	if (n_tok > 1)
		marks_itl(x, tok, n_tok);
}

/* Publishes the flight's rows, joined as far as they came, and frees it. */
static void flight_send(struct disagg *d, struct flight *f)
{
	struct held *r = f->router, *dw = f->decode, *p = f->prefill;
	struct kpi_request_record d0;
	uint64_t m[DISAGG_MARKS];
	char hop[HOP_ID_LEN];
	bool clamped = false;

	if (dw) {
		/* the whole transfer: the prefill worker's first KV byte out to
		 * the decode worker's last byte in, on the one clock */
		if (p && p->rec.t_kv_start != KPI_NULL && dw->rec.t_kv_end != KPI_NULL &&
		    dw->rec.t_kv_end >= p->rec.t_kv_start) {
			dw->rec.t_kv_start = p->rec.t_kv_start;
			dw->rec.kv_stream_ns = dw->rec.t_kv_end - p->rec.t_kv_start;
		}
		d0 = dw->rec;
	}
	/* the router's row: split as far as its workers' rows tell (one the
	 * router refused itself keeps the error's split: net-in, then out) */
	if (r && !r->rec.reject_reason) {
		bool local = marks_of(f, &r->rec, dw ? &d0 : NULL, m);
		clamped |= split(&r->rec, m, true, local);
		if (dw) {
			copy_worker_fields(&r->rec, &d0, p ? &p->rec : NULL);
			router_tokens(r, &d0);
		}
	}
	/* a worker's row answered with an error before its engine finished
	 * keeps the error's split too */
	if (dw && !dw->rec.reject_reason) {
		bool local = marks_of(f, &dw->rec, &d0, m);
		clamped |= split(&dw->rec, m, false, local);
		if (p && p->rec.prefix_cache) {
			dw->rec.prefix_cache = true;
			dw->rec.cached_prompt_tokens = p->rec.cached_prompt_tokens;
		}
	}
	/* the hops: each worker's request under the one that made it, by the
	 * x-request-id the router and the decode worker pass on */
	if (r && dw) {
		hop_link_hop_id(r->rec.pid, (uint64_t)r->rec.t_arrive, hop);
		memcpy(dw->rec.parent_hop_id, hop, sizeof(hop));
		dw->rec.link_rule = "header";
	}
	if (dw && p) {
		hop_link_hop_id(dw->rec.pid, (uint64_t)dw->rec.t_arrive, hop);
		memcpy(p->rec.parent_hop_id, hop, sizeof(hop));
		p->rec.link_rule = "header";
	}
	if (r || dw) {
		bool all = (!f->want_router || r) && (!f->want_decode || dw) && (!f->want_prefill || p);
		if (all)
			d->st.joined++;
		else
			d->st.partial++;
		if (clamped)
			d->st.clamped++;
	}
	if (r)
		bus_request(d->bus, &r->rec);
	if (dw)
		bus_request(d->bus, &dw->rec);
	if (p)
		bus_request(d->bus, &p->rec);
	if (r && dw && !r->rec.reject_reason) {
		/* what the client waited beyond the decode worker's own e2e: the
		 * router's part, as the integration view has it */
		struct kpi_integration_record ir = { .pid = r->rec.pid, .e2e = r->rec.e2e,
						     .model_e2e = dw->rec.e2e };
		memcpy(ir.request_id, r->rec.request_id, sizeof(ir.request_id));
		memcpy(ir.comm, r->rec.comm, sizeof(ir.comm));
		ir.before_model = dw->rec.t_arrive - r->rec.t_arrive;
		ir.after_model = r->rec.t_done - dw->rec.t_done;
		ir.overhead = ir.e2e - ir.model_e2e;
		bus_integration(d->bus, &ir);
	}
	flight_free(d, f);
}

static bool flight_complete(const struct flight *f)
{
	return (!f->want_router || f->router) && (!f->want_decode || f->decode) &&
	       (!f->want_prefill || f->prefill);
}

static struct held *hold(const struct kpi_request_record *rec, const uint64_t *writes, size_t n)
{
	struct held *h = calloc(1, sizeof(*h));

	if (!h)
		abort();
	h->rec = *rec;
	if (n) {
		if (!(h->writes = malloc(n * sizeof(uint64_t))))
			abort();
		memcpy(h->writes, writes, n * sizeof(uint64_t));
		h->n_writes = n;
	}
	if (rec->n_token_writes) {
		if (!(h->tok = malloc(rec->n_token_writes * sizeof(uint64_t))))
			abort();
		memcpy(h->tok, rec->token_writes, rec->n_token_writes * sizeof(uint64_t));
		h->rec.token_writes = h->tok;
	}
	return h;
}

/* The flight a prefill worker's row belongs to: its decode worker fetched
 * request id from this row's local end, after the decision. */
static struct flight *prefill_flight(struct disagg *d, const struct kpi_request_record *rec)
{
	struct fbucket *b = bucket(d, rec->request_id, false);

	for (struct flight *f = b ? b->head : NULL; f; f = f->id_next) {
		if (!f->want_prefill || f->prefill || (f->t_route && f->t_route > raw(rec->t_arrive)))
			continue;
		const char *addr = f->decode && f->decode->rec.kv_peer[0] ? f->decode->rec.kv_peer :
				   f->prefill_addr;
		if (same_worker(addr, rec->sock_local))
			return f;
	}
	return NULL;
}

void disagg_request(struct disagg *d, const struct kpi_request_record *rec, const uint64_t *writes,
		    size_t n_writes)
{
	const char *role = rec->pd_role;
	struct flight *f = NULL;
	struct held **slot;

	if (role && !strcmp(role, "router")) {
		struct fbucket *b = bucket(d, rec->request_id, false);
		/* its own decision: made between its arrival and its end */
		for (f = b ? b->head : NULL; f; f = f->id_next)
			if (f->router_pid == rec->pid && !f->router && f->t_route >= raw(rec->t_arrive) &&
			    f->t_route <= raw(rec->t_done))
				break;
		if (!f) {       /* its decision's event was lost: the row still waits for its workers' */
			f = flight_new(d, rec->request_id, raw(rec->t_admit));
			f->want_router = f->want_decode = true;
			f->t_route = raw(rec->t_admit);
			f->router_pid = rec->pid;
		}
		slot = &f->router;
	} else if (role && !strcmp(role, "prefill")) {
		if (!(f = prefill_flight(d, rec))) {
			bus_request(d->bus, rec);       /* no traced decode worker asked for it */
			return;
		}
		slot = &f->prefill;
	} else {
		/* a decode worker's row: it fetched KV, or a router routed its id */
		uint64_t t = raw(rec->t_arrive);
		if (!(f = decode_flight(d, rec->request_id, rec->pid, rec->sock_local, t))) {
			if (!role) {
				bus_request(d->bus, rec);
				return;
			}
			f = flight_new(d, rec->request_id, t);
			f->want_decode = f->want_prefill = true;
		}
		if (rec->kv_bytes != KPI_NULL)
			f->want_prefill = true;
		f->decode_pid = rec->pid;
		slot = &f->decode;
	}
	*slot = hold(rec, writes, n_writes);
	if (!(*slot)->rec.pd_role)
		(*slot)->rec.pd_role = "decode";
	/* the end of the request: the router relays the decode worker's last
	 * bytes right after they are written, so the first of the two rows
	 * starts the wait for the rest */
	if ((slot == &f->router || slot == &f->decode) && !f->ended)
		f->ended = raw(rec->t_done);
	if (flight_complete(f))
		flight_send(d, f);
}

void disagg_expire(struct disagg *d, uint64_t now)
{
	struct flight *f = d->oldest, *next;

	for (; f; f = next) {
		next = f->next;
		bool any = f->router || f->decode || f->prefill;
		if (now == UINT64_MAX ||
		    (f->ended && now >= f->ended + DISAGG_WAIT_NS) ||
		    now >= f->created + DISAGG_OPEN_NS) {
			if (any)
				flight_send(d, f);
			else
				flight_free(d, f);
		}
	}
}
