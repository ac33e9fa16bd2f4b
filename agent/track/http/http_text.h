/* http_text.h - the few byte-string helpers the HTTP/1.1 tracker's parts share
 * (framing, the JSON key scan): a bounded decimal, a case-blind word search,
 * and the copy that keeps only what a column may hold. */
#ifndef KPI_HTTP_TEXT_H
#define KPI_HTTP_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

/* n decimal digits (1..18) as a number, else -1. */
static inline int64_t http_dec(const char *s, size_t n)
{
	int64_t v = 0;
	if (!n || n > 18)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

/* Whether word occurs in s[0..n), case-blind. */
static inline bool http_has_ci(const char *s, size_t n, const char *word)
{
	size_t w = strlen(word);
	for (size_t i = 0; i + w <= n; i++)
		if (!strncasecmp(s + i, word, w))
			return true;
	return false;
}

static inline bool http_id_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '_' || c == ':' || c == '-';
}

/* An id keeps [A-Za-z0-9._:-] of s, as kpi-infer keeps a client's
 * x-request-id; a text its printable ASCII (a JSON escape keeps its letter). */
static inline void http_copy_clean(char *dst, size_t cap, const char *s, size_t n, bool id)
{
	size_t o = 0;
	for (size_t i = 0; i < n && o + 1 < cap; i++)
		if (id ? http_id_char((unsigned char)s[i]) : s[i] != '\\' && s[i] >= 0x20 && s[i] < 0x7f)
			dst[o++] = s[i];
	dst[o] = 0;
}

#endif
