/* http.c - incremental HTTP/1.1 response parsing and SSE event splitting
 * for kpi-bench; pure functions over buffers so they run on any socket. */
#include "tools/kpi-bench/http.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- response parser ----------------------------------------------------- */

enum { CH_SIZE, CH_DATA, CH_DATA_CRLF, CH_TRAILER };

void http_resp_init(struct http_resp *r)
{
	struct buf line = r->line, body = r->body;
	memset(r, 0, sizeof(*r));
	r->line = line;
	r->body = body;
	buf_reset(&r->line);
	buf_reset(&r->body);
	r->content_length = -1;
}

void http_resp_free(struct http_resp *r)
{
	buf_free(&r->line);
	buf_free(&r->body);
}

static int resp_fail(struct http_resp *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->err, sizeof(r->err), fmt, ap);
	va_end(ap);
	return -1;
}

static char *trim(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	size_t n = strlen(s);
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
		s[--n] = '\0';
	return s;
}

static int header_line(struct http_resp *r, char *line)
{
	if (r->phase == RESP_STATUS_LINE) {
		int minor, status;
		if (sscanf(line, "HTTP/1.%d %d", &minor, &status) != 2 || status < 100 || status > 999)
			return resp_fail(r, "bad status line '%.60s'", line);
		r->status = status;
		r->conn_close = minor == 0;
		r->phase = RESP_HEADERS;
		return 0;
	}
	char *colon = strchr(line, ':');
	if (!colon)
		return resp_fail(r, "bad header line '%.60s'", line);
	*colon = '\0';
	char *name = trim(line), *val = trim(colon + 1);
	if (!strcasecmp(name, "content-length")) {
		char *end;
		long v = strtol(val, &end, 10);
		if (*end || v < 0)
			return resp_fail(r, "bad Content-Length '%.30s'", val);
		r->content_length = v;
	} else if (!strcasecmp(name, "transfer-encoding")) {
		r->chunked = strcasestr(val, "chunked") != NULL;
	} else if (!strcasecmp(name, "connection")) {
		if (strcasestr(val, "close"))
			r->conn_close = true;
		else if (strcasestr(val, "keep-alive"))
			r->conn_close = false;
	} else if (!strcasecmp(name, "content-type")) {
		r->event_stream = strcasestr(val, "text/event-stream") != NULL;
	} else if (!strcasecmp(name, "x-request-id")) {
		snprintf(r->request_id, sizeof(r->request_id), "%s", val);
	}
	return 0;
}

/* Body bytes, after transfer decoding. Returns bytes of in used. */
static int body_feed(struct http_resp *r, const char *in, size_t n, size_t *used)
{
	size_t i = 0;
	if (!r->chunked) {
		size_t take = n;
		if (r->content_length >= 0 && take > (size_t)r->content_length - r->body_seen)
			take = (size_t)r->content_length - r->body_seen;
		if (buf_append(&r->body, in, take))
			return resp_fail(r, "out of memory");
		r->body_seen += take;
		*used = take;
		if (r->content_length >= 0 && r->body_seen == (size_t)r->content_length)
			r->phase = RESP_DONE;
		return 0;
	}
	while (i < n && r->phase != RESP_DONE) {
		switch (r->chunk_state) {
		case CH_DATA: {
			size_t take = n - i < r->chunk_left ? n - i : r->chunk_left;
			if (buf_append(&r->body, in + i, take))
				return resp_fail(r, "out of memory");
			i += take;
			r->chunk_left -= take;
			if (!r->chunk_left)
				r->chunk_state = CH_DATA_CRLF;
			break;
		}
		case CH_SIZE:
		case CH_DATA_CRLF:
		case CH_TRAILER: {
			const char *nl = memchr(in + i, '\n', n - i);
			size_t take = nl ? (size_t)(nl - (in + i)) + 1 : n - i;
			if (buf_append(&r->line, in + i, take))
				return resp_fail(r, "out of memory");
			i += take;
			if (!nl) {
				if (r->line.len > 1024)
					return resp_fail(r, "chunk header longer than 1 KiB");
				break;
			}
			char *l = trim(r->line.p);
			l[strcspn(l, "\r\n")] = '\0';
			if (r->chunk_state == CH_DATA_CRLF) {
				if (*l)
					return resp_fail(r, "chunk data not followed by CRLF");
				r->chunk_state = CH_SIZE;
			} else if (r->chunk_state == CH_SIZE) {
				char *end;
				unsigned long sz = strtoul(l, &end, 16);
				if (end == l || (*end && *end != ';'))
					return resp_fail(r, "bad chunk size '%.30s'", l);
				r->chunk_left = sz;
				r->chunk_state = sz ? CH_DATA : CH_TRAILER;
			} else if (!*l) {
				r->phase = RESP_DONE;   /* empty line ends the trailers */
			}
			buf_reset(&r->line);
			break;
		}
		}
	}
	*used = i;
	return 0;
}

