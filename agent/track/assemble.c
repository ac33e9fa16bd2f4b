/* assemble.c - request assembly: one struct req per request in flight, found
 * by connection (pid, fd) for socket events and by (pid, id) for engine
 * events; completed at response__end (or close) and published on the bus. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include "assemble.h"
#include "bus.h"
#include "disagg.h"
#include "hop_link.h"
#include "http_path.h"
#include "trajectory.h"
#include "marks.h"
#include "agent/host/targets.h"
#include "abi/kpi_kv_wire.h"
#include "abi/kpi_reasons.h"

/* ---- state -------------------------------------------------------------- */

/* Keys of the in-flight tables (uthash hashes their bytes: padding zeroed). */
struct conn_key {
	uint32_t pid;
	int32_t fd;
};

struct id_key {
	uint32_t pid;
	uint32_t _pad;
	uint64_t id;    /* the daemon's request id, or a step id */
};

struct req {
	UT_hash_handle hh_conn, hh_id;
	struct conn_key ck;     /* valid while in_conn */
	struct id_key ik;       /* valid while in_id */
	bool in_conn, in_id;
	char reqid[KPI_REQID_LEN];
	uint32_t pid;
	int fd;
	uint64_t id;
	bool has_id, admitted, rejected, finished, cancelled;
	bool cut_by_exit;        /* its process exited before its response was out */
	bool queued;            /* in its queue phase (admitted, in no step yet): counted in its pidstate */
	uint64_t t_arrive, t_read, t_admit, t_sched, t_first, t_last, t_resp_end;
	int arrive_src, srtt_us;
	uint64_t runq0, runq1;
	int prompt, max_tokens, operation, output_tokens, finish_reason, http_status, reject_reason, preemptions;
	uint64_t *writes;
	size_t n_writes, cap_writes;
	struct hop_ends ends;   /* of its connection, when a SOCK record told them */
	/* disaggregated prefill and decode (docs/disaggregation.md) */
	bool routed;            /* a router's request: route__decision was its admission */
	int policy;
	char decode_worker[KPI_PD_ADDR_LEN], prefill_worker[KPI_PD_ADDR_LEN];
	bool kv_send, kv_recv;  /* the prefill side of a KV transfer, or the decode side */
	bool kv_ended;          /* its kv__send_end / kv__recv_end came */
	bool resp_ended;        /* response__end came before kv__send_end: completes there */
	uint64_t t_kv_start, t_kv_end, kv_bytes;
	int kv_blocks, kv_status;
	char kv_peer[KPI_PD_ADDR_LEN];
	bool slot_waited, prefix_hit;
	int slot_ahead, slot_needed, slot_free, slot_running, slot_max, cached_tokens;
};

/* Distinct processes a target waited behind within one sample; more than
 * that in one second are summed in the sample's rest entry. */
#define RUNQ_BY_SLOTS 32

struct pidstate {
	uint32_t pid;
	int64_t kv_used, kv_free;
	uint64_t last_t, last_runq, last_runq_self, last_runq_idle, last_drops;
	bool sampled;
	int completed, out_tokens, preemptions, rejections, errors;
	/* requests in their queue phase now, and the most at once since the
	 * last sample: the depth a sample gives, so that a burst served
	 * between two samples is not lost between them */
	int queued, queued_peak;
	struct kpi_runq_by runq_by[RUNQ_BY_SLOTS];
	int n_runq_by;
	uint64_t runq_by_rest;
};

/* Requests completed or found orphaned lately, by (pid, id): an engine event
 * for one of them (a finish the engine fires after the server ended the
 * response on a stop string, the next event of an orphan) names no new
 * orphan.  FIFO, RECENT_MAX entries. */
#define RECENT_MAX 4096
struct recent {
	UT_hash_handle hh;
	struct id_key key;
};

/* A batch step between its begin and end. */
struct step {
	UT_hash_handle hh;
	struct id_key key;      /* (pid, step id) */
	struct kpi_step_record rec;
};

struct assembler {
	struct req *by_conn;    /* (pid, fd) -> req, hh_conn */
	struct req *by_id;      /* (pid, id) -> req, hh_id */
	struct step *steps;     /* (pid, step) -> step */
	struct recent *recent;  /* (pid, id) of requests completed lately */
	struct recent ring[RECENT_MAX];
	size_t n_recent;        /* entries ever put in ring[] */
	struct bus *bus;        /* where records go */
	struct pidstate pids[KPI_MAX_TARGETS];
	int n_pids;
	struct assemble_stats st;
	uint64_t drops_before;  /* drops at the previous assemble_sample() */
	struct http_path *http; /* HTTP-mode targets' records (PAYLOAD, HTTP_CLOSE) */
	struct disagg *disagg;  /* a routed request's three processes' rows, joined */
};

static void count_request(void *ctx, const struct kpi_request_record *rec);

struct assembler *assemble_new(struct bus *bus)
{
	struct assembler *a = calloc(1, sizeof(struct assembler));

	if (!a)
		return NULL;
	a->bus = bus;
	/* the HTTP path subscribes the hop graph, then the counts: the sinks
	 * main adds later see every record after both, as they always did */
	if (!(a->http = http_path_new(bus)) || !(a->disagg = disagg_new(bus)) ||
	    bus_add(bus, &(struct kpi_sink){ .ctx = a, .request = count_request })) {
		http_path_free(a->http);
		disagg_free(a->disagg);
		free(a);
		return NULL;
	}
	return a;
}

static void req_free(struct req *r)
{
	free(r->writes);
	free(r);
}

static void req_unlink(struct assembler *a, struct req *r);

void assemble_free(struct assembler *a)
{
	struct req *r, *tmp;
	struct step *s, *stmp;

	if (!a)
		return;
	/* a req is in by_conn, by_id or both: unlinking frees it from both */
	HASH_ITER(hh_conn, a->by_conn, r, tmp) {
		req_unlink(a, r);
		req_free(r);
	}
	HASH_ITER(hh_id, a->by_id, r, tmp) {
		req_unlink(a, r);
		req_free(r);
	}
	HASH_ITER(hh, a->steps, s, stmp) {
		HASH_DEL(a->steps, s);
		free(s);
	}
	HASH_CLEAR(hh, a->recent);
	http_path_free(a->http);
	disagg_free(a->disagg);
	free(a);
}

