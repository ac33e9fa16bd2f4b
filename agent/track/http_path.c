/* http_path.c - turns an HTTP-mode target's socket payloads into request
 * records: a tracker per connection, its exchanges mapped onto the trace's
 * marks; on the connections it made itself (KPI_ROLE_CLIENT) the same parser
 * the other way round, each exchange an outbound hop (hop_link.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include <sys/random.h>
#include "bus.h"
#include "hop_graph.h"
#include "hop_link.h"
#include "http/http2_track.h"
#include "http/http_reason.h"
#include "http_path.h"
#include "marks.h"
#include "relay_link.h"
#include "trajectory.h"
#include "split_infer.h"

/* Reads whose first unread segment time is kept, to move a served exchange's
 * t_arrive (the read with its first byte) back to that segment, and to end a
 * call when its answer arrived (the read that completed it). */
#define SEG_RING 8

struct http_conn {
	UT_hash_handle hh;
	uint64_t key;                   /* pid << 32 | fd */
	struct http_path *hp;
	struct http_track *t;           /* HTTP/1.1, or */
	struct http2_track *h2;         /* HTTP/2: one of them from the connection's first bytes */
	uint32_t pid;
	int fd;
	bool client;                    /* KPI_ROLE_CLIENT: writes are requests, reads responses */
	uint32_t tid;                   /* of the payload being fed */
	struct hop_ends ends;
	uint32_t srtt_us;               /* at the last read that carried it */
	uint64_t read_ts[SEG_RING], seg_ts[SEG_RING];
	unsigned n_reads;               /* reads ever put in the ring */
	bool seen;                      /* bytes came: the next ones are not its first */
	bool tls;                       /* TLS: its plaintext comes from the SSL calls,
					 * its socket bytes are ciphertext and not parsed */
	struct held_write *held;        /* writes held back (TCP, a memory BIO), oldest first */
	struct held_write **held_tail;
	unsigned close_by;              /* a close that came while writes were held: by + 1 */
	uint64_t close_ts;
};

/* A served connection's write that TCP did not put on the wire at once
 * (KPI_PAYLOAD_F_UNSENT), or whose TLS record a memory BIO keeps until the
 * socket's next write (KPI_PAYLOAD_F_LATER), and those after it: fed to the
 * tracker when the bytes went out, timed there (the client saw them then). */
#define HELD_MAX_NS 1000000000ULL        /* held writes with no HTTP_SENT this long go */

struct held_write {
	struct held_write *next;
	uint64_t ts;
	uint32_t moved, captured;
	uint8_t data[];
};

struct http_path {
	struct bus *bus;
	struct http_conn *conns;
	struct http_track_stats totals;
	struct http2_track_stats h2;
	uint64_t ids_made;
	struct http_tls_query tls_q;
	struct http_tls_stats tls;
	struct hop_link *hops;
	struct hop_graph *graph;
	struct relay_link *relay;       /* calls held for the response-id rule */
	struct trajectory *tasks;
	struct split_infer *split;      /* the inferred engine split of inbound streams */
	uint64_t timeout_ns;
	uint64_t digest_key;            /* the request-body fingerprints' secret (http_digest.h) */
};

static void integration_out(void *ctx, const struct kpi_integration_record *r)
{
	bus_integration(ctx, r);
}

/* Every request record on the bus is a hop the graph keeps. */
static void graph_in(void *ctx, const struct kpi_request_record *r)
{
	hop_graph_in(ctx, r);
}

static void task_out(void *ctx, const struct kpi_task_record *k)
{
	bus_task(ctx, k);
}

static void relay_release(void *ctx, struct kpi_request_record *rec);

struct http_path *http_path_new(struct bus *bus)
{
	struct http_path *hp = calloc(1, sizeof(*hp));

	if (!hp)
		return NULL;
	hp->bus = bus;
	hp->timeout_ns = HTTP_PATH_TIMEOUT_NS;
	/* a secret of this run: a fingerprint means nothing outside it */
	if (getrandom(&hp->digest_key, sizeof(hp->digest_key), 0) != sizeof(hp->digest_key))
		hp->digest_key = (uint64_t)(uintptr_t)hp ^ 0x9e3779b97f4a7c15ULL;
	hp->split = split_infer_new();
	if (!(hp->hops = hop_link_new()) || !(hp->graph = hop_graph_new(integration_out, bus)) ||
	    !(hp->relay = relay_link_new(relay_release, hp)) ||
	    !(hp->tasks = trajectory_new(task_out, bus, 0)) ||
	    bus_add(bus, &(struct kpi_sink){ .ctx = hp->graph, .request = graph_in })) {
		http_path_free(hp);
		return NULL;
	}
	return hp;
}

