/* buf.c - the tools' growable byte buffer (buf.h): doubling capacity, the
 * consumed front slid out only when room is needed. */
#include "tools/common/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int buf_reserve(struct buf *b, size_t extra)
{
	if (b->off && b->off == b->len)
		b->off = b->len = 0;
	if (b->len + extra + 1 <= b->cap)
		return 0;
	if (b->off) {   /* slide the unconsumed bytes to the front first */
		memmove(b->p, b->p + b->off, b->len - b->off);
		b->len -= b->off;
		b->off = 0;
		if (b->len + extra + 1 <= b->cap)
			return 0;
	}
	size_t cap = b->cap ? b->cap : 1024;
	while (cap < b->len + extra + 1)
		cap *= 2;
	char *p = realloc(b->p, cap);
	if (!p)
		return -1;
	b->p = p;
	b->cap = cap;
	return 0;
}

int buf_append(struct buf *b, const void *data, size_t n)
{
	if (buf_reserve(b, n))
		return -1;
	memcpy(b->p + b->len, data, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || buf_reserve(b, (size_t)n))
		return -1;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

void buf_consume(struct buf *b, size_t n)
{
	b->off += n;
	if (b->off >= b->len)
		b->off = b->len = 0;
}

void buf_reset(struct buf *b)
{
	b->off = b->len = 0;
	if (b->p)
		b->p[0] = '\0';
}

void buf_free(struct buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}
