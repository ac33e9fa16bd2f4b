/* conn.c - one client connection's state machine: read a request head and
 * body, hand it to the request handler, write the response (one send() per
 * call while nothing is queued), keep alive, linger or close. Calls nothing
 * above it: the handler and the owners' callbacks are function pointers. */
#include "daemon/server/conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h> /* IOV_MAX: most pieces one sendmsg or readv takes */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "kpi_probes.h"
#include "abi/kpi_reasons.h"
#include "daemon/server/openai.h"
#include "daemon/server/state.h"

#define READ_CHUNK 65536
#define OUT_LIMIT (8u << 20)   /* unread response bytes before a client counts as gone */
#define LINGER_NS (2000000000ull)

static conn_handler_fn conn_handler;

static void conn_process(struct conn *c);
static void conn_out_free(struct conn *c);

void conn_set_handler(conn_handler_fn fn)
{
	conn_handler = fn;
}

void conn_attach(struct conn *c, void *owner, void (*on_gone)(struct conn *, void *),
		 void (*on_sent)(struct conn *, void *))
{
	c->owner = owner;
	c->on_gone = on_gone;
	c->on_sent = on_sent;
}

void conn_detach(struct conn *c)
{
	c->owner = NULL;
	c->on_gone = NULL;
	c->on_sent = NULL;
}

/* ---- epoll interest and lifetime ------------------------------------------- */

static void conn_set_events(struct conn *c, uint32_t ev)
{
	if (c->state == CS_CLOSED || ev == c->events)
		return;
	struct epoll_event e = { .events = ev, .data.ptr = c };
	epoll_ctl(srv.epfd, EPOLL_CTL_MOD, c->fd, &e);
	c->events = ev;
}

/* Interest follows the state: read while a request is incoming, only watch
 * for hang-ups while one is served (pipelined bytes wait in the kernel). */
void conn_update_events(struct conn *c)
{
	uint32_t ev = EPOLLRDHUP;
	if (c->state == CS_HEAD || c->state == CS_BODY || c->state == CS_LINGER)
		ev |= EPOLLIN;
	if (c->out_bytes)
		ev |= EPOLLOUT;
	conn_set_events(c, ev);
}

bool conn_open(int fd)
{
	int one = 1;
	/* tokens leave as soon as they are written, not after a delayed ACK */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	struct conn *c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return false;
	}
	c->tag = TAG_CONN;
	c->fd = fd;
	c->state = CS_HEAD;
	c->t_activity = eth_now_ns();
	c->minor = 1;
	c->events = EPOLLIN | EPOLLRDHUP;
	struct epoll_event e = { .events = c->events, .data.ptr = c };
	if (epoll_ctl(srv.epfd, EPOLL_CTL_ADD, fd, &e) < 0) {
		close(fd);
		free(c);
		return true;
	}
	c->next = srv.conns;
	if (srv.conns)
		srv.conns->prev = c;
	srv.conns = c;
	srv.nconns++;
	srv.m.connections_total++;
	srv.m.connections_open = srv.nconns;
	return true;
}

