/* http_sse.h - server-sent events split out of a response body as it streams
 * (LF or CRLF line ends; bare-CR ends are not supported), each kept to its
 * first HTTP_SSE_KEEP bytes and classified: content, other, or unknown when a
 * gap hid what would tell. Knows nothing of HTTP framing, BPF, pids or fds. */
#ifndef KPI_HTTP_SSE_H
#define KPI_HTTP_SSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "http_json.h"

#define HTTP_SSE_KEEP 480u      /* bytes of an event kept to classify it */

/* EMPTY: a token whose text is empty (a content-like key holding "", no
 * role: a byte sequence cut between tokens, a special token), still written at
 * its step like the others; counted with OTHER for the content counts. */
enum http_ev_kind { HTTP_EV_OTHER, HTTP_EV_CONTENT, HTTP_EV_UNKNOWN, HTTP_EV_EMPTY };

/* The event being split out: its first bytes, CRs dropped, lines ended by
 * '\n', a cut (gap) marked by '\0'. */
struct http_sse {
	uint16_t len;
	bool in_line;                   /* bytes since the last LF: the next LF ends a line */
	bool cut;                       /* part of the event was not seen */
	char buf[HTTP_SSE_KEEP];
};

/* Splits events at blank lines: on_event(ctx, e) for each one a blank line
 * completes (none for an empty one), then e is reset for the next. */
void http_sse_feed(struct http_sse *e, const char *p, size_t len,
		   void (*on_event)(void *ctx, const struct http_sse *e), void *ctx);
/* Part of the event was not captured: it ends at the next blank line seen
 * (events wholly inside the gap are not counted: they cannot be seen). */
void http_sse_cut(struct http_sse *e);
/* Forgets the event in progress (zeroed: no generated text is kept). */
void http_sse_reset(struct http_sse *e);

/* Calls fn for every key in mask of the event's data lines (and of a line's
 * tail after a cut), in order; name gets its event: line's name (NUL-ended,
 * "" none, cut to name_len). Returns false for data: [DONE]. */
bool http_sse_scan(const struct http_sse *e, unsigned mask, http_key_fn *fn, void *ctx, char *name,
		   size_t name_len);

/* CONTENT when its data JSON has a non-empty content-like string (or, for
 * the Responses API, a response.*.delta type), EMPTY when its content-like
 * string is empty and it names no role, OTHER for control, role-only and
 * [DONE] events, UNKNOWN when the bytes that would tell were not seen.
 * The usage and finish_reason keys it meets go to usage(ctx). */
enum http_ev_kind http_sse_classify(const struct http_sse *e, http_key_fn *usage, void *ctx);

#endif
