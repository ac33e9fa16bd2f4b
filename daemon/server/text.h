/* text.h - generated-text plumbing between token pieces and the wire: UTF-8
 * repair across token boundaries, stop-string matching with hold-back, and
 * JSON string escaping. Pure functions over buffers. */
#ifndef KPI_TEXT_H
#define KPI_TEXT_H

#include <stdbool.h>
#include <stddef.h>

#include "daemon/server/sbuf.h"

/* Token pieces are raw bytes and a multi-byte character may straddle two
 * tokens: hold back an incomplete sequence until the next piece completes
 * it, and replace bytes that can never be valid with U+FFFD. */
struct utf8_stream {
	unsigned char pending[4];
	int npending;
};

/* Appends the valid UTF-8 for in[0..n) to out, keeping an incomplete tail. */
void utf8_stream_feed(struct utf8_stream *s, const char *in, size_t n, struct sbuf *out);
/* End of text: a held incomplete sequence becomes U+FFFD. */
void utf8_stream_flush(struct utf8_stream *s, struct sbuf *out);

/* Looks for the earliest stop string in text[0..n). Returns true and sets
 * *emit to the offset of the match when one is found; otherwise sets *emit to
 * the length that can be sent now: everything except a tail that could still
 * grow into a stop string. */
bool stop_scan(const char *text, size_t n, char *const *stops, int nstops, size_t *emit);

/* Appends s[0..n) JSON-escaped (without quotes); s must be valid UTF-8. */
void json_escape(struct sbuf *out, const char *s, size_t n);

#endif
