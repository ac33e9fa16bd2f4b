/* http.h - the small HTTP/1.1 client side kpi-bench needs: an incremental
 * response parser (Content-Length, chunked, or read-to-close bodies) and an
 * SSE event splitter, over the tools' byte buffer (tools/common/buf.h). No
 * I/O here. */
#ifndef KPI_BENCH_HTTP_H
#define KPI_BENCH_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include "tools/common/buf.h"

enum { RESP_STATUS_LINE, RESP_HEADERS, RESP_BODY, RESP_DONE };

struct http_resp {
	int phase;
	int status;
	long content_length;    /* -1 when absent */
	bool chunked;
	bool conn_close;        /* server said Connection: close (or HTTP/1.0) */
	bool event_stream;      /* Content-Type: text/event-stream */
	char request_id[80];    /* x-request-id header */
	size_t body_seen;       /* raw body bytes consumed (Content-Length mode) */
	size_t chunk_left;      /* chunked: bytes left in the current chunk */
	int chunk_state;
	struct buf line;        /* partial header / chunk-size line */
	struct buf body;        /* decoded body, consumed by the caller */
	char err[128];          /* why the parser gave up */
};

void http_resp_init(struct http_resp *r);
void http_resp_free(struct http_resp *r);
/* Feed raw bytes from the socket. Returns 1 once the response is complete
 * (unused trailing bytes are ignored: we never pipeline), 0 when more is
 * needed, -1 on a malformed response (r->err says why). */
int http_resp_feed(struct http_resp *r, const char *data, size_t n);
/* The peer closed the connection: completes a read-to-close body. */
int http_resp_eof(struct http_resp *r);

/* Take the next complete SSE event out of b: its data: lines joined with
 * '\n' go into out (NUL-terminated). Returns 1 with an event, 0 when no
 * complete event is buffered. Events without data (comments) are skipped. */
int sse_next(struct buf *b, struct buf *out);

#endif
