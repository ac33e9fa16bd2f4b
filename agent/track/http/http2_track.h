/* http2_track.h - follows one connection's HTTP/2 frames (prior knowledge,
 * h2c, or the plaintext of ALPN h2 over TLS) from the server's reads and
 * writes, and hands one struct http_exchange per stream to the same callbacks
 * as the HTTP/1.1 tracker (http_track.h): a response's DATA frames carry its
 * events (SSE, or gRPC's length-prefixed messages), its trailers gRPC's
 * grpc-status.  Header blocks are decoded by libnghttp2's HPACK inflater, one
 * per direction; a connection whose header table is unknown (it began before
 * tracking did, or a header block was not captured) still has its streams
 * timed by id, their heads counted as not decodable, never guessed.
 *
 * Pure user space like its HTTP/1.1 sibling: no BPF, pids or fds. */
#ifndef KPI_HTTP2_TRACK_H
#define KPI_HTTP2_TRACK_H

#include "http_track.h"

#define HTTP2_PREFACE       "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define HTTP2_PREFACE_LEN   24
#define HTTP2_MAX_STREAMS   256         /* streams followed at once per connection */
#define HTTP2_TABLE_MAX     65536       /* header table bytes a decoder keeps, whatever SETTINGS ask */
#define HTTP2_BLOCK_MAX     65536       /* compressed bytes of one header block (HEADERS and its
					 * CONTINUATIONs) decoded; past it the table is lost */
#define HTTP2_HEADERS_MAX   65536       /* decoded bytes of one block looked at (an HPACK bomb's
					 * output is counted, not kept) */

/* What the HTTP/2 trackers met (summed over a module through cfg totals). */
struct http2_track_stats {
	uint64_t conns;                 /* connections followed as HTTP/2 */
	uint64_t midstream;             /* of them, open before tracking began: tables unknown */
	uint64_t frames;                /* frames parsed */
	uint64_t streams;               /* streams handed over as exchanges */
	uint64_t grpc_messages;         /* gRPC response messages */
	uint64_t headers_undecodable;   /* header blocks not decoded: the table was unknown */
	uint64_t tables_lost;           /* times a direction's table became unknown (a gap in a
					 * block, a bad block, a block over HTTP2_BLOCK_MAX) */
	uint64_t bombs;                 /* blocks that decoded past HTTP2_HEADERS_MAX */
	uint64_t bad_frames;            /* frames that broke the protocol: the direction unsynced */
	uint64_t resynced;              /* times a direction found a frame boundary again */
	uint64_t gap_bytes;             /* uncaptured bytes stepped over inside frames */
	uint64_t resets;                /* RST_STREAM frames */
	uint64_t streams_dropped;       /* streams not followed: over HTTP2_MAX_STREAMS */
	uint64_t grpc_bad_prefix;       /* gRPC length prefixes that lied (bad flag, a message
					 * cut by the stream's end): the stream's messages unknown */
};

struct http2_track;

/* A tracker for one connection: cfg as for http_track_new; h2_totals, or
 * NULL, gets the sums above.  A connection whose client bytes do not start
 * with the preface (or cfg->midstream) began before tracking: its header
 * tables are unknown, its frame boundaries looked for at the start of a
 * read or write.  NULL when out of memory. */
struct http2_track *http2_track_new(const struct http_track_cfg *cfg,
				    struct http2_track_stats *h2_totals);
/* As http_track_feed. */
void http2_track_feed(struct http2_track *t, enum http_dir dir, const uint8_t *data,
		      size_t captured, size_t moved, uint64_t ts);
/* The connection ended: every stream in flight ends with who's reason. */
void http2_track_close(struct http2_track *t, uint64_t ts, enum http_closer who);
/* Ends every stream in flight as HTTP_END_TIMEOUT at now. */
void http2_track_expire(struct http2_track *t, uint64_t now);
uint64_t http2_track_last_ts(const struct http2_track *t);
unsigned http2_track_in_flight(const struct http2_track *t);
void http2_track_free(struct http2_track *t);

/* Whether a connection's first captured bytes of the requests' direction
 * are the HTTP/2 client preface (or as much of it as was captured, 3 bytes
 * at least). */
bool http2_is_preface(const uint8_t *d, size_t n);
/* Whether bytes seen first on a connection already open are HTTP/2 frames:
 * well-formed frame headers, chained to the end of what was captured. */
bool http2_looks_framed(const uint8_t *d, size_t n);

#endif
