/* admit.c - the admission limits and the request record (admit.h). */
#include "daemon/server/admit.h"

#include "daemon/server/api.h"

#include <string.h>
#include <time.h>

#include "kpi_probes.h"
#include "abi/kpi_reasons.h"
#include "daemon/server/conn.h"
#include "daemon/server/state.h"

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

int32_t *admit_prompt(struct conn *c, struct api_request *ar, int *n_prompt)
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

bool admit_parse(struct conn *c, const char *body, size_t len, bool chat, struct api_request *ar)
{
	char err[512];
	bool bad_json;
	memset(ar, 0, sizeof(*ar));
	if (srv.draining) {
		conn_reject(c, 503, KPI_REJECT_DRAINING, "the server is shutting down", true, NULL);
		return false;
	}
	if (api_request_parse(body, len, chat, ar, &bad_json, err, sizeof(err)) < 0) {
		conn_reject(c, 400, bad_json ? KPI_REJECT_BAD_JSON : KPI_REJECT_BAD_PARAM, err,
			    false, NULL);
		return false;
	}
	return true;
}

int admit_limits(struct conn *c, int n_prompt, int max_tokens, bool chat)
{
	char err[512];
	int limit = srv.ctx_len < srv.kv_tokens ? srv.ctx_len : srv.kv_tokens;
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

struct req *admit_req(struct conn *c, enum req_kind kind, int n_prompt, int max_tokens,
		      int operation)
{
	struct req *r = calloc(1, sizeof(*r));
	if (!r) {
		conn_reject(c, 503, KPI_REJECT_INTERNAL, "out of memory", true, NULL);
		return NULL;
	}
	r->id = c->seq;
	r->kind = kind;
	r->conn = c;
	r->n_prompt = n_prompt;
	r->max_tokens = max_tokens;
	r->t_arrive = c->t_first_byte ? c->t_first_byte : eth_now_ns();
	r->t_admit = eth_now_ns();
	r->created = (long long)time(NULL);
	r->waiting = true;
	sbuf_reserve(&r->text, 256); /* never NULL: offsets into it are taken at once */
	memcpy(r->rid, c->rid, sizeof(r->rid));
	req_insert(r);
	c->resp_id = r->id;
	c->state = CS_ACTIVE;
	srv.n_waiting++;
	srv.n_active++;
	if (KPI_REQUEST_ADMITTED_ENABLED())
		KPI_REQUEST_ADMITTED(r->id, c->fd, r->n_prompt, r->max_tokens, r->rid, operation);
	return r;
}