void conn_close(struct conn *c)
{
	if (c->state == CS_CLOSED)
		return;
	if (c->on_gone) {
		/* the client went away mid-request: its server frees it at once */
		void (*gone)(struct conn *, void *) = c->on_gone;
		void *owner = c->owner;
		conn_detach(c);
		gone(c, owner);
	}
	epoll_ctl(srv.epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->state = CS_CLOSED;
	if (c->prev)
		c->prev->next = c->next;
	else
		srv.conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	srv.nconns--;
	srv.m.connections_open = srv.nconns;
	/* freed later: the loop may still hold this pointer in its event batch */
	c->dead_next = srv.dead;
	srv.dead = c;
}

/* A response ended inside a call from above (conn_send): the requests
 * pipelined behind it are read at the end of the loop iteration, never from
 * inside that call. */
static void conn_mark_ready(struct conn *c)
{
	if (c->on_ready || !c->in.len)
		return;
	c->on_ready = true;
	c->ready_next = srv.ready;
	srv.ready = c;
}

void conn_run_ready(void)
{
	while (srv.ready) {
		struct conn *c = srv.ready;
		srv.ready = c->ready_next;
		c->on_ready = false;
		if (c->state == CS_HEAD && c->in.len)
			conn_process(c);
	}
}

void conn_reap_dead(void)
{
	while (srv.dead) {
		struct conn *c = srv.dead;
		srv.dead = c->dead_next;
		sbuf_free(&c->in);
		conn_out_free(c);
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
	c->t_activity = eth_now_ns();
	sbuf_consume(&c->in, c->in.len);
	conn_update_events(c);
}

/* ---- writing responses ----------------------------------------------------- */

static void response_done(struct conn *c)
{
	if (KPI_RESPONSE_END_ENABLED())
		KPI_RESPONSE_END(c->resp_id, c->fd, c->resp_status);
	if (c->resp_status >= 100 && c->resp_status < 600)
		srv.m.http_status[c->resp_status]++;
	if (c->on_sent) {
		void (*sent)(struct conn *, void *) = c->on_sent;
		void *owner = c->owner;
		conn_detach(c);
		sent(c, owner);
	}
	c->resp_started = c->resp_final = c->out_unlimited = false;
	c->resp_id = 0;
	c->t_first_byte = 0;
	c->t_activity = eth_now_ns();
	if (c->close_after || srv.draining) {
		conn_linger(c);
		return;
	}
	c->state = CS_HEAD;
	conn_update_events(c);
	conn_mark_ready(c);
}

/* ---- the output queue: what the socket did not take, in order ----------------- */

struct conn_seg {
	struct conn_seg *next;
	char *data;       /* ext, or the bytes after this header */
	size_t len, off;  /* runs: of all of them */
	void (*release)(void *); /* the caller's buffer, handed over: release(data); NULL: a copy */
	/* runs (conn_send_runs): iov[i] + ioff is the next byte; release(arg) at the end */
	struct iovec *iov;
	int n, i;
	size_t ioff;
	void *arg;
};

static void seg_push(struct conn *c, struct conn_seg *g)
{
	g->next = NULL;
	if (c->out_tail)
		c->out_tail->next = g;
	else
		c->out_head = g;
	c->out_tail = g;
	c->out_bytes += g->len - g->off;
}

static struct conn_seg *seg_new(size_t extra)
{
	struct conn_seg *g = calloc(1, sizeof(*g) + extra);
	if (!g) {
		fprintf(stderr, "kpi-infer: out of memory queueing %zu response bytes\n", extra);
		abort();
	}
	return g;
}

/* Queues p[0..n): a copy, or p itself when release is given (taken:
 * released once sent). */
static void seg_add(struct conn *c, const char *p, size_t n, void (*release)(void *))
{
	bool owned = release != NULL;
	if (!n) {
		if (owned)
			release((void *)p);
		return;
	}
	struct conn_seg *g = seg_new(owned ? 0 : n);
	g->data = owned ? (char *)p : (char *)(g + 1);
	if (!owned)
		memcpy(g->data, p, n);
	g->len = n;
	g->release = release;
	seg_push(c, g);
}

static void seg_free(struct conn_seg *g)
{
	if (g->iov) {
		free(g->iov);
		if (g->release)
			g->release(g->arg);
	} else if (g->release) {
		g->release(g->data);
	}
	free(g);
}

static void conn_out_free(struct conn *c)
{
	while (c->out_head) {
		struct conn_seg *g = c->out_head;
		c->out_head = g->next;
		seg_free(g);
	}
	c->out_tail = NULL;
	c->out_bytes = 0;
}

/* n bytes of g went out. */
static void seg_advance(struct conn_seg *g, size_t n)
{
	g->off += n;
	while (g->iov && n > 0) {
		size_t left = g->iov[g->i].iov_len - g->ioff;
		if (n < left) {
			g->ioff += n;
			return;
		}
		n -= left;
		g->i++;
		g->ioff = 0;
	}
}

/* Sends what the socket takes from the queue now; -1 when the connection failed. */
static int out_drain(struct conn *c)
{
	while (c->out_head) {
		struct iovec iov[IOV_MAX];
		int k = 0;
		for (struct conn_seg *g = c->out_head; g && k < IOV_MAX; g = g->next) {
			if (!g->iov) {
				iov[k++] = (struct iovec){ g->data + g->off, g->len - g->off };
				continue;
			}
			for (int j = g->i; j < g->n && k < IOV_MAX; j++) {
				size_t o = j == g->i ? g->ioff : 0;
				iov[k++] = (struct iovec){ (char *)g->iov[j].iov_base + o,
							   g->iov[j].iov_len - o };
			}
		}
		struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)k };
		ssize_t n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
		c->out_bytes -= (size_t)n;
		while (n > 0) {
			struct conn_seg *g = c->out_head;
			size_t left = g->len - g->off, take = (size_t)n < left ? (size_t)n : left;
			seg_advance(g, take);
			n -= (ssize_t)take;
			if (g->off == g->len) {
				c->out_head = g->next;
				if (!c->out_head)
					c->out_tail = NULL;
				seg_free(g);
			}
		}
	}
	return 0;
}

