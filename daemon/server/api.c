/* api.c - decoding OpenAI-style request bodies with jansson, and the chat
 * template. Every error names the field, so a client can fix its request. */
#include "daemon/server/api.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API_MAX_PROMPT_IDS (1 << 20)
#define API_MAX_MESSAGES 4096

static int bad(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

void api_request_free(struct api_request *req)
{
	free(req->prompt);
	free(req->prompt_ids);
	for (int i = 0; i < req->n_stop; i++)
		free(req->stop[i]);
	memset(req, 0, sizeof(*req));
}

void chat_template_render(const struct chat_msg *msgs, int n, struct sbuf *out)
{
	for (int i = 0; i < n; i++) {
		sbuf_adds(out, "<|");
		sbuf_adds(out, msgs[i].role);
		sbuf_adds(out, "|>\n");
		sbuf_add(out, msgs[i].content, msgs[i].content_len);
		sbuf_adds(out, "</s>\n");
	}
	sbuf_adds(out, "<|assistant|>\n");
}

/* A number field within [lo, hi]; integral when want_int. */
static int get_number(json_t *root, const char *key, double lo, double hi, bool want_int,
		      double *out, bool *present, char *err, size_t errlen)
{
	json_t *v = json_object_get(root, key);
	*present = v && !json_is_null(v);
	if (!*present)
		return 0;
	if (want_int && !json_is_integer(v))
		return bad(err, errlen, "'%s' must be an integer", key);
	if (!json_is_number(v))
		return bad(err, errlen, "'%s' must be a number", key);
	double d = json_number_value(v);
	if (!isfinite(d) || d < lo || d > hi)
		return bad(err, errlen, "'%s' must be between %g and %g, got %g", key, lo, hi, d);
	*out = d;
	return 0;
}

static int get_bool(json_t *obj, const char *key, const char *label, bool *out, char *err,
		    size_t errlen)
{
	json_t *v = json_object_get(obj, key);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_boolean(v))
		return bad(err, errlen, "'%s' must be true or false", label);
	*out = json_is_true(v);
	return 0;
}

static int parse_stop(json_t *root, struct api_request *req, char *err, size_t errlen)
{
	json_t *v = json_object_get(root, "stop");
	if (!v || json_is_null(v))
		return 0;
	json_t *one[1] = { v };
	json_t **items = one;
	size_t n = 1;
	if (json_is_array(v)) {
		n = json_array_size(v);
		if (n > API_MAX_STOP)
			return bad(err, errlen, "'stop' may hold at most %d strings, got %zu",
				   API_MAX_STOP, n);
		items = NULL;
	} else if (!json_is_string(v)) {
		return bad(err, errlen, "'stop' must be a string or an array of strings");
	}
	for (size_t i = 0; i < n; i++) {
		json_t *s = items ? items[i] : json_array_get(v, i);
		if (!json_is_string(s))
			return bad(err, errlen, "'stop[%zu]' must be a string", i);
		size_t sl = json_string_length(s);
		if (sl == 0)
			continue;
		if (sl > API_MAX_STOP_LEN || memchr(json_string_value(s), 0, sl))
			return bad(err, errlen, "'stop' strings must be 1 to %d bytes without NUL",
				   API_MAX_STOP_LEN);
		req->stop[req->n_stop++] = strndup(json_string_value(s), sl);
	}
	return 0;
}