static void feed(struct http_conn *c, bool req_dir, const uint8_t *data, size_t captured,
		 size_t moved, uint64_t ts)
{
	enum http_dir dir = req_dir ? HTTP_IN : HTTP_OUT;

	if (c->h2)
		http2_track_feed(c->h2, dir, data, captured, moved, ts);
	else if (c->t)
		http_track_feed(c->t, dir, data, captured, moved, ts);
}

/* The held writes go to the tracker, none timed before ts: their bytes were
 * on the wire by then (ts 0: at their own times, nothing said when). */
static void held_flush(struct http_conn *c, uint64_t ts)
{
	while (c->held) {
		struct held_write *w = c->held;
		c->held = w->next;
		feed(c, c->client, w->data, w->captured, w->moved, w->ts > ts ? w->ts : ts);
		free(w);
	}
	c->held_tail = &c->held;
}

/* Keeps a response write back (false: no memory, fed at once). */
static bool held_add(struct http_conn *c, const struct kpi_ev_payload *p)
{
	struct held_write *w = malloc(sizeof(*w) + p->captured);

	if (!w)
		return false;
	w->next = NULL;
	w->ts = p->h.ts;
	w->moved = p->moved;
	w->captured = p->captured;
	memcpy(w->data, p->data, p->captured);
	if (!c->held_tail)
		c->held_tail = &c->held;
	*c->held_tail = w;
	c->held_tail = &w->next;
	return true;
}

static void conn_free(struct http_path *hp, struct http_conn *c)
{
	held_flush(c, 0);
	hop_link_close_conn(hp->hops, c->pid, c->fd);
	HASH_DEL(hp->conns, c);
	http_track_free(c->t);
	http2_track_free(c->h2);
	free(c);
}

void http_path_free(struct http_path *hp)
{
	struct http_conn *c, *tmp;

	if (!hp)
		return;
	HASH_ITER(hh, hp->conns, c, tmp)
		conn_free(hp, c);
	hop_link_free(hp->hops);
	hop_graph_free(hp->graph);
	relay_link_free(hp->relay);
	trajectory_free(hp->tasks);
	split_infer_free(hp->split);
	free(hp);
}

const struct http_track_stats *http_path_stats(const struct http_path *hp)
{
	return &hp->totals;
}

const struct http2_track_stats *http_path_h2_stats(const struct http_path *hp)
{
	return &hp->h2;
}

void http_path_set_tls(struct http_path *hp, struct http_tls_query q)
{
	hp->tls_q = q;
}

const struct http_tls_stats *http_path_tls_stats(const struct http_path *hp)
{
	return &hp->tls;
}

/* The first bytes of a connection that a TLS record starts with (handshake,
 * change cipher spec, alert or application data of TLS 1.0-1.3): 1 they are
 * one, 0 they are not (HTTP/1.1 starts with a method or "HTTP/"), -1 too few
 * to tell (nginx peeks at one byte before its handshake). */
static int tls_record_start(const uint8_t *d, size_t n)
{
	if (!n)
		return -1;
	if (d[0] < 0x14 || d[0] > 0x17)
		return 0;
	if (n < 3)
		return -1;
	return d[1] == 0x03 && d[2] <= 0x04;
}

/* A PAYLOAD's bytes: false when they are ciphertext, or too few to tell,
 * which are not parsed.  A connection is TLS from its first bytes; a process
 * whose libssl is not probed has its TLS connections counted (and named once
 * by the query). */
static bool cleartext(struct http_path *hp, struct http_conn *c, const struct kpi_ev_payload *p)
{
	if (!c->seen) {
		int tls = tls_record_start(p->data, p->captured);
		if (tls < 0)
			return false;
		c->seen = true;
		if (tls) {
			c->tls = true;
			hp->tls.conns++;
			if (!hp->tls_q.readable || !hp->tls_q.readable(hp->tls_q.ctx, c->pid))
				hp->tls.unreadable++;
		}
	}
	if (c->tls)
		hp->tls.cipher_skipped++;
	return !c->tls;
}