void assemble_set_http_timeout(struct assembler *a, uint64_t ns)
{
	http_path_set_timeout(a->http, ns);
}

void assemble_set_task_idle_gap(struct assembler *a, uint64_t ns)
{
	http_path_set_task_idle_gap(a->http, ns);
}

void assemble_finish(struct assembler *a)
{
	http_path_finish(a->http);
}

void assemble_set_tls_query(struct assembler *a, bool (*readable)(void *ctx, uint32_t pid),
			    void *ctx)
{
	http_path_set_tls(a->http, (struct http_tls_query){ readable, ctx });
}
_Static_assert(HOP_RULE__COUNT == 5, "assemble_stats.hops_out has one slot per hop rule");

void assemble_stats(const struct assembler *a, struct assemble_stats *out)
{
	const struct hop_link_stats *h = hop_link_stats(http_path_hops(a->http));

	*out = a->st;
	out->clamped += disagg_stats(a->disagg)->clamped;
	out->pd_joined = disagg_stats(a->disagg)->joined;
	out->pd_partial = disagg_stats(a->disagg)->partial;
	for (int i = 0; i < HOP_RULE__COUNT; i++)
		out->hops_out[i] = h->links[i];
	out->hops_ambiguous = h->ambiguous;
	const struct trajectory_stats *t = http_path_tasks(a->http);
	memcpy(out->tasks, t->tasks, sizeof(out->tasks));
	out->escalations = t->escalations;
}

void assemble_losses(struct assembler *a, struct kpi_loss_record *l)
{
	l->total[KPI_LOSS_ORPHANS] = a->st.orphan_requests;
	l->total[KPI_LOSS_CLAMPED] = a->st.clamped + disagg_stats(a->disagg)->clamped;
	l->total[KPI_LOSS_BEFORE_ATTACH] = a->st.before_attach;
	l->total[KPI_LOSS_HTTP_UNSYNCED] = http_path_stats(a->http)->unsynced;
	l->total[KPI_LOSS_TLS_UNREADABLE] = http_path_tls_stats(a->http)->unreadable +
					    http_path_tls_stats(a->http)->unplaced;
	l->total[KPI_LOSS_HOPS_UNLINKED] = hop_link_stats(http_path_hops(a->http))->links[HOP_RULE_NONE];
	l->total[KPI_LOSS_H2_HEADERS_UNDECODABLE] = http_path_h2_stats(a->http)->headers_undecodable;
	bus_losses(a->bus, l);
}

static struct pidstate *pidstate(struct assembler *a, uint32_t pid)
{
	for (int i = 0; i < a->n_pids; i++)
		if (a->pids[i].pid == pid)
			return &a->pids[i];
	if (a->n_pids == KPI_MAX_TARGETS)
		return NULL;
	a->pids[a->n_pids] = (struct pidstate){ .pid = pid, .kv_used = KPI_NULL, .kv_free = KPI_NULL };
	return &a->pids[a->n_pids++];
}

static struct req *find_conn(struct assembler *a, uint32_t pid, int fd)
{
	struct conn_key k = { .pid = pid, .fd = fd };
	struct req *r;

	HASH_FIND(hh_conn, a->by_conn, &k, sizeof(k), r);
	return r;
}

static struct req *find_id(struct assembler *a, uint32_t pid, uint64_t id)
{
	struct id_key k = { .pid = pid, .id = id };
	struct req *r;

	HASH_FIND(hh_id, a->by_id, &k, sizeof(k), r);
	return r;
}

static void conn_unlink(struct assembler *a, struct req *r)
{
	if (r->in_conn)
		HASH_DELETE(hh_conn, a->by_conn, r);
	r->in_conn = false;
}

static void id_unlink(struct assembler *a, struct req *r)
{
	if (r->in_id)
		HASH_DELETE(hh_id, a->by_id, r);
	r->in_id = false;
}

/* r becomes the request of its connection; one that held it before is no
 * longer found by connection (its caller has ended it). */
static void conn_link(struct assembler *a, struct req *r)
{
	struct req *old = find_conn(a, r->pid, r->fd);

	if (old)
		conn_unlink(a, old);
	r->ck = (struct conn_key){ .pid = r->pid, .fd = r->fd };
	HASH_ADD(hh_conn, a->by_conn, ck, sizeof(r->ck), r);
	r->in_conn = true;
}

static void id_link(struct assembler *a, struct req *r)
{
	struct req *old = find_id(a, r->pid, r->id);

	if (old)
		id_unlink(a, old);
	r->ik = (struct id_key){ .pid = r->pid, .id = r->id };
	HASH_ADD(hh_id, a->by_id, ik, sizeof(r->ik), r);
	r->in_id = true;
}

static struct req *req_new(struct assembler *a, uint32_t pid, int fd, uint64_t t_arrive)
{
	struct req *r = calloc(1, sizeof(*r));

	if (!r)
		abort();
	r->pid = pid;
	r->fd = fd;
	r->t_arrive = t_arrive;
	if (fd >= 0) {
		conn_link(a, r);
		hop_link_ends(http_path_hops(a->http), pid, fd, &r->ends);
	}
	return r;
}

static void recent_add(struct assembler *a, const struct id_key *k)
{
	struct recent *slot = &a->ring[a->n_recent++ % RECENT_MAX];

	if (a->n_recent > RECENT_MAX)
		HASH_DEL(a->recent, slot);
	slot->key = *k;
	HASH_ADD(hh, a->recent, key, sizeof(slot->key), slot);
}

/* ---- the queue: admitted, in no step yet ------------------------------------- */

static void queue_enter(struct assembler *a, struct req *r)
{
	struct pidstate *ps = pidstate(a, r->pid);

	if (r->queued || !ps)
		return;
	r->queued = true;
	if (++ps->queued > ps->queued_peak)
		ps->queued_peak = ps->queued;
}

