/* server.c - the I/O thread: accepts connections, parses HTTP/1.1, admits
 * requests to the engine thread and writes responses. Each SSE token chunk
 * leaves in exactly one send() as soon as its event arrives, because the
 * agent times tokens by the daemon's own writes on the request's fd. */
#include "daemon/server/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kpi_probes.h"
#include "abi/kpi_reasons.h"
#include "daemon/server/api.h"
#include "daemon/server/engine_thread.h"
#include "daemon/server/http.h"
#include "daemon/server/metrics.h"
#include "daemon/server/sbuf.h"
#include "daemon/server/text.h"

#define READ_CHUNK 65536
#define OUT_LIMIT (8u << 20)   /* unread response bytes before a client counts as gone */
#define LINGER_NS (2000000000ull)
#define REQ_BUCKETS 4096

enum { TAG_LISTEN = 1, TAG_WAKE, TAG_SIGNAL, TAG_CONN };

enum conn_state {
	CS_HEAD,    /* reading a request head */
	CS_BODY,    /* reading its body */
	CS_ACTIVE,  /* response in progress (engine working or bytes queued) */
	CS_LINGER,  /* write side shut, discarding input until EOF */
	CS_CLOSED,  /* freed at the end of this loop iteration */
};

struct req;

struct conn {
	int tag;
	int fd;
	struct conn *prev, *next;  /* all open connections, for timeouts */
	struct conn *dead_next;
	enum conn_state state;
	uint32_t events;           /* current epoll interest */
	struct sbuf in, out;
	uint64_t t_first_byte;     /* of the request being read; 0: none yet */
	uint64_t t_activity;

	/* the request being read or served */
	char method[17];
	char path[128];
	int minor;
	bool keep_alive;
	bool chunked;
	bool sent_continue;
	long long content_length;
	size_t head_len;
	struct http_chunked ch;
	struct sbuf body;          /* decoded chunked body */
	size_t body_scan;          /* bytes of in[] after the head fed to ch */
	char rid[HTTP_MAX_REQUEST_ID + 1];
	uint64_t seq;              /* request sequence number; the numeric id */

	/* the response */
	uint64_t resp_id;          /* numeric request id; 0 for non-inference */
	int resp_status;
	bool resp_started, resp_final, close_after;
	struct req *req;
};

struct req {
	uint64_t id;
	struct req *hnext;
	struct conn *conn;         /* NULL once the client has gone */
	bool chat, stream, include_usage;
	char *stop[API_MAX_STOP];
	int n_stop;
	int n_prompt, max_tokens, n_out;
	bool waiting, stopped, headers_sent, chunked_tx;
	bool finish_pending;       /* its FINISHED event follows in the batch being handled */
	struct utf8_stream u8;
	struct sbuf text;          /* generated text, repaired */
	size_t emitted;            /* bytes of text already sent */
	uint64_t t_arrive, t_admit, t_sched, t_first, t_prev;
	long long created;
	char rid[HTTP_MAX_REQUEST_ID + 1];
};

static struct server {
	const struct server_config *cfg;
	struct engine *e;
	const struct model_info *mi;
	struct engine_thread eth;
	int epfd, lfd, wakefd, sigfd;
	int tag_listen, tag_wake, tag_signal;
	bool listen_paused, draining;
	struct conn *conns;
	int nconns;
	struct conn *dead;
	struct req *reqs[REQ_BUCKETS];
	int n_waiting;             /* submitted, not running */
	int n_active;              /* submitted, not finished */
	uint64_t seq;
	unsigned pid;
	struct metrics m;
	char model_json[256];      /* JSON-escaped model name */
	char model_label[128];     /* Prometheus-label-safe model name */
	int ctx_len, kv_tokens;
} S;

/* ---- small helpers ------------------------------------------------------- */

static uint64_t now_ns(void)
{
	return eth_now_ns();
}

static void req_insert(struct req *r)
{
	struct req **b = &S.reqs[r->id % REQ_BUCKETS];
	r->hnext = *b;
	*b = r;
}

static struct req *req_find(uint64_t id)
{
	for (struct req *r = S.reqs[id % REQ_BUCKETS]; r; r = r->hnext)
		if (r->id == id)
			return r;
	return NULL;
}

static void req_remove(struct req *r)
{
	for (struct req **p = &S.reqs[r->id % REQ_BUCKETS]; *p; p = &(*p)->hnext)
		if (*p == r) {
			*p = r->hnext;
			return;
		}
}

static void req_free(struct req *r)
{
	for (int i = 0; i < r->n_stop; i++)
		free(r->stop[i]);
	sbuf_free(&r->text);
	free(r);
}

static void conn_set_events(struct conn *c, uint32_t ev)
{
	if (c->state == CS_CLOSED || ev == c->events)
		return;
	struct epoll_event e = { .events = ev, .data.ptr = c };
	epoll_ctl(S.epfd, EPOLL_CTL_MOD, c->fd, &e);
	c->events = ev;
}

/* Interest follows the state: read while a request is incoming, only watch
 * for hang-ups while one is served (pipelined bytes wait in the kernel). */
static void conn_update_events(struct conn *c)
{
	uint32_t ev = EPOLLRDHUP;
	if (c->state == CS_HEAD || c->state == CS_BODY || c->state == CS_LINGER)
		ev |= EPOLLIN;
	if (c->out.len)
		ev |= EPOLLOUT;
	conn_set_events(c, ev);
}

/* ---- connection teardown --------------------------------------------------- */