struct hop_link *http_path_hops(struct http_path *hp)
{
	return hp->hops;
}

static int64_t opt(uint64_t t)
{
	return t ? (int64_t)t : KPI_NULL;
}

static int64_t opt_count(int64_t v)
{
	return v >= 0 ? v : KPI_NULL;
}

/* The record keeps a pointer: finish reasons are named by one static string
 * each ("other" for a name this table lacks). */
static const char *finish_name(const char *s)
{
	static const char *const known[] = { "stop", "length", "tool_calls", "content_filter",
					     "function_call", "error", "cancelled", "abort" };

	if (!s[0])
		return NULL;
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (!strcmp(s, known[i]))
			return known[i];
	return "other";
}

static const char *operation_of(const char *path)
{
	size_t n = strlen(path);

	if (n >= 17 && !strcmp(path + n - 17, "/chat/completions"))
		return "chat";
	if (n >= 12 && !strcmp(path + n - 12, "/completions"))
		return "text_completion";
	return NULL;
}

/* The first data segment of the read at t_read, when tcp_probe saw it. */
static uint64_t seg_of(const struct http_conn *c, uint64_t t_read)
{
	unsigned n = c->n_reads < SEG_RING ? c->n_reads : SEG_RING;

	for (unsigned i = 0; i < n; i++) {
		unsigned k = (c->n_reads - 1 - i) % SEG_RING;
		if (c->read_ts[k] == t_read)
			return c->seg_ts[k] && c->seg_ts[k] <= t_read ? c->seg_ts[k] : 0;
	}
	return 0;
}

/* A call's answer: the latest segment any of its reads (from..to) carried. A
 * read can carry a segment that came while it ran, after the bytes it
 * returned, and leave the read that completes the answer none. */
static uint64_t seg_latest(const struct http_conn *c, uint64_t from, uint64_t to)
{
	unsigned n = c->n_reads < SEG_RING ? c->n_reads : SEG_RING;
	uint64_t best = 0;

	for (unsigned i = 0; i < n; i++) {
		unsigned k = (c->n_reads - 1 - i) % SEG_RING;
		if (c->read_ts[k] < from)
			break;
		if (c->read_ts[k] <= to && c->seg_ts[k] <= to && c->seg_ts[k] > best)
			best = c->seg_ts[k];
	}
	return best;
}

/* The marks, phases and TTFT of x; seg: its first segment's arrival (0: none). */
static void times_fill(struct kpi_request_record *r, const struct http_exchange *x, uint64_t seg)
{
	bool content = x->content_events > 0 && x->t_first_content;
	uint64_t m[5];
	int64_t *ph[4] = { &r->net_in, &r->server_wait, &r->decode, &r->net_out };

	/* arrive, request read, end of the server's wait (first content event,
	 * else the status line), last content event, done */
	m[0] = seg ? seg : x->t_arrive ? x->t_arrive : (x->t_req_read ? x->t_req_read : x->t_done);
	m[1] = x->t_req_read;
	m[2] = content ? x->t_first_content : x->t_resp_start;
	/* without content events the response's first write ends the wait
	 * and net_out follows it: decode is a zero-length phase, then NULL */
	m[3] = content ? x->t_last_content : m[2];
	m[4] = x->t_done;
	if (m[1] && m[2] && m[1] > m[2])
		m[1] = m[2];    /* answered before the body was read */
	bool req_cut = !m[1];
	if (req_cut)
		m[1] = m[0];
	marks_clamp(m, 5);
	marks_phases(m, 5, ph);
	if (req_cut)
		r->net_in = KPI_NULL;
	if (!content)
		r->decode = KPI_NULL;
	r->queue = r->prefill = KPI_NULL;

	r->t_arrive = (int64_t)m[0];
	r->t_admit = r->t_sched = r->t_first = r->t_last = KPI_NULL;
	r->t_first_write = content ? (int64_t)m[2] : KPI_NULL;
	r->t_done = (int64_t)m[4];
	r->e2e = (int64_t)(m[4] - m[0]);
	r->t_req_read = req_cut ? KPI_NULL : (int64_t)m[1];
	r->t_resp_start = opt(x->t_resp_start);
	/* TTFT of a stream; time to the first byte of anything else */
	r->ttft = content ? (int64_t)(m[2] - m[0])
		   : !(x->flags & HTTP_X_SSE) && x->t_resp_start ? (int64_t)(m[2] - m[0]) : KPI_NULL;
}

