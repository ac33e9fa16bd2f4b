/* http.c - HTTP/1.1 request head parser and chunked body decoder. Strict on
 * framing (what decides where a request ends) and lenient on what does not
 * matter, because a framing ambiguity is a request-smuggling bug. */
#include "daemon/server/http.h"

#include <string.h>
#include <strings.h>

bool http_token_eq(const char *p, size_t n, const char *s)
{
	return strlen(s) == n && strncasecmp(p, s, n) == 0;
}

/* RFC 9110 tchar */
static bool is_tchar(unsigned char c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
		return true;
	return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int fail(struct http_request *req, int status, const char *why)
{
	req->error = why;
	return -status;
}

/* Finds the blank line ending the head; returns its end offset or 0. Accepts
 * bare LF line ends (RFC 9112 2.2 allows it). */
static size_t head_end(const char *buf, size_t len, size_t start)
{
	for (size_t i = start; i < len; i++) {
		if (buf[i] != '\n')
			continue;
		if (i + 1 < len && buf[i + 1] == '\n')
			return i + 2;
		if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
			return i + 3;
	}
	return 0;
}

/* Each value in a comma-separated Connection header. */
static void parse_connection(const char *v, size_t n, struct http_request *req)
{
	size_t i = 0;
	while (i < n) {
		while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
			i++;
		size_t s = i;
		while (i < n && v[i] != ',' && v[i] != ' ' && v[i] != '\t')
			i++;
		if (http_token_eq(v + s, i - s, "close"))
			req->keep_alive = false;
		else if (http_token_eq(v + s, i - s, "keep-alive"))
			req->keep_alive = true;
	}
}

/* A Content-Length value into *cl (a second one must agree); NULL, or why
 * not with the status it calls for (400, or 413 past 15 digits). */
static const char *content_length(const char *v, size_t vlen, long long *cl, int *status)
{
	if (vlen == 0 || vlen > 15) {
		*status = vlen > 15 ? 413 : 400;
		return "Content-Length is not a valid size";
	}
	long long n = 0;
	for (size_t i = 0; i < vlen; i++) {
		if (v[i] < '0' || v[i] > '9')
			return "Content-Length is not a decimal number";
		n = n * 10 + (v[i] - '0');
	}
	if (*cl >= 0 && *cl != n)
		return "conflicting Content-Length headers";
	*cl = n;
	return NULL;
}

static int parse_header(const char *name, size_t nlen, const char *v, size_t vlen,
			struct http_request *req, bool *saw_te)
{
	if (http_token_eq(name, nlen, "content-length")) {
		int status = 400;
		const char *why = content_length(v, vlen, &req->content_length, &status);
		if (why)
			return fail(req, status, why);
	} else if (http_token_eq(name, nlen, "transfer-encoding")) {
		if (*saw_te || !http_token_eq(v, vlen, "chunked"))
			return fail(req, 501, "only Transfer-Encoding: chunked is supported");
		*saw_te = true;
		req->chunked = true;
	} else if (http_token_eq(name, nlen, "connection")) {
		parse_connection(v, vlen, req);
	} else if (http_token_eq(name, nlen, "expect")) {
		if (http_token_eq(v, vlen, "100-continue"))
			req->expect_continue = true;
	} else if (http_token_eq(name, nlen, "x-request-id")) {
		req->request_id = v;
		req->request_id_len = vlen;
	} else if (http_token_eq(name, nlen, "x-kpi-prefill")) {
		req->prefill = v;
		req->prefill_len = vlen;
	} else if (http_token_eq(name, nlen, "x-kpi-model")) {
		req->model_fp = v;
		req->model_fp_len = vlen;
	}
	return 0;
}

/* The request line, method SP target SP HTTP/1.x, at buf[p..end). Returns
 * the offset of the first header line, or -status. */
static int parse_request_line(const char *buf, size_t p, size_t end, struct http_request *req)
{
	size_t i = p;
	while (i < end && is_tchar((unsigned char)buf[i]))
		i++;
	if (i == p || i - p > 16 || buf[i] != ' ')
		return fail(req, 400, "malformed request line: expected METHOD SP /path SP HTTP/1.1");
	req->method = buf + p;
	req->method_len = i - p;
	size_t t = ++i;
	while (i < end && buf[i] != ' ' && buf[i] != '\r' && buf[i] != '\n') {
		unsigned char c = (unsigned char)buf[i];
		if (c < 0x21 || c == 0x7f)
			return fail(req, 400, "control character in the request target");
		i++;
	}
	if (i == t || buf[t] != '/' || buf[i] != ' ')
		return fail(req, 400, "malformed request line: the target must be an absolute path");
	req->path = buf + t;
	req->path_len = i - t;
	const char *q = memchr(req->path, '?', req->path_len);
	if (q)
		req->path_len = (size_t)(q - req->path);
	i++;
	if (end - i < 10 || memcmp(buf + i, "HTTP/", 5) != 0)
		return fail(req, 400, "malformed request line: missing HTTP version");
	char maj = buf[i + 5], dot = buf[i + 6], min = buf[i + 7];
	if (maj < '0' || maj > '9' || dot != '.' || min < '0' || min > '9')
		return fail(req, 400, "malformed HTTP version");
	i += 8;
	if (buf[i] == '\r')
		i++;
	if (buf[i] != '\n')
		return fail(req, 400, "malformed request line: junk after the HTTP version");
	i++;
	if (maj != '1')
		return fail(req, 505, "only HTTP/1.0 and HTTP/1.1 are supported");
	req->minor = min - '0';
	req->keep_alive = req->minor >= 1;
	return (int)i;
}

/* The header fields at buf[i..end), up to the blank line. Returns 0 or -status. */
static int parse_headers(const char *buf, size_t i, size_t end, struct http_request *req)
{
	int nheaders = 0;
	bool saw_te = false;
	while (i < end) {
		size_t ls = i;
		const char *nl = memchr(buf + i, '\n', end - i);
		size_t le = (size_t)(nl - buf); /* head_end guarantees a \n */
		size_t next = le + 1;
		if (le > ls && buf[le - 1] == '\r')
			le--;
		if (le == ls)
			break; /* the blank line */
		if (buf[ls] == ' ' || buf[ls] == '\t')
			return fail(req, 400, "obsolete header line folding is not accepted");
		if (++nheaders > HTTP_MAX_HEADERS)
			return fail(req, 431, "more than 64 header fields");
		size_t c = ls;
		while (c < le && is_tchar((unsigned char)buf[c]))
			c++;
		if (c == ls || c >= le || buf[c] != ':')
			return fail(req, 400, "malformed header field: expected Name: value");
		size_t vs = c + 1, ve = le;
		while (vs < ve && (buf[vs] == ' ' || buf[vs] == '\t'))
			vs++;
		while (ve > vs && (buf[ve - 1] == ' ' || buf[ve - 1] == '\t'))
			ve--;
		for (size_t k = vs; k < ve; k++) {
			unsigned char ch = (unsigned char)buf[k];
			if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
				return fail(req, 400, "control character in a header value");
		}
		int r = parse_header(buf + ls, c - ls, buf + vs, ve - vs, req, &saw_te);
		if (r < 0)
			return r;
		i = next;
	}
	return 0;
}

int http_parse_head(const char *buf, size_t len, struct http_request *req)
{
	memset(req, 0, sizeof(*req));
	req->content_length = -1;

	/* RFC 9112 2.2: ignore empty lines before the request line */
	size_t p = 0;
	while (p < len && (buf[p] == '\r' || buf[p] == '\n'))
		p++;
	if (p > 64)
		return fail(req, 400, "too many empty lines before the request line");
	size_t end = head_end(buf, len, p);
	if (!end) {
		if (len > HTTP_MAX_HEAD)
			return fail(req, 431, "request line and headers exceed 16384 bytes");
		/* an early look at the request line catches garbage before the
		 * client sends 16 KiB of it */
		for (size_t i = p; i < len && buf[i] != '\n'; i++) {
			unsigned char c = (unsigned char)buf[i];
			if ((c < 0x20 && c != '\r' && c != '\t') || c == 0x7f)
				return fail(req, 400, "control character in the request line");
		}
		return 0;
	}
	if (end > HTTP_MAX_HEAD)
		return fail(req, 431, "request line and headers exceed 16384 bytes");
	int i = parse_request_line(buf, p, end, req);
	if (i < 0)
		return i;
	int r = parse_headers(buf, (size_t)i, end, req);
	if (r < 0)
		return r;
	if (req->chunked && req->content_length >= 0)
		return fail(req, 400, "both Content-Length and Transfer-Encoding given");
	if (req->chunked && req->minor == 0)
		return fail(req, 400, "chunked transfer coding in an HTTP/1.0 request");
	req->head_len = end;
	return (int)end;
}

/* ---- chunked bodies ------------------------------------------------------ */

enum { CH_SIZE, CH_EXT, CH_SIZE_LF, CH_DATA, CH_DATA_CR, CH_DATA_LF, CH_TRAILER, CH_DONE };

static int hexval(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c |= 0x20;
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

static ssize_t chunk_fail(struct http_chunked *st, int status, const char *why)
{
	st->error = why;
	return -status;
}

/* The size line (CH_SIZE, CH_EXT, CH_SIZE_LF) meeting byte c; have: payload
 * bytes so far. Returns 1 when c is consumed, 0 when the new state is to look
 * at c again, or -status. */
static ssize_t chunk_size_step(struct http_chunked *st, unsigned char c, size_t have,
			       size_t max_body)
{
	switch (st->state) {
	case CH_SIZE: {
		int h = hexval(c);
		if (h >= 0) {
			if (++st->digits > 15)
				return chunk_fail(st, 413, "chunk size too large");
			st->size = st->size * 16 + (unsigned)h;
			return 1;
		}
		if (st->digits == 0)
			return chunk_fail(st, 400, "chunk size is not a hexadecimal number");
		if (c == ';' || c == ' ' || c == '\t') {
			st->state = CH_EXT;
			st->line = 0;
		} else if (c == '\r') {
			st->state = CH_SIZE_LF;
		} else if (c == '\n') {
			st->state = CH_SIZE_LF;
			return 0; /* handled there without consuming twice */
		} else {
			return chunk_fail(st, 400, "bad character after the chunk size");
		}
		return 1;
	}
	case CH_EXT:
		if (c == '\n') {
			st->state = CH_SIZE_LF;
			return 0;
		}
		if (++st->line > 1024)
			return chunk_fail(st, 400, "chunk extension too long");
		if (c == '\r')
			st->state = CH_SIZE_LF;
		return 1;
	default: /* CH_SIZE_LF */
		if (c != '\n')
			return chunk_fail(st, 400, "chunk size line not ended by CRLF");
		if (have + st->size > max_body)
			return chunk_fail(st, 413, "chunked body exceeds the body size limit");
		if (st->size == 0) {
			st->state = CH_TRAILER;
			st->line = 0;
		} else {
			st->state = CH_DATA;
		}
		st->digits = 0;
		return 1;
	}
}

/* After a chunk's data (CH_DATA_CR, CH_DATA_LF) and the trailer (CH_TRAILER),
 * meeting byte c; returns as chunk_size_step. */
static ssize_t chunk_end_step(struct http_chunked *st, unsigned char c)
{
	switch (st->state) {
	case CH_DATA_CR:
		if (c == '\n') {
			st->state = CH_DATA_LF;
			return 0;
		}
		if (c != '\r')
			return chunk_fail(st, 400, "chunk data longer than its size");
		st->state = CH_DATA_LF;
		return 1;
	case CH_DATA_LF:
		if (c != '\n')
			return chunk_fail(st, 400, "chunk data not ended by CRLF");
		st->state = CH_SIZE;
		st->size = 0;
		return 1;
	default: /* CH_TRAILER: fields are read and ignored; an empty line ends the body */
		if (c == '\n') {
			if (st->line == 0) {
				st->state = CH_DONE;
				st->done = true;
			}
			st->line = 0;
		} else if (c != '\r' || st->line > 0) {
			if (++st->line > 4096)
				return chunk_fail(st, 400, "chunked trailer too long");
		}
		return 1;
	}
}

ssize_t http_chunked_feed(struct http_chunked *st, const char *in, size_t n, struct sbuf *out,
			  size_t max_body)
{
	size_t i = 0;
	while (i < n && st->state != CH_DONE) {
		if (st->state == CH_DATA) {
			size_t take = n - i;
			if (take > st->size)
				take = (size_t)st->size;
			sbuf_add(out, in + i, take);
			i += take;
			st->size -= take;
			if (st->size == 0)
				st->state = CH_DATA_CR;
			continue;
		}
		unsigned char c = (unsigned char)in[i];
		ssize_t k = st->state < CH_DATA ? chunk_size_step(st, c, out->len, max_body) :
			chunk_end_step(st, c);
		if (k < 0)
			return k;
		i += (size_t)k;
	}
	return (ssize_t)i;
}

/* ---- responses ----------------------------------------------------------- */

const char *http_status_text(int status)
{
	switch (status) {
	case 100: return "Continue";
	case 200: return "OK";
	case 400: return "Bad Request";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 409: return "Conflict";
	case 408: return "Request Timeout";
	case 413: return "Content Too Large";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 501: return "Not Implemented";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	case 505: return "HTTP Version Not Supported";
	default: return "Unknown";
	}
}

size_t http_sanitize_request_id(const char *in, size_t n, char out[HTTP_MAX_REQUEST_ID + 1])
{
	size_t o = 0;
	for (size_t i = 0; i < n && o < HTTP_MAX_REQUEST_ID; i++) {
		unsigned char c = (unsigned char)in[i];
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    c == '.' || c == '_' || c == ':' || c == '-')
			out[o++] = (char)c;
	}
	out[o] = 0;
	return o;
}

size_t http_sanitize_hostport(const char *in, size_t n, char *out, size_t outlen)
{
	out[0] = 0;
	if (n == 0 || n >= outlen)
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)in[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == ':' || c == '-' || c == '[' || c == ']'))
			return 0;
	}
	memcpy(out, in, n);
	out[n] = 0;
	return n;
}

