/* upstream.h - outbound HTTP/1.1 exchanges on the I/O thread's epoll: the
 * router's requests to its workers and a decode worker's KV request to a
 * prefill worker. Keep-alive connections pooled per "host:port" (a request
 * that finds a reused connection dead before any answer is sent again on a
 * fresh one), non-blocking connect, the answer's framing (Content-Length,
 * chunked or until close) followed so the owner gets the body as it arrives
 * and knows where it ends. The owner hears through its ops, never the other
 * way round. */
#ifndef KPI_PD_UPSTREAM_H
#define KPI_PD_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "daemon/server/http.h"
#include "daemon/server/sbuf.h"

struct upstream;

enum upstream_error {
	UPSTREAM_CONNECT = 1, /* refused, unreachable, or no such host */
	UPSTREAM_IO,          /* reset or closed before the answer was complete */
	UPSTREAM_PROTOCOL,    /* not a valid HTTP/1.x answer */
	UPSTREAM_TIMEOUT,     /* no byte for --upstream-timeout */
};

struct upstream_ops {
	/* the answer's head (head: its bytes as received) */
	void (*on_head)(struct upstream *u, void *owner, const struct http_response *h,
			const char *head);
	/* body bytes as received (chunk framing included); last: the body ends here */
	void (*on_body)(struct upstream *u, void *owner, const char *p, size_t n, bool last);
	/* optional, for a Content-Length body: where to receive the next bytes
	 * instead of on_body, as up to max pieces filled in order by one readv
	 * (returns how many; 0: on_body); body_got says how many bytes came */
	int (*body_iov)(struct upstream *u, void *owner, struct iovec *iov, int max);
	void (*body_got)(struct upstream *u, void *owner, size_t n, bool last);
	/* the exchange failed; the connection is already closed, u is gone after this */
	void (*on_error)(struct upstream *u, void *owner, enum upstream_error e, const char *msg);
};

struct upstream_pool;

struct upstream {
	int tag;                   /* TAG_UPSTREAM */
	int fd;
	struct upstream_pool *pool;
	enum { U_CONNECTING, U_SENDING, U_HEAD, U_BODY, U_IDLE, U_CLOSED } state;
	bool reused, retried, got_bytes;
	uint32_t events;
	struct sbuf out;           /* the request, kept until answered (a retry resends it) */
	size_t out_off;
	struct sbuf in;            /* the head, and body bytes read with it */
	struct http_response resp;
	long long body_left;       /* Content-Length bytes still to come; -1: chunked or to EOF */
	struct http_chunked ch;
	struct sbuf scratch;       /* decoded chunks, dropped: only the framing matters */
	const struct upstream_ops *ops;
	void *owner;
	uint64_t t_activity;
	struct upstream *idle_next, *all_prev, *all_next, *dead_next;
};

/* Starts an exchange with addr ("host:port"): req holds the whole request
 * (head and body). NULL with err set when addr cannot be resolved or no
 * socket can be made; otherwise every outcome comes through ops. */
struct upstream *upstream_start(const char *addr, const char *req, size_t len,
				const struct upstream_ops *ops, void *owner, char *err, size_t errlen);
void upstream_event(struct upstream *u, uint32_t ev);
/* The owner gives up (its client went away): the connection closes, no op
 * is called again. */
void upstream_abort(struct upstream *u);
/* Timeouts; now: eth_now_ns(). */
void upstream_sweep(uint64_t now);
/* Frees the closed ones (end of a loop iteration), and at exit everything. */
void upstream_reap(void);
void upstream_close_all(void);
/* "ip:port" of the connection's other end ("" before connect). */
void upstream_peer(const struct upstream *u, char *out, size_t n);
int upstream_fd(const struct upstream *u);

#endif
