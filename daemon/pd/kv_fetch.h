/* kv_fetch.h - a decode worker's side of a KV transfer (--role decode): the
 * prompt's KV and first token fetched from the prefill worker a request names
 * (x-kpi-prefill), received straight into blocks the engine holds for it (or
 * into one buffer when the engine answered too late), checked against this
 * worker's model (abi/kpi_kv_wire.h), then handed to the engine with the
 * request. A transfer that fails ends its request with an error status;
 * nothing else is touched. */
#ifndef KPI_PD_KV_FETCH_H
#define KPI_PD_KV_FETCH_H

struct kv_model;
struct req;

/* This worker's model identity and KV layout, which every fetch is checked
 * against (kept, not copied). */
void kv_fetch_init(const struct kv_model *m);

/* r is admitted and holds its prompt ids and sampling parameters. */
void kv_fetch_start(struct req *r, const char *addr);
/* r's client went away: the transfer stops (the prefill worker sees the
 * connection close and cancels its prefill) and r ends here. */
void kv_fetch_cancel(struct req *r);
/* The engine's blocks for r's KV (ETH_EV_KV_HELD): taken when no payload
 * byte has come yet, so the KV is received straight into them. */
struct eth_event;
void kv_fetch_held(struct req *r, struct eth_event *ev);

#endif
