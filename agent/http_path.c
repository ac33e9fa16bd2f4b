/* http_path.c - turns an HTTP-mode target's socket payloads into request
 * records: a tracker per connection, its exchanges mapped onto the trace's marks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include "assemble.h"
#include "http_path.h"

/* Reads whose first unread segment time is kept, to move an exchange's
 * t_arrive (the read with its first byte) back to that segment. */
#define SEG_RING 8

struct http_conn {
	UT_hash_handle hh;
	uint64_t key;                   /* pid << 32 | fd */
	struct http_path *hp;
	struct http_track *t;
	uint32_t pid;
	uint32_t srtt_us;               /* at the last read that carried it */
	uint64_t read_ts[SEG_RING], seg_ts[SEG_RING];
	unsigned n_reads;               /* reads ever put in the ring */
};

struct http_path {
	struct assembler *a;
	struct http_conn *conns;
	struct http_track_stats totals;
	uint64_t ids_made;
};

struct http_path *http_path_new(struct assembler *a)
{
	struct http_path *hp = calloc(1, sizeof(*hp));

	if (hp)
		hp->a = a;
	return hp;
}

static void conn_free(struct http_path *hp, struct http_conn *c)
{
	HASH_DEL(hp->conns, c);
	http_track_free(c->t);
	free(c);
}

void http_path_free(struct http_path *hp)
{
	struct http_conn *c, *tmp;

	if (!hp)
		return;
	HASH_ITER(hh, hp->conns, c, tmp)
		conn_free(hp, c);
	free(hp);
}

const struct http_track_stats *http_path_stats(const struct http_path *hp)
{
	return &hp->totals;
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
	assemble_marks_clamp(m, 5);
	assemble_phases(m, 5, ph);
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

static void on_exchange(void *ctx, const struct http_exchange *x)
{
	struct http_conn *c = ctx;
	struct kpi_request_record rec;
	uint64_t seg = x->t_arrive ? seg_of(c, x->t_arrive) : 0;
	bool content = x->content_events > 0 && x->t_first_content;

	memset(&rec, 0, sizeof(rec));
	if (x->id_src != HTTP_ID_NONE && x->request_id[0])
		snprintf(rec.request_id, sizeof(rec.request_id), "%s", x->request_id);
	else
		snprintf(rec.request_id, sizeof(rec.request_id), "http-%u-%llu", c->pid,
			 (unsigned long long)++c->hp->ids_made);
	rec.pid = c->pid;
	rec.seq_id = KPI_NULL;

	times_fill(&rec, x, seg);
	rec.tpot = rec.itl_p50 = rec.itl_p99 = rec.itl_max = KPI_NULL;
	if (content && x->completion_tokens > 1 && x->content_events > 1)
		rec.tpot = (int64_t)(x->t_last_content - x->t_first_content) /
			   (x->completion_tokens - 1);
	if (x->n_content_writes > 1)
		assemble_itl(&rec, x->content_writes, x->n_content_writes);
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
	rec.content_events = x->content_events;
	rec.stream = x->stream >= 0 ? x->stream : KPI_NULL;
	rec.max_tokens = opt_count(x->max_tokens);
	rec.end_reason = http_end_name(x->end);
	snprintf(rec.method, sizeof(rec.method), "%s", x->method);
	snprintf(rec.path, sizeof(rec.path), "%s", x->path);
	snprintf(rec.model, sizeof(rec.model), "%s", x->model);
	assemble_http_request_out(c->hp->a, &rec);
}

static struct http_conn *conn_get(struct http_path *hp, uint32_t pid, int fd, bool create)
{
	uint64_t key = (uint64_t)pid << 32 | (uint32_t)fd;
	struct http_conn *c;

	HASH_FIND(hh, hp->conns, &key, sizeof(key), c);
	if (c || !create)
		return c;
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	/* one older than the attach shows up as unsynced until a message
	 * starts, and is counted so */
	c->t = http_track_new(&(struct http_track_cfg){ .on_exchange = on_exchange, .ctx = c,
							.totals = &hp->totals });
	if (!c->t) {
		free(c);
		return NULL;
	}
	c->key = key;
	c->hp = hp;
	c->pid = pid;
	HASH_ADD(hh, hp->conns, key, sizeof(c->key), c);
	return c;
}

int http_path_event(struct http_path *hp, const union kpi_event *e, size_t size)
{
	struct http_conn *c;

	if (e->h.type == KPI_EV_HTTP_CLOSE) {
		c = conn_get(hp, e->h.pid, e->http_close.fd, false);
		if (!c)
			return 0;
		http_track_close(c->t, e->h.ts, e->http_close.by == KPI_CLOSE_BY_CLIENT
				 ? HTTP_BY_CLIENT : HTTP_BY_SERVER);
		/* the fd is closed only when the server closes it */
		if (e->http_close.by == KPI_CLOSE_BY_SERVER)
			conn_free(hp, c);
		return 0;
	}
	const struct kpi_ev_payload *p = &e->payload;
	if (p->captured > KPI_PAYLOAD_MAX || p->captured > p->moved ||
	    size < KPI_EV_PAYLOAD_HEAD + (size_t)p->captured || !p->h.ts)
		return -1;
	c = conn_get(hp, p->h.pid, p->fd, true);
	if (!c) {
		hp->totals.no_memory++;
		return 0;
	}
	if (p->dir == KPI_PAYLOAD_IN) {
		unsigned k = c->n_reads++ % SEG_RING;
		c->read_ts[k] = p->h.ts;
		c->seg_ts[k] = p->t_seg;
		if (p->srtt_us)
			c->srtt_us = p->srtt_us;
	}
	http_track_feed(c->t, p->dir == KPI_PAYLOAD_IN ? HTTP_IN : HTTP_OUT, p->data, p->captured,
			p->moved, p->h.ts);
	return 0;
}

void http_path_expire(struct http_path *hp, uint64_t now)
{
	struct http_conn *c, *tmp;

	HASH_ITER(hh, hp->conns, c, tmp) {
		uint64_t last = http_track_last_ts(c->t);
		if (!last || now < last)
			continue;
		if (http_track_in_flight(c->t) && now - last > HTTP_PATH_TIMEOUT_NS)
			http_track_expire(c->t, now);
		else if (!http_track_in_flight(c->t) && now - last > HTTP_PATH_IDLE_NS)
			conn_free(hp, c);
	}
}

void http_path_forget_pid(struct http_path *hp, uint32_t pid)
{
	struct http_conn *c, *tmp;

	HASH_ITER(hh, hp->conns, c, tmp) {
		if (c->pid != pid)
			continue;
		if (http_track_in_flight(c->t))
			http_track_close(c->t, http_track_last_ts(c->t), HTTP_BY_SERVER);
		conn_free(hp, c);
	}
}
