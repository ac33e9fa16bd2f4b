/* http_chunked.h - the chunked transfer coding of an HTTP/1.1 body, decoded as
 * its bytes stream in, holding none of them: where each chunk's data lies,
 * where the body ends, and which uncaptured bytes (a gap) the framing
 * accounts for. Knows nothing of the rest of HTTP, BPF, pids or fds. */
#ifndef KPI_HTTP_CHUNKED_H
#define KPI_HTTP_CHUNKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum http_chunked_step {
	HTTP_CHUNKED_MORE,      /* framing consumed, nothing to report */
	HTTP_CHUNKED_DATA,      /* the bytes consumed are chunk data */
	HTTP_CHUNKED_END,       /* the body ended (the blank line after the last chunk) */
	HTTP_CHUNKED_BAD,       /* not chunked coding: a bad chunk-size line or chunk end */
};

struct http_chunked {
	uint8_t state;
	uint8_t crlf_left;              /* of a chunk's CRLF */
	uint8_t digits;                 /* leading hex digits of the size line, 16: too many */
	char after;                     /* the size line's byte after its digits, 0 none yet */
	uint16_t line_len;              /* bytes of the current size or trailer line (saturates) */
	char first;                     /* the current trailer line's first byte */
	uint64_t size;                  /* of the size line so far */
	uint64_t left;                  /* chunk data bytes left */
};

/* The body starts (its head said chunked). */
void http_chunked_start(struct http_chunked *c);
/* Consumes from p[0..n) (n > 0) up to one step: returns how many bytes
 * (0 only with BAD, the byte at p not being a chunk's end). */
size_t http_chunked_feed(struct http_chunked *c, const uint8_t *p, size_t n,
			 enum http_chunked_step *step);
/* n uncaptured bytes: how many of them one step of the framing steps over
 * (the rest of a chunk's data, *data set; its CRLF; the last chunk's blank
 * line), 0 when it cannot (a size or trailer line is in the gap). */
uint64_t http_chunked_gap(struct http_chunked *c, uint64_t n, bool *data);
/* The body ended. */
bool http_chunked_done(const struct http_chunked *c);

#endif
