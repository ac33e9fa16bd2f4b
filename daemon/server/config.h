/* config.h - kpi-infer's serving configuration as main.c reads it from the
 * flags: the role, the listener's limits, the router's workers. Types only,
 * so the I/O thread's modules and daemon/pd/ read it without knowing server.c. */
#ifndef KPI_SERVER_CONFIG_H
#define KPI_SERVER_CONFIG_H

#include <stddef.h>

#include "abi/kpi_reasons.h"

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

#endif