/* An inbound exchange's stream, for the split inference: the connection and
 * the request's first byte tell it from every other of the process. */
static uint64_t stream_key(const struct http_conn *c, const struct http_exchange *x)
{
	/* HTTP/2 streams opened by one read share their t_arrive: their ids differ */
	return (uint64_t)(uint32_t)c->fd << 48 ^ x->t_arrive ^ (uint64_t)x->stream_id << 32;
}

/* A request's head is complete: an inbound one becomes a parent candidate
 * and a stream the split inference follows, an outbound one gets its parent
 * now, while what was open then is known. */
static uint64_t on_request(void *ctx, const struct http_exchange *x)
{
	struct http_conn *c = ctx;
	const char *hdr = x->id_src == HTTP_ID_NONE ? "" : x->request_id;

	if (c->client) {
		char hop_id[HOP_ID_LEN], parent[HOP_ID_LEN];
		uint64_t tag = hop_link_out_open(c->hp->hops, c->pid, c->fd, c->tid, hdr, x->t_arrive,
						 parent);
		hop_link_hop_id(c->pid, x->t_arrive, hop_id);
		hop_graph_out_open(c->hp->graph, hop_id, parent, &c->ends, x->t_arrive);
		return tag;
	}
	if (x->t_arrive)
		split_infer_open(c->hp->split, c->pid, stream_key(c, x), x->t_arrive,
				 !strcmp(x->method, "POST"));
	return hop_link_in_open(c->hp->hops, c->pid, c->fd, c->tid, hdr, x->t_arrive);
}

/* A token event of an inbound stream: a mark of its engine's steps. */
static void on_token(void *ctx, const struct http_exchange *x, uint64_t ts)
{
	struct http_conn *c = ctx;

	if (!c->client && x->t_arrive)
		split_infer_token(c->hp->split, c->pid, stream_key(c, x), ts, x->t_req_read);
}

/* The hop columns of x's record; *several: an outbound one no rule linked
 * while several inbound requests were open. */
static void hop_fill(struct http_conn *c, const struct http_exchange *x,
		     struct kpi_request_record *rec, bool *several)
{
	struct hop_link *hl = c->hp->hops;

	rec->direction = c->client ? "out" : "in";
	hop_link_hop_id(c->pid, x->t_arrive ? x->t_arrive : x->t_done, rec->hop_id);
	*several = false;
	if (c->client)
		rec->link_rule = hop_rule_name(hop_link_out_take(hl, x->tag, rec->parent_hop_id, several));
	else
		hop_link_close(hl, x->tag);
	rec->tid = c->tid;
	snprintf(rec->comm, sizeof(rec->comm), "%s", hop_link_comm(hl, c->pid));
	memcpy(rec->sock_local, c->ends.local, sizeof(rec->sock_local));
	memcpy(rec->sock_peer, c->ends.peer, sizeof(rec->sock_peer));
}

/* x's mark at t as a time since the record's arrival, KPI_NULL when not reached. */
static int64_t since_arrive(const struct kpi_request_record *rec, uint64_t t)
{
	if (!t)
		return KPI_NULL;
	return (int64_t)t > rec->t_arrive ? (int64_t)t - rec->t_arrive : 0;
}

/* What the exchange says about reasoning (an event stream's), and what the
 * tasks, cascades and the response-id rule read. */
