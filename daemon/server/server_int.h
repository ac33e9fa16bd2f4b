/* server_int.h - what the I/O thread's modules share: the connection and
 * request records, the one server state (srv) and the calls between
 * server.c, conn.c, generate.c, fanout.c and req.c. Not for outside daemon/server/. */
#ifndef KPI_SERVER_INT_H
#define KPI_SERVER_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "daemon/server/api.h"
#include "daemon/server/engine_thread.h"
#include "daemon/server/http.h"
#include "daemon/server/metrics.h"
#include "daemon/server/sbuf.h"
#include "daemon/server/server.h"
#include "daemon/server/text.h"

/* The table only allocates on growth; with no memory the daemon cannot go on. */
#define uthash_fatal(msg) \
	(fprintf(stderr, "kpi-infer: out of memory for the request table\n"), abort())
#include <uthash.h>

/* what an epoll event's data.ptr points at: the first int of its owner */
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

/* An inference request from admission until its engine FINISHED event. */
struct req {
	uint64_t id;
	UT_hash_handle hh;         /* srv.reqs, keyed by id */
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
	size_t answer_at;          /* --reasoning-tokens: text before this offset is reasoning */
	uint64_t t_arrive, t_admit, t_sched, t_first, t_prev;
	long long created;
	char rid[HTTP_MAX_REQUEST_ID + 1];
};

/* Everything is touched by the I/O thread only; the engine thread is
 * reached through eth alone. */
struct server {
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
	struct req *reqs;          /* in flight, by id (uthash) */
	int n_waiting;             /* submitted, not running */
	int n_active;              /* submitted, not finished */
	uint64_t seq;
	unsigned pid;
	struct metrics m;
	char model_json[256];      /* JSON-escaped model name */
	char model_label[128];     /* Prometheus-label-safe model name */
	int ctx_len, kv_tokens;
};

extern struct server srv;

/* ---- server.c: routes a complete request to its handler ---- */
void server_dispatch(struct conn *c, const char *body, size_t len);

/* ---- conn.c: the connection state machine ---- */
/* Takes an accepted socket; false when out of memory (fd closed): stop accepting. */
bool conn_open(int fd);
void conn_event(struct conn *c, uint32_t ev);
/* Parses and serves every complete request in c->in, one at a time. */
void conn_process(struct conn *c);
void conn_update_events(struct conn *c);
void conn_close(struct conn *c);
void conn_reap_dead(void);
/* Sends data now in one send() when nothing is queued, else queues it.
 * final: this is the response's last byte. */
void conn_send(struct conn *c, const char *data, size_t len, bool final);
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

/* ---- generate.c: completions and chat, up to the engine ---- */
void generate_handle(struct conn *c, const char *body, size_t len, bool chat);

/* ---- fanout.c: engine events to their requests and connections ---- */
void fanout_engine_events(void);

/* ---- req.c: the in-flight request table ---- */
void req_insert(struct req *r);
struct req *req_find(uint64_t id);
void req_remove(struct req *r);
void req_free(struct req *r);
void req_free_all(void);

#endif