/* Its first step (SCHED), its end in the queue (cancelled, finished), or its
 * record gone: the queue phase is over. A preempted request waits again but
 * its queue phase (t_admit .. t_sched) is not reopened. */
static void queue_leave(struct assembler *a, struct req *r)
{
	struct pidstate *ps;

	if (!r->queued)
		return;
	r->queued = false;
	if ((ps = pidstate(a, r->pid)) && ps->queued > 0)
		ps->queued--;
}

static void req_unlink(struct assembler *a, struct req *r)
{
	queue_leave(a, r);
	conn_unlink(a, r);
	if (r->in_id)   /* remembered a while: the engine's last event may still come */
		recent_add(a, &r->ik);
	id_unlink(a, r);
}

/* An event named request (pid, id) and none is in flight: the request's
 * admission was never seen (attached mid-request, or a drop), so it gets no
 * row. Counted once per request, not per event. */
static void orphan_event(struct assembler *a, uint32_t pid, uint64_t id)
{
	struct id_key k = { .pid = pid, .id = id };
	struct recent *seen;

	HASH_FIND(hh, a->recent, &k, sizeof(k), seen);
	if (seen)
		return;
	a->st.orphan_requests++;
	recent_add(a, &k);
}

/* ---- completion ------------------------------------------------------------ */

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
	return a < b ? -1 : a > b;
}

static int64_t opt(uint64_t t)
{
	return t ? (int64_t)t : KPI_NULL;
}

/* The writes that belong to the response: up to response__end (later ones are
 * the next request's), the last of them ending it; the token writes are those
 * from the first at or after the engine's first token. */
struct resp_writes {
	uint64_t t_done, t_first_write;
	uint64_t *tok;          /* into r->writes */
	size_t n_tok;
};

static void writes_scan(struct req *r, struct resp_writes *w)
{
	size_t first_idx = 0;

	*w = (struct resp_writes){ 0 };
	/* writes arrive in ring order, which across CPUs is nearly time order */
	if (r->n_writes > 1)
		qsort(r->writes, r->n_writes, sizeof(uint64_t), cmp_u64);
	for (size_t i = 0; i < r->n_writes; i++) {
		uint64_t t = r->writes[i];
		if (r->t_resp_end && t > r->t_resp_end)
			break;
		w->t_done = t;
		if (r->t_first && !w->t_first_write && t >= r->t_first) {
			w->t_first_write = t;
			first_idx = i;
		}
	}
	if (!w->t_done)
		w->t_done = r->t_resp_end ? r->t_resp_end : (r->t_last ? r->t_last : r->t_admit);
	if (w->t_first_write) {
		w->tok = r->writes + first_idx;
		while (first_idx + w->n_tok < r->n_writes && w->tok[w->n_tok] <= w->t_done)
			w->n_tok++;
	}
}

/* The five phases from the marks arrive, admit, sched, first, last, done: a
 * phase whose start mark was reached lasts until the next mark reached, so
 * the non-null ones sum to e2e. A refused request is network in, then the
 * error response out. */
static void phases_fill(struct kpi_request_record *rec, const uint64_t m[6], bool rejected)
{
	int64_t *ph[5] = { &rec->net_in, &rec->queue, &rec->prefill, &rec->decode, &rec->net_out };

	if (rejected) {
		for (int i = 0; i < 5; i++)
			*ph[i] = KPI_NULL;
		rec->net_in = (int64_t)(m[1] - m[0]);
		rec->net_out = (int64_t)(m[5] - m[1]);
		return;
	}
	marks_phases(m, 6, ph);
}

/* The disaggregation fields of r's row (record.h); the join of the three
 * processes' rows makes the rest (disagg.c). */
static void pd_fill(const struct req *r, struct kpi_request_record *rec)
{
	rec->t_pd_admit = rec->t_kv_start = rec->t_kv_end = rec->t_pd_sched = KPI_NULL;
	rec->router_ns = rec->kv_transfer_ns = rec->decode_queue_ns = KPI_NULL;
	rec->kv_bytes = rec->kv_blocks = rec->kv_stream_ns = rec->slot_waiting_ahead = KPI_NULL;
	if (r->routed) {
		rec->pd_role = "router";
		rec->route_policy = kpi_route_policy_name(r->policy);
		memcpy(rec->decode_worker, r->decode_worker, sizeof(rec->decode_worker));
		memcpy(rec->prefill_worker, r->prefill_worker, sizeof(rec->prefill_worker));
		/* the router neither tokenizes nor counts what it relays: the
		 * decode worker's row tells */
		rec->prompt_tokens = rec->output_tokens = KPI_NULL;
		return;
	}
	if (r->kv_send || r->kv_recv) {
		rec->pd_role = r->kv_send ? "prefill" : "decode";
		rec->kv_bytes = (int64_t)r->kv_bytes;
		rec->kv_blocks = r->kv_blocks >= 0 ? r->kv_blocks : KPI_NULL;
		rec->t_kv_start = (int64_t)r->t_kv_start;
		if (r->kv_ended) {
			rec->kv_status = kpi_kv_status_name(r->kv_status);
			rec->kv_stream_ns = (int64_t)(r->t_kv_end - r->t_kv_start);
			if (r->kv_status == KPI_KV_OK)
				rec->t_kv_end = (int64_t)r->t_kv_end;
		}
		memcpy(rec->kv_peer, r->kv_peer, sizeof(rec->kv_peer));
	} else if (r->admitted && r->operation == KPI_OP_KV_PREFILL) {
		rec->pd_role = "prefill";       /* refused or failed before its first KV byte */
	}
	if (r->slot_waited) {
		rec->slot_wait = r->slot_running >= r->slot_max ? "slots" :
				 r->slot_needed > r->slot_free ? "blocks" :
				 r->slot_ahead > 0 ? "queue" : "none";
		rec->slot_waiting_ahead = r->slot_ahead;
	}
}

/* Build the row and publish it. */
/* The phase that ends at t_done (m[5]) of a request cut off before any
 * write: its length is unknown, not 0. */