static void conn_close(struct conn *c)
{
	if (c->state == CS_CLOSED)
		return;
	struct req *r = c->req;
	if (r) {
		/* the client went away mid-request: free its sequence at once */
		if (KPI_REQUEST_CANCELLED_ENABLED())
			KPI_REQUEST_CANCELLED(r->id);
		eth_finish(&S.eth, r->id, KPI_FINISH_CANCELLED);
		r->conn = NULL;
		c->req = NULL;
	}
	epoll_ctl(S.epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->state = CS_CLOSED;
	if (c->prev)
		c->prev->next = c->next;
	else
		S.conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	S.nconns--;
	S.m.connections_open = S.nconns;
	c->dead_next = S.dead;
	S.dead = c;
}

static void reap_dead(void)
{
	while (S.dead) {
		struct conn *c = S.dead;
		S.dead = c->dead_next;
		sbuf_free(&c->in);
		sbuf_free(&c->out);
		sbuf_free(&c->body);
		free(c);
	}
}

/* Half-close and discard what the client still sends, so the response is
 * not destroyed by a reset when unread request bytes remain. */
static void conn_linger(struct conn *c)
{
	shutdown(c->fd, SHUT_WR);
	c->state = CS_LINGER;
	c->t_activity = now_ns();
	sbuf_consume(&c->in, c->in.len);
	conn_update_events(c);
}

/* ---- writing responses ----------------------------------------------------- */

static void conn_process(struct conn *c);

static void response_done(struct conn *c)
{
	if (KPI_RESPONSE_END_ENABLED())
		KPI_RESPONSE_END(c->resp_id, c->fd, c->resp_status);
	if (c->resp_status >= 100 && c->resp_status < 600)
		S.m.http_status[c->resp_status]++;
	c->resp_started = c->resp_final = false;
	c->resp_id = 0;
	c->t_first_byte = 0;
	c->t_activity = now_ns();
	if (c->close_after || S.draining) {
		conn_linger(c);
		return;
	}
	c->state = CS_HEAD;
	conn_update_events(c);
}

/* Sends data now in one send() when nothing is queued, else queues it.
 * final: this is the response's last byte. */
static void conn_send(struct conn *c, const char *data, size_t len, bool final)
{
	if (c->state == CS_CLOSED)
		return;
	if (!c->resp_started) {
		c->resp_started = true;
		if (KPI_RESPONSE_START_ENABLED())
			KPI_RESPONSE_START(c->resp_id, c->fd);
	}
	size_t off = 0;
	if (c->out.len == 0) {
		ssize_t n = send(c->fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
			conn_close(c);
			return;
		}
		if (n > 0)
			off = (size_t)n;
	}
	if (off < len)
		sbuf_add(&c->out, data + off, len - off);
	if (c->out.len > OUT_LIMIT) {
		conn_close(c); /* not reading its response: treat as gone */
		return;
	}
	if (final)
		c->resp_final = true;
	if (c->out.len == 0 && final)
		response_done(c);
	else
		conn_update_events(c);
}

static void conn_flush(struct conn *c)
{
	while (c->out.len) {
		ssize_t n = send(c->fd, c->out.data, c->out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				break;
			conn_close(c);
			return;
		}
		sbuf_consume(&c->out, (size_t)n);
	}
	if (c->out.len == 0 && c->resp_final) {
		response_done(c);
		if (c->state == CS_HEAD && c->in.len)
			conn_process(c); /* a pipelined request waited behind this response */
	} else {
		conn_update_events(c);
	}
}

static void resp_head(struct sbuf *b, struct conn *c, int status, const char *ctype,
		      long long clen, bool chunked, const char *extra)
{
	sbuf_printf(b, "HTTP/1.1 %d %s\r\n", status, http_status_text(status));
	if (ctype)
		sbuf_printf(b, "Content-Type: %s\r\n", ctype);
	if (clen >= 0)
		sbuf_printf(b, "Content-Length: %lld\r\n", clen);
	else if (chunked)
		sbuf_adds(b, "Transfer-Encoding: chunked\r\n");
	sbuf_printf(b, "x-request-id: %s\r\n", c->rid);
	if (extra)
		sbuf_adds(b, extra);
	if (c->close_after || S.draining)
		sbuf_adds(b, "Connection: close\r\n");
	else if (c->minor == 0)
		sbuf_adds(b, "Connection: keep-alive\r\n");
	sbuf_adds(b, "\r\n");
}

static void respond(struct conn *c, int status, const char *ctype, const char *body,
		    size_t len, const char *extra)
{
	struct sbuf b = { 0 };
	c->resp_status = status;
	c->state = CS_ACTIVE;
	resp_head(&b, c, status, ctype, (long long)len, false, extra);
	sbuf_add(&b, body, len);
	conn_send(c, b.data, b.len, true);
	sbuf_free(&b);
}

static const char *error_type(int status)
{
	switch (status) {
	case 400: case 413: case 431: return "invalid_request_error";
	case 404: return "not_found_error";
	case 405: return "method_not_allowed_error";
	case 408: return "timeout_error";
	case 429: return "rate_limit_error";
	case 503: return "service_unavailable_error";
	default: return "server_error";
	}
}

/* An error response with an OpenAI-shaped JSON body. close: the stream can
 * no longer be trusted (bad framing), so the connection ends after it. */
static void reject(struct conn *c, int status, int reason, const char *msg, bool close,
		   const char *extra)
{
	if (KPI_REQUEST_REJECTED_ENABLED())
		KPI_REQUEST_REJECTED(c->fd, status, reason, c->rid);
	S.m.rejected_total++;
	if (close)
		c->close_after = true;
	struct sbuf b = { 0 };
	sbuf_adds(&b, "{\"error\":{\"message\":\"");
	json_escape(&b, msg, strlen(msg));
	sbuf_printf(&b, "\",\"type\":\"%s\",\"param\":null,\"code\":%d}}\n", error_type(status),
		    status);
	respond(c, status, "application/json", b.data, b.len, extra);
	sbuf_free(&b);
}

/* ---- streaming output ---------------------------------------------------- */

/* The fields every body and chunk starts with; whole: a non-stream body. */
static void chunk_prefix(struct sbuf *b, struct req *r, bool whole)
{
	const char *obj = !r->chat ? "text_completion" :
		whole ? "chat.completion" : "chat.completion.chunk";
	sbuf_printf(b, "{\"id\":\"%s%s\",\"object\":\"%s\",\"created\":%lld,\"model\":\"%s\",",
		    r->chat ? "chatcmpl-" : "cmpl-", r->rid, obj, r->created, S.model_json);
}

/* One SSE event carrying text and, on the last one, the finish reason. */
static void sse_event(struct sbuf *b, struct req *r, const char *text, size_t n,
		      const char *finish)
{
	sbuf_adds(b, "data: ");
	chunk_prefix(b, r, false);
	if (r->chat) {
		sbuf_adds(b, "\"choices\":[{\"index\":0,\"delta\":{");
		bool role = !r->headers_sent;
		if (role)
			sbuf_adds(b, "\"role\":\"assistant\"");
		if (n || !finish) {
			sbuf_adds(b, role ? ",\"content\":\"" : "\"content\":\"");
			json_escape(b, text, n);
			sbuf_adds(b, "\"");
		}
		sbuf_adds(b, "}");
	} else {
		sbuf_adds(b, "\"choices\":[{\"index\":0,\"text\":\"");
		json_escape(b, text, n);
		sbuf_adds(b, "\"");
	}
	if (finish)
		sbuf_printf(b, ",\"logprobs\":null,\"finish_reason\":\"%s\"}]", finish);
	else
		sbuf_adds(b, ",\"logprobs\":null,\"finish_reason\":null}]");
	if (r->include_usage)
		sbuf_adds(b, ",\"usage\":null");
	sbuf_adds(b, "}\n\n");
}

/* Frames body bytes for the wire (HTTP/1.1 chunked, or raw for HTTP/1.0)
 * after the headers when this is the response's first write. */
static void stream_write(struct req *r, struct sbuf *events, bool final)
{
	struct conn *c = r->conn;
	struct sbuf w = { 0 };
	if (!r->headers_sent) {
		r->chunked_tx = c->minor >= 1;
		if (!r->chunked_tx)
			c->close_after = true;
		c->resp_status = 200;
		resp_head(&w, c, 200, "text/event-stream", -1, r->chunked_tx,
			  "Cache-Control: no-cache\r\n");
		r->headers_sent = true;
	}
	if (r->chunked_tx) {
		if (events->len)
			sbuf_printf(&w, "%zx\r\n", events->len);
		sbuf_add(&w, events->data, events->len);
		if (events->len)
			sbuf_adds(&w, "\r\n");
		if (final)
			sbuf_adds(&w, "0\r\n\r\n");
	} else {
		sbuf_add(&w, events->data, events->len);
	}
	conn_send(c, w.data, w.len, final);
	sbuf_free(&w);
}

static void usage_json(struct sbuf *b, struct req *r)
{
	sbuf_printf(b, "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,"
		    "\"total_tokens\":%d}", r->n_prompt, r->n_out, r->n_prompt + r->n_out);
}

/* ---- engine events --------------------------------------------------------- */

/* last: the request's final token, its FINISHED event right behind it. */
static void on_token(struct req *r, const struct eth_event *ev, bool last)
{
	if (r->stopped)
		return; /* in flight when the stop string matched: not part of the answer */
	r->n_out++;
	if (ev->ev.first || !r->t_first) {
		r->t_first = ev->t_ns;
		metrics_observe(&S.m, MH_TTFT, (double)(ev->t_ns - r->t_arrive) / 1e9);
	} else {
		metrics_observe(&S.m, MH_ITL, (double)(ev->t_ns - r->t_prev) / 1e9);
	}
	r->t_prev = ev->t_ns;
	if (!r->conn)
		return; /* the client has gone; the cancel is on its way to the engine */

	int32_t tok = ev->ev.token;
	if (tok != S.mi->eos_id && tok != S.mi->bos_id) {
		char piece[256];
		int n = engine_token_piece(S.e, tok, piece, sizeof(piece));
		if (n > (int)sizeof(piece))
			n = sizeof(piece);
		if (n > 0)
			utf8_stream_feed(&r->u8, piece, (size_t)n, &r->text);
	}
	size_t emit;
	if (stop_scan(r->text.data + r->emitted, r->text.len - r->emitted, r->stop, r->n_stop,
		      &emit)) {
		r->text.len = r->emitted + emit; /* drop the stop string and anything after */
		r->stopped = true;
		eth_finish(&S.eth, r->id, KPI_FINISH_STOP);
	}
	if (!r->stream || last)
		return; /* the last token rides in the final write (on_finished) */
	/* one event, one send(), for every token: the agent's per-token clock */
	struct sbuf evb = { 0 };
	sse_event(&evb, r, r->text.data + r->emitted, emit, NULL);
	r->emitted += emit;
	stream_write(r, &evb, false);
	sbuf_free(&evb);
}

static void finish_metrics(struct req *r, const struct eth_event *ev)
{
	uint64_t t = ev->t_ns;
	enum kpi_finish_reason reason = r->stopped ? KPI_FINISH_STOP : ev->ev.reason;
	if (reason >= KPI_FINISH_STOP && reason <= KPI_FINISH_ERROR)
		S.m.success[reason]++;
	metrics_observe(&S.m, MH_E2E, (double)(t - r->t_arrive) / 1e9);
	metrics_observe(&S.m, MH_PROMPT_TOKENS, r->n_prompt);
	metrics_observe(&S.m, MH_GENERATION_TOKENS, r->n_out);
	if (r->t_sched) {
		metrics_observe(&S.m, MH_QUEUE, (double)(r->t_sched - r->t_admit) / 1e9);
		metrics_observe(&S.m, MH_INFERENCE, (double)(t - r->t_sched) / 1e9);
	}
	if (r->t_first && r->t_sched) {
		metrics_observe(&S.m, MH_PREFILL, (double)(r->t_first - r->t_sched) / 1e9);
		metrics_observe(&S.m, MH_DECODE, (double)(r->t_prev - r->t_first) / 1e9);
		if (r->n_out > 1)
			metrics_observe(&S.m, MH_TPOT,
					(double)(r->t_prev - r->t_first) / 1e9 / (r->n_out - 1));
	}
}

static void on_finished(struct req *r, const struct eth_event *ev)
{
	finish_metrics(r, ev);
	struct conn *c = r->conn;
	if (!c)
		return;
	if (!r->stopped)
		utf8_stream_flush(&r->u8, &r->text); /* held-back stop prefixes go out too */
	const char *finish = kpi_finish_reason_wire(r->stopped ? KPI_FINISH_STOP : ev->ev.reason);
	if (ev->ev.reason == KPI_FINISH_ERROR && !r->stream && !r->stopped) {
		reject(c, 500, KPI_REJECT_INTERNAL, "the engine failed while generating", false,
		       NULL);
		return;
	}
	struct sbuf b = { 0 };
	if (r->stream) {
		sse_event(&b, r, r->text.data + r->emitted, r->text.len - r->emitted, finish);
		if (r->include_usage) {
			sbuf_adds(&b, "data: ");
			chunk_prefix(&b, r, false);
			sbuf_adds(&b, "\"choices\":[],");
			usage_json(&b, r);
			sbuf_adds(&b, "}\n\n");
		}
		sbuf_adds(&b, "data: [DONE]\n\n");
		stream_write(r, &b, true);
	} else {
		chunk_prefix(&b, r, true);
		if (r->chat)
			sbuf_adds(&b, "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
				  "\"content\":\"");
		else
			sbuf_adds(&b, "\"choices\":[{\"index\":0,\"text\":\"");
		json_escape(&b, r->text.data, r->text.len);
		sbuf_printf(&b, "\"%s,\"logprobs\":null,\"finish_reason\":\"%s\"}],",
			    r->chat ? "}" : "", finish);
		usage_json(&b, r);
		sbuf_adds(&b, "}\n");
		c->resp_status = 200;
		respond(c, 200, "application/json", b.data, b.len, NULL);
	}
	sbuf_free(&b);
}

static void handle_engine_events(void)
{
	uint64_t cnt;
	ssize_t rd = read(S.wakefd, &cnt, sizeof(cnt));
	(void)rd;
	struct eth_event *evs;
	size_t n = eth_take_events(&S.eth, &evs);
	/* Find each request's last token when its end is in this batch (a slow
	 * I/O thread can take several steps' events at once): walking back,
	 * the first token after a FINISHED is the last one. */
	bool *last = calloc(n ? n : 1, sizeof(bool));
	if (!last) {
		fprintf(stderr, "kpi-infer: out of memory for %zu engine events\n", n);
		abort();
	}
	for (size_t i = n; i-- > 0;) {
		struct req *r = req_find(evs[i].ev.id);
		if (!r)
			continue;
		if (evs[i].ev.kind == ENGINE_EV_FINISHED) {
			r->finish_pending = true;
		} else if (evs[i].ev.kind == ENGINE_EV_TOKEN && r->finish_pending) {
			last[i] = true;
			r->finish_pending = false;
		}
	}
	for (size_t i = 0; i < n; i++) {
		struct eth_event *ev = &evs[i];
		struct req *r = req_find(ev->ev.id);
		if (!r) {
			free(ev->err);
			continue;
		}
		switch ((int)ev->ev.kind) {
		case ENGINE_EV_SCHEDULED:
			if (r->waiting) {
				r->waiting = false;
				S.n_waiting--;
			}
			if (!r->t_sched)
				r->t_sched = ev->t_ns;
			break;
		case ENGINE_EV_PREEMPTED:
			if (!r->waiting) {
				r->waiting = true;
				S.n_waiting++;
			}
			break;
		case ENGINE_EV_TOKEN:
			on_token(r, ev, last[i]);
			break;
		case ENGINE_EV_FINISHED:
		case ETH_EV_SUBMIT_FAILED: {
			if (r->waiting)
				S.n_waiting--;
			S.n_active--;
			req_remove(r);
			struct conn *c = r->conn;
			if (c && c->req == r)
				c->req = NULL; /* done: a hang-up from here on cancels nothing */
			if (ev->ev.kind == ENGINE_EV_FINISHED) {
				on_finished(r, ev);
			} else if (c) {
				reject(c, 400, KPI_REJECT_PROMPT_TOO_LONG, ev->err, false, NULL);
			}
			free(ev->err);
			req_free(r);
			/* a pipelined request may be waiting behind this one */
			if (c && c->state == CS_HEAD && c->in.len)
				conn_process(c);
			break;
		}
		}
	}
	free(evs);
	free(last);
}

/* ---- request handlers ------------------------------------------------------ */

static int32_t *tokenize(const char *text, size_t len, int *n_out)
{
	int cap = (int)(len < (1u << 24) ? len : (1u << 24)) + 16;
	for (int tries = 0; tries < 3; tries++) {
		int32_t *ids = malloc((size_t)cap * sizeof(int32_t));
		if (!ids)
			return NULL;
		int n = engine_tokenize(S.e, text, len, true, ids, cap);
		if (n < 0) {
			free(ids);
			return NULL;
		}
		if (n <= cap) {
			*n_out = n;
			return ids;
		}
		free(ids);
		cap = n;
	}
	return NULL;
}

static void handle_generate(struct conn *c, const char *body, size_t len, bool chat)
{
	char err[512];
	bool bad_json;
	struct api_request ar;
	uint64_t t_arrive = c->t_first_byte ? c->t_first_byte : now_ns();

	if (S.draining) {
		reject(c, 503, KPI_REJECT_DRAINING, "the server is shutting down", true, NULL);
		return;
	}
	if (api_request_parse(body, len, chat, &ar, &bad_json, err, sizeof(err)) < 0) {
		reject(c, 400, bad_json ? KPI_REJECT_BAD_JSON : KPI_REJECT_BAD_PARAM, err, false,
		       NULL);
		api_request_free(&ar);
		return;
	}
	int n_prompt = 0;
	int32_t *ids;
	if (ar.prompt_ids) {
		for (int i = 0; i < ar.n_prompt_ids; i++)
			if (ar.prompt_ids[i] >= S.mi->vocab_size) {
				snprintf(err, sizeof(err), "'prompt[%d]' token id %d is out of range: "
					 "the vocabulary has %d tokens (ids 0 to %d)", i,
					 ar.prompt_ids[i], S.mi->vocab_size, S.mi->vocab_size - 1);
				reject(c, 400, KPI_REJECT_BAD_TOKEN, err, false, NULL);
				api_request_free(&ar);
				return;
			}
		ids = ar.prompt_ids;
		n_prompt = ar.n_prompt_ids;
		ar.prompt_ids = NULL;
	} else {
		ids = tokenize(ar.prompt, ar.prompt_len, &n_prompt);
		if (!ids || n_prompt == 0) {
			free(ids);
			reject(c, 400, KPI_REJECT_BAD_PARAM, "'prompt' could not be tokenized", false,
			       NULL);
			api_request_free(&ar);
			return;
		}
	}

	int limit = S.ctx_len < S.kv_tokens ? S.ctx_len : S.kv_tokens;
	int max_tokens = ar.max_tokens;
	if (max_tokens < 0)
		max_tokens = chat ? limit - n_prompt : 16;
	if (n_prompt + max_tokens > limit || max_tokens < 1) {
		snprintf(err, sizeof(err), "prompt (%d tokens) + max_tokens (%d) exceeds the limit: "
			 "the context length is %d tokens and the KV pool holds %d tokens; shorten "
			 "the prompt or lower max_tokens", n_prompt, max_tokens < 1 ? 1 : max_tokens,
			 S.ctx_len, S.kv_tokens);
		free(ids);
		reject(c, 400, KPI_REJECT_PROMPT_TOO_LONG, err, false, NULL);
		api_request_free(&ar);
		return;
	}
	if (S.n_waiting >= S.cfg->max_queue) {
		snprintf(err, sizeof(err), "server busy: %d requests are waiting (--max-queue %d); "
			 "retry after the Retry-After delay", S.n_waiting, S.cfg->max_queue);
		free(ids);
		reject(c, 429, KPI_REJECT_QUEUE_FULL, err, false, "Retry-After: 1\r\n");
		api_request_free(&ar);
		return;
	}

	struct req *r = calloc(1, sizeof(*r));
	if (!r) {
		free(ids);
		reject(c, 503, KPI_REJECT_INTERNAL, "out of memory", true, NULL);
		api_request_free(&ar);
		return;
	}
	r->id = c->seq; /* the number its generated id string was made from */
	r->conn = c;
	r->chat = chat;
	r->stream = ar.stream;
	r->include_usage = ar.stream && ar.include_usage;
	memcpy(r->stop, ar.stop, sizeof(ar.stop));
	r->n_stop = ar.n_stop;
	ar.n_stop = 0;
	r->n_prompt = n_prompt;
	r->max_tokens = max_tokens;
	r->t_arrive = t_arrive;
	r->t_admit = now_ns();
	r->created = (long long)time(NULL);
	r->waiting = true;
	sbuf_reserve(&r->text, 256); /* never NULL: offsets into it are taken at once */
	memcpy(r->rid, c->rid, sizeof(r->rid));
	struct sampling_params sp = {
		.temperature = ar.temperature,
		.top_p = ar.top_p,
		.seed = ar.has_seed ? ar.seed : r->id * 0x9E3779B97F4A7C15ull ^ r->t_admit,
		.max_tokens = max_tokens,
		.ignore_eos = ar.ignore_eos,
	};
	api_request_free(&ar);
	req_insert(r);
	c->req = r;
	c->resp_id = r->id;
	c->state = CS_ACTIVE;
	S.n_waiting++;
	S.n_active++;
	if (KPI_REQUEST_ADMITTED_ENABLED())
		KPI_REQUEST_ADMITTED(r->id, c->fd, n_prompt, max_tokens, r->rid,
				     r->chat ? KPI_OP_CHAT : KPI_OP_TEXT_COMPLETION);
	eth_submit(&S.eth, r->id, ids, n_prompt, &sp);
	conn_update_events(c);
}

static void handle_models(struct conn *c)
{
	struct sbuf b = { 0 };
	sbuf_printf(&b, "{\"object\":\"list\",\"data\":[{\"id\":\"%s\",\"object\":\"model\","
		    "\"created\":%lld,\"owned_by\":\"kpi-infer\",\"max_model_len\":%d}]}\n",
		    S.model_json, (long long)time(NULL), S.ctx_len);
	respond(c, 200, "application/json", b.data, b.len, NULL);
	sbuf_free(&b);
}

static void handle_metrics(struct conn *c)
{
	struct engine_stats st;
	eth_stats(&S.eth, &st);
	struct sbuf b = { 0 };
	metrics_render(&S.m, &st, S.model_label, &b);
	respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len, NULL);
	sbuf_free(&b);
}

