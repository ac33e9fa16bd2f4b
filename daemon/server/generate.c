/* generate.c - POST /v1/completions and /v1/chat/completions up to the engine:
 * decode the body, tokenize, admit or refuse (400, 429, 503) on the I/O
 * thread, then submit to the engine thread, or, on a decode worker told to
 * (x-kpi-prefill), fetch the prompt's KV from that prefill worker first
 * (daemon/pd/, pd.h). fanout.c takes it from there. */
#include "daemon/server/generate.h"

#include <string.h>

#include "kpi_probes.h"
#include "abi/kpi_reasons.h"
#include "daemon/pd/pd.h"
#include "daemon/server/admit.h"
#include "daemon/server/conn.h"
#include "daemon/server/state.h"

/* The client went away before the end: free its sequence at once (or stop
 * fetching its KV, which ends it here). */
static void generate_on_gone(struct conn *c, void *owner)
{
	struct req *r = owner;
	if (KPI_REQUEST_CANCELLED_ENABLED())
		KPI_REQUEST_CANCELLED(r->id);
	r->conn = NULL;
	if (r->fetch)
		pd_kv_fetch_cancel(r);
	else
		eth_finish(&srv.eth, r->id, KPI_FINISH_CANCELLED);
}

/* Hands r's prompt (ids, owned from here) to the engine thread, or to the
 * KV fetch from the prefill worker c names. */
static void generate_submit(struct conn *c, struct req *r, const struct api_request *ar,
			    int32_t *ids)
{
	r->chat = ar->chat;
	r->stream = ar->stream;
	r->include_usage = ar->stream && ar->include_usage;
	r->reasoning_tokens = srv.cfg->reasoning_tokens;
	r->return_token_ids = ar->return_token_ids && !ar->stream;
	r->sp = (struct sampling_params){
		.temperature = ar->temperature,
		.top_p = ar->top_p,
		.seed = ar->has_seed ? ar->seed : r->id * 0x9E3779B97F4A7C15ull ^ r->t_admit,
		.max_tokens = r->max_tokens,
		.ignore_eos = ar->ignore_eos,
	};
	conn_attach(c, r, generate_on_gone, NULL);
	if (srv.cfg->role == ROLE_DECODE && c->prefill[0]) {
		r->prompt_ids = ids;
		pd_kv_fetch(r, c->prefill);
		return;
	}
	r->submitted = true;
	eth_submit(&srv.eth, r->id, ids, r->n_prompt, &r->sp);
	conn_update_events(c);
}

void generate_handle(struct conn *c, const char *body, size_t len, bool chat)
{
	struct api_request ar;
	if (!admit_parse(c, body, len, chat, &ar)) {
		api_request_free(&ar);
		return;
	}
	int n_prompt = 0, max_tokens = -1;
	int32_t *ids = admit_prompt(c, &ar, &n_prompt);
	if (ids)
		max_tokens = admit_limits(c, n_prompt, ar.max_tokens, chat);
	struct req *r = NULL;
	if (max_tokens > 0)
		r = admit_req(c, REQ_GENERATE, n_prompt, max_tokens,
			      chat ? KPI_OP_CHAT : KPI_OP_TEXT_COMPLETION);
	if (r) {
		memcpy(r->stop, ar.stop, sizeof(ar.stop));
		r->n_stop = ar.n_stop;
		ar.n_stop = 0;
		generate_submit(c, r, &ar, ids);
	} else {
		free(ids);
	}
	api_request_free(&ar);
}
