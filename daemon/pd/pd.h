/* pd.h - prefill/decode disaggregation (daemon/pd/), the one header
 * daemon/server/ includes: the router role, a prefill worker's KV stream, a
 * decode worker's KV fetch, and the outbound connections they hold on the I/O
 * thread's epoll (docs/disaggregation.md). */
#ifndef KPI_PD_H
#define KPI_PD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct conn;
struct eth_event;
struct req;
struct sbuf;

/* After the listener and epoll exist, before the engine thread starts: the
 * router's workers and its /load timer, or a worker's model identity and KV
 * layout (engine_kv_layout of srv.e). 0, or 1 with a message printed. */
int pd_init(void);
void pd_free(void);

/* ---- the I/O loop ---- */
/* An epoll event whose tag is TAG_UPSTREAM or TAG_TIMER (state.h). */
void pd_epoll_event(void *tag, uint32_t events);
/* Timeouts of outbound exchanges; now: eth_now_ns(). */
void pd_sweep(uint64_t now);
/* End of a loop iteration: frees the outbound connections closed. */
void pd_reap(void);
/* At exit: every outbound connection. */
void pd_close_all(void);

/* ---- --role router ---- */
/* POST /v1/completions, /v1/chat/completions: forwarded to a decode worker
 * naming a prefill worker. */
void pd_route(struct conn *c, const char *body, size_t len, bool chat);
/* GET /v1/models: a decode worker's answer. */
void pd_route_get(struct conn *c);
/* The router's own /metrics lines and /load body. */
void pd_router_metrics(struct sbuf *out);
void pd_router_load(struct sbuf *out);

/* ---- --role prefill ---- */
/* POST /v1/kv/prefill. */
void pd_kv_serve(struct conn *c, const char *body, size_t len);
/* Every engine event of a REQ_PREFILL request. */
void pd_kv_serve_event(struct req *r, struct eth_event *ev);

/* ---- --role decode ---- */
/* r is admitted and holds its prompt ids and sampling parameters: its KV
 * comes from the prefill worker at addr ("host:port"), then it goes to the
 * engine; a failed transfer ends r with an error status naming the check. */
void pd_kv_fetch(struct req *r, const char *addr);
/* r's client went away while its KV was coming: r ends here. */
void pd_kv_fetch_cancel(struct req *r);
/* The engine's answer to the blocks r's fetch asked for (ETH_EV_KV_HELD):
 * the KV is received into them when they came before it. */
void pd_kv_fetch_held(struct req *r, struct eth_event *ev);

#endif
