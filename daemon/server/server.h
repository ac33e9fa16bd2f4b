/* server.h - kpi-infer's HTTP/1.1 front end: one non-blocking epoll I/O
 * thread serving the OpenAI-compatible API, with the engine on its own thread
 * (engine_thread.h), in one of four roles (docs/server.md,
 * docs/disaggregation.md). */
#ifndef KPI_SERVER_H
#define KPI_SERVER_H

#include <stddef.h>

#include "abi/kpi_reasons.h"
#include "daemon/engine.h"

/* What this process does (--role). */
enum server_role {
	ROLE_COLOCATED = 0, /* prefill and decode here (the default) */
	ROLE_PREFILL,       /* POST /v1/kv/prefill: prefill, stream the KV, keep nothing */
	ROLE_DECODE,        /* completions; the KV of a request naming a prefill worker comes from it */
	ROLE_ROUTER,        /* no model: forwards each request to a decode worker, names a prefill worker */
	ROLE__COUNT
};

static inline const char *server_role_name(enum server_role r)
{
	static const char *const names[ROLE__COUNT] = { "colocated", "prefill", "decode", "router" };
	return r >= 0 && r < ROLE__COUNT ? names[r] : "?";
}

#define SERVER_MAX_WORKERS 64

/* The router's view of its workers (--decode, --prefill). */
struct router_config {
	const char *decode[SERVER_MAX_WORKERS];  /* "host:port" */
	int n_decode;
	const char *prefill[SERVER_MAX_WORKERS];
	int n_prefill;
	enum kpi_route_policy policy;
	int prefix_bytes;        /* prefix policy: bytes of the prompt that choose the worker */
	int load_interval_ms;    /* how often each worker's /load is read */
};

struct server_config {
	enum server_role role;
	const char *host;
	int port;
	int max_queue;          /* waiting requests before 429 */
	size_t max_body;        /* bytes, else 413 */
	int request_timeout_s;  /* head + body must arrive within this, else 408 */
	int idle_timeout_s;     /* idle keep-alive connections are closed after this */
	int max_conns;          /* open connections; further accepts wait */
	int block_size;         /* KV block size the engine was created with */
	const char *model_label;/* fallback model name (file name) */
	int upstream_timeout_s; /* decode -> prefill, router -> worker: no byte for this long fails it */
	struct router_config router;
	int reasoning_tokens;   /* the first N generated tokens are reasoning (req.h, openai.c) */
};

/* Serves until SIGTERM or SIGINT (which the caller has blocked in every
 * thread), then drains: stops accepting, finishes in-flight requests, and
 * returns 0. Returns 1 when the socket cannot be set up (message printed).
 * e is NULL for the router, which loads no model. */
int server_run(struct engine *e, const struct server_config *cfg);

#endif