static void dispatch(struct conn *c, const char *body, size_t len)
{
	static const struct {
		const char *path, *method;
	} routes[] = {
		{ "/v1/completions", "POST" }, { "/v1/chat/completions", "POST" },
		{ "/v1/models", "GET" }, { "/health", "GET" }, { "/metrics", "GET" },
	};
	int route = -1;
	for (int i = 0; i < (int)(sizeof(routes) / sizeof(routes[0])); i++)
		if (!strcmp(c->path, routes[i].path))
			route = i;
	if (route < 0) {
		char msg[256];
		snprintf(msg, sizeof(msg), "no such path '%.100s': the API serves /v1/completions, "
			 "/v1/chat/completions, /v1/models, /health and /metrics", c->path);
		reject(c, 404, KPI_REJECT_NOT_FOUND, msg, false, NULL);
		return;
	}
	if (strcmp(c->method, routes[route].method)) {
		char msg[160], allow[32];
		snprintf(msg, sizeof(msg), "%s is not allowed on %s: use %s", c->method,
			 routes[route].path, routes[route].method);
		snprintf(allow, sizeof(allow), "Allow: %s\r\n", routes[route].method);
		reject(c, 405, KPI_REJECT_METHOD, msg, false, allow);
		return;
	}
	switch (route) {
	case 0:
	case 1:
		handle_generate(c, body, len, route == 1);
		break;
	case 2:
		handle_models(c);
		break;
	case 3:
		if (S.draining)
			reject(c, 503, KPI_REJECT_DRAINING, "the server is shutting down", true, NULL);
		else
			respond(c, 200, "application/json", "{\"status\":\"ok\"}\n", 16, NULL);
		break;
	case 4:
		handle_metrics(c);
		break;
	}
}

