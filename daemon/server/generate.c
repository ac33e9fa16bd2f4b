/* generate.c - POST /v1/completions and /v1/chat/completions up to the engine:
 * decode the body, tokenize, admit or refuse (400, 429, 503) on the I/O
 * thread, then submit to the engine thread. fanout.c takes it from there. */
#include "daemon/server/server_int.h"

#include <string.h>
#include <time.h>

#include "kpi_probes.h"
#include "abi/kpi_reasons.h"

static int32_t *tokenize(const char *text, size_t len, int *n_out)
{
	int cap = (int)(len < (1u << 24) ? len : (1u << 24)) + 16;
	for (int tries = 0; tries < 3; tries++) {
		int32_t *ids = malloc((size_t)cap * sizeof(int32_t));
		if (!ids)
			return NULL;
		int n = engine_tokenize(srv.e, text, len, true, ids, cap);
		if (n < 0) {
			free(ids);
			return NULL;
		}
		if (n <= cap) {
			*n_out = n;
			return ids;
		}
		free(ids);
		cap = n;
	}
	return NULL;
}

/* The prompt's token ids (taken from ar or tokenized), or NULL after a 400. */
static int32_t *generate_prompt(struct conn *c, struct api_request *ar, int *n_prompt)
{
	if (!ar->prompt_ids) {
		int32_t *ids = tokenize(ar->prompt, ar->prompt_len, n_prompt);
		if (!ids || *n_prompt == 0) {
			free(ids);
			conn_reject(c, 400, KPI_REJECT_BAD_PARAM, "'prompt' could not be tokenized",
				    false, NULL);
			return NULL;
		}
		return ids;
	}
	int vocab = srv.mi->vocab_size;
	for (int i = 0; i < ar->n_prompt_ids; i++)
		if (ar->prompt_ids[i] >= vocab) {
			char err[256];
			snprintf(err, sizeof(err), "'prompt[%d]' token id %d is out of range: the "
				 "vocabulary has %d tokens (ids 0 to %d)", i, ar->prompt_ids[i],
				 vocab, vocab - 1);
			conn_reject(c, 400, KPI_REJECT_BAD_TOKEN, err, false, NULL);
			return NULL;
		}
	int32_t *ids = ar->prompt_ids;
	*n_prompt = ar->n_prompt_ids;
	ar->prompt_ids = NULL;
	return ids;
}

/* Admission: the request fits the context and the KV pool, and the waiting
 * queue has room. Returns max_tokens, or -1 after a 400 or 429. */
static int generate_admit(struct conn *c, const struct api_request *ar, int n_prompt, bool chat)
{
	char err[512];
	int limit = srv.ctx_len < srv.kv_tokens ? srv.ctx_len : srv.kv_tokens;
	int max_tokens = ar->max_tokens;
	if (max_tokens < 0)
		max_tokens = chat ? limit - n_prompt : 16;
	if (n_prompt + max_tokens > limit || max_tokens < 1) {
		snprintf(err, sizeof(err), "prompt (%d tokens) + max_tokens (%d) exceeds the limit: "
			 "the context length is %d tokens and the KV pool holds %d tokens; shorten "
			 "the prompt or lower max_tokens", n_prompt, max_tokens < 1 ? 1 : max_tokens,
			 srv.ctx_len, srv.kv_tokens);
		conn_reject(c, 400, KPI_REJECT_PROMPT_TOO_LONG, err, false, NULL);
		return -1;
	}
	if (srv.n_waiting >= srv.cfg->max_queue) {
		snprintf(err, sizeof(err), "server busy: %d requests are waiting (--max-queue %d); "
			 "retry after the Retry-After delay", srv.n_waiting, srv.cfg->max_queue);
		conn_reject(c, 429, KPI_REJECT_QUEUE_FULL, err, false, "Retry-After: 1\r\n");
		return -1;
	}
	return max_tokens;
}

/* The request record; takes ar's stop strings. */
static struct req *generate_req_new(struct conn *c, struct api_request *ar, bool chat,
				    int n_prompt, int max_tokens, uint64_t t_arrive)
{
	struct req *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->id = c->seq; /* the number its generated id string was made from */
	r->conn = c;
	r->chat = chat;
	r->stream = ar->stream;
	r->include_usage = ar->stream && ar->include_usage;
	memcpy(r->stop, ar->stop, sizeof(ar->stop));
	r->n_stop = ar->n_stop;
	ar->n_stop = 0;
	r->n_prompt = n_prompt;
	r->max_tokens = max_tokens;
	r->t_arrive = t_arrive;
	r->t_admit = eth_now_ns();
	r->created = (long long)time(NULL);
	r->waiting = true;
	sbuf_reserve(&r->text, 256); /* never NULL: offsets into it are taken at once */
	memcpy(r->rid, c->rid, sizeof(r->rid));
	return r;
}

/* Hands r's prompt (ids, owned from here) to the engine thread. */
static void generate_submit(struct conn *c, struct req *r, const struct api_request *ar,
			    int32_t *ids)
{
	struct sampling_params sp = {
		.temperature = ar->temperature,
		.top_p = ar->top_p,
		.seed = ar->has_seed ? ar->seed : r->id * 0x9E3779B97F4A7C15ull ^ r->t_admit,
		.max_tokens = r->max_tokens,
		.ignore_eos = ar->ignore_eos,
	};
	req_insert(r);
	c->req = r;
	c->resp_id = r->id;
	c->state = CS_ACTIVE;
	srv.n_waiting++;
	srv.n_active++;
	if (KPI_REQUEST_ADMITTED_ENABLED())
		KPI_REQUEST_ADMITTED(r->id, c->fd, r->n_prompt, r->max_tokens, r->rid,
				     r->chat ? KPI_OP_CHAT : KPI_OP_TEXT_COMPLETION);
	eth_submit(&srv.eth, r->id, ids, r->n_prompt, &sp);
	conn_update_events(c);
}

void generate_handle(struct conn *c, const char *body, size_t len, bool chat)
{
	char err[512];
	bool bad_json;
	struct api_request ar;
	uint64_t t_arrive = c->t_first_byte ? c->t_first_byte : eth_now_ns();

	if (srv.draining) {
		conn_reject(c, 503, KPI_REJECT_DRAINING, "the server is shutting down", true, NULL);
		return;
	}
	if (api_request_parse(body, len, chat, &ar, &bad_json, err, sizeof(err)) < 0) {
		conn_reject(c, 400, bad_json ? KPI_REJECT_BAD_JSON : KPI_REJECT_BAD_PARAM, err,
			    false, NULL);
		api_request_free(&ar);
		return;
	}
	int n_prompt = 0, max_tokens = -1;
	int32_t *ids = generate_prompt(c, &ar, &n_prompt);
	if (ids)
		max_tokens = generate_admit(c, &ar, n_prompt, chat);
	struct req *r = NULL;
	if (max_tokens > 0) {
		r = generate_req_new(c, &ar, chat, n_prompt, max_tokens, t_arrive);
		if (!r)
			conn_reject(c, 503, KPI_REJECT_INTERNAL, "out of memory", true, NULL);
	}
	if (r)
		generate_submit(c, r, &ar, ids);
	else
		free(ids);
	api_request_free(&ar);
}
