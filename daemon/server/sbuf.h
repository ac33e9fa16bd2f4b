/* sbuf.h - a growable byte buffer for building responses and holding
 * connection input/output. Allocation failure aborts: the daemon cannot
 * answer anyone without memory, and a clean exit beats corrupted output. */
#ifndef KPI_SBUF_H
#define KPI_SBUF_H

#include <stdarg.h>
#include <stddef.h>

struct sbuf {
	char *data;
	size_t len, cap;
};

void sbuf_reserve(struct sbuf *b, size_t extra);
void sbuf_add(struct sbuf *b, const void *p, size_t n);
void sbuf_adds(struct sbuf *b, const char *s);
void sbuf_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drops the first n bytes. */
void sbuf_consume(struct sbuf *b, size_t n);
void sbuf_free(struct sbuf *b);

#endif