/* ---- reading requests ------------------------------------------------------- */

static int reason_for_status(int status)
{
	switch (status) {
	case 413: return KPI_REJECT_BODY_TOO_LARGE;
	case 431: return KPI_REJECT_HEADERS_TOO_LARGE;
	case 501: case 505: return KPI_REJECT_UNSUPPORTED;
	default: return KPI_REJECT_BAD_HTTP;
	}
}

/* Parses and serves every complete request in c->in, one at a time. */
static void conn_process(struct conn *c)
{
	while (c->state == CS_HEAD || c->state == CS_BODY) {
		if (c->state == CS_HEAD) {
			if (c->in.len == 0)
				return;
			if (!c->t_first_byte)
				c->t_first_byte = now_ns();
			struct http_request h;
			int r = http_parse_head(c->in.data, c->in.len, &h);
			if (r == 0)
				return;
			c->seq = ++S.seq;
			if (r > 0 && h.request_id)
				http_sanitize_request_id(h.request_id, h.request_id_len, c->rid);
			else
				c->rid[0] = 0;
			if (!c->rid[0])
				snprintf(c->rid, sizeof(c->rid), "req-%x-%llu", S.pid,
					 (unsigned long long)S.seq);
			if (r < 0) {
				c->minor = 1;
				reject(c, -r, reason_for_status(-r), h.error, true, NULL);
				return;
			}
			snprintf(c->method, sizeof(c->method), "%.*s", (int)h.method_len, h.method);
			if (h.path_len >= sizeof(c->path))
				h.path_len = sizeof(c->path) - 1; /* no route is that long: a 404 */
			for (size_t k = 0; k < h.path_len; k++) /* ASCII only: it is echoed in JSON */
				c->path[k] = (unsigned char)h.path[k] < 0x80 ? h.path[k] : '?';
			c->path[h.path_len] = 0;
			c->minor = h.minor;
			c->keep_alive = h.keep_alive;
			c->close_after = !h.keep_alive;
			c->chunked = h.chunked;
			c->content_length = h.content_length < 0 ? 0 : h.content_length;
			c->head_len = (size_t)r;
			c->sent_continue = false;
			memset(&c->ch, 0, sizeof(c->ch));
			sbuf_consume(&c->body, c->body.len);
			c->body_scan = 0;
			if (!c->chunked && (size_t)c->content_length > S.cfg->max_body) {
				char msg[160];
				snprintf(msg, sizeof(msg), "request body of %lld bytes exceeds the "
					 "limit of %zu bytes (--max-body)", c->content_length,
					 S.cfg->max_body);
				reject(c, 413, KPI_REJECT_BODY_TOO_LARGE, msg, true, NULL);
				return;
			}
			c->state = CS_BODY;
		}

		/* CS_BODY */
		const char *body;
		size_t body_len, total;
		if (c->chunked) {
			ssize_t k = http_chunked_feed(&c->ch, c->in.data + c->head_len + c->body_scan,
						      c->in.len - c->head_len - c->body_scan, &c->body,
						      S.cfg->max_body);
			if (k < 0) {
				reject(c, (int)-k, reason_for_status((int)-k), c->ch.error, true, NULL);
				return;
			}
			c->body_scan += (size_t)k;
			if (!c->ch.done)
				goto need_more;
			body = c->body.data ? c->body.data : "";
			body_len = c->body.len;
			total = c->head_len + c->body_scan;
		} else {
			if (c->in.len - c->head_len < (size_t)c->content_length)
				goto need_more;
			body = c->in.data + c->head_len;
			body_len = (size_t)c->content_length;
			total = c->head_len + body_len;
		}
		c->state = CS_ACTIVE;
		dispatch(c, body, body_len);
		if (c->state == CS_CLOSED)
			return;
		if (c->state == CS_LINGER)
			return; /* linger already dropped the input */
		sbuf_consume(&c->in, total);
		continue;
need_more:
		if (c->in.len == c->head_len && c->in.len && !c->sent_continue) {
			/* the client waits for a go-ahead before its body */
			struct http_request h;
			if (http_parse_head(c->in.data, c->in.len, &h) > 0 && h.expect_continue) {
				c->sent_continue = true;
				static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
				ssize_t w = send(c->fd, cont, sizeof(cont) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
				(void)w;
			}
		}
		return;
	}
}

static void conn_readable(struct conn *c)
{
	if (c->state == CS_LINGER) {
		char junk[4096];
		ssize_t n;
		while ((n = recv(c->fd, junk, sizeof(junk), MSG_DONTWAIT)) > 0)
			;
		if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
			conn_close(c);
		return;
	}
	if (c->state != CS_HEAD && c->state != CS_BODY)
		return;
	size_t limit = HTTP_MAX_HEAD + S.cfg->max_body + 4096;
	/* chunk framing can add bytes beyond the payload: allow for some */
	if (c->chunked)
		limit += S.cfg->max_body / 2 + 65536;
	if (c->in.len >= limit) {
		reject(c, 413, KPI_REJECT_BODY_TOO_LARGE, "request exceeds the size limit", true,
		       NULL);
		return;
	}
	sbuf_reserve(&c->in, READ_CHUNK);
	ssize_t n = recv(c->fd, c->in.data + c->in.len, c->in.cap - c->in.len - 1, MSG_DONTWAIT);
	if (n == 0) {
		conn_close(c);
		return;
	}
	if (n < 0) {
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			conn_close(c);
		return;
	}
	c->in.len += (size_t)n;
	c->in.data[c->in.len] = 0;
	c->t_activity = now_ns();
	conn_process(c);
}

static void conn_event(struct conn *c, uint32_t ev)
{
	if (ev & EPOLLOUT)
		conn_flush(c);
	if (c->state == CS_CLOSED)
		return;
	if (ev & EPOLLIN)
		conn_readable(c);
	if (c->state == CS_CLOSED)
		return;
	if (ev & (EPOLLERR | EPOLLHUP)) {
		conn_close(c);
		return;
	}
	/* a peer that shut its side mid-response has gone: cancel now */
	if ((ev & EPOLLRDHUP) && c->state != CS_HEAD && c->state != CS_BODY &&
	    c->state != CS_LINGER)
		conn_close(c);
	else if ((ev & EPOLLRDHUP) && !(ev & EPOLLIN))
		conn_close(c);
}

/* ---- accepting and timing out ---------------------------------------------- */

static void accept_all(void)
{
	while (S.lfd >= 0 && S.nconns < S.cfg->max_conns) {
		int fd = accept4(S.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				/* out of descriptors: stop listening for a second */
				epoll_ctl(S.epfd, EPOLL_CTL_DEL, S.lfd, NULL);
				S.listen_paused = true;
			}
			return;
		}
		int one = 1;
		/* tokens leave as soon as they are written, not after a delayed ACK */
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		struct conn *c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			return;
		}
		c->tag = TAG_CONN;
		c->fd = fd;
		c->state = CS_HEAD;
		c->t_activity = now_ns();
		c->minor = 1;
		c->events = EPOLLIN | EPOLLRDHUP;
		struct epoll_event e = { .events = c->events, .data.ptr = c };
		if (epoll_ctl(S.epfd, EPOLL_CTL_ADD, fd, &e) < 0) {
			close(fd);
			free(c);
			continue;
		}
		c->next = S.conns;
		if (S.conns)
			S.conns->prev = c;
		S.conns = c;
		S.nconns++;
		S.m.connections_total++;
		S.m.connections_open = S.nconns;
	}
	if (S.lfd >= 0 && S.nconns >= S.cfg->max_conns && !S.listen_paused) {
		epoll_ctl(S.epfd, EPOLL_CTL_DEL, S.lfd, NULL);
		S.listen_paused = true;
	}
}