static void resp_start(struct conn *c)
{
	if (!c->resp_started) {
		c->resp_started = true;
		if (KPI_RESPONSE_START_ENABLED())
			KPI_RESPONSE_START(c->resp_id, c->fd);
	}
}

/* What a send left queued is sent as the socket drains; final: the response
 * ends with it. */
static void queued(struct conn *c, bool final)
{
	if (final)
		c->resp_final = true;
	if (!c->out_bytes && final)
		response_done(c);
	else
		conn_update_events(c);
}

/* release: the last piece is handed over, released once sent (NULL: copied). */
static void sendv(struct conn *c, const struct iovec *iov, int n, bool final,
		  void (*release)(void *))
{
	if (c->state == CS_CLOSED) {
		if (release)
			release(iov[n - 1].iov_base);
		return;
	}
	resp_start(c);
	size_t sent = 0;
	if (!c->out_bytes) {
		struct msghdr mh = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n };
		ssize_t k = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
			if (release)
				release(iov[n - 1].iov_base);
			conn_close(c);
			return;
		}
		if (k > 0)
			sent = (size_t)k;
	}
	for (int i = 0; i < n; i++) { /* what did not go out waits, in order */
		size_t skip = sent < iov[i].iov_len ? sent : iov[i].iov_len;
		sent -= skip;
		bool own = release && i == n - 1;
		if (own && skip < iov[i].iov_len) {
			/* handed over without a copy: sent from where it stands */
			seg_add(c, iov[i].iov_base, iov[i].iov_len, release);
			c->out_tail->off = skip;
			c->out_bytes -= skip;
		} else if (skip < iov[i].iov_len) {
			seg_add(c, (const char *)iov[i].iov_base + skip, iov[i].iov_len - skip, NULL);
		} else if (own) {
			release(iov[i].iov_base);
		}
	}
	if (c->out_bytes > OUT_LIMIT && !c->out_unlimited) {
		conn_close(c); /* not reading its response: treat as gone */
		return;
	}
	queued(c, final);
}

void conn_sendv(struct conn *c, const struct iovec *iov, int n, bool final)
{
	sendv(c, iov, n, final, NULL);
}

void conn_sendv_owned(struct conn *c, const struct iovec *iov, int n, bool final,
		      void (*release)(void *))
{
	sendv(c, iov, n, final, release);
}

void conn_send_runs(struct conn *c, struct iovec *iov, int n, bool final,
		    void (*release)(void *), void *arg)
{
	struct conn_seg *g = seg_new(0);
	g->iov = iov;
	g->n = n;
	g->release = release;
	g->arg = arg;
	for (int i = 0; i < n; i++)
		g->len += iov[i].iov_len;
	if (c->state == CS_CLOSED || !g->len) {
		seg_free(g);
		return;
	}
	resp_start(c);
	seg_push(c, g);
	if (c->out_head == g && out_drain(c) < 0) { /* nothing ahead of it: out now */
		conn_close(c);
		return;
	}
	queued(c, final);
}

void conn_send(struct conn *c, const char *data, size_t len, bool final)
{
	struct iovec iov = { (void *)data, len };
	sendv(c, &iov, 1, final, false);
}

static void conn_flush(struct conn *c)
{
	if (out_drain(c) < 0) {
		conn_close(c);
		return;
	}
	if (!c->out_bytes && c->resp_final) {
		response_done(c); /* a pipelined request waiting behind it is read next */
	} else {
		conn_update_events(c);
	}
}

void conn_resp_head(struct sbuf *b, struct conn *c, int status, const char *ctype,
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
	if (c->close_after || srv.draining)
		sbuf_adds(b, "Connection: close\r\n");
	else if (c->minor == 0)
		sbuf_adds(b, "Connection: keep-alive\r\n");
	sbuf_adds(b, "\r\n");
}

