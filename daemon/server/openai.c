/* openai.c - formats the OpenAI-compatible response bodies and SSE events
 * (openai.h) from a request's state; writes nothing to sockets. */
#include "daemon/server/openai.h"

#include <string.h>

#include "daemon/server/req.h"
#include "daemon/server/text.h"

/* The fields every body and chunk starts with; whole: a non-stream body. */
static void chunk_prefix(struct sbuf *b, const struct req *r, const char *model, bool whole)
{
	const char *obj = !r->chat ? "text_completion" :
		whole ? "chat.completion" : "chat.completion.chunk";
	sbuf_printf(b, "{\"id\":\"%s%s\",\"object\":\"%s\",\"created\":%lld,\"model\":\"%s\",",
		    r->chat ? "chatcmpl-" : "cmpl-", r->rid, obj, r->created, model);
}

static void usage_json(struct sbuf *b, const struct req *r)
{
	sbuf_printf(b, "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,"
		    "\"total_tokens\":%d", r->n_prompt, r->n_out, r->n_prompt + r->n_out);
	int n_reason = r->reasoning_tokens;
	if (n_reason)
		sbuf_printf(b, ",\"completion_tokens_details\":{\"reasoning_tokens\":%d}",
			    r->n_out < n_reason ? r->n_out : n_reason);
	sbuf_adds(b, "}");
}

/* ---- reasoning (--reasoning-tokens) ------------------------------------------
 * r->text before r->answer_at is the reasoning, the rest the answer. Chat
 * carries them apart (delta.reasoning_content, message.reasoning_content, as
 * vLLM with a reasoning parser, SGLang and llama.cpp do); a text completion
 * has no such field, so they go inline as <think>reasoning</think>answer, as
 * a reasoning model served without a parser writes them. */

/* Of text[off, off + n), how many bytes are reasoning. */
static size_t reasoning_part(const struct req *r, size_t off, size_t n)
{
	if (r->answer_at <= off)
		return 0;
	return r->answer_at - off < n ? r->answer_at - off : n;
}

/* text[off, off + n) as a completion's text: <think> opens the first
 * reasoning byte, </think> comes before the first answer byte. */
static void text_inline(struct sbuf *b, const struct req *r, size_t off, size_t n)
{
	const char *text = r->text.data + off;
	size_t rn = r->reasoning_tokens ? reasoning_part(r, off, n) : 0;
	if (r->reasoning_tokens && off == 0 && n)
		sbuf_adds(b, "<think>");
	json_escape(b, text, rn);
	if (r->reasoning_tokens && r->answer_at >= off && r->answer_at < off + n)
		sbuf_adds(b, "</think>");
	json_escape(b, text + rn, n - rn);
}

static void string_field(struct sbuf *b, bool *comma, const char *name, const char *s, size_t n)
{
	sbuf_printf(b, "%s\"%s\":\"", *comma ? "," : "", name);
	json_escape(b, s, n);
	sbuf_adds(b, "\"");
	*comma = true;
}

void openai_sse_event(struct sbuf *b, const struct req *r, const char *model,
		      const char *text, size_t n, const char *finish)
{
	size_t off = (size_t)(text - r->text.data);
	sbuf_adds(b, "data: ");
	chunk_prefix(b, r, model, false);
	if (r->chat) {
		sbuf_adds(b, "\"choices\":[{\"index\":0,\"delta\":{");
		bool comma = !r->headers_sent;
		if (comma)
			sbuf_adds(b, "\"role\":\"assistant\"");
		size_t rn = reasoning_part(r, off, n);
		bool thinking = r->answer_at > off; /* an empty event keeps its phase's field */
		if (rn || (thinking && !n && !finish))
			string_field(b, &comma, "reasoning_content", text, rn);
		if (n > rn || (!thinking && !n && !finish))
			string_field(b, &comma, "content", text + rn, n - rn);
		sbuf_adds(b, "}");
	} else {
		sbuf_adds(b, "\"choices\":[{\"index\":0,\"text\":\"");
		text_inline(b, r, off, n);
		sbuf_adds(b, "\"");
	}
	if (finish)
		sbuf_printf(b, ",\"logprobs\":null,\"finish_reason\":\"%s\"}]", finish);
	else
		sbuf_adds(b, ",\"logprobs\":null,\"finish_reason\":null}]");
	if (r->include_usage)
		sbuf_adds(b, ",\"usage\":null");
	sbuf_adds(b, "}\n\n");
}

void openai_sse_end(struct sbuf *b, const struct req *r, const char *model)
{
	if (r->include_usage) {
		sbuf_adds(b, "data: ");
		chunk_prefix(b, r, model, false);
		sbuf_adds(b, "\"choices\":[],");
		usage_json(b, r);
		sbuf_adds(b, "}\n\n");
	}
	sbuf_adds(b, "data: [DONE]\n\n");
}

void openai_completion(struct sbuf *b, const struct req *r, const char *model,
		       const char *finish)
{
	chunk_prefix(b, r, model, true);
	if (r->chat) {
		size_t rn = reasoning_part(r, 0, r->text.len);
		bool comma = true;
		sbuf_adds(b, "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\"");
		string_field(b, &comma, "content", r->text.data + rn, r->text.len - rn);
		if (r->reasoning_tokens)
			string_field(b, &comma, "reasoning_content", r->text.data, rn);
		sbuf_adds(b, "}");
	} else {
		sbuf_adds(b, "\"choices\":[{\"index\":0,\"text\":\"");
		text_inline(b, r, 0, r->text.len);
		sbuf_adds(b, "\"");
	}
	sbuf_printf(b, ",\"logprobs\":null,\"finish_reason\":\"%s\"", finish);
	if (r->return_token_ids) {
		const int32_t *ids = (const int32_t *)r->token_ids.data;
		size_t n = r->token_ids.len / sizeof(int32_t);
		sbuf_adds(b, ",\"token_ids\":[");
		for (size_t i = 0; i < n; i++)
			sbuf_printf(b, i ? ",%d" : "%d", ids[i]);
		sbuf_adds(b, "]");
	}
	sbuf_adds(b, "}],");
	usage_json(b, r);
	sbuf_adds(b, "}\n");
}

void openai_models(struct sbuf *b, const char *model, long long created, int max_model_len)
{
	sbuf_printf(b, "{\"object\":\"list\",\"data\":[{\"id\":\"%s\",\"object\":\"model\","
		    "\"created\":%lld,\"owned_by\":\"kpi-infer\",\"max_model_len\":%d}]}\n",
		    model, created, max_model_len);
}

static const char *error_type(int status)
{
	switch (status) {
	case 400: case 413: case 431: return "invalid_request_error";
	case 404: return "not_found_error";
	case 405: return "method_not_allowed_error";
	case 408: return "timeout_error";
	case 429: return "rate_limit_error";
	case 503: return "service_unavailable_error";
	default: return "server_error";
	}
}

void openai_error(struct sbuf *b, int status, const char *msg)
{
	sbuf_adds(b, "{\"error\":{\"message\":\"");
	json_escape(b, msg, strlen(msg));
	sbuf_printf(b, "\",\"type\":\"%s\",\"param\":null,\"code\":%d}}\n", error_type(status),
		    status);
}