static void sweep(uint64_t now)
{
	uint64_t req_ns = (uint64_t)S.cfg->request_timeout_s * 1000000000ull;
	uint64_t idle_ns = (uint64_t)S.cfg->idle_timeout_s * 1000000000ull;
	for (struct conn *c = S.conns, *next; c; c = next) {
		next = c->next;
		if ((c->state == CS_HEAD || c->state == CS_BODY) && c->t_first_byte &&
		    now - c->t_first_byte > req_ns) {
			if (!c->rid[0] || c->state == CS_HEAD)
				snprintf(c->rid, sizeof(c->rid), "req-%x-%llu", S.pid,
					 (unsigned long long)++S.seq);
			char msg[128];
			snprintf(msg, sizeof(msg), "request not received within %d s "
				 "(--request-timeout)", S.cfg->request_timeout_s);
			reject(c, 408, KPI_REJECT_TIMEOUT, msg, true, NULL);
		} else if (c->state == CS_HEAD && !c->t_first_byte &&
			   (now - c->t_activity > idle_ns || S.draining)) {
			conn_close(c);
		} else if (c->state == CS_LINGER && now - c->t_activity > LINGER_NS) {
			conn_close(c);
		}
	}
	if (S.listen_paused && S.lfd >= 0 && S.nconns < S.cfg->max_conns) {
		struct epoll_event e = { .events = EPOLLIN, .data.ptr = &S.tag_listen };
		if (epoll_ctl(S.epfd, EPOLL_CTL_ADD, S.lfd, &e) == 0)
			S.listen_paused = false;
	}
}

