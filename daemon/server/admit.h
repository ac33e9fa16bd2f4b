/* admit.h - admission on the I/O thread, shared by completions (generate.c)
 * and a prefill worker's KV requests (daemon/pd/kv_serve.c): the limits (context, KV
 * pool, --max-queue) answered with 400 or 429, and the request record that
 * enters the in-flight table with kpi:request__admitted. */
#ifndef KPI_SERVER_ADMIT_H
#define KPI_SERVER_ADMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/server/req.h"

struct conn;

struct api_request;

/* The body of a completion (chat: of a chat completion) decoded into ar;
 * false after a 503 (draining) or a 400 naming the field. ar is always safe
 * to free. */
bool admit_parse(struct conn *c, const char *body, size_t len, bool chat, struct api_request *ar);

/* The prompt's token ids (taken from ar or tokenized), or NULL after a 400. */
int32_t *admit_prompt(struct conn *c, struct api_request *ar, int *n_prompt);

/* The request fits the context and the KV pool, and the waiting queue has
 * room. Returns max_tokens (given < 0: the default, a whole context for
 * chat, else 16), or -1 after a 400 or 429. */
int admit_limits(struct conn *c, int n_prompt, int max_tokens, bool chat);

/* A new request record for c (id: c->seq, the number its generated id
 * string was made from), in the table and counted waiting, its
 * request__admitted fired with operation (enum kpi_operation). NULL after a
 * 503 when out of memory. */
struct req *admit_req(struct conn *c, enum req_kind kind, int n_prompt, int max_tokens,
		      int operation);

#endif