static void last_phase_unknown(struct kpi_request_record *rec)
{
	int64_t *ph[5] = { &rec->net_in, &rec->queue, &rec->prefill, &rec->decode, &rec->net_out };

	for (int i = 4; i >= 0; i--)
		if (*ph[i] != KPI_NULL) {
			if (*ph[i] == 0)
				*ph[i] = KPI_NULL;
			break;
		}
}

static void req_complete(struct assembler *a, struct req *r)
{
	struct kpi_request_record rec;
	struct resp_writes w;
	uint64_t m[6];

	memset(&rec, 0, sizeof(rec));
	memcpy(rec.request_id, r->reqid, sizeof(rec.request_id));
	rec.pid = r->pid;
	rec.seq_id = r->has_id ? (int64_t)r->id : KPI_NULL;
	rec.direction = "in";
	memcpy(rec.sock_local, r->ends.local, sizeof(rec.sock_local));
	memcpy(rec.sock_peer, r->ends.peer, sizeof(rec.sock_peer));
	snprintf(rec.comm, sizeof(rec.comm), "%s", hop_link_comm(http_path_hops(a->http), r->pid));

	writes_scan(r, &w);
	if (!r->t_arrive)
		r->t_arrive = r->t_admit ? r->t_admit : w.t_done;
	m[0] = r->t_arrive;
	m[1] = r->t_admit;
	m[2] = r->t_sched;
	m[3] = r->t_first;
	m[4] = r->t_last;
	m[5] = w.t_done;
	/* cut off by its process's exit before any write: it ends at the last
	 * mark seen, and the phase up to that end is not known (NULL, not 0) */
	bool unwritten = r->cut_by_exit && !r->n_writes;
	for (int i = 0; unwritten && i < 5; i++)
		m[5] = m[i] ? m[i] : m[5];
	bool clamped = marks_clamp(m, 6);
	if (w.t_first_write && w.t_first_write < m[0]) {
		w.t_first_write = m[0];
		clamped = true;
	}
	if (clamped)
		a->st.clamped++;

	rec.t_arrive = (int64_t)m[0];
	rec.t_admit = opt(m[1]);
	rec.t_sched = opt(m[2]);
	rec.t_first = opt(m[3]);
	rec.t_last = opt(m[4]);
	rec.t_first_write = opt(w.t_first_write);
	rec.t_done = (int64_t)m[5];
	rec.e2e = (int64_t)(m[5] - m[0]);
	phases_fill(&rec, m, r->rejected);
	if (unwritten)
		last_phase_unknown(&rec);
	if (r->cut_by_exit)
		rec.end_reason = "target_exit";

	rec.ttft = w.t_first_write ? (int64_t)(w.t_first_write - m[0]) : KPI_NULL;
	rec.tpot = rec.itl_p50 = rec.itl_p99 = rec.itl_max = KPI_NULL;
	if (w.t_first_write && r->output_tokens > 1) {
		if (w.n_tok > 1)      /* streamed: from the token writes */
			rec.tpot = (int64_t)(w.t_done - w.t_first_write) / (r->output_tokens - 1);
		else if (m[3] && m[4])  /* one write for all tokens: the engine's pace */
			rec.tpot = (int64_t)(m[4] - m[3]) / (r->output_tokens - 1);
	}
	if (w.n_tok > 1)
		marks_itl(&rec, w.tok, w.n_tok);
	rec.prompt_tokens = r->admitted ? r->prompt : KPI_NULL;
	rec.output_tokens = r->finished ? r->output_tokens : (r->admitted ? 0 : KPI_NULL);
	rec.http_status = r->http_status ? r->http_status : KPI_NULL;
	rec.preemptions = r->preemptions;
	rec.srtt_us = r->srtt_us ? r->srtt_us : KPI_NULL;
	rec.runq_ns = r->runq0 && r->runq1 >= r->runq0 ? (int64_t)(r->runq1 - r->runq0) : KPI_NULL;
	rec.arrive_src = r->arrive_src;
	rec.finish_reason = r->finished ? kpi_finish_reason_name(r->finish_reason) : (r->cancelled ? "cancelled" : NULL);
	rec.reject_reason = r->rejected ? kpi_reject_reason_name(r->reject_reason) : NULL;
	rec.operation = r->admitted ? kpi_operation_name(r->operation) : NULL;
	rec.token_writes = w.tok;
	rec.n_token_writes = w.n_tok;
	rec.source = "usdt";
	rec.t_req_read = rec.t_resp_start = rec.server_wait = rec.content_events = KPI_NULL;
	rec.stream = rec.max_tokens = KPI_NULL;
	rec.prefix_cache = r->prefix_hit;
	rec.cached_prompt_tokens = r->prefix_hit ? r->cached_tokens : KPI_NULL;
	rec.engine_prompt_tokens = rec.prefill_steps = KPI_NULL;
	pd_fill(r, &rec);
	/* the probes see tokens, not the events they travel in: no reasoning split */
	rec.ttfo = rec.reasoning_ns = rec.reasoning_events = rec.answer_events = rec.ttftc = KPI_NULL;
	rec.reasoning_tokens = rec.retry = rec.call_error = rec.escalation_added = KPI_NULL;

	/* a router's row waits for its workers' rows (agent/track/disagg.c),
	 * which tell its phases; it keeps every write of its response, since
	 * the first token's is known only from the decode worker's marks */
	size_t n_resp = 0;
	while (n_resp < r->n_writes && r->writes[n_resp] <= w.t_done)
		n_resp++;
	disagg_request(a->disagg, &rec, r->writes, n_resp);
	if (r->rejected)
		a->st.rejected++;
	req_unlink(a, r);
	req_free(r);
}

/* Every request record on the bus (the HTTP path's and the llama.cpp join's
 * too) counts in its process's next sample. */
static void count_request(void *ctx, const struct kpi_request_record *rec)
{
	struct assembler *a = ctx;
	struct pidstate *ps = pidstate(a, rec->pid);

	a->st.requests++;
	if (ps) {
		ps->completed++;
		ps->out_tokens += rec->output_tokens != KPI_NULL ? (int)rec->output_tokens : 0;
		if (rec->http_status == 429)
			ps->rejections++;
		else if (rec->http_status >= 400)
			ps->errors++;
	}
}

