/* http_xnode.c - the exchange both trackers build (http_xnode.h): what is
 * kept from heads, bodies and events, and what is handed over at the end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "http_text.h"
#include "http_xnode.h"

struct http_xnode *http_xnode_new(uint64_t digest_key, uint64_t t_arrive, const char *method,
				  const char *path)
{
	struct http_xnode *n = calloc(1, sizeof(*n));
	if (!n)
		return NULL;
	n->x.t_arrive = t_arrive;
	n->x.stream = -1;
	n->x.grpc_status = -1;
	n->x.max_tokens = n->x.prompt_tokens = n->x.completion_tokens = n->x.reasoning_tokens = -1;
	http_digest_init(&n->digest, digest_key);
	snprintf(n->x.method, sizeof(n->x.method), "%s", method);
	snprintf(n->x.path, sizeof(n->x.path), "%s", path);
	return n;
}

void http_xnode_free(struct http_xnode *n)
{
	if (!n)
		return;
	free(n->writes);
	explicit_bzero(n, sizeof(*n));
	free(n);
}

/* ---- heads ----------------------------------------------------------------- */

static void traceparent(struct http_xnode *n, const char *v, size_t vn)
{
	/* 00-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags> */
	if (vn < 55 || v[2] != '-' || v[35] != '-')
		return;
	bool zero = true;
	for (int i = 3; i < 35; i++) {
		char c = v[i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return;
		zero &= c == '0';
	}
	if (!zero) {
		memcpy(n->trace_id, v + 3, 32);
		n->trace_id[32] = 0;
	}
}

void http_xnode_header(struct http_xnode *n, bool request, const char *name, size_t nn,
		       const char *v, size_t vn)
{
#define IS(s) (nn == sizeof(s) - 1 && !strncasecmp(name, s, nn))
	if (IS("x-request-id"))
		http_copy_clean(request ? n->req_id : n->resp_id, HTTP_TRACK_ID_LEN, v, vn, true);
	else if (IS("traceparent") && request)
		traceparent(n, v, vn);
	else if (IS("gen_ai.conversation.id") && request)
		http_copy_clean(n->x.conversation_id, HTTP_TRACK_ID_LEN, v, vn, true);
#undef IS
}

/* ---- bodies ------------------------------------------------------------------ */

static void req_key(void *ctx, int key, const struct http_jval *v)
{
	struct http_xnode *n = ctx;
	struct http_exchange *x = &n->x;
	if (key == HTTP_K_MODEL && v->type == HTTP_J_STR && !x->model[0] &&
	    (v->complete || v->len >= HTTP_TRACK_MODEL_LEN - 1))
		http_copy_clean(x->model, sizeof(x->model), v->s, v->len, false);
	if (!v->complete)
		return;
	if (key == HTTP_K_STREAM && x->stream < 0 && (v->type == HTTP_J_TRUE || v->type == HTTP_J_FALSE))
		x->stream = v->type == HTTP_J_TRUE;
	else if (key == HTTP_K_MAX_TOKENS && v->type == HTTP_J_NUM)
		x->max_tokens = v->num;
	else if (key == HTTP_K_MAX_COMPLETION_TOKENS && v->type == HTTP_J_NUM && x->max_tokens < 0)
		x->max_tokens = v->num;
	else if (key == HTTP_K_METHOD && v->type == HTTP_J_STR && !x->rpc_method[0])
		http_copy_clean(x->rpc_method, sizeof(x->rpc_method), v->s, v->len, false);
	else if (key == HTTP_K_NAME && v->type == HTTP_J_STR && !x->tool_name[0])
		http_copy_clean(x->tool_name, sizeof(x->tool_name), v->s, v->len, false);
	else if (key == HTTP_K_JSONRPC)
		n->jsonrpc = true;
}

void http_xnode_req_body(struct http_xnode *n, struct http_json_carry *c, const uint8_t *p, size_t len)
{
	http_json_scan_body(c, (const char *)p, len, HTTP_REQ_KEYS, req_key, n);
	http_digest_feed(&n->digest, p, len);
}

/* usage and finish_reason: the last seen wins (continuous usage stats). */
void http_xnode_usage_key(void *ctx, int key, const struct http_jval *v)
{
	struct http_exchange *x = ctx;
	if (!v->complete)
		return;
	if (key == HTTP_K_FINISH_REASON && v->type == HTTP_J_STR && v->len)
		http_copy_clean(x->finish_reason, sizeof(x->finish_reason), v->s, v->len, true);
	else if ((key == HTTP_K_PROMPT_TOKENS || key == HTTP_K_INPUT_TOKENS) && v->type == HTTP_J_NUM)
		x->prompt_tokens = v->num;
	else if ((key == HTTP_K_COMPLETION_TOKENS || key == HTTP_K_OUTPUT_TOKENS) && v->type == HTTP_J_NUM)
		x->completion_tokens = v->num;
	else if (key == HTTP_K_REASONING_TOKENS && v->type == HTTP_J_NUM)
		x->reasoning_tokens = v->num;
	else if (key == HTTP_K_ID && v->type == HTTP_J_STR && !x->resp_body_id[0])
		http_copy_clean(x->resp_body_id, sizeof(x->resp_body_id), v->s, v->len, true);
	else if ((key == HTTP_K_ERROR && v->type != HTTP_J_NULL) || (key == HTTP_K_IS_ERROR && v->type == HTTP_J_TRUE))
		x->rpc_error = true;
}

/* ---- events ------------------------------------------------------------------- */

void http_xnode_content(struct http_xnode *n, uint64_t ts)
{
	struct http_exchange *x = &n->x;
	x->content_events++;
	if (!x->t_first_content)
		x->t_first_content = ts;
	x->t_last_content = ts;
	if (n->n_writes == n->cap_writes) {
		uint32_t cap = n->cap_writes ? n->cap_writes * 2 : 16;
		uint64_t *w = cap <= HTTP_TRACK_MAX_WRITES ? realloc(n->writes, cap * sizeof(*w)) : NULL;
		if (!w) {
			x->flags |= HTTP_X_WRITES_CAPPED;
			return;
		}
		n->writes = w;
		n->cap_writes = cap;
	}
	n->writes[n->n_writes++] = ts;
}

enum http_ev_kind http_xnode_event(struct http_xnode *n, const struct http_sse *e, uint64_t ts)
{
	enum http_ev_kind k = http_sse_classify(e, http_xnode_usage_key, &n->x);
	http_reason_event(&n->reason, e, ts);
	if (k == HTTP_EV_CONTENT)
		http_xnode_content(n, ts);
	else if (k == HTTP_EV_UNKNOWN)
		n->x.unknown_events++;
	else
		n->x.other_events++;
	return k;
}

/* ---- the end -------------------------------------------------------------------- */

void http_xnode_pick_id(struct http_xnode *n)
{
	struct http_exchange *x = &n->x;
	const char *src = n->req_id[0] ? n->req_id : n->trace_id[0] ? n->trace_id : n->resp_id;
	x->id_src = n->req_id[0] ? HTTP_ID_REQUEST : n->trace_id[0] ? HTTP_ID_TRACEPARENT :
		    n->resp_id[0] ? HTTP_ID_RESPONSE : HTTP_ID_NONE;
	memcpy(x->request_id, src, strlen(src) + 1);    /* each source fits request_id */
}

void http_xnode_end(struct http_xnode *n, enum http_end end, uint64_t ts)
{
	struct http_exchange *x = &n->x;
	struct http_reason *r = &n->reason;
	x->end = end;
	x->t_done = ts;
	http_xnode_pick_id(n);
	http_reason_end(r);
	x->t_first_reasoning = r->t_first_reasoning;
	x->t_first_answer = r->t_first_answer;
	x->t_first_tool = r->t_first_tool;
	x->reasoning_events = r->reasoning_events;
	x->answer_events = r->answer_events;
	x->reasoning_shape = r->shape;
	memcpy(x->resp_header_id, n->resp_id, sizeof(x->resp_header_id));
	memcpy(x->trace_id, n->trace_id, sizeof(x->trace_id));
	if (!n->jsonrpc)
		x->rpc_method[0] = x->tool_name[0] = 0;
	else if (strcmp(x->rpc_method, "tools/call"))
		x->tool_name[0] = 0;
	x->body_digest_ok = http_digest_get(&n->digest, &x->body_digest);
	x->content_writes = n->writes;
	x->n_content_writes = n->n_writes;
}