/* ---- setup and the loop ------------------------------------------------------ */

static int listen_on(const char *host, int port)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *res;
	char portstr[16];
	snprintf(portstr, sizeof(portstr), "%d", port);
	int rc = getaddrinfo(host, portstr, &hints, &res);
	if (rc) {
		fprintf(stderr, "kpi-infer: cannot resolve --host '%s': %s\n", host,
			gai_strerror(rc));
		return -1;
	}
	int fd = -1, err = 0;
	for (struct addrinfo *a = res; a; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			err = errno;
			continue;
		}
		int one = 1;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 4096) == 0)
			break;
		err = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		fprintf(stderr, "kpi-infer: cannot listen on %s:%d: %s%s\n", host, port,
			strerror(err), err == EADDRINUSE ? " (pick another --port)" : "");
	return fd;
}

static void raise_fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* A model name safe both inside a JSON string and a Prometheus label. */
static void set_model_name(const char *name)
{
	size_t o = 0;
	for (size_t i = 0; name[i] && o < sizeof(S.model_label) - 1; i++) {
		unsigned char ch = (unsigned char)name[i];
		S.model_label[o++] = (ch < 0x20 || ch == '"' || ch == '\\' || ch >= 0x7f) ? '_' :
			(char)ch;
	}
	S.model_label[o] = 0;
	snprintf(S.model_json, sizeof(S.model_json), "%s", S.model_label);
}