static int parse_prompt(json_t *root, struct api_request *req, char *err, size_t errlen)
{
	json_t *p = json_object_get(root, "prompt");
	if (!p || json_is_null(p))
		return bad(err, errlen, "'prompt' is required: a string or an array of token ids");
	if (json_is_string(p)) {
		req->prompt_len = json_string_length(p);
		req->prompt = malloc(req->prompt_len + 1);
		if (!req->prompt)
			return bad(err, errlen, "out of memory for 'prompt'");
		memcpy(req->prompt, json_string_value(p), req->prompt_len + 1);
		return 0;
	}
	if (!json_is_array(p))
		return bad(err, errlen, "'prompt' must be a string or an array of token ids");
	size_t n = json_array_size(p);
	if (n == 1 && json_is_string(json_array_get(p, 0))) {
		json_t *s = json_array_get(p, 0);
		req->prompt_len = json_string_length(s);
		req->prompt = malloc(req->prompt_len + 1);
		if (!req->prompt)
			return bad(err, errlen, "out of memory for 'prompt'");
		memcpy(req->prompt, json_string_value(s), req->prompt_len + 1);
		return 0;
	}
	if (n == 0)
		return bad(err, errlen, "'prompt' is empty");
	if (n > API_MAX_PROMPT_IDS)
		return bad(err, errlen, "'prompt' has %zu token ids, the limit is %d", n,
			   API_MAX_PROMPT_IDS);
	req->prompt_ids = malloc(n * sizeof(int32_t));
	if (!req->prompt_ids)
		return bad(err, errlen, "out of memory for 'prompt'");
	for (size_t i = 0; i < n; i++) {
		json_t *t = json_array_get(p, i);
		if (!json_is_integer(t)) {
			if (json_is_string(t))
				return bad(err, errlen, "'prompt[%zu]' must be an integer token id: "
					   "batches of prompts are not supported", i);
			return bad(err, errlen, "'prompt[%zu]' must be an integer token id", i);
		}
		json_int_t id = json_integer_value(t);
		if (id < 0 || id > INT32_MAX)
			return bad(err, errlen, "'prompt[%zu]' token id %lld is out of range", i,
				   (long long)id);
		req->prompt_ids[i] = (int32_t)id;
	}
	req->n_prompt_ids = (int)n;
	return 0;
}

static int parse_messages(json_t *root, struct api_request *req, char *err, size_t errlen)
{
	json_t *m = json_object_get(root, "messages");
	if (!m || !json_is_array(m))
		return bad(err, errlen, "'messages' is required: an array of {role, content}");
	size_t n = json_array_size(m);
	if (n == 0)
		return bad(err, errlen, "'messages' is empty");
	if (n > API_MAX_MESSAGES)
		return bad(err, errlen, "'messages' has %zu entries, the limit is %d", n,
			   API_MAX_MESSAGES);
	struct chat_msg *msgs = calloc(n, sizeof(*msgs));
	struct sbuf *joined = calloc(n, sizeof(struct sbuf)); /* array contents, joined */
	int rc = -1;
	if (!msgs || !joined) {
		bad(err, errlen, "out of memory for 'messages'");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(m, i);
		if (!json_is_object(e)) {
			bad(err, errlen, "'messages[%zu]' must be an object", i);
			goto out;
		}
		json_t *role = json_object_get(e, "role");
		const char *r = json_is_string(role) ? json_string_value(role) : NULL;
		if (!r || (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") &&
			   strcmp(r, "developer"))) {
			bad(err, errlen, "'messages[%zu].role' must be \"system\", \"user\" or "
			    "\"assistant\"", i);
			goto out;
		}
		msgs[i].role = strcmp(r, "developer") ? r : "system";
		json_t *c = json_object_get(e, "content");
		if (json_is_string(c)) {
			msgs[i].content = json_string_value(c);
			msgs[i].content_len = json_string_length(c);
		} else if ((!c || json_is_null(c)) && !strcmp(r, "assistant")) {
			msgs[i].content = "";
		} else if (json_is_array(c)) {
			/* [{"type": "text", "text": "..."}]: text parts joined */
			for (size_t k = 0; k < json_array_size(c); k++) {
				json_t *part = json_array_get(c, k);
				json_t *type = json_object_get(part, "type");
				json_t *text = json_object_get(part, "text");
				if (!json_is_string(type) || strcmp(json_string_value(type), "text") ||
				    !json_is_string(text)) {
					bad(err, errlen, "'messages[%zu].content[%zu]' must be "
					    "{\"type\": \"text\", \"text\": string}", i, k);
					goto out;
				}
				sbuf_add(&joined[i], json_string_value(text), json_string_length(text));
			}
			msgs[i].content = joined[i].data ? joined[i].data : "";
			msgs[i].content_len = joined[i].len;
		} else {
			bad(err, errlen, "'messages[%zu].content' must be a string or an array of "
			    "text parts", i);
			goto out;
		}
	}
	struct sbuf out = { 0 };
	chat_template_render(msgs, (int)n, &out);
	req->prompt = out.data;
	req->prompt_len = out.len;
	rc = 0;
out:
	if (joined)
		for (size_t i = 0; i < n; i++)
			sbuf_free(&joined[i]);
	free(joined);
	free(msgs);
	return rc;
}

