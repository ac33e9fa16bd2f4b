/* openai.h - the OpenAI-shaped bodies kpi-infer writes: SSE chunks, the
 * non-stream completion, usage, /v1/models and the error object. Framed by
 * hand around json_escape: the per-token path allocates no JSON tree. */
#ifndef KPI_OPENAI_H
#define KPI_OPENAI_H

#include <stdbool.h>
#include <stddef.h>

#include "daemon/server/sbuf.h"

struct req;

/* model: the JSON-escaped model name every body carries. */

/* One SSE event carrying text and, on the last one, the finish reason; the
 * first event of a chat stream (headers not yet sent) carries the role. text
 * lies in r->text: its offset there tells reasoning from answer
 * (--reasoning-tokens). */
void openai_sse_event(struct sbuf *b, const struct req *r, const char *model,
		      const char *text, size_t n, const char *finish);
/* The events of a stream's final write after its last token's: the usage
 * event when asked for, and data: [DONE]. */
void openai_sse_end(struct sbuf *b, const struct req *r, const char *model);
/* A non-stream response: the whole generated text. */
void openai_completion(struct sbuf *b, const struct req *r, const char *model,
		       const char *finish);
void openai_models(struct sbuf *b, const char *model, long long created, int max_model_len);
/* {"error":{...}} with the type OpenAI gives status. */
void openai_error(struct sbuf *b, int status, const char *msg);

#endif
