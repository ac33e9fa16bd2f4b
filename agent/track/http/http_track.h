/* http_track.h - follows one TCP connection's HTTP/1.1 exchanges, and the
 * server-sent events of streamed responses, from the server's socket reads and
 * writes; hands one plain record per request/response pair to a callback.
 *
 * Pure user space: it knows nothing of BPF, pids or fds, and neither do its
 * parts: http_track.c (framing, exchanges), http_chunked.c (chunked bodies),
 * http_json.c (the key scan of bodies), http_sse.c (events). The caller keeps one
 * tracker per connection, feeds it every read (HTTP_IN) and write (HTTP_OUT)
 * of the server with what BPF managed to copy of it, and closes it when the
 * connection ends. No prompt or generated text is kept: only the numbers,
 * ids and named fields of struct http_exchange (docs/security.md). */
#ifndef KPI_HTTP_TRACK_H
#define KPI_HTTP_TRACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HTTP_TRACK_ID_LEN     64        /* request id bytes kept, NUL included (= KPI_REQID_LEN) */
#define HTTP_TRACK_MODEL_LEN  64        /* "model" bytes kept, NUL included */
#define HTTP_TRACK_PATH_LEN   64        /* path bytes kept (the query is never kept) */
#define HTTP_TRACK_METHOD_LEN 16
#define HTTP_TRACK_REASON_LEN 16        /* finish_reason */
#define HTTP_TRACK_RPC_LEN    32        /* a JSON-RPC method */
#define HTTP_TRACK_MAX_WRITES 65536     /* content write times kept per exchange */
#define HTTP_TRACK_MAX_QUEUE  16        /* pipelined requests per connection before it gives up */

enum http_dir {
	HTTP_IN,        /* bytes the server read: requests */
	HTTP_OUT,       /* bytes the server wrote: responses */
};

enum http_closer {
	HTTP_BY_SERVER, /* the server closed (close(), shutdown) */
	HTTP_BY_CLIENT, /* the client went away (EOF read, EPIPE / ECONNRESET on write) */
	HTTP_BY_SERVER_AFTER_CLIENT, /* the server closed after the client's FIN or RST:
				      * a close-delimited body ends complete, the rest client_closed */
};

/* Why an exchange was handed over. */
enum http_end {
	HTTP_END_COMPLETE,      /* the response ended by its framing (or, close-delimited, at the close) */
	HTTP_END_CLIENT_CLOSED, /* the client went away before the response ended */
	HTTP_END_SERVER_CLOSED, /* the server closed before the response ended */
	HTTP_END_UNSYNCED,      /* the tracker lost the response's framing (a gap hid it, or it did not parse) */
	HTTP_END_TIMEOUT,       /* http_track_expire */
};

/* Where request_id came from. */
enum http_id_src {
	HTTP_ID_NONE,           /* none: the caller makes one */
	HTTP_ID_REQUEST,        /* the request's x-request-id */
	HTTP_ID_TRACEPARENT,    /* the trace-id of the request's W3C traceparent */
	HTTP_ID_RESPONSE,       /* the response's x-request-id */
};