int server_run(struct engine *e, const struct server_config *cfg)
{
	memset(&S, 0, sizeof(S));
	S.cfg = cfg;
	S.e = e;
	S.mi = engine_model(e);
	S.pid = (unsigned)getpid();
	S.tag_listen = TAG_LISTEN;
	S.tag_wake = TAG_WAKE;
	S.tag_signal = TAG_SIGNAL;
	metrics_init(&S.m);
	set_model_name(S.mi->name[0] ? S.mi->name : cfg->model_label);
	raise_fd_limit();

	struct engine_stats st;
	engine_stats(e, &st);
	S.ctx_len = S.mi->context_length;
	S.kv_tokens = st.kv_blocks_total * (cfg->block_size > 0 ? cfg->block_size : 16);

	S.lfd = listen_on(cfg->host, cfg->port);
	if (S.lfd < 0)
		return 1;
	S.epfd = epoll_create1(EPOLL_CLOEXEC);
	S.wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	sigset_t ss;
	sigemptyset(&ss);
	sigaddset(&ss, SIGTERM);
	sigaddset(&ss, SIGINT);
	S.sigfd = signalfd(-1, &ss, SFD_NONBLOCK | SFD_CLOEXEC);
	if (S.epfd < 0 || S.wakefd < 0 || S.sigfd < 0) {
		fprintf(stderr, "kpi-infer: cannot create epoll/eventfd/signalfd: %s\n",
			strerror(errno));
		return 1;
	}
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &S.tag_listen };
	epoll_ctl(S.epfd, EPOLL_CTL_ADD, S.lfd, &ev);
	ev.data.ptr = &S.tag_wake;
	epoll_ctl(S.epfd, EPOLL_CTL_ADD, S.wakefd, &ev);
	ev.data.ptr = &S.tag_signal;
	epoll_ctl(S.epfd, EPOLL_CTL_ADD, S.sigfd, &ev);

	int rc = eth_start(&S.eth, e, S.wakefd);
	if (rc < 0) {
		fprintf(stderr, "kpi-infer: cannot start the engine thread: %s\n", strerror(-rc));
		return 1;
	}

	const char *h = cfg->host;
	bool v6 = strchr(h, ':') != NULL;
	printf("listening on http://%s%s%s:%d\n", v6 ? "[" : "", h, v6 ? "]" : "", cfg->port);
	fflush(stdout);

	struct epoll_event evs[256];
	uint64_t last_sweep = now_ns();
	for (;;) {
		if (S.draining && S.nconns == 0 && S.n_active == 0)
			break;
		int n = epoll_wait(S.epfd, evs, 256, 250);
		if (n < 0 && errno != EINTR) {
			fprintf(stderr, "kpi-infer: epoll_wait: %s\n", strerror(errno));
			break;
		}
		for (int i = 0; i < n; i++) {
			int tag = *(int *)evs[i].data.ptr;
			if (tag == TAG_LISTEN) {
				accept_all();
			} else if (tag == TAG_WAKE) {
				handle_engine_events();
			} else if (tag == TAG_SIGNAL) {
				struct signalfd_siginfo si;
				while (read(S.sigfd, &si, sizeof(si)) == sizeof(si)) {
					if (S.draining) {
						fprintf(stderr, "kpi-infer: second signal, exiting now\n");
						return 1;
					}
					fprintf(stderr, "kpi-infer: %s: draining %d in-flight "
						"requests\n", strsignal((int)si.ssi_signo), S.n_active);
					S.draining = true;
					if (S.lfd >= 0) {
						epoll_ctl(S.epfd, EPOLL_CTL_DEL, S.lfd, NULL);
						close(S.lfd);
						S.lfd = -1;
					}
					sweep(now_ns()); /* closes idle keep-alive connections */
				}
			} else {
				struct conn *c = evs[i].data.ptr;
				if (c->state != CS_CLOSED)
					conn_event(c, evs[i].events);
			}
		}
		uint64_t now = now_ns();
		if (now - last_sweep > 250000000ull) {
			sweep(now);
			last_sweep = now;
		}
		reap_dead();
	}
	eth_stop(&S.eth);
	for (int b = 0; b < REQ_BUCKETS; b++)
		while (S.reqs[b]) {
			struct req *r = S.reqs[b];
			S.reqs[b] = r->hnext;
			req_free(r);
		}
	while (S.conns)
		conn_close(S.conns);
	reap_dead();
	close(S.wakefd);
	close(S.sigfd);
	close(S.epfd);
	return 0;
}
