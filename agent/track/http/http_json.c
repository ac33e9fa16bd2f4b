/* http_json.c - the bounded JSON key scan: keys by name, values as far as they
 * were captured, and the carry of a key cut by the end of a piece. */
#include <string.h>
#include "http_json.h"
#include "http_text.h"

#define KEY_MAX  24     /* longest quoted key looked at */
#define WS_MAX   4      /* whitespace stepped over around ':' */
#define SCAN_SEG 1024   /* body bytes scanned per step */

#define KEY(s) { s, sizeof(s) - 1 }
static const struct { const char *s; size_t n; } key_names[HTTP_K__COUNT] = { KEY(""), KEY("model"),
	KEY("stream"), KEY("max_tokens"), KEY("max_completion_tokens"), KEY("finish_reason"),
	KEY("prompt_tokens"), KEY("completion_tokens"), KEY("input_tokens"), KEY("output_tokens"),
	KEY("type"), KEY("id"), KEY("delta"), KEY("tool_calls"), KEY("reasoning_tokens"), KEY("method"),
	KEY("name"), KEY("jsonrpc"), KEY("error"), KEY("isError"), KEY("role"), KEY("content"),
	KEY("reasoning_content"), KEY("reasoning"), KEY("text"), KEY("arguments") };
_Static_assert(HTTP_K__COUNT <= 32, "a key mask is an unsigned");

static int key_find(const char *s, size_t n, unsigned mask)
{
	for (int k = 1; k < HTTP_K__COUNT; k++)
		if ((mask & HTTP_KM(k)) && key_names[k].n == n && !memcmp(key_names[k].s, s, n))
			return k;
	return HTTP_K_NONE;
}

static size_t skip_ws(const char *p, size_t i, size_t n)
{
	for (int k = 0; k < WS_MAX && i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' ||
						 p[i] == '\n'); k++)
		i++;
	return i;
}

/* Reads the value at p[i]; returns the index after it (n when it ran off).
 * Numbers: the non-negative integers our fields are; others are J_OTHER. */
static size_t json_value(const char *p, size_t i, size_t n, struct http_jval *v)
{
	size_t j = i + 1;
	*v = (struct http_jval){ .type = HTTP_J_OTHER, .complete = true };
	if (p[i] == '"') {
		while (j < n && p[j] != '"')
			j += p[j] == '\\' ? 2 : 1;
		*v = (struct http_jval){ HTTP_J_STR, j < n, p + i + 1, (j < n ? j : n) - i - 1, 0 };
		return j < n ? j + 1 : n;
	}
	if (p[i] >= '0' && p[i] <= '9') {
		while (j < n && p[j] >= '0' && p[j] <= '9')
			j++;
		v->num = http_dec(p + i, j - i);
		v->type = v->num < 0 || (j < n && memchr(".eE", p[j], 3)) ? HTTP_J_OTHER : HTTP_J_NUM;
		v->complete = j < n;
		return j;
	}
	const char *lit = p[i] == 't' ? "true" : p[i] == 'f' ? "false" : p[i] == 'n' ? "null" : NULL;
	size_t ln = lit ? strlen(lit) : 1;
	if (!lit || (n - i >= ln && memcmp(p + i, lit, ln)))
		return i + 1;
	v->type = p[i] == 't' ? HTTP_J_TRUE : p[i] == 'f' ? HTTP_J_FALSE : HTTP_J_NULL;
	v->complete = n - i >= ln;
	return v->complete ? i + ln : n;
}

size_t http_json_scan(const char *p, size_t n, unsigned mask, http_key_fn *fn, void *ctx)
{
	size_t i = 0;
	while (i < n) {
		const char *q = memchr(p + i, '"', n - i);
		if (!q)
			return n;
		size_t k = (size_t)(q - p), e = k + 1;
		while (e < n && e - k <= KEY_MAX && p[e] != '"')
			e++;
		if (e >= n)
			return k;
		if (p[e] != '"') {
			i = k + 1;
			continue;
		}
		int key = key_find(p + k + 1, e - k - 1, mask);
		size_t c = key ? skip_ws(p, e + 1, n) : e;
		if (key && c < n && p[c] == ':') {
			size_t vi = skip_ws(p, c + 1, n);
			struct http_jval v;
			if (vi >= n)
				return k;
			i = json_value(p, vi, n, &v);
			fn(ctx, key, &v);
			if (!v.complete)
				return k;
		} else if (key && c >= n) {
			return k;
		} else {
			i = e;
		}
	}
	return n;
}

void http_json_scan_body(struct http_json_carry *c, const char *p, size_t n, unsigned mask,
			 http_key_fn *fn, void *ctx)
{
	char buf[HTTP_JSON_CARRY + SCAN_SEG];
	while (n) {
		size_t seg = n < SCAN_SEG ? n : SCAN_SEG, len = c->len + seg;
		memcpy(buf, c->buf, c->len);
		memcpy(buf + c->len, p, seg);
		size_t off = http_json_scan(buf, len, mask, fn, ctx);
		size_t keep = len - off <= HTTP_JSON_CARRY ? len - off : 0;
		memcpy(c->buf, buf + off, keep);
		memset(c->buf + keep, 0, c->len > keep ? c->len - keep : 0);
		c->len = (uint16_t)keep;
		explicit_bzero(buf, len);
		p += seg;
		n -= seg;
	}
}

void http_json_carry_clear(struct http_json_carry *c)
{
	memset(c->buf, 0, c->len);
	c->len = 0;
}