/* A request ends with its response, or with its connection.  One that never
 * reached the engine or a response (a client that sent bytes and left) is
 * not a request and leaves no row. */
static void req_end(struct assembler *a, struct req *r)
{
	if (r->admitted || r->rejected) {
		req_complete(a, r);
	} else {
		a->st.orphans++;
		req_unlink(a, r);
		req_free(r);
	}
}

/* ---- events: one handler per record type (bpf/kpi_event.h) ---------------- */

static void on_step_begin(struct assembler *a, const struct kpi_ev_step_begin *e)
{
	struct id_key k = { .pid = e->h.pid, .id = e->step };
	struct pidstate *ps = pidstate(a, e->h.pid);
	struct step *s;

	HASH_FIND(hh, a->steps, &k, sizeof(k), s);
	if (!s) {
		if (!(s = calloc(1, sizeof(*s))))
			abort();
		s->key = k;
		HASH_ADD(hh, a->steps, key, sizeof(s->key), s);
	}
	s->rec = (struct kpi_step_record){ .pid = e->h.pid, .step_id = e->step, .t_start = e->h.ts,
		.prefill_tokens = e->prefill_tokens, .decode_seqs = e->decode_seqs,
		.kv_used = e->kv_used, .kv_free = e->kv_free };
	if (ps) {
		ps->kv_used = e->kv_used;
		ps->kv_free = e->kv_free;
	}
}

static void on_step_end(struct assembler *a, const struct kpi_ev_step_end *e)
{
	struct id_key k = { .pid = e->h.pid, .id = e->step };
	struct step *s;

	HASH_FIND(hh, a->steps, &k, sizeof(k), s);
	if (!s)
		return;
	s->rec.t_end = e->h.ts;
	bus_step(a->bus, &s->rec);
	HASH_DEL(a->steps, s);
	free(s);
}
static void runq_by_add(struct pidstate *ps, uint32_t pid, const char *comm, uint64_t ns)
{
	int i;

	for (i = 0; i < ps->n_runq_by; i++)
		if (ps->runq_by[i].pid == pid)  /* by process: the comm of its first thread seen */
			break;
	if (i == RUNQ_BY_SLOTS) {
		/* full: the smallest so far goes to the rest, unless this wait
		 * is smaller still (a process that keeps delaying the target
		 * keeps its slot) */
		int min = 0;
		for (int k = 1; k < RUNQ_BY_SLOTS; k++)
			if (ps->runq_by[k].ns < ps->runq_by[min].ns)
				min = k;
		if (ns < ps->runq_by[min].ns) {
			ps->runq_by_rest += ns;
			return;
		}
		ps->runq_by_rest += ps->runq_by[min].ns;
		i = min;
	} else if (i == ps->n_runq_by) {
		ps->n_runq_by++;
	} else {
		ps->runq_by[i].ns += ns;
		return;
	}
	ps->runq_by[i] = (struct kpi_runq_by){ .pid = pid, .ns = ns };
	if (comm[0])
		snprintf(ps->runq_by[i].comm, sizeof(ps->runq_by[i].comm), "%.*s",
			 (int)sizeof(ps->runq_by[i].comm) - 1, comm);
	else
		/* the raw_tp flavour's RUNQ_BY events carry no comm: read once per
		 * process and sample, within a flush interval of the wait */
		target_comm((pid_t)pid, ps->runq_by[i].comm, sizeof(ps->runq_by[i].comm));
}

static void on_runq_by(struct assembler *a, const struct kpi_ev_runq_by *e)
{
	struct pidstate *ps = pidstate(a, e->h.pid);
	char comm[sizeof(e->comm) + 1];

	if (!ps)
		return;
	memcpy(comm, e->comm, sizeof(e->comm));
	comm[sizeof(e->comm)] = 0;
	runq_by_add(ps, e->by_tgid, comm, e->wait_ns);
}

static int runq_by_cmp(const void *x, const void *y)
{
	const struct kpi_runq_by *a = x, *b = y;
	return a->ns < b->ns ? 1 : a->ns > b->ns ? -1 : (a->pid > b->pid) - (a->pid < b->pid);
}

/* The sample's share of the waits behind other processes: the largest
 * KPI_RUNQ_BY_MAX, then one entry for the rest. */
static void runq_by_take(struct pidstate *ps, struct kpi_sample_record *s)
{
	uint64_t rest = ps->runq_by_rest;

	qsort(ps->runq_by, (size_t)ps->n_runq_by, sizeof(ps->runq_by[0]), runq_by_cmp);
	for (int i = 0; i < ps->n_runq_by; i++) {
		if (i < KPI_RUNQ_BY_MAX)
			s->runq_by[s->n_runq_by++] = ps->runq_by[i];
		else
			rest += ps->runq_by[i].ns;
	}
	if (rest)
		s->runq_by[s->n_runq_by++] = (struct kpi_runq_by){ .pid = KPI_RUNQ_BY_REST, .ns = rest };
	ps->n_runq_by = 0;
	ps->runq_by_rest = 0;
}

static void on_arrive(struct assembler *a, const struct kpi_ev_arrive *e)
{
	struct req *r = find_conn(a, e->h.pid, e->fd);

	if (r)  /* previous request on this connection never ended cleanly */
		req_end(a, r);
	r = req_new(a, e->h.pid, e->fd, e->h.ts);
	r->t_read = e->t_read;
	r->arrive_src = (int)e->src;
	r->srtt_us = (int)e->srtt_us;
	r->runq0 = e->runq_ns;
	if (e->flags & KPI_ARRIVE_BEFORE_ATTACH)
		a->st.before_attach++;
}

/* The request an ADMIT or REJECT names: the connection's, unless none was
 * seen arriving (attached mid-request, or a drop) or it was already decided. */