/* http_exchange.flags */
#define HTTP_X_REQ_CUT       0x01 /* the request's framing was lost: t_req_read, body fields unknown */
#define HTTP_X_BODY_GAP      0x02 /* some body bytes were not captured: fields there are unknown */
#define HTTP_X_SSE           0x04 /* the response is text/event-stream */
#define HTTP_X_CHUNKED       0x08 /* the response is chunked */
#define HTTP_X_CONTINUE      0x10 /* the request asked for 100-continue */
#define HTTP_X_CLOSE         0x20 /* Connection: close on either side */
#define HTTP_X_WRITES_CAPPED 0x40 /* more than HTTP_TRACK_MAX_WRITES content events */
#define HTTP_X_HEADERS_UNKNOWN 0x80 /* HTTP/2: a header block of the stream could not be decoded
				     * (its connection's header table is unknown): path, status... unknown */
#define HTTP_X_MID_READ 0x100 /* HTTP/2: the request's first byte followed another stream's
			       * frame in the read that returned it: it arrived in a later
			       * segment than the read's first, at a time not known */

/* What carried the exchange (http_exchange.protocol). */
enum http_proto {
	HTTP_PROTO_1,           /* HTTP/1.1 (http_track.h) */
	HTTP_PROTO_2,           /* an HTTP/2 stream (http2_track.h) */
	HTTP_PROTO_GRPC,        /* an HTTP/2 stream whose content-type is application/grpc */
};

/* One request and its response. Times are the ts of the feed (or close) that
 * showed the mark, 0 when not reached; in the order of the fields they never
 * decrease, except t_req_read, which may follow t_resp_start (an answer sent
 * before the request body was read). t_done is always set: for COMPLETE the
 * write that ended the body (or the close, for a close-delimited one),
 * otherwise the time the exchange was given up. */
struct http_exchange {
	uint64_t t_arrive;              /* the read with the request's first byte */
	uint64_t t_req_read;            /* the read that completed the request by its framing */
	uint64_t t_continue;            /* the first 1xx interim response (100 Continue) */
	uint64_t t_resp_start;          /* the write with the final status line's first byte */
	uint64_t t_first_content;       /* the write that completed the first content event */
	uint64_t t_last_content;        /* ... the last one */
	uint64_t t_done;
	enum http_end end;
	unsigned flags;                 /* HTTP_X_* */
	int status;                     /* final status code, 0 = none seen */
	int stream;                     /* the request's "stream": 1, 0, -1 unknown */
	int64_t max_tokens;             /* "max_tokens", else "max_completion_tokens"; -1 unknown */
	int64_t prompt_tokens;          /* usage.prompt_tokens (input_tokens); -1 unknown */
	int64_t completion_tokens;      /* usage.completion_tokens (output_tokens); -1 unknown */
	uint32_t content_events;        /* SSE events that carried generated content */
	uint32_t other_events;          /* role-only, control, keep-alive, [DONE] events */
	uint32_t unknown_events;        /* events whose captured bytes could not tell */
	enum http_id_src id_src;
	char method[HTTP_TRACK_METHOD_LEN];
	char path[HTTP_TRACK_PATH_LEN];         /* up to '?', printable ASCII */
	char model[HTTP_TRACK_MODEL_LEN];       /* the request's "model", "" unknown */
	char finish_reason[HTTP_TRACK_REASON_LEN]; /* the last one seen, "" unknown */
	char request_id[HTTP_TRACK_ID_LEN];     /* [A-Za-z0-9._:-] only, "" when id_src is NONE */
	/* reasoning (http_reason.h): the writes of the first reasoning, answer
	 * and tool-call events (0: none), the content events by kind, and the
	 * shape (enum http_reason_shape); usage's reasoning_tokens (-1 unknown) */
	uint64_t t_first_reasoning, t_first_answer, t_first_tool;
	uint32_t reasoning_events, answer_events;
	unsigned reasoning_shape;
	int64_t reasoning_tokens;
	/* the ids a response carried: its x-request-id header and the first "id"
	 * of its body or events (a chunk's, a completion's); "" none */
	char resp_header_id[HTTP_TRACK_ID_LEN], resp_body_id[HTTP_TRACK_ID_LEN];
	char conversation_id[HTTP_TRACK_ID_LEN];        /* the request's gen_ai.conversation.id */
	char trace_id[33];                              /* the request's traceparent trace-id, "" none */
	/* JSON-RPC (MCP over streamable HTTP): the request's method and, for
	 * tools/call, the tool's name (params.name: metadata, arguments are never
	 * read); rpc_error: the response carried an error (a non-null "error", a
	 * result with "isError": true) */
	char rpc_method[HTTP_TRACK_RPC_LEN], tool_name[HTTP_TRACK_MODEL_LEN];
	bool rpc_error;
	/* the request body's fingerprint, its "model" value left out (http_digest.h):
	 * valid when body_digest_ok; in memory only */
	uint64_t body_digest;
	bool body_digest_ok;
	/* the write time of each content event, in order; valid during the
	 * callback only; n_content_writes < content_events when capped */
	const uint64_t *content_writes;
	size_t n_content_writes;
	uint64_t tag;                   /* what on_request returned for it, 0 without one */
	/* HTTP/2 (http2_track.h): the protocol, the stream's id (0 for
	 * HTTP/1.1) and gRPC's grpc-status from the trailers (-1 none seen);
	 * a gRPC response's content events are its messages */
	enum http_proto protocol;
	uint32_t stream_id;
	int grpc_status;
};

/* What a tracker (and, summed, the module) lost or could not follow. */
struct http_track_stats {
	uint64_t exchanges;             /* records handed over */
	uint64_t unsynced;              /* times a direction lost the framing */
	uint64_t resynced;              /* times it found a message start again */
	uint64_t malformed;             /* of unsynced: bytes that did not parse as HTTP/1.1 */
	uint64_t gaps;                  /* feeds with captured < moved */
	uint64_t gap_bytes_skipped;     /* uncaptured bytes stepped over by known framing */
	uint64_t gap_bytes_lost;        /* uncaptured bytes no framing accounted for */
	uint64_t unknown_events;        /* SSE events of unknown kind */
	uint64_t orphan_responses;      /* responses with no request to match */
	uint64_t clamped;               /* times earlier than the last one (or than their request), raised */
	uint64_t no_memory;             /* requests not tracked: allocation failed */
};

struct http_track_cfg {
	/* called when an exchange completes or is given up; x and its arrays
	 * are valid during the call only */
	void (*on_exchange)(void *ctx, const struct http_exchange *x);
	/* optional: called once a request's head is complete, with its method,
	 * path, t_arrive and header id (request_id, id_src) filled; what it
	 * returns comes back as the exchange's tag */
	uint64_t (*on_request)(void *ctx, const struct http_exchange *x);
	/* optional: called for every token event of a response as the write
	 * that completes it is fed (content, or a token with empty text), with
	 * that write's time; x is the exchange in progress (its head's fields,
	 * t_arrive, tag) */
	void (*on_token)(void *ctx, const struct http_exchange *x, uint64_t ts);
	void *ctx;
	struct http_track_stats *totals; /* module-wide sums every tracker adds to, or NULL */
	bool midstream;                  /* opened before tracking began: find a message start first */
	uint64_t digest_key;             /* the secret the body fingerprints are keyed with */
};

struct http_track;

/* NULL when out of memory. */
struct http_track *http_track_new(const struct http_track_cfg *cfg);

/* One read (HTTP_IN) or write (HTTP_OUT) of the server, or one iovec of it:
 * moved bytes went through the socket, of which the first captured (<= moved)
 * are in data. The rest is a gap, stepped over where the framing allows.
 * ts: CLOCK_MONOTONIC ns, > 0; earlier than the last feed is raised to it. */
void http_track_feed(struct http_track *t, enum http_dir dir, const uint8_t *data,
		     size_t captured, size_t moved, uint64_t ts);
/* What a feed reads of data: at most moved bytes, none without data (a
 * read whose bytes the kernel side could not copy). http2_track_feed's too. */
static inline size_t http_feed_captured(const uint8_t *data, size_t captured, size_t moved)
{
	return !data ? 0 : captured < moved ? captured : moved;
}

/* The connection ended: a close-delimited response completes (by the server),
 * every other exchange in flight ends with who's reason. The tracker is then
 * ready for a new connection. */
void http_track_close(struct http_track *t, uint64_t ts, enum http_closer who);

/* The server shut its side down (shutdown SHUT_WR: its FIN) at ts: a body
 * delimited by the close ends complete there, where its client saw it end,
 * not at the close() that may come much later. Nothing else ends. */
void http_track_shut(struct http_track *t, uint64_t ts);

/* Ends every exchange in flight as HTTP_END_TIMEOUT at now (the caller's
 * timeout, from http_track_last_ts). Framing goes on: a late response is
 * followed and counted as an orphan, never matched to a newer request. */
void http_track_expire(struct http_track *t, uint64_t now);

uint64_t http_track_last_ts(const struct http_track *t);   /* last feed or close, 0 none */
unsigned http_track_in_flight(const struct http_track *t); /* exchanges not handed over yet */
bool http_track_synced(const struct http_track *t);        /* both directions followed */
const struct http_track_stats *http_track_stats(const struct http_track *t);

/* Frees the tracker; exchanges still in flight are dropped unreported
 * (http_track_close first to have them). NULL is fine. */
void http_track_free(struct http_track *t);

const char *http_end_name(enum http_end e);      /* "complete", "client_closed", ... */
const char *http_proto_name(enum http_proto p);  /* "http/1.1", "h2", "grpc" */

#endif
