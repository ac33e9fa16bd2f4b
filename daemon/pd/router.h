/* router.h - kpi-infer --role router: the OpenAI endpoint clients see. Each
 * completion goes to a decode worker, with the prefill worker it is to take
 * the KV from named in x-kpi-prefill and the client's x-request-id passed
 * on; the answer comes back byte for byte. Workers are chosen by
 * --policy (route_policy.h) from their own /load, read every
 * --load-interval. No model is loaded. */
#ifndef KPI_PD_ROUTER_H
#define KPI_PD_ROUTER_H

#include <stdbool.h>
#include <stddef.h>

#include "daemon/server/sbuf.h"

struct conn;

/* The workers from the configuration and the /load timer; 0, or 1 with a
 * message printed. */
int router_init(void);
void router_free(void);
/* The /load timer fired. */
void router_tick(void);
/* POST /v1/completions, /v1/chat/completions: forwarded. */
void router_handle(struct conn *c, const char *body, size_t len, bool chat);
/* GET /v1/models: a decode worker's answer. */
void router_forward_get(struct conn *c);
/* The router's own /metrics and /load. */
void router_render_metrics(struct sbuf *out);
void router_render_load(struct sbuf *out);
/* Requests in flight (draining waits for them). */
int router_inflight(void);

#endif