bool http_parse_hex64(const char *in, size_t n, uint64_t *v)
{
	if (n == 0 || n > 16)
		return false;
	uint64_t x = 0;
	for (size_t i = 0; i < n; i++) {
		int h = hexval((unsigned char)in[i]);
		if (h < 0)
			return false;
		x = x << 4 | (unsigned)h;
	}
	*v = x;
	return true;
}

/* ---- response heads ------------------------------------------------------ */

bool http_next_header(const char *buf, size_t head_len, size_t *pos, const char **name,
		      size_t *nlen, const char **value, size_t *vlen)
{
	size_t i = *pos;
	if (i == 0) { /* skip the start line */
		const char *nl = memchr(buf, '\n', head_len);
		if (!nl)
			return false;
		i = (size_t)(nl - buf) + 1;
	}
	while (i < head_len) {
		const char *nl = memchr(buf + i, '\n', head_len - i);
		size_t le = nl ? (size_t)(nl - buf) : head_len, next = le + 1;
		if (le > i && buf[le - 1] == '\r')
			le--;
		if (le == i)
			return false; /* the blank line */
		const char *colon = memchr(buf + i, ':', le - i);
		if (!colon) {
			i = next;
			continue;
		}
		size_t vs = (size_t)(colon - buf) + 1, ve = le;
		while (vs < ve && (buf[vs] == ' ' || buf[vs] == '\t'))
			vs++;
		while (ve > vs && (buf[ve - 1] == ' ' || buf[ve - 1] == '\t'))
			ve--;
		*name = buf + i;
		*nlen = (size_t)(colon - buf) - i;
		*value = buf + vs;
		*vlen = ve - vs;
		*pos = next;
		return true;
	}
	return false;
}

