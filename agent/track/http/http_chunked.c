/* http_chunked.c - chunk-size lines parsed byte by byte, chunk data counted,
 * each chunk's CRLF and the trailer stepped over, gaps inside them too. */
#include "http_chunked.h"

enum { C_SIZE, C_DATA, C_CRLF, C_TRAILER, C_DONE };

#define MAX_DIGITS 15   /* hex digits of a chunk size looked at: 60 bits */

void http_chunked_start(struct http_chunked *c)
{
	*c = (struct http_chunked){ .state = C_SIZE };
}

bool http_chunked_done(const struct http_chunked *c)
{
	return c->state == C_DONE;
}

static int hexval(char ch)
{
	return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 :
	       ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

/* "HEX[;ext]" or "HEX[ \t...]", its CR dropped at the line's end: the size,
 * or false. */
static bool size_line_ok(const struct http_chunked *c)
{
	if (!c->digits || c->digits > MAX_DIGITS)
		return false;
	if (c->line_len == c->digits)
		return true;
	return c->after == ';' || c->after == ' ' || c->after == '\t' ||
	       (c->after == '\r' && c->line_len == c->digits + 1);
}

static void line_byte(struct http_chunked *c, char ch)
{
	if (c->state == C_SIZE) {
		if (c->line_len == c->digits && c->digits <= MAX_DIGITS && hexval(ch) >= 0) {
			c->digits++;
			if (c->digits <= MAX_DIGITS)
				c->size = c->size * 16 + (uint64_t)hexval(ch);
		} else if (c->line_len == c->digits) {
			c->after = ch;
		}
	} else if (!c->line_len) {
		c->first = ch;
	}
	if (c->line_len < UINT16_MAX)
		c->line_len++;
}

/* A size or trailer line: its bytes up to and including the LF. */
static size_t line(struct http_chunked *c, const uint8_t *p, size_t n,
		   enum http_chunked_step *step)
{
	size_t i = 0;

	while (i < n && p[i] != '\n')
		line_byte(c, (char)p[i++]);
	if (i == n)
		return n;
	if (c->state == C_SIZE) {
		if (!size_line_ok(c)) {
			*step = HTTP_CHUNKED_BAD;
		} else {
			c->left = c->size;
			c->state = c->size ? C_DATA : C_TRAILER;
		}
	} else if (!c->line_len || (c->line_len == 1 && c->first == '\r')) {
		c->state = C_DONE;
		*step = HTTP_CHUNKED_END;
	}
	c->line_len = c->digits = 0;
	c->after = c->first = 0;
	c->size = 0;
	return i + 1;
}

size_t http_chunked_feed(struct http_chunked *c, const uint8_t *p, size_t n,
			 enum http_chunked_step *step)
{
	size_t k;

	*step = HTTP_CHUNKED_MORE;
	switch (c->state) {
	case C_SIZE:
	case C_TRAILER:
		return line(c, p, n, step);
	case C_DATA:
		k = c->left > n ? n : (size_t)c->left;
		*step = HTTP_CHUNKED_DATA;
		if (!(c->left -= k)) {
			c->state = C_CRLF;
			c->crlf_left = 2;
		}
		return k;
	case C_CRLF:
		if (p[0] == '\r' && c->crlf_left == 2) {
			c->crlf_left = 1;
			return 1;
		}
		if (p[0] == '\n') {
			c->state = C_SIZE;
			return 1;
		}
		*step = HTTP_CHUNKED_BAD;
		return 0;
	default:
		*step = HTTP_CHUNKED_BAD;
		return 0;
	}
}

uint64_t http_chunked_gap(struct http_chunked *c, uint64_t n, bool *data)
{
	uint64_t k;
	bool cr = c->line_len == 1 && c->first == '\r';

	*data = false;
	switch (c->state) {
	case C_DATA:
		k = c->left > n ? n : c->left;
		*data = true;
		if (!(c->left -= k)) {
			c->state = C_CRLF;
			c->crlf_left = 2;
		}
		return k;
	case C_CRLF:            /* servers write CRLF */
		k = n < c->crlf_left ? n : c->crlf_left;
		if (!(c->crlf_left -= (uint8_t)k))
			c->state = C_SIZE;
		return k;
	case C_TRAILER:         /* the last chunk's blank line */
		if ((c->line_len == 0 || cr) && n >= 2u - cr) {
			c->state = C_DONE;
			c->line_len = 0;
			return 2u - cr;
		}
		return 0;
	default:
		return 0;
	}
}
