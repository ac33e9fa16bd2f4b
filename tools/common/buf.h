/* buf.h - the tools' one growable byte buffer: a request, query or insert
 * batch being built, and a response read piece by piece and consumed from the
 * front.  Always NUL-terminated after its last byte; what can fail returns
 * -1 when out of memory, for the caller to report. */
#ifndef KPI_TOOLS_BUF_H
#define KPI_TOOLS_BUF_H

#include <stddef.h>

struct buf {
	char *p;
	size_t len, cap, off;   /* bytes [off, len) are unconsumed: read from p + off */
};

int buf_append(struct buf *b, const void *data, size_t n);
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drops n bytes from the front (lazily: they slide out when room is needed). */
void buf_consume(struct buf *b, size_t n);
/* Empties it, keeping its memory. */
void buf_reset(struct buf *b);
void buf_free(struct buf *b);

#endif
