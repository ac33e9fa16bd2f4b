/* http_reason.h - reasoning told apart from the answer in a streamed response,
 * event by event: reasoning fields (delta.reasoning, delta.reasoning_content),
 * the Responses API's reasoning deltas, and inline <think>...</think> in the
 * content, whose tags may fall inside an event or across events (docs/agent.md,
 * Reasoning). Knows nothing of HTTP framing, BPF, pids or fds; keeps no text:
 * only how many characters of a tag it has matched. */
#ifndef KPI_HTTP_REASON_H
#define KPI_HTTP_REASON_H

#include <stdbool.h>
#include <stdint.h>
#include "http_sse.h"

enum http_reason_shape {
	HTTP_REASON_NONE,       /* no reasoning seen */
	HTTP_REASON_FIELD,      /* delta.reasoning / delta.reasoning_content */
	HTTP_REASON_RESPONSES,  /* response.reasoning_*.delta */
	HTTP_REASON_THINK,      /* inline <think>...</think> in content or text */
};

/* One response's state and marks (zeroed before its first event). An event
 * with any answer byte is an answer event, one with reasoning only a
 * reasoning event; inline content before the first tag is undecided (a
 * stream that opens no <think> but closes one reasoned from its start) and
 * its events wait, counted, for the tag or the stream's end. */
struct http_reason {
	uint8_t open_m, close_m;        /* characters of "<think>" / "</think>" matched so far */
	bool in_think;                  /* between the tags */
	bool tagged;                    /* a tag settled what came before it */
	bool closed;                    /* </think> seen: the rest is answer */
	uint32_t undecided;             /* inline characters before any tag */
	uint32_t before_lt;             /* ... before the '<' that may open <think> */
	uint32_t pending;               /* events of undecided content only */
	uint64_t t_pending;             /* the first of them */
	uint64_t t_first_reasoning, t_first_answer, t_first_tool;     /* 0: none */
	uint32_t reasoning_events, answer_events;
	uint8_t shape;                  /* enum http_reason_shape */
};

/* Reads one event (any kind: a tool call's first chunk carries no content)
 * completed by the write at ts. */
void http_reason_event(struct http_reason *r, const struct http_sse *e, uint64_t ts);
/* The stream ended: events still undecided are answer (no tag came). */
void http_reason_end(struct http_reason *r);
const char *http_reason_shape_name(unsigned shape);     /* "field", "responses", "think"; NULL: none */

#endif