static struct req *req_at_admission(struct assembler *a, uint32_t pid, int fd, uint64_t ts,
				    const char *reqid)
{
	struct req *r = fd >= 0 ? find_conn(a, pid, fd) : NULL;

	if (!r || r->admitted || r->rejected) {
		if (r)
			req_end(a, r);
		r = req_new(a, pid, fd, 0);
	}
	memcpy(r->reqid, reqid, sizeof(r->reqid));
	r->reqid[KPI_REQID_LEN - 1] = 0;
	r->t_admit = ts;
	return r;
}

static void on_admit(struct assembler *a, const struct kpi_ev_admit *e)
{
	struct req *r = req_at_admission(a, e->h.pid, e->fd, e->h.ts, e->reqid);

	r->admitted = true;
	r->id = e->id;
	r->has_id = true;
	r->prompt = e->prompt_tokens;
	r->max_tokens = e->max_tokens;
	r->operation = e->operation;
	id_link(a, r);
	queue_enter(a, r);
}

static void on_reject(struct assembler *a, const struct kpi_ev_reject *e)
{
	struct req *r = e->fd >= 0 ? find_conn(a, e->h.pid, e->fd) : NULL;

	/* an admitted request that failed before its engine finished it (a
	 * router's upstream failed, a decode worker's KV transfer failed, the
	 * engine refused it): the same request, now answered with an error */
	if (r && r->admitted && !r->rejected && !r->finished &&
	    !strncmp(r->reqid, e->reqid, sizeof(r->reqid))) {
		r->rejected = true;
		r->http_status = e->http_status;
		r->reject_reason = e->reason;
		return;
	}
	r = req_at_admission(a, e->h.pid, e->fd, e->h.ts, e->reqid);

	r->rejected = true;
	r->http_status = e->http_status;
	r->reject_reason = e->reason;
}

/* SCHED, FIRST, PREEMPT, CANCEL: a mark on the request with that id. */
static void on_req_mark(struct assembler *a, const struct kpi_ev_req *e)
{
	struct req *r = find_id(a, e->h.pid, e->id);
	struct pidstate *ps;

	if (!r) {
		orphan_event(a, e->h.pid, e->id);
		return;
	}
	switch (e->h.type) {
	case KPI_EV_SCHED:
		if (!r->t_sched)
			r->t_sched = e->h.ts;
		queue_leave(a, r);
		break;
	case KPI_EV_FIRST:
		if (!r->t_first)
			r->t_first = e->h.ts;
		break;
	case KPI_EV_PREEMPT:
		r->preemptions++;
		if ((ps = pidstate(a, e->h.pid)))
			ps->preemptions++;
		break;
	case KPI_EV_CANCEL:
		r->cancelled = true;
		queue_leave(a, r);
		break;
	}
}

static void on_finish(struct assembler *a, const struct kpi_ev_finish *e)
{
	struct req *r = find_id(a, e->h.pid, e->id);

	if (!r) {
		orphan_event(a, e->h.pid, e->id);
		return;
	}
	r->finished = true;
	queue_leave(a, r);
	r->t_last = e->h.ts;
	r->output_tokens = e->output_tokens;
	r->finish_reason = e->finish_reason;
	/* a request whose connection closed completes with its last engine event */
	if (r->fd < 0)
		req_end(a, r);
}

static void on_write(struct assembler *a, const struct kpi_ev_write *e)
{
	struct req *r = find_conn(a, e->h.pid, e->fd);
	size_t n = e->n;

	if (!r || n < 1 || n > KPI_WRITE_BATCH)
		return;
	if (r->n_writes + n > r->cap_writes) {
		r->cap_writes = r->cap_writes ? r->cap_writes * 2 : 16;
		r->writes = realloc(r->writes, r->cap_writes * sizeof(uint64_t));
		if (!r->writes)
			abort();
	}
	memcpy(r->writes + r->n_writes, e->writes, n * sizeof(uint64_t));
	r->n_writes += n;
}

static void on_resp_end(struct assembler *a, const struct kpi_ev_resp_end *e)
{
	struct req *r = find_conn(a, e->h.pid, e->fd);

	if (!r && e->id && !(r = find_id(a, e->h.pid, e->id)))
		orphan_event(a, e->h.pid, e->id);
	if (!r)
		return;
	r->t_resp_end = e->h.ts;
	r->http_status = e->http_status;
	r->runq1 = e->runq_ns;
	if (r->kv_send && !r->kv_ended) {
		/* a prefill worker fires kv__send_end right after response__end:
		 * the row waits for it, off the connection (its next request) */
		conn_unlink(a, r);
		r->resp_ended = true;
		return;
	}
	req_end(a, r);
}

static void on_close(struct assembler *a, const struct kpi_ev_close *e)
{
	struct req *r = find_conn(a, e->h.pid, e->fd);

	if (!r)
		return;
	/* the connection went away before response__end: keep the request
	 * findable by id so the engine's last events land */
	conn_unlink(a, r);
	r->fd = -1;
	if (!r->has_id || r->finished)
		req_end(a, r);
	else
		r->cancelled = true;
}

/* ROUTE: a router's admission of the request read on fd, with the workers
 * it chose; the join of the three processes' rows expects it from now. */
static void on_route(struct assembler *a, const struct kpi_ev_route *e)
{
	struct req *r = req_at_admission(a, e->h.pid, e->fd, e->h.ts, e->reqid);

	r->admitted = r->routed = true;
	r->id = e->id;
	r->has_id = true;
	r->policy = e->policy;
	snprintf(r->decode_worker, sizeof(r->decode_worker), "%.*s", (int)sizeof(e->decode) - 1, e->decode);
	snprintf(r->prefill_worker, sizeof(r->prefill_worker), "%.*s", (int)sizeof(e->prefill) - 1,
		 e->prefill);
	id_link(a, r);
	disagg_routed(a->disagg, r->pid, r->reqid, e->h.ts, r->decode_worker, r->prefill_worker);
}

/* The request with that id, or an orphan counted. */
static struct req *req_by_id(struct assembler *a, uint32_t pid, uint64_t id)
{
	struct req *r = find_id(a, pid, id);

	if (!r)
		orphan_event(a, pid, id);
	return r;
}