static void agent_fill(const struct http_exchange *x, struct kpi_request_record *rec)
{
	bool sse = x->flags & HTTP_X_SSE;

	rec->ttfo = rec->reasoning_ns = rec->ttftc = rec->reasoning_events = rec->answer_events = KPI_NULL;
	if (sse) {
		rec->ttfo = since_arrive(rec, x->t_first_answer);
		rec->ttftc = since_arrive(rec, x->t_first_tool);
		rec->reasoning_events = x->reasoning_events;
		rec->answer_events = x->answer_events;
		if (x->t_first_reasoning && x->t_first_answer)
			rec->reasoning_ns = x->t_first_answer >= x->t_first_reasoning ?
					    (int64_t)(x->t_first_answer - x->t_first_reasoning) : 0;
	}
	rec->reasoning_tokens = opt_count(x->reasoning_tokens);
	rec->reasoning_shape = http_reason_shape_name(x->reasoning_shape);
	memcpy(rec->conversation_id, x->conversation_id, sizeof(rec->conversation_id));
	snprintf(rec->rpc_method, sizeof(rec->rpc_method), "%s", x->rpc_method);
	snprintf(rec->tool_name, sizeof(rec->tool_name), "%s", x->tool_name);
	rec->retry = rec->call_error = KPI_NULL;
	rec->escalation_added = KPI_NULL;
	memcpy(rec->resp_header_id, x->resp_header_id, sizeof(rec->resp_header_id));
	memcpy(rec->resp_body_id, x->resp_body_id, sizeof(rec->resp_body_id));
	memcpy(rec->trace_ctx, x->trace_id, sizeof(rec->trace_ctx));
	rec->body_digest = x->body_digest;
	rec->body_digest_ok = x->body_digest_ok;
	rec->rpc_error = x->rpc_error;
}

/* An outbound exchange's record goes out, its link decided: counted, its
 * task's call columns filled, written. held: it came back from the
 * response-id rule (else the rule is told of it, as another candidate). */
static void out_write(struct http_path *hp, struct kpi_request_record *rec, bool several, bool held)
{
	if (!held)
		relay_link_seen(hp->relay, rec);
	hop_link_count(hp->hops, hop_rule_of(rec->link_rule), several);
	trajectory_call(hp->tasks, rec, hop_link_serves(hp->hops, rec->pid));
	bus_exchange_out(hp->bus, rec);
}

/* A call the response-id rule held comes back, linked or not. */
static void relay_release(void *ctx, struct kpi_request_record *rec)
{
	struct http_path *hp = ctx;
	struct hop_ends e;

	if (rec->link_rule) {
		memcpy(e.local, rec->sock_local, sizeof(e.local));
		memcpy(e.peer, rec->sock_peer, sizeof(e.peer));
		hop_graph_out_link(hp->graph, rec->hop_id, &e, rec->parent_hop_id);
	}
	out_write(hp, rec, true, true);
}

