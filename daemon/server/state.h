/* state.h - the I/O thread's one state (srv), shared by the server's modules:
 * configuration, the engine thread, epoll, the connection list, counters and
 * the in-flight table. Data only; defined in state.c, the bottom module, so
 * every module reaches it downwards. Seen by daemon/server/ and daemon/pd/ only. */
#ifndef KPI_SERVER_STATE_H
#define KPI_SERVER_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/server/config.h"
#include "daemon/server/engine_thread.h"
#include "daemon/server/metrics.h"

/* what an epoll event's data.ptr points at: the first int of its owner */
enum { TAG_LISTEN = 1, TAG_WAKE, TAG_SIGNAL, TAG_CONN, TAG_UPSTREAM, TAG_TIMER };

struct conn;
struct req;

/* Everything is touched by the I/O thread only; the engine thread is
 * reached through eth alone. */
struct server {
	const struct server_config *cfg;
	struct engine *e;          /* NULL for the router */
	const struct model_info *mi; /* NULL for the router */
	uint64_t fingerprint;      /* this worker's model identity (engine_kv_layout; 0 for the router) */
	struct engine_thread eth;
	int epfd, lfd, wakefd, sigfd;
	int tag_listen, tag_wake, tag_signal;
	bool listen_paused, draining;
	struct conn *conns;        /* open client connections */
	int nconns;
	struct conn *dead;         /* closed, freed at the end of the loop iteration */
	struct conn *ready;        /* a response ended: read their pipelined requests */
	struct req *reqs;          /* in flight, by id (uthash) */
	int n_waiting;             /* admitted, not running (fetching KV included) */
	int n_active;              /* admitted, not finished */
	int n_fetching;            /* decode: waiting for their KV from a prefill worker */
	int n_upstream;            /* open outbound connections (for draining) */
	uint64_t seq;
	unsigned pid;
	struct metrics m;
	char model_json[256];      /* JSON-escaped model name */
	char model_label[128];     /* Prometheus-label-safe model name */
	int ctx_len, kv_tokens;
};

extern struct server srv;

#endif