int http_resp_feed(struct http_resp *r, const char *data, size_t n)
{
	size_t i = 0;
	while (i < n && r->phase != RESP_DONE) {
		if (r->phase == RESP_BODY) {
			size_t used = 0;
			if (body_feed(r, data + i, n - i, &used))
				return -1;
			i += used;
			continue;
		}
		const char *nl = memchr(data + i, '\n', n - i);
		size_t take = nl ? (size_t)(nl - (data + i)) + 1 : n - i;
		if (buf_append(&r->line, data + i, take))
			return resp_fail(r, "out of memory");
		i += take;
		if (!nl) {
			if (r->line.len > 16384)
				return resp_fail(r, "response header line longer than 16 KiB");
			continue;
		}
		char *l = r->line.p;
		l[strcspn(l, "\r\n")] = '\0';
		if (!*l && r->phase == RESP_HEADERS) {
			/* end of headers: 1xx responses carry no body, skip them */
			if (r->status < 200) {
				r->phase = RESP_STATUS_LINE;
			} else if (r->status == 204 || r->status == 304 ||
				   (!r->chunked && r->content_length == 0)) {
				r->phase = RESP_DONE;
			} else {
				r->phase = RESP_BODY;
				if (!r->chunked && r->content_length < 0)
					r->conn_close = true;   /* body runs to EOF */
			}
		} else if (*l || r->phase != RESP_STATUS_LINE) {
			if (header_line(r, l))
				return -1;
		}
		buf_reset(&r->line);
	}
	return r->phase == RESP_DONE;
}

int http_resp_eof(struct http_resp *r)
{
	if (r->phase == RESP_DONE)
		return 1;
	if (r->phase == RESP_BODY && !r->chunked && r->content_length < 0) {
		r->phase = RESP_DONE;
		return 1;
	}
	if (r->phase == RESP_STATUS_LINE && !r->status)
		return resp_fail(r, "connection closed before any response");
	return resp_fail(r, "connection closed mid-response");
}

/* ---- SSE ----------------------------------------------------------------- */

int sse_next(struct buf *b, struct buf *out)
{
	for (;;) {
		const char *s = b->p + b->off, *end = b->p + b->len;
		/* an event ends at a blank line: "\n\n" or "\r\n\r\n" */
		const char *stop = NULL;
		size_t stop_len = 0;
		for (const char *p = s; p < end; p++) {
			if (*p != '\n')
				continue;
			const char *q = p + 1;
			if (q < end && *q == '\r')
				q++;
			if (q < end && *q == '\n') {
				stop = p;
				stop_len = (size_t)(q + 1 - p);
				break;
			}
		}
		if (!stop || b->len == b->off)
			return 0;

		buf_reset(out);
		bool any = false;
		for (const char *ln = s; ln < stop + 1; ) {
			const char *nl = memchr(ln, '\n', (size_t)(stop + 1 - ln));
			size_t len = (size_t)(nl - ln);
			if (len && ln[len - 1] == '\r')
				len--;
			if (len >= 5 && !memcmp(ln, "data:", 5)) {
				const char *v = ln + 5;
				size_t vl = len - 5;
				if (vl && *v == ' ')
					v++, vl--;
				if (any)
					buf_append(out, "\n", 1);
				buf_append(out, v, vl);
				any = true;
			}
			ln = nl + 1;
		}
		buf_consume(b, (size_t)(stop + stop_len - s));
		if (any)
			return 1;
	}
}