static void on_exchange(void *ctx, const struct http_exchange *x)
{
	struct http_conn *c = ctx;
	struct kpi_request_record rec;
	/* an HTTP/2 request behind another stream's frames in its read came in a
	 * later segment than the read's first: its arrival is the read */
	uint64_t seg = x->t_arrive && !c->client && !(x->flags & HTTP_X_MID_READ) ?
		       seg_of(c, x->t_arrive) : 0;
	bool content = x->content_events > 0 && x->t_first_content;

	memset(&rec, 0, sizeof(rec));
	if (x->id_src != HTTP_ID_NONE && x->request_id[0])
		snprintf(rec.request_id, sizeof(rec.request_id), "%s", x->request_id);
	else
		snprintf(rec.request_id, sizeof(rec.request_id), "%s-%u-%llu", c->client ? "out" : "http",
			 c->pid, (unsigned long long)++c->hp->ids_made);
	rec.pid = c->pid;
	rec.seq_id = KPI_NULL;

	times_fill(&rec, x, seg);
	rec.tpot = rec.itl_p50 = rec.itl_p99 = rec.itl_max = KPI_NULL;
	if (content && x->completion_tokens > 1 && x->content_events > 1)
		rec.tpot = (int64_t)(x->t_last_content - x->t_first_content) /
			   (x->completion_tokens - 1);
	if (x->n_content_writes > 1)
		marks_itl(&rec, x->content_writes, x->n_content_writes);
	rec.prompt_tokens = opt_count(x->prompt_tokens);
	rec.output_tokens = opt_count(x->completion_tokens);
	rec.http_status = x->status ? x->status : KPI_NULL;
	rec.preemptions = 0;            /* the column is NOT NULL; none seen */
	rec.srtt_us = c->srtt_us ? c->srtt_us : KPI_NULL;
	rec.runq_ns = KPI_NULL;
	rec.arrive_src = seg ? KPI_ARRIVE_TCP : KPI_ARRIVE_READ;
	rec.finish_reason = finish_name(x->finish_reason);
	rec.operation = operation_of(x->path);
	rec.token_writes = x->content_writes;
	rec.n_token_writes = x->n_content_writes;
	rec.source = "http";
	rec.protocol = http_proto_name(x->protocol);
	rec.h2_stream = x->stream_id ? (int64_t)x->stream_id : KPI_NULL;
	rec.grpc_status = x->grpc_status >= 0 ? x->grpc_status : KPI_NULL;
	rec.content_events = x->content_events;
	rec.stream = x->stream >= 0 ? x->stream : KPI_NULL;
	rec.max_tokens = opt_count(x->max_tokens);
	rec.end_reason = http_end_name(x->end);
	snprintf(rec.method, sizeof(rec.method), "%s", x->method);
	snprintf(rec.path, sizeof(rec.path), "%s", x->path);
	snprintf(rec.model, sizeof(rec.model), "%s", x->model);
	agent_fill(x, &rec);
	if (c->client) {
		uint64_t seg = seg_latest(c, x->t_arrive, x->t_done);
		rec.t_answered = seg && (int64_t)seg >= rec.t_arrive ? (int64_t)seg : rec.t_done;
	}
	bool several;
	hop_fill(c, x, &rec, &several);
	if (c->client) {
		hop_graph_out_done(c->hp->graph, rec.hop_id, &c->ends, x->t_done);
		/* no rule could tell which of several requests it served: the response may say */
		if (!rec.link_rule && several && relay_link_hold(c->hp->relay, &rec))
			return;
		out_write(c->hp, &rec, several, false);
	} else {
		relay_link_inbound(c->hp->relay, &rec);   /* the calls it relayed come out linked */
		trajectory_inbound(c->hp->tasks, &rec);
		/* held until its split is decided (http_path_flush), then the
		 * engine's join may hold it */
		split_infer_done(c->hp->split, c->pid, x->t_arrive ? stream_key(c, x) : 0, &rec);
	}
}

/* The connection's tracker, chosen by its first bytes (req: they go the
 * requests' way): HTTP/2 when they are the client preface, or frames of a
 * connection opened before the attach (its header table unknown); HTTP/1.1
 * otherwise, where one older than the attach shows up as unsynced until a
 * message starts, and is counted so.  false when out of memory. */
static bool conn_tracker(struct http_path *hp, struct http_conn *c, const uint8_t *d, size_t n, bool req)
{
	struct http_track_cfg cfg = { .on_exchange = on_exchange, .on_request = on_request,
				      .on_token = on_token, .ctx = c, .totals = &hp->totals,
				      .digest_key = hp->digest_key };

	if (c->t || c->h2)
		return true;
	if ((req && http2_is_preface(d, n)) || http2_looks_framed(d, n))
		c->h2 = http2_track_new(&cfg, &hp->h2);
	else
		c->t = http_track_new(&cfg);
	return c->t || c->h2;
}

static void conn_close(struct http_conn *c, uint64_t ts, enum http_closer who)
{
	if (c->h2)
		http2_track_close(c->h2, ts, who);
	else if (c->t)
		http_track_close(c->t, ts, who);
}

static uint64_t conn_last_ts(const struct http_conn *c)
{
	return c->h2 ? http2_track_last_ts(c->h2) : c->t ? http_track_last_ts(c->t) : 0;
}

static unsigned conn_in_flight(const struct http_conn *c)
{
	return c->h2 ? http2_track_in_flight(c->h2) : c->t ? http_track_in_flight(c->t) : 0;
}

static struct http_conn *conn_get(struct http_path *hp, uint32_t pid, int fd, bool create,
				  bool client)
{
	uint64_t key = (uint64_t)pid << 32 | (uint32_t)fd;
	struct http_conn *c;

	HASH_FIND(hh, hp->conns, &key, sizeof(key), c);
	if (c || !create)
		return c;
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->key = key;
	c->hp = hp;
	c->pid = pid;
	c->fd = fd;
	c->client = client;
	hop_link_ends(hp->hops, pid, fd, &c->ends);
	HASH_ADD(hh, hp->conns, key, sizeof(c->key), c);
	return c;
}

