/* pd.c - the door of daemon/pd/ (pd.h): each call handed to the module that
 * serves it, so daemon/server/ knows one header and the modules behind it
 * stay free to change. */
#include "daemon/pd/pd.h"

#include <stdio.h>

#include "daemon/engine.h"
#include "daemon/pd/kv_fetch.h"
#include "daemon/pd/kv_serve.h"
#include "daemon/pd/kv_wire.h"
#include "daemon/pd/router.h"
#include "daemon/pd/upstream.h"
#include "daemon/server/state.h"

static struct kv_model kvm; /* this worker's model identity and KV layout (not the router) */

int pd_init(void)
{
	if (srv.cfg->role == ROLE_ROUTER)
		return router_init();
	if (!srv.e)
		return 0;
	struct engine_kv_layout kl;
	engine_kv_layout(srv.e, &kl);
	kvm = (struct kv_model){
		.fingerprint = kl.fingerprint, .n_layers = (uint32_t)kl.n_layers,
		.n_kv_heads = (uint32_t)kl.n_kv_heads, .head_dim = (uint32_t)kl.head_dim,
		.dtype = (uint32_t)kl.dtype, .block_size = (uint32_t)kl.block_size,
		.vocab_size = (uint32_t)kl.vocab_size, .context_length = (uint32_t)kl.context_length,
	};
	snprintf(kvm.name, sizeof(kvm.name), "%.63s", srv.model_label);
	kv_serve_init(&kvm);
	kv_fetch_init(&kvm);
	return 0;
}

void pd_free(void)
{
	if (srv.cfg->role == ROLE_ROUTER)
		router_free();
}

void pd_epoll_event(void *tag, uint32_t events)
{
	if (*(int *)tag == TAG_TIMER)
		router_tick();
	else
		upstream_event(tag, events);
}

void pd_sweep(uint64_t now)
{
	upstream_sweep(now);
}

void pd_reap(void)
{
	upstream_reap();
}

void pd_close_all(void)
{
	upstream_close_all();
}

void pd_route(struct conn *c, const char *body, size_t len, bool chat)
{
	router_handle(c, body, len, chat);
}

void pd_route_get(struct conn *c)
{
	router_forward_get(c);
}

void pd_router_metrics(struct sbuf *out)
{
	router_render_metrics(out);
}

void pd_router_load(struct sbuf *out)
{
	router_render_load(out);
}

void pd_kv_serve(struct conn *c, const char *body, size_t len)
{
	kv_serve_handle(c, body, len);
}

void pd_kv_serve_event(struct req *r, struct eth_event *ev)
{
	kv_serve_event(r, ev);
}

void pd_kv_fetch(struct req *r, const char *addr)
{
	kv_fetch_start(r, addr);
}

void pd_kv_fetch_cancel(struct req *r)
{
	kv_fetch_cancel(r);
}

void pd_kv_fetch_held(struct req *r, struct eth_event *ev)
{
	kv_fetch_held(r, ev);
}
