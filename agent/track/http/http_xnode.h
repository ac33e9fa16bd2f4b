/* http_xnode.h - one exchange being built, whatever frames it: HTTP/1.1's
 * http_track.c (a queue of them per connection) and HTTP/2's http2_track.c
 * (one per stream) fill the same struct http_exchange through these calls:
 * the head's ids, the body's key scan and fingerprint, the content events'
 * times, and what is handed over at its end. */
#ifndef KPI_HTTP_XNODE_H
#define KPI_HTTP_XNODE_H

#include "http_digest.h"
#include "http_json.h"
#include "http_reason.h"
#include "http_sse.h"
#include "http_track.h"

struct http_xnode {
	struct http_exchange x;
	struct http_xnode *next;        /* the owner's list */
	uint64_t *writes;
	uint32_t n_writes, cap_writes;
	char req_id[HTTP_TRACK_ID_LEN], resp_id[HTTP_TRACK_ID_LEN], trace_id[33];
	struct http_reason reason;
	struct http_digest digest;
	bool jsonrpc;                   /* the request body is JSON-RPC */
};

/* A request whose first byte came at t_arrive; NULL when out of memory. */
struct http_xnode *http_xnode_new(uint64_t digest_key, uint64_t t_arrive, const char *method,
				  const char *path);
void http_xnode_free(struct http_xnode *n);

/* A head's header (name case-blind, value trimmed): the ids a request or
 * response names (x-request-id, traceparent, gen_ai.conversation.id). */
void http_xnode_header(struct http_xnode *n, bool request, const char *name, size_t nn,
		       const char *v, size_t vn);
/* Bytes of the request's body: the key scan (carry across pieces) and the fingerprint. */
void http_xnode_req_body(struct http_xnode *n, struct http_json_carry *c, const uint8_t *p, size_t len);
/* The key scan's callback for a response body that is no event stream: usage,
 * finish_reason, the body's id, errors (ctx: the struct http_exchange). */
void http_xnode_usage_key(void *ctx, int key, const struct http_jval *v);
/* An event (SSE) of the response completed by the write at ts: classified,
 * counted, its reasoning marks; the kind it was. */
enum http_ev_kind http_xnode_event(struct http_xnode *n, const struct http_sse *e, uint64_t ts);
/* A content event (an SSE one, a gRPC message) completed by the write at ts. */
void http_xnode_content(struct http_xnode *n, uint64_t ts);
/* x's request_id and id_src from the ids seen so far. */
void http_xnode_pick_id(struct http_xnode *n);
/* The exchange ends with end at ts: its ids, reasoning and fingerprint are
 * filled in, content_writes points at its times (valid until the free). */
void http_xnode_end(struct http_xnode *n, enum http_end end, uint64_t ts);

#endif