/* Who ended a connection, for its tracker, whose "server" writes the
 * responses: on a connection the target accepted that is the target; on one
 * it made (client), the peer.  The kernel says who closed first from the
 * target's side: BY_CLIENT the peer went away (EOF, EPIPE, a reset), BY_SERVER
 * the target closed, AFTER_PEER the target closed after the peer's FIN or RST. */
static enum http_closer closer(unsigned by, bool client)
{
	if (client)
		return by == KPI_CLOSE_BY_SERVER ? HTTP_BY_CLIENT : HTTP_BY_SERVER;
	return by == KPI_CLOSE_BY_CLIENT ? HTTP_BY_CLIENT :
	       by == KPI_CLOSE_AFTER_PEER ? HTTP_BY_SERVER_AFTER_CLIENT : HTTP_BY_SERVER;
}

/* The target's socket ended (enum kpi_closer by) at ts. */
static void conn_closed(struct http_path *hp, struct http_conn *c, unsigned by, uint64_t ts)
{
	if (by == KPI_CLOSE_SHUT_WR) {
		/* a served connection's FIN: the end of a close-delimited
		 * response; a client's own half-close ends no request */
		if (!c->client && c->t)
			http_track_shut(c->t, ts);
		return;
	}
	conn_close(c, ts, closer(by, c->client));
	/* the fd is closed only when the target closes it */
	if (by != KPI_CLOSE_BY_CLIENT)
		conn_free(hp, c);
}

/* The held writes went out at ts (0: no word from the kernel): fed there,
 * and a close that came meanwhile follows them (its FIN left behind them). */
static void held_release(struct http_path *hp, struct http_conn *c, uint64_t ts)
{
	held_flush(c, ts);
	if (c->close_by) {
		unsigned by = c->close_by - 1;
		c->close_by = 0;
		conn_closed(hp, c, by, c->close_ts > ts ? c->close_ts : ts);
	}
}

int http_path_event(struct http_path *hp, const union kpi_event *e, size_t size)
{
	struct http_conn *c;

	if (e->h.type == KPI_EV_SOCK) {
		hop_link_sock(hp->hops, &e->sock);
		return 0;
	}
	if (e->h.type == KPI_EV_HTTP_SENT) {
		c = conn_get(hp, e->h.pid, e->http_sent.fd, false, false);
		if (c)
			held_release(hp, c, e->h.ts);
		return 0;
	}
	if (e->h.type == KPI_EV_HTTP_CLOSE) {
		c = conn_get(hp, e->h.pid, e->http_close.fd, false, false);
		if (!c)
			return 0;
		if (c->held) {          /* its FIN goes out behind them: at their HTTP_SENT */
			c->close_by = e->http_close.by + 1;
			c->close_ts = e->h.ts;
			return 0;
		}
		conn_closed(hp, c, e->http_close.by, e->h.ts);
		return 0;
	}
	const struct kpi_ev_payload *p = &e->payload;
	if (p->captured > KPI_PAYLOAD_MAX || p->captured > p->moved ||
	    size < KPI_EV_PAYLOAD_HEAD + (size_t)p->captured || !p->h.ts)
		return -1;
	if (p->h.type == KPI_EV_TLS_PAYLOAD && p->fd == KPI_TLS_FD_UNKNOWN) {
		hp->tls.unplaced++;
		return 0;
	}
	c = conn_get(hp, p->h.pid, p->fd, false, false);
	if (c && c->close_by)
		held_release(hp, c, 0); /* closed behind held writes, and the fd is in use again */
	c = conn_get(hp, p->h.pid, p->fd, true, p->role == KPI_ROLE_CLIENT);
	if (!c) {
		hp->totals.no_memory++;
		return 0;
	}
	if (p->h.type == KPI_EV_TLS_PAYLOAD) {
		hp->tls.conns += !c->tls;
		c->seen = c->tls = true;
	} else if (!cleartext(hp, c, p)) {
		/* a memory BIO's records left with this ciphertext (unless TCP
		 * held it: then at its HTTP_SENT) */
		if (c->tls && c->held && p->dir == KPI_PAYLOAD_OUT &&
		    !(p->flags & KPI_PAYLOAD_F_UNSENT))
			held_release(hp, c, p->h.ts);
		return 0;
	}
	c->tid = p->tid;
	/* the tracker reads requests as HTTP_IN: on a client connection those
	 * are the target's writes */
	bool req_dir = (p->dir == KPI_PAYLOAD_OUT) == c->client;
	/* a served request's first segment (its arrival), a call's answer's (its end) */
	if (p->dir == KPI_PAYLOAD_IN) {
		unsigned k = c->n_reads++ % SEG_RING;
		c->read_ts[k] = p->h.ts;
		c->seg_ts[k] = p->t_seg;
		if (p->srtt_us)
			c->srtt_us = p->srtt_us;
		/* the client read what was held before it wrote again */
		held_flush(c, p->t_seg && p->t_seg < p->h.ts ? p->t_seg : p->h.ts);
	} else if ((c->held || (p->flags & (KPI_PAYLOAD_F_UNSENT | KPI_PAYLOAD_F_LATER))) &&
		   held_add(c, p)) {
		return 0;
	}
	if (!conn_tracker(hp, c, p->data, p->captured, req_dir)) {
		hp->totals.no_memory++;
		return 0;
	}
	held_flush(c, 0);
	feed(c, req_dir, p->data, p->captured, p->moved, p->h.ts);
	return 0;
}