void conn_respond(struct conn *c, int status, const char *ctype, const char *body,
		  size_t len, const char *extra)
{
	struct sbuf b = { 0 };
	c->resp_status = status;
	c->state = CS_ACTIVE;
	conn_resp_head(&b, c, status, ctype, (long long)len, false, extra);
	sbuf_add(&b, body, len);
	conn_send(c, b.data, b.len, true);
	sbuf_free(&b);
}

void conn_reject(struct conn *c, int status, int reason, const char *msg, bool close,
		 const char *extra)
{
	if (KPI_REQUEST_REJECTED_ENABLED())
		KPI_REQUEST_REJECTED(c->fd, status, reason, c->rid);
	srv.m.rejected_total++;
	if (close)
		c->close_after = true;
	struct sbuf b = { 0 };
	openai_error(&b, status, msg);
	conn_respond(c, status, "application/json", b.data, b.len, extra);
	sbuf_free(&b);
}

/* ---- reading requests ------------------------------------------------------- */

void conn_make_request_id(struct conn *c, uint64_t n)
{
	snprintf(c->rid, sizeof(c->rid), "req-%x-%llu", srv.pid, (unsigned long long)n);
}

void conn_peer(const struct conn *c, char *out, size_t n)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[INET6_ADDRSTRLEN] = "?";
	int port = 0;
	if (getpeername(c->fd, (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET) {
			struct sockaddr_in *a = (struct sockaddr_in *)&ss;
			inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
			port = ntohs(a->sin_port);
		} else if (ss.ss_family == AF_INET6) {
			struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
			inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
			port = ntohs(a->sin6_port);
		}
	}
	snprintf(out, n, "%s:%d", host, port);
}

static int reason_for_status(int status)
{
	switch (status) {
	case 413: return KPI_REJECT_BODY_TOO_LARGE;
	case 431: return KPI_REJECT_HEADERS_TOO_LARGE;
	case 501: case 505: return KPI_REJECT_UNSUPPORTED;
	default: return KPI_REJECT_BAD_HTTP;
	}
}

/* Keeps what the rest of the request needs from a parsed head of head_len bytes. */
static void conn_take_head(struct conn *c, struct http_request *h, size_t head_len)
{
	snprintf(c->method, sizeof(c->method), "%.*s", (int)h->method_len, h->method);
	if (h->path_len >= sizeof(c->path))
		h->path_len = sizeof(c->path) - 1; /* no route is that long: a 404 */
	for (size_t k = 0; k < h->path_len; k++) /* ASCII only: it is echoed in JSON */
		c->path[k] = (unsigned char)h->path[k] < 0x80 ? h->path[k] : '?';
	c->path[h->path_len] = 0;
	c->minor = h->minor;
	c->keep_alive = h->keep_alive;
	c->close_after = !h->keep_alive;
	c->chunked = h->chunked;
	c->content_length = h->content_length < 0 ? 0 : h->content_length;
	c->head_len = head_len;
	c->sent_continue = false;
	memset(&c->ch, 0, sizeof(c->ch));
	sbuf_consume(&c->body, c->body.len);
	c->body_scan = 0;
}

/* CS_HEAD: parses the head waiting in c->in. True when its body is to be read
 * next; false while the head is incomplete or after a rejection. */
static bool conn_read_head(struct conn *c)
{
	if (c->in.len == 0)
		return false;
	if (!c->t_first_byte)
		c->t_first_byte = eth_now_ns();
	struct http_request h;
	int r = http_parse_head(c->in.data, c->in.len, &h);
	if (r == 0)
		return false;
	c->seq = ++srv.seq;
	if (r > 0 && h.request_id)
		http_sanitize_request_id(h.request_id, h.request_id_len, c->rid);
	else
		c->rid[0] = 0;
	c->prefill[0] = 0;
	c->has_model_fp = false;
	if (r > 0 && h.prefill)
		http_sanitize_hostport(h.prefill, h.prefill_len, c->prefill, sizeof(c->prefill));
	if (r > 0 && h.model_fp)
		c->has_model_fp = http_parse_hex64(h.model_fp, h.model_fp_len, &c->model_fp);
	if (!c->rid[0])
		conn_make_request_id(c, srv.seq);
	if (r < 0) {
		c->minor = 1;
		conn_reject(c, -r, reason_for_status(-r), h.error, true, NULL);
		return false;
	}
	conn_take_head(c, &h, (size_t)r);
	if (!c->chunked && (size_t)c->content_length > srv.cfg->max_body) {
		char msg[160];
		snprintf(msg, sizeof(msg), "request body of %lld bytes exceeds the limit of %zu "
			 "bytes (--max-body)", c->content_length, srv.cfg->max_body);
		conn_reject(c, 413, KPI_REJECT_BODY_TOO_LARGE, msg, true, NULL);
		return false;
	}
	c->state = CS_BODY;
	return true;
}

