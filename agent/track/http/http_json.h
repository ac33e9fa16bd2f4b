/* http_json.h - a bounded key scan of JSON bodies and events: the values of a
 * few named keys, found without parsing the JSON (a quoted name followed by
 * ':' is a key; inside a string a quote is escaped, so text never matches);
 * a key and value cut by the end of a piece are carried to the next one.
 * Knows nothing of HTTP framing, BPF, pids or fds. */
#ifndef KPI_HTTP_JSON_H
#define KPI_HTTP_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HTTP_JSON_CARRY 112     /* body bytes carried to the next piece: a key and value cut at its end */

enum http_key { HTTP_K_NONE, HTTP_K_MODEL, HTTP_K_STREAM, HTTP_K_MAX_TOKENS,
	HTTP_K_MAX_COMPLETION_TOKENS, HTTP_K_FINISH_REASON, HTTP_K_PROMPT_TOKENS,
	HTTP_K_COMPLETION_TOKENS, HTTP_K_INPUT_TOKENS, HTTP_K_OUTPUT_TOKENS, HTTP_K_TYPE,
	HTTP_K_ID, HTTP_K_DELTA, HTTP_K_TOOL_CALLS, HTTP_K_REASONING_TOKENS, HTTP_K_METHOD,
	HTTP_K_NAME, HTTP_K_JSONRPC, HTTP_K_ERROR, HTTP_K_IS_ERROR, HTTP_K_ROLE,
	/* content-like strings from here on: an event that has one carries content */
	HTTP_K_CONTENT, HTTP_K_REASONING_CONTENT, HTTP_K_REASONING, HTTP_K_TEXT, HTTP_K_ARGUMENTS,
	HTTP_K__COUNT };

#define HTTP_KM(k) (1u << (k))
#define HTTP_REQ_KEYS   (HTTP_KM(HTTP_K_MODEL) | HTTP_KM(HTTP_K_STREAM) | HTTP_KM(HTTP_K_MAX_TOKENS) | \
			 HTTP_KM(HTTP_K_MAX_COMPLETION_TOKENS) | HTTP_KM(HTTP_K_METHOD) | \
			 HTTP_KM(HTTP_K_NAME) | HTTP_KM(HTTP_K_JSONRPC))
/* of responses, bodies and events: usage, the response's id, errors */
#define HTTP_USAGE_KEYS (HTTP_KM(HTTP_K_FINISH_REASON) | HTTP_KM(HTTP_K_PROMPT_TOKENS) | \
			 HTTP_KM(HTTP_K_COMPLETION_TOKENS) | HTTP_KM(HTTP_K_INPUT_TOKENS) | \
			 HTTP_KM(HTTP_K_OUTPUT_TOKENS) | HTTP_KM(HTTP_K_REASONING_TOKENS) | \
			 HTTP_KM(HTTP_K_ID) | HTTP_KM(HTTP_K_ERROR) | HTTP_KM(HTTP_K_IS_ERROR))
/* what tells reasoning from answer (http_reason.c) */
#define HTTP_REASON_KEYS (HTTP_KM(HTTP_K_TYPE) | HTTP_KM(HTTP_K_DELTA) | HTTP_KM(HTTP_K_TOOL_CALLS) | \
			  HTTP_KM(HTTP_K_CONTENT) | HTTP_KM(HTTP_K_REASONING_CONTENT) | \
			  HTTP_KM(HTTP_K_REASONING) | HTTP_KM(HTTP_K_TEXT) | HTTP_KM(HTTP_K_ARGUMENTS))
#define HTTP_EVENT_KEYS (HTTP_USAGE_KEYS | HTTP_KM(HTTP_K_TYPE) | HTTP_KM(HTTP_K_ROLE) | \
			 HTTP_KM(HTTP_K_CONTENT) | \
			 HTTP_KM(HTTP_K_REASONING_CONTENT) | HTTP_KM(HTTP_K_REASONING) | \
			 HTTP_KM(HTTP_K_TEXT) | HTTP_KM(HTTP_K_ARGUMENTS))

enum http_jtype { HTTP_J_STR, HTTP_J_NUM, HTTP_J_TRUE, HTTP_J_FALSE, HTTP_J_NULL, HTTP_J_OTHER };

/* A value as far as it was seen: an incomplete one ran off the end. */
struct http_jval {
	enum http_jtype type;
	bool complete;
	const char *s;                  /* HTTP_J_STR: raw bytes, escapes kept */
	size_t len;
	int64_t num;                    /* HTTP_J_NUM: the non-negative integers our fields are */
};

typedef void http_key_fn(void *ctx, int key, const struct http_jval *v);

/* Calls fn for every "key": value in p[0..n) whose key is in mask. Returns
 * where a key or value cut by the end begins (n when none): a caller with
 * more to come carries it. */
size_t http_json_scan(const char *p, size_t n, unsigned mask, http_key_fn *fn, void *ctx);

/* What a body's scan carries across pieces (zeroed as soon as it is used). */
struct http_json_carry {
	uint16_t len;
	char buf[HTTP_JSON_CARRY];
};
/* http_json_scan over the carried bytes and p[0..n), in bounded steps. */
void http_json_scan_body(struct http_json_carry *c, const char *p, size_t n, unsigned mask,
			 http_key_fn *fn, void *ctx);
void http_json_carry_clear(struct http_json_carry *c);

#endif