void http_path_set_timeout(struct http_path *hp, uint64_t ns)
{
	hp->timeout_ns = ns;
}

void http_path_expire(struct http_path *hp, uint64_t now)
{
	struct http_conn *c, *tmp;

	hop_graph_expire(hp->graph, now);
	relay_link_expire(hp->relay, now);
	trajectory_expire(hp->tasks, now);
	HASH_ITER(hh, hp->conns, c, tmp) {
		if ((c->held && now > c->held->ts + HELD_MAX_NS) ||
		    (c->close_by && now > c->close_ts + HELD_MAX_NS)) {
			held_release(hp, c, 0); /* no word from the kernel: at the writes */
			continue;               /* (it may be gone): the rest at the next look */
		}
		uint64_t last = conn_last_ts(c);
		if (!last || now < last)
			continue;
		if (conn_in_flight(c) && now - last > hp->timeout_ns) {
			if (c->h2)
				http2_track_expire(c->h2, now);
			else
				http_track_expire(c->t, now);
		} else if (!conn_in_flight(c) && now - last > HTTP_PATH_IDLE_NS) {
			conn_free(hp, c);
		}
	}
}

static void request_out(void *ctx, const struct kpi_request_record *rec)
{
	bus_request_or_hold(ctx, rec);          /* the engine's join may hold it */
}

void http_path_flush(struct http_path *hp, uint64_t now, bool final)
{
	split_infer_release(hp->split, now, final, request_out, hp->bus);
}

void http_path_forget_pid(struct http_path *hp, uint32_t pid)
{
	struct http_conn *c, *tmp;

	HASH_ITER(hh, hp->conns, c, tmp) {
		if (c->pid != pid)
			continue;
		if (conn_in_flight(c))
			conn_close(c, conn_last_ts(c), HTTP_BY_SERVER);
		conn_free(hp, c);
	}
	split_infer_forget_pid(hp->split, pid, request_out, hp->bus);
	trajectory_forget_pid(hp->tasks, pid);
	hop_link_forget_pid(hp->hops, pid);
}

void http_path_finish(struct http_path *hp)
{
	relay_link_expire(hp->relay, UINT64_MAX);
	trajectory_forget_pid(hp->tasks, 0);
}

void http_path_set_task_idle_gap(struct http_path *hp, uint64_t ns)
{
	trajectory_set_idle_gap(hp->tasks, ns);
}

const struct trajectory_stats *http_path_tasks(const struct http_path *hp)
{
	return trajectory_stats(hp->tasks);
}

const struct relay_stats *http_path_relay(const struct http_path *hp)
{
	return relay_link_stats(hp->relay);
}

bool http_path_in_flight(const struct http_path *hp)
{
	const struct http_conn *c;

	for (c = hp->conns; c; c = c->hh.next)
		if (!c->client && conn_in_flight(c))
			return true;
	return split_infer_holding(hp->split);
}

const struct split_stats *http_path_split_stats(const struct http_path *hp)
{
	return split_infer_stats(hp->split);
}