/* CS_BODY: 1 when the body is complete (*total: the bytes of c->in the
 * request spans), 0 while more is needed, -1 after a rejection. */
static int conn_read_body(struct conn *c, const char **body, size_t *len, size_t *total)
{
	if (c->chunked) {
		ssize_t k = http_chunked_feed(&c->ch, c->in.data + c->head_len + c->body_scan,
					      c->in.len - c->head_len - c->body_scan, &c->body,
					      srv.cfg->max_body);
		if (k < 0) {
			conn_reject(c, (int)-k, reason_for_status((int)-k), c->ch.error, true, NULL);
			return -1;
		}
		c->body_scan += (size_t)k;
		if (!c->ch.done)
			return 0;
		*body = c->body.data ? c->body.data : "";
		*len = c->body.len;
		*total = c->head_len + c->body_scan;
		return 1;
	}
	if (c->in.len - c->head_len < (size_t)c->content_length)
		return 0;
	*body = c->in.data + c->head_len;
	*len = (size_t)c->content_length;
	*total = c->head_len + *len;
	return 1;
}

/* A client that sent Expect: 100-continue waits for a go-ahead before its body. */
static void conn_send_continue(struct conn *c)
{
	if (c->in.len != c->head_len || !c->in.len || c->sent_continue)
		return;
	struct http_request h;
	if (http_parse_head(c->in.data, c->in.len, &h) > 0 && h.expect_continue) {
		c->sent_continue = true;
		static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
		ssize_t w = send(c->fd, cont, sizeof(cont) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
		(void)w;
	}
}

/* Parses and serves every complete request in c->in, one at a time. */
static void conn_process(struct conn *c)
{
	while (c->state == CS_HEAD || c->state == CS_BODY) {
		if (c->state == CS_HEAD && !conn_read_head(c))
			return;
		const char *body;
		size_t len, total;
		int k = conn_read_body(c, &body, &len, &total);
		if (k == 0)
			conn_send_continue(c);
		if (k <= 0)
			return;
		c->state = CS_ACTIVE;
		conn_handler(c, body, len);
		if (c->state == CS_CLOSED || c->state == CS_LINGER)
			return; /* linger already dropped the input */
		sbuf_consume(&c->in, total);
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
	size_t limit = HTTP_MAX_HEAD + srv.cfg->max_body + 4096;
	/* chunk framing can add bytes beyond the payload: allow for some */
	if (c->chunked)
		limit += srv.cfg->max_body / 2 + 65536;
	if (c->in.len >= limit) {
		conn_reject(c, 413, KPI_REJECT_BODY_TOO_LARGE, "request exceeds the size limit",
			    true, NULL);
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
	c->t_activity = eth_now_ns();
	conn_process(c);
}

void conn_sweep(uint64_t now)
{
	uint64_t req_ns = (uint64_t)srv.cfg->request_timeout_s * 1000000000ull;
	uint64_t idle_ns = (uint64_t)srv.cfg->idle_timeout_s * 1000000000ull;
	for (struct conn *c = srv.conns, *next; c; c = next) {
		next = c->next;
		if ((c->state == CS_HEAD || c->state == CS_BODY) && c->t_first_byte &&
		    now - c->t_first_byte > req_ns) {
			if (!c->rid[0] || c->state == CS_HEAD)
				conn_make_request_id(c, ++srv.seq);
			char msg[128];
			snprintf(msg, sizeof(msg), "request not received within %d s "
				 "(--request-timeout)", srv.cfg->request_timeout_s);
			conn_reject(c, 408, KPI_REJECT_TIMEOUT, msg, true, NULL);
		} else if (c->state == CS_HEAD && !c->t_first_byte &&
			   (now - c->t_activity > idle_ns || srv.draining)) {
			conn_close(c);
		} else if (c->state == CS_LINGER && now - c->t_activity > LINGER_NS) {
			conn_close(c);
		}
	}
}

void conn_event(struct conn *c, uint32_t ev)
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
