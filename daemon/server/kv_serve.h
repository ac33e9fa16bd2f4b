/* kv_serve.h - a prefill worker's side of a KV transfer (--role prefill):
 * POST /v1/kv/prefill admitted like a completion, prefilled by the engine,
 * its KV streamed back layer by layer as the forward pass computes each,
 * then its first token (abi/kpi_kv_wire.h). */
#ifndef KPI_SERVER_KV_SERVE_H
#define KPI_SERVER_KV_SERVE_H

#include <stddef.h>

struct conn;
struct req;
struct eth_event;

void kv_serve_handle(struct conn *c, const char *body, size_t len);
/* Every engine event of a prefill request, ETH_EV_KV_LAYER included. */
void kv_serve_event(struct req *r, struct eth_event *ev);

#endif