/* max_tokens (or max_completion_tokens), temperature, top_p and seed. */
static int parse_sampling(json_t *root, bool chat, struct api_request *req, char *err,
			  size_t errlen)
{
	double d;
	bool present;
	const char *mt = chat && json_object_get(root, "max_completion_tokens") ?
		"max_completion_tokens" : "max_tokens";
	if (get_number(root, mt, 1, 1e9, true, &d, &present, err, errlen))
		return -1;
	if (present)
		req->max_tokens = (int)d;
	if (get_number(root, "temperature", 0, 2, false, &d, &present, err, errlen))
		return -1;
	if (present)
		req->temperature = (float)d;
	if (get_number(root, "top_p", 0, 1, false, &d, &present, err, errlen))
		return -1;
	if (present) {
		if (d <= 0)
			return bad(err, errlen, "'top_p' must be greater than 0 and at most 1");
		req->top_p = (float)d;
	}
	json_t *seed = json_object_get(root, "seed");
	if (seed && !json_is_null(seed)) {
		if (!json_is_integer(seed))
			return bad(err, errlen, "'seed' must be an integer");
		req->seed = (uint64_t)json_integer_value(seed);
		req->has_seed = true;
	}
	return 0;
}

int api_request_parse(const char *body, size_t len, bool chat, struct api_request *req,
		      bool *bad_json, char *err, size_t errlen)
{
	memset(req, 0, sizeof(*req));
	req->chat = chat;
	req->max_tokens = -1;
	req->temperature = 1.0f;
	req->top_p = 1.0f;
	*bad_json = false;

	json_error_t jerr;
	json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		*bad_json = true;
		return bad(err, errlen, "request body is not valid JSON: %s (line %d, column %d)",
			   jerr.text, jerr.line, jerr.column);
	}
	int rc = -1;
	if (!json_is_object(root)) {
		*bad_json = true;
		bad(err, errlen, "request body must be a JSON object");
		goto out;
	}
	json_t *model = json_object_get(root, "model");
	if (model && !json_is_null(model) && !json_is_string(model)) {
		bad(err, errlen, "'model' must be a string");
		goto out;
	}
	if (chat ? parse_messages(root, req, err, errlen) : parse_prompt(root, req, err, errlen))
		goto out;

	if (parse_sampling(root, chat, req, err, errlen))
		goto out;
	double d;
	bool present;
	if (get_number(root, "n", 1, 1, true, &d, &present, err, errlen)) {
		snprintf(err, errlen, "'n' must be 1: one choice per request is supported");
		goto out;
	}
	if (parse_stop(root, req, err, errlen))
		goto out;
	if (get_bool(root, "stream", "stream", &req->stream, err, errlen) ||
	    get_bool(root, "ignore_eos", "ignore_eos", &req->ignore_eos, err, errlen) ||
	    get_bool(root, "return_token_ids", "return_token_ids", &req->return_token_ids, err,
		     errlen))
		goto out;
	json_t *so = json_object_get(root, "stream_options");
	if (so && !json_is_null(so)) {
		if (!json_is_object(so)) {
			bad(err, errlen, "'stream_options' must be an object");
			goto out;
		}
		if (get_bool(so, "include_usage", "stream_options.include_usage",
			     &req->include_usage, err, errlen))
			goto out;
	}
	rc = 0;
out:
	json_decref(root);
	return rc;
}