static int resp_fail(struct http_response *r, const char *why)
{
	r->error = why;
	return -1;
}

int http_parse_response_head(const char *buf, size_t len, struct http_response *r)
{
	memset(r, 0, sizeof(*r));
	r->content_length = -1;
	size_t end = head_end(buf, len, 0);
	if (!end)
		return len > HTTP_MAX_HEAD ? resp_fail(r, "response head exceeds 16384 bytes") : 0;
	if (end > HTTP_MAX_HEAD)
		return resp_fail(r, "response head exceeds 16384 bytes");
	if (end < 13 || memcmp(buf, "HTTP/1.", 7) != 0 || buf[7] < '0' || buf[7] > '9' ||
	    buf[8] != ' ')
		return resp_fail(r, "not an HTTP/1.x status line");
	int st = 0;
	for (int i = 9; i < 12; i++) {
		if (buf[i] < '0' || buf[i] > '9')
			return resp_fail(r, "malformed status code");
		st = st * 10 + (buf[i] - '0');
	}
	if (st < 100 || st > 599 || (buf[12] != ' ' && buf[12] != '\r' && buf[12] != '\n'))
		return resp_fail(r, "malformed status code");
	r->status = st;
	r->minor = buf[7] - '0';
	r->keep_alive = r->minor >= 1;
	size_t pos = 0, nlen, vlen;
	const char *name, *v;
	bool saw_te = false;
	while (http_next_header(buf, end, &pos, &name, &nlen, &v, &vlen)) {
		if (http_token_eq(name, nlen, "content-length")) {
			int status;
			const char *why = content_length(v, vlen, &r->content_length, &status);
			if (why)
				return resp_fail(r, why);
		} else if (http_token_eq(name, nlen, "transfer-encoding")) {
			if (saw_te || !http_token_eq(v, vlen, "chunked"))
				return resp_fail(r, "only Transfer-Encoding: chunked is supported");
			saw_te = r->chunked = true;
		} else if (http_token_eq(name, nlen, "connection")) {
			struct http_request tmp = { .keep_alive = r->keep_alive };
			parse_connection(v, vlen, &tmp);
			r->keep_alive = tmp.keep_alive;
		} else if (http_token_eq(name, nlen, "content-type")) {
			r->content_type = v;
			r->content_type_len = vlen;
		} else if (http_token_eq(name, nlen, "retry-after")) {
			r->retry_after = v;
			r->retry_after_len = vlen;
		}
	}
	if (r->chunked && r->content_length >= 0)
		return resp_fail(r, "both Content-Length and Transfer-Encoding given");
	r->head_len = end;
	return (int)end;
}
