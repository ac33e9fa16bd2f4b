/* api.h - the OpenAI-compatible request bodies: decoding a completion or chat
 * request from JSON (naming the offending field on error) and the chat
 * template. Pure functions over buffers; no engine, no sockets. */
#ifndef KPI_API_H
#define KPI_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/server/sbuf.h"

#define API_MAX_STOP 4
#define API_MAX_STOP_LEN 256

struct api_request {
	bool chat;
	char *prompt;        /* text to tokenize (chat: rendered template), or NULL */
	size_t prompt_len;
	int32_t *prompt_ids; /* prompt given as token ids, or NULL */
	int n_prompt_ids;
	int max_tokens;      /* -1: not given */
	float temperature;   /* default 1 */
	float top_p;         /* default 1 */
	uint64_t seed;
	bool has_seed;
	char *stop[API_MAX_STOP];
	int n_stop;
	bool stream;
	bool include_usage;
	bool ignore_eos;
	bool return_token_ids; /* vLLM's: the generated ids in a non-stream answer */
};

/* Decodes body into req. Returns 0, or -1 with err holding one sentence that
 * names the field and what is wrong with it; *bad_json tells a syntax error
 * (or a non-object body) from a field error. req is always safe to free. */
int api_request_parse(const char *body, size_t len, bool chat, struct api_request *req,
		      bool *bad_json, char *err, size_t errlen);
void api_request_free(struct api_request *req);

/* One chat message; content is UTF-8 text. */
struct chat_msg {
	const char *role;   /* "system", "user" or "assistant" */
	const char *content;
	size_t content_len;
};

/* The chat template (docs/server.md), Zephyr style:
 *   <|system|>\n{content}</s>\n<|user|>\n{content}</s>\n ... <|assistant|>\n
 * Appends the rendered prompt to out. */
void chat_template_render(const struct chat_msg *msgs, int n, struct sbuf *out);

#endif
