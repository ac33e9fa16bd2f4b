/* kv_serve.h - a prefill worker's side of a KV transfer (--role prefill):
 * POST /v1/kv/prefill admitted like a completion, prefilled by the engine,
 * its KV streamed back layer by layer as the forward pass computes each,
 * then its first token (abi/kpi_kv_wire.h). */
#ifndef KPI_PD_KV_SERVE_H
#define KPI_PD_KV_SERVE_H

#include <stddef.h>

struct conn;
struct kv_model;
struct req;
struct eth_event;

/* This worker's model identity and KV layout, which every stream's header
 * carries (kept, not copied). */
void kv_serve_init(const struct kv_model *m);
void kv_serve_handle(struct conn *c, const char *body, size_t len);
/* Every engine event of a prefill request, ETH_EV_KV_LAYER included. */
void kv_serve_event(struct req *r, struct eth_event *ev);

#endif