static void on_kv_start(struct assembler *a, const struct kpi_ev_kv_start *e)
{
	struct req *r = req_by_id(a, e->h.pid, e->id);

	if (!r)
		return;
	if (e->h.type == KPI_EV_KV_SEND_START) {
		r->kv_send = true;
	} else {
		r->kv_recv = true;
		disagg_fetching(a->disagg, r->pid, r->reqid, e->h.ts);
	}
	r->t_kv_start = e->h.ts;
	r->kv_bytes = e->bytes;
	r->kv_blocks = e->blocks;
	snprintf(r->kv_peer, sizeof(r->kv_peer), "%.*s", (int)sizeof(e->peer) - 1, e->peer);
}

static void on_kv_end(struct assembler *a, const struct kpi_ev_kv_end *e)
{
	struct req *r = req_by_id(a, e->h.pid, e->id);

	if (!r)
		return;
	if (!r->kv_send && !r->kv_recv) {
		/* failed before its stream began (refused, unreachable): no start */
		r->kv_recv = e->h.type == KPI_EV_KV_RECV_END;
		r->kv_send = !r->kv_recv;
		r->t_kv_start = e->h.ts;
		r->kv_blocks = e->blocks;
	}
	r->kv_ended = true;
	r->t_kv_end = e->h.ts;
	r->kv_bytes = e->bytes;
	r->kv_status = e->status;
	if (e->blocks >= 0)
		r->kv_blocks = e->blocks;
	if (r->resp_ended)
		req_end(a, r);
}

static void on_slot_wait(struct assembler *a, const struct kpi_ev_slot_wait *e)
{
	struct req *r = req_by_id(a, e->h.pid, e->id);

	if (!r)
		return;
	r->slot_waited = true;
	r->slot_ahead = e->waiting_ahead;
	r->slot_needed = e->blocks_needed;
	r->slot_free = e->blocks_free;
	r->slot_running = e->running;
	r->slot_max = e->max_running;
}

static void on_prefix_hit(struct assembler *a, const struct kpi_ev_prefix_hit *e)
{
	struct req *r = req_by_id(a, e->h.pid, e->id);

	if (!r)
		return;
	r->prefix_hit = true;
	r->cached_tokens = e->cached_tokens;
}

int assemble_event(struct assembler *a, const void *rec, size_t size)
{
	const union kpi_event *e = rec;
	unsigned int want;

	if (size < sizeof(e->h) || !(want = kpi_event_size(e->h.type)) || size < want) {
		a->st.malformed++;
		return -1;
	}
	a->st.events++;
	switch (e->h.type) {
	case KPI_EV_ARRIVE: on_arrive(a, &e->arrive); break;
	case KPI_EV_ADMIT: on_admit(a, &e->admit); break;
	case KPI_EV_REJECT: on_reject(a, &e->reject); break;
	case KPI_EV_SCHED:
	case KPI_EV_FIRST:
	case KPI_EV_PREEMPT:
	case KPI_EV_CANCEL: on_req_mark(a, &e->req); break;
	case KPI_EV_FINISH: on_finish(a, &e->finish); break;
	case KPI_EV_STEP_BEGIN: on_step_begin(a, &e->step_begin); break;
	case KPI_EV_STEP_END: on_step_end(a, &e->step_end); break;
	case KPI_EV_RUNQ_BY: on_runq_by(a, &e->runq_by); break;
	case KPI_EV_WRITE: on_write(a, &e->write); break;
	case KPI_EV_RESP_END: on_resp_end(a, &e->resp_end); break;
	case KPI_EV_CLOSE: on_close(a, &e->close); break;
	case KPI_EV_ROUTE: on_route(a, &e->route); break;
	case KPI_EV_KV_SEND_START:
	case KPI_EV_KV_RECV_START: on_kv_start(a, &e->kv_start); break;
	case KPI_EV_KV_SEND_END:
	case KPI_EV_KV_RECV_END: on_kv_end(a, &e->kv_end); break;
	case KPI_EV_SLOT_WAIT: on_slot_wait(a, &e->slot_wait); break;
	case KPI_EV_PREFIX_HIT: on_prefix_hit(a, &e->prefix_hit); break;
	case KPI_EV_PAYLOAD:
	case KPI_EV_TLS_PAYLOAD:
	case KPI_EV_HTTP_CLOSE:
	case KPI_EV_HTTP_SENT:
	case KPI_EV_SOCK:
		if (http_path_event(a->http, e, size)) {
			a->st.events--;
			a->st.malformed++;
			return -1;
		}
		break;
	}
	return 0;
}

/* The target exited before response__end fired.  A request is complete when
 * its client can have had all of it: the engine finished it (or admission
 * rejected it) and the daemon wrote to the connection after that.  Anything
 * else was cut off by the exit and its client saw an error or a reset. */
static bool req_written_out(const struct req *r)
{
	uint64_t after = r->rejected ? r->t_admit : r->finished ? r->t_last : 0;

	if (!after)
		return false;
	for (size_t i = 0; i < r->n_writes; i++)
		if (r->writes[i] >= after)
			return true;
	return false;
}

/* Completes r if its client had all of it; else it was cut off: a request
 * the engine saw (admitted or rejected) is kept with the marks seen until
 * the exit and end_reason target_exit, one that only arrived is dropped;
 * both are counted. */
static void req_forget(struct assembler *a, struct req *r)
{
	if (req_written_out(r)) {
		a->st.exit_completed++;
		req_complete(a, r);
		return;
	}
	a->st.exit_cut++;
	if (r->admitted || r->rejected) {
		r->cut_by_exit = true;
		req_complete(a, r);
		return;
	}
	req_unlink(a, r);
	req_free(r);
}

void assemble_flush(struct assembler *a, uint64_t now, bool final)
{
	http_path_flush(a->http, now, final);
}

bool assemble_http_in_flight(void *a)
{
	return http_path_in_flight(((struct assembler *)a)->http);
}

const struct split_stats *assemble_split_stats(const struct assembler *a)
{
	return http_path_split_stats(a->http);
}

