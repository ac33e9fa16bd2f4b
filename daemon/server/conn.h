/* conn.h - inbound client connections: read a request head and body, hand the
 * complete request up through the one handler set by conn_set_handler, write
 * the response (one send() per call while nothing is queued), keep alive,
 * linger or close. Knows no route and no request type: whoever serves a
 * request attaches itself (conn_attach) to hear of the client going away. */
#ifndef KPI_SERVER_CONN_H
#define KPI_SERVER_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/server/http.h"
#include "daemon/server/sbuf.h"

enum conn_state {
	CS_HEAD,    /* reading a request head */
	CS_BODY,    /* reading its body */
	CS_ACTIVE,  /* response in progress (engine working or bytes queued) */
	CS_LINGER,  /* write side shut, discarding input until EOF */
	CS_CLOSED,  /* freed at the end of this loop iteration */
};

#define CONN_PREFILL_MAX 128

struct conn_seg; /* "host:port" of an x-kpi-prefill header */

struct conn {
	int tag;                   /* TAG_CONN */
	int fd;
	struct conn *prev, *next;  /* all open connections, for timeouts */
	struct conn *dead_next, *ready_next;
	bool on_ready;
	enum conn_state state;
	uint32_t events;           /* current epoll interest */
	struct sbuf in;
	struct conn_seg *out_head, *out_tail; /* what the socket has not taken yet */
	size_t out_bytes;
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
	char prefill[CONN_PREFILL_MAX]; /* x-kpi-prefill, sanitised; "" when absent */
	uint64_t model_fp;         /* x-kpi-model (0: absent) */
	bool has_model_fp;
	uint64_t seq;              /* request sequence number; the numeric id */

	/* the response */
	uint64_t resp_id;          /* numeric request id; 0 for non-inference */
	int resp_status;
	bool resp_started, resp_final, close_after;
	bool out_unlimited;        /* a KV stream: bounded by its own size, not OUT_LIMIT */

	/* who serves the request: told when the client goes away before the end
	 * (on_gone), and when the response's last byte has been written (on_sent) */
	void *owner;
	void (*on_gone)(struct conn *c, void *owner);
	void (*on_sent)(struct conn *c, void *owner);
};

/* The handler of every complete request (its body decoded); set once. */
typedef void (*conn_handler_fn)(struct conn *c, const char *body, size_t len);
void conn_set_handler(conn_handler_fn fn);

/* Takes an accepted socket; false when out of memory (fd closed): stop accepting. */
bool conn_open(int fd);
void conn_event(struct conn *c, uint32_t ev);
void conn_update_events(struct conn *c);
void conn_close(struct conn *c);
/* End of a loop iteration: read the requests pipelined behind responses
 * that ended, then free the connections closed. */
void conn_run_ready(void);
void conn_reap_dead(void);
/* Timeouts (408, idle, linger) and the listen backlog; now: eth_now_ns(). */
void conn_sweep(uint64_t now);

/* The request's server: on_gone when the client leaves before the response
 * ends, on_sent when its last byte is written. conn_detach: no longer told. */
void conn_attach(struct conn *c, void *owner, void (*on_gone)(struct conn *, void *),
		 void (*on_sent)(struct conn *, void *));
void conn_detach(struct conn *c);

/* Sends data now in one send() when nothing is queued, else queues it.
 * final: this is the response's last byte. */
void conn_send(struct conn *c, const char *data, size_t len, bool final);
/* The same for several pieces, in one sendmsg(). */
struct iovec;
void conn_sendv(struct conn *c, const struct iovec *iov, int n, bool final);
/* The same, the last piece a buffer handed over: what the socket does not
 * take now waits in place, not copied, and release(it) once sent (free, or
 * engine_kv_buffer_free for a KV layer). */
void conn_sendv_owned(struct conn *c, const struct iovec *iov, int n, bool final,
		      void (*release)(void *));
/* n runs of bytes that stay where they stand until the socket took them
 * all, then release(arg): nothing is copied (a KV layer sent from the
 * pool's blocks). iov is taken (malloc'd; freed here). */
void conn_send_runs(struct conn *c, struct iovec *iov, int n, bool final,
		    void (*release)(void *), void *arg);
/* The status line and headers; clen < 0: no Content-Length. */
void conn_resp_head(struct sbuf *b, struct conn *c, int status, const char *ctype,
		    long long clen, bool chunked, const char *extra);
void conn_respond(struct conn *c, int status, const char *ctype, const char *body,
		  size_t len, const char *extra);
/* An error response with an OpenAI-shaped JSON body. close: the stream can
 * no longer be trusted (bad framing), so the connection ends after it. */
void conn_reject(struct conn *c, int status, int reason, const char *msg, bool close,
		 const char *extra);
/* The id of a request without a usable X-Request-Id: req-<pid in hex>-<n>. */
void conn_make_request_id(struct conn *c, uint64_t n);
/* "ip:port" of the client, for probes and messages. */
void conn_peer(const struct conn *c, char *out, size_t n);

#endif