const struct http2_track_stats *assemble_h2_stats(const struct assembler *a)
{
	return http_path_h2_stats(a->http);
}

void assemble_forget_pid(struct assembler *a, uint32_t pid)
{
	struct req *r, *tmp;
	struct step *s, *stmp;

	HASH_ITER(hh_conn, a->by_conn, r, tmp)
		if (r->pid == pid)
			req_forget(a, r);
	HASH_ITER(hh_id, a->by_id, r, tmp)
		if (r->pid == pid)
			req_forget(a, r);
	http_path_forget_pid(a->http, pid);
	HASH_ITER(hh, a->steps, s, stmp)
		if (s->rec.pid == pid) {
			HASH_DEL(a->steps, s);
			free(s);
		}
	for (int i = 0; i < a->n_pids; i++)
		if (a->pids[i].pid == pid) {
			a->pids[i] = a->pids[--a->n_pids];
			break;
		}
}

/* ---- samples and the in-flight view -------------------------------------------- */

struct count_ctx {
	uint32_t pid;
	int running;
};

static const char *req_state(const struct req *r)
{
	if (!r->admitted && !r->rejected)
		return "arriving";
	if (r->rejected || r->finished)
		return "writing";
	if (!r->t_sched)
		return "queued";
	if (!r->t_first)
		return "prefill";
	return "decode";
}

static void count_fn(void *ctx, const struct kpi_inflight_record *r)
{
	struct count_ctx *c = ctx;
	if (r->pid != c->pid)
		return;
	if (!strcmp(r->state, "prefill") || !strcmp(r->state, "decode"))
		c->running++;
}

void assemble_sample(struct assembler *a, uint64_t now, const uint32_t *pids,
		     const struct kpi_runq *runq, int n, uint64_t drops)
{
	http_path_expire(a->http, now);
	disagg_expire(a->disagg, now);
	for (int i = 0; i < n; i++) {
		struct pidstate *ps = pidstate(a, pids[i]);
		struct count_ctx cc = { .pid = pids[i] };
		struct kpi_sample_record s = { .pid = pids[i], .t = now };
		double dt;

		if (!ps)
			continue;
		if (!ps->sampled) {
			/* the first call only sets the baseline */
			ps->sampled = true;
			ps->last_t = now;
			ps->last_runq = runq[i].total;
			ps->last_runq_self = runq[i].self;
			ps->last_runq_idle = runq[i].idle;
			ps->n_runq_by = 0;
			ps->runq_by_rest = 0;
			/* drops since the previous sample of any pid still count: a
			 * ring that overflowed before this pid's first sample (the
			 * agent was stopped right after attaching) is not hidden */
			ps->last_drops = a->drops_before;
			ps->completed = ps->out_tokens = ps->preemptions = ps->rejections = ps->errors = 0;
			ps->queued_peak = ps->queued;
			continue;
		}
		dt = (double)(now - ps->last_t) / 1e9;
		if (dt <= 0)
			continue;
		assemble_foreach_inflight(a, count_fn, &cc);
		s.queue_depth = ps->queued_peak;
		ps->queued_peak = ps->queued;
		s.running = cc.running;
		s.kv_used = ps->kv_used;
		s.kv_free = ps->kv_free;
		s.kv_usage = ps->kv_used != KPI_NULL && ps->kv_used + ps->kv_free > 0
			? (double)ps->kv_used / (double)(ps->kv_used + ps->kv_free) : -1;
		s.requests_per_s = ps->completed / dt;
		s.output_tokens_per_s = ps->out_tokens / dt;
		s.preemptions = ps->preemptions;
		s.rejections = ps->rejections;
		s.errors = ps->errors;
		s.drops = drops - ps->last_drops;
		s.runq_ns = runq[i].total - ps->last_runq;
		s.runq_self_ns = runq[i].self - ps->last_runq_self;
		s.runq_idle_ns = runq[i].idle - ps->last_runq_idle;
		if (s.runq_idle_ns)
			runq_by_add(ps, 0, "(idle)", s.runq_idle_ns);
		runq_by_take(ps, &s);
		bus_sample(a->bus, &s);
		ps->last_t = now;
		ps->last_runq = runq[i].total;
		ps->last_runq_self = runq[i].self;
		ps->last_runq_idle = runq[i].idle;
		ps->last_drops = drops;
		ps->completed = ps->out_tokens = ps->preemptions = ps->rejections = ps->errors = 0;
	}
	a->drops_before = drops;
}

void assemble_release_held(struct assembler *a)
{
	disagg_expire(a->disagg, UINT64_MAX);
}

static void visit(struct req *r, void (*fn)(void *, const struct kpi_inflight_record *), void *ctx)
{
	struct kpi_inflight_record f = {
		.request_id = r->reqid, .pid = r->pid, .state = req_state(r),
		.t_arrive = (int64_t)(r->t_arrive ? r->t_arrive : r->t_admit),
		.t_admit = opt(r->t_admit), .t_sched = opt(r->t_sched), .t_first = opt(r->t_first),
		.prompt_tokens = r->admitted ? r->prompt : KPI_NULL,
		.output_writes = (int)r->n_writes,
	};
	fn(ctx, &f);
}

void assemble_foreach_inflight(struct assembler *a,
			       void (*fn)(void *ctx, const struct kpi_inflight_record *r), void *ctx)
{
	struct req *r, *tmp;

	HASH_ITER(hh_conn, a->by_conn, r, tmp)
		visit(r, fn, ctx);
	/* requests whose connection is gone are only in by_id */
	HASH_ITER(hh_id, a->by_id, r, tmp)
		if (r->fd < 0)
			visit(r, fn, ctx);
}

static void each_inflight(void *ctx, void (*fn)(void *, const struct kpi_inflight_record *),
			  void *fctx)
{
	assemble_foreach_inflight(ctx, fn, fctx);
}

struct kpi_inflight_view assemble_inflight_view(struct assembler *a)
{
	return (struct kpi_inflight_view){ .ctx = a, .each = each_inflight,
					   .before_attach = a->st.before_attach };
}
